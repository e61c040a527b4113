// Private to mla_certify: the one decision whether a case is inside what an implementation
// claims. A case outside the claims is NOT_CLAIMED (never judged, never counted against the
// implementation, shown in its coverage); UNSUPPORTED is kept for a kernel that refuses, when
// called, a shape it claimed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mla/core/attention.hpp"

namespace mla::certify {

struct Implementation;

// Why `k` does not claim a case of this shape, or nullopt when it claims it. `seqlens` are the
// case's cache lengths when it has been loaded (variable lengths are a claim too); before that,
// nullptr, and the decision is from the shape alone. Asked once per case before loading and
// once after.
//
// What is asked, in order: the registered kernel's own check() (which starts from its declared
// capabilities), or for a plug-in the capabilities of its descriptor; then the lengths. A
// plug-in's `can_implement` callback (asked in a child process, like every plug-in call) would
// be asked here last, its refusal a NOT_CLAIMED like the others.
std::optional<std::string> claim_refusal(const Implementation& k, const AttnShape& shape,
                                         const std::vector<int32_t>* seqlens);

}  // namespace mla::certify
