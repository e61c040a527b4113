#include "gpu_bench.hpp"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <variant>
#include <vector>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "mla/core/error.hpp"
#include "mla/cuda/check.hpp"
#include "harness.hpp"
#include "kernel_loop.hpp"

namespace mla::device {
namespace {

using Clock = std::chrono::steady_clock;

// The flusher and the host-clock fallback's stream sync are shared by every kernel benchmark.
cuda::L2Flusher& flusher() {
  static cuda::L2Flusher f;  // a read-only stream over 4x the device's L2 (mla/cuda/timing.hpp)
  return f;
}

std::optional<std::string>& poisoned() {
  static std::optional<std::string> p;
  return p;
}

// After a row failed: whether the context still works. A sticky error (illegal address, trap)
// is returned by every later synchronize; an ordinary one is cleared by cudaGetLastError.
void note_if_poisoned(const std::string& row) {
  if (poisoned()) return;
  const cudaError_t first = cudaDeviceSynchronize();
  (void)cudaGetLastError();
  if (first == cudaSuccess) return;
  const cudaError_t again = cudaDeviceSynchronize();
  if (again != cudaSuccess)
    poisoned() = fmt::format("{}: {} ({}), the CUDA context is unusable from there on", row,
                             cudaGetErrorName(again), cudaGetErrorString(again));
}

// Every timed call's seconds and the call's models, per "kernel/point", for the ratio rows that
// run after the kernel rows (Google Benchmark runs benchmarks in registration order).
struct Timed {
  std::vector<double> seconds;
  double cache_tokens = 0, cache_bytes_per_token = 0, model_bytes = 0, model_flops = 0;
  std::string error;  // the row's error message when it did not run
};
std::map<std::string, Timed>& timings() {
  static std::map<std::string, Timed> t;
  return t;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// CUDA events bracketing exactly the implementation's work when the prepared call tells its
// stream (cuda::StreamBound); otherwise the only honest measurement is a host clock around
// run() + synchronize(). The L2 flush is enqueued before the timed interval either way.
class DeviceTimer : public bench::CallTimer {
 public:
  DeviceTimer(const cuda::StreamBound* bound, cuda::L2Flusher* fl) : bound_(bound), fl_(fl) {
    if (bound_) events_.emplace();
  }
  void flush() override {
    if (!fl_) return;
    if (bound_) {
      fl_->flush(bound_->stream());  // enqueued: ordered before the call's work on its stream
      return;
    }
    fl_->flush(nullptr);
    MLA_CUDA_CHECK(cudaDeviceSynchronize());  // the implementation's stream is not ordered after ours
  }
  double time_call(bench::TimedCall& run) override {
    if (bound_) {
      const cudaStream_t s = bound_->stream();
      events_->start(s);
      run.run();
      events_->stop(s);
      return 1e-3 * events_->elapsed_ms();
    }
    const auto t0 = Clock::now();
    run.run();
    run.synchronize();
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }
  bool flushed() const override { return fl_ != nullptr; }
  bool event_timed() const { return bound_ != nullptr; }

 private:
  const cuda::StreamBound* bound_;
  cuda::L2Flusher* fl_;
  std::optional<cuda::EventTimer> events_;
};

// The device's side of the one timing loop (suites/bench/kernel_loop.hpp): its timer, its roofs
// and tokens-per-second counters, and the poisoned-context handling.
class DeviceSide : public bench::RowSide {
 public:
  explicit DeviceSide(const GpuBenchSetup& s) : s_(s) {}
  std::optional<std::string> refuse() override {
    if (const auto& why = poisoned()) return "not run: an earlier row left the CUDA context unusable: " + *why;
    return std::nullopt;
  }
  std::unique_ptr<bench::CallTimer> timer(const bench::RowCase&, PreparedAttention& run) override {
    auto t = std::make_unique<DeviceTimer>(dynamic_cast<const cuda::StreamBound*>(&run),
                                           s_.options.flush_l2 ? &flusher() : nullptr);
    event_timed_ = t->event_timed();
    return t;
  }
  void after_failure(const std::string& row) override { note_if_poisoned(row); }
  void finish(benchmark::State& st, const bench::RowCase& rc, const AttnInputs& in, const bench::RowResult& r) override {
    // Byte model: q + the cache bytes of every token some query attends, read once (sparse: the
    // distinct valid indices of each sequence) + out + lse. FLOP model: 2·(576 + 512) per
    // attended (query row, key) pair and head. Both from mla_cost_model (docs/field.md).
    const AttnTraffic traffic = attention_traffic(in);
    const AttnShape& sh = rc.point->shape;
    using C = benchmark::Counter;
    mla::bench::Roof roof{kRoofBw, kRoofPeak, s_.ceiling(kRoofBw), s_.ceiling(kRoofPeak)};
    std::string label = mla::bench::roofline_counters(st, r.cost, r.total(), roof);
    if (label.empty()) label = "no ceiling measured";
    // Tokens per second: cache tokens read (the memory-bound work) and query tokens decoded
    // (b·s_q per call, what a serving system counts).
    st.counters["cache_tokens_per_second"] = C(static_cast<double>(traffic.tokens), C::kIsIterationInvariantRate);
    st.counters["query_tokens_per_second"] = C(static_cast<double>(int64_t{sh.batch} * sh.s_q), C::kIsIterationInvariantRate);
    st.counters["cold_cache"] = C(r.flushed ? 1.0 : 0.0);
    st.counters["event_timed"] = C(event_timed_ ? 1.0 : 0.0);
    label += event_timed_ ? "; CUDA events" : "; host clock incl. launch (implementation does not expose its stream)";
    label += r.flushed ? "; L2 flushed" : "; warm L2";
    st.SetLabel(label);
    Timed& t = timings()[rc.impl->info().name + "/" + rc.point->name];
    t.cache_tokens = static_cast<double>(traffic.tokens);
    t.cache_bytes_per_token = static_cast<double>(cache_bytes_per_token(sh.cache_format));
    t.model_bytes = r.cost.bytes;
    t.model_flops = r.cost.flops;
  }

 private:
  const GpuBenchSetup& s_;
  bool event_timed_ = false;
};

class DevicePhaseSide final : public bench::PhaseSide {
 public:
  explicit DevicePhaseSide(const GpuBenchSetup& s) : s_(s) {}
  std::unique_ptr<bench::CallTimer> timer(const bench::KernelFacts&, std::size_t,
                                          const bench::PreparedRef& call) override {
    const cuda::StreamBound* bound =
        std::visit([](const auto* p) { return dynamic_cast<const cuda::StreamBound*>(p); }, call);
    auto t = std::make_unique<DeviceTimer>(bound, s_.options.flush_l2 ? &flusher() : nullptr);
    event_timed_ = t->event_timed();
    return t;
  }
  // The kind's byte and FLOP model (the kernel's cost(), beside the timed call in phase_rows.cpp)
  // against the device roofs measured in this run.
  void finish(benchmark::State& st, const bench::KernelFacts&, const bench::RowResult& r) override {
    using C = benchmark::Counter;
    const bench::Roof roof{kRoofBw, kRoofPeak, s_.ceiling(kRoofBw), s_.ceiling(kRoofPeak)};
    std::string label = bench::roofline_counters(st, r.cost, r.total(), roof);
    if (label.empty()) label = "no ceiling measured";
    if (r.logits > 0) st.counters["logits_per_second"] = C(r.logits, C::kIsIterationInvariantRate);
    st.counters["cold_cache"] = C(r.flushed ? 1.0 : 0.0);
    st.counters["event_timed"] = C(event_timed_ ? 1.0 : 0.0);
    label += event_timed_ ? "; CUDA events" : "; host clock incl. launch (implementation does not expose its stream)";
    label += r.flushed ? "; L2 flushed" : "; warm L2";
    st.SetLabel(label);
  }

 private:
  const GpuBenchSetup& s_;
  bool event_timed_ = false;
};

void bench_kernel(benchmark::State& st, const GpuBenchSetup* s, const bench::RowCase& rc) {
  DeviceSide side(*s);
  const bench::RowResult r = bench::time_kernel_row(st, rc, side);
  Timed& t = timings()[rc.impl->info().name + "/" + rc.point->name];
  t.seconds.insert(t.seconds.end(), r.seconds.begin(), r.seconds.end());
  if (!r.error.empty()) t.error = r.error;
}

// The measured speed ratio of an FP8 point over its bf16 twin (same shape, lengths, seed) for
// one kernel: median seconds per call of the bf16 row over the FP8 row's, both timed above with
// the same method (events, L2 flushed). Nothing here is assumed: without both rows' timings the
// row reports why instead of a number.
void bench_ratio(benchmark::State& st, const AttentionImpl* impl, const axes::AxisPoint* bf16,
                 const axes::AxisPoint* fp8) {
  for (auto _ : st) {
  }
  const std::string name = impl->info().name;
  auto& t = timings();
  const auto a = t.find(name + "/" + bf16->name), b = t.find(name + "/" + fp8->name);
  for (const auto& [it, pt] : {std::pair{a, bf16}, std::pair{b, fp8}}) {
    if (it == t.end() || it->second.seconds.empty()) {
      const std::string why = it == t.end() ? std::string("not run") : it->second.error;
      // A refused twin makes the ratio unsupported too, a twin left untimed (the judge's FAIL, an
      // external kernel outside its points) makes it untimed; anything else is an error.
      const bool refused = why.rfind("unsupported", 0) == 0 || why.rfind("unavailable", 0) == 0;
      const std::string msg = (refused ? "unsupported: " : why.rfind("not timed", 0) == 0 ? "not timed: " : "error: ") +
                              fmt::format("no timing of {}/{} ({})", name, pt->name, why);
      st.SkipWithError(msg.c_str());
      return;
    }
  }
  const Timed &tb = a->second, &tf = b->second;
  const double mb = median(tb.seconds), mf = median(tf.seconds);
  using C = benchmark::Counter;
  st.counters["speedup_fp8_over_bf16"] = C(mb / mf);
  st.counters["bf16_median_ms"] = C(1e3 * mb);
  st.counters["fp8_median_ms"] = C(1e3 * mf);
  st.counters["bf16_cache_tokens_per_second"] = C(tb.cache_tokens / mb);
  st.counters["fp8_cache_tokens_per_second"] = C(tf.cache_tokens / mf);
  st.counters["bf16_model_bytes"] = C(tb.model_bytes);
  st.counters["fp8_model_bytes"] = C(tf.model_bytes);
  st.counters["byte_model_ratio"] = C(tb.model_bytes / tf.model_bytes);
  st.counters["bf16_calls"] = C(static_cast<double>(tb.seconds.size()));
  st.counters["fp8_calls"] = C(static_cast<double>(tf.seconds.size()));
  st.SetLabel(fmt::format("measured fp8/bf16 speedup {:.3f}x (medians {:.4f} / {:.4f} ms over {} / {} calls); byte "
                          "model {:.3f}x fewer bytes ({:.0f} vs {:.0f} B per cache token); FP8 target >= 1.65x",
                          mb / mf, 1e3 * mb, 1e3 * mf, tb.seconds.size(), tf.seconds.size(),
                          tb.model_bytes / tf.model_bytes, tb.cache_bytes_per_token, tf.cache_bytes_per_token));
}

// A ceiling probe as a benchmark: manual time from events, one probe call per iteration.
template <class Probe, class Make>
void bench_probe(benchmark::State& st, Make make, bool bytes) {
  try {
    Probe p = make();
    cudaStream_t s = nullptr;
    MLA_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cuda::EventTimer t;
    p.run(s);  // warm-up: first-call costs (cuBLAS heuristics, module load) stay out of the rows
    MLA_CUDA_CHECK(cudaStreamSynchronize(s));
    for (auto _ : st) {
      t.start(s);
      p.run(s);
      t.stop(s);
      st.SetIterationTime(1e-3 * t.elapsed_ms());
    }
    (void)cudaStreamDestroy(s);
    using C = benchmark::Counter;
    if (bytes) {
      st.SetBytesProcessed(static_cast<int64_t>(p.bytes_moved()) * st.iterations());
    } else {
      st.counters["flop_per_second"] = C(p.flops(), C::kIsIterationInvariantRate);
    }
  } catch (const std::exception& e) {
    st.SkipWithError((std::string("error: ") + e.what()).c_str());
  }
}

// Wraps the probes so bench_probe can construct them by value.
struct ReadP {
  std::unique_ptr<cuda::ReadProbe> p;
  void run(cudaStream_t s) { p->run(s); }
  double bytes_moved() const { return p->bytes_moved(); }
  double flops() const { return 0; }
};
struct CopyP {
  std::unique_ptr<cuda::CopyProbe> p;
  void run(cudaStream_t s) { p->run(s); }
  double bytes_moved() const { return p->bytes_moved(); }
  double flops() const { return 0; }
};
struct GemmP {
  std::unique_ptr<cuda::GemmProbe> p;
  void run(cudaStream_t s) { p->run(s); }
  double bytes_moved() const { return 0; }
  double flops() const { return p->flops(); }
};

}  // namespace

std::unique_ptr<bench::PhaseSide> make_phase_side(const GpuBenchSetup& s) { return std::make_unique<DevicePhaseSide>(s); }

double GpuBenchSetup::ceiling(const std::string& key) const {
  for (const auto& c : ceilings)
    if (c.key == key) return c.value;
  return 0;
}

GpuBenchSetup prepare_gpu_bench(const GpuBenchOptions& o) {
  cuda::validate(o.ceilings);
  cuda::require_device("mla-bench");
  GpuBenchSetup s;
  s.options = o;
  s.gpu = cuda::snapshot_gpu();
  const auto t0 = Clock::now();
  s.ceilings = cuda::measure_gpu_ceilings(o.ceilings);
  std::cerr << fmt::format("[mla-bench] {}: ceilings in {:.2f} s:", s.gpu.name,
                           std::chrono::duration<double>(Clock::now() - t0).count());
  for (const auto& c : s.ceilings) std::cerr << fmt::format(" {} {:.4g} {}", c.key, c.value, c.unit);
  std::cerr << "\n";
  return s;
}

void add_gpu_context(const GpuBenchSetup& s) {
  benchmark::AddCustomContext("mla_gpu", cuda::to_json(s.gpu));
  benchmark::AddCustomContext("mla_gpu_name", s.gpu.name);
  benchmark::AddCustomContext("mla_gpu_driver", s.gpu.driver_version.empty() ? "unknown (" + s.gpu.nvml_status + ")"
                                                                              : s.gpu.driver_version);
  benchmark::AddCustomContext("mla_gpu_clocks_mhz",
                              fmt::format("sm {} (max {}), mem {} (max {}) before the run", s.gpu.sm_clock_mhz,
                                          s.gpu.nvml_max_sm_clock_mhz, s.gpu.mem_clock_mhz, s.gpu.nvml_max_mem_clock_mhz));
  benchmark::AddCustomContext(
      "mla_gpu_timing",
      "manual time: CUDA events around run() on the implementation's stream (host clock around run()+synchronize() "
      "when it does not expose one; the row's label says which); L2 flush enqueued before each call, untimed");
  benchmark::AddCustomContext("mla_gpu_l2_flush_bytes", s.options.flush_l2 ? std::to_string(flusher().bytes()) : "0");
  benchmark::AddCustomContext("mla_gpu_l2_flush", s.options.flush_l2 ? flusher().method() : "none (--mla_no_flush): warm L2");
}

nlohmann::ordered_json ceilings_json(const GpuBenchSetup& s) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const auto& c : s.ceilings)
    j[c.key] = {{"value", c.value}, {"unit", c.unit}, {"method", c.method},
                {"median", c.median}, {"best_ms", c.best_ms}, {"reps", c.reps}};
  return j;
}

