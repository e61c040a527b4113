// A C plug-in opened for timing (external_bench.hpp): called in this process through the same
// host path the certifier's child uses (plugin::call_decode), on inputs copied once in prepare().
#include <cstring>
#include <functional>

#include <fmt/format.h>

#include "mla/certify/certify.hpp"
#include "mla/certify/external_bench.hpp"
#include "mla/core/conventions.hpp"
#include "mla/core/sha256.hpp"
#include "mla/core/text.hpp"
#include "mla/plugin/host.hpp"
#include "isolation/arena.hpp"
#include "kinds/entry_plans.hpp"
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

// ---- the other entries (ABI 1.4 and 1.5) ------------------------------------------------------

// Calling paths without a kernel, one per entry, as decode_nothing.
int32_t prefill_nothing(const mla_plugin_prefill_args*, char*, std::size_t) { return MLA_PLUGIN_OK; }
int32_t merge_nothing(const mla_plugin_merge_args*, char*, std::size_t) { return MLA_PLUGIN_OK; }
int32_t topk_nothing(const mla_plugin_topk_args*, char*, std::size_t) { return MLA_PLUGIN_OK; }
int32_t logits_nothing(const mla_plugin_indexer_logits_args*, char*, std::size_t) { return MLA_PLUGIN_OK; }
int32_t sparse_prefill_nothing(const mla_plugin_sparse_prefill_args*, char*, std::size_t) { return MLA_PLUGIN_OK; }

// Why a plug-in cannot be timed by this driver (its own reason, or device memory: see
// PluginImpl::unavailable), or nullopt.
std::optional<std::string> bench_unavailable(const plugin::Library& lib) {
  if (auto why = lib.unavailable()) return why;
  if (lib.device_memory())
    return std::string("a device-memory plug-in: this driver copies its inputs to the device on every call, so "
                       "its time would be the copies'; time it through the Python door or a device-resident harness");
  return std::nullopt;
}

// One entry call's result code as the benchmark's exceptions (UNSUPPORTED: a refusal).
void check_rc(const plugin::Library& lib, const std::string& entry, int32_t rc, const char* error) {
  if (rc == MLA_PLUGIN_OK) return;
  const std::string why = fmt::format("plug-in {} ({}) returned {}: {}", lib.info().name, entry, plugin::describe_rc(rc),
                                      error[0] ? printable(error) : "(no message)");
  if (rc == MLA_PLUGIN_UNSUPPORTED) throw UnsupportedError(why);
  throw Error(why);
}

// A prepared entry call: the inputs (already in the entry's conventions) copied once, the output
// buffers, the call (the entry, or its empty stand-in for the overhead row) and the reading of the
// outputs back, widened, still in the entry's conventions.
template <class Prepared, class Buffers, class Outputs>
class EntryPrepared final : public Prepared {
 public:
  using Call = std::function<int32_t(const Buffers&, std::vector<std::vector<uint8_t>>&, char*, std::size_t)>;
  using Read = std::function<Outputs(const std::vector<std::vector<uint8_t>>&)>;
  EntryPrepared(std::shared_ptr<plugin::Library> lib, std::string entry, Buffers in, std::vector<std::size_t> out_bytes,
                Call call, Read read)
      : lib_(std::move(lib)), entry_(std::move(entry)), in_(std::move(in)), call_(std::move(call)), read_(std::move(read)) {
    for (const auto n : out_bytes) out_.emplace_back(std::max<std::size_t>(n, 1), 0);
  }
  void run() override {
    char error[1024] = {};
    check_rc(*lib_, entry_, call_(in_, out_, error, sizeof error), error);
  }
  Outputs results() override { return read_(out_); }

 private:
  std::shared_ptr<plugin::Library> lib_;
  std::string entry_;
  Buffers in_;
  std::vector<std::vector<uint8_t>> out_;
  Call call_;
  Read read_;
};

// An entry of the plug-in as an implementation of its kind: its declared info (renamed for the
// overhead row), the kind's default claims check and cost model, prepare() copying the inputs.
template <class Impl, class Info, class Inputs, class Prepared>
class EntryImpl final : public Impl {
 public:
  using Make = std::function<std::unique_ptr<Prepared>(const Inputs&)>;
  EntryImpl(std::shared_ptr<plugin::Library> lib, Info info, bool empty, Make make)
      : lib_(std::move(lib)), info_(std::move(info)), make_(std::move(make)) {
    if (empty) {
      const std::string of = info_.name;
      info_.name = overhead_name(of);
      info_.description = "the calling path of " + of + " with an entry that does nothing";
    }
  }
  const Info& info() const override { return info_; }
  std::optional<std::string> unavailable() const override { return bench_unavailable(*lib_); }
  // The entry's own can_implement (1.6) first, as `mla certify` asks it: a point it does not
  // claim is skipped in its words, never called. The overhead row asks the same.
  std::unique_ptr<Prepared> prepare(const Inputs& in) const override {
    const auto c = lib_->can_implement(in);
    if (c.answer == plugin::Library::Claim::Answer::unsupported) {
      throw UnsupportedError(fmt::format("{} (the kernel's can_implement)", printable(c.reason)));
    }
    if (c.answer == plugin::Library::Claim::Answer::error) {
      throw UnsupportedError(fmt::format("can_implement failed: {} {}", plugin::describe_rc(c.rc), printable(c.reason)));
    }
    return make_(in);
  }

