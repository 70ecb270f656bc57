"""The graph path on a GPU: torch.compile graphs compiled by kilnd, blocking and async, cold.

For each model (models.py), each variant in a fresh process (graph_child.py), caches emptied:

| variant | what runs |
|---|---|
| eager | the same model with no torch.compile at all |
| blocking | ``KILN_TORCH=1``: each graph compiled by a fresh kilnd (cold: empty cache, no fleet), the process waits for it |
| async | ``KILN_TORCH=1 KILN_TORCH_ASYNC=1``: the graphs run eagerly until kilnd's compile is ready, then compiled |
| plain | plain torch.compile, cold (no kiln): the herd's CPU baseline and today's cold first call |
| herd | 4 processes of the job on one fresh kilnd, blocking, starting together at a barrier |

Every kilnd is new and cold, started with ``torch_prestart`` and waited for until its torch
workers are up: a long-running kilnd on a GPU host has them up (the figures are the compile's, not
torch's import). Each variant runs ``--runs`` times; the table gives medians.

Figures, per run: the first call (the first step, compile included), "compiled after" (seconds
from the first step's start to the start of the first step in which every graph ran compiled),
the wall of the first ``--steps`` steps, the steady step (median of the last 50), the first 50
losses. The herd: each process's first call, the wall from the barrier until every process ran
a compiled step, kilnd's compile count against the distinct graphs, and the CPU seconds of the
herd's processes and kilnd's tree (its torch workers' compiles) against one plain process's.

Writes graphs.json (every run) and graphs.md (tables, targets) to ``--out``; ``--merge OUT
A.json B.json ...`` writes graphs.md from several runs' graphs.json.
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

from common import Kilnd, cold_graph_kilnd, metric_sum, wait_for, write_json  # noqa: E402

#: Run 18's herd of 4 cold GPT-2 processes with kiln (blocking, before kilnd compiled graphs):
#: the wall until all four ran a step. The herd target is 0.7 of it.
RUN18_HERD_WALL_S = 26.6


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of a process and every descendant alive or reaped by it (utime, stime and the
    reaped children's cutime and cstime, from /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        stats[int(entry)] = fields
        children.setdefault(int(fields[1]), []).append(int(entry))
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        f = stats.get(p)
        if f is not None:
            total += sum(int(x) for x in f[11:15]) / tick
        todo.extend(children.get(p, []))
    return total


class Runner:
    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        self.work: Path = a.work
        self.runs: list[dict] = []
        self.n = 0

    def kilnd(self, name: str) -> Kilnd:
        return cold_graph_kilnd(self.work, name, self.a)

    def env(self, kilnd: Kilnd | None, asynchronous: bool, tag: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHINDUCTOR_", "TRITON_", "KILN_"))}
        home = self.work / "caches" / tag
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir(parents=True)
        env.update(TORCHINDUCTOR_CACHE_DIR=str(home / "inductor"), TRITON_HOME=str(home / "triton-home"),
                   PYTHONUNBUFFERED="1")
        # site/sitecustomize.py: counts the process's Triton compiles, and runs the .pth hooks of
        # a `pip install --target` directory on PYTHONPATH (kiln-torch.pth) as site-packages would.
        (home / "counts").mkdir()
        env["PYTHONPATH"] = os.pathsep.join([str(HERE / "site")] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        env["KILN_GPU_COUNT_DIR"] = str(home / "counts")
        env["KILN_GPU_SITEDIRS"] = os.pathsep.join(p for p in sys.path if p and os.path.isfile(os.path.join(p, "kiln-torch.pth")))
        if kilnd is not None:
            env.update(KILN_TORCH="1", KILN_TORCH_GRAPHS="1", KILN_TORCH_SNAPSHOT="0", KILN_DAEMON=kilnd.uri, KILN_TORCH_JOB=f"graphs-{tag}")
            if asynchronous:
                env["KILN_TORCH_ASYNC"] = "1"
        return env

    def child_args(self, model: str, result: Path, eager: bool, after_compiled: int, barrier: Path | None) -> list[str]:
        args = [self.a.python, str(HERE / "graph_child.py"), "--model", model, "--device", self.a.device,
                "--steps", str(self.a.steps), "--after-compiled", str(after_compiled), "--result", str(result),
                "--max-s", str(self.a.max_step_s)]
        if self.a.tiny:
            args.append("--tiny")
        if eager:
            args.append("--eager")
        if barrier is not None:
            args += ["--barrier", str(barrier)]
        return args

    def spawn(self, args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
        out = open(log, "wb")
        return subprocess.Popen(args, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)

    def finish(self, proc: subprocess.Popen, result: Path, log: Path, timeout: float) -> tuple[dict, float]:
        """(the child's result, its CPU seconds with its reaped descendants), from wait4."""
        deadline = time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.05)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0 or not result.exists():
            tail = log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{log.name}: exit {proc.returncode}\n{tail}")
        return json.loads(result.read_text()), usage.ru_utime + usage.ru_stime

    def one(self, model: str, variant: str, run: int) -> dict:
        self.n += 1
        tag = f"{model}-{variant}-{run}"
        result, log = self.work / f"{tag}.json", self.work / f"{tag}.log"
        result.unlink(missing_ok=True)
        kilnd = self.kilnd(tag) if variant in ("blocking", "async") else None
        try:
            env = self.env(kilnd, variant == "async", tag)
            after = 50 if variant == "async" else 0
            started = time.monotonic()
            proc = self.spawn(self.child_args(model, result, variant == "eager", after, None), env, log)
            r, cpu = self.finish(proc, result, log, self.a.max_step_s + 240)
            r["wall_s"] = time.monotonic() - started
            if kilnd is not None:
                text = kilnd.metrics()
                r["kilnd_compiled"] = metric_sum(text, "kiln_torch_graphs_total", result="compiled")
        finally:
            if kilnd is not None:
                r_stop = kilnd.stop()
                if r_stop != 0:
                    raise RuntimeError(f"kilnd {tag} exited {r_stop} on SIGTERM")
        r.update(variant=variant, run=run, cpu_s=cpu, triton_compiles=triton_compiles(self.work / "caches" / tag / "counts"))
        broken = {"worker_failed", "no_torch_worker", "torch_mismatch", "kilnd_unreachable"} & set(r["graphs"]["fallbacks"])
        if broken:
            # The rest would measure the same fallback: stop here, with the why, to spare the GPU's time.
            warnings = [line for line in log.read_text(errors="replace").splitlines() if line.startswith("kiln:")]
            raise RuntimeError(f"{tag}: the graph path fell back ({', '.join(sorted(broken))}): {warnings}")
        print(f"    {tag}: first call {r['steps'][0]['s']:.2f} s, {summary(r)}", flush=True)
        return r

    def herd(self, model: str, n: int) -> dict:
        tag = f"{model}-herd"
        kilnd = self.kilnd(tag)
        barrier = self.work / f"{tag}-barrier"
        shutil.rmtree(barrier, ignore_errors=True)
        barrier.mkdir()
        assert kilnd.proc is not None
        cpu_before = tree_cpu_s(kilnd.proc.pid)
        procs = []
        for i in range(n):
            result, log = self.work / f"{tag}-{i}.json", self.work / f"{tag}-{i}.log"
            result.unlink(missing_ok=True)
            env = self.env(kilnd, False, f"{tag}-{i}")
            procs.append((self.spawn(self.child_args(model, result, False, 0, barrier), env, log), result, log))
        wait_for("the herd at its barrier", lambda: len(list(barrier.glob("ready-*"))) == n, 300)
        go = time.time()
        (barrier / "go").touch()
        members = []
        cpu = 0.0
        for i, (proc, result, log) in enumerate(procs):
            r, c = self.finish(proc, result, log, self.a.max_step_s + 240)
            r["triton_compiles"] = triton_compiles(self.work / "caches" / f"{tag}-{i}" / "counts")
            cpu += c
            members.append(r)
        cpu_kilnd = tree_cpu_s(kilnd.proc.pid) - cpu_before
        text = kilnd.metrics()
        rc = kilnd.stop()
        if rc != 0:
            raise RuntimeError(f"kilnd {tag} exited {rc} on SIGTERM")
        compiled_at = []
        for r in members:
            i = first_compiled(r)
            compiled_at.append(r["first_step_unix"] + r["steps"][i]["start"] + r["steps"][i]["s"] - go if i is not None else None)
        out = {
            "variant": "herd",
            "model": model,
            "processes": n,
            "first_calls": [r["steps"][0]["s"] for r in members],
            "all_compiled_wall_s": max(c for c in compiled_at if c is not None) if all(c is not None for c in compiled_at) else None,
            "kilnd_compiled": metric_sum(text, "kiln_torch_graphs_total", result="compiled"),
            "kilnd_hits": metric_sum(text, "kiln_torch_graphs_total", result="hit"),
            "distinct_graphs": max(len(r["graphs"]["graphs"]) for r in members),
            "fallbacks": [r["graphs"]["fallbacks"] for r in members],
            "triton_compiles": [r["triton_compiles"] for r in members],
            "cpu_processes_s": cpu,
            "cpu_kilnd_s": cpu_kilnd,
            "members": members,
        }
        print(f"    {tag}: first calls {', '.join(f'{x:.1f}' for x in out['first_calls'])} s; all compiled after "
              f"{out['all_compiled_wall_s']} s; kilnd compiled {out['kilnd_compiled']:.0f} of {out['distinct_graphs']} graphs", flush=True)
        return out


