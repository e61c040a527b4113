#include "warp_sim.hpp"

#include <ucontext.h>

#include <array>
#include <bit>
#include <cstring>
#include <memory>
#include <utility>

#include <fmt/format.h>

#include "mla/core/numeric.hpp"

namespace mla::sim {
namespace {

constexpr std::size_t kStackBytes = 128 * 1024;

struct Fiber {
  ucontext_t ctx{};
  std::unique_ptr<char[]> stack;
  unsigned tid = 0;
  bool done = false;
  // Waiting for *wait_gen to move past wait_seen (a barrier generation), or not waiting.
  const uint64_t* wait_gen = nullptr;
  uint64_t wait_seen = 0;
  std::vector<std::pair<uint32_t, const void*>> pending_copies;
};

struct Warp {
  unsigned arrived = 0;
  uint64_t gen = 0;
  // Inputs posted by each lane, outputs written for each lane by the last arriver.
  float f_in[32]{}, f_out[32]{};
  uint32_t addr[32]{};
  bool trans = false;
  uint32_t a[32][4]{}, b[32][2]{}, r_out[32][4]{};
  float c[32][4]{}, d_out[32][4]{};
};

struct Block {
  const Launch* cfg = nullptr;
  unsigned id = 0;
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  std::vector<unsigned char> smem;
  unsigned live = 0;
  unsigned barrier_arrived = 0;
  uint64_t barrier_gen = 0;
  std::vector<std::string>* errors = nullptr;
  const std::function<void()>* body = nullptr;
};

Block* g_block = nullptr;
CpAsyncLanding g_landing = CpAsyncLanding::deferred;
Fiber* g_cur = nullptr;
ucontext_t g_main;

void error(std::string msg) {
  auto& e = *g_block->errors;
  if (e.size() < 20)
    e.push_back(fmt::format("block {} thread {}: {}", g_block->id, g_cur ? g_cur->tid : 0u, std::move(msg)));
}

void yield_until(const uint64_t* gen, uint64_t seen) {
  g_cur->wait_gen = gen;
  g_cur->wait_seen = seen;
  swapcontext(&g_cur->ctx, &g_main);
}

void fiber_entry() {
  (*g_block->body)();
  g_cur->done = true;
  --g_block->live;
  if (g_block->barrier_arrived > 0) error("exited while other threads wait at __syncthreads");
  const unsigned w = g_cur->tid / 32;
  if (g_block->warps[w].arrived > 0) error("exited while lanes of its warp wait in a collective");
  swapcontext(&g_cur->ctx, &g_main);
}

Warp& my_warp() { return g_block->warps[g_cur->tid / 32]; }
unsigned my_lane() { return g_cur->tid % 32; }

// The rendezvous of a warp: the last of the 32 lanes runs `compute`, the others wait for it.
template <class F>
void warp_collective(F&& compute) {
  Warp& w = my_warp();
  const uint64_t seen = w.gen;
  if (++w.arrived == 32) {
    compute(w);
    w.arrived = 0;
    ++w.gen;
    return;
  }
  yield_until(&w.gen, seen);
}

bool smem_range_ok(uint32_t addr, std::size_t bytes, std::size_t align, const char* what) {
  if (addr % align != 0) {
    error(fmt::format("{}: shared address {} not {}-byte aligned", what, addr, align));
    return false;
  }
  if (addr + bytes > g_block->smem.size()) {
    error(fmt::format("{}: shared address {} + {} past the {} bytes of shared memory", what, addr,
                      bytes, g_block->smem.size()));
    return false;
  }
  return true;
}

uint16_t smem_u16(uint32_t addr) {
  uint16_t v;
  std::memcpy(&v, g_block->smem.data() + addr, 2);
  return v;
}

float bf16_lo(uint32_t x) { return bf16_to_float(static_cast<uint16_t>(x & 0xFFFFu)); }
float bf16_hi(uint32_t x) { return bf16_to_float(static_cast<uint16_t>(x >> 16)); }

}  // namespace

const char* to_string(CpAsyncLanding m) { return m == CpAsyncLanding::eager ? "eager" : "deferred"; }
void set_cp_async_landing(CpAsyncLanding m) { g_landing = m; }
CpAsyncLanding cp_async_landing() { return g_landing; }

Idx thread_idx() { return Idx{g_cur->tid, 0, 0}; }
Idx block_idx() { return Idx{g_block->id, 0, 0}; }
Idx block_dim() { return Idx{g_block->cfg->threads, 1, 1}; }

unsigned char* dynamic_smem() { return g_block->smem.data(); }

uint32_t smem_offset(const void* p) {
  const auto* c = static_cast<const unsigned char*>(p);
  const unsigned char* base = g_block->smem.data();
  if (c < base || c > base + g_block->smem.size()) {
    error("a generic pointer outside shared memory was converted to a shared address");
    return 0;
  }
  return static_cast<uint32_t>(c - base);
}

void syncthreads() {
  Block& b = *g_block;
  const uint64_t seen = b.barrier_gen;
  if (++b.barrier_arrived == b.live) {
    if (b.live != b.cfg->threads) error("__syncthreads after some threads of the block exited");
    b.barrier_arrived = 0;
    ++b.barrier_gen;
    return;
  }
  yield_until(&b.barrier_gen, seen);
}

float shfl_xor(float v, int lane_mask) {
  const unsigned lane = my_lane();
  my_warp().f_in[lane] = v;
  warp_collective([](Warp& w) { std::memcpy(w.f_out, w.f_in, sizeof(w.f_in)); });
  return my_warp().f_out[lane ^ static_cast<unsigned>(lane_mask & 31)];
}

void cp_async16(uint32_t dst, const void* src) {
  if (!smem_range_ok(dst, 16, 16, "cp.async destination")) return;
  if (reinterpret_cast<uintptr_t>(src) % 16 != 0) {
    error("cp.async source not 16-byte aligned");
    return;
  }
  if (g_block->cfg->global_read_allowed && !g_block->cfg->global_read_allowed(src)) {
    error(fmt::format("cp.async reads global address {} which the kernel must not touch", src));
    return;
  }
  // Eager: the bytes land now; the copy stays pending until the wait all the same, so a copy
  // never waited for is still reported.
  if (g_landing == CpAsyncLanding::eager) std::memcpy(g_block->smem.data() + dst, src, 16);
  g_cur->pending_copies.emplace_back(dst, src);
}

void cp_async_commit() {}

void cp_async_wait_all() {
  if (g_landing == CpAsyncLanding::deferred)
    for (const auto& [dst, src] : g_cur->pending_copies) std::memcpy(g_block->smem.data() + dst, src, 16);
  g_cur->pending_copies.clear();
}

void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr, bool trans) {
  const unsigned lane = my_lane();
  Warp& me = my_warp();
  me.addr[lane] = addr;
  me.trans = trans;  // every lane of one call site passes the same flag
  warp_collective([](Warp& w) {
    for (unsigned l = 0; l < 32; ++l)
      if (!smem_range_ok(w.addr[l], 16, 16, "ldmatrix row")) return;
    // Matrix i has its row j (8 b16 values) at w.addr[8i + j].
    auto elem = [&](int i, int row, int col) { return smem_u16(w.addr[8 * i + row] + 2 * col); };
    for (unsigned l = 0; l < 32; ++l) {
      const int g = static_cast<int>(l / 4), t = static_cast<int>(l % 4);
      for (int i = 0; i < 4; ++i) {
        uint16_t lo, hi;
        if (!w.trans) {  // row l/4, columns 2(l%4), 2(l%4)+1
          lo = elem(i, g, 2 * t);
          hi = elem(i, g, 2 * t + 1);
        } else {  // rows 2(l%4), 2(l%4)+1, column l/4
          lo = elem(i, 2 * t, g);
          hi = elem(i, 2 * t + 1, g);
        }
        w.r_out[l][i] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
      }
    }
  });
  for (int i = 0; i < 4; ++i) r[i] = my_warp().r_out[lane][i];
}

