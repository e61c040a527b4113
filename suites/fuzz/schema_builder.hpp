// The builder of fuzz_golden_schema (its file comment says what it is for): the input bytes
// choose the contents of a golden file, HDF5 writes them. Its attention and layer case writers
// are here; the prefill and merge ones in schema_prefill_merge.cpp, the indexer one in
// schema_indexer.cpp, file() in fuzz_golden_schema.cpp.
#pragma once

#include <fuzzer/FuzzedDataProvider.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "exercise.hpp"
#include "mla/core/generator.hpp"
#include "mla/core/numeric.hpp"
#include "mla/core/sha256.hpp"
#include "mla/golden/families.hpp"
#include "mla/golden/golden.hpp"

namespace mla::fuzz::schema {


// Datasets above this many elements are created chunked and never written: HDF5 keeps no
// storage for them, so a file can claim a huge array at no cost, as a lying header would.
inline constexpr int64_t kWriteCap = int64_t{1} << 16;
// Generated tensors the builder describes with a correct sha256 are regenerated here first.
inline constexpr int64_t kGenerateCap = int64_t{1} << 16;

inline constexpr int64_t kWild[] = {0,
                             -1,
                             2,
                             576,
                             656,
                             std::numeric_limits<int32_t>::max(),
                             int64_t{std::numeric_limits<int32_t>::max()} + 1,
                             std::numeric_limits<int32_t>::min(),
                             int64_t{1} << 28,
                             int64_t{1} << 40,
                             std::numeric_limits<int64_t>::max(),
                             std::numeric_limits<int64_t>::min()};

// The builder's own arithmetic on chosen sizes saturates: a wild value must reach the loader as
// a huge extent, not overflow here.
inline int64_t sadd(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_add_overflow(a, b, &r) ? (b > 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min()) : r;
}
inline int64_t smul(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_mul_overflow(a, b, &r) ? ((a < 0) != (b < 0) ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max()) : r;
}

struct Builder {
  FuzzedDataProvider& in;

  // How rarely this file deviates from the schema (chosen per file: from often to never), so
  // that some inputs get every check right and reach the end of the loader.
  int rarity = 1;

  // One time in `n * rarity`, deviate. The provider returns the low end once the input is used
  // up, so that case reads as "no deviation".
  bool odd(int n = 16) {
    if (rarity == 0) return false;
    const int m = n * rarity;
    return in.ConsumeIntegralInRange<int>(0, m - 1) == m - 1;
  }
  // Usually a value in [lo, hi]; sometimes something from the edges of the types.
  int64_t num(int64_t lo, int64_t hi) {
    if (odd()) return kWild[in.ConsumeIntegralInRange<size_t>(0, std::size(kWild) - 1)];
    return in.ConsumeIntegralInRange<int64_t>(lo, hi);
  }

