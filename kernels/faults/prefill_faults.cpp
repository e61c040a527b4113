// The planted prefill bugs (faults.hpp lists them). Each is the float64 oracle
// (mla::ref::prefill_attention) called on inputs its bug rewrites: a mask one key late becomes
// each sequence cut in two, where that mask is the real one of a sequence with one query fewer;
// a wrong key range becomes gathered keys; a wrong scale or stride becomes that scale or the V
// really read. The top-left mask is the oracle's own alignment argument, which exists to compute
// what a kernel of that convention gives. So no oracle has a fault switch.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "mla/core/error.hpp"
#include "mla/faults/faults.hpp"
#include "mla/ref/prefill.hpp"

namespace mla::faults {
namespace {

enum class PrefillFault { causal_off_by_one, top_left_mask, cu_seqlens_shifted, no_mscale, v_unpadded_stride };

// The rewritten inputs start as these: q and the scale as given, no key rows and no sequences.
PrefillBuffers without_keys(const PrefillInputs& in) {
  PrefillBuffers b;
  b.shape = in.shape;
  b.shape.total_k = 0;
  b.softmax_scale = in.softmax_scale;
  b.q.assign(in.q.begin(), in.q.end());
  b.cu_seqlens_k = {0};
  return b;
}

// Appends key rows [begin, begin + n) of `in` (k and v, every head) as the next sequence's keys.
void append_keys(const PrefillInputs& in, int64_t begin, int64_t n, PrefillBuffers& to) {
  const int64_t kw = int64_t{in.shape.heads} * in.shape.d_qk, vw = int64_t{in.shape.heads} * in.shape.d_v;
  to.k.insert(to.k.end(), in.k.begin() + begin * kw, in.k.begin() + (begin + n) * kw);
  to.v.insert(to.v.end(), in.v.begin() + begin * vw, in.v.begin() + (begin + n) * vw);
  to.shape.total_k += n;
  to.cu_seqlens_k.push_back(static_cast<int32_t>(to.shape.total_k));
}

// causal_off_by_one: row i of a sequence sees keys 0 .. s_k - s_q + i + 1, the bottom-right mask
// of the same keys with one query fewer. So each sequence becomes two with the same keys, both
// masked bottom-right: its first s_q - 1 rows as a sequence of s_q - 1 queries, and its last row
// (which sees every key either way) alone. Rows keep their order; keys are at most doubled.
PrefillBuffers mask_one_key_late(const PrefillInputs& in) {
  if (!in.shape.causal || in.shape.total_q == 0) return PrefillBuffers(in);
  PrefillBuffers b = without_keys(in);
  b.cu_seqlens_q = {0};
  for (const auto& seq : prefill_sequences(in)) {
    if (seq.s_q == 0) continue;
    if (seq.s_q > 1) {
      append_keys(in, seq.k_begin, seq.s_k, b);
      b.cu_seqlens_q.push_back(static_cast<int32_t>(b.cu_seqlens_q.back() + seq.s_q - 1));
    }
    append_keys(in, seq.k_begin, seq.s_k, b);
    b.cu_seqlens_q.push_back(b.cu_seqlens_q.back() + 1);
  }
  b.shape.batch = static_cast<int>(b.cu_seqlens_q.size() - 1);
  return b;
}

// cu_seqlens_shifted: sequence i's keys are those of sequence i + 1 (the last keeps its own);
// queries, the mask and the scale as given.
PrefillBuffers keys_of_next_sequence(const PrefillInputs& in) {
  PrefillBuffers b = without_keys(in);
  b.cu_seqlens_q.assign(in.cu_seqlens_q.begin(), in.cu_seqlens_q.end());
  const auto seqs = prefill_sequences(in);
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    const auto& from = seqs[i + 1 < seqs.size() ? i + 1 : i];
    append_keys(in, from.k_begin, from.s_k, b);
  }
  return b;
}

// v_unpadded_stride: the V the kernel really reads from the padded [total_k, h, 192] buffer,
// element (t, h, d) at (t·heads + h)·128 + d: the buffer's first total_k·h·128 values, read as
// an unpadded V.
PrefillBuffers v_read_with_unpadded_stride(const PrefillInputs& in) {
  PrefillBuffers b(in);
  b.shape.d_v = kMhaDv;
  b.v.resize(static_cast<std::size_t>(in.shape.total_k * in.shape.heads * kMhaDv));
  return b;
}

class FaultyPrefillPrepared final : public PreparedPrefill {
 public:
  FaultyPrefillPrepared(PrefillBuffers in, CausalAlignment alignment, int out_width)
      : in_(std::move(in)), alignment_(alignment), out_width_(out_width) {}
  void run() override {
    out_ = ref::prefill_attention(in_.view(), alignment_);
    ran_ = true;
    if (out_width_ == kMhaDv) return;
    // Declared padded: out written out_width_ wide, zeros after the 128 P·V columns.
    const std::size_t rows = out_.out.size() / kMhaDv, wide = static_cast<std::size_t>(out_width_);
    std::vector<double> padded(rows * wide, 0.0);
    for (std::size_t r = 0; r < rows; ++r) std::copy_n(out_.out.begin() + r * kMhaDv, kMhaDv, padded.begin() + r * wide);
    out_.out = std::move(padded);
  }
  PrefillOutputs results() override {
    if (!ran_) throw Error("a prefill fault kernel: results() before run()");
    return out_;
  }

