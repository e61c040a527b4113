// The template for a kernel of your own behind the plug-in C ABI (mla/plugin/mla_plugin.h): a
// decode, a cache append and (ABI 1.4) a prefill in the MHA form, a merge of attention states and
// V3.2's top-k, slow and plainly right (float64 accumulation, one rounding at the end), needing
// only that header. Copy it, replace the entry points (or drop the entries you do not have), fill
// the descriptor, certify:
//   g++ -O2 -shared -fPIC -fvisibility=hidden -I kernels/plugin/include my_kernel.cpp -o my_kernel.so
//   build/ci/tools/mla/mla certify --goldens fixtures/goldens --out report --plugin ./my_kernel.so
// Built as good_append; its variants (kernels/faults/plugins) include it, so its math exists once.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "mla/plugin/mla_plugin.h"

namespace {

constexpr int kDqk = 576, kDv = 512, kLatent = 512, kRope = 64;  // K: latent | rope; V: the latent
constexpr int kBf16TokenBytes = 2 * kDqk, kFp8TokenBytes = 656;  // byte layouts: the header's CACHE_*

float bf16_to_float(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t bf16_from_float(float f) {  // round to nearest even; a NaN stays a (quiet) NaN
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu) != 0) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// float8 e4m3fn: bias 7, no infinities, S.1111.111 is NaN, subnormals m·2^-9. The 256 codes are
// decoded once: ldexp per element was most of a slot's load.
const std::vector<double> kE4m3 = [] {
  std::vector<double> t(256);
  for (int c = 0; c < 256; ++c) {
    const int e = (c >> 3) & 0xF, m = c & 7;
    const double v = e == 0 ? std::ldexp(static_cast<double>(m), -9) : std::ldexp(1.0 + m / 8.0, e - 7);
    t[c] = e == 15 && m == 7 ? NAN : c >> 7 ? -v : v;
  }
  return t;
}();

// The nearest e4m3fn code (ties to the even code), saturating at 448: a search, slow but right.
uint8_t e4m3_from_float(float x) {
  if (std::isnan(x)) return 0x7F;
  const double a = std::fabs(static_cast<double>(x));
  int best = 0;
  for (int c = 1; c <= 0x7E; ++c) {
    const double err = std::fabs(kE4m3[c] - a), best_err = std::fabs(kE4m3[best] - a);
    if (err < best_err || (err == best_err && (c & 1) == 0)) best = c;
  }
  return static_cast<uint8_t>(best | (x < 0 ? 0x80 : 0));
}

// q·k over the 576 values in float64, in four partial sums: with one running sum every add waits
// for the one before it. The result differs from one running sum by float64 roundoff only.
double dot_qk(const double* q, const double* k) {
  double part[4] = {0, 0, 0, 0};
  for (int d = 0; d < kDqk; d += 4) {
    for (int i = 0; i < 4; ++i) part[i] += q[d + i] * k[d + i];
  }
  return (part[0] + part[1]) + (part[2] + part[3]);
}

// Cache slot `slot` as 576 exact doubles (bf16 values, or e4m3 code × its block's float32
// scale). The cache is bytes with no alignment promised: memcpy, never a cast.
void load_slot(const mla_plugin_decode_args& a, int64_t slot, double* k) {
  uint16_t bf[kDqk];
  if (a.cache_format == MLA_PLUGIN_CACHE_BF16) {
    std::memcpy(bf, a.kv_cache + slot * kBf16TokenBytes, sizeof bf);
    for (int d = 0; d < kDqk; ++d) k[d] = bf16_to_float(bf[d]);
    return;
  }
  const uint8_t* p = a.kv_cache + slot * kFp8TokenBytes;  // 512 codes | 4 float32 scales | 64 bf16
  float scales[4];
  std::memcpy(scales, p + kLatent, sizeof scales);
  std::memcpy(bf, p + kLatent + sizeof scales, 2 * kRope);
  for (int d = 0; d < kLatent; ++d) k[d] = kE4m3[p[d]] * static_cast<double>(scales[d / 128]);
  for (int j = 0; j < kRope; ++j) k[kLatent + j] = bf16_to_float(bf[j]);
}

int64_t slot_of(const mla_plugin_decode_args& a, int64_t b, int64_t t) {  // pages need not be contiguous
  return int64_t{a.block_table[b * a.max_blocks + t / a.page_size]} * a.page_size + t % a.page_size;
}

// The positions query token s of sequence b attends: dense, a prefix (causal: s sees itself and
// what precedes it); sparse, the listed ones in [0, L), the rest skipped, never clamped.
void attended(const mla_plugin_decode_args& a, int64_t b, int64_t s, std::vector<int64_t>& positions) {
  const int64_t L = a.cache_seqlens[b];
  positions.clear();
  const int64_t end = a.topk > 0 ? 0 : a.causal ? std::min(L - a.s_q + s, L - 1) + 1 : L;
  for (int64_t t = 0; t < end; ++t) positions.push_back(t);
  for (int64_t j = 0; j < a.topk; ++j) {
    const int32_t t = a.indices[(b * a.s_q + s) * a.topk + j];
    if (t >= 0 && t < L) positions.push_back(t);
  }
}

// Host memory in and out, all work done before returning; mla_plugin_decode_args lists the checks.
int32_t decode(const mla_plugin_decode_args* args, char* error, size_t error_size) {
  if (!args || args->struct_size < sizeof(mla_plugin_decode_args)) {
    std::snprintf(error, error_size, "decode arguments from an older host ABI");
    return MLA_PLUGIN_ERROR;
  }
  const mla_plugin_decode_args& a = *args;  // d_qk and d_v: always 576 and 512
  const int64_t S = a.s_q, H = a.heads;
  std::vector<double> q(H * kDqk), k(kDqk);
  std::vector<int64_t> positions;
  for (int64_t row = 0; row < a.batch * S; ++row) {  // row: query token s of sequence b
    const int64_t b = row / S, s = row % S;
    attended(a, b, s, positions);
    const std::size_t n = positions.size();
    for (int64_t i = 0; i < H * kDqk; ++i) q[i] = bf16_to_float(a.q[row * H * kDqk + i]);
    // Pass 1: every score and each head's maximum, so that pass 2's exp() cannot overflow.
    std::vector<double> scores(H * n), mx(H, -INFINITY);
    for (std::size_t j = 0; j < n; ++j) {
      load_slot(a, slot_of(a, b, positions[j]), k.data());
      for (int64_t h = 0; h < H; ++h) {
        scores[h * n + j] = a.softmax_scale * dot_qk(&q[h * kDqk], k.data());
        mx[h] = std::max(mx[h], scores[h * n + j]);
      }
    }
    // Pass 2: P·V over the latent (V is K's first 512 values), normalized at the end.
    std::vector<double> acc(H * kDv), sum(H);
    for (std::size_t j = 0; j < n; ++j) {
      load_slot(a, slot_of(a, b, positions[j]), k.data());
      for (int64_t h = 0; h < H; ++h) {
        const double w = std::exp(scores[h * n + j] - mx[h]);
        sum[h] += w;
        for (int d = 0; d < kDv; ++d) acc[h * kDv + d] += w * k[d];
      }
    }
    float* out = static_cast<float*>(a.out) + row * H * kDv;
    for (int64_t i = 0; i < H * kDv; ++i) out[i] = static_cast<float>(n == 0 ? 0.0 : acc[i] / sum[i / kDv]);
    for (int64_t h = 0; h < H; ++h) a.lse[(b * H + h) * S + s] = n == 0 ? INFINITY : mx[h] + std::log(sum[h]);
  }
  return MLA_PLUGIN_OK;
}

// Every token's slot, found before the first write, so that a refused call leaves the cache as it was.
int32_t find_slots(const mla_plugin_append_args& a, std::vector<int64_t>& slots, char* error, size_t error_size) {
  slots.assign(static_cast<std::size_t>(std::max(0, a.num_tokens)), 0);
  for (int32_t i = 0; i < a.num_tokens; ++i) {
    const int32_t seq = a.seq_ids[i], pos = a.positions[i];
    if (seq < 0 || seq >= a.batch || pos < 0) {
      std::snprintf(error, error_size, "token %d: sequence %d / position %d is malformed", i, seq, pos);
      return MLA_PLUGIN_ERROR;
    }
    const int64_t page = pos / a.page_size;
    const int32_t block = page < a.max_blocks ? a.block_table[int64_t{seq} * a.max_blocks + page] : -1;
    if (pos >= a.max_seq_len || block < 0 || block >= a.num_blocks) {  // CAPACITY, not ERROR: the cache is full
      std::snprintf(error, error_size, "cache capacity exceeded: token %d of sequence %d at position %d "
                    "has no slot (max_seq_len %lld)", i, seq, pos, static_cast<long long>(a.max_seq_len));
      return MLA_PLUGIN_CAPACITY;
    }
    slots[static_cast<std::size_t>(i)] = int64_t{block} * a.page_size + pos % a.page_size;
  }
  return MLA_PLUGIN_OK;
}

// One token's cache bytes: RMSNorm(latent) · weight and RoPE(k_pe) in float64, one rounding to
// bf16; FP8 then quantizes that bf16 latent per 128 values with the recipe's float32 scale.
void encode_token(const mla_plugin_append_args& a, const uint16_t* x, const uint16_t* pe, int32_t position,
                  uint32_t recipe, uint8_t* token) {
  double v[kDqk], ss = 0;
  for (int j = 0; j < kLatent; ++j) ss += static_cast<double>(bf16_to_float(x[j])) * bf16_to_float(x[j]);
  const double inv_rms = 1.0 / std::sqrt(ss / kLatent + a.eps);
  for (int j = 0; j < kLatent; ++j) v[j] = bf16_to_float(x[j]) * inv_rms * bf16_to_float(a.kv_norm_weight[j]);
  for (int j = 0; j < kRope / 2; ++j) {  // interleaved pairs (2j, 2j+1), DeepSeek's layout
    const double angle = position * a.inv_freq[j], c = std::cos(angle), s = std::sin(angle);
    const double x0 = bf16_to_float(pe[2 * j]), x1 = bf16_to_float(pe[2 * j + 1]);
    v[kLatent + 2 * j] = x0 * c - x1 * s;
    v[kLatent + 2 * j + 1] = x0 * s + x1 * c;
  }
  uint16_t bf[kDqk];
  for (int j = 0; j < kDqk; ++j) bf[j] = bf16_from_float(static_cast<float>(v[j]));
  if (a.cache_format == MLA_PLUGIN_CACHE_BF16) {
    std::memcpy(token, bf, sizeof bf);
    return;
  }
  for (int blk = 0; blk < kLatent / 128; ++blk) {
    float amax = 0;
    for (int j = 0; j < 128; ++j) amax = std::max(amax, std::fabs(bf16_to_float(bf[128 * blk + j])));
    float scale = recipe == MLA_PLUGIN_RECIPE_FLASHMLA ? std::max(amax / 448.0f, 1e-4f) : std::max(amax, 1e-4f) / 448.0f;
    int e = 0;  // UE8M0: the scale rounded up to a power of two
    if (a.scale_fmt == MLA_PLUGIN_SCALE_UE8M0 && std::frexp(scale, &e) != 0.5f) scale = std::ldexp(1.0f, e);
    for (int j = 0; j < 128; ++j) token[128 * blk + j] = e4m3_from_float(bf16_to_float(bf[128 * blk + j]) / scale);
    std::memcpy(token + kLatent + 4 * blk, &scale, 4);
  }
  std::memcpy(token + kLatent + 16, bf + kLatent, 2 * kRope);
}

// Writes exactly the slots the tokens map to (every byte of each): the certifier compares the rest.
int32_t append(const mla_plugin_append_args* args, char* error, size_t error_size) {
  if (!args || !MLA_PLUGIN_HAS_FIELD(mla_plugin_append_args, stream, args->struct_size)) {
    std::snprintf(error, error_size, "append arguments from an older host ABI");
    return MLA_PLUGIN_ERROR;
  }
  const mla_plugin_append_args& a = *args;  // cache_format: one of append_formats, from the host
  std::vector<int64_t> slots;
  if (const int32_t rc = find_slots(a, slots, error, error_size); rc != MLA_PLUGIN_OK) return rc;
  // The FP8 recipe asked for: a 1.1 host's args end before fp8_recipe, which means DeepSeek's.
  const bool has_recipe = MLA_PLUGIN_HAS_FIELD(mla_plugin_append_args, fp8_recipe, a.struct_size) && a.fp8_recipe;
  const uint32_t recipe = has_recipe ? a.fp8_recipe : MLA_PLUGIN_RECIPE_DEEPSEEK_V32;
  const int64_t bytes = a.cache_format == MLA_PLUGIN_CACHE_FP8 ? kFp8TokenBytes : kBf16TokenBytes;
  for (int32_t i = 0; i < a.num_tokens; ++i) {
    uint8_t* token = a.kv_cache + slots[static_cast<std::size_t>(i)] * bytes;
    encode_token(a, a.latent + int64_t{i} * kLatent, a.k_pe + int64_t{i} * kRope, a.positions[i], recipe, token);
  }
  return MLA_PLUGIN_OK;
}

// ---- prefill (ABI 1.4): MHA form, per head q·k over 192 values, V 128 wide ----------------------

constexpr int kMhaDqk = 192, kMhaDv = 128;

// Where a variant of this template departs from the right prefill (kernels/faults/plugins): the
// template itself departs nowhere.
struct PrefillDeparture {
  int sees_extra = 0;      // a causal row attends this many keys past its last one
  bool top_left = false;   // causal mask aligned top-left (query i sees keys j <= i)
  bool own_scale = false;  // 192^-0.5 instead of the scale it is given (mscale dropped)
  bool lse_log2 = false;   // lse in base 2 without declaring it
  bool flashinfer = false; // lse base 2, [total_q, heads], -inf for an empty row (FlashInfer's)
  bool skips_empty = false;  // writes nothing for a row that attends no key
};

// Every row of every sequence: scores in float64 over the keys the mask allows, the maximum
// first so exp() cannot overflow, out and lse written for every (row, head), an empty row 0 and
// +inf (or the declared -inf).
int32_t prefill_with(const mla_plugin_prefill_args* args, const PrefillDeparture& dep, char* error, size_t error_size) {
  if (!args || args->struct_size < sizeof(mla_plugin_prefill_args)) {
    std::snprintf(error, error_size, "prefill arguments from an older host ABI");
    return MLA_PLUGIN_ERROR;
  }
  const mla_plugin_prefill_args& a = *args;
  if (a.d_qk != kMhaDqk || a.d_v != kMhaDv) {
    std::snprintf(error, error_size, "d_qk %d / d_v %d: this prefill takes 192 / 128", a.d_qk, a.d_v);
    return MLA_PLUGIN_UNSUPPORTED;
  }
  const int64_t H = a.heads;
  const double scale = dep.own_scale ? 1.0 / std::sqrt(static_cast<double>(kMhaDqk)) : a.softmax_scale;
  std::vector<double> q(kMhaDqk), scores;
  for (int32_t b = 0; b < a.batch; ++b) {
    const int64_t q0 = a.cu_seqlens_q[b], s_q = a.cu_seqlens_q[b + 1] - q0;
    const int64_t k0 = a.cu_seqlens_k[b], s_k = a.cu_seqlens_k[b + 1] - k0;
    for (int64_t i = 0; i < s_q; ++i) {
      const int64_t row = q0 + i;
      int64_t last = s_k - 1;  // the last key the row attends; -1: none
      if (a.causal) last = std::min(s_k - 1, (dep.top_left ? i : s_k - s_q + i) + dep.sees_extra);
      const int64_t n = std::max<int64_t>(0, last + 1);
      for (int64_t h = 0; h < H; ++h) {
        float* out = static_cast<float*>(a.out) + (row * H + h) * kMhaDv;
        const int64_t lse_at = dep.flashinfer ? row * H + h : h * a.total_q + row;
        if (n == 0) {
          if (dep.skips_empty) continue;
          for (int d = 0; d < kMhaDv; ++d) out[d] = 0.0f;
          a.lse[lse_at] = dep.flashinfer ? -INFINITY : INFINITY;
          continue;
        }
        for (int d = 0; d < kMhaDqk; ++d) q[d] = bf16_to_float(a.q[(row * H + h) * kMhaDqk + d]);
        scores.assign(static_cast<std::size_t>(n), 0.0);
        double mx = -INFINITY;
        for (int64_t j = 0; j < n; ++j) {
          const uint16_t* k = a.k + ((k0 + j) * H + h) * kMhaDqk;
          double dot = 0;
          for (int d = 0; d < kMhaDqk; ++d) dot += q[d] * bf16_to_float(k[d]);
          scores[j] = scale * dot;
          mx = std::max(mx, scores[j]);
        }
        double sum = 0, acc[kMhaDv] = {};
        for (int64_t j = 0; j < n; ++j) {
          const double w = std::exp(scores[j] - mx);
          sum += w;
          const uint16_t* v = a.v + ((k0 + j) * H + h) * kMhaDv;
          for (int d = 0; d < kMhaDv; ++d) acc[d] += w * bf16_to_float(v[d]);
        }
        for (int d = 0; d < kMhaDv; ++d) out[d] = static_cast<float>(acc[d] / sum);
        const double lse = mx + std::log(sum);
        a.lse[lse_at] = static_cast<float>(dep.lse_log2 || dep.flashinfer ? lse / std::log(2.0) : lse);
      }
    }
  }
  return MLA_PLUGIN_OK;
}

int32_t prefill(const mla_plugin_prefill_args* args, char* error, size_t error_size) {
  return prefill_with(args, PrefillDeparture{}, error, error_size);
}

// The prefill entry: an implementation of its own in the certificate, under its own name.
mla_plugin_prefill_entry make_prefill_entry() {
  mla_plugin_prefill_entry e{};
  e.struct_size = sizeof e;
  e.name = "good_append_prefill";
  e.description = "example plug-in prefill: float64 accumulation";
  e.out_dtype = MLA_PLUGIN_OUT_F32;
  e.min_heads = 1, e.max_heads = 128;
  e.calls = MLA_PLUGIN_PREFILL_CAUSAL | MLA_PLUGIN_PREFILL_NON_CAUSAL | MLA_PLUGIN_PREFILL_VARLEN;
  e.max_total_tokens = int64_t{1} << 20;
  e.prefill = prefill;  // conventions and precision left zero: the canonical ones
  return e;
}
const mla_plugin_prefill_entry kPrefillEntry = make_prefill_entry();

// ---- merge (ABI 1.4): two partial attention states into one ------------------------------------

// Where a variant of this template departs from the right merge (kernels/faults/plugins).
struct MergeDeparture {
  bool base2 = false;           // takes and writes base-2 lse (FlashInfer's merge_state, [n, h])
  bool exp_not_exp2 = false;    // ... but weighs the sides with e^x: base 2 treated as natural
  bool inf_as_number = false;   // a +inf lse weighed as a number (e^(inf - inf): NaN)
};

float half_to_float(uint16_t h) {  // IEEE binary16
  const int e = (h >> 10) & 0x1F, m = h & 0x3FF;
  const float v = e == 0 ? std::ldexp(static_cast<float>(m), -24) : e == 31 ? (m ? NAN : INFINITY)
                                                                         : std::ldexp(1.0f + m / 1024.0f, e - 15);
  return h & 0x8000 ? -v : v;
}
uint16_t half_from_float(float f) {  // round to nearest even through the bits, saturating to inf
  if (std::isnan(f)) return 0x7E00;
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  double a = std::fabs(static_cast<double>(f));
  if (a >= 65520.0) return sign | 0x7C00;
  if (a < std::ldexp(1.0, -14)) return sign | static_cast<uint16_t>(std::nearbyint(a * std::ldexp(1.0, 24)));
  int e = 0;
  const double m = std::frexp(a, &e);  // a = m 2^e, m in [0.5, 1)
  const double q = std::nearbyint((m * 2 - 1) * 1024);  // ties to even under the default rounding
  return sign | static_cast<uint16_t>(((e - 1 + 15) << 10) + static_cast<int>(q));
}

// The value of element i of a state, and a value rounded into one.
double state_at(uint32_t dtype, const void* p, int64_t i) {
  if (dtype == MLA_PLUGIN_STATE_F32) return static_cast<const float*>(p)[i];
  const uint16_t b = static_cast<const uint16_t*>(p)[i];
  return dtype == MLA_PLUGIN_STATE_BF16 ? bf16_to_float(b) : half_to_float(b);
}
void state_put(uint32_t dtype, void* p, int64_t i, double x) {
  if (dtype == MLA_PLUGIN_STATE_F32) {
    static_cast<float*>(p)[i] = static_cast<float>(x);
    return;
  }
  const float f = static_cast<float>(x);
  static_cast<uint16_t*>(p)[i] = dtype == MLA_PLUGIN_STATE_BF16 ? bf16_from_float(f) : half_from_float(f);
}

// In float64: an infinite lse is an empty side (weight 0, its out never read); both empty give
// out 0 and lse -inf.
int32_t merge_with(const mla_plugin_merge_args* args, const MergeDeparture& dep, char* error, size_t error_size) {
  if (!args || args->struct_size < sizeof(mla_plugin_merge_args)) {
    std::snprintf(error, error_size, "merge arguments from an older host ABI");
    return MLA_PLUGIN_ERROR;
  }
  const mla_plugin_merge_args& a = *args;
  const int64_t N = a.tokens, H = a.heads, D = a.head_dim;
  const double ln2 = std::log(2.0);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t at = dep.base2 ? n * H + h : h * N + n;
      // Natural-log values of the two sides (base 2 times ln 2, unless the bug forgets it).
      const double to_e = dep.base2 && !dep.exp_not_exp2 ? ln2 : 1.0;
      const double la = a.lse_a[at] * to_e, lb = a.lse_b[at] * to_e;
      const bool ea = dep.inf_as_number ? std::isinf(la) && la < 0 : std::isinf(la);
      const bool eb = dep.inf_as_number ? std::isinf(lb) && lb < 0 : std::isinf(lb);
      const int64_t row = (n * H + h) * D;
      if (ea && eb) {
        for (int64_t d = 0; d < D; ++d) state_put(a.dtype, a.out, row + d, 0.0);
        a.lse[at] = -INFINITY;
        continue;
      }
      const double m = ea ? lb : eb ? la : std::max(la, lb);
      const double wa = ea ? 0.0 : std::exp(la - m), wb = eb ? 0.0 : std::exp(lb - m), sum = wa + wb;
      for (int64_t d = 0; d < D; ++d) {
        const double x = (wa ? wa * state_at(a.dtype, a.out_a, row + d) : 0.0) +
                         (wb ? wb * state_at(a.dtype, a.out_b, row + d) : 0.0);
        state_put(a.dtype, a.out, row + d, x / sum);
      }
      const double lse = m + std::log(sum);
      a.lse[at] = static_cast<float>(dep.base2 && !dep.exp_not_exp2 ? lse / ln2 : lse);
    }
  }
  return MLA_PLUGIN_OK;
}

