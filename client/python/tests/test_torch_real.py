"""kiln.torch with a real torch 2.11 (scripts/test installs PyPI's torch into .venv; Inductor's
CPU backend compiles here, the GPU hosts run the same tests on CUDA).

Two fresh processes, each with an empty Inductor cache directory, run the same torch.compile
with KILN_TORCH=1: the first stores its FX graph (and AOTAutograd) entries through kilnd, the
second gets them from kiln and counts remote hits in torch's own cache statistics (snapshots
off, so the remote caches are what is measured).

Snapshots: a first process compiles and saves its cache directories; on a fresh host (the same
paths emptied, another kilnd of the fleet) a second process restores them before its first
compile and compiles nothing: every FX graph is a local cache hit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
from harness import Kilnd, require

import kiln.torch

torch = require("torch")

JOB = """
    import json, torch
    from torch._inductor.remote_cache import cache_stats
    device = "cuda" if torch.cuda.is_available() else "cpu"

    def f(x, y):
        return (x.sin() + y.cos()).relu() * 2

    out = torch.compile(f)(torch.randn(256, device=device), torch.randn(256, device=device))
    print(json.dumps({n: {"hit": s.hit, "miss": s.miss, "put": s.put} for n, s in cache_stats._stats.items()}))
"""


def run_job(kilnd: Kilnd, cache_dir: Path) -> dict[str, dict[str, int]]:
    env = {**os.environ, "KILN_TORCH": "1", "KILN_DAEMON": kilnd.uri, "TORCHINDUCTOR_CACHE_DIR": str(cache_dir)}
    env["TRITON_CACHE_DIR"] = str(cache_dir / "triton")
    env["KILN_TORCH_SNAPSHOT"] = "0"
    # This measures torch's remote caches through kiln: the graph path (test_torch_graphs.py)
    # would compile in kilnd and leave them nothing to do.
    env["KILN_TORCH_GRAPHS"] = "0"
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(JOB)], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


SNAPSHOT_JOB = """
    import json, torch
    import kiln.torch, kiln.torch.snapshot
    from torch._dynamo.utils import counters
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 8)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    step = torch.compile(model)
    loss = step(torch.randn(32, 64, device=device)).pow(2).mean()
    loss.backward()
    opt.step()
    kiln.torch.snapshot.wait_for_saves(60)  # the save after the compiles, in the background
    print(json.dumps({"counters": {k: dict(v) for k, v in counters.items()}, "snapshot": kiln.torch.snapshot_stats()}, default=str))
"""


def run_snapshot_job(kilnd: Kilnd, tmp_path: Path, job: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHINDUCTOR_", "TRITON_", "KILN_TORCH", "KILN_DAEMON"))}
    env.update(KILN_TORCH="1", KILN_DAEMON=kilnd.uri, KILN_TORCH_JOB=job, TRITON_HOME=str(tmp_path / "home"))
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / "inductor")
    # Remote caches off: every hit of the second process is then its restored directory's.
    env.update(TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE="0", TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE="0")
    # The first process compiles in-process, so its snapshot is what a compile leaves.
    env["KILN_TORCH_GRAPHS"] = "0"
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(SNAPSHOT_JOB)], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def refused_as_untested() -> bool:
    """True when this torch is not one kiln.torch was tested with, after checking that
    install() refuses it, loudly, rather than half-patching it: then there is nothing else to test."""
    from kiln.torch import UnsupportedTorchVersion, check_version

    try:
        check_version(torch.__version__)
    except UnsupportedTorchVersion as e:
        with pytest.raises(UnsupportedTorchVersion):
            kiln.torch.install()
        assert torch.__version__ in str(e)
        return True
    return False


def test_a_fresh_process_gets_the_compiled_graph_from_kiln(kilnd: Kilnd, tmp_path: Path) -> None:
    if refused_as_untested():
        return
    first = run_job(kilnd, tmp_path / "first")
    assert first["KilnFxGraphCache"]["put"] >= 1, first
    second = run_job(kilnd, tmp_path / "second")
    assert second["KilnFxGraphCache"]["hit"] >= 1 and second["KilnFxGraphCache"]["miss"] == 0, second


def test_a_fresh_host_restores_the_snapshot_and_compiles_nothing(kilnd: Kilnd, kilnd_fresh: Kilnd, tmp_path: Path) -> None:
    if refused_as_untested():
        return
    import shutil

    job = f"real-{uuid.uuid4().hex[:8]}"
    first = run_snapshot_job(kilnd, tmp_path, job)
    assert first["counters"]["inductor"].get("fxgraph_cache_miss", 0) >= 1, first["counters"]
    saves = first["snapshot"]["saves"]
    assert saves and sum(s["files_uploaded"] for s in saves) > 0, first["snapshot"]
    shutil.rmtree(tmp_path / "inductor")
    shutil.rmtree(tmp_path / "home", ignore_errors=True)
    second = run_snapshot_job(kilnd_fresh, tmp_path, job)
    restore = second["snapshot"]["restore"]
    assert restore["found"] and restore["files"] > 0 and restore["relocated"] == [], second["snapshot"]
    inductor = second["counters"]["inductor"]
    assert inductor.get("fxgraph_cache_miss", 0) == 0 and inductor.get("fxgraph_cache_hit", 0) >= 1, second["counters"]
