"""The training layouts on GPUs: plain torch.compile against kiln, side by side, per layout and
per job shape.

``--shapes`` picks the jobs (default ``layout_job``). ``layout_job`` is
``client/python/tests/layout_job.py`` (``MODEL=llama``: RMSNorm, causal attention and a SwiGLU MLP
per block, AdamW, bf16 autocast); any other name is a job of the corpus,
``client/python/tests/corpus/<shape>.py`` (the ways users call torch.compile: the loss, the model,
each block, the train step, the optimizer, dynamic shapes, accumulation, checkpointing, a decode
loop), sized by the ``--corpus-*`` flags. One process a rank, one GPU a rank:

| layout | what runs |
|---|---|
| single | one process |
| ddp | ``DDP(...)`` over NCCL with small buckets: Dynamo's DDP optimizer splits the graph |
| fsdp2 | ``fully_shard`` on each block and the whole |
| herd | (``layout_job`` only) 4 single processes at once on GPU 0, each a fresh host of its own |

A corpus shape that serves (``decode``) runs in ``single`` only.

Per shape and layout, in this order, every variant in fresh processes, each rank with its own
cache paths (``TORCHINDUCTOR_CACHE_DIR``, ``TRITON_HOME``), fixed per shape, layout and rank and
emptied before each variant unless said:

| variant | what runs |
|---|---|
| eager | no torch.compile (the async targets' baseline) |
| plain | plain torch.compile, cold |
| warm | plain torch.compile again on the caches ``plain`` left: the warm host |
| default | ``KILN_TORCH=1`` as a new user sets it, a new kilnd (torch workers up, nothing stored): kiln's cold start, the graphs of the layouts the default sends (DDP's pieces compile in the process) |
| cold | ``KILN_TORCH=1 KILN_TORCH_GRAPHS=1``, a new kilnd: every graph through kilnd |
| twin | (``layout_job``, single, 2 GPUs) ``cold``'s job on cuda:1, on the kilnd ``cold`` filled: the second device's compile |
| fresh | the same on a fresh host: caches emptied, on the kilnd ``cold`` filled (``default`` where ``cold`` does not run: its graphs and the job's snapshot stored) |
| async | ``KILN_TORCH_ASYNC=1`` on a new kilnd: eager until kilnd's compile is ready |

A run's first step is the slowest rank's (seconds from the job's start, after its imports, to the
end of its first step); the herd's is the slowest process's. ``compiles / distinct graphs``: the
kilnd's compiles during ``cold`` over the graphs one rank compiled. Losses: the first ``--steps``
of ``cold`` against ``plain``, rank 0. ``--repeats N`` runs every variant (or ``--repeat-variants``)
N times; a variant's figures are those of its run with the median first step, and kiln's cold
ratio the median of the ratios taken within each repeat.

``layouts.md`` has one table for every shape (header ``| shape | layout |``, see
:func:`layouts_tables.shape_table`) and, where ``layout_job`` ran, its table of every variant. Writes
layouts.json and layouts.md to ``--out``; exit status 3 when a variant was skipped for time.
``--merge OUT.md A.json B.json ...`` joins several runs' layouts.json into one layouts.md.
"""

from __future__ import annotations

import argparse
import importlib.util
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
from layouts_tables import LAYOUT_JOB, report  # noqa: E402

TESTS = HERE.parent.parent / "client" / "python" / "tests"
JOB = TESTS / "layout_job.py"
#: A probe's setting for its kilnd rather than its job: whether the torch workers start with it.
KILND_PRESTART = "kilnd.torch_prestart"
VARIANTS = ("eager", "plain", "warm", "default", "cold", "twin", "fresh", "async")
#: What a corpus shape runs: kiln's default, and ``cold`` (every graph through kilnd); no ``twin``.
CORPUS_VARIANTS = ("eager", "plain", "warm", "default", "cold", "fresh", "async")
HERD = 4