int32_t merge(const mla_plugin_merge_args* args, char* error, size_t error_size) {
  return merge_with(args, MergeDeparture{}, error, error_size);
}

// The merge entry: an implementation of its own, under its own name.
mla_plugin_merge_entry make_merge_entry() {
  mla_plugin_merge_entry e{};
  e.struct_size = sizeof e;
  e.name = "good_append_merge";
  e.description = "example plug-in merge: float64 weights";
  e.dtypes = MLA_PLUGIN_STATE_BF16 | MLA_PLUGIN_STATE_F16 | MLA_PLUGIN_STATE_F32;
  e.num_head_dims = 0;  // any head_dim
  e.merge = merge;      // conventions left zero: natural log, [h, n], -inf when both sides are empty
  return e;
}
const mla_plugin_merge_entry kMergeEntry = make_merge_entry();

// ---- top-k (ABI 1.4): V3.2's selection over the indexer's logits --------------------------------

// Where a variant of this template departs from the right top-k (kernels/faults/plugins).
struct TopkDeparture {
  bool relative = false;         // indices counted from the row's start (vLLM's), declared
  bool drops_last_valid = false; // the largest logit is dropped when it sits at the row's last valid position
  bool pads_with_masked = false; // fewer valid positions than k: pads with masked ones instead of -1
};

