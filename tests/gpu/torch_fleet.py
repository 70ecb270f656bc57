"""A cold fleet on GPUs: several "hosts" start one job at the same moment, plain torch.compile
against kiln, side by side.

Each host is a kilnd of its own (its own cache directory, its torch workers up) on one fleet
cache (a kiln-cache over a redis-server, both new and empty for every variant), and runs the job
as a world of its own: one process, or DDP or FSDP2 over ``--gpus`` ranks (the hosts share the
GPUs: host A's rank 1 and host B's rank 1 both run on GPU 1; with ``--own-gpus`` each host has
GPUs of its own, as on a cluster). Every rank of every host has its
own Inductor and Triton directories, emptied first. Per shape, layout and repeat:

| variant | what runs |
|---|---|
| plain | plain torch.compile on every host at once: every rank compiles every graph |
| default | ``KILN_TORCH=1`` as a new user sets it: a DDP job's hosts split its pieces (each compiled once in the fleet, every other rank loads it); other layouts wait for nobody |
| nosplit | ``KILN_TORCH_SPLIT=0`` besides: a rank waits for nobody |
| split | ``KILN_TORCH_SPLIT=1`` besides: every layout's graphs claimed once in the fleet, every other rank waits for it and loads it |
| kill | split; the last host starts first, and once its first rank compiles the others start, and 3 s later it dies (its ranks and its kilnd, SIGKILL) holding its claims: the others' ranks must finish within the fleet lease's life plus one compile |

Figures, each ratio within one repeat, the median over ``--repeat``:

- **first step**: the slowest rank's (seconds from its start, after its imports, to the end of its
  first step), and each rank's against plain's slowest;
- **compiles / distinct graphs**: every compile in the fleet (a rank's own, shared or not, and a
  kilnd worker's) over the distinct graphs the ranks ran (their keys, the device index taken out);
  plain's is the number of ranks, since torch compiles every graph in every rank;
- **skew**: the spread of first-step ends (wall clock) across every rank of every host, and kiln's
  ledger's own figure (``first_step_skew_s``, from the ranks' reports).

Writes fleet.json and fleet.md (one table, header ``| hosts | layout |``) to ``--out``.
"""

from __future__ import annotations

import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import Kilnd, cold_graph_kilnd, free_ports, own_kilnd_parser, wait_for, write_json  # noqa: E402
from torch_layouts import Runner, add_corpus_arguments, add_model_arguments, corpus, stem, summary  # noqa: E402

VARIANTS = ("plain", "default", "nosplit", "split", "kill")
#: What a variant adds to kiln's default (``corpus.kiln_env``).
KILN_VARIANTS = {"default": {}, "nosplit": {"KILN_TORCH_SPLIT": "0"}, "split": {"KILN_TORCH_SPLIT": "1"}, "kill": {"KILN_TORCH_SPLIT": "1"}}
#: kilnd's fleet lease life (``lease_ttl_ms``, its default): a killed host's claims pass on within it.
LEASE_TTL_S = 10.0


class Fleet:
    """A new, empty fleet cache: a redis-server on a Unix socket and a kiln-cache over it."""

    def __init__(self, work: Path, a) -> None:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        self.work = work
        sock = work / "redis.sock"
        self.redis = subprocess.Popen(
            [a.redis_server, "--port", "0", "--unixsocket", str(sock), "--unixsocketperm", "700", "--save", "", "--appendonly", "no", "--dir", str(work)],
            stdout=open(work / "redis.log", "wb"), stderr=subprocess.STDOUT,
        )
        wait_for("redis-server", sock.exists, 30, self.redis, work / "redis.log")
        port, metrics = free_ports(2)
        (work / "empty.toml").write_text("")
        env = {k: v for k, v in os.environ.items() if not k.startswith("KILN_")}
        env["KILN_LOG"] = "info"
        self.cache = subprocess.Popen(
            [a.kiln_cache, "--listen", f"127.0.0.1:{port}", "--redis", f"unix://{sock}", "--insecure-no-auth",
             "--metrics", f"127.0.0.1:{metrics}", "--config", str(work / "empty.toml")],
            env=env, stdout=open(work / "kiln-cache.log", "wb"), stderr=subprocess.STDOUT,
        )
        def listening() -> bool:
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", port)) == 0

        wait_for("kiln-cache", listening, 30, self.cache, work / "kiln-cache.log")
        self.uri = f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        for p in (self.cache, self.redis):
            p.terminate()
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


