// What cuda_mla_decode does on the device (kernels/cuda/mla_decode.cpp: the split plan, the
// parameter block, the decode and combine launches), with the warp simulator in place of the GPU.
// Header-only and included after the kernel source, so any simulator test binary can drive the
// kernel exactly as the host code does without a second library of simulated kernel code.
//
// Include after warp_sim_builtins.hpp and detail/mla_decode_kernels.cuh.
#pragma once

#include <algorithm>
#include <bit>
#include <cstring>
#include <functional>
#include <limits>
#include <numbers>
#include <set>
#include <string>
#include <vector>

#include "mla/core/numeric.hpp"
#include "mla/cuda/split_plan.hpp"
#include "mla/core/attention.hpp"

namespace mla::cuda::simtest {

using detail::DecodeParams;
namespace dec = detail::decode;

inline constexpr std::size_t kGuard = 64;  // elements of guard band before and after each buffer

template <class T>
struct Guarded {
  std::vector<T> v;
  T canary;
  Guarded(std::size_t n, T fill, T canary_) : v(n + 2 * kGuard, fill), canary(canary_) {
    std::fill(v.begin(), v.begin() + kGuard, canary);
    std::fill(v.end() - kGuard, v.end(), canary);
  }
  T* data() { return v.data() + kGuard; }
  std::size_t size() const { return v.size() - 2 * kGuard; }
  bool intact() const {
    auto same = [&](const T& x) { return std::memcmp(&x, &canary, sizeof(T)) == 0; };
    return std::all_of(v.begin(), v.begin() + kGuard, same) && std::all_of(v.end() - kGuard, v.end(), same);
  }
};

struct SimRun {
  AttnOutputs out;
  SplitPlan plan;
  std::vector<std::string> errors;
};

template <int RG, bool FP8, bool SPARSE>
std::vector<std::string> launch_decode(const DecodeParams& p, const std::function<bool(const void*)>& allowed) {
  sim::Launch cfg;
  cfg.grid = static_cast<unsigned>(p.num_work);
  cfg.threads = dec::Tile<RG, FP8>::kThreads;
  cfg.smem_bytes = dec::Tile<RG, FP8>::kSmem;
  cfg.global_read_allowed = allowed;
  return sim::launch(cfg, [&] { dec::mla_decode_kernel<RG, FP8, SPARSE>(p); });
}

template <bool FP8, bool SPARSE>
std::vector<std::string> launch_rows(int tile_rows, const DecodeParams& p,
                                     const std::function<bool(const void*)>& allowed) {
  switch (tile_rows) {
    case 16: return launch_decode<1, FP8, SPARSE>(p, allowed);
    case 32: return launch_decode<2, FP8, SPARSE>(p, allowed);
    default: return launch_decode<4, FP8, SPARSE>(p, allowed);
  }
}

// The cache slots a correct kernel may read: dense, every token t < L of each sequence; sparse,
// only the tokens some row of the sequence names with a valid index (a stricter set: an invalid
// index must not cause a load, and neither may a valid token no row asked for).
inline std::set<int64_t> allowed_slots(const AttnInputs& in) {
  const AttnShape& s = in.shape;
  std::set<int64_t> slots;
  auto add = [&](int b, int32_t t) {
    slots.insert(int64_t{in.block_table[static_cast<std::size_t>(b * s.max_blocks + t / s.page_size)]} * s.page_size +
                 t % s.page_size);
  };
  for (int b = 0; b < s.batch; ++b) {
    const int32_t L = in.cache_seqlens[static_cast<std::size_t>(b)];
    if (s.topk == 0) {
      for (int32_t t = 0; t < L; ++t) add(b, t);
      continue;
    }
    for (int64_t k = 0; k < int64_t{s.s_q} * s.topk; ++k) {
      const int32_t t = in.indices[static_cast<std::size_t>(int64_t{b} * s.s_q * s.topk + k)];
      if (t >= 0 && t < L) add(b, t);
    }
  }
  return slots;
}

// `slots_override`: when given, the set of readable slots instead of allowed_slots(in) (the
// self-checks shrink it to prove the read check fires).
inline SimRun run_sim(const AttnInputs& in, int forced_splits, int num_sms = 4,
                      const std::set<int64_t>* slots_override = nullptr) {
  const AttnShape& s = in.shape;
  const bool sparse = s.topk > 0, fp8 = s.cache_format == CacheFormat::fp8;
  SimRun r;
  const int64_t rows = int64_t{s.s_q} * s.heads;
  const int plan_batch = sparse ? s.batch * s.s_q : s.batch;
  const int plan_s_q = sparse ? 1 : s.s_q;
  const int tile_rows = detail::decode_tile_rows(int64_t{plan_s_q} * s.heads);
  SplitPlanRequest req;
  req.batch = plan_batch;
  req.s_q = plan_s_q;
  req.heads = s.heads;
  req.m_tile_rows = tile_rows;
  req.n_tile_tokens = detail::kDecodeTileTokens;
  req.num_sms = num_sms;
  req.blocks_per_sm = 1;
  req.forced_splits = forced_splits;
  r.plan = plan_decode(req, sparse ? std::vector<int32_t>(static_cast<std::size_t>(plan_batch), s.topk)
                                   : std::vector<int32_t>(in.cache_seqlens.begin(), in.cache_seqlens.end()));

  const std::size_t n_out = static_cast<std::size_t>(s.batch * rows * 512);
  const std::size_t n_lse = static_cast<std::size_t>(s.batch * rows);
  const std::size_t slot_rows = static_cast<std::size_t>(r.plan.partial_slots * r.plan.rows);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float canary_f = std::bit_cast<float>(0xA5A5A5A5u);
  Guarded<uint16_t> out(n_out, 0xFFFF, 0xA5A5);
  Guarded<float> lse(n_lse, nan, canary_f), ws_out(slot_rows * 512, nan, canary_f), ws_lse(slot_rows, nan, canary_f);
  // The block table sits between sentinel-filled bands, so a read past either end reads a
  // sentinel and the cp.async check below reports it instead of undefined behaviour.
  Guarded<int32_t> table(in.block_table.size(), 0, 2147483647);
  std::copy(in.block_table.begin(), in.block_table.end(), table.data());

  DecodeParams p;
  p.q = in.q.data();
  if (fp8) {
    p.cache8 = in.kv_cache.data();
  } else {
    p.cache = reinterpret_cast<const uint16_t*>(in.kv_cache.data());
  }
  p.block_table = table.data();
  p.seqlens = in.cache_seqlens.data();
  p.indices = sparse ? in.indices.data() : nullptr;
  p.work = r.plan.work.data();
  p.num_splits = r.plan.num_splits.data();
  p.split_base = r.plan.split_base.data();
  p.num_work = static_cast<int64_t>(r.plan.work.size());
  p.batch = plan_batch;
  p.s_q = plan_s_q;
  p.heads = s.heads;
  p.page_size = s.page_size;
  p.max_blocks = s.max_blocks;
  p.seq_q = s.s_q;
  p.topk = s.topk;
  p.causal = !sparse && s.causal ? 1 : 0;
  p.scale_log2 = static_cast<float>(in.softmax_scale * std::numbers::log2e);
  p.out = out.data();
  p.lse = lse.data();
  p.ws_out = ws_out.data();
  p.ws_lse = ws_lse.data();
  p.combine_blocks = r.plan.combine_blocks;
  p.combine_rows_per_block = r.plan.combine_rows_per_block;

  const std::set<int64_t> own = slots_override ? std::set<int64_t>() : allowed_slots(in);
  const std::set<int64_t>& slots = slots_override ? *slots_override : own;
  const uint64_t bpt = cache_bytes_per_token(s.cache_format);
  const auto* q0 = reinterpret_cast<const unsigned char*>(in.q.data());
  const auto* c0 = in.kv_cache.data();
  auto allowed = [&](const void* src) {
    const auto* a = static_cast<const unsigned char*>(src);
    if (a >= q0 && a + 16 <= q0 + in.q.size_bytes()) return true;
    if (a < c0) return false;
    const uint64_t off = static_cast<uint64_t>(a - c0);
    // A 16-byte copy must stay inside one token of an allowed slot.
    return off + 16 <= in.kv_cache.size() && (off % bpt) + 16 <= bpt &&
           slots.count(static_cast<int64_t>(off / bpt)) > 0;
  };

  if (fp8) {
    r.errors = sparse ? launch_rows<true, true>(tile_rows, p, allowed) : launch_rows<true, false>(tile_rows, p, allowed);
  } else {
    r.errors = sparse ? launch_rows<false, true>(tile_rows, p, allowed) : launch_rows<false, false>(tile_rows, p, allowed);
  }
  if (r.errors.empty() && p.combine_blocks > 0) {
    sim::Launch cfg;
    cfg.grid = static_cast<unsigned>(p.combine_blocks);
    cfg.threads = 32 * static_cast<unsigned>(p.combine_rows_per_block);
    r.errors = sim::launch(cfg, [&] { dec::mla_combine_kernel(p); });
  }
  if (!out.intact()) r.errors.push_back("guard band of out overwritten");
  if (!lse.intact()) r.errors.push_back("guard band of lse overwritten");
  if (!ws_out.intact()) r.errors.push_back("guard band of ws_out overwritten");
  if (!ws_lse.intact()) r.errors.push_back("guard band of ws_lse overwritten");
  r.out.dtype = OutDType::bf16;
  r.out.out.resize(n_out);
  for (std::size_t i = 0; i < n_out; ++i) r.out.out[i] = bf16_to_float(out.data()[i]);
  r.out.lse.assign(lse.data(), lse.data() + n_lse);
  return r;
}

}  // namespace mla::cuda::simtest
