#include "runner.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <limits>

#include <fmt/format.h>

#include "certifier.hpp"
#include "mla/core/error.hpp"
#include "mla/core/sha256.hpp"
#include "mla/kernels/registry.hpp"
#include "mla/plugin/host.hpp"
#include "mla/reports/certificate.hpp"

namespace mla::certify {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

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

OutDType dtype_from(const std::string& s) {
  if (s == "f64") return OutDType::f64;
  if (s == "f32") return OutDType::f32;
  if (s == "bf16") return OutDType::bf16;
  throw Error(fmt::format("unknown output dtype '{}'", s));
}

const char* status_name(RunResult::Status s) {
  switch (s) {
    case RunResult::Status::ran: return "ran";
    case RunResult::Status::unsupported: return "unsupported";
    case RunResult::Status::error: return "error";
  }
  return "error";
}

RunResult::Status status_from(const std::string& s) {
  if (s == "ran") return RunResult::Status::ran;
  if (s == "unsupported") return RunResult::Status::unsupported;
  if (s == "error") return RunResult::Status::error;
  throw Error(fmt::format("unknown run status '{}'", s));
}

// A header line is small; a longer one means the file is not ours.
constexpr std::size_t kMaxHeader = 1 << 20;

json read_header(std::ifstream& in, const std::filesystem::path& file) {
  std::string line;
  char c;
  while (in.get(c) && c != '\n') {
    line += c;
    if (line.size() > kMaxHeader) throw Error(fmt::format("{}: header line too long", file.string()));
  }
  if (c != '\n') throw Error(fmt::format("{}: truncated header", file.string()));
  try {
    return json::parse(line);
  } catch (const json::exception& e) {
    throw Error(fmt::format("{}: malformed header: {}", file.string(), e.what()));
  }
}

template <class T>
void read_array(std::ifstream& in, std::vector<T>& v, uint64_t n, const std::filesystem::path& file, const char* what) {
  if (n > (uint64_t{1} << 40) / sizeof(T)) throw Error(fmt::format("{}: {} is implausibly large", file.string(), what));
  v.resize(static_cast<std::size_t>(n));
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * sizeof(T)));
  if (!in) throw Error(fmt::format("{}: truncated in {}", file.string(), what));
}

template <class T>
void write_array(std::ofstream& out, std::span<const T> v) {
  out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size_bytes()));
}

void expect_end(std::ifstream& in, const std::filesystem::path& file) {
  if (in.peek() != std::char_traits<char>::eof()) throw Error(fmt::format("{}: trailing bytes", file.string()));
}

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
      // since check() should have known (FIELD-NOTES bug 9: no silent routing).
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
        // FIELD-NOTES bug 12: state leaking from one call into the next.
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

void write_inputs(const std::filesystem::path& file, const AttnInputs& in) {
  const auto& s = in.shape;
  uint64_t scale_bits;
  std::memcpy(&scale_bits, &in.softmax_scale, 8);
  const json h = {{"format", "mla-certify-inputs"},
                  {"version", 1},
                  {"shape",
                   {{"batch", s.batch}, {"s_q", s.s_q}, {"heads", s.heads}, {"d_qk", s.d_qk}, {"d_v", s.d_v},
                    {"page_size", s.page_size}, {"num_blocks", s.num_blocks}, {"max_blocks", s.max_blocks},
                    {"topk", s.topk}, {"cache_format", to_string(s.cache_format)}, {"causal", s.causal}}},
                  {"softmax_scale_bits", scale_bits},
                  {"sizes",
                   {in.q.size(), in.kv_cache.size(), in.block_table.size(), in.cache_seqlens.size(), in.indices.size()}}};
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(fmt::format("cannot write {}", file.string()));
  out << h.dump() << '\n';
  write_array(out, in.q);
  write_array(out, in.kv_cache);
  write_array(out, in.block_table);
  write_array(out, in.cache_seqlens);
  write_array(out, in.indices);
  out.flush();
  if (!out) throw Error(fmt::format("writing {} failed (disk full?)", file.string()));
}

CaseInputs read_inputs(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw Error(fmt::format("cannot read {}", file.string()));
  const json h = read_header(in, file);
  CaseInputs c;
  try {
    if (h.at("format") != "mla-certify-inputs" || h.at("version") != 1) {
      throw Error(fmt::format("{} is not an inputs file of version 1", file.string()));
    }
    const auto& s = h.at("shape");
    c.shape.batch = s.at("batch");
    c.shape.s_q = s.at("s_q");
    c.shape.heads = s.at("heads");
    c.shape.d_qk = s.at("d_qk");
    c.shape.d_v = s.at("d_v");
    c.shape.page_size = s.at("page_size");
    c.shape.num_blocks = s.at("num_blocks");
    c.shape.max_blocks = s.at("max_blocks");
    c.shape.topk = s.at("topk");
    const std::string fmt_name = s.at("cache_format");
    if (fmt_name == "bf16") c.shape.cache_format = CacheFormat::bf16;
    else if (fmt_name == "fp8") c.shape.cache_format = CacheFormat::fp8;
    else throw Error(fmt::format("{}: unknown cache format '{}'", file.string(), fmt_name));
    c.shape.causal = s.at("causal");
    const uint64_t bits = h.at("softmax_scale_bits");
    std::memcpy(&c.softmax_scale, &bits, 8);
    const auto sizes = h.at("sizes").get<std::vector<uint64_t>>();
    if (sizes.size() != 5) throw Error(fmt::format("{}: expected 5 array sizes", file.string()));
    read_array(in, c.q, sizes[0], file, "q");
    read_array(in, c.kv_cache, sizes[1], file, "kv_cache");
    read_array(in, c.block_table, sizes[2], file, "block_table");
    read_array(in, c.cache_seqlens, sizes[3], file, "cache_seqlens");
    read_array(in, c.indices, sizes[4], file, "indices");
    expect_end(in, file);
  } catch (const json::exception& e) {
    throw Error(fmt::format("{}: malformed header: {}", file.string(), e.what()));
  }
  return c;
}

