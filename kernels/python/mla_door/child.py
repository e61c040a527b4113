"""The child side of `mla certify --python SPEC`: what `mla __child describe|claims|call` is for a
C plug-in, for a Python kernel. The certifier (C++) runs

    EXE <door>/mla_door/child.py describe --spec SPEC --result FILE
    EXE <door>/mla_door/child.py claims   --spec SPEC --inputs QUERY --result FILE
    EXE <door>/mla_door/child.py call     --spec SPEC --plan PLAN [--unclaimed]
    EXE <door>/mla_door/child.py bench    --spec SPEC --plan PLAN --socket FD [--empty]

and never imports the user's code itself. Every message is the certifier's one wire format
(certify/include/mla/certify/wire.hpp: one JSON header line, then the arrays' bytes; these
messages have none). `call` maps the certifier's shared buffers (a memfd on the descriptor
the plan names, laid out as the plan says), hands the kernel zero-copy torch views of them, makes the planned calls,
writes one bounded record per call into the control block (certify/src/isolation/arena.hpp ArenaControl /
ArenaCall) and stops itself (SIGSTOP) after each call the plan marks `stop`, so the certifier
audits a Python kernel with exactly the code that audits a C plug-in: inputs compared byte for
byte, canaries around every output, every element written, every call bitwise equal, nothing
changed after a call returned. Nothing this process writes can make a result pass.

`bench` is for timing, not certifying (`mla-bench --mla_python`, certify/src/bench/python_bench.cpp):
the same plan and buffers, but one long-lived process that prepares the plan's call 0 once
(views, and for backend cuda the copies to the device) and then serves requests on the stream
socket FD until its peer closes it. Request b"c": one kernel call (cuda: synchronized, timed
with CUDA events; else perf_counter), its state, time and message written into the control
block's call slot 0. Request b"r": a cuda kernel's outputs copied back into the shared buffers
(never on a timed call), its outcome in slot 0. Each request is answered with one byte once the
slot is written; the setup answers one byte too, its refusal or error in the setup record.
`--empty` replaces the kernel call with nothing, keeping every view and copy: the door's own cost.
An entry-calls plan (certify/src/kinds/entry_plans.hpp: the certifier's own layout of a prefill,
merge, top-k, indexer logits or sparse prefill call) is benchmarked the same way, its outputs the
plan's call 0 regions.
"""
from __future__ import annotations

import argparse
import ctypes
import faulthandler
import fcntl
import importlib
import importlib.util
import json
import mmap
import os
import platform
import signal
import struct
import sys
import time
import traceback

# The door's folder first (so `import mla_door` is this package whatever else is installed), not
# the mla_door folder itself (whose module names would shadow the user's); then the folder the
# certifier was started in, as `python -m` would.
_DOOR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
    sys.path.pop(0)
sys.path.insert(0, _DOOR)
# And for any Python the kernel itself starts (compile workers, a library's helper processes).
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_DOOR, os.environ.get("PYTHONPATH", "")) if p)
if os.getcwd() not in sys.path:
    sys.path.insert(1, os.getcwd())

import mla_door  # noqa: E402

WIRE_FORMAT, WIRE_VERSION = "mla-certify-wire", 1

# The control block as certify/src/isolation/arena.hpp lays it out (its static_asserts pin the same
# numbers). The plan carries the certifier's own offsetof values; a plan whose layout differs
# from these comes from another version of the certifier and is refused, never guessed at.
CONTROL = {
    "child_base": 0, "fault_addr": 8, "fault_signal": 16, "setup_state": 20, "setup_message": 24,
    "calls": 24 + 1024, "call_size": 16 + 1024,
    "call": {"state": 0, "rc": 4, "seconds": 8, "message": 16},
    "message_bytes": 1024, "max_calls": 32,
}
# A call's state, numbered as certify/src/isolation/arena.hpp's ArenaState (ok, unsupported, error; 0, the
# cleared block, is a call not made).
STATE_OK, STATE_UNSUPPORTED, STATE_ERROR = 1, 2, 3
# Where a backend "cuda" kernel's tensors are copied: the current CUDA device. MLA_DOOR_DEVICE=cpu
# makes the door take the same copy-in / copy-out path into separate CPU tensors, so the path a
# GPU machine runs is exercised (and tested, suites/certify/test_certify_python.cpp) without one;
# the certificate records which it was.
COPY_DEVICE = os.environ.get("MLA_DOOR_DEVICE", "cuda")


def sync(torch):
    if COPY_DEVICE == "cuda":
        torch.cuda.synchronize()


# ---- the wire format --------------------------------------------------------------------------

def read_wire(path, kind):
    """The fields of the message at `path`, which must be of `kind` (or one of a tuple of kinds)."""
    return read_wire_of(path, (kind,) if isinstance(kind, str) else kind)[1]


