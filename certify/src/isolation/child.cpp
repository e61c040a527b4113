#include "mla/certify/child.hpp"

#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <new>
#include <system_error>
#include <limits>

#include <fmt/format.h>

#include "isolation/arena.hpp"
#include "isolation/entry_calls.hpp"
#include "mla/certify/wire.hpp"
#include "mla/core/error.hpp"
#include "mla/core/sha256.hpp"
#include "mla/faults/faults.hpp"
#include "mla/plugin/host.hpp"
#include "mla/registry/registry.hpp"

namespace mla::certify {
namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

template <class T>
std::string digest(std::span<const T> v) {
  return sha256_hex({reinterpret_cast<const uint8_t*>(v.data()), v.size_bytes()});
}

std::vector<std::string> input_digests(const AttnInputs& in) {
  return {digest(in.q), digest(in.kv_cache), digest(in.block_table), digest(in.cache_seqlens), digest(in.indices)};
}
const char* const kInputNames[] = {"q", "kv_cache", "block_table", "cache_seqlens", "indices"};

}  // namespace

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

namespace {

ArenaControl* g_control = nullptr;

// A crash is recorded (signal, address) for the parent to place in its own layout, then the
// default action runs: the parent sees the signal as before. What a kernel writes here can only
// change the wording of an ERROR.
void on_fault(int sig, siginfo_t* info, void*) {
  if (g_control) {
    g_control->fault_signal = sig;
    g_control->fault_addr = reinterpret_cast<uint64_t>(info ? info->si_addr : nullptr);
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

void install_fault_handlers() {
  static std::vector<uint8_t> stack(64 * 1024);
  stack_t ss{};
  ss.ss_sp = stack.data();
  ss.ss_size = stack.size();
  sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE}) sigaction(sig, &sa, nullptr);
}

void bounded_copy(char* dst, const std::string& src) {
  const std::size_t n = std::min(src.size(), kArenaMessage - 1);
  std::memcpy(dst, src.data(), n);
  dst[n] = '\0';
}

// The kernel behind a call, built once per child.
struct Callee {
  std::shared_ptr<plugin::Library> lib;       // plug-ins: called through the C ABI directly
  std::unique_ptr<AttentionImpl> owned;
  const AttentionImpl* impl = nullptr;        // built-in and fault kernels
};

// Maps the parent's shared buffers (the memfd inherited under the number the plan names) with
// the guard pages inaccessible, and records where, for a fault address to be placed.
uint8_t* map_arena(const wire::Message& plan, const ArenaLayout& l) {
  const int arena_fd = plan.fields().at("arena_fd").get<int>();
  struct stat st {};
  if (fstat(arena_fd, &st) != 0 || static_cast<std::size_t>(st.st_size) != l.size) {
    throw Error("the shared buffers are missing or not of the planned size");
  }
  void* m = mmap(nullptr, l.size, PROT_READ | PROT_WRITE, MAP_SHARED, arena_fd, 0);
  if (m == MAP_FAILED) {
    // Out of address space or memory (ulimit -v): the host's failure, not the kernel's.
    throw std::system_error(errno, std::generic_category(), "cannot map the shared buffers");
  }
  close(arena_fd);
  auto* base = static_cast<uint8_t*>(m);
  auto* control = reinterpret_cast<ArenaControl*>(base);
  control->child_base = reinterpret_cast<uint64_t>(base);
  g_control = control;
  install_fault_handlers();
  // Guard pages inaccessible: a read or write past a buffer faults at the first byte past an
  // input, and past an output's canary. Inputs stay writable on purpose: a kernel that writes
  // them is then caught by the parent's comparison and named (FAIL "input q changed by call 1")
  // instead of crashing anonymously.
  for (const auto& r : l.regions) {
    mprotect(base + r.start, l.page, PROT_NONE);
    mprotect(base + r.start + l.page + r.body, l.page, PROT_NONE);
  }
  return base;
}

// The scalars of an entry's call from its plan's `args` (entry_plans.hpp),
// its arrays empty: what the call's child fills in from the arena, and what can_implement sees.
PrefillInputs prefill_call(const json& a) {
  PrefillInputs in;
  in.shape = prefill_shape_from_json(a.at("shape"));
  in.softmax_scale = a.at("softmax_scale").get<double>();
  return in;
}
MergeInputs merge_call(const json& a) {
  MergeInputs in;
  in.shape.tokens = a.at("tokens").get<int64_t>();
  in.shape.heads = a.at("heads").get<int>();
  in.shape.head_dim = a.at("head_dim").get<int>();
  in.shape.dtype = state_dtype_from_string(a.at("dtype").get<std::string>());
  return in;
}
TopkInputs topk_call(const json& a) {
  TopkInputs in;
  in.shape.rows = a.at("rows").get<int64_t>();
  in.shape.n = a.at("n").get<int64_t>();
  in.shape.k = a.at("k").get<int>();
  return in;
}
IndexerAppendShape indexer_append_call(const json& a) {
  IndexerAppendShape shape;
  shape.num_tokens = a.at("num_tokens").get<int64_t>();
  shape.num_blocks = a.at("num_blocks").get<int64_t>();
  shape.block_size = a.at("block_size").get<int64_t>();
  shape.scale_fmt = scale_fmt_from_string(a.at("scale_fmt").get<std::string>());
  return shape;
}
SparsePrefillInputs sparse_prefill_call(const json& a) {
  SparsePrefillInputs in;
  const auto& sh = a.at("shape");
  in.shape.s_q = sh.at("s_q").get<int64_t>();
  in.shape.s_kv = sh.at("s_kv").get<int64_t>();
  in.shape.heads = sh.at("heads").get<int>();
  in.shape.d_qk = sh.at("d_qk").get<int>();
  in.shape.topk = sh.at("topk").get<int>();
  in.shape.sink = sh.at("sink").get<bool>();
  in.shape.topk_length = sh.at("topk_length").get<bool>();
  in.sm_scale = a.at("sm_scale").get<double>();
  return in;
}

// The calls of an entry-calls plan (isolation/entry_calls.hpp): the plug-in's append or prefill,
// each call on its own buffers, stopping after each so the parent can audit it. Any return code
// is a returned call (ArenaState::ok, the code in rc): the parent judges it.
int child_entry_calls(const KernelRef& kernel, const wire::Message& plan) {
  const ArenaLayout l = ArenaLayout::from_json(plan.fields().at("layout"));
  uint8_t* base = map_arena(plan, l);
  auto* control = reinterpret_cast<ArenaControl*>(base);
  const auto& f = plan.fields();
  const auto& a = f.at("args");
  const std::string entry = f.at("entry").get<std::string>();
  const auto& inputs = f.at("inputs");
  auto input = [&]<class T>(const char* name, T*) {
    const auto& r = l.regions.at(inputs.at(name).get<std::size_t>());
    return std::span<const T>(reinterpret_cast<const T*>(base + r.data), r.bytes / sizeof(T));
  };
  auto own = [&](const ArenaRegion& r) { return std::span<uint8_t>(base + r.data, r.bytes); };
  // Makes call `c` on its buffers `mine`: the plug-in's return code, its words in `err`.
  std::function<int32_t(const std::vector<ArenaRegion>&, char*, std::size_t, std::vector<std::string>*)> make;
  std::shared_ptr<plugin::Library> lib;
  try {
    charge_simulated_context(fmt::format("child {}", entry).c_str());
    if (!kernel.plugin) throw Error(fmt::format("{} calls are a plug-in's entry point: no plug-in given", entry));
    lib = plugin::Library::open(*kernel.plugin);
    if (auto why = lib->unavailable()) throw Error(*why);
    if (entry == kEntryAppend) {
      plugin::AppendCallShape shape;
      shape.num_tokens = a.at("num_tokens");
      shape.batch = a.at("batch");
      shape.max_blocks = a.at("max_blocks");
      shape.page_size = a.at("page_size");
      shape.num_blocks = a.at("num_blocks");
      shape.max_seq_len = a.at("max_seq_len");
      shape.cache_format = a.at("cache_format");
      shape.scale_fmt = a.at("scale_fmt");
      shape.fp8_recipe = a.at("fp8_recipe");
      shape.eps = a.at("eps");
      plugin::AppendCallBuffers b;
      b.latent = input("latent", static_cast<uint16_t*>(nullptr));
      b.k_pe = input("k_pe", static_cast<uint16_t*>(nullptr));
      b.kv_norm_weight = input("kv_norm_weight", static_cast<uint16_t*>(nullptr));
      b.inv_freq = input("inv_freq", static_cast<double*>(nullptr));
      b.seq_ids = input("seq_ids", static_cast<int32_t*>(nullptr));
      b.positions = input("positions", static_cast<int32_t*>(nullptr));
      b.block_table = input("block_table", static_cast<int32_t*>(nullptr));
      make = [&, shape, b](const std::vector<ArenaRegion>& mine, char* err, std::size_t n,
                           std::vector<std::string>* device) mutable {
        b.kv_cache = own(mine.at(0));
        return plugin::call_append(*lib, shape, b, err, n, device);
      };
    } else if (entry == kEntryPrefill) {
      PrefillInputs in = prefill_call(a);
      in.q = input("q", static_cast<uint16_t*>(nullptr));
      in.k = input("k", static_cast<uint16_t*>(nullptr));
      in.v = input("v", static_cast<uint16_t*>(nullptr));
      in.cu_seqlens_q = input("cu_seqlens_q", static_cast<int32_t*>(nullptr));
      in.cu_seqlens_k = input("cu_seqlens_k", static_cast<int32_t*>(nullptr));
      make = [&, in](const std::vector<ArenaRegion>& mine, char* err, std::size_t n, std::vector<std::string>* device) {
        const auto out = own(mine.at(0)), lse = own(mine.at(1));
        return plugin::call_prefill(*lib, in, out.data(), out.size(), lse.data(), lse.size(), err, n, device);
      };
    } else if (entry == kEntryMerge) {
      MergeInputs in = merge_call(a);
      in.out_a = input("out_a", static_cast<uint8_t*>(nullptr));
      in.out_b = input("out_b", static_cast<uint8_t*>(nullptr));
      in.lse_a = input("lse_a", static_cast<float*>(nullptr));
      in.lse_b = input("lse_b", static_cast<float*>(nullptr));
      make = [&, in](const std::vector<ArenaRegion>& mine, char* err, std::size_t n, std::vector<std::string>* device) {
        const auto out = own(mine.at(0)), lse = own(mine.at(1));
        return plugin::call_merge(*lib, in, out.data(), out.size(), lse.data(), lse.size(), err, n, device);
      };
    } else if (entry == kEntryTopk) {
      TopkInputs in = topk_call(a);
      in.logits = input("logits", static_cast<float*>(nullptr));
      in.starts = input("starts", static_cast<int32_t*>(nullptr));
      in.ends = input("ends", static_cast<int32_t*>(nullptr));
      make = [&, in](const std::vector<ArenaRegion>& mine, char* err, std::size_t n, std::vector<std::string>* device) {
        const auto idx = own(mine.at(0));
        return plugin::call_topk(*lib, in, reinterpret_cast<int32_t*>(idx.data()), idx.size(), err, n, device);
      };
    } else if (entry == kEntryIndexerLogits) {
      IndexerLogitsInputs in;
      in.shape = indexer_logits_shape_from_json(a.at("shape"));
      // Only the call's layout's arrays are in the plan; the other layout's stay empty.
      const auto maybe = [&]<class T>(const char* name, T* tag) {
        return inputs.contains(name) ? input(name, tag) : std::span<const T>();
      };
      in.q = maybe("q", static_cast<uint8_t*>(nullptr));
      in.weights = maybe("weights", static_cast<float*>(nullptr));
      in.cache = maybe("kv_cache", static_cast<uint8_t*>(nullptr));
      in.context_lens = maybe("context_lens", static_cast<int32_t*>(nullptr));
      in.block_table = maybe("block_table", static_cast<int32_t*>(nullptr));
      in.k_codes = maybe("k_codes", static_cast<uint8_t*>(nullptr));
      in.k_scales = maybe("k_scales", static_cast<float*>(nullptr));
      in.ks = maybe("ks", static_cast<int32_t*>(nullptr));
      in.ke = maybe("ke", static_cast<int32_t*>(nullptr));
      make = [&, in](const std::vector<ArenaRegion>& mine, char* err, std::size_t n, std::vector<std::string>* device) {
        const auto out = own(mine.at(0));
        return plugin::call_indexer_logits(*lib, in, reinterpret_cast<float*>(out.data()), out.size(), err, n, device);
      };
    } else if (entry == kEntryIndexerAppend) {
      const IndexerAppendShape shape = indexer_append_call(a);
      const auto keys = input("keys", static_cast<uint16_t*>(nullptr));
      const auto slots = input("slot_mapping", static_cast<int64_t*>(nullptr));
      make = [&, shape, keys, slots](const std::vector<ArenaRegion>& mine, char* err, std::size_t n,
                                     std::vector<std::string>* device) {
        return plugin::call_indexer_append(*lib, shape, keys, slots, own(mine.at(0)), err, n, device);
      };
    } else if (entry == kEntrySparsePrefill) {
      SparsePrefillInputs in = sparse_prefill_call(a);
      in.q = input("q", static_cast<uint16_t*>(nullptr));
      in.kv = input("kv", static_cast<uint16_t*>(nullptr));
      in.indices = input("indices", static_cast<int32_t*>(nullptr));
      if (in.shape.sink) in.attn_sink = input("attn_sink", static_cast<float*>(nullptr));
      if (in.shape.topk_length) in.topk_length = input("topk_length", static_cast<int32_t*>(nullptr));
      make = [&, in](const std::vector<ArenaRegion>& mine, char* err, std::size_t n, std::vector<std::string>* device) {
        const auto out = own(mine.at(0)), mx = own(mine.at(1)), lse = own(mine.at(2));
        return plugin::call_sparse_prefill(*lib, in, out.data(), out.size(), reinterpret_cast<float*>(mx.data()), mx.size(),
                                           reinterpret_cast<float*>(lse.data()), lse.size(), err, n, device);
      };
    } else {
      throw Error(fmt::format("the plan names entry '{}', which this child does not know", entry));
    }
  } catch (const std::bad_alloc&) {
    throw;  // the machine's memory
  } catch (const std::exception& e) {
    control->setup_state = ArenaState::error;
    bounded_copy(control->setup_message, fmt::format("the child could not call the {}: {}", entry, e.what()));
    return 0;
  }
  const auto& calls = f.at("calls");
  const std::size_t n_calls = std::min<std::size_t>({calls.size(), f.at("make_calls").get<std::size_t>(),
                                                     static_cast<std::size_t>(kArenaMaxCalls)});
  for (std::size_t c = 0; c < n_calls; ++c) {
    std::vector<ArenaRegion> mine;
    for (const auto& r : calls.at(c)) mine.push_back(l.regions.at(r.get<std::size_t>()));
    ArenaCall& rec = control->calls[c];
    const auto t0 = Clock::now();
    try {
      char err[kArenaMessage] = {};
      std::vector<std::string> device;
      rec.rc = make(mine, err, sizeof err, &device);
      rec.state = ArenaState::ok;
      // The device-side audit's first finding, else the plug-in's words.
      bounded_copy(rec.message, device.empty() ? std::string(err) : "device audit: " + device.front());
    } catch (const std::bad_alloc&) {
      throw;
    } catch (const std::exception& e) {
      rec.state = ArenaState::error;
      bounded_copy(rec.message, fmt::format("the child could not call the {}: {}", entry, e.what()));
    }
    rec.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    raise(SIGSTOP);
    if (rec.state != ArenaState::ok) break;
  }
  return 0;
}

}  // namespace