// Exact: each row's valid positions (in range, finite) by descending logit, ties by position;
// the first min(k, count), then -1.
int32_t topk_with(const mla_plugin_topk_args* args, const TopkDeparture& dep, char* error, size_t error_size) {
  if (!args || args->struct_size < sizeof(mla_plugin_topk_args)) {
    std::snprintf(error, error_size, "top-k arguments from an older host ABI");
    return MLA_PLUGIN_ERROR;
  }
  const mla_plugin_topk_args& a = *args;
  std::vector<int64_t> valid;
  for (int64_t r = 0; r < a.rows; ++r) {
    const float* row = a.logits + r * a.n;
    const int64_t start = a.starts[r], end = a.ends[r];
    valid.clear();
    for (int64_t j = start; j < end; ++j) {
      if (std::isfinite(row[j])) valid.push_back(j);
    }
    std::stable_sort(valid.begin(), valid.end(), [&](int64_t x, int64_t y) { return row[x] > row[y]; });
    if (dep.drops_last_valid && !valid.empty()) {
      int64_t last = -1;
      for (int64_t j = start; j < end; ++j) last = std::isfinite(row[j]) ? j : last;
      if (valid.front() == last) valid.erase(valid.begin());
    }
    int32_t* out = a.indices + r * a.k;
    for (int32_t i = 0; i < a.k; ++i) {
      int64_t x = i < static_cast<int32_t>(valid.size()) ? valid[static_cast<std::size_t>(i)] : -1;
      if (x < 0 && dep.pads_with_masked) {
        for (int64_t j = start; j < end && x < 0; ++j) x = std::isfinite(row[j]) ? -1 : j;  // the first masked one
      }
      out[i] = x < 0 ? -1 : static_cast<int32_t>(dep.relative ? x - start : x);
    }
  }
  return MLA_PLUGIN_OK;
}