 private:
  PrefillBuffers in_;
  CausalAlignment alignment_;
  int out_width_;
  PrefillOutputs out_;
  bool ran_ = false;
};

class FaultyPrefill final : public PrefillImpl {
 public:
  FaultyPrefill(PrefillFault f, std::string name, std::string description) : fault_(f) {
    info_.name = std::move(name);
    info_.backend = "cpu";
    info_.description = std::move(description);
    info_.role = KernelRole::optimized;  // an implementation under test, never an oracle
    info_.out_dtype = OutDType::f64;
    info_.compute = ComputePrecision{OutDType::f64, OutDType::f64};
    info_.conventions.v_padded = f == PrefillFault::v_unpadded_stride;
  }
  const PrefillKernelInfo& info() const override { return info_; }
  std::unique_ptr<PreparedPrefill> prepare(const PrefillInputs& in) const override {
    const int width = kernel_v_width(info_.conventions, in.shape);
    if (fault_ == PrefillFault::v_unpadded_stride) {
      // Handed the padded V the kernel declared; what it then reads is a canonical-width V.
      const int64_t padded = in.shape.total_k * in.shape.heads * kMhaDqk;
      if (in.shape.d_v != kMhaDqk || static_cast<int64_t>(in.v.size()) != padded) {
        throw Error(fmt::format("{}: declares V padded to {} (v_padded), got d_v={} and {} V values (want {})",
                                info_.name, kMhaDqk, in.shape.d_v, in.v.size(), padded));
      }
      auto misread = v_read_with_unpadded_stride(in);
      if (auto why = check(misread.view())) throw UnsupportedError(info_.name + ": " + *why);
      return admit(std::move(misread), CausalAlignment::bottom_right, width);
    }
    validate_prefill_inputs(in, info_.name);
    if (auto why = check(in)) throw UnsupportedError(info_.name + ": " + *why);
    switch (fault_) {
      case PrefillFault::causal_off_by_one:
        return admit(mask_one_key_late(in), CausalAlignment::bottom_right, width);
      case PrefillFault::top_left_mask:
        return admit(PrefillBuffers(in), CausalAlignment::top_left, width);
      case PrefillFault::cu_seqlens_shifted:
        return admit(keys_of_next_sequence(in), CausalAlignment::bottom_right, width);
      case PrefillFault::no_mscale: {
        PrefillBuffers b(in);
        b.softmax_scale = 1.0 / std::sqrt(static_cast<double>(kMhaDqk));
        return admit(std::move(b), CausalAlignment::bottom_right, width);
      }
      case PrefillFault::v_unpadded_stride:
        break;
    }
    throw Error(fmt::format("{}: unhandled prefill fault", info_.name));
  }

 private:
  // The rewritten inputs, checked as any inputs are before the oracle sees them (the claims were
  // checked on the inputs handed over: a rewrite may hold more key rows than they allow).
  std::unique_ptr<PreparedPrefill> admit(PrefillBuffers b, CausalAlignment a, int width) const {
    validate_prefill_inputs(b.view(), info_.name);
    return std::make_unique<FaultyPrefillPrepared>(std::move(b), a, width);
  }

  PrefillFault fault_;
  PrefillKernelInfo info_;
};

struct PrefillSpec {
  const char* name;
  PrefillFault fault;
  const char* description;
};

const std::vector<PrefillSpec>& prefill_specs() {
  static const std::vector<PrefillSpec> specs{
      {"causal_off_by_one", PrefillFault::causal_off_by_one,
       "PERTURBED: cpu_prefill_fp64 whose causal mask shows each query one key too many"},
      {"top_left_mask", PrefillFault::top_left_mask,
       "PERTURBED: cpu_prefill_fp64 masking top-left while declaring bottom-right"},
      {"cu_seqlens_shifted", PrefillFault::cu_seqlens_shifted,
       "PERTURBED: cpu_prefill_fp64 reading each sequence's keys from the next sequence's range"},
      {"no_mscale", PrefillFault::no_mscale, "PERTURBED: cpu_prefill_fp64 using 192^-0.5 instead of the given scale"},
      {"v_unpadded_stride", PrefillFault::v_unpadded_stride,
       "PERTURBED: cpu_prefill_fp64 declaring V padded to 192, reading it with the 128 stride"},
  };
  return specs;
}

}  // namespace

const std::vector<std::string>& prefill_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& s : prefill_specs()) n.emplace_back(s.name);
    return n;
  }();
  return names;
}

std::unique_ptr<PrefillImpl> make_prefill(const std::string& name) {
  for (const auto& s : prefill_specs()) {
    if (name == s.name) return std::make_unique<FaultyPrefill>(s.fault, fmt::format("cpu_prefill_fp64_{}", s.name), s.description);
  }
  throw Error(fmt::format("unknown prefill fault kernel '{}' (known: {})", name, fmt::join(prefill_names(), ", ")));
}

}  // namespace mla::faults