nlohmann::ordered_json kernel_json(const AttentionImpl& impl) {
  return mla::bench::kernel_json(impl, mla::bench::Roof{kRoofBw, kRoofPeak});
}

void register_gpu_ceiling_benchmarks(const GpuBenchSetup& s) {
  const auto& c = s.options.ceilings;
  const std::size_t sb = c.stream_bytes;
  const int n = c.gemm_n;
  benchmark::RegisterBenchmark("ceiling/gpu_read_bw", [sb](benchmark::State& st) {
    bench_probe<ReadP>(st, [sb] { return ReadP{std::make_unique<cuda::ReadProbe>(sb)}; }, true);
  })->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(0.1);
  benchmark::RegisterBenchmark("ceiling/gpu_copy_bw", [sb](benchmark::State& st) {
    bench_probe<CopyP>(st, [sb] { return CopyP{std::make_unique<cuda::CopyProbe>(sb / 2)}; }, true);
  })->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(0.1);
  benchmark::RegisterBenchmark(fmt::format("ceiling/gpu_gemm_bf16/{}", n).c_str(), [n](benchmark::State& st) {
    bench_probe<GemmP>(st, [n] { return GemmP{std::make_unique<cuda::GemmProbe>(n, n, n)}; }, false);
  })->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(0.1);
}

