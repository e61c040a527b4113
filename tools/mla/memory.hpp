// `mla memory`: the KV-cache footprint of a model under each cache layout (the byte model of
// core/presets.hpp), and `--check`, which allocates caches through the implementations' own
// code and confirms the bytes they hold equal the model.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mla/core/presets.hpp"

namespace mla::tools {

struct MemoryQuery {
  ModelConfig config;  // config.preset names it ("custom" for flags only)
  int64_t layers = 1;
  int64_t context = 0;  // tokens per sequence
  int64_t batch = 1;
};

struct MemoryRow {
  KvLayout layout;
  std::optional<int64_t> bytes_per_token;  // per layer; nullopt: the layout does not exist here
  std::string not_applicable;              // why, when nullopt
  // bytes_per_token · context · batch · layers (doubles: a 128K × 256 × 61-layer naive cache
  // overflows nothing, but the product is shown, not allocated)
  double total_bytes = 0;
};

std::vector<MemoryRow> memory_model(const MemoryQuery& q);
std::string render_memory(const MemoryQuery& q, const std::vector<MemoryRow>& rows);
nlohmann::json memory_json(const MemoryQuery& q, const std::vector<MemoryRow>& rows);

struct MemoryCheck {
  std::string layout;  // to_string(KvLayout)
  std::string method;  // how it was measured
  std::optional<int64_t> model, measured;  // bytes per token per layer
  bool ok = false;
  std::string note;  // not checkable / what differs
  bool checked() const { return measured.has_value(); }
};

// Live bytes held through operator new (alloc_probe.cpp replaces the global allocation
// functions of the `mla` executable to count them).
using LiveBytes = std::function<int64_t()>;

// Bounded: at most a few thousand cache tokens, whatever the query's context (the model is
// linear in tokens; the check measures the per-token slope). `kernel` is a registered CPU
// kernel whose prepare() holds the paged cache (default cpu_mla_fp64); V3.2's indexer key cache
// is measured through the first registered CPU indexer append that is available (none: its row
// says why it is not checkable). Throws mla::Error on a kernel that is unknown or not a CPU
// kernel (device memory is invisible to the probe).
std::vector<MemoryCheck> memory_check(const MemoryQuery& q, const LiveBytes& live_bytes, const std::string& kernel);
std::string render_checks(const std::vector<MemoryCheck>& checks);

// The counter behind the executable's allocation functions (alloc_probe.cpp).
int64_t live_heap_bytes();

}  // namespace mla::tools