void mma_m16n8k16_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  const unsigned lane = my_lane();
  Warp& me = my_warp();
  for (int i = 0; i < 4; ++i) {
    me.a[lane][i] = a[i];
    me.c[lane][i] = c[i];
  }
  me.b[lane][0] = b0;
  me.b[lane][1] = b1;
  warp_collective([](Warp& w) {
    float A[16][16], B[16][8], C[16][8];
    for (unsigned l = 0; l < 32; ++l) {
      const int g = static_cast<int>(l / 4), t = static_cast<int>(l % 4);
      // PTX m16n8k16 .bf16 fragments: a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..),
      // a3 (g+8, 2t+8..); b0 (k 2t..2t+1, n g), b1 (k 2t+8..2t+9, n g); c0/c1 (g, 2t/2t+1),
      // c2/c3 (g+8, 2t/2t+1). The lower column/k index sits in the low 16 bits.
      const int ar[4] = {g, g + 8, g, g + 8}, ac[4] = {2 * t, 2 * t, 2 * t + 8, 2 * t + 8};
      for (int i = 0; i < 4; ++i) {
        A[ar[i]][ac[i]] = bf16_lo(w.a[l][i]);
        A[ar[i]][ac[i] + 1] = bf16_hi(w.a[l][i]);
      }
      B[2 * t][g] = bf16_lo(w.b[l][0]);
      B[2 * t + 1][g] = bf16_hi(w.b[l][0]);
      B[2 * t + 8][g] = bf16_lo(w.b[l][1]);
      B[2 * t + 9][g] = bf16_hi(w.b[l][1]);
      C[g][2 * t] = w.c[l][0];
      C[g][2 * t + 1] = w.c[l][1];
      C[g + 8][2 * t] = w.c[l][2];
      C[g + 8][2 * t + 1] = w.c[l][3];
    }
    float D[16][8];
    for (int i = 0; i < 16; ++i) {
      for (int j = 0; j < 8; ++j) {
        double s = C[i][j];
        for (int k = 0; k < 16; ++k) s += static_cast<double>(A[i][k]) * B[k][j];
        D[i][j] = static_cast<float>(s);
      }
    }
    for (unsigned l = 0; l < 32; ++l) {
      const int g = static_cast<int>(l / 4), t = static_cast<int>(l % 4);
      w.d_out[l][0] = D[g][2 * t];
      w.d_out[l][1] = D[g][2 * t + 1];
      w.d_out[l][2] = D[g + 8][2 * t];
      w.d_out[l][3] = D[g + 8][2 * t + 1];
    }
  });
  for (int i = 0; i < 4; ++i) c[i] = my_warp().d_out[lane][i];
}

