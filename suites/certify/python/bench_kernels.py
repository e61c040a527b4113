"""Kernels the benchmark door's tests time through `child.py bench`
(suites/certify/test_python_bench.cpp): a child that dies after one good call and one that hangs,
so a benchmark is seen to get an error, never a hang or a SIGPIPE. The door's own test kernels
(door_kernels.py) cover the rest: a decode that raises, a can_implement that refuses, a "cuda"
kernel."""
import os
import signal
import time

from door_kernels import CAPS, reference_decode
from mla_door import Kernel

_calls = [0]


def _killed_on_second_call(*args):
    _calls[0] += 1
    if _calls[0] >= 2:
        os.kill(os.getpid(), signal.SIGKILL)
    reference_decode(*args)


def _hangs(*args):
    time.sleep(3600)


KILLED_ON_SECOND_CALL = Kernel(name="bench_killed", version="1", description="bench test: dies on its second call",
                               decode=_killed_on_second_call, caps=CAPS)
HANGS = Kernel(name="bench_hangs", version="1", description="bench test: never returns", decode=_hangs, caps=CAPS)
