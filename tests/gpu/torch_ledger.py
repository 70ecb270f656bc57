"""A torch.compile job's ledger on the GPU: three runs of one job give one fleet row.

The job is ``client/python/tests/layout_job.py`` (``MODEL=llama``, one process on one GPU), every
run under one job name (``KILN_TORCH_JOB``), on two kilnds ("hosts" A and B, each started here with
its torch workers up and an empty cache) that share one kiln-cache (``--remote``, the run's):

| run | how |
|---|---|
| async cold | on A, ``KILN_TORCH_ASYNC=1``: eager until kilnd's compile arrives, then compiled |
| blocking warm | on A again, its stored graph, with ``KILN_TORCH_MEASURE=3`` (three eager steps, spread out) |
| 2 processes | on B at once (its own cache empty: the fleet's answer), both on GPU 0 |

Then the fleet's row for the job (``kiln.Client.torch_jobs``) against what was measured directly:
the eager step (the job with ``COMPILE=0``, no kiln) and the compiled step (the job compiled, warm),
medians of the steps after the first ten; the compile paid against the cold run's stored compile
seconds; the seconds saved against the warm runs' stored compile times.

The ledger's own cost: the steady step of the job compiled through kiln's graph path (which times
every call for the ledger) against the same job with ``KILN_TORCH_GRAPHS=0`` (torch's own compiled
graph, no ledger), alternating, ``--alternate`` runs each, on caches already warm.

Writes ledger.json and ledger.md to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import cold_graph_kilnd, own_kilnd_parser, write_json  # noqa: E402
from torch_layouts import Runner, add_model_arguments  # noqa: E402

#: Steps left out of each run's median: the first ten hold the warm-up.
WARMUP_STEPS = 10


def median_step(run: dict) -> float:
    return statistics.median(run["times"][WARMUP_STEPS:])


class Ledger:
    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        self.job = f"gpu-ledger-{int(time.time())}"
        self.runs: dict[str, dict] = {}

        # The layouts harness's environment for one process: its cache directories (fixed, as a
        # job's are on every host, and emptied before each run, so what a run finds warm is
        # kilnd's, the fleet's or the job's snapshot) and the kiln wheel's start-up hook.
        self.env = Runner(SimpleNamespace(**vars(a))).env

    def job_run(self, name: str, kilnd, steps: int, variant: str = "default", rank: int = 0, **extra: str) -> dict:
        env = self.env("single", rank, variant, kilnd, empty=True)
        env.update(STEPS=str(steps), KILN_TORCH_QUIET="0", **extra)
        if kilnd is not None and variant == "default" and self.a.graphs and "KILN_TORCH_GRAPHS" not in extra:
            env["KILN_TORCH_GRAPHS"] = self.a.graphs  # a CPU dry run: the default sends GPU graphs only
        if kilnd is not None:
            env["KILN_TORCH_JOB"] = extra.get("KILN_TORCH_JOB", self.job)
        log = self.a.work / f"{name}.log"
        with open(log, "wb") as out:
            p = subprocess.run([self.a.python, str(HERE.parent.parent / "client/python/tests/layout_job.py")], env=env,
                               stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, timeout=max(60.0, self.a.deadline - time.monotonic()))
        text = log.read_text(errors="replace")
        lines = [ln for ln in text.splitlines() if ln.startswith("{")]
        if p.returncode != 0 or not lines:
            raise RuntimeError(f"{name}: exit {p.returncode}\n{text[-3000:]}")
        run = json.loads(lines[-1])
        run["exit_line"] = next((ln for ln in text.splitlines() if ln.startswith("kiln: torch.compile")), "")
        print(f"    {name}: first step {run['first']:.2f} s, median step {median_step(run) * 1e3:.2f} ms; {run['exit_line']}", flush=True)
        return run


def graph(run: dict) -> dict:
    return (run.get("graphs") or {}).get("graphs", [{}])[0]


def fleet_row(uri: str, job: str, processes: int) -> object:
    import kiln

    deadline = time.monotonic() + 30
    with kiln.Client(uri) as c:
        while True:
            answer = c.torch_jobs(job)
            rows = [j for j in answer.jobs if j.job == job]
            if (rows and rows[0].processes >= processes) or time.monotonic() > deadline:
                return answer.source, (rows[0] if rows else None)
            time.sleep(0.5)


def within(value: float, target: float, rel: float) -> bool:
    return target > 0 and abs(value - target) <= rel * target


def main() -> int:
    p = own_kilnd_parser(__doc__)
    p.add_argument("--remote", required=True, help="the kiln-cache both kilnds share (the fleet)")
    add_model_arguments(p)
    p.add_argument("--async-steps", type=int, default=1500)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--alternate", type=int, default=3)
    p.add_argument("--graphs", default="", help="KILN_TORCH_GRAPHS for the blocking runs (a CPU dry run: single)")
    p.add_argument("--deadline-s", type=float, default=540)
    a = p.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    a.deadline = time.monotonic() + a.deadline_s
    a.gpus, a.probes = 1, {}
    led = Ledger(a)
    out: dict = {"job": led.job}
    host_a = cold_graph_kilnd(a.work, "ledger-a", a, remote=a.remote)
    host_b = cold_graph_kilnd(a.work, "ledger-b", a, remote=a.remote)
    try:
        runs = led.runs
        runs["async cold"] = led.job_run("async-cold", host_a, a.async_steps, variant="async")
        runs["blocking warm"] = led.job_run("blocking-warm", host_a, a.steps, KILN_TORCH_MEASURE="3")
        both: dict[str, dict] = {}
        errors: list[BaseException] = []

        def one(rank: int) -> None:
            try:
                both[f"process {rank}"] = led.job_run(f"pair-{rank}", host_b, a.steps, rank=rank)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        pair = [threading.Thread(target=one, args=(i,)) for i in (0, 1)]
        for t in pair:
            t.start()
        for t in pair:
            t.join()
        if errors:
            raise errors[0]
        runs.update({f"2 processes, {k}": v for k, v in sorted(both.items())})
        source, row = fleet_row(host_b.uri, led.job, len(runs))
        # Measured directly, without the ledger's figures: eager alone, and compiled.
        eager = led.job_run("direct-eager", None, a.steps, variant="eager")
        cost = {"with": [], "without": []}
        for i in range(a.alternate):
            cost["with"].append(median_step(led.job_run(f"with-ledger-{i}", host_a, a.steps, KILN_TORCH_JOB=f"{led.job}-cost")))
            cost["without"].append(median_step(led.job_run(f"without-ledger-{i}", host_a, a.steps, KILN_TORCH_GRAPHS="0", KILN_TORCH_JOB=f"{led.job}-cost")))
    finally:
        host_a.stop()
        host_b.stop()
    direct = {"eager_step_s": median_step(eager), "compiled_step_s": statistics.median(cost["without"])}
    stored = graph(runs["async cold"]).get("stored_compile_s", 0.0)
    warm_stored = sum(graph(r).get("stored_compile_s", 0.0) for k, r in runs.items() if k != "async cold" and graph(r).get("tier") in ("memory", "disk", "remote"))
    fields = ("eager_step_s", "compiled_step_s", "speedup", "compile_s", "cold_compile_s", "process_compile_s", "saved_s", "break_even_steps", "steps", "processes", "eager_basis", "verdict")
    out.update(
        source=source, row={f: getattr(row, f) for f in fields} if row else None, direct=direct, stored_cold_s=stored, warm_stored_s=warm_stored,
        runs={k: {"first": r["first"], "median_step_s": median_step(r), "steps": len(r["times"]), "graph": graph(r), "exit_line": r["exit_line"]} for k, r in runs.items()},
        ledger_cost=cost,
    )
    checks = []
    if row is not None:
        checks = [
            ("the fleet row holds every run's process", row.processes == len(runs), f"{row.processes} of {len(runs)}"),
            ("eager step within 10% of the direct median", within(row.eager_step_s, direct["eager_step_s"], 0.10),
             f"{row.eager_step_s * 1e3:.2f} ms against {direct['eager_step_s'] * 1e3:.2f} ms ({row.eager_basis})"),
            ("compiled step within 10% of the direct median", within(row.compiled_step_s, direct["compiled_step_s"], 0.10),
             f"{row.compiled_step_s * 1e3:.2f} ms against {direct['compiled_step_s'] * 1e3:.2f} ms"),
            ("compile paid is the cold compile's", abs(row.cold_compile_s - stored) < 1e-3, f"{row.cold_compile_s:.2f} s against {stored:.2f} s"),
            ("saved is the warm runs' stored compile", abs(row.saved_s - warm_stored) < 1e-3, f"{row.saved_s:.2f} s against {warm_stored:.2f} s"),
        ]
    spread = max(max(cost["without"]) - min(cost["without"]), max(cost["with"]) - min(cost["with"]))
    gap = statistics.median(cost["with"]) - statistics.median(cost["without"])
    checks.append(("the ledger costs a step nothing measurable", abs(gap) <= spread,
                   f"{statistics.median(cost['with']) * 1e3:.2f} ms with, {statistics.median(cost['without']) * 1e3:.2f} ms without (run-to-run spread {spread * 1e3:.2f} ms)"))
    out["checks"] = [{"check": c, "met": m, "detail": d} for c, m, d in checks]
    write_json(a.out / "ledger.json", out)
    md = ["| run | how | host | steps | tier | first step | median step | compile paid by the process | stored compile |", "|---|---|---|---|---|---|---|---|---|"]
    hows = {"async cold": ("`KILN_TORCH_ASYNC=1`, cold", "A"), "blocking warm": ("blocking, `KILN_TORCH_MEASURE=3`", "A")}
    for k, r in out["runs"].items():
        how, host = hows.get(k, ("blocking, two at once", "B"))
        g = r["graph"]
        md.append(f"| {k} | {how} | {host} | {r['steps']} | {g.get('tier', '')} | {r['first']:.2f} s | {r['median_step_s'] * 1e3:.2f} ms | {g.get('compile_s', 0):.2f} s | {g.get('stored_compile_s', 0):.2f} s |")
    if row is not None:
        md.append(f"| **the fleet's row** ({source}) | {row.processes} processes | A and B | {row.steps} | | | eager {row.eager_step_s * 1e3:.2f} ms, compiled {row.compiled_step_s * 1e3:.2f} ms ({row.speedup:.2f}×) | {row.process_compile_s:.2f} s (cold {row.cold_compile_s:.2f} s) | saved {row.saved_s:.2f} s |")
        md.append(f"\nVerdict: {row.verdict}")
    md.append("\n| check | met | detail |\n|---|---|---|")
    md += [f"| {c} | {'yes' if m else '**no**'} | {d} |" for c, m, d in checks]
    (a.out / "ledger.md").write_text("\n".join(md) + "\n")
    print("\n".join(md), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
