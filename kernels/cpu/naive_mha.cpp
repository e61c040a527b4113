// cpu_naive_mha_fp64 / cpu_naive_mha_fp32: MLA attention computed the way a plain multi-head
// attention kernel would be fed it. The latent cache is first "decompressed": the paged tokens
// of a sequence are gathered into contiguous K = [c | k_pe] (576) and a separately materialised
// V = c (512), shared by every head exactly as an MHA kernel's per-head K/V would hold the same
// values; then the full score matrix softmax(QKᵀ·scale) is formed row by row with the maximum
// subtracted and normalised before P·V. Everything after decoding is in T (double or float),
// so the fp32 variant shows what an fp32 MHA implementation loses against the fp64 truth.
#include <algorithm>
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

namespace mla::cpu {

namespace {

// Scores held at once per row block: bounds memory at 128 MB (fp64) for long sequences while a
// decode step of 128 heads over 128K tokens still fits one block (K and V are read once).
constexpr int64_t kScoreBudget = int64_t{1} << 24;

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

// Pairwise (tree) summation, as a GPU block reduction or a vectorised softmax sums: its error
// grows with log n, where a running sum over 128K fp32 terms drifts by ~1e-4 relative — an
// artefact of the loop, not of fp32 MHA, which would hide the precision this kernel measures.
template <class T>
T pairwise_sum(const T* x, int64_t n) {
  if (n <= 32) {
    T s = 0;
    for (int64_t i = 0; i < n; ++i) s += x[i];
    return s;
  }
  const int64_t h = n / 2;
  return pairwise_sum(x, h) + pairwise_sum(x + h, n - h);
}

template <class T>
class PreparedNaive final : public PreparedAttention {
 public:
  explicit PreparedNaive(const AttnInputs& in) : in_(in), view_(in_.view()), cache_(view_) {}

  // One task per sequence (dense: all its query tokens share one decompression) or per query
  // token (sparse: each gathers its own tokens), on mla::threads() threads. Tasks write disjoint
  // rows and their GEMM shapes depend only on the problem, so the bits do not depend on the
  // thread count.
  void run() override {
    const AttnInputs& in = view_;
    const AttnShape& sh = in.shape;
    const int64_t B = sh.batch, SQ = sh.s_q, H = sh.heads, R = SQ * H;
    out_.assign(static_cast<std::size_t>(B * R * ref::kDv), 0.0);
    lse_.assign(static_cast<std::size_t>(B * H * SQ), std::numeric_limits<double>::infinity());
    const std::size_t per_b = sh.topk == 0 ? 1 : static_cast<std::size_t>(SQ);
    const std::size_t n_tasks = static_cast<std::size_t>(B) * per_b;
    const int workers = task_workers(n_tasks, 0);
    std::vector<Workspace> ws(static_cast<std::size_t>(workers));
    parallel_tasks(n_tasks, workers, [&](std::size_t task, int worker) {
      Workspace& w = ws[static_cast<std::size_t>(worker)];
      const int64_t b = static_cast<int64_t>(task / per_b);
      const int64_t L = cache_.seqlen(b);
      std::vector<int64_t> lim;
      if (sh.topk == 0) {
        lim.resize(static_cast<std::size_t>(SQ));
        for (int64_t s = 0; s < SQ; ++s) lim[static_cast<std::size_t>(s)] = dense_last_position(sh, L, s);
        std::vector<int64_t> pos(static_cast<std::size_t>(std::max<int64_t>(lim.back() + 1, 0)));
        for (std::size_t t = 0; t < pos.size(); ++t) pos[t] = static_cast<int64_t>(t);
        decompress(w, b, pos);
        attend(w, b, 0, SQ, lim);
      } else {
        const int64_t s = static_cast<int64_t>(task % per_b);
        const std::vector<int64_t> pos = sparse_row_positions(in, b, s);
        decompress(w, b, pos);
        lim.assign(1, static_cast<int64_t>(pos.size()) - 1);  // every gathered token is attended
        attend(w, b, s, 1, lim);
      }
    });
    ran_ = true;
  }

  AttnOutputs results() override {
    if (!ran_) throw Error(fmt::format("{}: results() called before run()", Traits<T>::name));
    AttnOutputs o;
    o.dtype = Traits<T>::dtype;
    o.out = out_;
    o.lse = lse_;
    return o;
  }

 private:
  // One worker's buffers: the decompressed K [n, 576] and V [n, 512] in T, a row block's
  // queries, scores and output.
  struct Workspace {
    std::vector<T> k, v, q, s, o;
    int64_t n = 0;
  };

  void decompress(Workspace& w, int64_t b, const std::vector<int64_t>& pos) const {
    const int64_t n = static_cast<int64_t>(pos.size());
    w.n = n;
    w.k.resize(static_cast<std::size_t>(n * ref::kDqk));
    w.v.resize(static_cast<std::size_t>(n * ref::kDv));
    for (int64_t j = 0; j < n; ++j) cache_.token(b, pos[static_cast<std::size_t>(j)], w.k.data() + j * ref::kDqk);
    for (int64_t j = 0; j < n; ++j)
      std::copy_n(w.k.data() + j * ref::kDqk, ref::kDv, w.v.data() + j * ref::kDv);
  }