int child_call(const KernelRef& kernel, const std::filesystem::path& plan_file, bool enforce_caps) {
  // The layout comes from the parent's plan; the memory from the memfd it handed over.
  const auto plan = wire::read(plan_file, kAttentionCalls, kEntryCalls);
  if (plan.kind() == kEntryCalls) return child_entry_calls(kernel, plan);
  const ArenaLayout l = ArenaLayout::from_json(plan.fields().at("layout"));
  uint8_t* base = map_arena(plan, l);
  auto* control = reinterpret_cast<ArenaControl*>(base);
  auto span_of = [&](int region) {
    const auto& r = l.regions[static_cast<std::size_t>(region)];
    return std::span<const uint8_t>(base + r.data, r.bytes);
  };
  std::vector<AttnInputs> inputs;
  for (const auto& in : l.inputs) {
    AttnInputs a;
    a.shape = in.shape;
    a.softmax_scale = in.softmax_scale;
    auto q = span_of(in.q), kv = span_of(in.kv_cache), bt = span_of(in.block_table), sl = span_of(in.cache_seqlens),
         idx = span_of(in.indices);
    a.q = {reinterpret_cast<const uint16_t*>(q.data()), q.size() / 2};
    a.kv_cache = kv;
    a.block_table = {reinterpret_cast<const int32_t*>(bt.data()), bt.size() / 4};
    a.cache_seqlens = {reinterpret_cast<const int32_t*>(sl.data()), sl.size() / 4};
    a.indices = {reinterpret_cast<const int32_t*>(idx.data()), idx.size() / 4};
    inputs.push_back(a);
  }

  Callee callee;
  try {
    charge_simulated_context("child call");
    if (kernel.plugin) {
      callee.lib = plugin::Library::open(*kernel.plugin);
      // The plug-in gets what every implementation gets: inputs the contract calls well formed.
      validate_attention_inputs(inputs[0], callee.lib->info().name);
      if (enforce_caps) {
        if (auto no = check_capabilities(callee.lib->info().caps, inputs[0].shape)) {
          control->setup_state = ArenaState::unsupported;
          bounded_copy(control->setup_message, *no);
          return 0;
        }
      }
    } else {
      if (kernel.fault) {
        callee.owned = faults::make(*kernel.fault);
        callee.impl = callee.owned.get();
      } else if (kernel.builtin) {
        register_builtin_kernels();
        callee.impl = Registry::instance().find(*kernel.builtin);
        if (!callee.impl) throw Error(fmt::format("no registered kernel '{}'", *kernel.builtin));
      } else {
        throw Error("no kernel given");
      }
      if (enforce_caps) {
        if (auto no = callee.impl->check(inputs[0].shape)) {
          control->setup_state = ArenaState::unsupported;
          bounded_copy(control->setup_message, *no);
          return 0;
        }
      }
    }
  } catch (const std::bad_alloc&) {
    throw;  // the machine's memory, as below
  } catch (const std::exception& e) {
    control->setup_state = ArenaState::error;
    bounded_copy(control->setup_message, fmt::format("the child could not load the kernel: {}", e.what()));
    return 0;
  }

  std::vector<std::unique_ptr<PreparedAttention>> prepared(inputs.size());
  const std::size_t make = std::min(l.calls.size(), plan.fields().at("make_calls").get<std::size_t>());
  for (std::size_t c = 0; c < make; ++c) {
    const auto& call = l.calls[c];
    ArenaCall& rec = control->calls[c];
    const AttnInputs& in = inputs[static_cast<std::size_t>(call.inputs)];
    const auto& out = l.regions[static_cast<std::size_t>(call.out)];
    const auto& lse = l.regions[static_cast<std::size_t>(call.lse)];
    const auto t0 = Clock::now();
    try {
      if (callee.lib) {
        char err[kArenaMessage] = {};
        std::vector<std::string> device;
        rec.rc = plugin::call_decode(*callee.lib, in, base + out.data, out.bytes, base + lse.data, lse.bytes, err,
                                     sizeof err, &device);
        if (rec.rc == MLA_PLUGIN_OK) {
          rec.state = ArenaState::ok;
          bounded_copy(rec.message, device.empty() ? std::string() : device.front());
        } else {
          rec.state = rec.rc == MLA_PLUGIN_UNSUPPORTED ? ArenaState::unsupported : ArenaState::error;
          bounded_copy(rec.message, err);
        }
      } else {
        auto& p = prepared[static_cast<std::size_t>(call.inputs)];
        if (!p) p = callee.impl->prepare(in);
        p->run();
        p->synchronize();
        const auto res = p->results();
        if (res.out.size() * 8 != out.bytes || res.lse.size() * 8 != lse.bytes) {
          throw Error(fmt::format("results() returned {} out and {} lse values, the shape has {} and {}", res.out.size(),
                                  res.lse.size(), out.bytes / 8, lse.bytes / 8));
        }
        std::memcpy(base + out.data, res.out.data(), out.bytes);
        std::memcpy(base + lse.data, res.lse.data(), lse.bytes);
        rec.state = ArenaState::ok;
      }
    } catch (const UnsupportedError& e) {
      rec.state = ArenaState::unsupported;
      bounded_copy(rec.message, e.what());
    } catch (const std::bad_alloc&) {
      // Only this process's own C++ allocates with new here (a C plug-in reports its failures
      // by return code): out of memory under this run's limit (ulimit -v) is the machine's, so
      // the child ends with the host-failure status (a HOST_ERROR that --resume reruns), never
      // an ERROR of a registered kernel.
      throw;
    } catch (const std::exception& e) {
      rec.state = ArenaState::error;
      bounded_copy(rec.message, fmt::format("exception: {}", e.what()));
    }
    rec.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    // Stop so the parent can take this call's outputs before anything else runs in here.
    if (call.stop) raise(SIGSTOP);
    if (rec.state != ArenaState::ok) break;
  }
  return 0;
}

