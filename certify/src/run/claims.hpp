// Private to mla_certify: THE decision whether a case is inside what an implementation claims.
// A case outside the claims is NOT_CLAIMED (never judged, never counted against the
// implementation, shown in its coverage); UNSUPPORTED is kept for a kernel that refuses, when
// called, a shape it claimed.
//
// What is asked, in order: the registered kernel's own check() (which starts from its declared
// capabilities), or for a plug-in the capabilities of its descriptor; then the lengths; then, for
// a plug-in with a can_implement, the kernel's own answer on the shape with its lengths. That
// answer is obtained in a child process (loading a plug-in runs its code, which the certifying
// process never does) and comes back as data; it is asked once per distinct shape and lengths
// (the drawn cases of a kernel all in one child) and kept for the rest of the run.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mla/core/attention.hpp"
#include "mla/core/numeric.hpp"
#include "mla/core/tolerance.hpp"
#include "mla/certify/protocol.hpp"

namespace mla::certify {

struct Implementation;
class Session;

// Why `k` does not claim a case of this shape by its declarations, or nullopt when it claims it.
// `seqlens` are the case's cache lengths when it has been loaded (variable lengths are a claim
// too); before that, nullptr, and the decision is from the shape alone.
std::optional<std::string> claim_refusal(const Implementation& k, const AttnShape& shape,
                                         const std::vector<int32_t>* seqlens);

// claim_refusal on the shape and lengths, then the plug-in's can_implement, which sees the shape,
// the FP8 scale format and the lengths. Not claimed: the reason; by_kernel when the kernel's own
// can_implement refused (its reason quoted). Throws mla::Error when can_implement failed (another
// return code, a crash): an ERROR of the kernel, never a refusal.
struct Claim {
  bool claimed = true;
  std::string reason;
  bool by_kernel = false;
};
Claim claim(Session& s, const Implementation& k, const AttnShape& shape, std::optional<ScaleFmt> scale_fmt,
            const std::vector<int32_t>& seqlens);

// For an implementation of one other entry (prefill, merge, top-k, indexer logits or append,
// sparse prefill) from outside the
// suite, after its declared claims accepted the call: the entry's own can_implement (ABI 1.6, or
// the Python kernel's) on the call `q` describes (an entry question: kinds/entry_plans.hpp's
// *_claim_question), asked in a child once per distinct call. Claimed when it has none. Throws
// mla::Error when the predicate failed, as claim() does.
Claim claim_entry(Session& s, const Implementation& k, const ClaimQuestion& q);

// Asks `k`'s can_implement every question it has not answered yet in one child, so that the
// claim() calls that follow find their answers (the cases drawn for a kernel: one process, not
// one per case).
void ask_claims(Session& s, const Implementation& k, const std::vector<ClaimQuestion>& questions);

}  // namespace mla::certify
