// mla-bench's command line and selection (bench_options.hpp).
#include "bench_options.hpp"

#include <algorithm>
#include <filesystem>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench_host.hpp"
#include "harness.hpp"
#include "phase_rows.hpp"
#include "mla/core/error.hpp"
#include "mla/registry/registry.hpp"

namespace mla::bench {

namespace {

// --benchmark_out=FILE with the JSON format (the default) is taken out of argv: the incremental
// reporter writes FILE. Another format is left to Google Benchmark.
std::string take_json_out(int& argc, char** argv) {
  std::string out, format = "json";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--benchmark_out=", 0) == 0) out = a.substr(16);
    if (a.rfind("--benchmark_out_format=", 0) == 0) format = a.substr(23);
  }
  if (out.empty() || format != "json") return "";
  int w = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--benchmark_out=", 0) != 0 && a.rfind("--benchmark_out_format=", 0) != 0) argv[w++] = argv[i];
  }
  argc = w;
  argv[argc] = nullptr;
  return out;
}

}  // namespace

// Removes --mla_* flags from argv and parses them; throws mla::Error on a bad value.
Options take_options(int& argc, char** argv) {
  Options o;
  mla::bench::take_mla_flags(argc, argv, [&](const mla::bench::MlaFlag& f) {
    const std::string& k = f.key;
    if (k == "--mla_tier") f.need(), o.tier = mla::axes::tier_from_string(f.val);
    else if (k == "--mla_quick") o.quick = true;
    else if (k == "--mla_kernels") f.need(), o.kernels = mla::bench::split_csv(f.val);
    else if (k == "--mla_kernel") f.need(), o.kernels.push_back(f.val);
    else if (k == "--mla_points") f.need(), o.points = mla::bench::split_csv(f.val);
    else if (k == "--mla_backend") f.need(), o.backend = f.val;
    else if (k == "--mla_plugin") f.need(), o.plugins.push_back(f.val);
    else if (k == "--mla_python") f.need(), o.pythons.push_back(f.val);
    else if (k == "--mla_python_exe") f.need(), o.python_exe = f.val;
    else if (k == "--mla_external_points") f.need(), o.external_points = mla::bench::split_csv(f.val);
    else if (k == "--mla_threads") o.threads = static_cast<int>(f.num(1));
    else if (k == "--mla_input_threads") o.input_threads = static_cast<int>(f.num(1));
    else if (k == "--mla_stream_mib") o.stream_mib = static_cast<std::size_t>(f.num(1));
    else if (k == "--mla_ceiling_reps") o.ceiling_reps = static_cast<int>(f.num(1));
    else if (k == "--mla_gpu_stream_mib") o.gpu_stream_mib = static_cast<std::size_t>(f.num(1));
    else if (k == "--mla_gpu_ceiling_reps") o.gpu_ceiling_reps = static_cast<int>(f.num(1));
    else if (k == "--mla_gpu_gemm_n") o.gpu_gemm_n = static_cast<int>(f.num(8));
    else if (k == "--mla_no_flush") o.flush = false;
    else if (k == "--mla_max_mem_gib") o.max_mem_gib = f.num(0.001);
    else if (k == "--mla_list") o.list = true;
    else if (k == "--mla_list_points") o.list_points = true;
    else if (k == "--mla_probe") o.probe = true;
    else return false;
    return true;
  });
  if (!o.backend.empty() && o.backend != "cpu" && o.backend != "cuda")
    throw mla::Error("--mla_backend: '" + o.backend + "' is not a backend (cpu or cuda)");
  o.json_out = take_json_out(argc, argv);
  return o;  // --mla_quick keeps an explicit --mla_tier (default cpu_quick either way)
}

