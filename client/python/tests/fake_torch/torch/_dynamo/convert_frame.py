"""A fake compile between Dynamo's compile callbacks: the "graph" of a function is its name; a
compile reads ``<inductor dir>/fxgraph/<name>.json`` (a hit) or writes it and a "kernel" under
``<inductor dir>/triton/0/`` (a miss), and builds Triton's launcher in Triton's own cache
directory once; a cache key needs ``torch_key()`` and, with Triton, ``triton_key()`` first. ``counters`` counts hits and misses; FAKE_TORCH_EVENTS, if set, is a file that
gets one line per compile (``<name> hit|miss``)."""

import os

from torch._inductor.codecache import torch_key
from torch._inductor.runtime.cache_dir_utils import cache_dir

from .callback import CallbackTrigger, callback_handler

counters = {"hit": 0, "miss": 0}


def _write_atomic(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = os.path.join(os.path.dirname(path), f".{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _compile(name):
    torch_key()  # every cache key starts with these two
    from torch._inductor.runtime import triton_compat

    if triton_compat.HAS_TRITON:
        triton_compat.triton_key()
    graph = os.path.join(cache_dir(), "fxgraph", name + ".json")
    if os.path.exists(graph):
        counters["hit"] += 1
        return "hit"
    counters["miss"] += 1
    _write_atomic(os.path.join(cache_dir(), "triton", "0", name.upper(), name + ".cubin"), b"\x7fELF" + name.encode())
    _write_atomic(graph, b'{"graph": "%s"}' % name.encode())
    triton_home = os.environ.get("TRITON_HOME") or os.path.expanduser("~")
    launcher = os.environ.get("TRITON_CACHE_DIR") or os.path.join(triton_home, ".triton", "cache")
    if not os.path.exists(os.path.join(launcher, "LAUNCHER", "cuda_utils.so")):
        _write_atomic(os.path.join(launcher, "LAUNCHER", "cuda_utils.so"), b"\x7fELF launcher")
    return "miss"


def compile_and_run(fn, args):
    with callback_handler.install_callbacks(CallbackTrigger.DYNAMO, "0/0"):
        outcome = _compile(fn.__name__)
    if os.environ.get("FAKE_TORCH_EVENTS"):
        with open(os.environ["FAKE_TORCH_EVENTS"], "a") as f:
            f.write(f"{fn.__name__} {outcome}\n")
    return fn(*args)
