// cpu_naive_mha_fp64 / cpu_naive_mha_fp32: MLA attention computed the way a plain multi-head
// attention kernel would be fed it. prepare() decompresses the latent cache once, untimed, as an
// MHA deployment holds its K/V cache before a decode step: the tokens each sequence attends
// become contiguous K = [c | k_pe] (576) and a separately materialised V = c (512) in T, the
// values every head's K/V would hold (the attention interface carries the absorbed query, so
// these are the widths an exact MHA over it reads). run(), the timed call, reads q, K and V and
// forms the full score matrix softmax(QKᵀ·scale) row by row with the maximum subtracted and
// normalised before P·V; it decodes nothing and allocates nothing. Everything after decoding is
// in T (double or float), so the fp32 variant shows what an fp32 MHA implementation loses
// against the fp64 truth.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include "cpu_kernels.hpp"
#include "mla/core/error.hpp"
#include "mla/core/numeric.hpp"
#include "mla/core/threads.hpp"
#include "mla/ref/attention.hpp"
#include "mla/ref/gemm.hpp"
#include "naive_mha_probe.hpp"

namespace mla::cpu {

namespace {

// Scores held at once per row block: bounds memory at 128 MB (fp64) for long sequences while a
// decode step of 128 heads over 128K tokens still fits one block (K and V are read once).
constexpr int64_t kScoreBudget = int64_t{1} << 24;

// Cache tokens decoded by every naive MHA of the process (naive_mha_probe.hpp).
std::atomic<int64_t> g_tokens_decoded{0};

template <class T>
struct Traits;
template <>
struct Traits<double> {
  static constexpr const char* name = "cpu_naive_mha_fp64";
  static constexpr OutDType dtype = OutDType::f64;
};
template <>
struct Traits<float> {
  static constexpr const char* name = "cpu_naive_mha_fp32";
  static constexpr OutDType dtype = OutDType::f32;
};

// One unit of work: a sequence (dense: all its query tokens share its K/V) or a query token
// (sparse: it attends its own tokens). Its K/V rows start at row `kv`; group g0 + i (the H head
// rows of one query token) sees K/V rows 0..lim[lim_at + i] (none when < 0).
struct Task {
  int64_t b = 0, g0 = 0, ng = 0, n = 0, kv = 0, lim_at = 0;
};

// The tasks of a problem, with each task's token positions in decoding order.
struct Plan {
  std::vector<Task> tasks;
  std::vector<int64_t> lim;
  std::vector<std::vector<int64_t>> positions;
  int64_t kv_rows = 0;
};

Plan plan_tasks(const AttnInputs& in) {
  const AttnShape& sh = in.shape;
  Plan p;
  for (int64_t b = 0; b < sh.batch; ++b) {
    const int64_t L = in.cache_seqlens[static_cast<std::size_t>(b)];
    const int64_t per_b = sh.topk == 0 ? 1 : sh.s_q;
    for (int64_t s = 0; s < per_b; ++s) {
      Task t;
      t.b = b;
      t.kv = p.kv_rows;
      t.lim_at = static_cast<int64_t>(p.lim.size());
      std::vector<int64_t> pos;
      if (sh.topk == 0) {
        t.g0 = 0;
        t.ng = sh.s_q;
        for (int64_t q = 0; q < sh.s_q; ++q) p.lim.push_back(dense_last_position(sh, L, q));
        pos.resize(static_cast<std::size_t>(std::max<int64_t>(p.lim.back() + 1, 0)));
        for (std::size_t j = 0; j < pos.size(); ++j) pos[j] = static_cast<int64_t>(j);
      } else {
        t.g0 = s;
        t.ng = 1;
        pos = sparse_row_positions(in, b, s);
        p.lim.push_back(static_cast<int64_t>(pos.size()) - 1);  // every gathered token is attended
      }
      t.n = static_cast<int64_t>(pos.size());
      p.kv_rows += t.n;
      p.tasks.push_back(t);
      p.positions.push_back(std::move(pos));
    }
  }
  return p;
}

// Query groups per score block of a task over n tokens.
int64_t groups_per_block(int64_t n, int64_t heads) {
  return std::max<int64_t>(1, kScoreBudget / std::max<int64_t>(n, 1) / heads);
}

template <class T>
class PreparedNaive final : public PreparedAttention {
 public:
  explicit PreparedNaive(const AttnInputs& in)
      : shape_(in.shape), scale_(static_cast<T>(in.softmax_scale)), q_(in.q.begin(), in.q.end()) {
    const ref::PagedCache cache(in);  // validates the inputs
    Plan plan = plan_tasks(in);
    tasks_ = std::move(plan.tasks);
    lim_ = std::move(plan.lim);
    k_.resize(static_cast<std::size_t>(plan.kv_rows * ref::kDqk));
    v_.resize(static_cast<std::size_t>(plan.kv_rows * ref::kDv));
    // Decoded in parallel, each token on its own: the values do not depend on the thread count.
    parallel_tasks(tasks_.size(), 0, [&](std::size_t i, int) {
      const Task& t = tasks_[i];
      const std::vector<int64_t>& pos = plan.positions[i];
      T* k = k_.data() + t.kv * ref::kDqk;
      for (int64_t j = 0; j < t.n; ++j) cache.token(t.b, pos[static_cast<std::size_t>(j)], k + j * ref::kDqk);
      for (int64_t j = 0; j < t.n; ++j) std::copy_n(k + j * ref::kDqk, ref::kDv, v_.data() + (t.kv + j) * ref::kDv);
    });
    g_tokens_decoded.fetch_add(plan.kv_rows, std::memory_order_relaxed);

    // Every buffer run() touches, sized for the largest row block of any task.
    const int64_t H = shape_.heads;
    for (const Task& t : tasks_) {
      const int64_t rows = std::min(groups_per_block(t.n, H), t.ng) * H;
      q_rows_ = std::max(q_rows_, rows);
      s_elems_ = std::max(s_elems_, rows * std::max<int64_t>(t.n, 1));
    }
    workers_ = task_workers(tasks_.size(), 0);
    ws_.resize(static_cast<std::size_t>(workers_));
    for (Workspace& w : ws_) {
      w.q.resize(static_cast<std::size_t>(q_rows_ * ref::kDqk));
      w.s.resize(static_cast<std::size_t>(s_elems_));
    }
    const int64_t rows = int64_t{shape_.batch} * shape_.s_q * H;
    out_.assign(static_cast<std::size_t>(rows * ref::kDv), T(0));
    lse_.assign(static_cast<std::size_t>(rows), std::numeric_limits<T>::infinity());
  }