def triton_compiles(counts: Path) -> int:
    """Real Triton compiles in a process and its children (site/sitecustomize.py's lines)."""
    return sum(line.startswith("compile ") for f in counts.glob("*.txt") for line in f.read_text().splitlines())


def first_compiled(r: dict) -> int | None:
    """The index of the first step in which every graph ran compiled (the eager run: None)."""
    prev = 0
    for i, s in enumerate(r["steps"]):
        if s["compiled"] > prev and all(g["how"] in ("kilnd", "in-process") for g in r["graphs"]["graphs"]):
            return i
        prev = s["compiled"]
    return None


def summary(r: dict) -> str:
    steps = r["steps"]
    n = min(len(steps), 300)
    wall = steps[n - 1]["start"] + steps[n - 1]["s"]
    steady = statistics.median(s["s"] for s in steps[-50:])
    i = first_compiled(r)
    after = f", compiled after {steps[i]['start']:.2f} s" if i is not None else ""
    return (f"wall of {n} steps {wall:.2f} s, steady step {steady * 1e3:.2f} ms{after}, fallbacks {r['graphs']['fallbacks']}, "
            f"Triton compiles in the process {r.get('triton_compiles')}")


def figures(r: dict) -> dict:
    steps = r["steps"]
    n = min(len(steps), 300)
    i = first_compiled(r)
    return {
        "first": steps[0]["s"],
        "after": steps[i]["start"] if i is not None else None,
        "wall": steps[n - 1]["start"] + steps[n - 1]["s"],
        "steps": n,
        "steady": statistics.median(s["s"] for s in steps[-50:]),
        "losses": [s["loss"] for s in steps[:50]],
        "fallbacks": r["graphs"]["fallbacks"],
        "how": sorted({g["how"] for g in r["graphs"]["graphs"]}),
        "triton": r.get("triton_compiles"),
    }