def read_wire_of(path, kinds):
    """(kind, fields) of the message at `path`, of one of `kinds`."""
    with open(path, "rb") as f:
        header = f.readline(1 << 20)
        rest = f.read(1)
    if not header.endswith(b"\n"):
        raise ValueError(f"{path}: truncated header")
    h = json.loads(header)
    if h.get("format") != WIRE_FORMAT or h.get("version") != WIRE_VERSION:
        raise ValueError(f"{path} is not a {WIRE_FORMAT} file of version {WIRE_VERSION}")
    kind = h.get("kind")
    if kind not in kinds:
        raise ValueError(f"{path} holds a '{kind}' message, expected '{' or '.join(kinds)}'")
    if h.get("arrays") or rest:
        raise ValueError(f"{path}: unexpected arrays in a '{kind}' message")
    return kind, h["fields"]


def write_wire(path, kind, fields):
    # Atomically, as wire::write does: a child killed while writing leaves no half message.
    text = json.dumps({"format": WIRE_FORMAT, "version": WIRE_VERSION, "kind": kind, "fields": fields,
                       "arrays": []}, default=repr) + "\n"
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


# ---- the user's kernel ------------------------------------------------------------------------

def load_kernel(spec):
    """The Kernel SPEC names: module.path:ATTR or /path/file.py:ATTR (ATTR a Kernel, or a
    zero-argument callable returning one)."""
    where, sep, attr = spec.rpartition(":")
    if not sep or not where or not attr:
        raise ValueError(f"'{spec}' is not module.path:ATTR or path/to/file.py:ATTR")
    if where.endswith(".py"):
        folder = os.path.dirname(os.path.abspath(where))
        if folder not in sys.path:
            sys.path.insert(1, folder)  # the file's siblings import as they would next to it
        name = "_mla_door_user_" + os.path.splitext(os.path.basename(where))[0]
        loader_spec = importlib.util.spec_from_file_location(name, where)
        if loader_spec is None or loader_spec.loader is None:
            raise ImportError(f"cannot load {where} as a Python file")
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[name] = module
        loader_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    if not hasattr(module, attr):
        raise AttributeError(f"{where} has no attribute '{attr}'")
    obj = getattr(module, attr)
    if not isinstance(obj, mla_door.Kernel) and callable(obj):
        obj = obj()
    if not isinstance(obj, mla_door.Kernel):
        raise TypeError(f"{spec} is a {type(obj).__name__}, not an mla_door.Kernel (nor a zero-argument callable "
                        f"returning one)")
    return module, obj


def error_words(e):
    """One line for the certificate, the last frame of the user's code with it."""
    here = os.path.dirname(os.path.abspath(__file__))
    frames = [f for f in traceback.extract_tb(e.__traceback__)
              if not f.filename.startswith("<") and os.path.dirname(os.path.abspath(f.filename)) != here]
    where = f" (at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno})" if frames else ""
    return f"{type(e).__name__}: {e}{where}"


def set_threads(torch):
    # The certifier's --threads reaches children as MLA_THREADS; results must not depend on it.
    n = os.environ.get("MLA_THREADS", "")
    if n.isdigit() and int(n) > 0:
        torch.set_num_threads(int(n))


# ---- describe ---------------------------------------------------------------------------------

def describe(args):
    out = {"python": platform.python_version(), "executable": sys.executable, "torch": None}
    try:
        import torch
        out["torch"] = torch.__version__
    except Exception as e:  # the certifier tries the next python3, then SKIPs naming them all
        out["why"] = f"{type(e).__name__}: {e}"
        write_wire(args.result, "python-description", out)
        return 0
    try:
        module, k = load_kernel(args.spec)
        out["module_file"] = getattr(module, "__file__", None)
        out["declaration"] = mla_door.describe(k)
        why = k.unavailable() if k.unavailable is not None else None
        if why is not None and not isinstance(why, str):
            raise TypeError(f"unavailable() returned {why!r}, expected None or a reason string")
        if why is None and k.backend == "cuda":
            if COPY_DEVICE != "cuda":
                out["cuda_device"] = f"none: copies on {COPY_DEVICE} (MLA_DOOR_DEVICE={COPY_DEVICE})"
            elif not torch.cuda.is_available():
                why = (f"backend cuda: torch {torch.__version__} ({sys.executable}) sees no CUDA device "
                       f"(torch.cuda.is_available() is False)")
            else:
                out["cuda_device"] = torch.cuda.get_device_name(torch.cuda.current_device())
        out["unavailable"] = why
    except Exception as e:
        out["error"] = error_words(e)
    write_wire(args.result, "python-description", out)
    return 0


# ---- claims -----------------------------------------------------------------------------------

def shape_of(j, scale_fmt, cls=mla_door.Shape, **extra):
    return cls(batch=j["batch"], s_q=j["s_q"], heads=j["heads"], d_qk=j.get("d_qk", mla_door.D_QK),
               d_v=j.get("d_v", mla_door.D_V), page_size=j["page_size"], num_blocks=j["num_blocks"],
               max_blocks=j["max_blocks"], topk=j["topk"], cache_format=j["cache_format"], causal=j["causal"],
               scale_fmt=scale_fmt or "", **extra)