float int_as_float(int i) { return std::bit_cast<float>(i); }

std::vector<std::string> launch(const Launch& cfg, const std::function<void()>& body) {
  std::vector<std::string> errors;
  if (cfg.threads == 0 || cfg.threads % 32 != 0) {
    errors.push_back(fmt::format("block size {} is not a positive multiple of 32", cfg.threads));
    return errors;
  }
  Block blk;
  blk.cfg = &cfg;
  blk.errors = &errors;
  blk.body = &body;
  blk.fibers.resize(cfg.threads);
  for (auto& f : blk.fibers) f.stack = std::make_unique<char[]>(kStackBytes);
  for (unsigned b = 0; b < cfg.grid && errors.empty(); ++b) {
    blk.id = b;
    blk.warps.assign(cfg.threads / 32, Warp{});
    blk.smem.assign(cfg.smem_bytes, 0xFF);
    blk.live = cfg.threads;
    blk.barrier_arrived = 0;
    blk.barrier_gen = 0;
    g_block = &blk;
    for (unsigned t = 0; t < cfg.threads; ++t) {
      Fiber& f = blk.fibers[t];
      f.tid = t;
      f.done = false;
      f.wait_gen = nullptr;
      f.pending_copies.clear();
      getcontext(&f.ctx);
      f.ctx.uc_stack.ss_sp = f.stack.get();
      f.ctx.uc_stack.ss_size = kStackBytes;
      f.ctx.uc_link = nullptr;
      makecontext(&f.ctx, fiber_entry, 0);
    }
    // Round-robin over runnable fibers until all are done; no progress means a deadlock.
    for (;;) {
      bool all_done = true, progress = false;
      for (Fiber& f : blk.fibers) {
        if (f.done) continue;
        all_done = false;
        if (f.wait_gen != nullptr && *f.wait_gen == f.wait_seen) continue;
        f.wait_gen = nullptr;
        g_cur = &f;
        swapcontext(&g_main, &f.ctx);
        g_cur = nullptr;
        progress = true;
      }
      if (all_done) break;
      if (!progress) {
        errors.push_back(fmt::format("block {}: deadlock (threads wait at a barrier or collective that "
                                     "the others never reach)",
                                     b));
        break;
      }
    }
    for (const Fiber& f : blk.fibers)
      if (!f.pending_copies.empty() && errors.size() < 20)
        errors.push_back(fmt::format("block {} thread {}: exited with cp.async copies never waited for", b, f.tid));
  }
  g_block = nullptr;
  return errors;
}

}  // namespace mla::sim
