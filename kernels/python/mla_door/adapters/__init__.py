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
import inspect
from typing import Callable, Optional, Tuple


def import_library(module: str) -> Tuple[object, Optional[str]]:
    """(the imported module, None), or (None, why it does not import here)."""
    try:
        return importlib.import_module(module), None
    except Exception as e:  # any failure to import is a reason to skip, named as it came
        return None, f"{module} does not import here: {type(e).__name__}: {e}"


def open_library(lib, module: str) -> Tuple[object, Optional[str], str, str]:
    """(library, why it does not import or None, backend, version) for an adapter's make(lib):
    `lib` None imports `module`; a stand-in passed as `lib` says where it runs with a `BACKEND`
    attribute ("cpu"; the real libraries are "cuda") and its version with `__version__`."""
    why_not = None
    if lib is None:
        lib, why_not = import_library(module)
    if lib is None:
        return None, why_not, "cuda", "absent"
    return lib, why_not, getattr(lib, "BACKEND", "cuda"), str(getattr(lib, "__version__", "unknown"))


def open_vllm_ops(ops, namespace: str) -> Tuple[object, Optional[str], str, str]:
    """(ops, why vllm._C does not import or None, backend, version) for a vLLM op adapter's
    make(ops): `ops` None imports vllm._C (which registers its ops) and takes torch.ops.<namespace>;
    a stand-in passed as `ops` says where it runs with `BACKEND` and its version with `__version__`."""
    why_not = None
    if ops is None:
        lib, why_not = import_library("vllm._C")
        if lib is None:
            return None, why_not, "cuda", "absent"
        import torch
        ops = getattr(torch.ops, namespace)
    version = getattr(ops, "__version__", None)
    if version is None:
        try:
            import vllm
            version = getattr(vllm, "__version__", "unknown")
        except Exception:  # the version is for the report only
            version = "unknown"
    return ops, why_not, getattr(ops, "BACKEND", "cuda"), str(version)


def takes_argument(fn, name: str) -> bool:
    """Whether `fn` has a parameter `name` (versions of a library differ); a compiled function
    without a signature is assumed to take it, so that the call itself says if it does not."""
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return True


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
