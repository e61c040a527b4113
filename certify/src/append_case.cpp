#include "append_cases.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>

#include <fmt/format.h>

#include "mla/core/error.hpp"
#include "mla/core/generator.hpp"
#include "mla/core/tolerance.hpp"
#include "mla/kernels/append.hpp"
#include "mla/ref/rope.hpp"
#include "mla/reports/certificate.hpp"

namespace mla::certify {
namespace {

using nlohmann::json;
using tol::Verdict;
constexpr int64_t kLat = static_cast<int64_t>(kLatentDim), kRp = static_cast<int64_t>(kRopeDim),
                  kTok = static_cast<int64_t>(kQkDim);
// Streams of the counter-based generator, one per array, so no two arrays share values.
enum Stream : uint64_t { kLatentStream = 101, kRopeStream, kWeightStream, kBlockStream, kCacheStream, kOrderStream };

const char* scale_name(ScaleFmt f) { return f == ScaleFmt::ue8m0 ? "ue8m0" : "fp32"; }


struct Token {
  int32_t seq, pos;
};

// The float32 scale recipe of fp8_quantize_token for a block maximum `amax`.
float recipe_scale(double amax, ScaleFmt f) {
  const float s = std::max(static_cast<float>(amax), 1e-4f) / 448.0f;
  if (f == ScaleFmt::fp32) return s;
  int e = 0;
  const float m = std::frexp(s, &e);
  return m == 0.5f ? s : std::ldexp(1.0f, e);
}

bool is_power_of_two(float s) {
  int e = 0;
  return std::isfinite(s) && s > 0 && std::frexp(s, &e) == 0.5f;
}

template <class T>
void put(std::ofstream& out, const std::vector<T>& v) {
  out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(T)));
}
template <class T>
void get(std::ifstream& in, std::vector<T>& v, uint64_t n, const std::filesystem::path& file, const char* what) {
  if (n > (uint64_t{1} << 36) / sizeof(T)) throw Error(fmt::format("{}: {} is implausibly large", file.string(), what));
  v.resize(static_cast<std::size_t>(n));
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * sizeof(T)));
  if (!in) throw Error(fmt::format("{}: truncated in {}", file.string(), what));
}
json header_of(std::ifstream& in, const std::filesystem::path& file, const char* format) {
  std::string line;
  if (!std::getline(in, line) || line.size() > (1u << 20)) throw Error(fmt::format("{}: no header line", file.string()));
  try {
    json h = json::parse(line);
    if (h.at("format") != format || h.at("version") != 1) throw Error(fmt::format("{} is not a {} file of version 1", file.string(), format));
    return h;
  } catch (const json::exception& e) {
    throw Error(fmt::format("{}: malformed header: {}", file.string(), e.what()));
  }
}
void expect_end(std::ifstream& in, const std::filesystem::path& file) {
  if (in.peek() != std::char_traits<char>::eof()) throw Error(fmt::format("{}: trailing bytes", file.string()));
}

std::string describe_rc(int32_t rc) {
  switch (rc) {
    case MLA_PLUGIN_OK: return "MLA_PLUGIN_OK";
    case MLA_PLUGIN_ERROR: return "MLA_PLUGIN_ERROR";
    case MLA_PLUGIN_UNSUPPORTED: return "MLA_PLUGIN_UNSUPPORTED";
    case MLA_PLUGIN_CAPACITY: return "MLA_PLUGIN_CAPACITY";
    default: return fmt::format("unknown code {}", rc);
  }
}

}  // namespace

AppendProblem problem_of(const plugin::AppendCallInputs& in, CacheFormat format, ScaleFmt scale) {
  AppendProblem p;
  p.num_tokens = in.num_tokens;
  p.latent = in.latent;
  p.k_pe = in.k_pe;
  p.kv_norm_weight = in.kv_norm_weight;
  p.inv_freq = in.inv_freq;
  p.eps = in.eps;
  p.seq_ids = in.seq_ids;
  p.positions = in.positions;
  p.block_table = in.block_table;
  p.batch = in.batch;
  p.max_blocks = in.max_blocks;
  p.page_size = in.page_size;
  p.num_blocks = in.num_blocks;
  p.max_seq_len = in.max_seq_len;
  p.format = format;
  p.scale_fmt = scale;
  return p;
}

