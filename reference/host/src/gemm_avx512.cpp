// The avx512 build of mla/ref/gemm.hpp's products (flags: reference/CMakeLists.txt).
#define MLA_GEMM_ISA avx512
#include "gemm_isa.hpp"