def call_info(entry, a, **lengths):
    """The call object an entry is told, from its plan's args (certify/src/kinds/entry_plans.cpp),
    with the lengths can_implement is shown (none for a call: its tensors hold them)."""
    if entry == "prefill":
        s = a["shape"]
        return mla_door.PrefillCall(batch=s["batch"], heads=s["heads"], total_q=s["total_q"], total_k=s["total_k"],
                                    d_qk=s.get("d_qk", 192), d_v=s.get("d_v", 128), causal=s["causal"],
                                    softmax_scale=a["softmax_scale"], **lengths)
    if entry == "merge":
        return mla_door.MergeCall(tokens=a["tokens"], heads=a["heads"], head_dim=a["head_dim"], dtype=a["dtype"])
    if entry == "topk":
        return mla_door.TopkCall(rows=a["rows"], n=a["n"], k=a["k"], **lengths)
    if entry == "indexer_logits":
        s = a["shape"]
        paged = s["layout"] == "paged"
        b, nn = s["batch"], s["next_n"]
        return mla_door.IndexerLogitsCall(layout=s["layout"], batch=b, next_n=nn, heads=s["heads"],
                                          rows=b * nn if paged else b, cols=s["max_context"] if paged else s["num_keys"],
                                          block_size=s["block_size"] if paged else 0,
                                          max_context=s["max_context"] if paged else 0,
                                          num_keys=0 if paged else s["num_keys"], **lengths)
    if entry == "indexer_append":
        return mla_door.IndexerAppendCall(num_tokens=a["num_tokens"], num_blocks=a["num_blocks"],
                                          block_size=a["block_size"], scale_fmt=a["scale_fmt"])
    if entry == "sparse_prefill":
        s = a["shape"]
        return mla_door.SparsePrefillCall(s_q=s["s_q"], s_kv=s["s_kv"], heads=s["heads"], d_qk=s["d_qk"], topk=s["topk"],
                                          sm_scale=a["sm_scale"], sink=s["sink"], has_topk_length=s["topk_length"],
                                          **lengths)
    raise ValueError(f"no entry '{entry}'")


def entry_question(k, entry, c):
    """An entry's predicate and what it is asked: its call before any data, with the lengths the
    question carries (the plan's args and those arrays: entry_plans.cpp's *_claim_question)."""
    if entry == "prefill":
        lengths = {"cu_seqlens_q": tuple(c["cu_seqlens_q"]), "cu_seqlens_k": tuple(c["cu_seqlens_k"])}
    elif entry == "topk":
        lengths = {"starts": tuple(c["starts"]), "ends": tuple(c["ends"])}
    elif entry == "indexer_logits":
        lengths = {w: tuple(c[w]) for w in ("context_lens", "ks", "ke") if w in c}
    elif entry == "sparse_prefill":
        lengths = {"topk_length": tuple(c.get("topk_length_values", ()))}
    else:
        lengths = {}
    info = call_info(entry, c, **lengths)
    return getattr(k, entry).can_implement, info


def claims(args):
    questions = read_wire(args.inputs, "claim-query")["questions"]
    _, k = load_kernel(args.spec)
    answers = []
    for q in questions:
        try:
            if "entry" in q:
                predicate, shape = entry_question(k, q["entry"], q["call"])
            else:
                predicate = k.can_implement
                shape = shape_of(q["shape"], q.get("scale_fmt"), cache_seqlens=tuple(q.get("cache_seqlens", ())))
            r = predicate(shape) if predicate is not None else None
            if r is None:
                answers.append({"answer": "ok", "reason": ""})
            elif isinstance(r, str):
                answers.append({"answer": "unsupported", "reason": r or "(no reason given)"})
            else:
                answers.append({"answer": "error",
                                "reason": f"can_implement returned {r!r}, expected None or a reason string"})
        except mla_door.Unsupported as e:
            answers.append({"answer": "unsupported", "reason": str(e) or "(no reason given)"})
        except Exception as e:
            answers.append({"answer": "error", "reason": f"can_implement raised {error_words(e)}"})
    write_wire(args.result, "claim-answers", {"answers": answers})
    return 0


# ---- call -------------------------------------------------------------------------------------

class Control:
    """The bounded records this child writes into the control block (and nothing else but outputs)."""

    def __init__(self, mm, layout):
        self.mm, self.l = mm, layout

    def _message(self, at, text):
        # Cut at a character boundary: the certifier shows the words, it does not repair them.
        b = text.encode("utf-8", "replace")[: self.l["message_bytes"] - 1].decode("utf-8", "ignore").encode() + b"\0"
        self.mm[at: at + len(b)] = b

    def setup(self, state, text):
        struct.pack_into("<i", self.mm, self.l["setup_state"], state)
        self._message(self.l["setup_message"], text)

    def call(self, c, state, seconds, text):
        base = self.l["calls"] + c * self.l["call_size"]
        f = self.l["call"]
        struct.pack_into("<i", self.mm, base + f["state"], state)
        struct.pack_into("<i", self.mm, base + f["rc"], 0)
        struct.pack_into("<d", self.mm, base + f["seconds"], seconds)
        self._message(base + f["message"], text)


