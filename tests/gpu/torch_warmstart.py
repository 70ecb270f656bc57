"""torch.compile warm start on a fresh host (issue 6, part 3), run by tests/gpu/run.

For each model (models.py: ``gpt2`` training step, ``regional`` inference), the first-call time
of a FRESH process with EMPTY local Inductor and Triton cache directories, after an earlier
process filled the cache it uses. Every process is started by this script (torch_child.py), with
its own ``TORCHINDUCTOR_CACHE_DIR``, ``TRITON_CACHE_DIR`` and ``TRITON_HOME``:

  cold     the first process: empty local dirs, no remote cache (fills the local dirs for (b))
  (a)      no caches at all: ``TORCHINDUCTOR_FORCE_DISABLE_CACHES=1``
  (b)      torch's local caches warm: cold's directories again (the best a single host can do)
  (c)fill  torch's own Redis remote caches (FX graph, autotune, AOTAutograd, Dynamo PGO), fresh dirs
  (c)      the same settings, fresh dirs: a fresh host on torch's Redis cache
  (d)fill  kiln through host A, fresh dirs: the first process's cold time with kiln
  (d)      kiln through a NEW kilnd (empty cache directory, same fleet), fresh dirs: a fresh host

kiln = the Triton drop-in (``TRITON_CACHE_MANAGER``/``TRITON_REMOTE_CACHE_BACKEND``) plus
``kiln.torch.install()`` (and ``KILN_TORCH=1`` for child processes). In (d) every Triton compile
in every process of the run (Inductor's workers too) is counted by a hook (site/sitecustomize.py)
and must be zero, and the new kilnd's metrics must show remote-tier hits.

Then a herd: 4 processes of one model starting together at a barrier on the one GPU, with fresh
local dirs each and a fresh fleet (Redis flushed, a new kilnd): Triton compiles with kiln
against torch's Redis cache. Variant (a) runs last, after the herd: it is a cold compile again,
the least news per second of GPU time, so it is what a short budget skips first.

Writes torch.json (every raw figure) and torch.md (the tables) to --out. Exit status: 0 when
every check passed, 1 on a failed check, 3 when a phase was skipped for lack of time.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

HERE = Path(__file__).resolve().parent

#: Variables of the caller's environment that would change what a child does.
STRIP_PREFIXES = ("TORCHINDUCTOR_", "TRITON_", "TORCH_COMPILE_", "KILN_TORCH", "KILN_TRITON_", "TORCH_DYNAMO_")
STRIP_NAMES = ("KILN_DAEMON", "KILN_GPU_KILN", "KILN_GPU_COUNT_DIR", "KILN_GPU_SITEDIRS")

TORCH_REDIS_FLAGS = {
    "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE": "1",
    "TORCHINDUCTOR_AUTOTUNE_REMOTE_CACHE": "1",
    "TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE": "1",
    "TORCH_DYNAMO_AUTOMATIC_DYNAMIC_REMOTE_PGO": "1",
}
KILN_TRITON = {
    "TRITON_CACHE_MANAGER": "triton.runtime.cache:RemoteCacheManager",
    "TRITON_REMOTE_CACHE_BACKEND": "kiln.triton:KilnRemoteCacheBackend",
}

#: Relative difference of a variant's loss (checksum) from the cold run's that still counts as
#: the same computation (bf16 training: kernels may differ in rounding, never in result).
VALUE_TOL = {"gpt2": 2e-2, "regional": 1e-3}


class OutOfTime(Exception):
    pass


def pth_dirs() -> list[str]:
    """Directories on sys.path holding kiln-torch.pth (a ``pip install --target`` dir)."""
    return [p for p in sys.path if p and os.path.isfile(os.path.join(p, "kiln-torch.pth"))]


def count_events(d: Path) -> tuple[int, int, dict[str, list[str]]]:
    compiles, loads, per_pid = 0, 0, {}
    if d.is_dir():
        for f in d.glob("*.txt"):
            lines = f.read_text().splitlines()
            per_pid[f.stem] = [ln.split(" ", 1)[1] for ln in lines if ln.startswith("compile ")]
            compiles += sum(1 for ln in lines if ln.startswith("compile "))
            loads += sum(1 for ln in lines if ln.startswith("load "))
    return compiles, loads, per_pid


class Run:
    def __init__(self, args: argparse.Namespace) -> None:
        self.a = args
        self.work: Path = args.work
        self.work.mkdir(parents=True, exist_ok=True)
        self.deadline = time.monotonic() + args.deadline_s
        self.checks = common.Checks("torch.compile warm start" + (" (CPU, tiny models: harness check only)" if args.device == "cpu" else ""))
        self.results: dict = {"device": args.device, "tiny": args.tiny, "models": {}, "herd": {}, "skipped": []}
        self.serial = 0
        self.kilnds: list[common.Kilnd] = []

    # -- time --

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def need(self, seconds: float, what: str) -> None:
        if self.left() < seconds:
            raise OutOfTime(f"{what}: needs about {seconds:.0f} s, {self.left():.0f} s left")

    # -- processes --

    def fresh_dirs(self, label: str) -> Path:
        self.serial += 1
        d = self.work / f"{self.serial:02d}-{label}"
        for sub in ("inductor", "triton", "triton-home", "counts"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        return d

    def env(self, mode: str, dirs: Path, counts: Path, daemon: str = "") -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(STRIP_PREFIXES) and k not in STRIP_NAMES}
        env["PYTHONPATH"] = os.pathsep.join([str(self.a.sitecustomize)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        env["KILN_GPU_COUNT_DIR"] = str(counts)
        env["TORCHINDUCTOR_CACHE_DIR"] = str(dirs / "inductor")
        env["TRITON_CACHE_DIR"] = str(dirs / "triton")
        env["TRITON_HOME"] = str(dirs / "triton-home")
        env["PYTHONUNBUFFERED"] = "1"
        if mode == "nocache":
            env["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] = "1"
        elif mode == "redis":
            env.update(TORCH_REDIS_FLAGS)
            env["TORCHINDUCTOR_REDIS_HOST"] = "127.0.0.1"
            env["TORCHINDUCTOR_REDIS_PORT"] = str(self.a.redis_port)
        elif mode == "kiln":
            env.update(KILN_TRITON)
            env["KILN_DAEMON"] = daemon
            env["KILN_TORCH"] = "1"
            env["KILN_GPU_KILN"] = "1"
            env["KILN_GPU_SITEDIRS"] = os.pathsep.join(pth_dirs())
        elif mode != "plain":
            raise ValueError(mode)
        return env

    def child(self, label: str, model: str, mode: str, dirs: Path, counts: Path, daemon: str = "",
              barrier: Path | None = None, timeout: float = 300) -> tuple[subprocess.Popen, Path, Path, float]:
        result = dirs / f"result-{label}.json"
        log = self.work / f"{dirs.name}-{label}.log"
        args = [self.a.python, str(HERE / "torch_child.py"), "--model", model, "--device", self.a.device, "--result", str(result)]
        if self.a.tiny:
            args.append("--tiny")
        if barrier is not None:
            args += ["--barrier", str(barrier)]
        f = open(log, "wb")
        f.write(f"$ {' '.join(args)}\n".encode())
        f.flush()
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT, env=self.env(mode, dirs, counts, daemon), cwd=str(dirs))
        f.close()
        return proc, result, log, time.monotonic()

    def finish(self, label: str, proc: subprocess.Popen, result: Path, log: Path, started: float, timeout: float) -> dict:
        try:
            rc = proc.wait(max(1.0, timeout - (time.monotonic() - started)))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            rc = "timeout"
        wall = time.monotonic() - started
        out: dict = {"rc": rc, "wall_s": wall, "log": log.name}
        if rc == 0 and result.exists():
            out.update(json.loads(result.read_text()))
        else:
            tail = log.read_text(errors="replace")[-4000:]
            print(f"--- {label}: exit {rc} after {wall:.0f} s; the log's end:\n{tail}\n---", flush=True)
        text = log.read_text(errors="replace")
        out["kiln_unreachable_warning"] = "kilnd is unreachable" in text
        return out

    def single(self, label: str, model: str, mode: str, dirs: Path, daemon: str = "", estimate: float = 120) -> dict:
        self.need(estimate, f"{model} {label}")
        counts = dirs / "counts"
        for f in counts.glob("*.txt"):
            f.unlink()
        timeout = min(self.left() - 5, 400)
        print(f"==> {model} {label}: mode {mode}, dirs {dirs.name}{', kilnd ' + daemon if daemon else ''} ({self.left():.0f} s left)", flush=True)
        proc, result, log, started = self.child(label, model, mode, dirs, counts, daemon)
        out = self.finish(label, proc, result, log, started, timeout)
        out["compiles"], out["loads"], per_pid = count_events(counts)
        out["compiled_kernels"] = sorted({k for ks in per_pid.values() for k in ks})
        out["mode"], out["dirs"] = mode, dirs.name
        ok = out["rc"] == 0 and isinstance(out.get("value"), float) and math.isfinite(out["value"])
        self.checks.record(f"{model} {label}: the process runs the step", ok,
                           f"first call {out.get('first_call_s', float('nan')):.2f} s, wall {out['wall_s']:.0f} s, "
                           f"Triton compiles {out['compiles']}, loads {out['loads']}, value {out.get('value')}")
        return out

    def kilnd(self, name: str) -> common.Kilnd:
        k = common.Kilnd(name, self.a.kilnd, self.work / f"kilnd-{name}", self.a.cuda_root, self.a.kilnd_python, remote=self.a.remote)
        if self.a.device == "cpu":
            k.target = "sm_90"
        k.start()
        self.kilnds.append(k)
        return k

    def stop_kilnd(self, k: common.Kilnd) -> None:
        rc = k.stop()
        self.kilnds.remove(k)
        self.checks.record(f"kilnd {k.name} exits 0 on SIGTERM", rc == 0, f"exit {rc}")
        shutil.copy(k.log, self.work / f"kilnd-{k.name}.log")

    def redis(self, *args: str) -> str:
        r = subprocess.run([self.a.redis_cli, "-s", self.a.redis_socket, *args], capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise RuntimeError(f"redis-cli {' '.join(args)} failed: {r.stdout} {r.stderr}")
        return r.stdout

    def flush_fleet(self) -> None:
        out = self.redis("FLUSHALL")
        if "OK" not in out:
            raise RuntimeError(f"redis FLUSHALL failed: {out}")

    def torch_redis_state(self) -> tuple[int, int]:
        """Keys torch's Redis cache wrote (``pt2:*``), and Redis's keyspace hits so far."""
        keys = len([ln for ln in self.redis("--scan", "--pattern", "pt2:*").splitlines() if ln.strip()])
        hits = 0
        for line in self.redis("INFO", "stats").splitlines():
            if line.startswith("keyspace_hits:"):
                hits = int(line.split(":", 1)[1])
        return keys, hits

    # -- phases --

    def model(self, model: str) -> None:
        res: dict = {}
        self.results["models"][model] = res
        est_cold = 60 if self.a.device == "cpu" else (150 if model == "gpt2" else 60)
        cold_dirs = self.fresh_dirs(f"{model}-cold")
        res["cold"] = self.single("cold", model, "plain", cold_dirs, estimate=est_cold)
        self.results.setdefault("gpu", res["cold"].get("gpu", ""))
        est_cold = max(res["cold"]["wall_s"] * 1.3, 20)
        est_warm = max(res["cold"]["wall_s"] * 0.6, 15)
        res["b_local_warm"] = self.single("(b) local warm", model, "plain", cold_dirs, estimate=est_warm)

        res["d_fill"] = self.single("(d)fill = cold with kiln, host A", model, "kiln", self.fresh_dirs(f"{model}-dfill"),
                                    daemon=self.a.host_a, estimate=est_cold)
        self.checks.record(f"{model} (d)fill: kiln is installed in the process", bool(res["d_fill"].get("kiln")),
                           f"kiln.torch.installed() {res['d_fill'].get('kiln')}; classes install() replaced {res['d_fill'].get('kiln_replaced')} "
                           "(empty when KILN_TORCH=1 had already replaced them)")
        self.need(est_warm + 10, f"{model} (d)")
        b = self.kilnd(f"B-{model}")
        try:
            before = b.metrics()
            res["d_kiln"] = d = self.single("(d) kiln, fresh host B", model, "kiln", self.fresh_dirs(f"{model}-d"), daemon=b.uri, estimate=est_warm)
            after = b.metrics()
        finally:
            self.stop_kilnd(b)
        hits = common.metric_sum(after, "kiln_blob_lookups_total", tier="remote", result="hit") - common.metric_sum(
            before, "kiln_blob_lookups_total", tier="remote", result="hit")
        by_ns = {ns: common.metric_sum(after, "kiln_blob_lookups_total", tier="remote", result="hit", namespace=ns)
                 for ns in ("triton", "inductor-fx", "inductor-autotune", "aot-autograd", "dynamo-pgo")}
        misses = common.metric_sum(after, "kiln_blob_lookups_total", result="miss")
        d["fresh_host_remote_hits"], d["fresh_host_remote_hits_by_namespace"], d["fresh_host_misses"] = hits, by_ns, misses
        self.checks.record(f"{model} (d): zero local Triton compiles (hook on Triton, every process)", d["compiles"] == 0 and d["rc"] == 0,
                           f"compiles {d['compiles']} {d['compiled_kernels'][:8]}, loads {d['loads']}")
        self.checks.record(f"{model} (d): the fresh kilnd serves remote-tier hits", hits > 0, f"kiln_blob_lookups_total{{tier=remote,result=hit}} +{hits:.0f} {by_ns}, misses {misses:.0f}")
        self.checks.record(f"{model} (d): kiln installed, kilnd reachable", bool(d.get("kiln")) and not d["kiln_unreachable_warning"])

        self.checks.record(f"{model} (d)fill: kilnd reachable", not res["d_fill"]["kiln_unreachable_warning"])

        keys0, _ = self.torch_redis_state()
        res["c_fill"] = self.single("(c)fill torch Redis", model, "redis", self.fresh_dirs(f"{model}-cfill"), estimate=est_cold)
        keys1, hits1 = self.torch_redis_state()
        res["c_redis"] = c = self.single("(c) torch Redis, fresh dirs", model, "redis", self.fresh_dirs(f"{model}-c"), estimate=est_warm)
        keys2, hits2 = self.torch_redis_state()
        c["torch_redis_keys_written_by_fill"], c["redis_keyspace_hits"] = keys1 - keys0, hits2 - hits1
        # A silently broken torch Redis cache would make (c) a cold compile and the comparison moot.
        self.checks.record(f"{model} (c)fill: torch's Redis cache was written", keys1 > keys0, f"pt2:* keys {keys0} -> {keys1}")
        self.checks.record(f"{model} (c): torch's Redis cache was read", hits2 > hits1, f"Redis keyspace hits +{hits2 - hits1}")

    def no_cache(self, model: str) -> None:
        """(a), after the herd: it is a cold compile again, the least news per second of GPU time."""
        res = self.results["models"].setdefault(model, {})
        est = max(res.get("cold", {}).get("wall_s", 100) * 1.3, 20)
        res["a_nocache"] = self.single("(a) no caches", model, "nocache", self.fresh_dirs(f"{model}-a"), estimate=est)

    def values_agree(self, model: str) -> None:
        res = self.results["models"].get(model, {})
        ref = res.get("cold", {}).get("value")
        if not isinstance(ref, float):
            return
        bad = {k: v.get("value") for k, v in res.items() if isinstance(v.get("value"), float)
               and abs(v["value"] - ref) > VALUE_TOL[model] * max(abs(ref), 1e-6)}
        self.checks.record(f"{model}: every variant computes the cold run's value (rel tol {VALUE_TOL[model]:g})", not bad,
                           f"cold {ref:.6g}" + (f"; differ: {bad}" if bad else ""))

    @staticmethod
    def herd_estimate(cold_wall: float, mode: str) -> float:
        # kiln: every process lowers the graph, one compiles each kernel; torch Redis: all compile.
        return cold_wall * (1.5 if mode == "kiln" else 2.5) + 20

    def cold_only(self, model: str) -> None:
        """The cold run alone (the herd's reference: its compiles are the distinct kernels)."""
        res = self.results["models"].setdefault(model, {})
        if "cold" not in res:
            res["cold"] = self.single("cold", model, "plain", self.fresh_dirs(f"{model}-cold"),
                                      estimate=60 if self.a.device == "cpu" else (150 if model == "gpt2" else 60))
            self.results.setdefault("gpu", res["cold"].get("gpu", ""))

    def herd(self, model: str, n: int) -> None:
        self.cold_only(model)
        cold = self.results["models"].get(model, {}).get("cold", {})
        out: dict = {"model": model, "processes": n}
        self.results["herd"] = out
        for mode in ("kiln", "redis"):
            self.need(self.herd_estimate(cold.get("wall_s", 100), mode), f"herd {mode}")
            self.flush_fleet()
            k = self.kilnd(f"C-herd-{mode}") if mode == "kiln" else None
            try:
                barrier = self.work / f"barrier-{mode}"
                barrier.mkdir(parents=True, exist_ok=True)
                counts = self.work / f"herd-{mode}-counts"
                counts.mkdir(parents=True, exist_ok=True)
                print(f"==> herd of {n} {model} processes, {mode} ({self.left():.0f} s left)", flush=True)
                procs = [self.child(f"herd-{mode}-{i}", model, mode, self.fresh_dirs(f"herd-{mode}-{i}"), counts,
                                    daemon=k.uri if k else "", barrier=barrier) for i in range(n)]
                deadline = time.monotonic() + 300
                while len(list(barrier.glob("ready.*"))) < n and time.monotonic() < deadline and all(p.poll() is None for p, *_ in procs):
                    time.sleep(0.01)
                go = time.monotonic()
                (barrier / "go").write_text("")
                timeout = min(self.left() - 5, 500)
                # Each child's bound counts from the go, not from its start.
                results = [self.finish(f"herd-{mode}-{i}", proc, result, log, started, timeout + (go - started))
                           for i, (proc, result, log, started) in enumerate(procs)]
                wall = time.monotonic() - go
            finally:
                if k is not None:
                    self.stop_kilnd(k)
            compiles, loads, per_pid = count_events(counts)
            out[mode] = {
                "compiles": compiles, "loads": loads, "wall_s": wall,
                "first_call_s": [r.get("first_call_s") for r in results], "rc": [r["rc"] for r in results],
                "compiles_per_process": {pid: len(v) for pid, v in per_pid.items()},
                "distinct_kernels": len({x for v in per_pid.values() for x in v}),
            }
            self.checks.record(f"herd {mode}: all {n} processes ran the step", all(r["rc"] == 0 for r in results),
                               f"Triton compiles {compiles}, wall {wall:.1f} s, first calls {[round(r.get('first_call_s', -1), 1) for r in results]}")
        if "kiln" in out and "redis" in out:
            cold_compiles = cold.get("compiles")
            ok = out["kiln"]["compiles"] <= (cold_compiles if cold_compiles is not None else 0) if self.a.device == "cuda" else True
            self.checks.record("herd kiln: each distinct kernel compiled once in the fleet (compiles <= the cold run's)", ok,
                               f"kiln {out['kiln']['compiles']}, torch Redis {out['redis']['compiles']}, one cold process {cold_compiles}")

    # -- report --

    def table(self) -> str:
        def s(v) -> str:
            return f"{v:.2f}" if isinstance(v, (int, float)) and math.isfinite(v) else "—"

        def fc(res: dict, key: str):
            return res.get(key, {}).get("first_call_s")

        lines = [
            f"### torch.compile first call on a fresh host ({'CPU, tiny models: NOT figures' if self.a.device == 'cpu' else self.results.get('gpu', 'GPU')})",
            "",
            "Seconds from the start of the first step (compile included) to its result on the host, each in a fresh process.",
            "",
            "| model | cold, no kiln | cold, kiln (host A) | (a) no caches | (b) local warm | (c) torch Redis | (d) kiln, fresh host | (d)/(b) ≤ 1.10 | (d)/(c) < 1 |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for model, res in self.results["models"].items():
            b, c, d = fc(res, "b_local_warm"), fc(res, "c_redis"), fc(res, "d_kiln")
            rb = d / b if b and d else None
            rc = d / c if c and d else None
            lines.append(
                f"| {model} | {s(fc(res, 'cold'))} | {s(fc(res, 'd_fill'))} | {s(fc(res, 'a_nocache'))} | {s(b)} | {s(c)} | {s(d)} | "
                f"{s(rb)} {'met' if rb is not None and rb <= 1.10 else 'NOT met' if rb is not None else ''} | "
                f"{s(rc)} {'met' if rc is not None and rc < 1 else 'NOT met' if rc is not None else ''} |"
            )
            res["ratios"] = {"d_over_b": rb, "d_over_c": rc, "cold_kiln_over_cold": (fc(res, "d_fill") / fc(res, "cold")) if fc(res, "d_fill") and fc(res, "cold") else None}
        lines += ["", "Triton compiles (hook on Triton's compile, every process of the run) and loads (triton.compile calls, hits included):", "",
                  "| model | cold | (a) | (b) | (c)fill | (c) | (d)fill | (d) | (d) remote hits on the fresh kilnd |", "|---|---|---|---|---|---|---|---|---|"]
        for model, res in self.results["models"].items():
            cell = lambda k: f"{res[k]['compiles']}/{res[k]['loads']}" if k in res else "—"  # noqa: E731
            lines.append(f"| {model} | {cell('cold')} | {cell('a_nocache')} | {cell('b_local_warm')} | {cell('c_fill')} | {cell('c_redis')} | "
                         f"{cell('d_fill')} | {cell('d_kiln')} | {res.get('d_kiln', {}).get('fresh_host_remote_hits', '—')} |")
        h = self.results.get("herd") or {}
        if h.get("kiln") or h.get("redis"):
            lines += ["", f"Herd: {h['processes']} {h['model']} processes starting together on one GPU, fresh local dirs each, fresh fleet:", "",
                      "| cache | Triton compiles | distinct kernels | wall until all done (s) | first calls (s) |", "|---|---|---|---|---|"]
            for mode, name in (("kiln", "kiln"), ("redis", "torch Redis (c)")):
                if mode in h:
                    m = h[mode]
                    lines.append(f"| {name} | {m['compiles']} | {m['distinct_kernels']} | {s(m['wall_s'])} | {', '.join(s(x) for x in m['first_call_s'])} |")
        if self.results["skipped"]:
            lines += ["", "**Skipped for time:** " + "; ".join(self.results["skipped"])]
        return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--kilnd", required=True)
    p.add_argument("--cuda-root", required=True)
    p.add_argument("--kilnd-python", required=True, help="interpreter for kilnd's Triton workers")
    p.add_argument("--python", default=sys.executable, help="interpreter of the measured processes")
    p.add_argument("--remote", required=True, help="the fleet cache (kiln-cache) URI")
    p.add_argument("--host-a", required=True)
    p.add_argument("--metrics-a", type=int, required=True)
    p.add_argument("--redis-cli", required=True)
    p.add_argument("--redis-socket", required=True)
    p.add_argument("--redis-port", type=int, required=True)
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--deadline-s", type=float, default=540)
    p.add_argument("--sitecustomize", type=Path, default=HERE / "site")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--models", default="gpt2,regional")
    p.add_argument("--herd-model", default="gpt2")
    p.add_argument("--herd", type=int, default=4, help="processes in the herd; 0 skips it")
    p.add_argument("--no-a", action="store_true", help="skip variant (a), no caches")
    p.add_argument("--herd-model-strict", action="store_true", help="never fall back to the regional model for the herd")
    p.add_argument("--phases", default="main,herd,a",
                   help="main (cold, b, c, d), herd (runs the model's cold first if main did not), a; comma-separated")
    args = p.parse_args()
    run = Run(args)
    if not pth_dirs():
        run.checks.info("kiln-torch.pth", "not found on sys.path; KILN_TORCH=1 reaches child processes only through the explicit install()")
    status = 0
    models = [m for m in args.models.split(",") if m]
    phases = {p for p in args.phases.split(",") if p}
    if phases - {"main", "herd", "a"}:
        p.error(f"--phases: unknown {sorted(phases - {'main', 'herd', 'a'})}")
    run.results["phases"] = sorted(phases)
    try:
        for model in models if "main" in phases else []:
            try:
                run.model(model)
            except OutOfTime as e:
                run.results["skipped"].append(str(e))
                run.checks.skip(f"{model}: the rest", str(e))
        if args.herd > 0 and "herd" in phases:
            herd_model = args.herd_model if args.herd_model in models else models[-1]
            wall = run.results["models"].get(herd_model, {}).get("cold", {}).get("wall_s", 100)
            need = run.herd_estimate(wall, "kiln") + run.herd_estimate(wall, "redis")
            if herd_model != "regional" and run.left() < need and "cold" in run.results["models"].get("regional", {}) and not args.herd_model_strict:
                run.checks.info("herd model", f"not enough time for a {herd_model} herd ({run.left():.0f} s left, ~{need:.0f} s needed): the regional model instead")
                herd_model = "regional"
            try:
                run.herd(herd_model, args.herd)
            except OutOfTime as e:
                run.results["skipped"].append(str(e))
                run.checks.skip("herd", str(e))
        if not args.no_a and "a" in phases:
            for model in models:
                try:
                    run.no_cache(model)
                except OutOfTime as e:
                    run.results["skipped"].append(str(e))
                    run.checks.skip(f"{model} (a)", str(e))
        for model in models:
            run.values_agree(model)
    except Exception as e:  # noqa: BLE001
        import traceback

        traceback.print_exc()
        run.checks.record("torch warm start ran to the end", False, f"{type(e).__name__}: {e}")
    finally:
        for k in list(run.kilnds):
            run.stop_kilnd(k)
        md = run.table()
        run.results["checks"] = run.checks.to_json()
        (args.out / "torch.md").write_text(md + "\n" + run.checks.summary() + "\n")
        common.write_json(args.out / "torch.json", run.results)
        print("\n" + md, flush=True)
        print(run.checks.summary(), flush=True)
    if run.checks.failed:
        status = 1
    elif run.results["skipped"]:
        status = 3
    return status


if __name__ == "__main__":
    sys.exit(main())
