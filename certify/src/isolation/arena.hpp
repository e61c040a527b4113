// Private to mla_certify: the shared memory of one (kernel, case) — the buffers a child's calls
// read and write, created, filled and audited by the parent.
//
// Why: the verdict must rest only on facts the parent owns. The parent creates a memfd, lays out
// every input and every call's own outputs in it between guard regions (an inaccessible page on
// each side, and canary bytes keyed by a secret drawn per run), keeps private copies of the
// inputs, and after each call (the child stops itself with SIGSTOP; the parent looks while it
// is stopped) and again after the child has exited, checks from the raw bytes alone: inputs
// unchanged, canaries intact, every output element written, every call's outputs bitwise equal,
// and nothing written into a call's outputs after that call returned. The child maps the same
// memfd, makes the guard pages inaccessible, and writes only outputs
// and a bounded record per call (return code, a message, a time) into the control block; what it
// writes there can word an ERROR or an UNSUPPORTED, never make a result pass.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mla/core/attention.hpp"
#include "mla/core/kernel.hpp"
#include "mla/core/text.hpp"

namespace mla::certify {

inline constexpr int kArenaMaxCalls = 32;
inline constexpr std::size_t kArenaMessage = 1024;
// A message a child wrote into the arena, read only up to its bound and printable.
inline std::string bounded(const char* s) { return printable(std::string_view(s, strnlen(s, kArenaMessage - 1))); }

// A call's (and the setup's) state in the control block. The values are the wire's: the Python
// door's child writes them as STATE_OK, STATE_UNSUPPORTED, STATE_ERROR (child.py), and 0, the
// cleared block, is a call not (yet) made. A child may write any 32-bit value there; one outside
// these equals none of them, so the parent never takes it for a returned call. For an append,
// `ok` means the call returned: its return code (OK, CAPACITY, UNSUPPORTED or an error) is in
// `rc`, and the parent judges it.
enum class ArenaState : int32_t { not_started = 0, ok = 1, unsupported = 2, error = 3 };

// What the child writes (and nothing else, besides outputs). Read by the parent with every
// string bounded and every number range-checked.
struct ArenaCall {
  ArenaState state;
  int32_t rc;     // the plug-in's return code (plug-ins)
  double seconds;
  char message[kArenaMessage];
};
struct ArenaControl {
  uint64_t child_base;  // where the child mapped the arena (to place a fault address)
  uint64_t fault_addr;
  int32_t fault_signal;
  ArenaState setup_state;  // not_started (ok or not reached), or unsupported / error before any call
  char setup_message[kArenaMessage];
  ArenaCall calls[kArenaMaxCalls];
};

// The control block's layout is also written by a child that is not C++ (the Python door,
// kernels/python/mla_door/child.py, with struct.pack_into): the parent tells it every offset in
// the plan (arena_control_layout), and these pin the layout so that a change is a decision, made
// here and in child.py's fallback together, never a drift.
static_assert(offsetof(ArenaCall, state) == 0 && offsetof(ArenaCall, rc) == 4 && offsetof(ArenaCall, seconds) == 8 &&
              offsetof(ArenaCall, message) == 16 && sizeof(ArenaCall) == 16 + kArenaMessage);
static_assert(offsetof(ArenaControl, child_base) == 0 && offsetof(ArenaControl, fault_addr) == 8 &&
              offsetof(ArenaControl, fault_signal) == 16 && offsetof(ArenaControl, setup_state) == 20 &&
              offsetof(ArenaControl, setup_message) == 24 && offsetof(ArenaControl, calls) == 24 + kArenaMessage);
// {"child_base", "fault_addr", "fault_signal", "setup_state", "setup_message", "calls",
//  "call_size", "call": {"state", "rc", "seconds", "message"}, "message_bytes", "max_calls"}:
// byte offsets from offsetof, for a child that writes the block without this header.
nlohmann::json arena_control_layout();

// One guarded region: [guard page | front canary | data | back canary | guard page]. Inputs end
// flush against their back guard page, so a read one byte past an input faults at once.
struct ArenaRegion {
  std::string name;
  bool input = false;
  std::size_t start = 0;  // first guard page
  std::size_t data = 0, bytes = 0;
  std::size_t body = 0;   // from start + page to the back guard page
  std::size_t end = 0;    // one past the back guard page
  bool other = false;     // belongs to the case called in between (parent only: its faults are that case's)
  std::size_t elem = 1;   // bytes of one element (parent only): a stray write is counted in whole elements
  bool inout = false;     // written in place (an append's cache): starts as given, never prefilled, not compared
};

// One set of inputs (the case, or the other case called between its calls).
struct ArenaInputs {
  AttnShape shape;
  double softmax_scale = 0;
  int q = -1, kv_cache = -1, block_table = -1, cache_seqlens = -1, indices = -1;  // region indices
};

// One call: which inputs, which output regions, whether the child stops after it (the case's
// own calls) so the parent can look at its outputs before anything else runs.
struct ArenaCallPlan {
  int inputs = 0;
  int out = -1, lse = -1;
  bool stop = false;
};

// The layout the child is told (by a wire message the parent writes per process). The parent
// keeps its own copy and never reads one back.
struct ArenaLayout {
  std::size_t page = 4096, size = 0;
  std::vector<ArenaRegion> regions;
  std::vector<ArenaInputs> inputs;
  std::vector<ArenaCallPlan> calls;
  int value_bytes = 4;   // bytes of one `out` element: 2 (bf16), 4 (f32), 8 (f64: built-in kernels)
  nlohmann::json to_json() const;
  static ArenaLayout from_json(const nlohmann::json& j);
  // "8 bytes past the end of kv_cache", "inside q", ... for an offset into the arena.
  std::string where(std::size_t offset) const;
};

// A buffer of a call that is not an attention call (an append, a prefill): its bytes before the
// call (caller-owned, outliving the Arena) and whether the kernel may write it; or an output of
// `output_bytes`, prefilled with the unwritten pattern of `elem`-byte elements.
struct ArenaBuffer {
  std::string name;
  std::span<const uint8_t> initial;
  bool inout = false;     // false: an input, audited unchanged
  std::size_t elem = 1;   // bytes of one element
  std::size_t output_bytes = 0;  // > 0: an output (initial empty, inout false)
  // > 0: the buffer is rows of this many int32 values whose order within a row is free (an
  // unsorted top-k's selection): repeated calls must agree on each row's values, in any order.
  std::size_t unordered_row = 0;
};

class Arena {
 public:
  // Arbitrary named buffers, in order (region i is buffers[i]), with no attention calls: the
  // caller plans the calls and tells the child which region is which.
  Arena(const std::vector<ArenaBuffer>& buffers, uint64_t key);
  // `sets`: the inputs of each set (index 0: the case); `calls`: the call sequence.
  // `value_bytes`: 2, 4 or 8. Throws mla::Error (naming what failed: memfd_create, ftruncate,
  // mmap) when the host cannot make it.
  Arena(const std::vector<AttnInputs>& sets, const std::vector<ArenaCallPlan>& calls, int value_bytes,
        uint64_t key);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  int fd() const { return fd_; }
  const ArenaLayout& layout() const { return layout_; }
  // Writes inputs from the private copies, prefills outputs with the unwritten pattern, writes
  // every canary, clears the control block: the state before a child starts.
  void reset();
  const ArenaControl& control() const { return *reinterpret_cast<const ArenaControl*>(base_); }
  const uint8_t* data(int region) const { return base_ + layout_.regions[region].data; }
  std::size_t bytes(int region) const { return layout_.regions[region].bytes; }

