// The avx2 build of mla/ref/gemm.hpp's products (flags: reference/CMakeLists.txt).
#define MLA_GEMM_ISA avx2
#include "gemm_isa.hpp"