void print_table() {
  std::cout << "name\taxis\ttiers\tbatch\ts_q\theads\tpage_size\ttopk\tcache\tseqlen_max\ttotal_tokens\tinput_MiB\tscaled_from\n";
  for (const auto& p : mla::axes::catalog()) {
    std::string tiers;
    for (auto t : {mla::axes::cpu_quick, mla::axes::cpu_full, mla::axes::gpu})
      if (p.in(t)) {
        if (!tiers.empty()) tiers += ',';
        tiers += mla::axes::to_string(t);
      }
    const auto j = mla::bench::point_json(p);
    std::cout << fmt::format("{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{:.1f}\t{}\n", p.name, j["axis"].get<std::string>(), tiers,
                             p.shape.batch, p.shape.s_q, p.shape.heads, p.shape.page_size, p.shape.topk,
                             j["cache_format"].get<std::string>(), j["seqlen_max"].get<int>(), p.total_tokens(),
                             static_cast<double>(mla::axes::footprint(p).total()) / (1 << 20), p.scaled_from);
  }
  // The prefill and merge points in the same columns ("-" where a column is decode's alone):
  // batch = sequences, s_q = the longest query part, seqlen_max = the longest key part.
  const auto tiers_of = [](unsigned bits) {
    std::string t;
    for (auto tier : {mla::axes::cpu_quick, mla::axes::cpu_full, mla::axes::gpu})
      if (bits & tier) t += (t.empty() ? "" : ",") + std::string(mla::axes::to_string(tier));
    return t;
  };
  for (const auto& p : mla::axes::prefill_catalog()) {
    const auto j = point_json(p);
    std::cout << fmt::format("{}\tprefill\t{}\t{}\t{}\t{}\t-\t-\tbf16\t{}\t{}\t{:.1f}\t{}\n", p.name, tiers_of(p.tiers),
                             p.seqs.size(), j["s_q"].get<int>(), p.heads, j["seqlen_max"].get<int>(), p.total_k(),
                             static_cast<double>(mla::axes::input_bytes(p)) / (1 << 20), p.scaled_from);
  }
  for (const auto& p : mla::axes::merge_catalog())
    std::cout << fmt::format("{}\tmerge\t{}\t-\t-\t{}\t-\t-\t{}\t-\t{}\t{:.1f}\t{}\n", p.name, tiers_of(p.tiers),
                             p.shape.heads, mla::to_string(p.shape.dtype), p.shape.tokens,
                             static_cast<double>(mla::axes::input_bytes(p)) / (1 << 20), p.scaled_from);
  // Indexer logits: batch = sequences (paged) or query rows (ragged), s_q = next_n, page_size =
  // the block size, seqlen_max = each sequence's context (ragged: the keys); cache the 132-byte
  // indexer cache; input_MiB counts the logits written too.
  for (const auto& p : mla::axes::indexer_logits_catalog()) {
    const auto j = point_json(p);
    std::cout << fmt::format("{}\tindexer_logits\t{}\t{}\t{}\t{}\t{}\t-\tindexer_fp8\t{}\t{}\t{:.1f}\t{}\n", p.name,
                             tiers_of(p.tiers), p.batch, j["s_q"].get<int64_t>(), p.heads, j["page_size"].get<int64_t>(),
                             p.context, j["total_tokens"].get<int64_t>(),
                             static_cast<double>(mla::axes::input_bytes(p)) / (1 << 20), p.scaled_from);
  }
  // Top-k: batch = rows, topk = k, seqlen_max = the logits per row, total_tokens = the logits the
  // call reads (every row's range).
  for (const auto& p : mla::axes::topk_catalog()) {
    const auto j = point_json(p);
    std::cout << fmt::format("{}\ttopk\t{}\t{}\t-\t-\t-\t{}\tf32\t{}\t{}\t{:.1f}\t{}\n", p.name, tiers_of(p.tiers),
                             p.shape.rows, p.shape.k, p.shape.n, j["logits_read"].get<int64_t>(),
                             static_cast<double>(mla::axes::input_bytes(p)) / (1 << 20), p.scaled_from);
  }
  // Sparse prefill: batch 1 (one sequence's chunk), s_q = its query rows, topk = the indices per
  // row, seqlen_max = total_tokens = the sequence's keys (s_kv).
  for (const auto& p : mla::axes::sparse_prefill_catalog())
    std::cout << fmt::format("{}\tsparse_prefill\t{}\t1\t{}\t{}\t-\t{}\tbf16\t{}\t{}\t{:.1f}\t{}\n", p.name,
                             tiers_of(p.tiers), p.s_q, p.heads, p.topk, p.s_kv, p.s_kv,
                             static_cast<double>(mla::axes::input_bytes(p)) / (1 << 20), p.scaled_from);
}

// --mla_list_points: the selected points, with the columns torch_side_by_side.py reads.
void print_points_tsv(const std::vector<const mla::axes::AxisPoint*>& points) {
  std::cout << "name\taxis\tbatch\ts_q\theads\tpage_size\ttopk\tcache\tseqlen_max\tseqlen_mean\tcausal\n";
  for (const auto* p : points) {
    const auto j = mla::bench::point_json(*p);
    std::cout << fmt::format("{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\n", p->name, j["axis"].get<std::string>(),
                             p->shape.batch, p->shape.s_q, p->shape.heads, p->shape.page_size, p->shape.topk,
                             j["cache_format"].get<std::string>(), j["seqlen_max"].get<int>(),
                             j["seqlen_mean"].get<double>(), p->shape.causal ? 1 : 0);
  }
}

// The points of this run, as --mla_points / --mla_tier chose them; throws mla::Error naming a
// point that does not exist.
std::vector<const mla::axes::AxisPoint*> select_points(const Options& o) {
  if (o.points.empty()) return mla::axes::select(o.tier);
  std::vector<const mla::axes::AxisPoint*> points;
  for (const auto& name : o.points) {
    if (mla::axes::find_prefill(name) || mla::axes::find_merge(name) || mla::axes::find_indexer_logits(name) ||
        mla::axes::find_topk(name) || mla::axes::find_sparse_prefill(name))
      continue;  // select_phase_points
    const auto* p = mla::axes::find(name);
    if (!p) throw mla::Error("no axis point named '" + name + "' (see --mla_list)");
    points.push_back(p);
  }
  return points;
}