def compiles(ranks: list[dict]) -> tuple[int, int]:
    """Compiles in the fleet (each rank's graph compiled in its process, or by a kilnd for it) and
    the distinct graphs the ranks ran, from the ranks' own records. A graph compiled in its process
    without a round trip's key (``unshared``) is the graph another rank's record of the same name
    has the key of: every rank names a graph alike (its function, compile id and DDP bucket)."""
    graphs = [g for x in ranks for g in x["graphs"].get("graphs", [])]
    done = sum(g["how"] == "in-process" or (g["how"] == "kilnd" and g["tier"] == "compiled") for g in graphs)
    keys = {g["name"]: g["key"] for g in graphs if g["key"]}
    return done, len({g["key"] or keys.get(g["name"], g["name"]) for g in graphs})


def ledger_skew(kilnd: Kilnd) -> tuple[float, int] | None:
    """The fleet ledger's rank skew of the job, and the processes it spans."""
    import kiln

    with kiln.Client(kilnd.uri) as c:
        jobs = c.torch_jobs().jobs
    return (jobs[0].first_step_skew_s, jobs[0].first_step_processes) if jobs else None


def run_once(runner: Runner, a, shape: str, layout: str, variant: str) -> dict:
    """One variant on every host at once: the figures of the fleet."""
    label = f"{stem(shape, layout)}-{variant}{runner.tag()}"
    fleet = Fleet(runner.work / f"fleet-{label}", a) if variant != "plain" else None
    kilnds: list[Kilnd | None] = [None] * a.hosts
    try:
        if fleet is not None:
            # The hosts' kilnds start together, as a fleet's hosts boot: each waits for its workers.
            with ThreadPoolExecutor(a.hosts) as pool:
                futures = [pool.submit(cold_graph_kilnd, runner.work, f"{label}-h{h}", a, fleet.uri) for h in range(a.hosts)]
            # Every kilnd that started is kept, to be stopped below, before a failed one raises.
            kilnds = [f.result() if f.exception() is None else None for f in futures]
            for f in futures:
                if f.exception() is not None:
                    raise f.exception()  # type: ignore[misc]
        started = time.monotonic()
        launched = []
        killed_at = None

        def launch(h: int) -> list:
            runner.host = f"h{h}"
            # Each host's ranks are a world of their own; torchrun on H nodes tells each rank its
            # node (GROUP_RANK of GROUP_WORLD_SIZE), which kiln reads to split a job's pieces.
            runner.host_env = {"GROUP_RANK": str(h), "GROUP_WORLD_SIZE": str(a.hosts), "LOCAL_WORLD_SIZE": str(a.gpus)}
            if a.own_gpus:
                # Each host its own GPUs, as on a cluster: host h sees GPUs h*gpus to (h+1)*gpus-1.
                runner.host_env["CUDA_VISIBLE_DEVICES"] = ",".join(str(h * a.gpus + g) for g in range(a.gpus))
            try:
                return runner.launch(layout, variant, kilnds[h], shape)
            finally:
                runner.host, runner.host_env = "", {}

        if variant == "kill":
            # The doomed host starts first, so that it holds the claims when it dies; the others
            # start once it compiles, ask for its graphs and wait for them.
            doomed = launch(a.hosts - 1)
            try:
                wait_compiling(runner.caches(layout, 0, shape).parent / f"h{a.hosts - 1}-rank0" / "inductor", doomed, runner.deadline)
            except BaseException:
                for q, _ in doomed:
                    q.kill()
                raise
            started = time.monotonic()
            launched = [launch(h) for h in range(a.hosts - 1)]
            time.sleep(KILL_AFTER_S)
            killed_at = kill_host(doomed, kilnds[-1])
            kilnds[-1] = None
        else:
            launched = [launch(h) for h in range(a.hosts)]
        hosts = [runner.collect(procs, started) for procs in launched]
        ranks = [x for host in hosts for x in host]
        r = summary(ranks, n_graphs=len(ranks[0]["graphs"].get("graphs", [])))
        r.update(shape=shape, layout=layout, variant=variant, hosts=a.hosts, wall_s=time.monotonic() - started)
        r["rank_first_s"] = [[x["first"] for x in host] for host in hosts]
        if fleet is None:
            r["compiles"], r["distinct"] = len(ranks), 1
        else:
            r["compiles"], r["distinct"] = compiles(ranks)
            assert kilnds[0] is not None
            r["ledger_skew"] = ledger_skew(kilnds[0])
        if killed_at is not None:
            # The survivors' last first-step end after the kill; its bound (the lease's life plus
            # one compile: plain's first step) is set beside plain's run (layout_runs).
            r["after_kill_s"] = max(x["first_wall"] for x in ranks) - killed_at
        print(f"    {label}: first steps {r['rank_first_s']}, compiles {r['compiles']} of {r['distinct']} graphs, skew {r['skew_s']:.2f} s "
              f"(ledger {r.get('ledger_skew')}), fallbacks {r['fallbacks']}, how {r['how']}", flush=True)
        return r
    finally:
        runner.host, runner.host_env = "", {}
        for k in kilnds:
            if k is not None:
                k.stop()
        if fleet is not None:
            fleet.stop()