AppendProblem problem_of(const AppendCase& c) { return problem_of(c.in, c.format, c.scale_fmt); }

json AppendCase::shape() const {
  json j = {{"cache_format", to_string(format)}, {"batch", in.batch},         {"page_size", in.page_size},
            {"num_blocks", in.num_blocks},       {"max_blocks", in.max_blocks}, {"max_seq_len", in.max_seq_len},
            {"num_tokens", in.num_tokens},       {"positions", in.positions}, {"seq_ids", in.seq_ids}};
  if (format == CacheFormat::fp8) j["scale_fmt"] = scale_name(scale_fmt);
  return j;
}

std::vector<AppendCase> make_append_cases(const fixtures::LayerCase& g, uint32_t formats, uint32_t scale_fmts,
                                          const Capabilities& caps) {
  const int64_t msl = g.config.max_seq_len;
  if (!g.accept || !g.reject || g.steps.empty()) {
    throw Error(fmt::format("{}/{}: a cache_boundary case needs steps/0, accept and reject", g.file, g.name));
  }
  if (g.accept->start_pos != msl - 1 || g.reject->start_pos != msl) {
    throw Error(fmt::format("{}/{}: accept at {} and reject at {} are not max_seq_len - 1 and max_seq_len ({})", g.file,
                            g.name, g.accept->start_pos, g.reject->start_pos, msl));
  }
  const int64_t prefill = g.steps[0].x.shape.size() >= 2 ? g.steps[0].x.shape[1] : 0;
  if (msl < 2 || prefill < 1 || prefill > msl) {
    throw Error(fmt::format("{}/{}: max_seq_len {} / prefill {} leave no room for the cases", g.file, g.name, msl, prefill));
  }
  const uint64_t seed = static_cast<uint64_t>(g.seed);
  const int32_t page = caps.page_sizes.empty() ? 16 : caps.page_sizes.front();
  const int32_t batch = 2;
  // One block-table entry past capacity, mapped to a real block (see the header), and two blocks
  // no sequence maps, whose bytes nothing may touch.
  const int32_t max_blocks = static_cast<int32_t>((msl + page - 1) / page + 1);
  const int32_t num_blocks = batch * max_blocks + 2;
  std::vector<int32_t> block_table(static_cast<std::size_t>(batch * max_blocks));
  const auto perm = gen::permutation(seed, kBlockStream, num_blocks);
  for (std::size_t i = 0; i < block_table.size(); ++i) block_table[i] = static_cast<int32_t>(perm[i]);

  ModelConfig cfg = g.config;
  cfg.qk_rope_head_dim = kRp;  // the ABI's width; the golden's theta and YaRN parameters stay
  const auto inv_freq = ref::rope_inv_freq(cfg);
  std::vector<uint16_t> weight(static_cast<std::size_t>(kLat));
  gen::fill_bf16(seed, kWeightStream, 1.0, 0.2, weight);

  struct Plan {
    std::string what, description;
    std::vector<Token> tokens;
    bool reject;
  };
  std::vector<Plan> plans;
  {
    Plan p{"prefill", "", {}, false};
    for (int32_t t = 0; t < prefill && t < msl - 1; ++t) p.tokens.push_back({0, t});
    std::set<int32_t> seq1;
    for (int64_t t : {int64_t{0}, int64_t{page} - 1, int64_t{page}, 2 * int64_t{page} - 1}) {
      if (t < msl - 1) seq1.insert(static_cast<int32_t>(t));
    }
    for (int32_t t : seq1) p.tokens.push_back({1, t});
    // Launch order unrelated to positions.
    std::vector<Token> shuffled;
    for (int64_t i : gen::permutation(seed, kOrderStream, static_cast<int64_t>(p.tokens.size()))) {
      shuffled.push_back(p.tokens[static_cast<std::size_t>(i)]);
    }
    p.tokens = shuffled;
    p.description = fmt::format("{} tokens: positions [0, {}) of sequence 0 and page edges of sequence 1 (page size {})",
                                p.tokens.size(), std::min<int64_t>(prefill, msl - 1), page);
    plans.push_back(p);
  }
  plans.push_back({"last_valid",
                   fmt::format("the last valid position max_seq_len - 1 = {} (golden accept step), and a page start", msl - 1),
                   {{0, static_cast<int32_t>(msl - 1)}, {1, std::min<int32_t>(page, static_cast<int32_t>(msl - 1))}},
                   false});
  plans.push_back({"rejected",
                   fmt::format("two valid tokens, then one at max_seq_len = {} (golden reject step): must return "
                               "MLA_PLUGIN_CAPACITY having written nothing",
                               msl),
                   {{1, 1}, {1, 2}, {0, static_cast<int32_t>(msl)}},
                   true});
  if (plans[1].tokens[1].pos == plans[1].tokens[0].pos && plans[1].tokens[1].seq == plans[1].tokens[0].seq) {
    plans[1].tokens.pop_back();
  }

  struct Variant {
    CacheFormat format;
    ScaleFmt scale;
    uint32_t abi_scale;
  };
  std::vector<Variant> variants;
  if (formats & MLA_PLUGIN_CACHE_BF16) variants.push_back({CacheFormat::bf16, ScaleFmt::fp32, 0});
  if (formats & MLA_PLUGIN_CACHE_FP8) {
    if (scale_fmts & MLA_PLUGIN_SCALE_FP32) variants.push_back({CacheFormat::fp8, ScaleFmt::fp32, MLA_PLUGIN_SCALE_FP32});
    if (scale_fmts & MLA_PLUGIN_SCALE_UE8M0) variants.push_back({CacheFormat::fp8, ScaleFmt::ue8m0, MLA_PLUGIN_SCALE_UE8M0});
  }

  std::vector<AppendCase> out;
  for (const auto& v : variants) {
    const std::string fmt_name = v.format == CacheFormat::bf16 ? "bf16" : fmt::format("fp8_{}", scale_name(v.scale));
    const std::size_t bpt = cache_bytes_per_token(v.format);
    for (std::size_t pi = 0; pi < plans.size(); ++pi) {
      const auto& p = plans[pi];
      AppendCase c;
      c.name = fmt::format("{}/{}/{}", g.name, fmt_name, p.what);
      c.description = fmt::format("append ({}): {}", fmt_name, p.description);
      c.format = v.format;
      c.scale_fmt = v.scale;
      c.expect_capacity = p.reject;
      auto& in = c.in;
      const int32_t n = static_cast<int32_t>(p.tokens.size());
      in.num_tokens = n;
      in.batch = batch;
      in.max_blocks = max_blocks;
      in.page_size = page;
      in.num_blocks = num_blocks;
      in.max_seq_len = msl;
      in.cache_format = v.format == CacheFormat::fp8 ? MLA_PLUGIN_CACHE_FP8 : MLA_PLUGIN_CACHE_BF16;
      in.scale_fmt = v.abi_scale;
      in.eps = 1e-6;  // the schema's kv_norm epsilon
      in.kv_norm_weight = weight;
      in.inv_freq = inv_freq;
      in.block_table = block_table;
      for (const auto& t : p.tokens) {
        in.seq_ids.push_back(t.seq);
        in.positions.push_back(t.pos);
      }
      // Values keyed by (sequence, position), so a token has the same inputs in every case.
      in.latent.resize(static_cast<std::size_t>(n * kLat));
      in.k_pe.resize(static_cast<std::size_t>(n * kRp));
      for (int32_t i = 0; i < n; ++i) {
        const uint64_t key = static_cast<uint64_t>(p.tokens[i].seq) * 1000003u + static_cast<uint64_t>(p.tokens[i].pos);
        std::span<uint16_t> lat(in.latent.data() + i * kLat, static_cast<std::size_t>(kLat));
        gen::fill_bf16(seed + key, kLatentStream, 0.0, 2.0, lat);
        gen::fill_bf16(seed + key, kRopeStream, 0.0, 1.0, std::span<uint16_t>(in.k_pe.data() + i * kRp, static_cast<std::size_t>(kRp)));
        if (p.tokens[i].seq == 1 && p.tokens[i].pos == 0) {
          std::fill(lat.begin(), lat.end(), uint16_t{0});  // RMSNorm of zeros: eps alone, output 0
        } else if (p.tokens[i].seq == 0 && p.tokens[i].pos == 1) {
          // The last 128-block a million times smaller: its amax is below the 1e-4 scale clamp.
          for (int64_t j = 3 * 128; j < kLat; ++j) lat[static_cast<std::size_t>(j)] = bf16_from_double(bf16_to_float(lat[static_cast<std::size_t>(j)]) * 1e-6);
        }
      }
      in.kv_cache.resize(static_cast<std::size_t>(num_blocks) * page * bpt);
      for (std::size_t i = 0; i < in.kv_cache.size(); ++i) {
        in.kv_cache[i] = static_cast<uint8_t>(gen::bits(seed, kCacheStream + pi, i));
      }
      const auto prob = problem_of(in, v.format, v.scale);
      if (c.expect_capacity) {
        c.rejected_token = n - 1;
      } else {
        c.slots = append_slots(prob);
        c.values = append_values_f64(prob);
      }
      out.push_back(std::move(c));
    }
  }
  return out;
}

