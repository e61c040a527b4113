"""triage.py decides whether CI fails: a finding attributed to libhdf5 is known and tolerated,
one attributed to our code fails the build. These reports are shaped like real ones."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import triage  # noqa: E402

LOADER = ("    #7 0x55f475df8335 in mla::golden::detail::Reader::open_attr(H5::H5Object&) const "
          "/work/main/golden/src/h5io.cpp:350:70")
HDF5_ITER = ("    #3 0x7fa2d89b4ca4 in H5O__msg_iterate_real (/lib/x86_64-linux-gnu/libhdf5_serial.so.103+0x1b4ca4) "
             "(BuildId: e923ff058f7cfc1a31cc68764211396ffb3aeb91)")
HDF5_ANON = ("    #2 0x7fa2d8990f18  (/lib/x86_64-linux-gnu/libhdf5_serial.so.103+0x190f18) "
             "(BuildId: e923ff058f7cfc1a31cc68764211396ffb3aeb91)")
INTERCEPTOR = ("    #1 0x55f475cf1867 in __interceptor_memcpy (/work/main/build/fuzz/suites/fuzz/fuzz_golden_loader+0xe0867) "
               "(BuildId: cb2318f26a33037142cb7f8a62111d534c8b8355)")


def report(*frames: str, kind: str = "SEGV on unknown address 0x6190000337db") -> str:
    return "\n".join([f"==1==ERROR: AddressSanitizer: {kind}", *frames, "", "SUMMARY: AddressSanitizer: SEGV"])


def test_glibc_memcpy_with_debug_symbols_called_by_libhdf5_is_libhdf5():
    # libc6-dbg makes glibc frames name their source: this report was once taken for ours.
    glibc = ("    #0 0x7fa2d818b8a2 in __memcpy_avx512_unaligned_erms "
             "string/../sysdeps/x86_64/multiarch/memmove-vec-unaligned-erms.S:372")
    verdict, why = triage.classify(report(glibc, INTERCEPTOR, HDF5_ANON, HDF5_ITER, LOADER))
    assert verdict == "libhdf5", why


def test_glibc_memcpy_without_debug_symbols_called_by_libhdf5_is_libhdf5():
    glibc = "    #0 0x7fa2d818b8a2  (/lib/x86_64-linux-gnu/libc.so.6+0x15a8a2) (BuildId: 1234)"
    assert triage.classify(report(glibc, HDF5_ANON, HDF5_ITER, LOADER))[0] == "libhdf5"


def test_a_frame_of_the_loader_on_top_is_ours():
    glibc = ("    #0 0x7fa2d818b8a2 in __memcpy_avx512_unaligned_erms "
             "string/../sysdeps/x86_64/multiarch/memmove-vec-unaligned-erms.S:372")
    verdict, why = triage.classify(report(glibc, INTERCEPTOR, LOADER, HDF5_ITER,
                                          kind="heap-buffer-overflow on address 0x6190"))
    assert verdict == "ours" and "open_attr" in why


def test_escaping_exception_and_ubsan_are_ours():
    assert triage.classify("terminate called after throwing an instance of 'H5::FileIException'")[0] == "ours"
    assert triage.classify("h5io.cpp:12:3: runtime error: signed integer overflow")[0] == "ours"


def test_no_frame_at_all_is_ours():
    assert triage.classify("==1==ERROR: libFuzzer: out-of-memory (malloc(4294967296))")[0] == "ours"