  // One task per sequence (dense) or per query token (sparse), on at most the workers prepare()
  // sized buffers for. Tasks write disjoint rows and their GEMM shapes depend only on the
  // problem, so the bits do not depend on the thread count. The lambda captures `this` alone,
  // small enough for std::function to hold without allocating.
  void run() override {
    const int workers = std::min(task_workers(tasks_.size(), 0), workers_);
    parallel_tasks(tasks_.size(), workers, [this](std::size_t task, int worker) {
      attend(ws_[static_cast<std::size_t>(worker)], tasks_[task]);
    });
    ran_ = true;
  }

  AttnOutputs results() override {
    if (!ran_) throw Error(fmt::format("{}: results() called before run()", Traits<T>::name));
    AttnOutputs o;
    o.dtype = Traits<T>::dtype;
    o.out.assign(out_.begin(), out_.end());
    o.lse.resize(lse_.size());
    // run() writes lse [b, s_q, h] row-wise; the interface's layout is [b, h, s_q].
    const int64_t H = shape_.heads, SQ = shape_.s_q;
    for (int64_t b = 0; b < shape_.batch; ++b)
      for (int64_t s = 0; s < SQ; ++s)
        for (int64_t hh = 0; hh < H; ++hh)
          o.lse[static_cast<std::size_t>((b * H + hh) * SQ + s)] = static_cast<double>(lse_[static_cast<std::size_t>((b * SQ + s) * H + hh)]);
    return o;
  }

 private:
  // One worker's buffers: a row block's queries and scores.
  struct Workspace {
    std::vector<T> q, s;
  };

