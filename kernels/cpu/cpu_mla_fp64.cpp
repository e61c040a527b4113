// cpu_mla_fp64: the float64 reference attention core (mla_reference) behind the kernel
// interface, in the role of the oracle: the first link of the chain a kernel can be run as.
#include <fmt/format.h>

#include "cpu_kernels.hpp"
#include "mla/core/error.hpp"
#include "mla/ref/attention.hpp"

namespace mla::cpu {

Capabilities host_capabilities() {
  Capabilities c;
  c.cache_formats = {CacheFormat::bf16, CacheFormat::fp8};
  c.min_heads = 1;
  c.max_heads = 128;
  c.min_s_q = 1;
  c.max_s_q = 64;
  c.dense = true;
  c.sparse = true;
  c.varlen = true;
  return c;
}

namespace {

class PreparedMlaFp64 final : public PreparedAttention {
 public:
  explicit PreparedMlaFp64(const AttnInputs& in) : in_(in) { validate_attention_inputs(in_.view()); }
  void run() override {
    ran_ = false;  // a run() that throws leaves res_ half written: no results() from it
    ref::attention_fp64(in_.view(), res_, scratch_);  // a repeated run() reuses the buffers
    ran_ = true;
  }
  AttnOutputs results() override {
    if (!ran_) throw Error("cpu_mla_fp64: results() called before run()");
    AttnOutputs o;
    o.dtype = OutDType::f64;
    o.out = res_.out;
    o.lse = res_.lse;
    return o;
  }

 private:
  AttnBuffers in_;
  ref::AttnResult res_;
  ref::AttentionScratch scratch_;
  bool ran_ = false;
};

class MlaFp64 final : public AttentionImpl {
 public:
  MlaFp64() {
    info_.name = "cpu_mla_fp64";
    info_.backend = "cpu";
    info_.description = "float64 absorbed MLA attention core (the truth reference), online softmax, Eigen";
    info_.role = KernelRole::oracle;
    info_.out_dtype = OutDType::f64;
    info_.compute = ComputePrecision{OutDType::f64, OutDType::f64};
    info_.caps = host_capabilities();
  }
  const KernelInfo& info() const override { return info_; }
  std::unique_ptr<PreparedAttention> prepare(const AttnInputs& in) const override {
    if (auto why = check(in.shape)) throw UnsupportedError(fmt::format("{}: {}", info_.name, *why));
    return std::make_unique<PreparedMlaFp64>(in);
  }

 private:
  KernelInfo info_;
};

}  // namespace

}  // namespace mla::cpu

namespace mla::builtin {

std::unique_ptr<AttentionImpl> make_cpu_mla_fp64() { return std::make_unique<cpu::MlaFp64>(); }

}  // namespace mla::builtin
