"""One process of a fleet herd: imports Triton and the kernels, waits at a barrier, compiles
every kernel for sm_90 through ``triton.compile`` (with whatever cache the environment
configures: ``TRITON_CACHE_MANAGER``/``TRITON_REMOTE_CACHE_BACKEND``, ``TRITON_CACHE_DIR``), and
writes what happened as JSON.

Compiles are counted by a hook on Triton itself, not by any cache's counters: a cache hit returns
from ``triton.compile`` before the pipeline starts, and a real compile always calls
``ASTSource.make_ir`` first, so a wrapper around ``make_ir`` counts real compiles only.

Usage: herd_worker.py OUT_JSON BARRIER_DIR [--only N] [--triton-preinit]
  writes BARRIER_DIR/ready.<pid> when imported, starts when BARRIER_DIR/go exists.
  --triton-preinit: compute Triton's own per-process key (triton_key(): a sha256 over
  libtriton and Triton's sources, about 0.3 s of CPU, the same with any cache or none) before
  the barrier instead of in the first compile.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import compiler as triton_compiler  # noqa: E402

import herd_kernels  # noqa: E402

#: Names (from herd_kernels.KERNELS) of the kernels this process really compiled.
compiled: list[str] = []
#: The kernel triton.compile is working on now.
current: list[str] = [""]
_make_ir = triton_compiler.ASTSource.make_ir


def _counting_make_ir(self, *args, **kwargs):  # type: ignore[no-untyped-def]
    compiled.append(current[0])
    return _make_ir(self, *args, **kwargs)


triton_compiler.ASTSource.make_ir = _counting_make_ir


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("barrier")
    parser.add_argument("--only", type=int, default=len(herd_kernels.KERNELS))
    parser.add_argument("--triton-preinit", action="store_true")
    args = parser.parse_args()
    if args.triton_preinit:
        from triton.runtime.cache import triton_key

        triton_key()
    barrier = Path(args.barrier)
    (barrier / f"ready.{os.getpid()}").write_text("")
    while not (barrier / "go").exists():
        time.sleep(0.002)
    go = (barrier / "go").stat().st_mtime
    started = time.time()
    target = GPUTarget("cuda", 90, 32)
    cubins: dict[str, str] = {}
    #: (kernel, seconds after go when triton.compile returned)
    timeline: list[tuple[str, float]] = []
    for name, fn, signature, constexprs, options in herd_kernels.KERNELS[: args.only]:
        current[0] = name
        src = triton_compiler.ASTSource(fn, signature, constexprs=constexprs, attrs={})
        kernel = triton.compile(src, target=target, options=options)
        cubins[name] = hashlib.sha256(kernel.asm["cubin"]).hexdigest()
        timeline.append((name, round(time.time() - go, 4)))
    finished = time.time()
    Path(args.out).write_text(
        json.dumps(
            {
                "pid": os.getpid(),
                "compiles": len(compiled),
                "compiled": compiled,
                "cubins": cubins,
                "timeline": timeline,
                "go": go,
                "started": started,
                "finished": finished,
            }
        )
    )


if __name__ == "__main__":
    main()