// ---- files ------------------------------------------------------------------------------------

void write_append_inputs(const std::filesystem::path& file, const plugin::AppendCallInputs& in) {
  uint64_t eps_bits;
  std::memcpy(&eps_bits, &in.eps, 8);
  const json h = {{"format", "mla-certify-append-inputs"},
                  {"version", 1},
                  {"num_tokens", in.num_tokens},
                  {"batch", in.batch},
                  {"max_blocks", in.max_blocks},
                  {"page_size", in.page_size},
                  {"num_blocks", in.num_blocks},
                  {"max_seq_len", in.max_seq_len},
                  {"cache_format", in.cache_format},
                  {"scale_fmt", in.scale_fmt},
                  {"eps_bits", eps_bits},
                  {"sizes",
                   {in.latent.size(), in.k_pe.size(), in.kv_norm_weight.size(), in.inv_freq.size(), in.seq_ids.size(),
                    in.positions.size(), in.block_table.size(), in.kv_cache.size()}}};
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(fmt::format("cannot write {}", file.string()));
  out << h.dump() << '\n';
  put(out, in.latent);
  put(out, in.k_pe);
  put(out, in.kv_norm_weight);
  put(out, in.inv_freq);
  put(out, in.seq_ids);
  put(out, in.positions);
  put(out, in.block_table);
  put(out, in.kv_cache);
  out.flush();
  if (!out) throw Error(fmt::format("writing {} failed (disk full?)", file.string()));
}