void register_gpu_kernel_row(const GpuBenchSetup& s, const bench::RowCase& rc) {
  auto* b = benchmark::RegisterBenchmark(fmt::format("mla/{}/{}", rc.impl->info().name, rc.point->name).c_str(),
                                         [&s, rc](benchmark::State& st) { bench_kernel(st, &s, rc); });
  b->UseManualTime()->Unit(benchmark::kMillisecond);
  if (rc.overhead) b->Iterations(bench::kOverheadCalls);
}

void register_gpu_format_ratio_rows(const std::vector<const AttentionImpl*>& impls,
                                    const std::vector<const axes::AxisPoint*>& points) {
  auto twins = [](const axes::AxisPoint& a, const axes::AxisPoint& b) {
    const AttnShape &x = a.shape, &y = b.shape;
    return x.batch == y.batch && x.s_q == y.s_q && x.heads == y.heads && x.page_size == y.page_size &&
           x.topk == y.topk && x.causal == y.causal && a.seqlens == b.seqlens && a.seed == b.seed &&
           a.invalid_per_row == b.invalid_per_row && a.q_std == b.q_std && a.kv_std == b.kv_std;
  };
  for (const auto* f : points) {
    if (f->shape.cache_format != CacheFormat::fp8) continue;
    for (const auto* b : points) {
      if (b->shape.cache_format != CacheFormat::bf16 || !twins(*f, *b)) continue;
      for (const auto* k : impls)
        benchmark::RegisterBenchmark(fmt::format("mla_ratio/{}/{}_vs_{}", k->info().name, f->name, b->name).c_str(),
                                     bench_ratio, k, b, f)
            ->Iterations(1)
            ->Repetitions(1);
    }
  }
}

void register_gpu_clock_row() {
  benchmark::RegisterBenchmark("gpu/clocks_after", [](benchmark::State& st) {
    cuda::GpuSnapshot g;
    for (auto _ : st) g = cuda::snapshot_gpu();
    using C = benchmark::Counter;
    st.counters["sm_clock_mhz"] = C(g.sm_clock_mhz);
    st.counters["mem_clock_mhz"] = C(g.mem_clock_mhz);
    st.counters["power_w"] = C(g.power_w);
    st.counters["temperature_c"] = C(g.temperature_c);
    st.SetLabel("NVML: " + g.nvml_status);
  })->Iterations(1)->Repetitions(1);
}

std::optional<std::string> context_poisoned() { return poisoned(); }

}  // namespace mla::device