#: How long the surviving hosts run before the doomed one dies: they have asked for its graphs.
KILL_AFTER_S = 3.0


def wait_compiling(inductor: Path, procs: list, deadline: float) -> None:
    """Returns once a host's first rank has begun a compile: Inductor wrote its first code."""
    while not any(inductor.rglob("*.py")):
        if time.monotonic() > deadline or any(p.poll() is not None for p, _ in procs):
            raise RuntimeError("the doomed host never began a compile")
        time.sleep(0.1)


def kill_host(procs: list, kilnd: Kilnd | None) -> float:
    """Kills a host, its ranks and its kilnd, with SIGKILL: it dies holding its claims. Returns
    when (wall clock, as the ranks' ``first_wall``)."""
    assert kilnd is not None and kilnd.proc is not None
    for p, _ in procs:
        p.kill()
    kilnd.proc.kill()
    killed = time.time()
    for p, _ in procs:
        p.wait()
    kilnd.proc.wait()
    print(f"    killed host {kilnd.name} mid-compile", flush=True)
    return killed


def layout_runs(runner: Runner, a, shape: str, layout: str) -> dict[str, dict]:
    """Each variant's figures: the median over the repeats, and each repeat's ratios against the
    plain fleet it ran beside."""
    reps: list[dict[str, dict]] = []
    for rep in range(a.repeat):
        runner.rep = rep
        out: dict[str, dict] = {}
        for variant in a.variants:
            try:
                out[variant] = run_once(runner, a, shape, layout, variant)
            except Exception as e:  # noqa: BLE001 - one variant's failure is recorded; the rest still run
                out[variant] = runner.missed(shape, layout, variant, e)
        reps.append(out)
    runner.rep = 0
    merged: dict[str, dict] = {}
    for variant in a.variants:
        done = sorted((r[variant] for r in reps if "first_s" in r.get(variant, {})), key=lambda r: r["first_s"])
        if not done:
            merged[variant] = reps[0].get(variant, {})
            continue
        m = dict(done[len(done) // 2], runs_first_s=[r["first_s"] for r in done])
        paired = [(r[variant], r["plain"]) for r in reps if "first_s" in r.get(variant, {}) and "first_s" in r.get("plain", {})]
        if paired and variant != "plain":
            m["ratios"] = [k["first_s"] / p["first_s"] for k, p in paired]
            m["ratio"] = statistics.median(m["ratios"])
            # Every rank's first step against the plain fleet's slowest rank, the worst of them.
            m["rank_ratio"] = statistics.median(max(f for host in k["rank_first_s"] for f in host) / p["first_s"] for k, p in paired)
            m["plain_skew_s"] = statistics.median(p["skew_s"] for _, p in paired)
            if variant == "kill":
                # No survivor may wait for the dead host longer than the lease's life plus its own
                # compile, which plain's first step beside it bounds.
                m["kill_bound_s"] = LEASE_TTL_S + statistics.median(p["first_s"] for _, p in paired)
                m["after_kill_s"] = max(k["after_kill_s"] for k, _ in paired)
        merged[variant] = m
    return merged


def table(results: dict[str, dict[str, dict[str, dict]]], hosts: int) -> str:
    rows = [
        "| hosts | layout | shape | kiln | first step, slowest rank (s) | first step / plain | compiles / distinct graphs | skew kiln (s) | skew plain (s) | ledger skew (s) | fallbacks | repeats |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for shape, layouts in results.items():
        for layout, variants in layouts.items():
            plain = variants.get("plain", {})
            if "first_s" in plain:
                rows.append(
                    f"| {hosts} | {layout} | {shape} | plain | {plain['first_s']:.2f} | 1.00 | {plain['compiles']:.2f} (every rank compiles each graph) | "
                    f"{plain['skew_s']:.2f} | {plain['skew_s']:.2f} | — | — | {len(plain.get('runs_first_s', [1]))} |"
                )
            for variant, r in variants.items():
                if variant == "plain":
                    continue
                if "first_s" not in r:
                    rows.append(f"| {hosts} | {layout} | {shape} | {variant} | {r.get('error') or r.get('skipped', 'not run')} | | | | | | | |")
                    continue
                ratio = f"{r['ratio']:.2f}" if "ratio" in r else "—"
                ledger = r.get("ledger_skew")
                ledger_text = f"{ledger[0]:.2f} over {ledger[1]}" if ledger else "—"
                per_graph = r["compiles"] / r["distinct"] if r["distinct"] else 0.0
                if "kill_bound_s" in r:
                    # The figures are the surviving hosts': the last one's ranks were killed.
                    variant = f"kill (last host killed mid-compile; survivors' last first step ended {r['after_kill_s']:.2f} s after it, bound {r['kill_bound_s']:.2f} s)"
                rows.append(
                    f"| {hosts} | {layout} | {shape} | {variant} | {r['first_s']:.2f} | {ratio} | {r['compiles']} / {r['distinct']} = {per_graph:.2f} | "
                    f"{r['skew_s']:.2f} | {r.get('plain_skew_s', float('nan')):.2f} | {ledger_text} | {r['fallbacks'] or 0} | {len(r['runs_first_s'])} |"
                )
    return "\n".join(rows)


def main() -> int:
    p = own_kilnd_parser(__doc__)
    p.add_argument("--gpus", type=int, default=2, help="ranks of a host's DDP or FSDP2 world (the hosts share the GPUs)")
    p.add_argument("--hosts", type=int, default=2)
    p.add_argument("--own-gpus", action="store_true", help="each host its own --gpus GPUs (CUDA_VISIBLE_DEVICES), not all hosts on the same ones")
    p.add_argument("--redis-server", default=shutil.which("redis-server") or "redis-server")
    p.add_argument("--kiln-cache", required=True)
    p.add_argument("--shapes", default="model_compile", help=f"corpus jobs, comma-separated ({', '.join(corpus.SHAPES)})")
    p.add_argument("--layouts", default="single,ddp")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--repeat", "--repeats", type=int, default=1)
    p.add_argument("--deadline-s", type=float, default=540)
    add_model_arguments(p)
    add_corpus_arguments(p)
    a = p.parse_args()
    a.variants = [v for v in VARIANTS if v in a.variants.split(",")]
    a.probes = KILN_VARIANTS
    a.steps = a.corpus_steps
    a.work.mkdir(parents=True, exist_ok=True)
    a.out.mkdir(parents=True, exist_ok=True)
    runner = Runner(a)
    results: dict[str, dict[str, dict[str, dict]]] = {}
    for shape in a.shapes.split(","):
        for layout in a.layouts.split(","):
            print(f"==> {a.hosts} hosts at once: {shape} {layout}", flush=True)
            results.setdefault(shape, {})[layout] = layout_runs(runner, a, shape, layout)
            write_json(a.out / "fleet.json", results)
            (a.out / "fleet.md").write_text(table(results, a.hosts) + "\n")
    md = table(results, a.hosts)
    if runner.skipped:
        md += "\n\nSkipped for time: " + "; ".join(runner.skipped) + "\n"
    (a.out / "fleet.md").write_text(md + "\n")
    print(md)
    return 3 if runner.skipped else 0


if __name__ == "__main__":
    sys.exit(main())
