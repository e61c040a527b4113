// How many cache tokens the host naive MHA kernels have decoded, over the whole process. The
// kernels decode only in prepare(); the tests read this around run() to show that the timed
// call decompresses nothing.
#pragma once

#include <cstdint>

namespace mla::cpu {

int64_t naive_mha_tokens_decoded();

}  // namespace mla::cpu
