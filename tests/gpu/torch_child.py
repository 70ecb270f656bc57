"""One measured process of the torch warm-start run (started by torch_warmstart.py).

Imports torch (kiln, when the parent set ``KILN_TORCH=1``, is already in: its ``.pth`` hook ran
at interpreter start-up and started restoring the job's snapshot in the background; this script
never calls kiln itself), builds the model, initialises the device, optionally waits at a
barrier, then times the first call: from the start of the step, compile included, until its
result is on the host (``.item()`` and ``torch.cuda.synchronize()``). A second call is timed too
(the steady state, for reference). Writes its figures as JSON to ``--result``: the phases
(interpreter start-up, ``import torch``, model and device set-up, first call), the cache
directories the process really used, and, under kiln, what ``kiln.torch`` reports it restored.

``--marker FILE``: right after the first step, write the first step's figures to FILE (written
whole: a temporary file, then a rename). ``--hold``: then keep training (a step every 50 ms)
until killed: the preemption case, where the parent SIGKILLs this process once the snapshot
saved after the first step has landed in kilnd; exit 4 if nobody does within ``--hold-s``.
``--fast-exit``: once the result is written, leave with ``os._exit(0)``, skipping interpreter
shutdown (Inductor's compile-worker pool takes up to ~14 s to wind down; nothing a cache needs is
written at exit by torch, and the parent uses this only where exit does not matter).

Usage: torch_child.py --model gpt2|regional|convnet --device cuda|cpu [--tiny] --result FILE
                      [--barrier DIR] [--marker FILE [--hold [--hold-s S]]] [--fast-exit]
"""

from __future__ import annotations

import time

T_START = time.perf_counter()
T_START_WALL = time.time()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

#: Where kiln.torch may report what a process restored (the first callable found is used).
SNAPSHOT_STATS = (
    ("kiln.torch", "snapshot_stats"),
    ("kiln.torch", "snapshot_status"),
    ("kiln.torch.snapshot", "stats"),
    ("kiln.torch.snapshot", "snapshot_stats"),
    ("kiln.snapshot", "stats"),
    ("kiln.snapshots", "stats"),
)


def jsonable(v, depth: int = 0):
    """A JSON-ready copy of whatever kiln returns (a dict, a dataclass, an object)."""
    if depth > 6:
        return repr(v)
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, dict):
        return {str(k): jsonable(x, depth + 1) for k, x in v.items()}
    if isinstance(v, (list, tuple, set, frozenset)):
        return [jsonable(x, depth + 1) for x in v]
    if isinstance(v, (bytes, bytearray)):
        return v.hex()
    if isinstance(v, os.PathLike):
        return os.fspath(v)
    import dataclasses

    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {f.name: jsonable(getattr(v, f.name), depth + 1) for f in dataclasses.fields(v)}
    if hasattr(v, "_asdict"):
        return jsonable(v._asdict(), depth + 1)
    if hasattr(v, "__dict__"):
        return {k: jsonable(x, depth + 1) for k, x in vars(v).items() if not k.startswith("_")}
    return repr(v)


def snapshot_stats() -> dict:
    """What kiln.torch says this process restored (and saved), or why there is nothing."""
    import importlib

    tried = []
    for module_name, fn_name in SNAPSHOT_STATS:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            tried.append(f"{module_name} (no module)")
            continue
        fn = getattr(module, fn_name, None)
        if not callable(fn):
            tried.append(f"{module_name}.{fn_name} (absent)")
            continue
        try:
            return {"source": f"{module_name}.{fn_name}()", "stats": jsonable(fn())}
        except Exception as e:  # noqa: BLE001 - a report, never a failure of the step
            return {"source": f"{module_name}.{fn_name}()", "error": f"{type(e).__name__}: {e}"}
    return {"source": None, "error": "no snapshot stats function in kiln: tried " + ", ".join(tried)}


