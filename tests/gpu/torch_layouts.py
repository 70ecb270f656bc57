"""The training layouts on GPUs: plain torch.compile against kiln, side by side, per layout.

The job is ``client/python/tests/layout_job.py`` (``MODEL=llama``: RMSNorm, causal attention and a
SwiGLU MLP per block, AdamW, bf16 autocast), one process a rank, one GPU a rank:

| layout | what runs |
|---|---|
| single | one process, ``torch.compile(model)`` |
| ddp | ``DDP(torch.compile(model), bucket_cap_mb=1)`` over NCCL: Dynamo's DDP optimizer splits the graph |
| fsdp2 | ``fully_shard`` on each block and the whole, each block ``.compile()``d |
| herd | 4 single processes at once on GPU 0, each a fresh host of its own |

Per layout, in this order, every variant in fresh processes, each rank with its own cache paths
(``TORCHINDUCTOR_CACHE_DIR``, ``TRITON_HOME``), fixed per layout and rank and emptied before each
variant unless said:

| variant | what runs |
|---|---|
| eager | no torch.compile (the async target's baseline) |
| plain | plain torch.compile, cold |
| warm | plain torch.compile again on the caches ``plain`` left: the warm host |
| default | ``KILN_TORCH=1`` as a new user sets it (no other kiln variable), a new kilnd: what kiln costs by default |
| cold | ``KILN_TORCH=1 KILN_TORCH_GRAPHS=1``, a new kilnd (torch workers up, nothing stored): every graph through kilnd |
| twin | (single, 2 GPUs) ``cold``'s job on cuda:1, on the kilnd ``cold`` filled: the second device's compile |
| fresh | the same on a fresh host: caches emptied, on the kilnd ``cold`` filled (its graphs and the job's snapshot stored) |
| async | ``cold`` with ``KILN_TORCH_ASYNC=1`` on a new kilnd |

A run's first step is the slowest rank's (seconds from the job's start, after its imports, to the
end of its first step); the herd's is the slowest process's. ``compiles / distinct graphs``: the
kilnd's compiles during ``cold`` over the graphs one rank compiled. Losses: the first ``--steps``
of ``cold`` against ``plain``, rank 0.

Writes layouts.json and layouts.md to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import Kilnd, cold_graph_kilnd, metric_sum, own_kilnd_parser, write_json  # noqa: E402

JOB = HERE.parent.parent / "client" / "python" / "tests" / "layout_job.py"
VARIANTS = ("eager", "plain", "warm", "default", "cold", "twin", "fresh", "async")
HERD = 4


class Runner:
    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        self.work: Path = a.work
        self.deadline = time.monotonic() + a.deadline_s
        self.port = 29_400

    #: Which run of a repeated variant this is (0: the first).
    rep = 0

    def tag(self) -> str:
        return f"-rep{self.rep + 1}" if self.rep else ""

    def kilnd(self, tag: str) -> Kilnd:
        return cold_graph_kilnd(self.work, tag, self.a)

    def caches(self, layout: str, rank: int) -> Path:
        return self.work / "caches" / layout / f"rank{rank}"

    def env(self, layout: str, rank: int, variant: str, kilnd: Kilnd | None, empty: bool) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHINDUCTOR_", "TRITON_", "KILN_", "TORCH_"))}
        home = self.caches(layout, rank)
        if empty:
            shutil.rmtree(home, ignore_errors=True)
        home.mkdir(parents=True, exist_ok=True)
        world = 1 if layout in ("single", "herd") else self.a.gpus
        env.update(
            TORCHINDUCTOR_CACHE_DIR=str(home / "inductor"), TRITON_HOME=str(home / "triton-home"), PYTHONUNBUFFERED="1",
            LAYOUT="single" if layout == "herd" else layout, MODEL=self.a.model, STEPS=str(self.a.steps),
            WIDTH=str(self.a.width), BLOCKS=str(self.a.blocks), SEQ=str(self.a.seq), DEVICE=self.a.device,
            RANK=str(1 if variant == "twin" else 0 if layout == "herd" else rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(self.port),
        )
        # The kiln wheel installed with --target: its .pth hook runs through site/sitecustomize.py.
        env["PYTHONPATH"] = os.pathsep.join([str(HERE / "site")] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        env["KILN_GPU_SITEDIRS"] = os.pathsep.join(p for p in sys.path if p and os.path.isfile(os.path.join(p, "kiln-torch.pth")))
        counts = home / f"counts-{variant}"
        shutil.rmtree(counts, ignore_errors=True)
        counts.mkdir()
        env["KILN_GPU_COUNT_DIR"] = str(counts)
        if variant == "eager":
            env["COMPILE"] = "0"
        if kilnd is not None:
            # The twin's snapshot (its device's caches) must not replace the one "fresh" restores.
            job = f"layout-{layout}-twin" if variant == "twin" else f"layout-{layout}"
            env.update(KILN_TORCH="1", KILN_DAEMON=kilnd.uri, KILN_TORCH_JOB=job)
            if variant != "default":
                env["KILN_TORCH_GRAPHS"] = "1"
            if variant == "async":
                env["KILN_TORCH_ASYNC"] = "1"
        # A probe is kiln cold with a few variables changed (--probe), to measure one part's cost.
        env.update(self.a.probes.get(variant, {}))
        return env

    def run(self, layout: str, variant: str, kilnd: Kilnd | None) -> dict:
        if time.monotonic() > self.deadline:
            raise TimeoutError(f"{layout} {variant}: past the deadline")
        self.port += 1
        n = HERD if layout == "herd" else (1 if layout == "single" else self.a.gpus)
        procs = []
        started = time.monotonic()
        for rank in range(n):
            # A repeat's logs sit beside the first run's rather than replacing them.
            log = self.work / f"{layout}-{variant}{self.tag()}-{rank}.log"
            env = self.env(layout, rank, variant, kilnd, empty=variant != "warm")
            out = open(log, "wb")
            procs.append((subprocess.Popen([self.a.python, str(JOB)], env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT), log))
        ranks = []
        for p, log in procs:
            try:
                p.wait(timeout=max(30.0, self.deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                for q, _ in procs:
                    q.kill()
                raise
            text = log.read_text(errors="replace")
            lines = [ln for ln in text.splitlines() if ln.startswith("{")]
            if p.returncode != 0 or not lines:
                raise RuntimeError(f"{log.name}: exit {p.returncode}\n{text[-3000:]}")
            ranks.append(json.loads(lines[-1]))
        r = {
            "layout": layout, "variant": variant, "wall_s": time.monotonic() - started,
            "first_s": max(x["first"] for x in ranks), "steady_s": statistics.median(x["steady"] for x in ranks),
            "losses": ranks[0]["losses"], "fallbacks": {}, "graphs": len(ranks[0]["graphs"].get("graphs", [])),
            "how": {},
            # What each graph cost the first rank (kilnd's compile, or the wait, and the load).
            "compile_s": sum(g.get("compile_s", 0.0) for g in ranks[0]["graphs"].get("graphs", [])),
            # Each rank's own work on its claimed graphs, by step (compile, save, publish), summed
            # over its graphs: where a cold start through kilnd costs more than torch's own.
            "phases": [
                {k: round(sum(g.get("phases", {}).get(k, 0.0) for g in x["graphs"].get("graphs", [])), 3) for k in ("compile", "save", "publish")}
                for x in ranks
            ],
            # Seconds before the first step began, each rank: imports and set-up, not compile.
            "before_s": [round(x["first"] - x["times"][0], 3) for x in ranks if x.get("times")],
            # torch's own phase timers in the first rank, seconds by phase.
            "timed": ranks[0].get("timed", {}),
            # kiln's own set-up in the first rank, seconds by the import that ran it, and the
            # snapshot restore as the first compile saw it: where kiln's before_s goes.
            "setup_s": ranks[0]["graphs"].get("setup_s", {}),
            "restore": ranks[0]["graphs"].get("restore", {}),
        }
        for x in ranks:
            for reason, count in x["graphs"].get("fallbacks", {}).items():
                r["fallbacks"][reason] = r["fallbacks"].get(reason, 0) + count
            for g in x["graphs"].get("graphs", []):
                r["how"][g["how"]] = r["how"].get(g["how"], 0) + 1
        # Triton compiles in the job's processes (site/sitecustomize.py counts them): none where
        # kilnd's answer was all a process needed.
        r["triton_compiles"] = sum(
            line.startswith("compile ")
            for rank in range(n)
            for f in (self.caches(layout, rank) / f"counts-{variant}").glob("*.txt")
            for line in f.read_text().splitlines()
        )
        if kilnd is not None:
            r["kilnd_compiled"] = metric_sum(kilnd.metrics(), "kiln_torch_graphs_total", result="compiled")
        print(f"    {layout} {variant}: first step {r['first_s']:.2f} s, steady {r['steady_s'] * 1e3:.1f} ms, "
              f"fallbacks {r['fallbacks']}, how {r['how']}, Triton compiles {r['triton_compiles']}", flush=True)
        top = sorted(r["timed"].items(), key=lambda kv: -kv[1])[:10]
        print("      torch's timers: " + ", ".join(f"{k} {v:.2f}" for k, v in top) + f"; kiln phases {r['phases']}; before {r['before_s']}; kiln set-up {r['setup_s']}; restore {r['restore']}", flush=True)
        return r

    def layout(self, layout: str) -> dict[str, dict]:
        """Each variant's run, or with --repeat N the run with the median first step of N, the
        others' first steps beside it (``runs_first_s``)."""
        runs = []
        for rep in range(self.a.repeat):
            self.rep = rep
            runs.append(self.layout_once(layout, self.a.variants if rep == 0 else self.a.variants & self.a.repeat_variants))
        self.rep = 0
        out: dict[str, dict] = {}
        for variant in runs[0]:
            done = [r[variant] for r in runs if "first_s" in r.get(variant, {})]
            if not done:
                out[variant] = runs[0][variant]
                continue
            done.sort(key=lambda r: r["first_s"])
            out[variant] = dict(done[len(done) // 2], runs_first_s=[r["first_s"] for r in done])
        # Each repeat's kiln cold against the plain cold it ran beside: the targets' ratio is
        # taken within one run, never across them.
        pairs = [r["cold"]["first_s"] / r["plain"]["first_s"] for r in runs if "first_s" in r.get("cold", {}) and "first_s" in r.get("plain", {})]
        if len(pairs) > 1:
            out["cold"]["paired_ratios"] = pairs
        return out

    def layout_once(self, layout: str, chosen: set[str]) -> dict[str, dict]:
        out: dict[str, dict] = {}
        variants = [v for v in VARIANTS if v in chosen] + [v for v in self.a.probes if v in chosen]
        for variant in variants:
            if layout == "herd" and variant in ("eager", "warm", "fresh", "async"):
                continue
            if variant == "twin" and (layout != "single" or self.a.gpus < 2 or self.a.device != "cuda"):
                continue
            try:
                if variant in ("eager", "plain", "warm"):
                    out[variant] = self.run(layout, variant, None)
                elif variant in ("fresh", "twin"):
                    if "cold" in out and self.cold_kilnd is not None:
                        out[variant] = self.run(layout, variant, self.cold_kilnd)
                else:
                    k = self.kilnd(f"{layout}-{variant}{self.tag()}")
                    try:
                        out[variant] = self.run(layout, variant, k)
                    finally:
                        if variant == "cold":
                            self.cold_kilnd = k
                        else:
                            k.stop()
            except Exception as e:  # noqa: BLE001 - one variant's failure is recorded; the rest still run
                out[variant] = {"error": f"{type(e).__name__}: {e}"[:2000]}
                print(f"    {layout} {variant}: FAILED {out[variant]['error'][:500]}", flush=True)
            if variant == "fresh" and self.cold_kilnd is not None:
                self.cold_kilnd.stop()
                self.cold_kilnd = None
        if self.cold_kilnd is not None:
            self.cold_kilnd.stop()
            self.cold_kilnd = None
        return out

    cold_kilnd: Kilnd | None = None


def cell(r: dict | None, base: dict | None = None) -> str:
    if r is None:
        return "not run"
    if "error" in r:
        return "failed"
    notes = []
    if base is not None and "first_s" in base and base["first_s"] > 0:
        notes.append(f"{r['first_s'] / base['first_s']:.2f}×")
    if len(r.get("runs_first_s", [])) > 1:
        notes.append("median of " + ", ".join(f"{x:.2f}" for x in r["runs_first_s"]))
    text = f"{r['first_s']:.2f} s" + (f" ({'; '.join(notes)})" if notes else "")
    return text


def cold_cell(cold: dict | None, plain: dict | None) -> str:
    """Kiln cold, with the median of its ratios to plain taken within each repeat when there are
    several (the medians of the two columns need not come from one run)."""
    if cold is None or "paired_ratios" not in cold:
        return cell(cold, plain)
    ratios = cold["paired_ratios"]
    listed = ", ".join(f"{x:.2f}" for x in ratios)
    return f"{cold['first_s']:.2f} s ({statistics.median(ratios):.2f}× plain, the median of each run's {listed})"


def loss_gap(a: dict | None, b: dict | None) -> str:
    if not a or not b or "losses" not in a or "losses" not in b:
        return "n/a"
    gap = max(abs(x - y) / max(abs(y), 1e-6) for x, y in zip(a["losses"], b["losses"], strict=False))
    return f"{gap:.1e}"


def table(results: dict[str, dict[str, dict]]) -> str:
    rows = [
        "| layout | plain cold | kiln default (`KILN_TORCH=1`) | kiln cold (graphs through kilnd) | kiln fresh host | warm host "
        "| eager first step | async first step | compiles / distinct graphs | fallbacks | losses, max relative gap |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for layout, v in results.items():
        plain, cold = v.get("plain"), v.get("cold")
        ratio = "n/a"
        if cold and "kilnd_compiled" in cold and cold.get("graphs"):
            ratio = f"{cold['kilnd_compiled']:.0f} / {cold['graphs']} = {cold['kilnd_compiled'] / cold['graphs']:.2f}"
        fallbacks = {k: n for r in v.values() for k, n in r.get("fallbacks", {}).items() if k != "layout_off"}
        rows.append(
            f"| {layout} | {cell(plain)} | {cell(v.get('default'), plain)} | {cold_cell(cold, plain)} "
            f"| {cell(v.get('fresh'), v.get('warm'))} | {cell(v.get('warm'))} | {cell(v.get('eager'))} "
            f"| {cell(v.get('async'), v.get('eager'))} | {ratio} | {sum(fallbacks.values())} {fallbacks or ''} "
            f"| {loss_gap(cold, plain)} |"
        )
    return "\n".join(rows)


def twins(results: dict[str, dict[str, dict]]) -> str:
    """The second device's compile of one process's graph (cuda:1 after cuda:0 on one kilnd): a
    graph bakes in its device index, so it is compiled again, with the first's Triton kernels."""
    v = results.get("single", {})
    cold, twin = v.get("cold"), v.get("twin")
    if not cold or not twin or "first_s" not in cold or "first_s" not in twin:
        return ""
    return (
        f"\n\nSecond device: one process on cuda:1 after one on cuda:0, on the same kilnd: first step "
        f"{twin['first_s']:.2f} s against {cold['first_s']:.2f} s; the graph cost it {twin['compile_s']:.2f} s "
        f"(kilnd's compile and the load) against {cold['compile_s']:.2f} s.\n"
    )


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """The layout job's model and its size: what :class:`Runner` passes it as MODEL, WIDTH, BLOCKS
    and SEQ, for every harness that runs the job through a Runner."""
    p.add_argument("--model", default="llama")
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--blocks", type=int, default=4)
    p.add_argument("--seq", type=int, default=256)


def main() -> int:
    p = own_kilnd_parser(__doc__)
    p.add_argument("--gpus", type=int, default=2)
    p.add_argument("--layouts", default="single,ddp,fsdp2,herd")
    p.add_argument("--variants", default=",".join(VARIANTS))
    add_model_arguments(p)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--deadline-s", type=float, default=540)
    p.add_argument("--repeat", type=int, default=1, help="runs of each variant; the table shows each one's median")
    p.add_argument(
        "--repeat-variants",
        default="",
        help="with --repeat N: only these variants run N times (e.g. plain,cold, the ratio the targets need three of); "
        "the others run once. Default: every variant",
    )
    p.add_argument(
        "--probe",
        action="append",
        default=[],
        metavar="NAME:KEY=VALUE,...",
        help="one more variant: kiln cold with these variables set, run after the others (to measure what one part costs)",
    )
    a = p.parse_args()
    a.probes = {}
    for spec in a.probe:
        name, _, assignments = spec.partition(":")
        a.probes[name] = dict(kv.split("=", 1) for kv in assignments.split(",") if kv)
    a.variants = set(a.variants.split(",")) | set(a.probes)
    a.repeat_variants = set(filter(None, a.repeat_variants.split(","))) or a.variants
    a.work.mkdir(parents=True, exist_ok=True)
    a.out.mkdir(parents=True, exist_ok=True)
    runner = Runner(a)
    results: dict[str, dict[str, dict]] = {}
    for layout in a.layouts.split(","):
        print(f"==> layout {layout}", flush=True)
        results[layout] = runner.layout(layout)
        write_json(a.out / "layouts.json", results)
    md = table(results) + twins(results)
    (a.out / "layouts.md").write_text(md + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