  // Audit findings of the case's own buffers: each input that differs from the private copy,
  // as {name, "N bytes, first at byte i"}, and each canary written ("wrote 2048 bytes past out").
  std::vector<std::pair<std::string, std::string>> changed_inputs() const;
  std::vector<std::string> check_canaries() const;
  // Elements of `bytes` (an output's copy) still holding the unwritten pattern: count and first.
  std::pair<std::size_t, std::size_t> unwritten(std::span<const uint8_t> bytes, std::size_t value_bytes) const;

 private:
  uint8_t canary(int region, std::size_t i) const;
  void map();  // creates, sizes and maps the memfd for layout_.size
  std::size_t add_region(std::string name, std::size_t bytes, bool input, std::size_t elem, std::size_t cursor,
                         bool other);
  ArenaLayout layout_;
  // Per region: its bytes before a call (inputs and in-place buffers; caller-owned), or the
  // size of the unwritten pattern it is prefilled with (outputs; 0 otherwise).
  std::vector<std::span<const uint8_t>> initial_;
  std::vector<std::size_t> prefill_;
  uint64_t key_;
  int fd_ = -1;
  uint8_t* base_ = nullptr;
};

// An output's raw elements of `value_bytes` (2: bf16, 4: f32, 8: f64) as doubles, exactly.
std::vector<double> widen_values(std::span<const uint8_t> bytes, int value_bytes);
// An int32 output's raw elements (a top-k's indices), widened.
std::vector<int64_t> int32_values(std::span<const uint8_t> bytes);

// A decode call's raw outputs as kernel `k` wrote them (out in its output dtype, lse float32 in
// its declared convention) widened and made canonical for a call of `canonical_shape`: what a
// timed external kernel's results() hands to the judge.
AttnOutputs canonical_outputs(const KernelInfo& k, const AttnShape& canonical_shape, std::span<const uint8_t> out,
                              std::span<const uint8_t> lse);

// The unwritten pattern of an output element of `value_bytes` for `key`: a quiet NaN with a
// payload drawn from the key (so a kernel cannot know it in advance).
uint64_t arena_unwritten_bits(uint64_t key, int value_bytes);

}  // namespace mla::certify