  static void write_attr(hid_t obj, const char* name, hid_t type, hid_t space, const void* data) {
    const hid_t a = H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
    if (a >= 0) {
      H5Awrite(a, type, data);
      H5Aclose(a);
    }
  }
  static void scalar(hid_t obj, const char* name, hid_t type, const void* data) {
    const hid_t s = H5Screate(H5S_SCALAR);
    write_attr(obj, name, type, s, data);
    H5Sclose(s);
  }
  // Variable-length UTF-8, as h5py writes a Python str; sometimes fixed-length, NUL padded.
  void str_raw(hid_t obj, const char* name, const std::string& v) {
    const hid_t t = H5Tcopy(H5T_C_S1);
    if (odd(4)) {
      H5Tset_size(t, v.size() + 1 + in.ConsumeIntegralInRange<size_t>(0, 3));
      H5Tset_strpad(t, H5T_STR_NULLPAD);
      std::vector<char> buf(H5Tget_size(t), '\0');
      std::memcpy(buf.data(), v.data(), v.size());
      scalar(obj, name, t, buf.data());
    } else {
      H5Tset_size(t, H5T_VARIABLE);
      H5Tset_cset(t, H5T_CSET_UTF8);
      const char* p = v.c_str();
      scalar(obj, name, t, &p);
    }
    H5Tclose(t);
  }
  // An attribute of the wrong kind in place of the intended one.
  void wrong(hid_t obj, const char* name) {
    switch (in.ConsumeIntegralInRange<int>(0, 3)) {
      case 0: str_raw(obj, name, in.ConsumeRandomLengthString(12)); break;
      case 1: { const double d = in.ConsumeFloatingPoint<double>(); scalar(obj, name, H5T_NATIVE_DOUBLE, &d); break; }
      case 2: {
        const hsize_t n = in.ConsumeIntegralInRange<hsize_t>(0, 40);
        std::vector<int64_t> v(n, 1);
        const hid_t s = H5Screate_simple(1, &n, nullptr);
        write_attr(obj, name, H5T_NATIVE_INT64, s, v.data());
        H5Sclose(s);
        break;
      }
      default: { const uint8_t b = in.ConsumeIntegral<uint8_t>(); scalar(obj, name, H5T_NATIVE_UINT8, &b); break; }
    }
  }
  void i64(hid_t obj, const char* name, int64_t v) {
    if (odd()) return;  // missing
    if (odd()) return wrong(obj, name);
    scalar(obj, name, H5T_NATIVE_INT64, &v);
  }
  void f64(hid_t obj, const char* name, double v) {
    if (odd()) return;
    if (odd()) return wrong(obj, name);
    if (odd(8) && std::abs(v) < 1e18) {  // an integer where a real is expected is legal (rope_factor = 40)
      const int64_t i = static_cast<int64_t>(v);
      return scalar(obj, name, H5T_NATIVE_INT64, &i);
    }
    scalar(obj, name, H5T_NATIVE_DOUBLE, &v);
  }
  void str(hid_t obj, const char* name, const std::string& v) {
    if (odd()) return;
    if (odd()) return wrong(obj, name);
    str_raw(obj, name, odd() ? in.ConsumeRandomLengthString(16) : v);
  }
  // A string from `choices`, or rarely anything.
  std::string pick(std::initializer_list<const char*> choices) {
    if (odd(32)) return in.ConsumeRandomLengthString(16);
    return *(choices.begin() + in.ConsumeIntegralInRange<size_t>(0, choices.size() - 1));
  }
  // A family of the catalog description (fixtures/catalog.json), or rarely anything.
  std::string pick_family() {
    if (odd(32)) return in.ConsumeRandomLengthString(16);
    const auto& all = mla::golden::families();
    return all[in.ConsumeIntegralInRange<size_t>(0, all.size() - 1)].name;
  }

  static hid_t group(hid_t parent, const std::string& name) {
    const hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    const hid_t g = H5Gcreate2(parent, name.c_str(), lcpl, H5P_DEFAULT, H5P_DEFAULT);
    H5Pclose(lcpl);
    return g;
  }

