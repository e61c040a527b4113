// cpu_mla_fp64: the float64 reference attention core (mla_reference) behind the kernel
// interface, and its deliberately broken twin for the certifier's self-tests.
#include <fmt/format.h>

#include "cpu_kernels.hpp"
#include "mla/core/error.hpp"
#include "mla/kernels/perturbed.hpp"
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
  PreparedMlaFp64(const AttnInputs& in, ref::AttnOptions opt) : in_(in), opt_(opt) {
    ref::validate_attention_inputs(in_.view());
  }
  void run() override {
    res_ = ref::attention_fp64(in_.view(), opt_);
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
  OwnedInputs in_;
  ref::AttnOptions opt_;
  ref::AttnResult res_;
  bool ran_ = false;
};

class MlaFp64 final : public AttentionImpl {
 public:
  MlaFp64(std::string name, std::string description, ref::AttnOptions opt) : opt_(opt) {
    info_.name = std::move(name);
    info_.backend = "cpu";
    info_.description = std::move(description);
    info_.out_dtype = OutDType::f64;
    info_.caps = host_capabilities();
  }
  const KernelInfo& info() const override { return info_; }
  std::unique_ptr<PreparedAttention> prepare(const AttnInputs& in) const override {
    if (auto why = check(in.shape)) throw UnsupportedError(fmt::format("{}: {}", info_.name, *why));
    return std::make_unique<PreparedMlaFp64>(in, opt_);
  }

 private:
  KernelInfo info_;
  ref::AttnOptions opt_;
};

}  // namespace

std::unique_ptr<AttentionImpl> make_cpu_mla_fp64() {
  return std::make_unique<MlaFp64>(
      "cpu_mla_fp64", "float64 absorbed MLA attention core (the truth reference), online softmax, Eigen", ref::AttnOptions{});
}

}  // namespace mla::cpu

namespace mla {

std::unique_ptr<AttentionImpl> make_dropped_last_token_kernel() {
  ref::AttnOptions opt;
  opt.drop_trailing_tokens = 1;
  return std::make_unique<cpu::MlaFp64>("cpu_mla_fp64_dropped_last_token",
                                        "PERTURBED: cpu_mla_fp64 that never attends the last cache token", opt);
}

}  // namespace mla
