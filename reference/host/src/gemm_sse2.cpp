// The sse2 build of mla/ref/gemm.hpp's products (flags: reference/CMakeLists.txt).
#define MLA_GEMM_ISA sse2
#include "gemm_isa.hpp"
