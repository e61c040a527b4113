# The `device` preset's self-contained GPU bundle (MLA_BUNDLE) and the GPU half of the benchmarks
# (suites/device). Included from the root CMakeLists.txt before any target is defined, because the
# bundle's link options must reach every target; suites/device itself is added last by
# suites/CMakeLists.txt, when every target it bundles exists.
option(MLA_BUNDLE "Link binaries with an \$ORIGIN/../lib rpath and build the `bundle` target (preset device)" OFF)

if(MLA_BUNDLE)
  if(NOT MLA_HAVE_CUDA)
    message(FATAL_ERROR "MLA_BUNDLE=ON bundles the CUDA binaries, but no CUDA toolkit was found "
                        "(MLA_ENABLE_CUDA=${MLA_ENABLE_CUDA}, nvcc at /usr/local/cuda/bin/nvcc?)")
  endif()
  # Binaries are run from <bundle>/bin and their non-system libraries sit in <bundle>/lib.
  list(APPEND CMAKE_BUILD_RPATH "\$ORIGIN/../lib")
  # DT_RPATH, not DT_RUNPATH: the loader consults a RUNPATH only for the object's own direct
  # dependencies, so a bundled libhdf5 would not find its bundled libsz; the executable's RPATH is
  # searched for every library in the process.
  add_link_options("LINKER:--disable-new-dtags")
endif()