 private:
  std::shared_ptr<plugin::Library> lib_;
  Info info_;
  Make make_;
};

void open_entries(const std::shared_ptr<plugin::Library>& lib, ExternalBenchKernel& k) {
  if (const auto& info = lib->prefill_info()) {
    const PrefillKernelInfo i = *info;
    const auto make = [lib, i](bool empty) {
      return [lib, i, empty](const PrefillInputs& in) -> std::unique_ptr<PreparedPrefill> {
        const auto& sh = in.shape;
        const std::size_t vb = out_bytes_per_value(i.out_dtype);
        const auto n_out = static_cast<std::size_t>(sh.total_q * sh.heads * sh.d_v);
        const auto n_lse = static_cast<std::size_t>(sh.total_q * sh.heads);
        // The outputs read back as the certifier reads them (entry_plans.hpp).
        return std::make_unique<EntryPrepared<PreparedPrefill, PrefillBuffers, PrefillOutputs>>(
            lib, "prefill", PrefillBuffers(in), std::vector<std::size_t>{n_out * vb, n_lse * 4},
            [lib, empty](const PrefillBuffers& b, auto& out, char* err, std::size_t n) {
              return plugin::call_prefill(*lib, b.view(), out[0].data(), out[0].size(), out[1].data(), out[1].size(), err,
                                          n, nullptr, empty ? &prefill_nothing : nullptr);
            },
            prefill_entry_plan(i, in).outputs);
      };
    };
    using E = EntryImpl<PrefillImpl, PrefillKernelInfo, PrefillInputs, PreparedPrefill>;
    k.prefill = std::make_unique<E>(lib, *info, false, make(false));
    k.prefill_overhead = std::make_unique<E>(lib, *info, true, make(true));
  }
  if (const auto& info = lib->merge_info()) {
    const auto make = [lib](bool empty) {
      return [lib, empty](const MergeInputs& in) -> std::unique_ptr<PreparedMerge> {
        const auto& sh = in.shape;
        const std::size_t vb = bytes_per_value(sh.dtype);
        const auto n_out = static_cast<std::size_t>(sh.tokens * sh.heads * sh.head_dim);
        const auto n_lse = static_cast<std::size_t>(sh.tokens * sh.heads);
        return std::make_unique<EntryPrepared<PreparedMerge, MergeBuffers, MergeOutputs>>(
            lib, "merge", MergeBuffers(in), std::vector<std::size_t>{n_out * vb, n_lse * 4},
            [lib, empty](const MergeBuffers& b, auto& out, char* err, std::size_t n) {
              return plugin::call_merge(*lib, b.view(), out[0].data(), out[0].size(), out[1].data(), out[1].size(), err, n,
                                        nullptr, empty ? &merge_nothing : nullptr);
            },
            merge_entry_plan(in).outputs);
      };
    };
    using E = EntryImpl<MergeImpl, MergeKernelInfo, MergeInputs, PreparedMerge>;
    k.merge = std::make_unique<E>(lib, *info, false, make(false));
    k.merge_overhead = std::make_unique<E>(lib, *info, true, make(true));
  }
  if (const auto& info = lib->topk_info()) {
    const TopkKernelInfo i = *info;
    const auto make = [lib, i](bool empty) {
      return [lib, i, empty](const TopkInputs& in) -> std::unique_ptr<PreparedTopk> {
        const auto n = static_cast<std::size_t>(in.shape.rows * in.shape.k);
        return std::make_unique<EntryPrepared<PreparedTopk, TopkBuffers, TopkOutputs>>(
            lib, "top-k", TopkBuffers(in), std::vector<std::size_t>{n * 4},
            [lib, empty](const TopkBuffers& b, auto& out, char* err, std::size_t m) {
              return plugin::call_topk(*lib, b.view(), reinterpret_cast<int32_t*>(out[0].data()), out[0].size(), err, m,
                                       nullptr, empty ? &topk_nothing : nullptr);
            },
            topk_entry_plan(i, in).outputs);
      };
    };
    using E = EntryImpl<TopkImpl, TopkKernelInfo, TopkInputs, PreparedTopk>;
    k.topk = std::make_unique<E>(lib, *info, false, make(false));
    k.topk_overhead = std::make_unique<E>(lib, *info, true, make(true));
  }
  if (const auto& info = lib->indexer_logits_info()) {
    const auto make = [lib](bool empty) {
      return [lib, empty](const IndexerLogitsInputs& in) -> std::unique_ptr<PreparedIndexerLogits> {
        const auto n = static_cast<std::size_t>(in.shape.rows() * in.shape.cols());
        return std::make_unique<EntryPrepared<PreparedIndexerLogits, IndexerLogitsBuffers, std::vector<float>>>(
            lib, "indexer logits", IndexerLogitsBuffers(in), std::vector<std::size_t>{n * 4},
            [lib, empty](const IndexerLogitsBuffers& b, auto& out, char* err, std::size_t m) {
              return plugin::call_indexer_logits(*lib, b.view(), reinterpret_cast<float*>(out[0].data()), out[0].size(),
                                                 err, m, nullptr, empty ? &logits_nothing : nullptr);
            },
            indexer_logits_entry_plan(in).outputs);
      };
    };
    using E = EntryImpl<IndexerLogitsImpl, IndexerLogitsKernelInfo, IndexerLogitsInputs, PreparedIndexerLogits>;
    k.indexer_logits = std::make_unique<E>(lib, *info, false, make(false));
    k.indexer_logits_overhead = std::make_unique<E>(lib, *info, true, make(true));
  }
  if (const auto& info = lib->sparse_prefill_info()) {
    const SparsePrefillKernelInfo i = *info;
    const auto make = [lib, i](bool empty) {
      return [lib, i, empty](const SparsePrefillInputs& in) -> std::unique_ptr<PreparedSparsePrefill> {
        const auto& sh = in.shape;
        const std::size_t vb = out_bytes_per_value(i.out_dtype);
        const auto n_out = static_cast<std::size_t>(sh.s_q * sh.heads * kSparsePrefillDv);
        const auto n_row = static_cast<std::size_t>(sh.s_q * sh.heads);
        return std::make_unique<EntryPrepared<PreparedSparsePrefill, SparsePrefillBuffers, SparsePrefillOutputs>>(
            lib, "sparse prefill", SparsePrefillBuffers(in), std::vector<std::size_t>{n_out * vb, n_row * 4, n_row * 4},
            [lib, empty](const SparsePrefillBuffers& b, auto& out, char* err, std::size_t n) {
              return plugin::call_sparse_prefill(*lib, b.view(), out[0].data(), out[0].size(),
                                                 reinterpret_cast<float*>(out[1].data()), out[1].size(),
                                                 reinterpret_cast<float*>(out[2].data()), out[2].size(), err, n, nullptr,
                                                 empty ? &sparse_prefill_nothing : nullptr);
            },
            sparse_prefill_entry_plan(i, in).outputs);
      };
    };
    using E = EntryImpl<SparsePrefillImpl, SparsePrefillKernelInfo, SparsePrefillInputs, PreparedSparsePrefill>;
    k.sparse_prefill = std::make_unique<E>(lib, *info, false, make(false));
    k.sparse_prefill_overhead = std::make_unique<E>(lib, *info, true, make(true));
  }
}