int32_t topk(const mla_plugin_topk_args* args, char* error, size_t error_size) {
  return topk_with(args, TopkDeparture{}, error, error_size);
}

// The top-k entry: an implementation of its own, under its own name.
mla_plugin_topk_entry make_topk_entry() {
  mla_plugin_topk_entry e{};
  e.struct_size = sizeof e;
  e.name = "good_append_topk";
  e.description = "example plug-in top-k: exact, ties by position";
  e.num_ks = 0;  // any k
  e.max_n = 0;   // any row length
  e.topk = topk; // absolute indices, unordered, float32 comparisons: the canonical declarations
  return e;
}
const mla_plugin_topk_entry kTopkEntry = make_topk_entry();

// ---- indexer logits (ABI 1.5): V3.2's lightning-indexer scores --------------------------------

// Where a variant of this template departs from the right scores (kernels/faults/plugins).
struct IndexerDeparture {
  bool no_relu = false;                 // sums q·k over the heads without the relu
  bool scale_after_each_token = false;  // paged: a key's scale read from the 4 bytes after its codes
  bool sees_next_token = false;         // paged, next_n 2: the first query token sees the second's position
};

// One row's score at one key: k_scale · Σ_h w_h · relu(q_h · k), in float64 over exact e4m3 values.
double indexer_score(const uint8_t* q, const float* w, int32_t heads, const uint8_t* k, double k_scale, bool relu) {
  double sum = 0;
  for (int32_t h = 0; h < heads; ++h) {
    double dot = 0;
    for (int d = 0; d < 128; ++d) dot += kE4m3[q[h * 128 + d]] * kE4m3[k[d]];
    sum += (relu ? std::max(dot, 0.0) : dot) * w[h];
  }
  return sum * k_scale;
}

