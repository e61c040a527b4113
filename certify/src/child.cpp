#include "mla/certify/child.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "mla/certify/wire.hpp"
#include "mla/core/error.hpp"
#include "mla/core/sha256.hpp"
#include "mla/faults/faults.hpp"
#include "mla/plugin/host.hpp"
#include "mla/registry/registry.hpp"

namespace mla::certify {
namespace {

using Clock = std::chrono::steady_clock;

// Bitwise, so that NaN payloads and signed zeros count too: run() must be repeatable exactly.
std::optional<std::string> first_difference(const std::vector<double>& a, const std::vector<double>& b,
                                            const char* what) {
  if (a.size() != b.size()) {
    return fmt::format("{} has {} elements on one run and {} on another", what, a.size(), b.size());
  }
  int64_t n = 0, first = -1;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(double)) != 0 && n++ == 0) first = static_cast<int64_t>(i);
  }
  if (n == 0) return std::nullopt;
  return fmt::format("{} differs between repeated runs at {} elements, first flat index {} ({} vs {})", what, n, first,
                     a[first], b[first]);
}

template <class T>
std::string digest(std::span<const T> v) {
  return sha256_hex({reinterpret_cast<const uint8_t*>(v.data()), v.size_bytes()});
}

std::vector<std::string> input_digests(const AttnInputs& in) {
  return {digest(in.q), digest(in.kv_cache), digest(in.block_table), digest(in.cache_seqlens), digest(in.indices)};
}
const char* const kInputNames[] = {"q", "kv_cache", "block_table", "cache_seqlens", "indices"};

}  // namespace

RunResult execute(const AttentionImpl& impl, const AttnInputs& in, int repeats, bool enforce_caps) {
  RunResult r;
  try {
    const auto before = input_digests(in);
    if (enforce_caps) {
      if (auto no = impl.check(in.shape)) {
        r.status = RunResult::Status::unsupported;
        r.message = *no;
        return r;
      }
    }
    const auto cost = impl.cost(in);
    r.bytes = cost.bytes;
    r.flops = cost.flops;
    std::unique_ptr<PreparedAttention> prepared;
    try {
      prepared = impl.prepare(in);
    } catch (const UnsupportedError& e) {
      // check() accepted the shape but prepare() refused it: not a wrong answer, but said so,
      // since check() should have known (no silent routing: docs/field.md, "Bugs", 9).
      r.status = RunResult::Status::unsupported;
      r.message = enforce_caps ? fmt::format("prepare refused a shape check() accepted: {}", e.what())
                               : fmt::format("prepare refused it: {}", e.what());
      return r;
    }
    double best = std::numeric_limits<double>::infinity();
    for (int rep = 0; rep < std::max(1, repeats); ++rep) {
      const auto t0 = Clock::now();
      try {
        prepared->run();
        prepared->synchronize();
      } catch (const UnsupportedError& e) {
        r.status = RunResult::Status::unsupported;
        r.message = fmt::format("refused at run time: {}", e.what());
        return r;
      }
      best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
      auto res = prepared->results();
      if (rep == 0) {
        r.outputs = std::move(res);
      } else if (r.reasons.empty()) {
        // State leaking from one call into the next (docs/field.md, "Bugs", 12).
        if (auto d = first_difference(r.outputs.out, res.out, "out")) r.reasons.push_back(*d);
        if (auto d = first_difference(r.outputs.lse, res.lse, "lse")) r.reasons.push_back(*d);
      }
    }
    r.run_seconds = best;
    if (const auto* audited = dynamic_cast<const plugin::AuditedCall*>(prepared.get())) {
      for (const auto& v : audited->violations()) r.reasons.push_back(v);
    }
    // The caller's buffers are const to the kernel; a kernel that writes them anyway (through
    // a cast, or a device copy back to the wrong place) is caught here.
    const auto after = input_digests(in);
    for (std::size_t i = 0; i < after.size(); ++i) {
      if (after[i] != before[i]) r.reasons.push_back(fmt::format("input {} changed by the kernel", kInputNames[i]));
    }
    r.status = RunResult::Status::ran;
  } catch (const std::exception& e) {
    r.status = RunResult::Status::error;
    r.message = fmt::format("exception: {}", e.what());
    r.reasons.clear();
  } catch (...) {
    r.status = RunResult::Status::error;
    r.message = "exception of unknown type";
    r.reasons.clear();
  }
  return r;
}