def med(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x: float | None, unit: str = "s", scale: float = 1.0, digits: int = 2) -> str:
    return "—" if x is None else f"{x * scale:.{digits}f} {unit}"


def spread(xs: list[float], scale: float = 1.0, digits: int = 2) -> str:
    xs = [x for x in xs if x is not None]
    return "" if len(xs) < 2 else f" ({min(xs) * scale:.{digits}f}–{max(xs) * scale:.{digits}f})"


def markdown(runs: list[dict], device: str) -> tuple[str, list[str]]:
    lines = [f"### torch.compile graphs through kilnd, cold ({device}; medians, range in brackets)", ""]
    missed: list[str] = []
    lines.append("| model | eager first call | blocking cold first call | async cold first call | async compiled after "
                 "| plain torch.compile cold first call | steady step eager / blocking / async "
                 "| wall of the first steps: eager / blocking / async | Triton compiles in the process: blocking / async / plain | runs |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|")
    targets: list[str] = []
    for model in dict.fromkeys(r["model"] for r in runs if r["variant"] != "herd"):
        by = {v: [figures(r) for r in runs if r["model"] == model and r["variant"] == v] for v in ("eager", "blocking", "async", "plain")}

        def col(v: str, k: str, scale: float = 1.0, unit: str = "s", digits: int = 2) -> str:
            xs = [f[k] for f in by[v]]
            return fmt(med(xs), unit, scale, digits) + spread(xs, scale, digits)

        steady = " / ".join(fmt(med([f["steady"] for f in by[v]]), "ms", 1e3) for v in ("eager", "blocking", "async"))
        walls = " / ".join(fmt(med([f["wall"] for f in by[v]])) for v in ("eager", "blocking", "async"))
        nsteps = sorted({f["steps"] for v in by for f in by[v]})
        tritons = " / ".join(",".join(str(f["triton"]) for f in by[v]) or "—" for v in ("blocking", "async", "plain"))
        runs_n = ", ".join(f"{v} {len(by[v])}" for v in by if by[v])
        lines.append(f"| {model} | {col('eager', 'first')} | {col('blocking', 'first')} | {col('async', 'first')} "
                     f"| {col('async', 'after')} | {col('plain', 'first')} | {steady} | {walls} ({'/'.join(map(str, nsteps))} steps) | {tritons} | {runs_n} |")
        e, b, a = (med([f["first"] for f in by[v]]) for v in ("eager", "blocking", "async"))
        after = med([f["after"] for f in by["async"]])
        ew, bw, aw = (med([f["wall"] for f in by[v]]) for v in ("eager", "blocking", "async"))

        def target(name: str, value: float | None, bound: float, detail: str) -> None:
            if value is None:
                targets.append(f"| {model} | {name} | not measured | ≤ {bound} | {detail} |")
                return
            ok = value <= bound
            targets.append(f"| {model} | {name} | {value:.2f} | ≤ {bound} | {'met' if ok else 'MISSED'}: {detail} |")
            if not ok:
                missed.append(f"{model} {name} {value:.2f} > {bound}")

        if e and a:
            target("async cold first call / eager first call", a / e, 1.5, f"{a:.2f} s against {e:.2f} s")
        if b and after is not None:
            target("async compiled after / blocking cold first call", after / b, 1.15, f"{after:.2f} s against {b:.2f} s")
        if ew and bw and aw:
            target("wall of the first steps, async / the better of eager and blocking", aw / min(ew, bw), 1.05,
                   f"{aw:.2f} s against eager {ew:.2f} s and blocking {bw:.2f} s")
        bs, as_ = [f["steady"] for f in by["blocking"]], [f["steady"] for f in by["async"]]
        if bs and as_:
            ratio = med(as_) / med(bs)
            targets.append(f"| {model} | steady step after the swap, async / blocking | {ratio:.3f} | within spread | "
                           f"async {fmt(med(as_), 'ms', 1e3)}{spread(as_, 1e3)}, blocking {fmt(med(bs), 'ms', 1e3)}{spread(bs, 1e3)} |")
        if by["blocking"] and by["async"]:
            worst = 0.0
            for fa in by["async"]:
                for fb in by["blocking"]:
                    for x, y in zip(fa["losses"], fb["losses"]):
                        worst = max(worst, abs(x - y) / max(abs(y), 1e-6))
            targets.append(f"| {model} | first 50 losses, async against blocking | max relative difference {worst:.2e} | stated | "
                           "the async run's first steps ran eagerly |")
        fallbacks = {k: v for v in by for f in by[v] for k, v in f["fallbacks"].items()}
        if fallbacks:
            targets.append(f"| {model} | fallbacks | {fallbacks} | none | a graph was compiled in-process |")
            missed.append(f"{model} fallbacks {fallbacks}")
    lines += ["", "| model | target | value | bound | verdict |", "|---|---|---|---|---|", *targets]
    herds = [r for r in runs if r["variant"] == "herd"]
    if herds:
        lines += ["", "| herd | processes | first calls | wall until all ran compiled | kilnd compiles / distinct graphs "
                  "| compile CPU s: processes + kilnd's tree | one plain process's compile CPU s | Triton compiles in the processes | fallbacks |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for h in herds:
            # Compile CPU: a process's CPU seconds less an eager process's (same model and steps).
            eager = med([r["cpu_s"] for r in runs if r["model"] == h["model"] and r["variant"] == "eager"]) or 0.0
            plain = [r["cpu_s"] - eager for r in runs if r["model"] == h["model"] and r["variant"] == "plain"]
            processes = h["cpu_processes_s"] - h["processes"] * eager
            cpu = processes + h["cpu_kilnd_s"]
            lines.append(f"| {h['model']} | {h['processes']} | {', '.join(f'{x:.1f}' for x in h['first_calls'])} s "
                         f"| {fmt(h['all_compiled_wall_s'])} | {h['kilnd_compiled']:.0f} / {h['distinct_graphs']} "
                         f"| {processes:.0f} + {h['cpu_kilnd_s']:.0f} = {cpu:.0f} | {fmt(med(plain), '', 1, 0)} | {h.get('triton_compiles')} | {h['fallbacks']} |")
            if h["model"] == "gpt2" and h["all_compiled_wall_s"] is not None:
                bound = 0.7 * RUN18_HERD_WALL_S
                if h["all_compiled_wall_s"] > bound:
                    missed.append(f"gpt2 herd wall {h['all_compiled_wall_s']:.1f} s > {bound:.1f} s")
            if h["kilnd_compiled"] > h["distinct_graphs"]:
                missed.append(f"herd compiled {h['kilnd_compiled']:.0f} graphs for {h['distinct_graphs']} distinct")
            if plain and cpu > 1.3 * med(plain):
                missed.append(f"{h['model']} herd compile CPU {cpu:.0f} s > 1.3 x one plain process's {med(plain):.0f} s")
    lines += ["", "Targets missed: " + ("; ".join(missed) if missed else "none"), ""]
    return "\n".join(lines), missed


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--merge", nargs="+", type=Path, help="OUT A.json B.json ...: graphs.md from several runs")
    p.add_argument("--kilnd")
    p.add_argument("--cuda-root")
    p.add_argument("--kilnd-python", default=sys.executable)
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--target", default="")
    p.add_argument("--device", default="cuda")
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--models", default="gpt2")
    p.add_argument("--variants", default="eager,blocking,async,plain,herd")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--herd", type=int, default=4)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--max-step-s", type=float, default=240)
    p.add_argument("--work", type=Path)
    p.add_argument("--out", type=Path)
    p.add_argument("--deadline-s", type=float, default=560)
    a = p.parse_args()
    if a.merge:
        out, *inputs = a.merge
        runs, device = [], ""
        for f in inputs:
            d = json.loads(f.read_text())
            runs += d["runs"]
            device = device or d["device"]
        text, missed = markdown(runs, device)
        out.write_text(text)
        print(text)
        return 0
    assert a.kilnd and a.cuda_root and a.work and a.out, "--kilnd, --cuda-root, --work and --out"
    a.work.mkdir(parents=True, exist_ok=True)
    a.out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    runner = Runner(a)
    variants = a.variants.split(",")
    device = ""
    incomplete = []

    def save() -> None:
        write_json(a.out / "graphs.json", {"device": device, "runs": runner.runs, "incomplete": incomplete})
        text, _ = markdown(runner.runs, device)
        (a.out / "graphs.md").write_text(text)

    for model in a.models.split(","):
        order = [(v, i) for i in range(a.runs) for v in ("eager", "blocking", "async") if v in variants]
        if "plain" in variants:
            order.append(("plain", 0))
        for variant, i in order:
            if time.monotonic() - start > a.deadline_s:
                incomplete.append(f"{model} {variant} {i}")
                continue
            r = runner.one(model, variant, i)
            device = device or r["device"]
            runner.runs.append(r)
            save()
        if "herd" in variants and a.herd > 0:
            if time.monotonic() - start > a.deadline_s:
                incomplete.append(f"{model} herd")
            else:
                runner.runs.append(runner.herd(model, a.herd))
                save()
    save()
    print((a.out / "graphs.md").read_text())
    if incomplete:
        print("skipped for time: " + ", ".join(incomplete))
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