// -inf outside each row's range, the float64 score rounded once to float32 inside it.
int32_t indexer_logits_with(const mla_plugin_indexer_logits_args* args, const IndexerDeparture& dep, char* error,
                            size_t error_size) {
  if (!args || args->struct_size < sizeof(mla_plugin_indexer_logits_args)) {
    std::snprintf(error, error_size, "indexer logits arguments from an older host ABI");
    return MLA_PLUGIN_ERROR;
  }
  const mla_plugin_indexer_logits_args& a = *args;
  const bool paged = a.layout == MLA_PLUGIN_INDEXER_PAGED;
  for (int64_t i = 0; i < a.rows * a.cols; ++i) a.logits[i] = -INFINITY;
  for (int64_t r = 0; r < a.rows; ++r) {
    const uint8_t* q = a.q + r * a.heads * 128;
    const float* w = a.weights + r * a.heads;
    int64_t begin = 0, end = 0, b = 0;
    if (paged) {
      b = r / a.next_n;
      const int64_t i = r % a.next_n;
      end = std::max<int64_t>(0, a.context_lens[b] - a.next_n + i + 1);
      if (dep.sees_next_token && a.next_n == 2 && i == 0) end = std::min<int64_t>(end + 1, a.context_lens[b]);
    } else {
      begin = a.ks[r], end = std::max<int64_t>(a.ks[r], a.ke[r]);
    }
    for (int64_t p = begin; p < end; ++p) {
      const uint8_t* k = nullptr;
      float scale = 0;
      if (paged) {
        const uint8_t* block = a.kv_cache + a.block_table[b * a.max_blocks + p / a.block_size] * a.block_size * 132;
        const int64_t off = p % a.block_size;
        k = block + off * 128;
        // The block's scale area follows all its tokens' codes; the bug reads as if each token were
        // [128 codes | its scale].
        std::memcpy(&scale, dep.scale_after_each_token ? block + off * 132 + 128 : block + a.block_size * 128 + off * 4, 4);
      } else {
        k = a.k_codes + p * 128;
        scale = a.k_scales[p];
      }
      a.logits[r * a.cols + p] = static_cast<float>(indexer_score(q, w, a.heads, k, scale, !dep.no_relu));
    }
  }
  return MLA_PLUGIN_OK;
}