int child_describe(const std::filesystem::path& plugin_path, const std::filesystem::path& result) {
  charge_simulated_context("child describe");
  const auto lib = plugin::Library::open(plugin_path);
  PluginDescription d;
  d.info = lib->info();
  d.version = lib->version();
  d.unavailable = lib->unavailable();
  d.abi_version = lib->descriptor().abi_version;
  d.abi_minor = lib->abi_minor();
  d.device_memory = lib->device_memory();
  d.decodes = lib->decodes();
  d.prefill = lib->prefill_info();
  d.merge = lib->merge_info();
  d.topk = lib->topk_info();
  d.indexer_logits = lib->indexer_logits_info();
  d.indexer_append = lib->indexer_append_info();
  d.sparse_prefill = lib->sparse_prefill_info();
  d.append_formats = lib->append_formats();
  d.append_scale_fmts = lib->append_scale_fmts();
  d.append_fp8_recipes = lib->append_fp8_recipes();
  d.can_implement = lib->has_can_implement();
  d.entry_can_implement = lib->entries_with_can_implement();
  wire::write(result, encode(d));
  return 0;
}

namespace {
// An entry's can_implement (1.6) on the call a question describes: its scalars, and the lengths
// it carries (the arrays the predicate may read).
plugin::Library::Claim entry_claim(const plugin::Library& lib, const ClaimQuestion& q) {
  const auto& c = q.call;
  if (q.entry == kEntryPrefill) {
    auto in = prefill_call(c);
    const auto cu_q = c.at("cu_seqlens_q").get<std::vector<int32_t>>(), cu_k = c.at("cu_seqlens_k").get<std::vector<int32_t>>();
    in.cu_seqlens_q = cu_q, in.cu_seqlens_k = cu_k;
    return lib.can_implement(in);
  }
  if (q.entry == kEntryMerge) return lib.can_implement(merge_call(c));
  if (q.entry == kEntryTopk) {
    auto in = topk_call(c);
    const auto starts = c.at("starts").get<std::vector<int32_t>>(), ends = c.at("ends").get<std::vector<int32_t>>();
    in.starts = starts, in.ends = ends;
    return lib.can_implement(in);
  }
  if (q.entry == kEntryIndexerLogits) {
    IndexerLogitsInputs in;
    in.shape = indexer_logits_shape_from_json(c.at("shape"));
    const auto lens = c.value("context_lens", std::vector<int32_t>{}), ks = c.value("ks", std::vector<int32_t>{}),
               ke = c.value("ke", std::vector<int32_t>{});
    in.context_lens = lens, in.ks = ks, in.ke = ke;
    return lib.can_implement(in);
  }
  if (q.entry == kEntryIndexerAppend) return lib.can_implement(indexer_append_call(c));
  if (q.entry == kEntrySparsePrefill) {
    auto in = sparse_prefill_call(c);
    const auto lengths = c.value("topk_length_values", std::vector<int32_t>{});
    in.topk_length = lengths;
    return lib.can_implement(in);
  }
  throw Error(fmt::format("a claim question about entry '{}', which has no can_implement", q.entry));
}
}  // namespace

int child_claims(const std::filesystem::path& plugin_path, const std::filesystem::path& query,
                 const std::filesystem::path& result) {
  const auto questions = decode_claim_query(wire::read(query, kClaimQuery));
  const auto lib = plugin::Library::open(plugin_path);
  std::vector<ClaimAnswer> answers;
  for (const auto& q : questions) {
    ClaimAnswer a;
    try {
      const auto c = q.entry.empty() ? lib->can_implement(q.shape, q.scale_fmt, q.cache_seqlens) : entry_claim(*lib, q);
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
