// cpu_prefill_fp64: the prefill oracle (mla/ref/prefill.hpp: float64 blocked products, threads)
// behind the prefill implementation interface, so the certifier, the benchmarks and the tests
// find it in the registry beside the kernels it judges, as cpu_mla_fp64 is for decode.
#include "mla/core/error.hpp"
#include "mla/core/prefill_kernel.hpp"
#include "mla/ref/prefill.hpp"

namespace mla::cpu {
namespace {

class PrefillFp64Prepared final : public PreparedPrefill {
 public:
  explicit PrefillFp64Prepared(const PrefillInputs& in) : in_(in) {}
  void run() override { out_ = ref::prefill_attention(in_.view()); }
  PrefillOutputs results() override {
    if (out_.out.empty() && out_.lse.empty() && in_.shape.total_q > 0) throw Error("cpu_prefill_fp64: results() before run()");
    return out_;
  }

 private:
  PrefillBuffers in_;
  PrefillOutputs out_;
};

class PrefillFp64 final : public PrefillImpl {
 public:
  PrefillFp64() {
    info_.name = "cpu_prefill_fp64";
    info_.backend = "cpu";
    info_.description = "the float64 prefill oracle (blocked Q·Kᵀ and P·V with an online softmax, threads)";
    info_.role = KernelRole::oracle;
    info_.out_dtype = OutDType::f64;
    info_.compute = ComputePrecision{OutDType::f64, OutDType::f64};
  }
  const PrefillKernelInfo& info() const override { return info_; }
  std::unique_ptr<PreparedPrefill> prepare(const PrefillInputs& in) const override {
    validate_prefill_inputs(in, info_.name);
    if (auto why = check(in)) throw UnsupportedError(info_.name + ": " + *why);
    return std::make_unique<PrefillFp64Prepared>(in);
  }

 private:
  PrefillKernelInfo info_;
};

}  // namespace
}  // namespace mla::cpu

namespace mla::builtin {
std::unique_ptr<PrefillImpl> make_cpu_prefill_fp64() { return std::make_unique<cpu::PrefillFp64>(); }
}  // namespace mla::builtin