  // A dataset at `path` (intermediate groups created) meant to have `dtype` and `shape`; the
  // bytes come from `fill` (sized to the element count) unless it is too big to store.
  template <class T>
  void dataset(hid_t parent, const std::string& path, const char* dtype, std::vector<int64_t> shape,
               const std::vector<T>* data = nullptr) {
    if (odd(24)) return;  // missing
    std::string dtype_attr = dtype;
    hid_t file_type = std::is_same_v<T, double>     ? H5T_IEEE_F64LE
                      : std::is_same_v<T, float>    ? H5T_IEEE_F32LE
                      : std::is_same_v<T, uint16_t> ? H5T_STD_U16LE
                      : std::is_same_v<T, int32_t>  ? H5T_STD_I32LE
                                                    : H5T_STD_U8LE;
    const hid_t mem_type = std::is_same_v<T, double>     ? H5T_NATIVE_DOUBLE
                           : std::is_same_v<T, float>    ? H5T_NATIVE_FLOAT
                           : std::is_same_v<T, uint16_t> ? H5T_NATIVE_UINT16
                           : std::is_same_v<T, int32_t>  ? H5T_NATIVE_INT32
                                                         : H5T_NATIVE_UINT8;
    if (odd(24)) file_type = in.PickValueInArray({H5T_IEEE_F64BE, H5T_STD_I16LE, H5T_STD_U32LE, H5T_IEEE_F32LE,
                                                  H5T_STD_U16BE, H5T_STD_I8LE});
    if (odd(24)) dtype_attr = pick({"float64", "float32", "bfloat16", "int32", "fp8_kv_v32", "uint8", "float16"});
    if (!shape.empty() && odd(16)) {
      auto& d = shape[in.ConsumeIntegralInRange<size_t>(0, shape.size() - 1)];
      d = odd(4) ? num(0, 1 << 20) : sadd(d, in.ConsumeIntegralInRange<int64_t>(-1, 1));
    }
    if (odd(32)) shape.push_back(1);
    std::vector<hsize_t> dims;
    int64_t n = 1;
    bool representable = true;
    for (int64_t d : shape) {
      if (d < 0) return;  // no HDF5 dataspace has a negative extent
      dims.push_back(static_cast<hsize_t>(d));
      if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) representable = false;
      if (representable) n *= d;
    }
    const hid_t space = dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
    if (space < 0) return;
    const bool store = representable && n <= kWriteCap;
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (!store || (!dims.empty() && odd(8))) {
      // Chunked, the way a lying or a compressed golden is: one element per chunk along the
      // huge dimensions is allowed by HDF5 for any extent.
      std::vector<hsize_t> chunk(dims.size(), 1);
      if (!dims.empty()) {
        chunk.back() = std::max<hsize_t>(1, std::min<hsize_t>(dims.back(), 1024));
        H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data());
        if (store && odd(2)) H5Pset_deflate(dcpl, 1);
      }
    }
    const hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    const hid_t d = H5Dcreate2(parent, path.c_str(), file_type, space, lcpl, dcpl, H5P_DEFAULT);
    H5Pclose(lcpl);
    H5Pclose(dcpl);
    if (d >= 0) {
      if (store && n > 0 && !odd(24)) {
        std::vector<T> buf(static_cast<size_t>(n));
        if (data && data->size() == buf.size()) {
          buf = *data;
        } else {
          const size_t bytes = std::min(in.remaining_bytes(), buf.size() * sizeof(T)) / 2;
          const auto raw = in.ConsumeBytes<uint8_t>(bytes);
          if (!raw.empty()) std::memcpy(buf.data(), raw.data(), raw.size());
        }
        H5Dwrite(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data());
      }
      if (!odd(32)) str_raw(d, "dtype", dtype_attr);
      H5Dclose(d);
    }
    H5Sclose(space);
  }

  // A generated-tensor descriptor (SCHEMA: splitmix64-uniform-v1), with the right sha256 when
  // the tensor is small enough to regenerate here, and sometimes a wrong one.
  void generated(hid_t parent, const std::string& path, const char* dtype, std::vector<int64_t> shape) {
    if (odd(24)) return;
    const hid_t g = group(parent, path);
    if (g < 0) return;
    const int64_t seed = num(0, 100), stream = num(0, 5);
    const double mean = 0, sd = odd() ? in.ConsumeFloatingPoint<double>() : 1.0;
    if (odd(16) && !shape.empty()) shape[0] = num(0, 1 << 20);
    int64_t n = 1;
    for (int64_t d : shape) n = (d < 0 || (d != 0 && n > kGenerateCap / d)) ? kGenerateCap + 1 : n * d;
    std::string digest(64, '0');
    if (n <= kGenerateCap && !odd()) {
      if (std::string_view(dtype) == "bfloat16") {
        std::vector<uint16_t> v(static_cast<size_t>(n));
        mla::gen::fill_bf16(static_cast<uint64_t>(seed), static_cast<uint64_t>(stream), mean, sd, v);
        digest = mla::sha256_hex({reinterpret_cast<const uint8_t*>(v.data()), v.size() * 2});
      } else {
        std::vector<double> v(static_cast<size_t>(n));
        mla::gen::fill_f64(static_cast<uint64_t>(seed), static_cast<uint64_t>(stream), mean, sd, v);
        digest = mla::sha256_hex({reinterpret_cast<const uint8_t*>(v.data()), v.size() * 8});
      }
    }
    str(g, "algorithm", "splitmix64-uniform-v1");
    i64(g, "seed", seed);
    i64(g, "stream", stream);
    f64(g, "mean", mean);
    f64(g, "std", sd);
    if (!odd()) {
      const hsize_t r = shape.size();
      const hid_t s = H5Screate_simple(1, &r, nullptr);
      write_attr(g, "shape", H5T_NATIVE_INT64, s, shape.data());
      H5Sclose(s);
    }
    str(g, "dtype", dtype);
    str(g, "sha256", digest);
    H5Gclose(g);
  }

  std::vector<int32_t> int32s(size_t n, int32_t lo, int32_t hi) {
    std::vector<int32_t> v(n);
    for (auto& x : v) x = static_cast<int32_t>(odd(8) ? num(lo, hi) : in.ConsumeIntegralInRange<int32_t>(lo, hi));
    return v;
  }

  void attn_case(hid_t cases, const std::string& family) {
    const hid_t g = group(cases, pick({"a", "b_0", "case_1"}));
    if (g < 0) return;
    const bool fp8 = family == "attn_fp8" || (family == "attn_sparse" && in.ConsumeBool());
    const int64_t b = num(1, 3), sq = num(1, 3), h = num(1, 3), ps = num(1, 4), nb = num(1, 6), mb = num(1, 4);
    const int64_t topk = family == "attn_sparse" ? num(1, 8) : (odd() ? num(0, 8) : 0);
    const bool stored = !odd(4);
    str(g, "kind", "attn_core");
    str(g, "description", "fuzz");
    i64(g, "batch", b);
    i64(g, "s_q", sq);
    i64(g, "heads", h);
    i64(g, "d_qk", odd() ? num(0, 600) : 576);
    i64(g, "d_v", odd() ? num(0, 600) : 512);
    i64(g, "page_size", ps);
    i64(g, "num_blocks", nb);
    i64(g, "max_blocks", mb);
    str(g, "cache_format", fp8 ? "fp8" : "bf16");
    if (fp8 || odd()) str(g, "scale_fmt", pick({"fp32", "ue8m0"}));
    if (odd(4)) str(g, "fp8_recipe", pick({"deepseek_v32", "flashmla", "vllm"}));  // absent: DeepSeek's
    i64(g, "topk", topk);
    f64(g, "softmax_scale", odd() ? in.ConsumeFloatingPoint<double>() : 0.0417);
    i64(g, "causal", num(0, 1));
    i64(g, "sentinel_block_id", std::numeric_limits<int32_t>::max());
    i64(g, "seed", num(0, 1000));
    i64(g, "inputs_stored", odd() ? num(0, 5) : stored);

    const int64_t D = 576, Dv = 512, tok = 656;
    // Raw int32 values from the input: the paging checks' territory.
    dataset<int32_t>(g, "inputs/block_table", "int32", {b, mb});
    if (b >= 0 && b <= 64) {
      const auto lens = int32s(static_cast<size_t>(b), 0, static_cast<int32_t>(std::clamp<int64_t>(sadd(smul(mb, ps), 1), 0, 1 << 20)));
      dataset<int32_t>(g, "inputs/cache_seqlens", "int32", {b}, &lens);
    }
    if (topk > 0 || odd()) dataset<int32_t>(g, "inputs/indices", "int32", {b, sq, topk});
    if (stored) {
      dataset<uint16_t>(g, "inputs/q", "bfloat16", {b, sq, h, D});
      if (fp8) {
        // Whole tokens of input bytes, and the exact dequantization of them unless told otherwise.
        const int64_t slots = smul(nb, ps);
        if (slots >= 0 && smul(slots, tok) <= kWriteCap) {
          auto bytes = in.ConsumeBytes<uint8_t>(static_cast<size_t>(slots * tok));
          bytes.resize(static_cast<size_t>(slots * tok));
          std::vector<double> deq(static_cast<size_t>(slots * D));
          for (int64_t s = 0; s < slots; ++s) {
            mla::fp8_dequantize_token({bytes.data() + s * tok, static_cast<size_t>(tok)},
                                      {deq.data() + s * D, static_cast<size_t>(D)});
          }
          if (odd() && !deq.empty()) deq[in.ConsumeIntegralInRange<size_t>(0, deq.size() - 1)] += 1;
          dataset<uint8_t>(g, "inputs/kv_cache", "fp8_kv_v32", {nb, ps, tok}, &bytes);
          dataset<double>(g, "inputs/kv_cache_dequant", "float64", {nb, ps, D}, &deq);
        } else {
          dataset<uint8_t>(g, "inputs/kv_cache", "fp8_kv_v32", {nb, ps, tok});
          dataset<double>(g, "inputs/kv_cache_dequant", "float64", {nb, ps, D});
        }
      } else {
        dataset<uint16_t>(g, "inputs/kv_cache", "bfloat16", {nb, ps, D});
      }
    } else {
      generated(g, "generated/q", "bfloat16", {b, sq, h, D});
      generated(g, "generated/kv_cache", "bfloat16", {nb, ps, fp8 ? tok : D});
    }
    dataset<double>(g, "truth/out", "float64", {b, sq, h, Dv});
    dataset<double>(g, "truth/lse", "float64", {b, h, sq});
    dataset<uint16_t>(g, "same_dtype/out", "bfloat16", {b, sq, h, Dv});
    dataset<float>(g, "same_dtype/lse", "float32", {b, h, sq});
    if (fp8 || odd()) {
      dataset<double>(g, "unquantized/out", "float64", {b, sq, h, Dv});
      dataset<double>(g, "unquantized/lse", "float64", {b, h, sq});
    }
    H5Gclose(g);
  }

  struct Cfg {
    int64_t dim, heads, q_lora, kv_lora, nope, rope, v, max_seq, orig_seq, max_batch;
  };

  void step(hid_t parent, const std::string& name, const Cfg& c, int64_t b, int64_t start, int64_t s,
            bool outputs) {
    const hid_t g = group(parent, name);
    if (g < 0) return;
    dataset<uint16_t>(g, "x", "bfloat16", {b, s, c.dim});
    if (!odd()) {  // on the step group, or (as some writers do) on x
      const bool on_x = in.ConsumeBool() && H5Lexists(g, "x", H5P_DEFAULT) > 0;
      if (on_x) {
        const hid_t x = H5Dopen2(g, "x", H5P_DEFAULT);
        i64(x, "start_pos", start);
        H5Dclose(x);
      } else {
        i64(g, "start_pos", start);
      }
    }
    if (outputs) {
      const int64_t T = sadd(start, s);
      for (const char* pipe : {"fp64", "fp32", "bf16"}) {
        for (const char* form : {"naive", "absorbed"}) {
          const std::string p = std::string(pipe) + "/" + form + "/";
          if (std::string_view(pipe) != "fp64" && in.ConsumeBool()) continue;
          if (std::string_view(pipe) == "fp64") dataset<double>(g, p + "out", "float64", {b, s, c.dim});
          if (std::string_view(pipe) == "fp32") dataset<float>(g, p + "out", "float32", {b, s, c.dim});
          if (std::string_view(pipe) == "bf16") dataset<uint16_t>(g, p + "out", "bfloat16", {b, s, c.dim});
          if (std::string_view(pipe) == "fp64" && in.ConsumeBool()) {
            dataset<double>(g, p + "scores", "float64", {b, s, c.heads, T});
            dataset<double>(g, p + "k_pe", "float64", {b, s, c.rope});
            dataset<double>(g, p + (std::string_view(form) == "naive" ? "attn_out" : "latent_out"), "float64",
                            {b, s, c.heads, std::string_view(form) == "naive" ? c.v : c.kv_lora});
          }
        }
      }
    }
    H5Gclose(g);
  }

  void layer_case(hid_t cases, const std::string& family) {
    const hid_t g = group(cases, pick({"tiny", "l_1"}));
    if (g < 0) return;
    Cfg c{num(1, 8), num(1, 3), in.ConsumeBool() ? 0 : num(1, 4), num(1, 4), num(0, 4), smul(2, num(1, 2)), num(1, 4),
          num(1, 8), 0, num(1, 3)};
    c.orig_seq = in.ConsumeBool() ? c.max_seq : num(1, 8);
    const int64_t b = num(1, c.max_batch > 0 && c.max_batch < 8 ? c.max_batch : 3);
    const bool stored = !odd(4);
    const mla::golden::Family* known = mla::golden::find_family(family);
    const std::string kind = known ? known->case_kind : family;
    const bool boundary = kind == "cache_boundary";
    str(g, "kind", kind);
    str(g, "description", "fuzz");
    str(g, "preset", "fuzz");
    i64(g, "dim", c.dim);
    i64(g, "n_heads", c.heads);
    i64(g, "q_lora_rank", c.q_lora);
    i64(g, "kv_lora_rank", c.kv_lora);
    i64(g, "qk_nope_head_dim", c.nope);
    i64(g, "qk_rope_head_dim", odd() ? num(0, 5) : c.rope);
    i64(g, "v_head_dim", c.v);
    i64(g, "max_seq_len", c.max_seq);
    i64(g, "original_seq_len", c.orig_seq);
    f64(g, "rope_theta", 10000.0);
    f64(g, "rope_factor", 40.0);
    f64(g, "beta_fast", 32.0);
    f64(g, "beta_slow", 1.0);
    f64(g, "mscale", 1.0);
    i64(g, "max_batch_size", c.max_batch);
    i64(g, "batch", b);
    f64(g, "softmax_scale", odd() ? in.ConsumeFloatingPoint<double>() : 0.5);
    i64(g, "yarn", odd() ? num(0, 2) : (c.max_seq > c.orig_seq));
    const int64_t n_steps = boundary ? 1 : num(1, 3);
    i64(g, "n_steps", n_steps);
    i64(g, "seed", 7);
    i64(g, "inputs_stored", stored);

    const int64_t qk = sadd(c.nope, c.rope), hq = smul(c.heads, qk);
    std::vector<std::pair<std::string, std::vector<int64_t>>> w;
    if (c.q_lora == 0) {
      w.push_back({"wq", {hq, c.dim}});
    } else {
      w.push_back({"wq_a", {c.q_lora, c.dim}});
      w.push_back({"q_norm", {c.q_lora}});
      w.push_back({"wq_b", {hq, c.q_lora}});
    }
    w.push_back({"wkv_a", {sadd(c.kv_lora, c.rope), c.dim}});
    w.push_back({"kv_norm", {c.kv_lora}});
    w.push_back({"wkv_b", {smul(c.heads, sadd(c.nope, c.v)), c.kv_lora}});
    w.push_back({"wo", {c.dim, smul(c.heads, c.v)}});
    for (const auto& [name, shape] : w) {
      if (stored) {
        dataset<uint16_t>(g, "weights/" + name, "bfloat16", shape);
      } else {
        generated(g, "generated/weights_" + name, "bfloat16", shape);
      }
    }
    dataset<double>(g, "rope/inv_freq", "float64", {c.rope / 2});

    const int64_t first = boundary ? sadd(c.max_seq, -1) : num(1, c.max_seq > 0 && c.max_seq < 8 ? c.max_seq : 4);
    int64_t pos = 0;
    const hid_t steps = group(g, "steps");
    for (int64_t k = 0; k < n_steps && k < 4 && steps >= 0; ++k) {
      const int64_t s = k == 0 ? first : (odd() ? num(0, 4) : 1);
      step(steps, std::to_string(k), c, b, odd() ? num(0, 8) : pos, s, true);
      pos = sadd(pos, s);
    }
    if (steps >= 0) H5Gclose(steps);
    if (in.ConsumeBool()) {
      dataset<double>(g, "final_cache/fp64/absorbed/kv_cache", "float64", {b, pos, c.kv_lora});
      dataset<double>(g, "final_cache/fp64/naive/k_cache", "float64", {b, pos, c.heads, qk});
    }
    if (boundary) {
      step(g, "accept", c, b, sadd(c.max_seq, -1), 1, true);
      step(g, "reject", c, b, odd() ? num(0, 9) : c.max_seq, 1, false);
      str(g, "expected_error", odd() ? "" : "cache capacity exceeded");
    }
    H5Gclose(g);
  }

  // cu_seqlens of the sequence lengths `s` (0, then cumulative), sometimes broken: an entry
  // moved (a decrease, a nonzero start, a wrong last entry) or set to a wild value.
  std::vector<int32_t> cu_seqlens(const std::vector<int64_t>& s) {
    std::vector<int32_t> cu(s.size() + 1, 0);
    for (std::size_t i = 0; i < s.size(); ++i) cu[i + 1] = static_cast<int32_t>(cu[i] + s[i]);
    if (odd()) {
      auto& e = cu[in.ConsumeIntegralInRange<size_t>(0, cu.size() - 1)];
      e = static_cast<int32_t>(odd(4) ? num(-2, 2) : sadd(e, in.ConsumeBool() ? 1 : -1));
    }
    return cu;
  }

  // `n` copies of `fine`, sometimes one element replaced by `bad` (NaN, an infinity...).
  template <class T>
  std::vector<T> values(int64_t n, T fine, std::initializer_list<T> bad) {
    std::vector<T> v(static_cast<size_t>(std::clamp<int64_t>(n, 0, kWriteCap)), fine);
    if (!v.empty() && odd()) {
      v[in.ConsumeIntegralInRange<size_t>(0, v.size() - 1)] = *(bad.begin() + in.ConsumeIntegralInRange<size_t>(0, bad.size() - 1));
    }
    return v;
  }

  // The prefill and merge cases (schema_prefill_merge.cpp).
  void prefill_results(hid_t g, const std::vector<int64_t>& sq, const std::vector<int64_t>& sk, bool causal,
                       int64_t tq, int64_t h, int64_t hl, int64_t dv);
  void prefill_case(hid_t cases, const std::string& family);
  void typed_out(hid_t g, const std::string& path, const std::string& dtype, std::vector<int64_t> shape,
                 const std::vector<uint8_t>& code);
  void merge_case(hid_t cases, const std::string& family);
  // The V3.2 indexer cases (schema_indexer.cpp).
  void indexer_case(hid_t cases, const std::string& family);
  // The whole file: its attributes and cases of its family's kind (fuzz_golden_schema.cpp).
  void file(hid_t f);
};

}  // namespace mla::fuzz::schema
