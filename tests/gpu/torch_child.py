"""One measured process of the torch warm-start run (started by torch_warmstart.py).

Imports torch, plugs kiln in when ``KILN_GPU_KILN=1`` (``kiln.torch.install()``; the Triton
drop-in comes from the environment), builds the model, initialises the device, optionally waits
at a barrier, then times the first call: from the start of the step, compile included, until its
result is on the host (``.item()`` and ``torch.cuda.synchronize()``). A second call is timed too
(the steady state, for reference). Writes its figures as JSON to ``--result``.

Usage: torch_child.py --model gpt2|regional --device cuda|cpu [--tiny] --result FILE [--barrier DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

T_START = time.perf_counter()
sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True, choices=("gpt2", "regional"))
    p.add_argument("--device", default="cuda")
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--result", type=Path, required=True)
    p.add_argument("--barrier", type=Path)
    args = p.parse_args()

    import torch

    t_imported = time.perf_counter()
    result: dict = {"pid": os.getpid(), "model": args.model, "torch": torch.__version__, "kiln": False}
    if os.environ.get("KILN_GPU_KILN") == "1":
        import kiln.torch

        result["kiln_replaced"] = kiln.torch.install()
        result["kiln"] = kiln.torch.installed()
    import models

    work = models.Workload(args.model, args.device, args.tiny)
    if args.device == "cuda":
        torch.cuda.init()
        (torch.ones(8, device="cuda") * 2).sum().item()  # the context and an eager kernel, outside the timing
        torch.cuda.synchronize()
        result["gpu"] = torch.cuda.get_device_name(0)
    t_ready = time.perf_counter()
    if args.barrier is not None:
        (args.barrier / f"ready.{os.getpid()}").write_text("")
        while not (args.barrier / "go").exists():
            time.sleep(0.002)
    profile_dir = os.environ.get("KILN_GPU_PROFILE_DIR")
    profiler = None
    if profile_dir:
        # Where a first call's time goes (a diagnostic run only: cProfile slows Python down).
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    t0 = time.perf_counter()
    value = work.step()
    if args.device == "cuda":
        torch.cuda.synchronize()
    t1 = time.perf_counter()
    if profiler is not None:
        import io
        import pstats

        profiler.disable()
        text = io.StringIO()
        stats = pstats.Stats(profiler, stream=text)
        stats.sort_stats("cumulative").print_stats(70)
        stats.sort_stats("tottime").print_stats(30)
        label = args.result.stem.replace(" ", "_").replace("(", "").replace(")", "").replace(",", "")
        Path(profile_dir).mkdir(parents=True, exist_ok=True)
        (Path(profile_dir) / f"{label}.txt").write_text(f"first call {t1 - t0:.2f} s\n" + text.getvalue())
    value2 = work.step()
    if args.device == "cuda":
        torch.cuda.synchronize()
    t2 = time.perf_counter()
    try:
        import triton

        result["triton"] = triton.__version__
    except ImportError:
        result["triton"] = None
    if os.environ.get("KILN_GPU_KILN") == "1":
        import kiln.torch
        from kiln import torch_artifacts

        result["kiln"] = kiln.torch.installed()
        # The job's stored artifacts, loaded inside the first call (seconds and bytes).
        result["kiln_artifacts"] = torch_artifacts.stats()
    result.update(
        {
            "first_call_s": t1 - t0,
            "second_call_s": t2 - t1,
            "import_s": t_imported - T_START,
            "setup_s": t_ready - t_imported,
            "value": value,
            "value2": value2,
            "start_wall": time.time() - (time.perf_counter() - t0),
        }
    )
    args.result.write_text(json.dumps(result, indent=2))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