def open_arena(plan):
    """Maps the certifier's shared buffers as the plan lays them out, guard pages made
    inaccessible; the mapping and the writer of the control block."""
    layout = plan["layout"]
    control_layout = plan.get("control")
    if control_layout != CONTROL:
        raise RuntimeError(f"the certifier's control block layout {control_layout} is not this door's {CONTROL}: "
                           f"the door and the mla executable come from different versions")
    size = layout["size"]
    # Inherited under the certifier's own descriptor number (any a descriptor limit allows).
    arena_fd = plan["arena_fd"]
    if os.fstat(arena_fd).st_size != size:
        raise RuntimeError("the shared buffers are missing or not of the planned size")
    mm = mmap.mmap(arena_fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    os.close(arena_fd)
    base = ctypes.addressof(ctypes.c_char.from_buffer(mm))
    struct.pack_into("<Q", mm, CONTROL["child_base"], base)
    # Guard pages inaccessible, as the C++ child makes them: a read or write past an input faults
    # at its first byte, past an output at its canary's end. (A fault here is reported as the
    # signal and the kernel's Python traceback, without the byte offset a C child names: Python
    # cannot record the faulting address. The parent's canaries catch writes past an output
    # either way.)
    page = layout["page"]
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    for r in layout["regions"]:
        for at in (r["start"], r["start"] + page + r["body"]):
            libc.mprotect(base + at, page, 0)
    return mm, Control(mm, CONTROL)


def load_for_calls(spec, ctl):
    """(torch, kernel), or None once the setup's refusal or error is in the control block."""
    try:
        import torch
        set_threads(torch)
        _, k = load_kernel(spec)
        if k.backend == "cuda" and COPY_DEVICE == "cuda" and not torch.cuda.is_available():
            ctl.setup(STATE_UNSUPPORTED, "backend cuda: no CUDA device (torch.cuda.is_available() is False)")
            return None
    except Exception as e:
        ctl.setup(STATE_ERROR, f"the child could not load the kernel: {error_words(e)}")
        return None
    return torch, k


def region_view(torch, mm, plan):
    """A function (region index, dtype, shape) -> a zero-copy view of that shared buffer."""
    regions = plan["layout"]["regions"]

    def view(index, dtype, shape):
        r = regions[index]
        itemsize = torch.empty((), dtype=dtype).element_size()
        count = r["bytes"] // itemsize
        if count == 0:
            return torch.empty(shape, dtype=dtype)
        # Zero-copy: the tensor's storage is the certifier's shared mapping.
        return torch.frombuffer(mm, dtype=dtype, count=count, offset=r["data"]).view(*shape)

    return view


def invoke(torch, cuda, fn, inputs, outputs):
    """fn(*inputs, *outputs) on the shared buffers' views (None inputs passed as None); the seconds
    it took. A backend "cuda" kernel gets device copies (the shared buffers are host memory, so the
    door copies in and out: documented in mla_door, not zero-copy)."""
    if not cuda:
        t0 = time.perf_counter()
        fn(*inputs, *outputs)
        return time.perf_counter() - t0
    dev = [v.to(COPY_DEVICE, copy=True) if v is not None else None for v in inputs]
    # The unwritten pattern travels too: an element the kernel never writes stays so.
    d_out = [o.to(COPY_DEVICE, copy=True) for o in outputs]
    sync(torch)
    t0 = time.perf_counter()
    fn(*dev, *d_out)
    sync(torch)
    seconds = time.perf_counter() - t0
    for o, d in zip(outputs, d_out):
        o.copy_(d.cpu())
    # A kernel that wrote its device inputs: the change is carried back to the shared buffers,
    # where the certifier's own comparison names it.
    for v, d in zip(inputs, dev):
        if v is not None and not torch.equal(d.cpu(), v):
            v.copy_(d.cpu())
    return seconds


def call_tensors(torch, mm, plan, k):
    """A function of a planned call's index: (inputs by name, out, lse, the Call), every tensor a
    zero-copy view of the shared buffers."""
    layout = plan["layout"]
    regions = layout["regions"]
    view = region_view(torch, mm, plan)

    out_dtype = {2: torch.bfloat16, 4: torch.float32}[layout["value_bytes"]]
    lse_b_sq_h = k.conventions.lse_layout == "[b,s_q,h]"
    scale_fmt = plan.get("scale_fmt") or ""

    def tensors(c):
        i, out_i, lse_i, _ = layout["calls"][c]
        inp = layout["inputs"][i]
        s = inp["shape"]
        b, sq, h = s["batch"], s["s_q"], s["heads"]
        d_qk, d_v = s.get("d_qk", mla_door.D_QK), s.get("d_v", mla_door.D_V)
        q_i, kv_i, bt_i, sl_i, idx_i = inp["regions"]
        token_bytes = regions[kv_i]["bytes"] // max(1, s["num_blocks"] * s["page_size"])
        t = {
            "q": view(q_i, torch.bfloat16, (b, sq, h, d_qk)),
            "kv_cache": view(kv_i, torch.uint8, (s["num_blocks"], s["page_size"], token_bytes)),
            "block_table": view(bt_i, torch.int32, (b, s["max_blocks"])),
            "cache_seqlens": view(sl_i, torch.int32, (b,)),
            "indices": view(idx_i, torch.int32, (b, sq, s["topk"])) if s["topk"] > 0 else None,
        }
        out = view(out_i, out_dtype, (b, sq, h, d_v))
        lse = view(lse_i, torch.float32, (b, sq, h) if lse_b_sq_h else (b, h, sq))
        fmt = scale_fmt if s["cache_format"] == "fp8" else ""
        return t, out, lse, shape_of(s, fmt, mla_door.Call, softmax_scale=inp["softmax_scale"])

    return tensors


def call(args):
    kind, plan = read_wire_of(args.plan, ("attention-calls", "entry-calls"))
    if kind == "entry-calls":
        return call_entry(args, plan)
    layout = plan["layout"]
    mm, ctl = open_arena(plan)
    loaded = load_for_calls(args.spec, ctl)
    if loaded is None:
        return 0
    torch, k = loaded
    cuda = k.backend == "cuda"
    tensors = call_tensors(torch, mm, plan, k)

    make = min(len(layout["calls"]), plan["make_calls"])
    for c in range(make):
        stop = layout["calls"][c][3]
        state, message, seconds = STATE_OK, "", 0.0
        try:
            if k.decode is None:
                raise RuntimeError("the kernel has no decode")
            t, out, lse, info = tensors(c)
            seconds = invoke(torch, cuda, lambda q, kv, bt, sl, idx, o, l: k.decode(q, kv, bt, sl, idx, o, l, info),
                             [t["q"], t["kv_cache"], t["block_table"], t["cache_seqlens"], t["indices"]], [out, lse])
        except mla_door.Unsupported as e:
            state, message = STATE_UNSUPPORTED, str(e) or "(no reason given)"
        except Exception as e:
            state, message = STATE_ERROR, f"exception: {error_words(e)}"
        ctl.call(c, state, seconds, message)
        # Stop so the parent can take this call's outputs before anything else runs in here.
        if stop:
            os.kill(os.getpid(), signal.SIGSTOP)
        if state != STATE_OK:
            break
    return 0


def call_entry(args, plan):
    """The calls of an entry-calls plan (certify/src/isolation/entry_calls.hpp): the kernel's
    prefill, merge, top-k, indexer logits, indexer append or sparse prefill, each call on its own
    outputs, stopping after each so the certifier
    can audit it."""
    mm, ctl = open_arena(plan)
    loaded = load_for_calls(args.spec, ctl)
    if loaded is None:
        return 0
    torch, k = loaded
    the_call = entry_call(torch, ctl, plan, k, region_view(torch, mm, plan))
    if the_call is None:
        return 0
    return make_entry_calls(torch, ctl, plan, k.backend == "cuda", *the_call)


def entry_call(torch, ctl, plan, k, view):
    """The entry-calls plan's call as (fn, inputs, outputs_of): fn(*inputs, *outputs_of(a call's
    regions)) calls the kernel's entry on zero-copy views of the shared buffers. None, with the
    setup record saying why, when the kernel lacks the entry the plan names. Shared by `call` (the
    certifier's audited calls) and `bench` (one call per request)."""
    entry = plan["entry"]
    if getattr(k, entry, None) is None or entry not in ("prefill", "merge", "topk", "indexer_logits", "indexer_append",
                                                        "sparse_prefill"):
        ctl.setup(STATE_ERROR, f"the certifier asks for the kernel's {entry} entry, which it does not have")
        return None
    a, inp = plan["args"], plan["inputs"]
    if entry == "indexer_logits":
        return indexer_logits_call(torch, ctl, plan, k.indexer_logits, view)
    if entry == "sparse_prefill":
        sp = k.sparse_prefill
        s = a["shape"]
        sq, skv, h, d, tk = s["s_q"], s["s_kv"], s["heads"], s["d_qk"], s["topk"]
        info = call_info(entry, a)
        inputs = [view(inp["q"], torch.bfloat16, (sq, h, d)), view(inp["kv"], torch.bfloat16, (skv, d)),
                  view(inp["indices"], torch.int32, (sq, tk)),
                  view(inp["attn_sink"], torch.float32, (h,)) if s["sink"] else None,
                  view(inp["topk_length"], torch.int32, (sq,)) if s["topk_length"] else None]
        out_dtype = torch.bfloat16 if sp.out_dtype == "bf16" else torch.float32
        return (lambda *t: sp.sparse_prefill(*t, info), inputs,
                                lambda regions: [view(regions[0], out_dtype, (sq, h, 512)),
                                                 view(regions[1], torch.float32, (sq, h)),
                                                 view(regions[2], torch.float32, (sq, h))])
    if entry == "indexer_append":
        ia = k.indexer_append
        nt, nb, bs = a["num_tokens"], a["num_blocks"], a["block_size"]
        info = call_info(entry, a)
        inputs = [view(inp["keys"], torch.bfloat16, (nt, 128)), view(inp["slot_mapping"], torch.int64, (nt,))]
        # The cache is the call's own copy, written in place.
        return (lambda *t: ia.append(*t, info), inputs,
                                lambda regions: [view(regions[0], torch.uint8, (nb, bs * 132))])
    if entry == "topk":
        t = k.topk
        rows, n, kk = a["rows"], a["n"], a["k"]
        inputs = [view(inp["logits"], torch.float32, (rows, n)), view(inp["starts"], torch.int32, (rows,)),
                  view(inp["ends"], torch.int32, (rows,))]
        info = call_info(entry, a)
        return (lambda *x: t.topk(*x, info), inputs,
                                lambda regions: [view(regions[0], torch.int32, (rows, kk))])
    if entry == "merge":
        m = k.merge
        n, h, d = a["tokens"], a["heads"], a["head_dim"]
        dt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[a["dtype"]]
        lse_shape = (n, h) if m.conventions.lse_layout == "[n,h]" else (h, n)
        inputs = [view(inp["out_a"], dt, (n, h, d)), view(inp["lse_a"], torch.float32, lse_shape),
                  view(inp["out_b"], dt, (n, h, d)), view(inp["lse_b"], torch.float32, lse_shape)]
        info = call_info(entry, a)
        return (lambda *t: m.merge(*t, info), inputs,
                                lambda regions: [view(regions[0], dt, (n, h, d)), view(regions[1], torch.float32, lse_shape)])
    p = k.prefill
    s = a["shape"]
    b, h, tq, tk = s["batch"], s["heads"], s["total_q"], s["total_k"]
    d_qk, d_v = s.get("d_qk", 192), s.get("d_v", 128)
    inputs = [view(inp["q"], torch.bfloat16, (tq, h, d_qk)), view(inp["k"], torch.bfloat16, (tk, h, d_qk)),
              view(inp["v"], torch.bfloat16, (tk, h, d_v)), view(inp["cu_seqlens_q"], torch.int32, (b + 1,)),
              view(inp["cu_seqlens_k"], torch.int32, (b + 1,))]
    out_dtype = torch.bfloat16 if p.out_dtype == "bf16" else torch.float32
    lse_shape = (tq, h) if p.conventions.lse_layout == "[b,s_q,h]" else (h, tq)
    info = call_info(entry, a)
    return (lambda *t: p.prefill(*t, info), inputs,
                            lambda regions: [view(regions[0], out_dtype, (tq, h, d_v)),
                                             view(regions[1], torch.float32, lse_shape)])


def indexer_logits_call(torch, ctl, plan, il, view):
    """An indexer logits plan's call (entry_call's triple): the entry's paged or ragged callable,
    by the call's layout."""
    s, inp = plan["args"]["shape"], plan["inputs"]
    paged = s["layout"] == "paged"
    b, nn, h = s["batch"], s["next_n"], s["heads"]
    info = call_info("indexer_logits", plan["args"])
    rows, cols = info.rows, info.cols
    fn = il.paged if paged else il.ragged
    if fn is None:
        ctl.setup(STATE_ERROR, f"the certifier asks for the kernel's {s['layout']} indexer logits, which it does not have")
        return None
    weights = view(inp["weights"], torch.float32, (rows, h))
    if paged:
        inputs = [view(inp["q"], torch.uint8, (b, nn, h, 128)),
                  view(inp["kv_cache"], torch.uint8, (s["num_blocks"], s["block_size"] * 132)), weights,
                  view(inp["context_lens"], torch.int32, (b,)),
                  view(inp["block_table"], torch.int32, (b, s["max_blocks"]))]
    else:
        inputs = [view(inp["q"], torch.uint8, (rows, h, 128)), view(inp["k_codes"], torch.uint8, (cols, 128)),
                  view(inp["k_scales"], torch.float32, (cols,)), weights, view(inp["ks"], torch.int32, (rows,)),
                  view(inp["ke"], torch.int32, (rows,))]
    return (lambda *t: fn(*t, info), inputs,
                            lambda regions: [view(regions[0], torch.float32, (rows, cols))])


def make_entry_calls(torch, ctl, plan, cuda, fn, inputs, outputs_of):
    """The plan's calls of `fn(*inputs, *outputs)`, each on its own outputs (outputs_of(its
    regions)), recorded and stopped after, as the certifier's entry calls expect."""
    calls = plan["calls"][: plan["make_calls"]]
    for c, regions in enumerate(calls):
        state, message, seconds = STATE_OK, "", 0.0
        try:
            seconds = invoke(torch, cuda, fn, inputs, outputs_of(regions))
        except mla_door.Unsupported as e:
            state, message = STATE_UNSUPPORTED, str(e) or "(no reason given)"
        except Exception as e:
            state, message = STATE_ERROR, f"exception: {error_words(e)}"
        ctl.call(c, state, seconds, message)
        os.kill(os.getpid(), signal.SIGSTOP)
        # A refusal is a returned call (as a plug-in's MLA_PLUGIN_UNSUPPORTED): the next must say
        # the same. Only a call that raised ends the calls.
        if state == STATE_ERROR:
            break
    return 0


# ---- bench ------------------------------------------------------------------------------------

# The requests of `bench`, one byte each on its socket, each answered with one byte once the
# record in the control block's call slot 0 is written.
REQUEST_CALL, REQUEST_RESULTS = b"c", b"r"


def bench(args):
    """One long-lived child for a benchmark: the plan's call 0, made once per request. Everything
    a call does not need is done once, before the first request: the mapping, the kernel's import,
    the torch views and (backend cuda) the copies of the inputs and of the output buffers to the
    device. A request is then one kernel call and nothing else of the door's but its record and
    the answer, so a benchmark that times the round trip times the kernel plus the door's fixed
    cost, which `--empty` (no kernel call at all, the same tensors and copies) measures on its own.
    An attention-calls plan calls the decode; an entry-calls plan (the certifier's own layout of
    that entry's call, entry_call) the entry it names."""
    kind, plan = read_wire_of(args.plan, ("attention-calls", "entry-calls"))
    mm, ctl = open_arena(plan)
    sock = args.socket

    def answer():
        os.write(sock, b"\1")

    loaded = load_for_calls(args.spec, ctl)
    if loaded is None:
        answer()  # the refusal or the error is in the setup record
        return 0
    torch, k = loaded
    cuda = k.backend == "cuda"
    try:
        if kind == "entry-calls":
            the_call = entry_call(torch, ctl, plan, k, region_view(torch, mm, plan))
            if the_call is None:
                answer()  # the setup record says which entry it lacks
                return 0
            fn, inputs, outputs_of = the_call
            outputs = outputs_of(plan["calls"][0])
        else:
            t, out, lse, info = call_tensors(torch, mm, plan, k)(0)
            decode = k.decode
            fn = lambda q, kv, bt, sl, idx, o, l: decode(q, kv, bt, sl, idx, o, l, info)  # noqa: E731
            inputs, outputs = [t["q"], t["kv_cache"], t["block_table"], t["cache_seqlens"], t["indices"]], [out, lse]
        if cuda:
            # Copied to the device once: the timed calls read and write device memory only.
            d_in = [v.to(COPY_DEVICE, copy=True) if v is not None else None for v in inputs]
            d_out = [o.to(COPY_DEVICE, copy=True) for o in outputs]
            sync(torch)
        else:
            d_in, d_out = inputs, outputs
    except Exception as e:
        ctl.setup(STATE_ERROR, f"the child could not lay out the call: {error_words(e)}")
        answer()
        return 0
    if args.empty:
        fn = lambda *a: None  # noqa: E731
    events = cuda and COPY_DEVICE == "cuda"
    if events:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    answer()  # ready: setup record cleared, nothing refused
    while True:
        request = os.read(sock, 1)
        if not request:
            return 0  # the benchmark closed its end: done
        state, message, seconds = STATE_OK, "", 0.0
        try:
            if request == REQUEST_CALL:
                if events:
                    # The device's own clock: the call's kernels, not the host's launch loop.
                    start.record()
                    fn(*d_in, *d_out)
                    end.record()
                    end.synchronize()
                    seconds = start.elapsed_time(end) / 1e3
                else:
                    t0 = time.perf_counter()
                    fn(*d_in, *d_out)
                    if cuda:
                        sync(torch)
                    seconds = time.perf_counter() - t0
            elif request == REQUEST_RESULTS:
                if cuda:  # a CPU kernel wrote the shared buffers themselves
                    for o, d in zip(outputs, d_out):
                        o.copy_(d.cpu())
            else:
                state, message = STATE_ERROR, f"unknown request {request!r}"
        except mla_door.Unsupported as e:
            state, message = STATE_UNSUPPORTED, str(e) or "(no reason given)"
        except Exception as e:
            state, message = STATE_ERROR, f"exception: {error_words(e)}"
        ctl.call(0, state, seconds, message)
        answer()


def charge_simulated_context(verb):
    """The rehearsal's stand-in for a CUDA context's start-up, as the certifier's own children
    charge it (certify/include/mla/certify/child.hpp): on a machine without a GPU nothing creates
    one, so with MLA_SIMULATED_CONTEXT_SECONDS set this process waits that long once, as a child
    running a CUDA kernel would, and adds a line to MLA_SIMULATED_CONTEXT_LOG when that is set."""
    text = os.environ.get("MLA_SIMULATED_CONTEXT_SECONDS", "")
    if not text:
        return
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= 60:  # also refuses nan and inf
        raise ValueError(f"MLA_SIMULATED_CONTEXT_SECONDS={text[:40]!r} is not a number of seconds between 0 and 60")
    time.sleep(seconds)
    log = os.environ.get("MLA_SIMULATED_CONTEXT_LOG", "")
    if log:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, f"{os.getpid()} python {verb} {text}\n".encode())  # one write: lines never interleave
        finally:
            os.close(fd)