def _corpus_runner():
    """The corpus's runner module, by its path: its directory also holds a ``common.py`` (the jobs'),
    which must not shadow this directory's on ``sys.path``."""
    spec = importlib.util.spec_from_file_location("corpus_runner", TESTS / "corpus" / "runner.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


corpus = _corpus_runner()


class OutOfTime(Exception):
    """A variant that did not fit the run's deadline: skipped (or cut) loudly, never a failure."""


def script(shape: str) -> Path:
    return JOB if shape == LAYOUT_JOB else corpus.HERE / f"{shape}.py"


def runs_in(shape: str, layout: str) -> bool:
    """The herd is ``layout_job``'s (four processes of one job on one GPU); a corpus shape that serves
    rather than trains (``decode``) runs in one process."""
    if shape == LAYOUT_JOB:
        return True
    return layout != "herd" and (layout == "single" or shape in corpus.TRAINING)


def stem(shape: str, layout: str) -> str:
    """What names a shape's layout on disk (logs, caches, kilnds): the layout alone for
    ``layout_job``, as before the corpus, so its logs keep their names."""
    return layout if shape == LAYOUT_JOB else f"{shape}-{layout}"


class Runner:
    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        self.work: Path = a.work
        self.deadline = time.monotonic() + a.deadline_s
        self.port = 29_400
        #: "shape layout variant" of each variant skipped or cut for time.
        self.skipped: list[str] = []
        #: The host whose ranks :meth:`launch` starts, where several start at once (their caches
        #: and logs apart); empty for one host. ``host_env``: what its ranks' environment adds
        #: (its node's torchrun variables, the GPUs it sees).
        self.host = ""
        self.host_env: dict[str, str] = {}

    #: Which run of a repeated variant this is (0: the first).
    rep = 0

    def tag(self) -> str:
        return f"-rep{self.rep + 1}" if self.rep else ""

    def kilnd(self, tag: str, variant: str = "") -> Kilnd:
        """A new kilnd for ``variant``: with its torch workers up, unless the variant is a probe
        that sets ``kilnd.torch_prestart=false`` (kilnd as deployed by default)."""
        prestart = self.a.probes.get(variant, {}).get(KILND_PRESTART, "true") != "false"
        return cold_graph_kilnd(self.work, tag, self.a, prestart=prestart)


    def caches(self, layout: str, rank: int, shape: str = LAYOUT_JOB) -> Path:
        return self.work / "caches" / stem(shape, layout) / (f"{self.host}-rank{rank}" if self.host else f"rank{rank}")

    def sizes(self, shape: str) -> dict[str, str]:
        """The job's model and sizes: ``layout_job``'s flags, or the corpus's (``corpus/common.py``
        reads these variables)."""
        a = self.a
        if shape == LAYOUT_JOB:
            return {"MODEL": a.model, "STEPS": str(a.steps), "WIDTH": str(a.width), "BLOCKS": str(a.blocks), "SEQ": str(a.seq)}
        sizes = {
            "STEPS": str(a.corpus_steps), "WIDTH": str(a.corpus_width), "BLOCKS": str(a.corpus_blocks), "SEQ": str(a.corpus_seq),
            "BATCH": str(a.corpus_batch), "VOCAB": str(a.corpus_vocab), "BUCKET_MB": str(a.corpus_bucket_mb),
        }
        if a.corpus_mode:
            sizes["MODE"] = a.corpus_mode
        return sizes

    def env(self, layout: str, rank: int, variant: str, kilnd: Kilnd | None, empty: bool, shape: str = LAYOUT_JOB) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHINDUCTOR_", "TRITON_", "KILN_", "TORCH_"))}
        home = self.caches(layout, rank, shape)
        if empty:
            shutil.rmtree(home, ignore_errors=True)
        home.mkdir(parents=True, exist_ok=True)
        world = 1 if layout in ("single", "herd") else self.a.gpus
        env.update(
            TORCHINDUCTOR_CACHE_DIR=str(home / "inductor"), TRITON_HOME=str(home / "triton-home"), PYTHONUNBUFFERED="1",
            LAYOUT="single" if layout == "herd" else layout, DEVICE=self.a.device, **self.sizes(shape),
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
        if kilnd is not None and shape != LAYOUT_JOB:
            # kiln as a user turns it on: the flag and the daemon's address, nothing else; "cold"
            # sends every graph through kilnd (KILN_TORCH_GRAPHS=1).
            env.update(corpus.kiln_env(kilnd.uri))
            if variant == "cold":
                env["KILN_TORCH_GRAPHS"] = "1"
        elif kilnd is not None:
            # The twin's snapshot (its device's caches) must not replace the one "fresh" restores.
            job = f"layout-{layout}-twin" if variant == "twin" else f"layout-{layout}"
            env.update(KILN_TORCH="1", KILN_DAEMON=kilnd.uri, KILN_TORCH_JOB=job)
            if variant != "default":
                env["KILN_TORCH_GRAPHS"] = "1"
        if kilnd is not None and variant == "async":
            env["KILN_TORCH_ASYNC"] = "1"
        # A probe is a kiln variant with a few variables changed (--probe), to measure one part's cost.
        env.update({k: v for k, v in self.a.probes.get(variant, {}).items() if not k.startswith("kilnd.")})
        env.update(self.host_env)
        return env

    def launch(self, layout: str, variant: str, kilnd: Kilnd | None, shape: str = LAYOUT_JOB) -> list[tuple[subprocess.Popen, Path]]:
        """Starts the layout's ranks (on this runner's ``host``) and returns them with their logs."""
        if time.monotonic() > self.deadline:
            raise OutOfTime("past the deadline")
        self.port += 1
        n = HERD if layout == "herd" else (1 if layout == "single" else self.a.gpus)
        procs = []
        for rank in range(n):
            # A repeat's logs sit beside the first run's rather than replacing them.
            host = f"-{self.host}" if self.host else ""
            log = self.work / f"{stem(shape, layout)}-{variant}{self.tag()}{host}-{rank}.log"
            env = self.env(layout, rank, variant, kilnd, empty=variant != "warm", shape=shape)
            out = open(log, "wb")
            procs.append((subprocess.Popen([self.a.python, str(script(shape))], env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT), log))
        return procs

    def collect(self, procs: list[tuple[subprocess.Popen, Path]], started: float) -> list[dict]:
        """Each rank's result line once it exits; a rank past the deadline stops them all."""
        ranks = []
        for p, log in procs:
            try:
                p.wait(timeout=max(30.0, self.deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                for q, _ in procs:
                    q.kill()
                raise OutOfTime(f"cut at the deadline after {time.monotonic() - started:.0f} s") from None
            text = log.read_text(errors="replace")
            lines = [ln for ln in text.splitlines() if ln.startswith("{")]
            if p.returncode != 0 or not lines:
                raise RuntimeError(f"{log.name}: exit {p.returncode}\n{text[-3000:]}")
            ranks.append(json.loads(lines[-1]))
        return ranks

    def missed(self, shape: str, layout: str, variant: str, e: Exception) -> dict:
        """A variant that did not run, said loudly: skipped for time (the run is then incomplete)
        or failed, with why."""
        if isinstance(e, OutOfTime):
            self.skipped.append(f"{shape} {layout} {variant}")
            print(f"    {stem(shape, layout)} {variant}: SKIPPED for time ({e})", flush=True)
            return {"skipped": f"for time: {e}"}
        error = f"{type(e).__name__}: {e}"[:2000]
        print(f"    {stem(shape, layout)} {variant}: FAILED {error[:500]}", flush=True)
        return {"error": error}

    def run(self, layout: str, variant: str, kilnd: Kilnd | None, shape: str = LAYOUT_JOB) -> dict:
        started = time.monotonic()
        procs = self.launch(layout, variant, kilnd, shape)
        ranks = self.collect(procs, started)
        n = len(procs)
        r = summary(ranks, n_graphs=len(ranks[0]["graphs"].get("graphs", [])))
        r.update(shape=shape, layout=layout, variant=variant, wall_s=time.monotonic() - started)
        # Triton compiles in the job's processes (site/sitecustomize.py counts them): none where
        # kilnd's answer was all a process needed.
        r["triton_compiles"] = sum(
            line.startswith("compile ")
            for rank in range(n)
            for f in (self.caches(layout, rank, shape) / f"counts-{variant}").glob("*.txt")
            for line in f.read_text().splitlines()
        )
        if kilnd is not None:
            r["kilnd_compiled"] = metric_sum(kilnd.metrics(), "kiln_torch_graphs_total", result="compiled")
        print(f"    {stem(shape, layout)} {variant}: first step {r['first_s']:.2f} s, steady {r['steady_s'] * 1e3:.1f} ms, "
              f"rank skew {r['skew_s']:.2f} s, fallbacks {r['fallbacks']}, how {r['how']}, Triton compiles {r['triton_compiles']}", flush=True)
        top = sorted(r["timed"].items(), key=lambda kv: -kv[1])[:10]
        print("      torch's timers: " + ", ".join(f"{k} {v:.2f}" for k, v in top) + f"; kiln phases {r['phases']}; before {r['before_s']} ({r.get('marks', {})}); kiln set-up {r['setup_s']}; restore {r['restore']}", flush=True)
        return r

    def layout(self, layout: str, shape: str = LAYOUT_JOB) -> dict[str, dict]:
        """Each variant's run, or with --repeats N the run with the median first step of N, the
        others' first steps beside it (``runs_first_s``)."""
        runs = []
        for rep in range(self.a.repeat):
            self.rep = rep
            runs.append(self.layout_once(layout, self.a.variants if rep == 0 else self.a.variants & self.a.repeat_variants, shape))
        self.rep = 0
        out: dict[str, dict] = {}
        for variant in runs[0]:
            done = [r[variant] for r in runs if "first_s" in r.get(variant, {})]
            if not done:
                out[variant] = runs[0][variant]
                continue
            done.sort(key=lambda r: r["first_s"])
            out[variant] = dict(done[len(done) // 2], runs_first_s=[r["first_s"] for r in done])
        # Each repeat's kiln cold start against the plain cold it ran beside: the targets' ratio
        # is taken within one run, never across them.
        for kiln in ("cold", "default", *self.a.probes):
            pairs = [r[kiln]["first_s"] / r["plain"]["first_s"] for r in runs if "first_s" in r.get(kiln, {}) and "first_s" in r.get("plain", {})]
            if len(pairs) > 1:
                out[kiln]["paired_ratios"] = pairs
        return out

    def layout_once(self, layout: str, chosen: set[str], shape: str = LAYOUT_JOB) -> dict[str, dict]:
        out: dict[str, dict] = {}
        order = VARIANTS if shape == LAYOUT_JOB else CORPUS_VARIANTS
        variants = [v for v in order if v in chosen] + [v for v in self.a.probes if v in chosen]
        # The kilnd that "fresh" (and "twin") run on: the one "cold" filled, or "default" where
        # "cold" does not run.
        filler = "cold" if "cold" in variants else "default"
        kept: Kilnd | None = None
        for variant in variants:
            if layout == "herd" and variant in ("eager", "warm", "fresh", "async"):
                continue
            if variant == "twin" and (layout != "single" or self.a.gpus < 2 or self.a.device != "cuda"):
                continue
            try:
                if variant in ("eager", "plain", "warm"):
                    out[variant] = self.run(layout, variant, None, shape)
                elif variant in ("fresh", "twin"):
                    if filler in out and kept is not None:
                        out[variant] = self.run(layout, variant, kept, shape)
                else:
                    if time.monotonic() > self.deadline:
                        raise OutOfTime("past the deadline")  # before a kilnd starts for nothing
                    k = self.kilnd(f"{stem(shape, layout)}-{variant}{self.tag()}", variant)
                    try:
                        out[variant] = self.run(layout, variant, k, shape)
                    finally:
                        if variant == filler:
                            kept = k
                        else:
                            k.stop()
            except Exception as e:  # noqa: BLE001 - one variant's failure is recorded; the rest still run
                out[variant] = self.missed(shape, layout, variant, e)
            if variant == "fresh" and kept is not None:
                kept.stop()
                kept = None
        if kept is not None:
            kept.stop()
        return out


def trace_s(timed: dict[str, float]) -> float:
    """Dynamo's own time in a process, by torch's timers: every frame's compile
    (``_compile.compile_inner``) less the backend's share of it (``OutputGraph.call_user_compiler``:
    AOTAutograd and Inductor). What an async process still pays before its first eager step."""
    return max(0.0, timed.get("_compile.compile_inner", 0.0) - timed.get("OutputGraph.call_user_compiler", 0.0))


def summary(ranks: list[dict], n_graphs: int) -> dict:
    """One run from its ranks' lines: a run's time is its slowest rank's."""
    later = [sorted(x["times"][1:]) or [0.0] for x in ranks]
    r = {
        "first_s": max(x["first"] for x in ranks),
        "steady_s": statistics.median(x.get("steady", x.get("median", 0.0)) for x in ranks),
        # The slowest rank's median and longest step after the first: the async targets' figures.
        "median_s": max(t[len(t) // 2] for t in later),
        "longest_later_s": max(t[-1] for t in later),
        "times": [x["times"] for x in ranks],
        # Seconds between the first and the last rank's end of the first step (wall clock): how
        # far one rank's compile held the others up.
        "skew_s": max(x["first_wall"] for x in ranks) - min(x["first_wall"] for x in ranks) if all(x.get("first_wall") for x in ranks) else 0.0,
        "trace_s": max(trace_s(x.get("timed", {})) for x in ranks),
        "losses": ranks[0]["losses"], "rank_losses": [x["losses"] for x in ranks], "fallbacks": {}, "graphs": n_graphs,
        "how": {},
        # What each graph cost the first rank (kilnd's compile, or the wait, and the load).
        "compile_s": sum(g.get("compile_s", 0.0) for g in ranks[0]["graphs"].get("graphs", [])),
        # Each rank's own work on its claimed graphs, by step (compile, save, publish), summed
        # over its graphs: where a cold start through kilnd costs more than torch's own.
        "phases": [
            {k: round(sum(g.get("phases", {}).get(k, 0.0) for g in x["graphs"].get("graphs", [])), 3) for k in ("prepare", "ask", "compile", "save", "publish")}
            for x in ranks
        ],
        # Seconds before the first step began, each rank: imports and set-up, not compile.
        "before_s": [round(x["first"] - x["times"][0], 3) for x in ranks if x.get("times")],
        # torch's own phase timers in the first rank, seconds by phase.
        "timed": ranks[0].get("timed", {}),
        # kiln's own set-up in the first rank, seconds by the import that ran it, and the
        # snapshot restore as the first compile saw it: where kiln's before_s goes.
        "setup_s": ranks[0]["graphs"].get("setup_s", {}),
        # The first rank's set-up by point (seconds from its start): where before_s goes.
        "marks": ranks[0].get("marks", {}),
        "restore": ranks[0].get("restore", {}),
    }
    for x in ranks:
        for reason, count in x["graphs"].get("fallbacks", {}).items():
            r["fallbacks"][reason] = r["fallbacks"].get(reason, 0) + count
        for g in x["graphs"].get("graphs", []):
            r["how"][g["how"]] = r["how"].get(g["how"], 0) + 1
    return r


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """The layout job's model and its size: what :class:`Runner` passes it as MODEL, WIDTH, BLOCKS
    and SEQ, for every harness that runs the job through a Runner."""
    p.add_argument("--model", default="llama")
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--blocks", type=int, default=4)
    p.add_argument("--seq", type=int, default=256)


def add_corpus_arguments(p: argparse.ArgumentParser) -> None:
    """The corpus shapes' sizes (``corpus/common.py``'s variables). The defaults give a cold first
    step of about 10-30 s on an H100 (twice ``layout_job``'s blocks and sequence, a 32k vocabulary),
    and DDP buckets of torch's default size, so the DDP optimizer splits the model as it splits a
    real one's."""
    g = p.add_argument_group("corpus shapes")
    g.add_argument("--corpus-width", type=int, default=1024)
    g.add_argument("--corpus-blocks", type=int, default=8)
    g.add_argument("--corpus-seq", type=int, default=512)
    g.add_argument("--corpus-batch", type=int, default=8)
    g.add_argument("--corpus-vocab", type=int, default=32768)
    g.add_argument("--corpus-bucket-mb", type=float, default=25)
    g.add_argument("--corpus-steps", type=int, default=100, help="steps of every run (async's N steps are these)")
    g.add_argument("--corpus-mode", default="", help="torch.compile's mode (MODE; default: torch's)")


def merge(out: Path, inputs: list[Path]) -> int:
    """``--merge OUT.md A.json B.json ...``: one layouts.md from several runs' layouts.json (one
    command's budget holds about two shapes' layouts; a later run's layout replaces an earlier one's)."""
    results: dict[str, dict[str, dict[str, dict]]] = {}
    for f in inputs:
        for shape, layouts in json.loads(f.read_text()).items():
            results.setdefault(shape, {}).update(layouts)
    md = report(results)
    out.write_text(md + "\n")
    print(md)
    return 0


def main() -> int:
    if sys.argv[1:2] == ["--merge"]:
        return merge(Path(sys.argv[2]), [Path(x) for x in sys.argv[3:]])
    p = own_kilnd_parser(__doc__)
    p.add_argument("--gpus", type=int, default=2)
    p.add_argument(
        "--shapes",
        default=LAYOUT_JOB,
        help=f"jobs to run, comma-separated: {LAYOUT_JOB} or the corpus's ({', '.join(corpus.SHAPES)})",
    )
    p.add_argument("--layouts", default="single,ddp,fsdp2,herd")
    p.add_argument("--variants", default=",".join(VARIANTS), help="for a corpus shape, those of " + ",".join(CORPUS_VARIANTS))
    add_model_arguments(p)
    add_corpus_arguments(p)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--deadline-s", type=float, default=540)
    p.add_argument("--repeat", "--repeats", type=int, default=1, help="runs of each variant; the table shows each one's median")
    p.add_argument(
        "--repeat-variants",
        default="",
        help="with --repeats N: only these variants run N times (e.g. plain,default, the ratio the targets need three of); "
        "the others run once. Default: every variant",
    )
    p.add_argument(
        "--probe",
        action="append",
        default=[],
        metavar="NAME:KEY=VALUE,...",
        help="one more variant: kiln cold with these variables set, run after the others (to measure what one part costs); "
        f"{KILND_PRESTART}=false runs it on a kilnd whose torch workers are not started ahead (kilnd's default)",
    )
    a = p.parse_args()
    shapes = a.shapes.split(",")
    unknown = [s for s in shapes if s != LAYOUT_JOB and s not in corpus.SHAPES]
    if unknown:
        p.error(f"--shapes: not a job: {', '.join(unknown)} ({LAYOUT_JOB} or {', '.join(corpus.SHAPES)})")
    a.probes = {}
    for spec in a.probe:
        name, _, assignments = spec.partition(":")
        a.probes[name] = dict(kv.split("=", 1) for kv in assignments.split(",") if kv)
    a.variants = set(a.variants.split(",")) | set(a.probes)
    a.repeat_variants = set(filter(None, a.repeat_variants.split(","))) or a.variants
    a.work.mkdir(parents=True, exist_ok=True)
    a.out.mkdir(parents=True, exist_ok=True)
    runner = Runner(a)
    results: dict[str, dict[str, dict[str, dict]]] = {}
    for shape in shapes:
        for layout in a.layouts.split(","):
            if not runs_in(shape, layout):
                print(f"==> {shape} {layout}: not a layout of this shape (the herd is {LAYOUT_JOB}'s; decode serves in one process)", flush=True)
                continue
            print(f"==> {shape} {layout}", flush=True)
            # A run in another torch.compile mode is recorded as a shape of its own.
            key = f"{shape} ({a.corpus_mode})" if a.corpus_mode else shape
            results.setdefault(key, {})[layout] = runner.layout(layout, shape)
            write_json(a.out / "layouts.json", results)
            (a.out / "layouts.md").write_text(report(results) + "\n")
    md = report(results)
    if runner.skipped:
        md += "\n\nSkipped for time (not run, or cut at the deadline): " + "; ".join(runner.skipped) + "\n"
        print(f"!! SKIPPED for time: {'; '.join(runner.skipped)}", flush=True)
    (a.out / "layouts.md").write_text(md + "\n")
    print(md)
    return 3 if runner.skipped else 0


if __name__ == "__main__":
    sys.exit(main())
