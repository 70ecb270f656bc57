"""One measured process of the graph-path run (started by torch_graphs.py).

Imports torch (kiln, when the parent set ``KILN_TORCH=1``, is already in through its ``.pth``
hook, and routes torch.compile's graphs to kilnd; ``KILN_TORCH_ASYNC=1`` runs them eagerly until
kilnd's compile is ready), builds the model (``--eager``: the same model, no torch.compile at all),
initialises the device, waits at a barrier when given one, then runs steps, each timed from its
start until its result is on the host. After every step it reads ``kiln.torch.graph_stats()``, so
the parent knows at which step the compiled graphs took over.

Runs ``--steps`` steps, and in async mode at least ``--after-compiled`` steps more once every graph
runs compiled (bounded by ``--max-s``). Writes JSON to ``--result``: the phases (start-up, import,
set-up), each step's start (seconds after the first step's start), duration, loss, and compiled
and eager call counts so far, the graph stats, and this process's CPU seconds (its own and its
reaped children's: Inductor's compile workers are reaped at exit, so the parent reads the total
from wait4 as well).

Usage: graph_child.py --model gpt2|regional|convnet --device cuda|cpu [--tiny] [--eager]
                      --steps N [--after-compiled N] [--max-s S] --result FILE [--barrier DIR]
"""

from __future__ import annotations

import time

T_START = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))


def graph_stats() -> dict:
    if os.environ.get("KILN_TORCH") != "1":
        return {"fallbacks": {}, "graphs": []}
    import kiln.torch

    return kiln.torch.graph_stats()


def calls(stats: dict) -> tuple[int, int, bool]:
    """(compiled calls, eager calls, whether every graph has left its eager start)."""
    graphs = stats["graphs"]
    compiled = sum(g["calls"]["compiled"] for g in graphs)
    eager = sum(g["calls"]["eager"] for g in graphs)
    return compiled, eager, bool(graphs) and all(g["how"] != "eager" and g["how"] != "pending" for g in graphs)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True, choices=("gpt2", "regional", "convnet"))
    p.add_argument("--device", default="cuda")
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--eager", action="store_true")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--after-compiled", type=int, default=0)
    p.add_argument("--max-s", type=float, default=240)
    p.add_argument("--result", type=Path, required=True)
    p.add_argument("--barrier", type=Path)
    a = p.parse_args()

    t0 = time.perf_counter()
    import torch

    t_import = time.perf_counter() - t0
    from models import Workload

    t0 = time.perf_counter()
    w = Workload(a.model, a.device, a.tiny, compile=not a.eager)
    if a.device == "cuda":
        torch.cuda.synchronize()
    t_setup = time.perf_counter() - t0
    if a.barrier is not None:
        (a.barrier / f"ready-{os.getpid()}").touch()
        while not (a.barrier / "go").exists():
            time.sleep(0.01)

    steps = []
    first_wall = time.time()
    first = time.perf_counter()
    compiled_since = None
    while True:
        s0 = time.perf_counter()
        loss = w.step()
        if a.device == "cuda":
            torch.cuda.synchronize()
        s1 = time.perf_counter()
        compiled, eager, all_compiled = calls(graph_stats())
        steps.append({"start": s0 - first, "s": s1 - s0, "loss": loss, "compiled": compiled, "eager": eager})
        if all_compiled and compiled_since is None:
            compiled_since = len(steps)
        n = len(steps)
        if n >= a.steps and (a.after_compiled == 0 or (compiled_since is not None and n - compiled_since >= a.after_compiled)):
            break
        if s1 - first > a.max_s:
            break

    import resource

    me = resource.getrusage(resource.RUSAGE_SELF)
    result = {
        "model": a.model,
        "eager": a.eager,
        "async": os.environ.get("KILN_TORCH_ASYNC") == "1",
        "kiln": os.environ.get("KILN_TORCH") == "1",
        "import_s": t_import,
        "setup_s": t_setup,
        "to_first_step_s": first - T_START,
        "first_step_unix": first_wall,
        "steps": steps,
        "graphs": graph_stats(),
        "cpu_self_s": me.ru_utime + me.ru_stime,
        "device": torch.cuda.get_device_name(0) if a.device == "cuda" else "cpu",
    }
    tmp = a.result.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    tmp.rename(a.result)


if __name__ == "__main__":
    main()
