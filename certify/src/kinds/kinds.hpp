// Private to mla_certify: the kinds registry.cpp registers, one per folder of kinds/.
#pragma once

#include "mla/certify/case_kind.hpp"

namespace mla::certify {

const CaseKind& decode_kind();  // kinds/decode/kind.cpp
const CaseKind& append_kind();  // kinds/append/kind.cpp
const CaseKind& prefill_kind();  // kinds/prefill/kind.cpp
const CaseKind& merge_kind();    // kinds/merge/kind.cpp
const CaseKind& topk_kind();     // kinds/topk/kind.cpp
const CaseKind& indexer_append_kind();  // kinds/indexer_append/kind.cpp
const CaseKind& indexer_logits_kind();  // kinds/indexer_logits/kind.cpp
const CaseKind& sparse_prefill_kind();  // kinds/sparse_prefill/kind.cpp

}  // namespace mla::certify