  // Query groups [g0, g0+ng) of sequence b (a group = the H head rows of one query token)
  // against the decompressed K/V; group g sees gathered tokens 0..lim[g] (none when < 0).
  void attend(Workspace& w, int64_t b, int64_t g0, int64_t ng, const std::vector<int64_t>& lim) {
    const AttnShape& sh = view_.shape;
    const int64_t H = sh.heads, SQ = sh.s_q, n = w.n;
    const T scale = static_cast<T>(view_.softmax_scale);
    const int64_t groups_per_block = std::max<int64_t>(1, kScoreBudget / std::max<int64_t>(n, 1) / H);
    for (int64_t gb = 0; gb < ng; gb += groups_per_block) {
      const int64_t gn = std::min(groups_per_block, ng - gb);
      const int64_t r0 = (g0 + gb) * H, rn = gn * H;
      w.q.resize(static_cast<std::size_t>(rn * ref::kDqk));
      const uint16_t* qb = view_.q.data() + (b * SQ * H + r0) * ref::kDqk;
      for (int64_t i = 0; i < rn * ref::kDqk; ++i) w.q[static_cast<std::size_t>(i)] = static_cast<T>(bf16_to_float(qb[i]));
      w.s.resize(static_cast<std::size_t>(rn * std::max<int64_t>(n, 1)));
      w.o.resize(static_cast<std::size_t>(rn * ref::kDv));
      if (n > 0) ref::gemm_abt(rn, n, ref::kDqk, w.q.data(), ref::kDqk, w.k.data(), ref::kDqk, w.s.data(), n, false);
      for (int64_t rr = 0; rr < rn; ++rr) {
        const int64_t last = lim[static_cast<std::size_t>(gb + rr / H)];
        T* srow = w.s.data() + rr * n;
        for (int64_t j = 0; j < n; ++j) srow[j] *= scale;
        if (last < 0) {  // attends nothing: out 0 (P row 0), lse stays +inf
          std::fill_n(srow, n, T(0));
          continue;
        }
        T mx = srow[0];
        for (int64_t j = 1; j <= last; ++j) mx = std::max(mx, srow[j]);
        for (int64_t j = 0; j <= last; ++j) srow[j] = std::exp(srow[j] - mx);
        const T sum = pairwise_sum(srow, last + 1);
        for (int64_t j = 0; j <= last; ++j) srow[j] /= sum;
        std::fill(srow + last + 1, srow + n, T(0));  // causal mask
        const int64_t r = r0 + rr, s = r / H, hh = r % H;
        lse_[static_cast<std::size_t>((b * H + hh) * SQ + s)] = static_cast<double>(mx + std::log(sum));
      }
      if (n == 0) std::fill(w.o.begin(), w.o.end(), T(0));
      else ref::gemm_ab(rn, ref::kDv, n, w.s.data(), n, w.v.data(), ref::kDv, w.o.data(), ref::kDv, false);
      for (int64_t rr = 0; rr < rn; ++rr) {
        double* dst = out_.data() + (b * SQ * H + r0 + rr) * ref::kDv;
        const T* src = w.o.data() + rr * ref::kDv;
        for (int64_t d = 0; d < ref::kDv; ++d) dst[d] = static_cast<double>(src[d]);
      }
    }
  }

  AttnBuffers in_;   // a private copy (prepare's contract)
  AttnInputs view_;  // of in_, alive as long as cache_ reads through it
  ref::PagedCache cache_;
  std::vector<double> out_, lse_;
  bool ran_ = false;
};

template <class T>
class NaiveMha final : public AttentionImpl {
 public:
  NaiveMha() {
    info_.name = Traits<T>::name;
    info_.backend = "cpu";
    info_.description = fmt::format(
        "naive MHA in {}: latent cache decompressed to per-sequence K (576) / V (512), full softmax(QK^T)V",
        sizeof(T) == 8 ? "float64" : "float32");
    info_.role = KernelRole::baseline;
    info_.out_dtype = Traits<T>::dtype;
    info_.compute = ComputePrecision{Traits<T>::dtype, Traits<T>::dtype};  // T throughout
    info_.caps = host_capabilities();
  }
  const KernelInfo& info() const override { return info_; }

  // What this implementation moves: q, the latent cache read once to decompress, K (576) and
  // V (512) in T written by the decompression and read back by the attention, once per
  // sequence (sparse: per query token, which gathers its own) since every head reads the same
  // values, and out and lse in T. (A per-head count, heads x more, is what an MHA kernel fed
  // materialised per-head K/V would move; this one does not, and a model of bytes it does not
  // move made its rows read as several times the machine's bandwidth.)
  CostModel cost(const AttnInputs& in) const override {
    const AttnShape& sh = in.shape;
    const AttnTraffic t = attention_traffic(in);
    const double gathered = static_cast<double>(sh.topk > 0 ? t.pairs : t.tokens);
    const double rows = static_cast<double>(sh.batch) * sh.s_q * sh.heads;
    CostModel c;
    c.bytes = rows * sh.d_qk * 2 + gathered * cache_bytes_per_token(sh.cache_format) +
              2.0 * gathered * (sh.d_qk + sh.d_v) * sizeof(T) + rows * sh.d_v * sizeof(T) + rows * sizeof(T);
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
}  // namespace mla::cpu

namespace mla::builtin {

std::unique_ptr<AttentionImpl> make_cpu_naive_mha_fp64() { return std::make_unique<cpu::NaiveMha<double>>(); }
std::unique_ptr<AttentionImpl> make_cpu_naive_mha_fp32() { return std::make_unique<cpu::NaiveMha<float>>(); }

}  // namespace mla::builtin