int child_run(const KernelRef& kernel, const std::filesystem::path& inputs, const std::filesystem::path& result,
              int repeats, bool enforce_caps) {
  // Whatever goes wrong from here on (short of a crash) is the kernel's result: it is written
  // to the result file for the parent to record.
  RunResult r;
  try {
    const AttnBuffers c = decode_attention_inputs(wire::read(inputs, kAttentionInputs));
    std::unique_ptr<AttentionImpl> owned;
    const AttentionImpl* impl = nullptr;
    if (kernel.plugin) {
      owned = plugin::make_plugin_kernel(plugin::Library::open(*kernel.plugin), enforce_caps);
      impl = owned.get();
    } else if (kernel.fault) {
      owned = faults::make(*kernel.fault);
      impl = owned.get();
    } else if (kernel.builtin) {
      register_builtin_kernels();
      impl = Registry::instance().find(*kernel.builtin);
      if (!impl) throw Error(fmt::format("no registered kernel '{}'", *kernel.builtin));
    } else {
      throw Error("no kernel given");
    }
    r = execute(*impl, c.view(), repeats, enforce_caps);
  } catch (const std::exception& e) {
    r = RunResult{};
    r.status = RunResult::Status::error;
    r.message = fmt::format("the child could not run the kernel: {}", e.what());
  }
  wire::write(result, encode(r));
  return 0;
}

int child_append(const std::filesystem::path& plugin_path, const std::filesystem::path& inputs,
                 const std::filesystem::path& result, int repeats) {
  AppendRun r;
  try {
    const auto in = decode_append_inputs(wire::read(inputs, kAppendInputs));
    const auto lib = plugin::Library::open(plugin_path);
    if (auto why = lib->unavailable()) throw Error(*why);
    double best = std::numeric_limits<double>::infinity();
    for (int rep = 0; rep < std::max(2, repeats); ++rep) {
      const auto t0 = Clock::now();
      auto call = plugin::call_append(*lib, in);
      best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
      for (auto& v : call.violations) {
        if (std::find(r.reasons.begin(), r.reasons.end(), v) == r.reasons.end()) r.reasons.push_back(std::move(v));
      }
      if (rep == 0) {
        r.rc = call.rc;
        r.message = call.message;
        r.kv_cache = std::move(call.kv_cache);
        continue;
      }
      // A call must not depend on what an earlier one did (docs/field.md, "Bugs", 12).
      if (call.rc != r.rc) {
        r.reasons.push_back(fmt::format("append returned {} on call 1 and {} on call {}", plugin::describe_rc(r.rc),
                                        plugin::describe_rc(call.rc), rep + 1));
      } else if (call.kv_cache != r.kv_cache) {
        std::size_t first = 0;
        while (first < r.kv_cache.size() && first < call.kv_cache.size() && r.kv_cache[first] == call.kv_cache[first]) ++first;
        r.reasons.push_back(fmt::format("the cache differs between repeated calls (call 1 vs {}), first at byte {}", rep + 1, first));
      }
    }
    r.ran = true;
    r.run_seconds = best;
  } catch (const std::exception& e) {
    r = AppendRun{};
    r.message = fmt::format("the child could not call the append: {}", e.what());
  }
  wire::write(result, encode(r));
  return 0;
}

int child_describe(const std::filesystem::path& plugin_path, const std::filesystem::path& result) {
  const auto lib = plugin::Library::open(plugin_path);
  PluginDescription d;
  d.info = lib->info();
  d.version = lib->version();
  d.unavailable = lib->unavailable();
  d.abi_version = lib->descriptor().abi_version;
  d.abi_minor = lib->abi_minor();
  d.device_memory = lib->device_memory();
  d.append_formats = lib->append_formats();
  d.append_scale_fmts = lib->append_scale_fmts();
  d.append_fp8_recipes = lib->append_fp8_recipes();
  d.can_implement = lib->has_can_implement();
  wire::write(result, encode(d));
  return 0;
}

int child_claims(const std::filesystem::path& plugin_path, const std::filesystem::path& query,
                 const std::filesystem::path& result) {
  const auto questions = decode_claim_query(wire::read(query, kClaimQuery));
  const auto lib = plugin::Library::open(plugin_path);
  std::vector<ClaimAnswer> answers;
  for (const auto& q : questions) {
    ClaimAnswer a;
    try {
      const auto c = lib->can_implement(q.shape, q.scale_fmt);
      switch (c.answer) {
        case plugin::Library::Claim::Answer::ok: a.kind = ClaimAnswer::Kind::ok; break;
        case plugin::Library::Claim::Answer::unsupported:
          a.kind = ClaimAnswer::Kind::unsupported;
          a.reason = c.reason;
          break;
        case plugin::Library::Claim::Answer::error:
          a.kind = ClaimAnswer::Kind::error;
          a.reason = fmt::format("can_implement returned {}: {}", plugin::describe_rc(c.rc), c.reason);
          break;
      }
    } catch (const std::exception& e) {
      a.kind = ClaimAnswer::Kind::error;
      a.reason = fmt::format("can_implement: {}", e.what());
    }
    answers.push_back(std::move(a));
  }
  wire::write(result, encode(answers));
  return 0;
}

}  // namespace mla::certify