int32_t indexer_logits(const mla_plugin_indexer_logits_args* args, char* error, size_t error_size) {
  return indexer_logits_with(args, IndexerDeparture{}, error, error_size);
}

// The indexer logits entry: an implementation of its own, under its own name.
mla_plugin_indexer_logits_entry make_indexer_logits_entry() {
  mla_plugin_indexer_logits_entry e{};
  e.struct_size = sizeof e;
  e.name = "good_append_indexer_logits";
  e.description = "example plug-in indexer logits: float64 sums of exact e4m3 values";
  e.layouts = MLA_PLUGIN_INDEXER_PAGED | MLA_PLUGIN_INDEXER_RAGGED;
  e.next_ns = 0;          // 1 and 2
  e.num_heads = 0;        // any head count
  e.num_block_sizes = 0;  // any block size
  e.max_context = 0;      // any width
  e.indexer_logits = indexer_logits;
  return e;
}
const mla_plugin_indexer_logits_entry kIndexerLogitsEntry = make_indexer_logits_entry();

// ---- indexer append (ABI 1.5): V3.2's keys into their paged 132-byte cache -----------------------

// Where a variant of this template departs from the right append (kernels/faults/plugins).
struct IndexerAppendDeparture {
  bool scale_after_each_token = false;  // each token laid out as [128 codes | its scale]
  bool clamp_after_divide = false;      // max(amax / 448, 1e-4): the clamp on the scale, not on amax
  bool writes_skipped_slots = false;    // a negative slot counted from the cache's end, not skipped
};