PhaseSelection select_phase_points(const Options& o) {
  PhaseSelection sel;
  if (o.points.empty()) {
    sel.prefill_points = mla::axes::select_prefill(o.tier);
    sel.merge_points = mla::axes::select_merge(o.tier);
    sel.indexer_logits_points = mla::axes::select_indexer_logits(o.tier);
    sel.topk_points = mla::axes::select_topk(o.tier);
    sel.sparse_prefill_points = mla::axes::select_sparse_prefill(o.tier);
    return sel;
  }
  for (const auto& name : o.points) {
    if (const auto* p = mla::axes::find_prefill(name)) sel.prefill_points.push_back(p);
    if (const auto* p = mla::axes::find_merge(name)) sel.merge_points.push_back(p);
    if (const auto* p = mla::axes::find_indexer_logits(name)) sel.indexer_logits_points.push_back(p);
    if (const auto* p = mla::axes::find_topk(name)) sel.topk_points.push_back(p);
    if (const auto* p = mla::axes::find_sparse_prefill(name)) sel.sparse_prefill_points.push_back(p);
  }
  return sel;
}

namespace {

// Whether a registered kernel of `backend` named `name` is in this run: named by --mla_kernels
// (or none named), of --mla_backend (or none given), and not a CPU kernel of a device-only run.
bool kernel_selected(const Options& o, const std::string& name, const std::string& backend) {
  // The production shapes are for device kernels: the fp64 CPU reference would take minutes per
  // call there, so tier gpu leaves the CPU implementations out unless they are asked for.
  const bool device_only = o.points.empty() && o.tier == mla::axes::gpu && o.kernels.empty() && o.backend.empty();
  const bool named = o.kernels.empty() || std::find(o.kernels.begin(), o.kernels.end(), name) != o.kernels.end();
  return named && (o.backend.empty() || backend == o.backend) && !(device_only && backend == "cpu");
}

}  // namespace

void select_phase_kernels(const Options& o, PhaseSelection& sel) {
  for (const auto& k : mla::Registry::instance().prefill())
    if (kernel_selected(o, k->info().name, k->info().backend)) sel.prefill.push_back(k.get());
  for (const auto& k : mla::Registry::instance().merge())
    if (kernel_selected(o, k->info().name, k->info().backend)) sel.merge.push_back(k.get());
  for (const auto& k : mla::Registry::instance().indexer_logits())
    if (kernel_selected(o, k->info().name, k->info().backend)) sel.indexer_logits.push_back(k.get());
  for (const auto& k : mla::Registry::instance().topk())
    if (kernel_selected(o, k->info().name, k->info().backend)) sel.topk.push_back(k.get());
  for (const auto& k : mla::Registry::instance().sparse_prefill())
    if (kernel_selected(o, k->info().name, k->info().backend)) sel.sparse_prefill.push_back(k.get());
}

// The registered kernels of this run, as --mla_kernels / --mla_backend / --mla_tier chose them;
// false (said on stderr) for a name that does not exist.
bool select_kernels(const Options& o, std::vector<const mla::AttentionImpl*>& impls) {
  for (const auto& k : mla::Registry::instance().attention())
    if (kernel_selected(o, k->info().name, k->info().backend)) impls.push_back(k.get());
  const auto& reg = mla::Registry::instance();
  const auto in = [](const auto& impls_of_kind, const std::string& name) {
    return std::any_of(impls_of_kind.begin(), impls_of_kind.end(), [&](const auto& k) { return k->info().name == name; });
  };
  for (const auto& name : o.kernels)
    if (!reg.find(name) && !in(reg.prefill(), name) && !in(reg.merge(), name) && !in(reg.indexer_logits(), name) &&
        !in(reg.topk(), name) && !in(reg.sparse_prefill(), name)) {
      std::cerr << "mla-bench: no implementation named '" << name << "'\n";
      return false;
    }
  return true;
}

// The kernels of --mla_plugin and --mla_python, opened in the order given. Throws
// mla::certify::UsageError naming the library or spec that cannot be opened.
std::vector<mla::certify::ExternalBenchKernel> open_external_kernels(const Options& o) {
  std::vector<mla::certify::ExternalBenchKernel> out;
  for (const auto& lib : o.plugins) out.push_back(mla::certify::open_plugin_for_bench(lib));
  if (!o.pythons.empty()) {
    // The door is found beside this executable or in the source tree it was built from.
    const auto self = std::filesystem::read_symlink("/proc/self/exe");
    for (const auto& spec : o.pythons) out.push_back(mla::certify::open_python_for_bench(spec, self, o.python_exe));
  }
  return out;
}

}  // namespace mla::bench