plugin::AppendCallInputs read_append_inputs(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw Error(fmt::format("cannot read {}", file.string()));
  const json h = header_of(in, file, "mla-certify-append-inputs");
  plugin::AppendCallInputs a;
  try {
    a.num_tokens = h.at("num_tokens");
    a.batch = h.at("batch");
    a.max_blocks = h.at("max_blocks");
    a.page_size = h.at("page_size");
    a.num_blocks = h.at("num_blocks");
    a.max_seq_len = h.at("max_seq_len");
    a.cache_format = h.at("cache_format");
    a.scale_fmt = h.at("scale_fmt");
    const uint64_t eps_bits = h.at("eps_bits");
    std::memcpy(&a.eps, &eps_bits, 8);
    const auto n = h.at("sizes").get<std::vector<uint64_t>>();
    if (n.size() != 8) throw Error(fmt::format("{}: expected 8 array sizes", file.string()));
    get(in, a.latent, n[0], file, "latent");
    get(in, a.k_pe, n[1], file, "k_pe");
    get(in, a.kv_norm_weight, n[2], file, "kv_norm_weight");
    get(in, a.inv_freq, n[3], file, "inv_freq");
    get(in, a.seq_ids, n[4], file, "seq_ids");
    get(in, a.positions, n[5], file, "positions");
    get(in, a.block_table, n[6], file, "block_table");
    get(in, a.kv_cache, n[7], file, "kv_cache");
    expect_end(in, file);
  } catch (const json::exception& e) {
    throw Error(fmt::format("{}: malformed header: {}", file.string(), e.what()));
  }
  return a;
}

void write_append_result(const std::filesystem::path& file, const AppendRun& r) {
  const json h = {{"format", "mla-certify-append-result"},
                  {"version", 1},
                  {"ran", r.ran},
                  {"message", r.message},
                  {"rc", r.rc},
                  {"reasons", r.reasons},
                  {"run_seconds", r.run_seconds},
                  {"n_cache", r.kv_cache.size()}};
  std::string text = h.dump() + "\n";
  text.append(reinterpret_cast<const char*>(r.kv_cache.data()), r.kv_cache.size());
  reports::write_file_atomically(file, text);
}

