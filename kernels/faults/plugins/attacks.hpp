// What the attacking variants of the plug-in template do besides (or instead of) decoding:
// side effects on the files, processes and memory a plug-in can reach from inside the
// certifier's child, and the memo and the stolen answers that replace computing. Declared here
// and defined in attacks.cpp (catalog_theft.cpp for the one that needs HDF5) so that the kernel
// core (variant_plugin.cpp) names each attack at its hook point and holds none of their code.
#pragma once

#include <cstddef>
#include <vector>

#include "mla/plugin/mla_plugin.h"

namespace mla_variant {

// $MLA_EXAMPLE_TAMPER = "change:PATH;delete:PATH;...": overwrites 8 bytes in the middle of PATH
// (idempotent: every case runs in a fresh process) or deletes it.
void tamper();

// setsid + double fork, once per process: a process in its own session, re-parented away from
// the kernel's process, which no process-group kill reaches. It writes its pid to
// $MLA_EXAMPLE_PIDFILE and sleeps ten minutes.
void leave_daemon();

// Truncates every file named on the process's command line (but .so files) and zeroes the first
// page of every writable shared memfd mapping: whatever audit can be reached from inside.
void scrub_audit();

// Whether another process answered this case before: a file in $TMPDIR named after a hash of q,
// the cache's first 64 KiB and the lengths holds the pid of the first process that did.
bool seen_by_another_process(const mla_plugin_decode_args& a, std::size_t token_bytes);

// A memo keyed by everything about a call but q (shape, lengths, block table, indices): recall
// copies a remembered out and lse and says whether there was one; store remembers this call's.
bool memo_recall(const mla_plugin_decode_args& a);
void memo_store(const mla_plugin_decode_args& a, std::size_t out_bytes, std::size_t lse_bytes);

// The catalog's stored truth for this call's q: the certifier's --goldens (or its default)
// found through /proc/<parent>, each .h5 file's cases searched for the same q.
bool stored_truth(const mla_plugin_decode_args& a, std::vector<double>& out, std::vector<double>& lse);

}  // namespace mla_variant
