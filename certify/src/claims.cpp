#include "claims.hpp"

#include "session.hpp"

namespace mla::certify {

std::optional<std::string> claim_refusal(const Implementation& k, const AttnShape& shape,
                                         const std::vector<int32_t>* seqlens) {
  if (auto no = k.impl ? k.impl->check(shape) : check_capabilities(k.info.caps, shape)) return no;
  if (seqlens) {
    if (auto no = check_varlen(k.info.caps, *seqlens)) return no;
  }
  return std::nullopt;
}

}  // namespace mla::certify
