// Private to mla_certify: a plug-in's calls of an entry point other than decode (the cache
// append, the prefill) in a child process, on shared buffers this process created and audits
// (arena.hpp), as decode calls are. The parent lays out the call's inputs once and each call's own
// buffers (outputs prefilled with the unwritten pattern, or a private copy of a buffer written in
// place) between guard regions; the child only calls the plug-in on them (child_entry_calls in
// child.cpp); every fact a verdict rests on (inputs unchanged, guard bytes intact, every output
// element written, the calls agreeing, nothing changed after a call returned) is read here from
// the raw bytes, while the child is stopped after each call and after it has exited. The child's
// record of a call (return code, message, time) can only word the outcome the judge sees.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "isolation/arena.hpp"
#include "mla/certify/protocol.hpp"

namespace mla::certify {

class Session;
struct Implementation;

struct EntryCalls {
  std::string entry;                  // kEntryAppend, kEntryPrefill
  std::vector<ArenaBuffer> inputs;    // read-only, each named; told to the child by name
  // The buffers each call gets its own copy of, in the order the child is told them: outputs
  // (output_bytes > 0, every element must be written) or buffers written in place (inout).
  std::vector<ArenaBuffer> per_call;
  nlohmann::json args;                // the call's scalars, as the child reads them for `entry`
};

struct EntryRun {
  std::string entry;         // the plan's
  bool ran = false;          // false: the calls could not be made or did not all return (message says why)
  std::string message;       // !ran: why; ran: the plug-in's words on call 1
  int32_t rc = -1;           // call 1's return code
  std::vector<std::vector<uint8_t>> buffers;  // call 1's per-call buffers as it left them, in order
  std::vector<std::string> reasons;  // the audit's findings and differences between repeated calls
  double run_seconds = 0;    // the fastest call, as the child timed it
  bool host_caused = false;  // the failure was the machine's (host_error.hpp)
};

// Makes max(2, --repeats) calls (at most kArenaMaxCalls) of `plan.entry` of plug-in `k` in one
// child. Every call's return code must equal call 1's and its buffers call 1's, bit for bit (a
// buffer with unordered rows: row by row, the same values in any order); output elements call 1
// left unwritten are reasons. `tag` names the work files. Never throws.
EntryRun run_entry_in_child(Session& s, const Implementation& k, const EntryCalls& plan, const std::string& tag);

}  // namespace mla::certify