# ---- the fork server --------------------------------------------------------------------------

# The most descriptors a child is passed besides its log (ForkServer::kMaxPassFds, isolation.hpp).
MAX_PASS_FDS = 4


def serve(sock_fd):
    """The door's fork server (certify/include/mla/certify/isolation.hpp, ForkServer): imports
    torch once, then forks a copy of itself for each child the certifier asks for. It never
    imports the user's module nor runs a kernel: every child starts from the state a fresh
    `child.py` would reach before its verb, in its own process, and pays only the fork."""
    import socket
    parent = os.getppid()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET, fileno=sock_fd)
    try:
        import torch  # noqa: F401  the start-up every child would otherwise pay
    except Exception as e:
        sock.send(json.dumps({"error": f"cannot import torch: {type(e).__name__}: {e}"}).encode())
        return 3
    sock.send(json.dumps({"ready": True}).encode())
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(sock, 1 << 16, 1 + MAX_PASS_FDS)
        except OSError:
            return 0
        if not msg:
            return 0  # the certifier closed its end: the run is over
        try:
            reply = {"pid": fork_child(sock, parent, json.loads(msg), fds)}
        except Exception as e:
            reply = {"error": f"{type(e).__name__}: {e}"}
        finally:
            for fd in fds:
                os.close(fd)
        sock.send(json.dumps(reply).encode())


