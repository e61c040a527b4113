// The decode problems of the device check's smoke step (gpu_smoke.cpp): one per instance of the
// decode kernel, 16-, 32- and 64-row tiles x bf16 / FP8 cache x dense / sparse, run with two
// forced splits so the combine kernel runs as well. Shared with the warp simulator's test
// (suites/gpu/sim/test_decode_sim.cpp), which runs each of them on the kernel source first, so
// the smoke step's first minute on a GPU is spent on problems known to pass.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "mla/core/attention.hpp"
#include "support/attn_builder.hpp"

namespace mla::testing {

struct SmokeInstance {
  std::string name;
  AttnSpec spec;
  int page_size = 16;
  int tile_rows = 16;  // the instance the problem must select (detail::decode_tile_rows)
  int forced_splits = 2;
};

inline void PrintTo(const SmokeInstance& i, std::ostream* os) { *os << i.name; }

inline std::vector<SmokeInstance> smoke_instances() {
  std::vector<SmokeInstance> v;
  // Rows per work sequence pick the tile: dense s_q·heads, sparse the heads alone.
  struct Rows {
    const char* name;
    int tile, heads, s_q, sparse_heads;
  };
  const Rows rows[] = {{"rows16", 16, 16, 1, 16}, {"rows32", 32, 8, 3, 24}, {"rows64", 64, 64, 1, 64}};
  for (const Rows& r : rows) {
    for (CacheFormat f : {CacheFormat::bf16, CacheFormat::fp8}) {
      for (bool sparse : {false, true}) {
        AttnSpec s;
        s.heads = sparse ? r.sparse_heads : r.heads;
        s.s_q = sparse ? 2 : r.s_q;
        // An empty sequence; lengths across tiles and pages; sparse top-48 over a 30-token
        // sequence, so its rows hold invalid indices.
        s.seqlens = sparse ? std::vector<int32_t>{100, 0, 30} : std::vector<int32_t>{70, 0, 33};
        s.topk = sparse ? 48 : 0;
        s.causal = !sparse;
        s.format = f;
        s.scale_fmt = ScaleFmt::fp32;
        s.seed = 900 + v.size();
        v.push_back({fmt::format("{}_{}_{}", r.name, to_string(f), sparse ? "sparse" : "dense"), s, 16, r.tile, 2});
      }
    }
  }
  return v;
}

}  // namespace mla::testing