// vLLM's recipe in float32, byte for byte: s = max(amax, 1e-4) / 448 (ue8m0: the next power of
// two up), codes e4m3(k / s) to nearest even, saturated; a negative zero keeps its sign bit.
int32_t indexer_append_with(const mla_plugin_indexer_append_args* args, const IndexerAppendDeparture& dep, char* error,
                            size_t error_size) {
  if (!args || args->struct_size < sizeof(mla_plugin_indexer_append_args)) {
    std::snprintf(error, error_size, "indexer append arguments from an older host ABI");
    return MLA_PLUGIN_ERROR;
  }
  const mla_plugin_indexer_append_args& a = *args;
  const int64_t slots = a.num_blocks * a.block_size;
  for (int64_t t = 0; t < a.num_tokens; ++t) {
    int64_t slot = a.slot_mapping[t];
    if (slot < 0 && dep.writes_skipped_slots) slot += slots;
    if (slot < 0) continue;
    if (slot >= slots) {
      std::snprintf(error, error_size, "token %lld: slot %lld is past the cache's %lld slots", static_cast<long long>(t),
                    static_cast<long long>(slot), static_cast<long long>(slots));
      return MLA_PLUGIN_ERROR;
    }
    const uint16_t* k = a.keys + t * 128;
    float amax = 0;
    for (int d = 0; d < 128; ++d) amax = std::max(amax, std::fabs(bf16_to_float(k[d])));
    float s = dep.clamp_after_divide ? std::max(amax / 448.0f, 1e-4f) : std::max(amax, 1e-4f) / 448.0f;
    if (a.scale_fmt == MLA_PLUGIN_SCALE_UE8M0) {
      int e = 0;
      const float m = std::frexp(s, &e);  // s = m · 2^e, m in [0.5, 1)
      s = std::ldexp(1.0f, m == 0.5f ? e - 1 : e);
    }
    uint8_t* block = a.kv_cache + (slot / a.block_size) * a.block_size * 132;
    const int64_t off = slot % a.block_size;
    uint8_t* codes = dep.scale_after_each_token ? block + off * 132 : block + off * 128;
    uint8_t* scale = dep.scale_after_each_token ? block + off * 132 + 128 : block + a.block_size * 128 + off * 4;
    for (int d = 0; d < 128; ++d) {
      const float x = bf16_to_float(k[d]) / s;
      uint8_t c = e4m3_from_float(x);
      if (c == 0 && std::signbit(x)) c = 0x80;
      codes[d] = c;
    }
    std::memcpy(scale, &s, 4);
  }
  return MLA_PLUGIN_OK;
}

int32_t indexer_append(const mla_plugin_indexer_append_args* args, char* error, size_t error_size) {
  return indexer_append_with(args, IndexerAppendDeparture{}, error, error_size);
}

// The indexer append entry: an implementation of its own, under its own name.
mla_plugin_indexer_append_entry make_indexer_append_entry() {
  mla_plugin_indexer_append_entry e{};
  e.struct_size = sizeof e;
  e.name = "good_append_indexer_append";
  e.description = "example plug-in indexer append: vLLM's float32 recipe";
  e.scale_fmts = MLA_PLUGIN_SCALE_FP32 | MLA_PLUGIN_SCALE_UE8M0;
  e.fp32_scale_op = MLA_PLUGIN_INDEXER_SCALE_DIVIDE;
  e.num_block_sizes = 0;  // any block size
  e.indexer_append = indexer_append;
  return e;
}
const mla_plugin_indexer_append_entry kIndexerAppendEntry = make_indexer_append_entry();

// ---- sparse prefill (ABI 1.5): FlashMLA's flash_mla_sparse_fwd --------------------------------

// Where a variant of this template departs from the right sparse prefill (kernels/faults/plugins).
struct SparsePrefillDeparture {
  bool minus_one_as_zero = false;  // a -1 entry gathered as position 0
  bool lse_log2 = false;           // lse in base 2, undeclared
};

// Each row's keys gathered in index order, float64 scores of the exact bf16 values, a float64
// softmax with the sink in its denominator; out, max_logits and lse rounded once to float32.
int32_t sparse_prefill_with(const mla_plugin_sparse_prefill_args* args, const SparsePrefillDeparture& dep, char* error,
                            size_t error_size) {
  if (!args || args->struct_size < sizeof(mla_plugin_sparse_prefill_args)) {
    std::snprintf(error, error_size, "sparse prefill arguments from an older host ABI");
    return MLA_PLUGIN_ERROR;
  }
  const mla_plugin_sparse_prefill_args& a = *args;
  float* out = static_cast<float*>(a.out);
  std::vector<int64_t> keys;
  std::vector<double> s, acc(static_cast<std::size_t>(a.d_v));
  for (int64_t i = 0; i < a.s_q; ++i) {
    keys.clear();
    for (int32_t j = 0; j < a.topk; ++j) {
      int64_t idx = a.indices[i * a.topk + j];
      if (dep.minus_one_as_zero && idx == -1) idx = 0;
      const bool in_length = !a.topk_length || j < a.topk_length[i];
      if (idx >= 0 && idx < a.s_kv && in_length && std::find(keys.begin(), keys.end(), idx) == keys.end()) keys.push_back(idx);
    }
    for (int32_t h = 0; h < a.heads; ++h) {
      const uint16_t* q = a.q + (i * a.heads + h) * a.d_qk;
      const int64_t row = i * a.heads + h;
      float* o = out + row * a.d_v;
      if (keys.empty()) {
        for (int32_t d = 0; d < a.d_v; ++d) o[d] = 0.0f;
        a.max_logits[row] = -INFINITY;
        a.lse[row] = INFINITY;
        continue;
      }
      s.assign(keys.size(), 0.0);
      double m = -INFINITY;
      for (std::size_t k = 0; k < keys.size(); ++k) {
        const uint16_t* kv = a.kv + keys[k] * a.d_qk;
        double dot = 0;
        for (int32_t d = 0; d < a.d_qk; ++d) dot += static_cast<double>(bf16_to_float(q[d])) * bf16_to_float(kv[d]);
        s[k] = a.softmax_scale * dot;
        m = std::max(m, s[k]);
      }
      double sum = 0;
      for (double& x : s) sum += (x = std::exp(x - m));
      const double denom = sum + (a.attn_sink ? std::exp(static_cast<double>(a.attn_sink[h]) - m) : 0.0);
      std::fill(acc.begin(), acc.end(), 0.0);
      for (std::size_t k = 0; k < keys.size(); ++k) {
        const uint16_t* v = a.kv + keys[k] * a.d_qk;
        for (int32_t d = 0; d < a.d_v; ++d) acc[static_cast<std::size_t>(d)] += s[k] / denom * bf16_to_float(v[d]);
      }
      for (int32_t d = 0; d < a.d_v; ++d) o[d] = static_cast<float>(acc[static_cast<std::size_t>(d)]);
      const double lse = m + std::log(sum);
      a.max_logits[row] = static_cast<float>(m);
      a.lse[row] = static_cast<float>(dep.lse_log2 ? lse / std::log(2.0) : lse);
    }
  }
  return MLA_PLUGIN_OK;
}