def fork_child(sock, parent, request, fds):
    argv = [str(a) for a in request["argv"]]
    pass_fds = [int(n) for n in request.get("pass_fds", [])]
    if len(fds) != 1 + len(pass_fds):
        raise ValueError(f"{len(fds)} descriptors received, {1 + len(pass_fds)} expected")
    if any(n <= 2 for n in pass_fds) or len(set(pass_fds)) != len(pass_fds):
        raise ValueError(f"descriptor numbers {pass_fds} to pass: each must be distinct and above 2")
    r, w = os.pipe()
    middle = os.fork()
    if middle == 0:
        # The intermediate: forks the child and exits at once, so the child is re-parented to
        # the certifier (a child subreaper), which then waits on it as on a child of its own.
        try:
            os.close(r)
            child = os.fork()
            if child == 0:
                os.close(w)
                run_forked_child(sock, parent, argv, fds, pass_fds)
            os.setpgid(child, child)  # its own group before anyone learns its pid
            os.write(w, str(child).encode())
        finally:
            os._exit(0)
    os.close(w)
    try:
        data = os.read(r, 64)
    finally:
        os.close(r)
        os.waitpid(middle, 0)
    if not data:
        raise RuntimeError("the intermediate process reported no child")
    return int(data)


def run_forked_child(sock, parent, argv, fds, pass_fds):
    try:
        try:
            os.setpgid(0, 0)
        except OSError:
            pass
        # Nothing runs before this process is the certifier's child: its stops must reach it.
        deadline = time.monotonic() + 10
        while os.getppid() != parent:
            if time.monotonic() > deadline:
                os._exit(75)
            time.sleep(0.0002)
        ctypes.CDLL(None).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG: dies with the certifier
        if os.getppid() != parent:
            os._exit(75)
        sock.close()
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(fds[0], 1)
        os.dup2(fds[0], 2)
        # Each passed descriptor under the number its arguments name. Moved above every target
        # first, so placing one never overwrites another still to be placed.
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, max(pass_fds) + 1) for fd in fds[1:]]
        for fd, want in zip(high, pass_fds):
            os.dup2(fd, want, inheritable=False)
        for fd in {devnull, *fds, *high} - {0, 1, 2, *pass_fds}:
            os.close(fd)
        os.environ["MLA_DOOR_FORKED"] = "1"  # how it started, for whoever asks (its tests)
        # Its command line is the server's (no exec): the name `ps` shows says which verb it runs.
        ctypes.CDLL(None).prctl(15, f"door-{argv[0] if argv else '?'}"[:15].encode())  # PR_SET_NAME
        if "random" in sys.modules:  # not the server's sequence, shared by every child
            sys.modules["random"].seed()
    except BaseException:
        os._exit(75)  # the child could not be set up: the host's failure (isolation.hpp)
    main(argv)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve"] and len(argv) == 3 and argv[1] == "--socket-fd":
        os._exit(serve(int(argv[2])))
    faulthandler.enable()  # a crash in the kernel leaves its Python traceback in the child's log
    p = argparse.ArgumentParser(prog="mla_door/child.py")
    sub = p.add_subparsers(dest="verb", required=True)
    d = sub.add_parser("describe")
    d.add_argument("--spec", required=True)
    d.add_argument("--result", required=True)
    q = sub.add_parser("claims")
    q.add_argument("--spec", required=True)
    q.add_argument("--inputs", required=True)
    q.add_argument("--result", required=True)
    c = sub.add_parser("call")
    c.add_argument("--spec", required=True)
    c.add_argument("--plan", required=True)
    c.add_argument("--unclaimed", action="store_true")  # the parent decided the claim; nothing to check here
    b = sub.add_parser("bench")
    b.add_argument("--spec", required=True)
    b.add_argument("--plan", required=True)
    b.add_argument("--socket", type=int, required=True)  # inherited under this number
    b.add_argument("--empty", action="store_true")  # the door's own cost: no decode
    args = p.parse_args(argv)
    try:
        if args.verb != "claims":  # can_implement answers from the shape: no reason to touch the device
            charge_simulated_context(args.verb)
        rc = {"describe": describe, "claims": claims, "call": call, "bench": bench}[args.verb](args)
    except Exception as e:
        print(f"mla_door child {args.verb}: {error_words(e)}", file=sys.stderr)
        rc = 3
    sys.stdout.flush()
    sys.stderr.flush()
    # No interpreter teardown: the shared mapping is exported to tensors, and nothing is left to
    # clean up that the process's end does not.
    os._exit(rc)


if __name__ == "__main__":
    main()
