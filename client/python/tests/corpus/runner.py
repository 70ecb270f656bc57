"""Runs one job of the corpus as a job runs it: ``world`` ranks at once (torchrun's variables),
plain torch.compile or through kiln, each rank with its own Inductor cache directory (a fresh
host's), and reads each rank's JSON line. The CPU tests and the benchmarks use it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
#: Every job of the corpus, by name: the file ``<name>.py`` here.
SHAPES = tuple(sorted(p.stem for p in HERE.glob("*.py") if p.stem not in ("common", "runner")))
#: The shapes that train, and so run in every layout; the rest serve, in one process.
TRAINING = tuple(s for s in SHAPES if s != "decode")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def clean_env() -> dict[str, str]:
    """This environment without any setting of torch's caches, Triton's or kiln's."""
    prefixes = ("TORCHINDUCTOR_", "TORCH_COMPILE", "TRITON_", "KILN_TORCH", "KILN_DAEMON")
    return {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}


def kiln_env(uri: str) -> dict[str, str]:
    """kiln as a user turns it on: ``KILN_TORCH=1`` and the daemon's address, nothing else."""
    return {"KILN_TORCH": "1", "KILN_DAEMON": uri}


def run(shape: str, layout: str, world: int, tmp: Path, env: dict[str, str], timeout: float = 900) -> list[dict[str, Any]]:
    """Runs ``shape`` in ``layout`` as ``world`` ranks with ``env`` added to a clean environment;
    each rank's line, with its stderr under ``"stderr"``. A rank that fails raises, with its log."""
    if shape not in SHAPES:
        raise ValueError(f"{shape!r} is not a job of the corpus ({', '.join(SHAPES)})")
    base = clean_env()
    base.update(LAYOUT=layout, WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    base.update(env)
    procs = []
    for rank in range(world):
        rank_env = dict(base, RANK=str(rank), LOCAL_RANK=str(rank), TORCHINDUCTOR_CACHE_DIR=str(tmp / f"inductor-{rank}"))
        rank_env.setdefault("TRITON_CACHE_DIR", str(tmp / f"triton-{rank}"))
        procs.append(subprocess.Popen([sys.executable, str(HERE / f"{shape}.py")], env=rank_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = []
    failures = []
    for rank, p in enumerate(procs):
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            failures.append(f"rank {rank} of {shape} ({layout}) did not finish in {timeout:.0f} s:\n{err[-3000:]}")
            continue
        if p.returncode != 0 or not out.strip():
            failures.append(f"rank {rank} of {shape} ({layout}) exited {p.returncode}:\n{err[-4000:]}")
            continue
        line: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        line["stderr"] = err
        results.append(line)
    if failures:
        raise AssertionError("\n\n".join(failures))
    return results
