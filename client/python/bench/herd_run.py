"""Starts N herd_worker.py processes at one instant and collects what each did.

Each process gets its own empty ``TRITON_CACHE_DIR`` (as on a fresh host) plus ``env``. All of
them import Triton first and wait at a file barrier; then ``go`` is created and they compile at
once. Used by the fleet tests and by fleet_herd.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

WORKER = Path(__file__).resolve().parent / "herd_worker.py"


@dataclass
class Herd:
    #: One JSON report per process (see herd_worker.py).
    reports: list[dict]
    #: Each process's stderr.
    stderr: list[str]
    #: From ``go`` until the last process had every kernel, in seconds.
    wall_secs: float

    @property
    def compiles(self) -> int:
        return sum(r["compiles"] for r in self.reports)


def run_herd(
    n: int,
    workdir: Path,
    env: dict[str, str],
    *,
    only: int | None = None,
    triton_preinit: bool = False,
    python: str = sys.executable,
    timeout: float = 600.0,
) -> Herd:
    workdir.mkdir(parents=True, exist_ok=True)
    barrier = workdir / "barrier"
    barrier.mkdir()
    procs = []
    for i in range(n):
        cache = workdir / f"triton-cache-{i}"
        cache.mkdir()
        penv = {**os.environ, **env, "TRITON_CACHE_DIR": str(cache)}
        args = [python, str(WORKER), str(workdir / f"report-{i}.json"), str(barrier)]
        if only is not None:
            args += ["--only", str(only)]
        if triton_preinit:
            args.append("--triton-preinit")
        err = open(workdir / f"stderr-{i}.txt", "wb")
        procs.append((subprocess.Popen(args, env=penv, stdin=subprocess.DEVNULL, stdout=err, stderr=err), err))
    deadline = time.monotonic() + timeout
    try:
        while len(list(barrier.glob("ready.*"))) < n:
            for p, _ in procs:
                if p.poll() is not None:
                    raise RuntimeError(f"a herd process exited before the barrier: {_tail(workdir)}")
            if time.monotonic() > deadline:
                raise RuntimeError("the herd did not reach the barrier in time")
            time.sleep(0.01)
        go = time.time()
        (barrier / "go").write_text("")
        for p, _ in procs:
            p.wait(max(1.0, deadline - time.monotonic()))
    finally:
        for p, err in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            err.close()
    stderr = [(workdir / f"stderr-{i}.txt").read_text(errors="replace") for i in range(n)]
    failed = [i for i, (p, _) in enumerate(procs) if p.returncode != 0]
    if failed:
        raise RuntimeError(f"herd processes {failed} failed:\n" + "\n".join(stderr[i][-3000:] for i in failed))
    reports = [json.loads((workdir / f"report-{i}.json").read_text()) for i in range(n)]
    return Herd(reports, stderr, max(r["finished"] for r in reports) - go)


def _tail(workdir: Path) -> str:
    return "\n".join(p.read_text(errors="replace")[-2000:] for p in sorted(workdir.glob("stderr-*.txt")))
