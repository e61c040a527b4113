"""Adapters that certify the field's MLA libraries through the Python door as they are.

    mla certify --python mla_door.adapters.flashmla:kernel
    mla certify --python mla_door.adapters.flashinfer:kernel

Each adapter is `make(lib=None) -> mla_door.Kernel`: `lib` is the imported library module (or
anything with its API, such as the CPU stand-ins under kernels/python/examples); None imports
the real one, and when that fails the kernel's `unavailable()` says why, so every case is
SKIPPED with that reason. `kernel` is the zero-argument factory the door calls.

An adapter does only the layout work (split q, view the cache, build the library's metadata)
and declares the library's conventions; the certifier converts lse and sparse indices itself
(kernels/plugin/README.md, "The Python door"), so an adapter never touches either.
"""
import importlib
from typing import Callable, Optional, Tuple


def import_library(module: str) -> Tuple[object, Optional[str]]:
    """(the imported module, None), or (None, why it does not import here)."""
    try:
        return importlib.import_module(module), None
    except Exception as e:  # any failure to import is a reason to skip, named as it came
        return None, f"{module} does not import here: {type(e).__name__}: {e}"


def availability(why_not: Optional[str], backend: str, module: str) -> Callable[[], Optional[str]]:
    """The kernel's unavailable(): the import failure, or no CUDA device for a "cuda" kernel."""
    def unavailable() -> Optional[str]:
        if why_not is not None:
            return why_not
        if backend == "cuda":
            import torch
            if not torch.cuda.is_available():
                return f"{module} imports, but torch sees no CUDA device"
        return None
    return unavailable
