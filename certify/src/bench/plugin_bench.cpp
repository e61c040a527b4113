// A C plug-in opened for timing (external_bench.hpp): called in this process through the same
// host path the certifier's child uses (plugin::call_decode), on inputs copied once in prepare().
#include <fmt/format.h>

#include "mla/certify/certify.hpp"
#include "mla/certify/external_bench.hpp"
#include "mla/core/conventions.hpp"
#include "mla/core/sha256.hpp"
#include "mla/core/text.hpp"
#include "mla/plugin/host.hpp"
#include "isolation/arena.hpp"
#include "run/session.hpp"

namespace mla::certify {
namespace {

std::size_t elements(const std::vector<int64_t>& dims) {
  std::size_t n = 1;
  for (const int64_t d : dims) n *= static_cast<std::size_t>(d);
  return n;
}

// The calling path without a kernel: the arguments are built and the plug-in's copies made as
// for a real call, then nothing is computed.
int32_t decode_nothing(const mla_plugin_decode_args*, char*, std::size_t) { return MLA_PLUGIN_OK; }

class PluginPrepared final : public PreparedAttention {
 public:
  PluginPrepared(std::shared_ptr<plugin::Library> lib, mla_plugin_decode_fn fn, const AttnInputs& canonical)
      : lib_(std::move(lib)), fn_(fn), canonical_shape_(canonical.shape) {
    // The kernel's conventions are applied here, untimed, as the certifier applies them before
    // a call: a kernel that numbers indices its own way is timed on the inputs it reads.
    auto converted = inputs_to_kernel(lib_->info().conventions, canonical);
    inputs_ = converted ? std::move(*converted) : AttnBuffers(canonical);
    value_bytes_ = static_cast<int>(out_bytes_per_value(lib_->info().out_dtype));
    out_.assign(elements(out_shape(canonical_shape_)) * value_bytes_, 0);
    lse_.assign(elements(lse_shape(canonical_shape_)) * sizeof(float), 0);
  }
  void run() override {
    char error[1024];
    const int32_t rc = plugin::call_decode(*lib_, inputs_.view(), out_.data(), out_.size(), lse_.data(), lse_.size(),
                                           error, sizeof error, nullptr, fn_);
    if (rc == MLA_PLUGIN_OK) return;
    const std::string why = fmt::format("plug-in {} returned {}: {}", lib_->info().name, plugin::describe_rc(rc),
                                        error[0] ? printable(error) : "(no message)");
    if (rc == MLA_PLUGIN_UNSUPPORTED) throw UnsupportedError(why);
    throw Error(why);
  }
  AttnOutputs results() override {
    return canonical_outputs(lib_->info(), canonical_shape_, out_, lse_);
  }

 private:
  std::shared_ptr<plugin::Library> lib_;
  mla_plugin_decode_fn fn_;
  AttnShape canonical_shape_;
  AttnBuffers inputs_;
  int value_bytes_ = 4;
  std::vector<uint8_t> out_, lse_;
};

class PluginImpl final : public AttentionImpl {
 public:
  PluginImpl(std::shared_ptr<plugin::Library> lib, bool empty) : lib_(std::move(lib)), empty_(empty), info_(lib_->info()) {
    if (empty_) {
      info_.name = overhead_name(info_.name);
      info_.description = "the calling path of " + lib_->info().name + " with a decode that does nothing";
    }
  }
  const KernelInfo& info() const override { return info_; }
  std::optional<std::string> unavailable() const override {
    if (auto why = lib_->unavailable()) return why;
    // call_decode copies every input to the device and the outputs back on each call of a
    // device-memory plug-in (the certifier's audit needs host buffers); timed, that would be the
    // copies' speed, not the kernel's.
    if (lib_->device_memory())
      return std::string("a device-memory plug-in: this driver copies its inputs to the device on every call, so "
                         "its time would be the copies'; time it through the Python door or a device-resident harness");
    return std::nullopt;
  }
  std::unique_ptr<PreparedAttention> prepare(const AttnInputs& in) const override {
    if (auto why = check(in.shape)) throw UnsupportedError(*why);
    return std::make_unique<PluginPrepared>(lib_, empty_ ? &decode_nothing : nullptr, in);
  }

 private:
  std::shared_ptr<plugin::Library> lib_;
  bool empty_;
  KernelInfo info_;
};

}  // namespace

ExternalBenchKernel open_plugin_for_bench(const std::filesystem::path& library) {
  std::error_code ec;
  const auto abs = std::filesystem::absolute(library, ec).lexically_normal();
  if (ec || !std::filesystem::is_regular_file(abs, ec))
    throw UsageError(fmt::format("--plugin {}: not a readable file", printable(library.string())));
  std::shared_ptr<plugin::Library> lib;
  try {
    lib = plugin::Library::open(abs);
  } catch (const std::exception& e) {
    throw UsageError(fmt::format("--plugin {}: {}", printable(abs.string()), e.what()));
  }
  // The benchmark times decode calls; a prefill-only library (ABI 1.4) has none to time yet.
  if (!lib->decodes()) {
    throw UsageError(fmt::format("--plugin {}: it has no decode entry point (a prefill-only plug-in); the benchmark "
                                 "times decode calls only",
                                 printable(abs.string())));
  }
  ExternalBenchKernel k;
  k.impl = std::make_unique<PluginImpl>(lib, false);
  k.overhead = std::make_unique<PluginImpl>(lib, true);
  if (lib->has_can_implement()) {
    k.claim = [lib](const AttnShape& shape, std::optional<ScaleFmt> scale_fmt) -> std::optional<std::string> {
      const auto c = lib->can_implement(shape, scale_fmt, {});
      if (c.answer == plugin::Library::Claim::Answer::ok) return std::nullopt;
      if (c.answer == plugin::Library::Claim::Answer::unsupported) return printable(c.reason);
      return fmt::format("can_implement failed: {} {}", plugin::describe_rc(c.rc), printable(c.reason));
    };
  }
  k.origin = {{"kind", "plugin"},
              {"path", abs.string()},
              {"sha256", sha256_file(abs)},
              {"version", printable(lib->version())},
              {"abi", fmt::format("{}.{}", lib->descriptor().abi_version, lib->abi_minor())}};
  return k;
}

}  // namespace mla::certify
