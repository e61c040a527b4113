# Sanitized builds of all host code (presets `asan` and `fuzz`). Included by the root
# CMakeLists.txt after the packages are found and before any target exists, so every library
# and executable of the tree gets the same instrumentation: a sanitizer runtime linked into an
# executable whose libraries were built without it misses their bugs, and ASan's container
# annotations must agree between the code that fills a vector and the code that reads it.
#
#   MLA_SANITIZE  comma list for -fsanitize= (e.g. "address,undefined"); empty: none.
#   MLA_FUZZ      libFuzzer targets in suites/fuzz: clang only; every object also gets
#                 -fsanitize=fuzzer-no-link so the fuzzer sees coverage of the loader and of
#                 mla_core, not only of the fuzz driver. Implies address,undefined.
#
# One exception: the plug-in template's bug variants (kernels/faults) are loaded as kernels from
# outside and are built as those arrive, optimized and uninstrumented; they share no C++ object
# with the host, only the C ABI's plain buffers (kernels/faults/CMakeLists.txt says why).
#
# Debian's libhdf5 (and every other prebuilt library) stays uninstrumented: ASan still checks
# what it allocates (malloc is intercepted) and the memcpy/strlen family it calls, but not its
# own loads and stores.

if(MLA_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "MLA_FUZZ needs clang (libFuzzer); configure with the `fuzz` preset "
                        "or -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang")
  endif()
  if(NOT MLA_SANITIZE)
    set(MLA_SANITIZE "address,undefined")
  endif()
  add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=fuzzer-no-link>)
endif()

if(MLA_SANITIZE)
  message(STATUS "MLA: sanitizers ${MLA_SANITIZE}")
  set(_mla_san -fsanitize=${MLA_SANITIZE} -fno-omit-frame-pointer)
  if(MLA_SANITIZE MATCHES "undefined")
    # UBSan only prints and carries on by default; a finding must fail the test (or stop the
    # fuzzer), so every undefined-behaviour check aborts.
    list(APPEND _mla_san -fno-sanitize-recover=undefined)
  endif()
  foreach(_flag IN LISTS _mla_san)
    add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:${_flag}>)
  endforeach()
  add_link_options(-fsanitize=${MLA_SANITIZE})
  # The tests and the fuzzer find these through the environment (CMakePresets.json sets them
  # for `ctest --preset asan`; suites/fuzz/run_ci.sh for the fuzzer).
  set(MLA_LSAN_SUPPRESSIONS "${PROJECT_SOURCE_DIR}/suites/sanitize/lsan.supp")
endif()