int32_t sparse_prefill(const mla_plugin_sparse_prefill_args* args, char* error, size_t error_size) {
  return sparse_prefill_with(args, SparsePrefillDeparture{}, error, error_size);
}

// The sparse prefill entry: an implementation of its own, under its own name.
mla_plugin_sparse_prefill_entry make_sparse_prefill_entry() {
  mla_plugin_sparse_prefill_entry e{};
  e.struct_size = sizeof e;
  e.name = "good_append_sparse_prefill";
  e.description = "example plug-in sparse prefill: float64 softmax over the gathered keys, float32 out";
  e.out_dtype = MLA_PLUGIN_OUT_F32;
  e.operand_precision = MLA_PLUGIN_PRECISION_FP64;  // exact bf16 values read into float64
  e.accum_precision = MLA_PLUGIN_PRECISION_FP64;
  e.num_heads = 0;       // any head count
  e.topk_multiple = 1;   // any topk
  e.d_qks = 0;           // 576 and 512
  e.takes_sink = 1;
  e.takes_topk_length = 1;
  e.sparse_prefill = sparse_prefill;
  return e;
}
const mla_plugin_sparse_prefill_entry kSparsePrefillEntry = make_sparse_prefill_entry();

// Left zero, the declarations (lse base, layout, empty-row value, index numbering, precision) are
// the canonical conventions: a kernel that differs must declare it, or be judged wrong.
mla_plugin_descriptor make_descriptor() {
  mla_plugin_descriptor d{};               // zero: every optional field absent
  d.abi_version = MLA_PLUGIN_ABI_VERSION;  // the host refuses another major version
  d.struct_size = sizeof d;                // tells the host which later fields exist
  d.abi_minor = MLA_PLUGIN_ABI_MINOR;
  d.name = "good_append";                  // the kernel's row in the report
  d.version = "1.0.0";                     // part of --resume's identity: change it with the kernel
  d.description = "example plug-in: float64 accumulation, good_append";
  d.backend = "cpu";                       // host memory: flags has no MLA_PLUGIN_FLAG_DEVICE_MEMORY
  d.out_dtype = MLA_PLUGIN_OUT_F32;
  // The claims: every catalog case inside them must pass, the rest are NOT_CLAIMED (a domain that
  // ranges and masks cannot state is a can_implement predicate on the shape).
  d.caps.cache_formats = MLA_PLUGIN_CACHE_BF16 | MLA_PLUGIN_CACHE_FP8;
  d.caps.features = MLA_PLUGIN_DENSE | MLA_PLUGIN_SPARSE | MLA_PLUGIN_VARLEN;
  d.caps.min_heads = 1, d.caps.max_heads = 128;
  d.caps.min_s_q = 1, d.caps.max_s_q = 64;  // query tokens per sequence per call; any page size
  d.decode = decode;  // (and `unavailable`: a CUDA plug-in says why it cannot run here, e.g. no device)
  // append_fp8_recipes left 0: DeepSeek's recipe only (the host never asks for FlashMLA's).
  d.append = append;
  d.append_formats = MLA_PLUGIN_CACHE_BF16 | MLA_PLUGIN_CACHE_FP8;
  d.append_scale_fmts = MLA_PLUGIN_SCALE_FP32 | MLA_PLUGIN_SCALE_UE8M0;
  d.prefill = &kPrefillEntry;  // 1.4: certified as good_append_prefill
  d.merge = &kMergeEntry;      // 1.4: certified as good_append_merge
  d.topk = &kTopkEntry;        // 1.4: certified as good_append_topk
  d.indexer_logits = &kIndexerLogitsEntry;  // 1.5: certified as good_append_indexer_logits
  d.indexer_append = &kIndexerAppendEntry;  // 1.5: certified as good_append_indexer_append
  d.sparse_prefill = &kSparsePrefillEntry;  // 1.5: certified as good_append_sparse_prefill
  return d;
}

}  // namespace

#ifndef MLA_PLUGIN_TEMPLATE_NO_EXPORT  // defined by the variants, which export their own
extern "C" MLA_PLUGIN_EXPORT const mla_plugin_descriptor* mla_plugin_get_descriptor(uint32_t host_abi_version) {
  static const mla_plugin_descriptor descriptor = make_descriptor();
  return host_abi_version == MLA_PLUGIN_ABI_VERSION ? &descriptor : nullptr;
}
#endif
