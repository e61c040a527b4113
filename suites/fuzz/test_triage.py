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


# A libhdf5 crash is someone else's bug only when the tool survives the file: it reads every
# golden through in a child first, so the tool's own process must refuse the file and live.
# Stand-ins for the tool, so the test needs no build: one that refuses, one that dies, one that
# hangs.
def _tool(tmp_path, body: str) -> str:
    path = tmp_path / "mla"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


def _artifact(tmp_path) -> str:
    path = tmp_path / "crash-0123"
    path.write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 64)
    return str(path)


HDF5_CRASH = report(HDF5_ANON, HDF5_ITER, LOADER)
LOADER_FUZZER = "/build/fuzz/suites/fuzz/fuzz_golden_loader"


def test_a_libhdf5_crash_the_tool_survives_is_libhdf5(tmp_path):
    # The tool is given a catalog whose manifest matches the file (as a user would have it).
    tool = _tool(tmp_path, 'cd "$3" && sha256sum -c MANIFEST.sha256 >/dev/null || exit 99\n'
                           'echo "golden file artifact.h5 is refused: killed by signal SIGSEGV" >&2; exit 2')
    assert triage.classify(HDF5_CRASH)[0] == "libhdf5"
    verdict, why = triage.attribute_libhdf5(LOADER_FUZZER, _artifact(tmp_path), "SEGV", tool, 5)
    assert verdict == "libhdf5", why
    assert "exit 2" in why


def test_a_libhdf5_crash_that_kills_the_tool_is_ours(tmp_path):
    tool = _tool(tmp_path, "kill -SEGV $$")
    verdict, why = triage.attribute_libhdf5(LOADER_FUZZER, _artifact(tmp_path), "SEGV", tool, 5)
    assert verdict == "ours" and "SIGSEGV" in why, why


def test_a_libhdf5_crash_that_hangs_the_tool_is_ours(tmp_path):
    tool = _tool(tmp_path, "exec sleep 60")
    verdict, why = triage.through_tool(tool, _artifact(tmp_path), 5, deadline=1)
    assert verdict == "ours" and "killed after" in why, why


def test_a_libhdf5_crash_without_the_tool_to_replay_it_is_ours(tmp_path):
    verdict, why = triage.attribute_libhdf5(LOADER_FUZZER, _artifact(tmp_path), "SEGV", None, 5)
    assert verdict == "ours" and "--tool" in why


def test_a_libhdf5_crash_of_a_recipe_target_stays_libhdf5(tmp_path):
    verdict, why = triage.attribute_libhdf5("/b/fuzz_golden_schema", _artifact(tmp_path), "SEGV", None, 5)
    assert verdict == "libhdf5" and "not a golden file" in why