  void attend(Workspace& w, const Task& t) {
    const int64_t H = shape_.heads, SQ = shape_.s_q, n = t.n;
    const T* k = k_.data() + t.kv * ref::kDqk;
    const T* v = v_.data() + t.kv * ref::kDv;
    const int64_t gpb = groups_per_block(n, H);
    for (int64_t gb = 0; gb < t.ng; gb += gpb) {
      const int64_t gn = std::min(gpb, t.ng - gb);
      const int64_t r0 = (t.g0 + gb) * H, rn = gn * H;
      const uint16_t* qb = q_.data() + (t.b * SQ * H + r0) * ref::kDqk;
      for (int64_t i = 0; i < rn * ref::kDqk; ++i) w.q[static_cast<std::size_t>(i)] = static_cast<T>(bf16_to_float(qb[i]));
      if (n > 0) ref::gemm_abt(rn, n, ref::kDqk, w.q.data(), ref::kDqk, k, ref::kDqk, w.s.data(), n, false);
      T* lse = lse_.data() + t.b * SQ * H + r0;
      for (int64_t rr = 0; rr < rn; ++rr) {
        const int64_t last = lim_[static_cast<std::size_t>(t.lim_at + gb + rr / H)];
        T* srow = w.s.data() + rr * n;
        for (int64_t j = 0; j < n; ++j) srow[j] *= scale_;
        if (last < 0) {  // attends nothing: out 0 (P row 0), lse +inf
          std::fill_n(srow, n, T(0));
          lse[rr] = std::numeric_limits<T>::infinity();
          continue;
        }
        T mx = srow[0];
        for (int64_t j = 1; j <= last; ++j) mx = std::max(mx, srow[j]);
        for (int64_t j = 0; j <= last; ++j) srow[j] = std::exp(srow[j] - mx);
        const T sum = pairwise_sum(srow, last + 1);
        for (int64_t j = 0; j <= last; ++j) srow[j] /= sum;
        std::fill(srow + last + 1, srow + n, T(0));  // causal mask
        lse[rr] = mx + std::log(sum);
      }
      T* out = out_.data() + (t.b * SQ * H + r0) * ref::kDv;
      if (n == 0) std::fill_n(out, rn * ref::kDv, T(0));
      else ref::gemm_ab(rn, ref::kDv, n, w.s.data(), n, v, ref::kDv, out, ref::kDv, false);
    }
  }

  AttnShape shape_;
  T scale_;
  std::vector<uint16_t> q_;  // a private copy of q (bf16), read by every run()
  std::vector<Task> tasks_;
  std::vector<int64_t> lim_;
  std::vector<T> k_, v_;  // decompressed in prepare(): [kv rows, 576] and [kv rows, 512]
  int64_t q_rows_ = 0, s_elems_ = 0;
  int workers_ = 1;
  std::vector<Workspace> ws_;
  std::vector<T> out_;  // [b, s_q, h, 512]
  std::vector<T> lse_;  // [b, s_q, h]
  bool ran_ = false;
};

template <class T>
class NaiveMha final : public AttentionImpl {
 public:
  NaiveMha() {
    info_.name = Traits<T>::name;
    info_.backend = "cpu";
    info_.description = fmt::format(
        "naive MHA in {}: K (576) / V (512) decompressed from the latent cache in prepare, full softmax(QK^T)V",
        sizeof(T) == 8 ? "float64" : "float32");
    info_.role = KernelRole::baseline;
    info_.out_dtype = Traits<T>::dtype;
    info_.compute = ComputePrecision{Traits<T>::dtype, Traits<T>::dtype};  // T throughout
    info_.caps = host_capabilities();
  }
  const KernelInfo& info() const override { return info_; }

  // What run() reads and writes: q (bf16); K (576) and V (512) in T, each decompressed row once
  // (a sequence's rows for dense, which every head and query token of it share; a query
  // token's own rows for sparse, which t.pairs counts); out and lse in T. The scores stay in a
  // worker's row block, as the MLA model leaves out the oracle's own scratch. Every head reads
  // the same rows because the absorbed query makes them identical; holding heads x copies
  // would move heads x the bytes but could not be held for the catalog's 128-head 128K-token
  // case (over 100 GB in fp64).
  CostModel cost(const AttnInputs& in) const override {
    const AttnShape& sh = in.shape;
    const AttnTraffic t = attention_traffic(in);
    const double kv_rows = static_cast<double>(sh.topk > 0 ? t.pairs : t.tokens);
    const double rows = static_cast<double>(sh.batch) * sh.s_q * sh.heads;
    CostModel c;
    c.bytes = rows * sh.d_qk * 2 + kv_rows * (sh.d_qk + sh.d_v) * sizeof(T) + rows * (sh.d_v + 1) * sizeof(T);
    c.flops = 2.0 * static_cast<double>(t.pairs) * sh.heads * (sh.d_qk + sh.d_v);
    return c;
  }

  std::unique_ptr<PreparedAttention> prepare(const AttnInputs& in) const override {
    if (auto why = check(in.shape)) throw UnsupportedError(fmt::format("{}: {}", info_.name, *why));
    return std::make_unique<PreparedNaive<T>>(in);
  }

 private:
  KernelInfo info_;
};

}  // namespace

int64_t naive_mha_tokens_decoded() { return g_tokens_decoded.load(std::memory_order_relaxed); }

}  // namespace mla::cpu

namespace mla::builtin {

std::unique_ptr<AttentionImpl> make_cpu_naive_mha_fp64() { return std::make_unique<cpu::NaiveMha<double>>(); }
std::unique_ptr<AttentionImpl> make_cpu_naive_mha_fp32() { return std::make_unique<cpu::NaiveMha<float>>(); }

}  // namespace mla::builtin