AppendRun read_append_result(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw Error(fmt::format("cannot read {}", file.string()));
  const json h = header_of(in, file, "mla-certify-append-result");
  AppendRun r;
  try {
    r.ran = h.at("ran");
    r.message = h.at("message");
    r.rc = h.at("rc");
    r.reasons = h.at("reasons").get<std::vector<std::string>>();
    r.run_seconds = h.at("run_seconds");
    get(in, r.kv_cache, h.at("n_cache").get<uint64_t>(), file, "kv_cache");
    expect_end(in, file);
  } catch (const json::exception& e) {
    throw Error(fmt::format("{}: malformed header: {}", file.string(), e.what()));
  }
  return r;
}

int child_append(const std::filesystem::path& plugin_path, const std::filesystem::path& inputs,
                 const std::filesystem::path& result, int repeats) {
  AppendRun r;
  try {
    const auto in = read_append_inputs(inputs);
    const auto lib = plugin::Library::open(plugin_path);
    if (auto why = lib->unavailable()) throw Error(*why);
    double best = std::numeric_limits<double>::infinity();
    for (int rep = 0; rep < std::max(2, repeats); ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      auto call = plugin::call_append(*lib, in);
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      for (auto& v : call.violations) {
        if (std::find(r.reasons.begin(), r.reasons.end(), v) == r.reasons.end()) r.reasons.push_back(std::move(v));
      }
      if (rep == 0) {
        r.rc = call.rc;
        r.message = call.message;
        r.kv_cache = std::move(call.kv_cache);
        continue;
      }
      // FIELD-NOTES bug 12: a call must not depend on what an earlier one did.
      if (call.rc != r.rc) {
        r.reasons.push_back(fmt::format("append returned {} on call 1 and {} on call {}", describe_rc(r.rc),
                                        describe_rc(call.rc), rep + 1));
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
  write_append_result(result, r);
  return 0;
}

// ---- judgement --------------------------------------------------------------------------------

void judge_append(const AppendCase& c, const AppendRun& run, reports::CaseResult& r) {
  r.shape = c.shape();
  if (!run.ran) {
    r.verdict = Verdict::error;
    r.reasons.push_back(run.message);
    return;
  }
  r.run_seconds = run.run_seconds;
  const auto& in = c.in;
  const std::size_t bpt = cache_bytes_per_token(c.format);
  if (run.kv_cache.size() != in.kv_cache.size()) {
    r.verdict = Verdict::error;
    r.reasons.push_back(fmt::format("the child returned a cache of {} bytes, expected {}", run.kv_cache.size(), in.kv_cache.size()));
    return;
  }
  const std::string msg = run.message.empty() ? "" : ": " + run.message;
  if (run.rc == MLA_PLUGIN_UNSUPPORTED) {
    r.verdict = Verdict::unsupported;
    r.reasons.push_back(fmt::format("the append refused the call (it claims {}){}", to_string(c.format), msg));
    return;
  }
  if (run.rc != MLA_PLUGIN_OK && run.rc != MLA_PLUGIN_CAPACITY && !c.expect_capacity) {
    r.verdict = Verdict::error;
    r.reasons.push_back(fmt::format("append returned {}{}", describe_rc(run.rc), msg));
    return;
  }
  const int64_t n_slots = int64_t{in.num_blocks} * in.page_size;
  auto slot_changed = [&](int64_t s) {
    return std::memcmp(run.kv_cache.data() + s * bpt, in.kv_cache.data() + s * bpt, bpt) != 0;
  };
  auto where = [&](int64_t s) { return fmt::format("slot {} (block {}, offset {})", s, s / in.page_size, s % in.page_size); };

  if (c.expect_capacity) {
    const int32_t t = c.rejected_token;
    const auto pos = in.positions[static_cast<std::size_t>(t)];
    if (run.rc == MLA_PLUGIN_OK) {
      r.reasons.push_back(fmt::format("capacity: accepted token {} of sequence {} at position {} >= max_seq_len {}; it "
                                      "must return MLA_PLUGIN_CAPACITY",
                                      t, in.seq_ids[static_cast<std::size_t>(t)], pos, in.max_seq_len));
    } else if (run.rc != MLA_PLUGIN_CAPACITY) {
      r.reasons.push_back(fmt::format("capacity: returned {} for a token at position {} >= max_seq_len {}; "
                                      "MLA_PLUGIN_CAPACITY is the code for it{}",
                                      describe_rc(run.rc), pos, in.max_seq_len, msg));
    }
    int64_t changed = 0, first = -1;
    for (int64_t s = 0; s < n_slots; ++s) {
      if (slot_changed(s) && changed++ == 0) first = s;
    }
    if (changed) {
      r.reasons.push_back(fmt::format("capacity: {} slot{} written although the call {} (nothing may be written when a "
                                      "token is past capacity); first: {}",
                                      changed, changed == 1 ? "" : "s",
                                      run.rc == MLA_PLUGIN_OK ? "should have been rejected" : "was rejected", where(first)));
    }
  } else {
    if (run.rc == MLA_PLUGIN_CAPACITY) {
      r.reasons.push_back(fmt::format("capacity: returned MLA_PLUGIN_CAPACITY for tokens all within max_seq_len {}{}",
                                      in.max_seq_len, msg));
    }
    // Slots no token maps to keep every byte.
    const std::set<int64_t> written(c.slots.begin(), c.slots.end());
    int64_t changed = 0, first = -1;
    for (int64_t s = 0; s < n_slots; ++s) {
      if (!written.count(s) && slot_changed(s) && changed++ == 0) first = s;
    }
    if (changed) {
      r.reasons.push_back(fmt::format("untouched slots: {} slot{} no token maps to changed; first: {}", changed,
                                      changed == 1 ? "" : "s", where(first)));
    }
    if (run.rc == MLA_PLUGIN_OK) {
      const int64_t n = in.num_tokens;
      std::vector<double> lat(static_cast<std::size_t>(n * kLat)), pe(static_cast<std::size_t>(n * kRp));
      std::vector<double> lat_truth(lat.size()), pe_truth(pe.size());
      std::vector<double> token(static_cast<std::size_t>(kTok));
      for (int64_t i = 0; i < n; ++i) {
        const uint8_t* p = run.kv_cache.data() + c.slots[static_cast<std::size_t>(i)] * bpt;
        if (c.format == CacheFormat::bf16) {
          for (int64_t j = 0; j < kTok; ++j) {
            uint16_t b;
            std::memcpy(&b, p + 2 * j, 2);
            token[static_cast<std::size_t>(j)] = bf16_to_float(b);
          }
        } else {
          fp8_dequantize_token({p, bpt}, token);
        }
        const double* t = c.values.data() + i * kTok;
        std::copy(token.begin(), token.begin() + kLat, lat.begin() + i * kLat);
        std::copy(token.begin() + kLat, token.end(), pe.begin() + i * kRp);
        std::copy(t, t + kLat, lat_truth.begin() + i * kLat);
        std::copy(t + kLat, t + kTok, pe_truth.begin() + i * kRp);
      }
      const std::vector<int64_t> lat_shape{n, kLat}, pe_shape{n, kRp};
      const auto& bf16_tol = tol::lookup("cache.append.bf16");
      r.out = tol::judge("latent", lat, lat_truth, lat_shape,
                         c.format == CacheFormat::fp8 ? tol::lookup("cache.append.fp8.dequant") : bf16_tol);
      r.lse = tol::judge("k_pe", pe, pe_truth, pe_shape, bf16_tol);
      for (const auto& why : r.out->reasons) r.reasons.push_back("latent (kv_norm): " + why);
      if (!r.lse->reasons.empty()) {
        // Name the classic RoPE bug when it is the one: the same rotation on pairs (i, i + 32).
        std::vector<double> half(pe_truth.size());
        for (int64_t i = 0; i < n; ++i) {
          const double pos = in.positions[static_cast<std::size_t>(i)];
          for (int64_t j = 0; j < kRp / 2; ++j) {
            const double a = pos * in.inv_freq[static_cast<std::size_t>(j)];
            const double x0 = bf16_to_float(in.k_pe[static_cast<std::size_t>(i * kRp + j)]);
            const double x1 = bf16_to_float(in.k_pe[static_cast<std::size_t>(i * kRp + j + kRp / 2)]);
            half[static_cast<std::size_t>(i * kRp + j)] = x0 * std::cos(a) - x1 * std::sin(a);
            half[static_cast<std::size_t>(i * kRp + j + kRp / 2)] = x0 * std::sin(a) + x1 * std::cos(a);
          }
        }
        if (tol::judge("k_pe", pe, half, pe_shape, bf16_tol).verdict == Verdict::pass) {
          r.reasons.push_back("k_pe (RoPE): matches a half-split RoPE rotating pairs (i, i+32); DeepSeek rotates "
                              "interleaved pairs (2i, 2i+1)");
        }
        for (const auto& why : r.lse->reasons) r.reasons.push_back("k_pe (RoPE at the token's position): " + why);
      }
      if (c.format == CacheFormat::fp8) {
        // The consistency rule of the header: scales and codes must be what quantizing some value
        // inside the bf16 band of the truth gives, with the token's own scale.
        // RMSNorm is a scaling, so the latent's legitimate error is relative only: the entry's
        // rtol. (Its absolute terms exist for RoPE pairs that cancel, which the latent has not.)
        auto band = [&](double v) { return bf16_tol.rtol * std::fabs(v); };
        int64_t bad_scales = 0, bad_codes = 0;
        std::string first_scale, first_code;
        for (int64_t i = 0; i < n; ++i) {
          const uint8_t* p = run.kv_cache.data() + c.slots[static_cast<std::size_t>(i)] * bpt;
          const double* t = c.values.data() + i * kTok;
          for (int64_t b = 0; b < kLat / 128; ++b) {
            float s;
            std::memcpy(&s, p + kLat + 4 * b, 4);
            double lo = 0, hi = 0;
            for (int64_t j = b * 128; j < (b + 1) * 128; ++j) {
              lo = std::max(lo, std::fabs(t[j]) - band(t[j]));
              hi = std::max(hi, std::fabs(t[j]) + band(t[j]));
            }
            const float s_lo = recipe_scale(lo, c.scale_fmt), s_hi = recipe_scale(hi, c.scale_fmt);
            const bool ok = std::isfinite(s) && s >= s_lo && s <= s_hi && (c.scale_fmt == ScaleFmt::fp32 || is_power_of_two(s));
            if (!ok) {
              if (bad_scales++ == 0) {
                first_scale = fmt::format("token {} block {}: scale {:.9g}, the {} recipe allows [{:.9g}, {:.9g}]", i, b, s,
                                          scale_name(c.scale_fmt), s_lo, s_hi);
              }
              continue;  // codes are judged against a sound scale only
            }
            for (int64_t j = b * 128; j < (b + 1) * 128; ++j) {
              const double got = e4m3_to_double(p[j]);
              const double a = e4m3_to_double(e4m3_from_double((t[j] - band(t[j])) / s));
              const double z = e4m3_to_double(e4m3_from_double((t[j] + band(t[j])) / s));
              if (!(got >= a && got <= z)) {
                if (bad_codes++ == 0) {
                  first_code = fmt::format("[{}, {}]: code 0x{:02x} = {:.6g}, the encodings of the band allow [{:.6g}, {:.6g}]",
                                           i, j, p[j], got, a, z);
                }
              }
            }
          }
        }
        if (bad_scales) {
          r.reasons.push_back(fmt::format("fp8 scales: {} block scale{} not max(amax, 1e-4)/448{} of the block; first {}",
                                          bad_scales, bad_scales == 1 ? " is" : "s are",
                                          c.scale_fmt == ScaleFmt::ue8m0 ? " rounded up to a power of two" : "", first_scale));
        }
        if (bad_codes) {
          r.reasons.push_back(fmt::format("fp8 codes: {} e4m3 code{} not the round-to-nearest-even encoding of the value "
                                          "with the block's scale; first {}",
                                          bad_codes, bad_codes == 1 ? " is" : "s are", first_code));
        }
      }
    }
  }
  for (const auto& v : run.reasons) r.reasons.push_back(v);
  r.verdict = r.reasons.empty() ? Verdict::pass : Verdict::fail;
}

}  // namespace mla::certify