def cache_dirs() -> dict:
    """The directories this process used, as torch and Triton resolve them now."""
    out: dict = {
        "env": {k: os.environ.get(k) for k in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TRITON_HOME", "KILN_TORCH_JOB", "TMPDIR")},
    }
    try:
        from torch._inductor.runtime.cache_dir_utils import cache_dir

        out["inductor"] = os.path.realpath(cache_dir())
    except Exception as e:  # noqa: BLE001
        out["inductor_error"] = f"{type(e).__name__}: {e}"
    try:
        import triton

        out["triton"] = os.path.realpath(triton.knobs.cache.dir)
        out["triton_home"] = os.path.realpath(triton.knobs.cache.home_dir)
    except Exception as e:  # noqa: BLE001
        out["triton_error"] = f"{type(e).__name__}: {e}"
    return out


def compile_phases() -> dict:
    """Seconds per phase of the compiles so far, from torch's own timers (``dynamo_timed``: real
    wall-clock timers around each phase, nested, so the phases overlap): where a first call's
    time goes, without a profiler's overhead."""
    try:
        from torch._dynamo.utils import compilation_time_metrics

        return {name: round(sum(times), 4) for name, times in compilation_time_metrics.items()}
    except Exception as e:  # noqa: BLE001 - a report, never a failure of the step
        return {"error": f"{type(e).__name__}: {e}"}


def write_whole(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, path)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True, choices=("gpt2", "regional", "convnet"))  # models.MODELS
    p.add_argument("--device", default="cuda")
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--result", type=Path, required=True)
    p.add_argument("--barrier", type=Path)
    p.add_argument("--marker", type=Path, help="written right after the first step")
    p.add_argument("--hold", action="store_true", help="after the first step, keep training until killed")
    p.add_argument("--hold-s", type=float, default=300)
    p.add_argument("--fast-exit", action="store_true")
    args = p.parse_args()
    kiln_on = os.environ.get("KILN_GPU_KILN") == "1"

    import torch

    t_imported = time.perf_counter()
    result: dict = {"pid": os.getpid(), "model": args.model, "torch": torch.__version__, "kiln": False, "start_wall": T_START_WALL}
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
    if os.environ.get("KILN_GPU_PRECOMPUTE_KEYS") == "1":
        # Diagnostic (tests/gpu/first_call_keys): the per-process source hashes a first compile
        # pays, computed before it, outside the timing.
        from torch._inductor.codecache import torch_key
        from torch._inductor.runtime.triton_compat import triton_key

        tk = time.perf_counter()
        torch_key()
        result["precomputed_torch_key_s"] = time.perf_counter() - tk
        tk = time.perf_counter()
        triton_key()
        result["precomputed_triton_key_s"] = time.perf_counter() - tk
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
    result["phases"] = compile_phases()
    result.update(
        {
            "first_call_s": t1 - t0,
            "import_s": t_imported - T_START,
            "setup_s": t_ready - t_imported,
            "value": value,
            "first_step_end_wall": time.time(),
        }
    )
    if args.marker is not None:
        marker = dict(result)
        marker["dirs"] = cache_dirs()
        if kiln_on:
            marker["snapshot"] = snapshot_stats()
        write_whole(args.marker, marker)
        print(f"first step done: {json.dumps(marker)}", flush=True)
    if args.hold:
        # Training goes on until the parent kills this process (SIGKILL, no atexit).
        end = time.monotonic() + args.hold_s
        steps = 1
        while time.monotonic() < end:
            work.step()
            steps += 1
            time.sleep(0.05)
        print(f"error: --hold: not killed within {args.hold_s:.0f} s ({steps} steps)", flush=True)
        sys.exit(4)
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
    result["dirs"] = cache_dirs()
    if kiln_on:
        try:
            import kiln.torch

            result["kiln"] = kiln.torch.installed()
        except Exception as e:  # noqa: BLE001
            result["kiln_error"] = f"{type(e).__name__}: {e}"
        result["snapshot"] = snapshot_stats()
    result.update({"second_call_s": t2 - t1, "value2": value2, "end_wall": time.time()})
    write_whole(args.result, result)
    print(json.dumps(result), flush=True)
    if args.fast_exit:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