class PluginImpl final : public AttentionImpl {
 public:
  PluginImpl(std::shared_ptr<plugin::Library> lib, bool empty) : lib_(std::move(lib)), empty_(empty), info_(lib_->info()) {
    if (empty_) {
      info_.name = overhead_name(info_.name);
      info_.description = "the calling path of " + lib_->info().name + " with a decode that does nothing";
    }
  }
  const KernelInfo& info() const override { return info_; }
  // call_decode copies every input to the device and the outputs back on each call of a
  // device-memory plug-in (the certifier's audit needs host buffers); timed, that would be the
  // copies' speed, not the kernel's.
  std::optional<std::string> unavailable() const override { return bench_unavailable(*lib_); }
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
  ExternalBenchKernel k;
  k.origin = {{"kind", "plugin"},
              {"path", abs.string()},
              {"sha256", sha256_file(abs)},
              {"version", printable(lib->version())},
              {"abi", fmt::format("{}.{}", lib->descriptor().abi_version, lib->abi_minor())}};
  open_entries(lib, k);
  if (!lib->decodes()) {
    // A library of other entries only (its indexer append, 1.5, has no benchmark rows yet).
    if (!k.prefill && !k.merge && !k.topk && !k.indexer_logits && !k.sparse_prefill) {
      throw UsageError(fmt::format("--plugin {}: it has no entry the benchmark times (decode, prefill, merge, top-k, "
                                   "indexer logits, sparse prefill)",
                                   printable(abs.string())));
    }
    return k;
  }
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
  return k;
}

}  // namespace mla::certify
