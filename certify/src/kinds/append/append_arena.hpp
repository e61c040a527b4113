// Private to mla_certify: a plug-in's append case run in a child on shared buffers this process
// created and audits (append_arena.cpp).
#pragma once

#include <string>

#include "mla/certify/append_case.hpp"

namespace mla::certify {

class Session;
struct Implementation;

// Calls the plug-in's append max(2, --repeats) times (at most kArenaMaxCalls), each on its own
// copy of the case's cache, in one child, and returns the first call's outcome with what the
// audit of the raw buffers found (inputs changed, guard bytes written, calls that disagree, a
// cache changed after its call returned) as reasons. `tag` names the work files. Never throws.
AppendRun run_append_in_child(Session& s, const Implementation& k, const AppendCase& c, const std::string& tag);

}  // namespace mla::certify
