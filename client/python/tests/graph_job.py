"""A small training job with a compiled model, run in its own process with kiln.torch on: the job
the graph path's tests run against a kilnd."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

JOB = """
    import faulthandler, json, os, sys, time, torch
    import kiln.torch
    from torch._dynamo.utils import counters
    started = time.perf_counter()
    # DUMP_STACKS_AFTER=S: every thread's stack on stderr after S seconds, should the job still run
    # (a swap that never came shows where it stands).
    if os.environ.get("DUMP_STACKS_AFTER"):
        faulthandler.dump_traceback_later(float(os.environ["DUMP_STACKS_AFTER"]), file=sys.stderr)
    torch.manual_seed(0)
    w = int(os.environ.get("WIDTH", "64"))
    model = torch.nn.Sequential(torch.nn.Linear(64, w), torch.nn.GELU(), torch.nn.Linear(w, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    step = torch.compile(model, dynamic=os.environ.get("DYNAMIC") == "1")

    @torch.compile
    def train_step(x):
        # TRAIN_STEP=1: the backward breaks the graph, and the resume function after it, which
        # returns the detached loss, is a graph that generates no code.
        loss = model(x).pow(2).mean()
        loss.backward()
        return loss.detach()

    x = torch.randn(4, 8, 64)  # 3-D: a linear layer's output is then a view, which must travel too
    losses, first = [], None
    for i in range(int(os.environ.get("STEPS", "3"))):
        if os.environ.get("TRAIN_STEP") == "1":
            loss = train_step(x)
        else:
            loss = step(x).pow(2).mean()
            loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
        if first is None:
            first = time.perf_counter() - started
        # STOP_WHEN_COMPILED=N: end once N calls ran compiled, however long kilnd's compile took;
        # STOP_ON_FALLBACK=1: or at the first fallback (the caller reads which).
        stop = int(os.environ.get("STOP_WHEN_COMPILED", "0"))
        stats = kiln.torch.graph_stats() if stop else None
        if stats and sum(g["calls"].get("compiled", 0) for g in stats["graphs"]) >= stop:
            break
        if stats and stats["fallbacks"] and os.environ.get("STOP_ON_FALLBACK") == "1":
            break
        if time.perf_counter() - started > float(os.environ.get("STOP_AFTER_SECS", "inf")):
            break
        time.sleep(float(os.environ.get("SLEEP", "0")))
    print(json.dumps({"losses": losses, "first": first, "aot": dict(counters["aot_autograd"]),
                      "graphs": kiln.torch.graph_stats()}))
"""


def run_job(uri: str, tmp: Path, **env_extra: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHINDUCTOR_", "TRITON_", "KILN_TORCH", "KILN_DAEMON"))}
    env.update(KILN_TORCH="1", KILN_TORCH_GRAPHS="1", KILN_TORCH_SNAPSHOT="0", KILN_DAEMON=uri, TORCHINDUCTOR_CACHE_DIR=str(tmp / "inductor"))
    # A cold graph is claimed, whether or not this module's kilnd has its workers up by then
    # (a test of the workers' path says KILN_TORCH_CLAIM="" or "0").
    env.update(KILN_TORCH_CLAIM="1")
    # Only the graph path: torch's remote caches through kiln are tested in test_torch_real.py.
    env.update(TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE="0", TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE="0")
    # A wait for another process's or a worker's compile lasts as long as that compile: on a 2-core
    # host under the suite's other tests it can outlast the first wait read off Dynamo's trace
    # (at least 30 s), which unit tests in test_torch_layouts.py test by itself.
    env.update(KILN_TORCH_GRAPH_WAIT_SECS="900")
    env.update(env_extra)
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(JOB)], env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-4000:]
    out: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    out["stderr"] = run.stderr
    return out
