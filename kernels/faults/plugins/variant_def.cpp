// One variant's value: the only source compiled per variant (kernels/faults/CMakeLists.txt,
// mla_variant_plugin, sets these definitions); variant_plugin.cpp, compiled once, reads it.
// `constinit`: the value exists before any static initializer of the library runs (the entries
// and the descriptor are built by such initializers from it).
#include "variant.hpp"

#if MLA_VARIANT_STEALS
#include "attacks.hpp"  // stored_truth, defined in catalog_theft.cpp, linked into the thieves only
#define MLA_VARIANT_STORED_TRUTH (&mla_variant::stored_truth)
#else
#define MLA_VARIANT_STORED_TRUTH nullptr
#endif

namespace mla_variant {

constinit const Variant kVariant{
    MLA_VARIANT_NAME,           Fault::MLA_VARIANT_FAULT,     MLA_VARIANT_OUT_BF16,
    MLA_VARIANT_UNDERCLAIM,     MLA_VARIANT_APPEND,           MLA_VARIANT_POSES_AS_MINOR,
    MLA_VARIANT_WRITES_RECIPE,  MLA_VARIANT_DECLARES_RECIPES, MLA_VARIANT_BF16_OPERANDS,
    MLA_VARIANT_PRECISION,      MLA_VARIANT_FLASHINFER,       MLA_VARIANT_DECLARES_CONVENTIONS,
    MLA_VARIANT_FLASHMLA_SHAPED, MLA_VARIANT_CAN_IMPLEMENT,   MLA_VARIANT_BROKEN_CAN_IMPLEMENT,
    MLA_VARIANT_DEVICE_MEMORY,  MLA_VARIANT_PREFILL,          MLA_VARIANT_MERGE,
    MLA_VARIANT_TOPK,           MLA_VARIANT_RELATIVE,         MLA_VARIANT_INDEXER_LOGITS,
    MLA_VARIANT_INDEXER_APPEND, MLA_VARIANT_SPARSE_PREFILL,   MLA_VARIANT_STORED_TRUTH};

}  // namespace mla_variant
