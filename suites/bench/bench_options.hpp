// mla-bench's own command line (the --mla_* flags of mla_bench.cpp's table) and what it selects:
// the axis points, the registered kernels, the external ones (--mla_plugin, --mla_python), and
// the listings that print and exit. Apart from the run (mla_bench.cpp), so that the flags, their
// validation and the selection can be read in one place.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "mla/certify/external_bench.hpp"
#include "mla/core/kernel.hpp"
#include "mla/core/merge.hpp"
#include "mla/core/prefill_kernel.hpp"
#include "mla/workloads/axes.hpp"
#include "mla/workloads/phase_axes.hpp"

namespace mla::bench {

struct Options {
  mla::axes::Tier tier = mla::axes::cpu_quick;
  bool quick = false;
  std::vector<std::string> kernels;
  std::vector<std::string> points;
  std::vector<std::string> external_points;  // --mla_external_points (empty: every point)
  std::string backend;                        // --mla_backend (empty: any)
  std::vector<std::string> plugins, pythons;  // external kernels, in the order given
  std::string python_exe;
  int threads = 0;        // 0: mla::threads()
  int input_threads = 0;  // 0: mla::gen::threads()
  std::size_t stream_mib = 256;
  int ceiling_reps = 5;
  std::size_t gpu_stream_mib = 2048;
  int gpu_ceiling_reps = 10;
  int gpu_gemm_n = 8192;
  bool flush = true;
  double max_mem_gib = 0;
  bool list = false, list_points = false, probe = false;
  std::string json_out;  // --benchmark_out, when its format is JSON
};

// Removes the --mla_* flags (and a JSON --benchmark_out, which the incremental reporter writes)
// from argv and parses them; throws mla::Error on a bad value.
Options take_options(int& argc, char** argv);

// The points of this run, as --mla_points / --mla_tier chose them; throws mla::Error naming a
// point that does not exist.
std::vector<const axes::AxisPoint*> select_points(const Options& o);

// The registered kernels of this run, as --mla_kernels / --mla_backend / --mla_tier chose them;
// false (said on stderr) for a name that no registry (decode, prefill, merge) holds.
bool select_kernels(const Options& o, std::vector<const AttentionImpl*>& impls);

// The prefill and merge rows of this run: their points (phase_axes.hpp) as --mla_points /
// --mla_tier chose them, and the registered prefill and merge kernels as --mla_kernels /
// --mla_backend / --mla_tier chose them (the same rules as the decode ones).
struct PhaseSelection {
  std::vector<const axes::PrefillPoint*> prefill_points;
  std::vector<const axes::MergePoint*> merge_points;
  std::vector<const PrefillImpl*> prefill;
  std::vector<const MergeImpl*> merge;
  std::vector<const axes::IndexerLogitsPoint*> indexer_logits_points;
  std::vector<const IndexerLogitsImpl*> indexer_logits;
  std::vector<const axes::TopkPoint*> topk_points;
  std::vector<const TopkImpl*> topk;
  std::vector<const axes::SparsePrefillPoint*> sparse_prefill_points;
  std::vector<const SparsePrefillImpl*> sparse_prefill;
  bool any() const {
    return (!prefill_points.empty() && !prefill.empty()) || (!merge_points.empty() && !merge.empty()) ||
           (!indexer_logits_points.empty() && !indexer_logits.empty()) || (!topk_points.empty() && !topk.empty()) ||
           (!sparse_prefill_points.empty() && !sparse_prefill.empty());
  }
};
PhaseSelection select_phase_points(const Options& o);
void select_phase_kernels(const Options& o, PhaseSelection& sel);

// The kernels of --mla_plugin and --mla_python, opened in the order given. Throws
// mla::certify::UsageError naming the library or spec that cannot be opened.
std::vector<certify::ExternalBenchKernel> open_external_kernels(const Options& o);

// --mla_list: the axis catalog, every point with its tiers (TSV).
void print_table();

// --mla_list_points: the selected points, with the columns torch_side_by_side.py reads.
void print_points_tsv(const std::vector<const axes::AxisPoint*>& points);

}  // namespace mla::bench