void write_result(const std::filesystem::path& file, const RunResult& r) {
  json h = {{"format", "mla-certify-result"},
            {"version", 1},
            {"status", status_name(r.status)},
            {"message", r.message},
            {"dtype", to_string(r.outputs.dtype)},
            {"n_out", r.outputs.out.size()},
            {"n_lse", r.outputs.lse.size()},
            {"run_seconds", r.run_seconds},
            {"bytes", r.bytes ? json(*r.bytes) : json()},
            {"flops", r.flops ? json(*r.flops) : json()},
            {"reasons", r.reasons}};
  std::string text = h.dump() + "\n";
  text.append(reinterpret_cast<const char*>(r.outputs.out.data()), r.outputs.out.size() * sizeof(double));
  text.append(reinterpret_cast<const char*>(r.outputs.lse.data()), r.outputs.lse.size() * sizeof(double));
  // Atomically: a child killed while writing leaves no half result for the parent to believe.
  reports::write_file_atomically(file, text);
}

RunResult read_result(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw Error(fmt::format("cannot read {}", file.string()));
  const json h = read_header(in, file);
  RunResult r;
  try {
    if (h.at("format") != "mla-certify-result" || h.at("version") != 1) {
      throw Error(fmt::format("{} is not a result file of version 1", file.string()));
    }
    r.status = status_from(h.at("status"));
    r.message = h.at("message");
    r.outputs.dtype = dtype_from(h.at("dtype"));
    r.run_seconds = h.at("run_seconds");
    if (!h.at("bytes").is_null()) r.bytes = h.at("bytes").get<double>();
    if (!h.at("flops").is_null()) r.flops = h.at("flops").get<double>();
    r.reasons = h.at("reasons").get<std::vector<std::string>>();
    read_array(in, r.outputs.out, h.at("n_out").get<uint64_t>(), file, "out");
    read_array(in, r.outputs.lse, h.at("n_lse").get<uint64_t>(), file, "lse");
    expect_end(in, file);
  } catch (const json::exception& e) {
    throw Error(fmt::format("{}: malformed header: {}", file.string(), e.what()));
  }
  return r;
}

nlohmann::json capabilities_json(const Capabilities& c) {
  std::vector<std::string> formats;
  for (auto f : c.cache_formats) formats.push_back(to_string(f));
  return {{"cache_formats", formats}, {"min_heads", c.min_heads}, {"max_heads", c.max_heads},
          {"min_s_q", c.min_s_q},     {"max_s_q", c.max_s_q},     {"page_sizes", c.page_sizes},
          {"dense", c.dense},         {"sparse", c.sparse},       {"varlen", c.varlen}};
}

Capabilities capabilities_from_json(const nlohmann::json& j) {
  try {
    Capabilities c;
    for (const auto& f : j.at("cache_formats")) {
      if (f == "bf16") c.cache_formats.push_back(CacheFormat::bf16);
      else if (f == "fp8") c.cache_formats.push_back(CacheFormat::fp8);
      else throw Error(fmt::format("unknown cache format {}", f.dump()));
    }
    c.min_heads = j.at("min_heads");
    c.max_heads = j.at("max_heads");
    c.min_s_q = j.at("min_s_q");
    c.max_s_q = j.at("max_s_q");
    c.page_sizes = j.at("page_sizes").get<std::vector<int>>();
    c.dense = j.at("dense");
    c.sparse = j.at("sparse");
    c.varlen = j.at("varlen");
    return c;
  } catch (const json::exception& e) {
    throw Error(fmt::format("malformed capabilities: {}", e.what()));
  }
}

int child_run(const KernelRef& kernel, const std::filesystem::path& inputs, const std::filesystem::path& result,
              int repeats, bool enforce_caps) {
  // Whatever goes wrong from here on (short of a crash) is the kernel's result: it is written
  // to the result file for the parent to record.
  RunResult r;
  try {
    const CaseInputs c = read_inputs(inputs);
    std::unique_ptr<AttentionImpl> owned;
    const AttentionImpl* impl = nullptr;
    if (kernel.plugin) {
      owned = plugin::make_plugin_kernel(plugin::Library::open(*kernel.plugin), enforce_caps);
      impl = owned.get();
    } else if (kernel.extra) {
      owned = make_extra_kernel(*kernel.extra);
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
  write_result(result, r);
  return 0;
}

int child_describe(const std::filesystem::path& plugin_path, const std::filesystem::path& result) {
  const auto lib = plugin::Library::open(plugin_path);
  const auto& i = lib->info();
  const auto unavailable = lib->unavailable();
  const json j = {{"name", i.name},
                  {"version", lib->version()},
                  {"description", i.description},
                  {"backend", i.backend},
                  {"out_dtype", to_string(i.out_dtype)},
                  {"abi_version", lib->descriptor().abi_version},
                  {"abi_minor", lib->abi_minor()},
                  {"device_memory", lib->device_memory()},
                  {"append_formats", lib->append_formats()},
                  {"append_scale_fmts", lib->append_scale_fmts()},
                  {"capabilities", capabilities_json(i.caps)},
                  {"unavailable", unavailable ? json(*unavailable) : json()}};
  reports::write_file_atomically(result, j.dump(1) + "\n");
  return 0;
}

}  // namespace mla::certify
