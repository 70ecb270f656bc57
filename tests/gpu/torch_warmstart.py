"""torch.compile warm start on a fresh host, run by tests/gpu/run.

For each model (models.py: ``gpt2`` training step, ``regional`` inference, ``convnet`` training
step), the first-call time of a fresh process (torch_child.py), started by this script. A real
fresh host has the same default cache paths as the host that compiled, with nothing in them, so
every variant of a model runs at the SAME absolute paths: Inductor's default directory
(``TORCHINDUCTOR_CACHE_DIR`` unset: torch's and kiln's ``/tmp/torchinductor_<user>``; a fixed
path under the work dir with ``--inductor-dir``) holding Inductor's kernels too (Triton's cache
dir unset, so Inductor puts it at ``<inductor>/triton/<device>``), and Triton's own directory
under one fixed ``TRITON_HOME`` (its driver helpers and launchers). "Emptied" below means these
(and any other cache directory a process of the run reported) are removed before the process
starts.

  cold       plain torch, emptied: the first process (fills the directories for (b))
  (b) x N    plain torch again, NOT emptied: the same host again, local caches warm
  (d)fill    kiln (``KILN_TORCH=1``, job ``kiln-gpu-<model>``) through host A, emptied: the job's
             first process compiles, and saves the job's snapshot (after its first step and at
             exit)
  (d) x N    kiln through a NEW kilnd each time (empty cache directory, same fleet: kiln-cache
             on Redis), emptied: a fresh host of the job
  (c)fill    torch's own Redis remote caches (FX graph, autotune, AOTAutograd, Dynamo PGO),
             emptied: the first process fills Redis
  (c) x N    the same settings, emptied: a fresh host on torch's Redis cache

Then, per ``--preempt`` model, the preemption case: the fleet flushed, a kiln process (job
``kiln-gpu-<model>-preempt``, a new kilnd P1, emptied) is SIGKILLed (with its compile workers)
right after its first step, once ListSnapshots through P1 shows the save made after that step;
its successor runs on a fresh host (a new kilnd P2, emptied). Then a herd (4 processes of one
model at a barrier, a fresh fleet, each its own explicit directories: 4 fresh hosts), and last
variant (a), no caches at all (``TORCHINDUCTOR_FORCE_DISABLE_CACHES=1``).

In every process a hook (site/sitecustomize.py) counts Triton compiles, and shims first on PATH
(``cc``, ``gcc``, ``c++``, ``g++``, ``clang``, ``clang++``) count C compiler runs. Processes whose
exit does not matter to what is measured leave with ``os._exit`` once their result is written
(torch writes nothing a cache needs at exit; Inductor's compile-worker pool takes up to ~14 s to
wind down); the kiln fill processes and the herd exit normally (kiln saves at exit).

Targets, printed per model, never part of the exit status: (d)/(b) <= 1.05,
(d)/(c) <= 0.80, zero Triton compiles and zero C compiler runs in (d), the SIGKILL successor
within 1.05 of (d). Checks (a failure is exit status 1): every process runs the step and computes
the cold run's value, each variant really ran at its fill's paths, (d) restored the job's
snapshot with zero Triton compiles, the preempted process was killed only after its snapshot
landed, kilnd and torch's Redis were really used.

The scenarios are here (`Run`); how a process is started, timed and counted, the fleet's
kilnds and Redis, and the raw figures are torch_harness.py's (`Harness`); the tables are
torch_report.py's. Writes torch.json (every raw figure, every run) and torch.md (the tables) to
--out. Exit status:
0 when every check passed, 1 on a failed check, 3 when a phase was skipped for lack of time.
``--merge OUT_MD JSON...`` instead writes one torch.md (and a torch.json beside it) from the
torch.json of several runs (a session that ran the models in separate invocations).
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
from torch_harness import (  # noqa: E402
    GPU_COLD_WALL, GPU_WARM_WALL, HERE, LANDED, MODELS, VALUE_TOL, Harness, OutOfTime, count_events, pth_dirs,
)
from torch_report import merge, snap_value  # noqa: E402


class Run(Harness):
    """The scenarios, in the order main() runs them; the docstring above says what each is."""

    def model_main(self, model: str) -> None:
        res: dict = self.results["models"].setdefault(model, {})
        n = self.a.runs
        if self.a.device == "cuda":
            total = 3 * GPU_COLD_WALL[model] + 3 * n * GPU_WARM_WALL[model] + 10 * n
            self.need(0.7 * total, f"{model} (every main variant; run it alone: KILN_GPU_TORCH_ARGS='--models {model}')")
        job = f"kiln-gpu-{model}"
        cold_est, warm_est = self.estimates(model)
        res["cold"] = self.measure("cold", model, "plain", fresh=True, estimate=cold_est)
        self.results["gpu"] = self.results.get("gpu") or res["cold"].get("gpu", "")

        for i in range(1, n + 1):
            self.add_run(res, "b_local_warm", self.measure(f"(b) local warm #{i}", model, "plain", fresh=False, estimate=self.estimates(model)[1]))
        self.same_path(model, "(b)", res["cold"], res["b_local_warm"]["runs"])

        # (d): the job's first kiln process on host A, then fresh hosts.
        cold_est, _ = self.estimates(model)
        res["d_fill"] = fill = self.measure("(d)fill = cold with kiln, host A", model, "kiln", fresh=True, daemon=self.a.host_a, job=job,
                                             estimate=cold_est, fast_exit=False)
        self.checks.record(f"{model} (d)fill: kiln is on (KILN_TORCH=1 through kiln-torch.pth) and kilnd reachable",
                           bool(fill.get("kiln")) and not fill["kiln_unreachable_warning"],
                           f"kiln.torch.installed() {fill.get('kiln')} {fill.get('kiln_error', '')}, unreachable warning {fill['kiln_unreachable_warning']}")
        fill["snapshot_saved"] = snap = self.snapshot(self.a.host_a, job)
        self.checks.record(f"{model} (d)fill: the job's snapshot is stored (ListSnapshots through host A)", snap.get("found", False) and snap.get("files", 0) > 0,
                           json.dumps({k: snap.get(k) for k in ("error", "found", "files", "total_bytes", "roots", "saved_by")}))
        for i in range(1, n + 1):
            self.need(self.estimates(model)[1] + 10, f"{model} (d) #{i}")
            b = self.kilnd(f"B{i}-{model}")
            try:
                before = b.metrics()
                run = self.measure(f"(d) kiln, fresh host B{i}", model, "kiln", fresh=True, daemon=b.uri, job=job, estimate=self.estimates(model)[1])
                after = b.metrics()
            finally:
                self.stop_kilnd(b)
            self.fresh_kilnd_figures(run, before, after)
            self.add_run(res, "d_kiln", run)
            self.check_fresh_host(model, f"(d) #{i}", run)
        self.same_path(model, "(d)", fill, res["d_kiln"]["runs"])

        # (c): torch's own Redis caches.
        keys0, _ = self.torch_redis_state()
        res["c_fill"] = self.measure("(c)fill torch Redis", model, "redis", fresh=True, estimate=self.estimates(model)[0])
        keys1, hits1 = self.torch_redis_state()
        for i in range(1, n + 1):
            self.add_run(res, "c_redis", self.measure(f"(c) torch Redis, fresh host #{i}", model, "redis", fresh=True, estimate=self.estimates(model)[1]))
        keys2, hits2 = self.torch_redis_state()
        c = res["c_redis"]
        c["torch_redis_keys_written_by_fill"], c["redis_keyspace_hits"] = keys1 - keys0, hits2 - hits1
        # A silently broken torch Redis cache would make (c) a cold compile and the comparison moot.
        self.checks.record(f"{model} (c)fill: torch's Redis cache was written", keys1 > keys0, f"pt2:* keys {keys0} -> {keys1}")
        self.checks.record(f"{model} (c): torch's Redis cache was read", hits2 > hits1, f"Redis keyspace hits +{hits2 - hits1} over {n} runs")
        self.same_path(model, "(c)", res["c_fill"], c["runs"])

    def fresh_kilnd_figures(self, run: dict, before: str, after: str) -> None:
        hits_by_ns = {ns: common.metric_sum(after, "kiln_blob_lookups_total", tier="remote", result="hit", namespace=ns)
                      - common.metric_sum(before, "kiln_blob_lookups_total", tier="remote", result="hit", namespace=ns)
                      for ns in ("triton", "inductor-fx", "inductor-autotune", "aot-autograd", "dynamo-pgo")}
        run["fresh_kilnd"] = {
            "blob_remote_hits": {k: v for k, v in hits_by_ns.items() if v},
            "blob_misses": common.metric_sum(after, "kiln_blob_lookups_total", result="miss") - common.metric_sum(before, "kiln_blob_lookups_total", result="miss"),
            "snapshot_metrics": {k: v for k, v in common.metric_deltas(before, after, "kiln_snapshot").items() if "_bucket" not in k},
            "restores_found": common.metric_sum(after, "kiln_snapshot_restores_total", result="found") - common.metric_sum(before, "kiln_snapshot_restores_total", result="found"),
        }

    def check_fresh_host(self, model: str, what: str, run: dict) -> None:
        """A kiln process on a fresh host: kiln on, kilnd reachable, the snapshot restored, no
        Triton compile."""
        fk = run.get("fresh_kilnd", {})
        snap = run.get("snapshot") or {}
        files = snap_value(snap.get("stats"), "files")
        restored = (fk.get("restores_found", 0) > 0) or (isinstance(files, (int, float)) and files > 0)
        self.checks.record(f"{model} {what}: kiln on (KILN_TORCH=1), kilnd reachable", bool(run.get("kiln")) and not run["kiln_unreachable_warning"],
                           f"kiln.torch.installed() {run.get('kiln')} {run.get('kiln_error', '')}")
        self.checks.record(f"{model} {what}: the job's snapshot was restored on the fresh host", restored and run.get("rc") == 0,
                           f"fresh kilnd: restores found +{fk.get('restores_found', 0):.0f}, {fk.get('snapshot_metrics')}; "
                           f"kiln's stats ({snap.get('source')}): {json.dumps(snap.get('stats', snap.get('error')))[:600]}")
        self.checks.record(f"{model} {what}: zero Triton compiles (hook on Triton, every process)", run.get("compiles") == 0 and run.get("rc") == 0,
                           f"compiles {run.get('compiles')} {run.get('compiled_kernels', [])[:8]}, loads {run.get('loads')}")

    def preempt(self, model: str) -> None:
        """A kiln process SIGKILLed right after its first step (once the save made after that
        step has landed), and its successor on a fresh host."""
        res: dict = self.results["models"].setdefault(model, {})
        job = f"kiln-gpu-{model}-preempt"
        cold_est, warm_est = self.estimates(model)
        self.need(cold_est + warm_est + 15, f"{model} preemption")
        self.flush_fleet()  # the job's first process compiles everything: nothing in the fleet
        out: dict = {"job": job}
        res["preempt_killed"] = out
        p1 = self.kilnd(f"P1-{model}")
        try:
            self.empty_caches()
            marker = self.work / "results" / f"preempt-{model}-first-step.json"
            marker.unlink(missing_ok=True)
            print(f"==> {model} preemption: a kiln process on a new kilnd P1 (fleet flushed, emptied), SIGKILL after its first step "
                  f"({self.left():.0f} s left)", flush=True)
            p = self.spawn("preempted (SIGKILL after the first step)", model, "kiln", daemon=p1.uri, job=job, marker=marker, hold=True)
            proc: subprocess.Popen = p["proc"]
            bound = time.monotonic() + min(self.left() - warm_est - 20, cold_est * 2 + 60)
            while not marker.exists() and proc.poll() is None and time.monotonic() < bound:
                time.sleep(0.05)
            if not marker.exists():
                self.kill_group(proc)
                out.update(self.finish(p, 10))
                self.checks.record(f"{model} preemption: the process finished its first step", False,
                                   f"exit {out['rc']}, no marker after {time.monotonic() - p['started']:.0f} s (its log is above)")
                return
            first = json.loads(marker.read_text())
            out["first_step"] = first
            waited = self.wait_snapshot(p1.uri, job, first["first_step_end_wall"], proc, (first.get("snapshot") or {}).get("stats"))
            out["snapshot_wait"] = waited
            killed_wall = time.time()
            self.kill_group(proc, signal.SIGKILL)
            out.update(self.finish(p, 30, quiet_rc=(-signal.SIGKILL,)))
            out["killed_s_after_first_step"] = killed_wall - first["first_step_end_wall"]
            out["first_call_s"], out["dirs"] = first.get("first_call_s"), first.get("dirs")
            out["snapshot_at_first_step"] = first.get("snapshot")
            snap = waited.get("snapshot") or {}
            self.checks.record(f"{model} preemption: SIGKILLed after its first step, once its snapshot had landed",
                               out["rc"] == -signal.SIGKILL and waited.get("outcome") in LANDED,
                               f"exit {out['rc']}; {waited.get('outcome')} after {waited.get('waited_s', 0):.1f} s "
                               f"({waited.get('polls')} polls of ListSnapshots through P1); killed {out['killed_s_after_first_step']:.1f} s after the "
                               f"first step ended; snapshot files {snap.get('files')}, bytes {snap.get('total_bytes')}, roots {snap.get('roots')}"
                               + (f"; errors {waited.get('errors')}" if waited.get("errors") else ""))
        finally:
            self.stop_kilnd(p1)
        self.note_dirs(f"{model} preempted", out.get("dirs"))
        out["snapshot_through_host_a"] = self.snapshot(self.a.host_a, job)
        p2 = self.kilnd(f"P2-{model}")
        try:
            before = p2.metrics()
            succ = self.measure("SIGKILL successor, fresh host P2", model, "kiln", fresh=True, daemon=p2.uri, job=job, estimate=warm_est)
            after = p2.metrics()
        finally:
            self.stop_kilnd(p2)
        self.fresh_kilnd_figures(succ, before, after)
        res["successor"] = succ
        self.check_fresh_host(model, "SIGKILL successor", succ)
        self.same_path(model, "SIGKILL successor", out, [succ])

    def wait_snapshot(self, uri: str, job: str, since_wall: float, proc: subprocess.Popen, stats: dict | None,
                      timeout: float = 60, settle: float = 10) -> dict:
        """Polls ListSnapshots until the snapshot has landed: a save made after ``since_wall``
        (the first step's end) shows in ``updated_unix_ms``; or, when kiln saved inside the step
        (it saves after every compile), the snapshot has not changed for 3 s, past ``settle`` s
        (3 s when the process said at the marker that no save was in flight and its saves were
        done); or ``timeout``."""
        idle = isinstance(stats, dict) and stats.get("saving") is False and bool(stats.get("saves"))
        if idle:
            settle = 3.0
        t0 = time.monotonic()
        last, last_change, polls, errors = None, t0, 0, []
        snap: dict = {}
        while True:
            now = time.monotonic()
            snap = self.snapshot(uri, job)
            polls += 1
            if "error" in snap:
                errors.append(snap["error"])
                if len(errors) >= 5 and "UNIMPLEMENTED" in snap["error"]:
                    return {"outcome": "kilnd has no Snapshots service", "errors": errors[-2:], "polls": polls, "waited_s": now - t0}
            elif snap.get("found") and snap.get("files", 0) > 0:
                key = (snap["files"], snap["updated_unix_ms"])
                if key != last:
                    last, last_change = key, now
                if snap["updated_unix_ms"] >= since_wall * 1000 - 50:
                    return {"outcome": LANDED[0], "snapshot": snap, "polls": polls, "waited_s": now - t0,
                            "errors": errors[-2:]}
                if now - t0 >= settle and now - last_change >= 3:
                    return {"outcome": LANDED[1], "snapshot": snap, "polls": polls, "waited_s": now - t0,
                            "errors": errors[-2:]}
            if proc.poll() is not None and not (snap.get("found") and snap.get("files", 0) > 0):
                return {"outcome": f"the process exited ({proc.returncode}) before a save showed", "snapshot": snap, "polls": polls,
                        "waited_s": now - t0, "errors": errors[-2:]}
            if now - t0 >= timeout:
                return {"outcome": f"no save after the first step within {timeout:.0f} s", "snapshot": snap, "polls": polls, "waited_s": now - t0,
                        "errors": errors[-2:]}
            time.sleep(0.2)

    def no_cache(self, model: str) -> None:
        """(a), last: a cold compile again, the least news per second of GPU time."""
        res = self.results["models"].setdefault(model, {})
        res["a_nocache"] = self.measure("(a) no caches", model, "nocache", fresh=True, estimate=self.estimates(model)[0])

    def values_agree(self, model: str) -> None:
        res = self.results["models"].get(model, {})
        ref = res.get("cold", {}).get("value")
        if not isinstance(ref, float):
            return
        bad = {}
        for key, v in res.items():
            if not isinstance(v, dict):
                continue
            for i, r in enumerate(v.get("runs", [v])):
                x = r.get("value")
                if isinstance(x, float) and abs(x - ref) > VALUE_TOL[model] * max(abs(ref), 1e-6):
                    bad[f"{key}#{i + 1}" if "runs" in v else key] = x
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
            res["cold"] = self.measure("cold", model, "plain", fresh=True, estimate=self.estimates(model)[0])
            self.results["gpu"] = self.results.get("gpu") or res["cold"].get("gpu", "")

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
                print(f"==> herd of {n} {model} processes, {mode}, each with directories of its own ({self.left():.0f} s left)", flush=True)
                procs = []
                for i in range(n):
                    dirs = self.work / "herd" / f"{mode}-{i}"
                    shutil.rmtree(dirs, ignore_errors=True)
                    procs.append(self.spawn(f"herd-{mode}-{i}", model, mode, daemon=k.uri if k else "", job=f"kiln-gpu-herd-{model}",
                                            dirs=dirs, barrier=barrier))
                deadline = time.monotonic() + 300
                while len(list(barrier.glob("ready.*"))) < n and time.monotonic() < deadline and all(p["proc"].poll() is None for p in procs):
                    time.sleep(0.01)
                go = time.monotonic()
                (barrier / "go").write_text("")
                timeout = min(self.left() - 5, 500)
                # Each child's bound counts from the go, not from its start.
                results = [self.finish(p, timeout + (go - p["started"])) for p in procs]
                wall = time.monotonic() - go
            finally:
                if k is not None:
                    self.stop_kilnd(k)
            per_pid: dict[str, list[str]] = {}
            compiles = loads = 0
            for p in procs:
                c, l, pp = count_events(p["counts"])
                compiles, loads = compiles + c, loads + l
                per_pid.update(pp)
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


# -- kiln's snapshot stats, whatever their exact names --

def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--merge":
        if len(sys.argv) < 4:
            print("usage: torch_warmstart.py --merge OUT_MD TORCH_JSON...", file=sys.stderr)
            return 2
        return merge(Path(sys.argv[2]), [Path(a) for a in sys.argv[3:]])
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
    p.add_argument("--inductor-dir", type=Path, help="one fixed TORCHINDUCTOR_CACHE_DIR for every variant (default: unset, torch's and kiln's default)")
    p.add_argument("--models", default="gpt2,regional,convnet")
    p.add_argument("--runs", type=int, default=3, help="runs of each warm variant, (b), (c) and (d)")
    p.add_argument("--preempt", default="gpt2", help="models (of --models) that get the preemption case; empty: none")
    p.add_argument("--herd-model", default="gpt2")
    p.add_argument("--herd", type=int, default=4, help="processes in the herd; 0 skips it")
    p.add_argument("--no-a", action="store_true", help="skip variant (a), no caches")
    p.add_argument("--herd-model-strict", action="store_true", help="never fall back to the regional model for the herd")
    p.add_argument("--phases", default="main,preempt,herd,a",
                   help="main (cold, b, d, c per model), preempt, herd (runs the model's cold first if main did not), a; comma-separated")
    args = p.parse_args()
    models = [m for m in args.models.split(",") if m]
    if set(models) - set(MODELS):
        p.error(f"--models: unknown {sorted(set(models) - set(MODELS))} (known: {', '.join(MODELS)})")
    phases = {x for x in args.phases.split(",") if x}
    if phases - {"main", "preempt", "herd", "a"}:
        p.error(f"--phases: unknown {sorted(phases - {'main', 'preempt', 'herd', 'a'})}")
    if args.runs < 1:
        p.error("--runs must be at least 1")
    run = Run(args)
    run.results["phases"] = sorted(phases)
    if not pth_dirs():
        run.checks.record("kiln-torch.pth is on sys.path (KILN_TORCH=1 needs it)", False,
                          "not found in any sys.path directory: the kiln wheel is not installed where this interpreter looks")
    print(f"==> torch part: models {models}, phases {sorted(phases)}, {args.runs} runs per warm variant, "
          f"cache paths {run.results['cache_layout']}, C compiler shims {run.results['cc_shims']}", flush=True)
    status = 0

    def phase(name: str, fn, *fargs) -> None:
        try:
            fn(*fargs)
            run.save()  # what ran so far, in case the machine's time runs out before the end
        except OutOfTime as e:
            run.results["skipped"].append(str(e))
            run.checks.skip(name, str(e))
        except Exception as e:  # noqa: BLE001 - one phase's failure; the others still run
            import traceback

            traceback.print_exc()
            run.checks.record(f"{name}: ran to the end", False, f"{type(e).__name__}: {e} (traceback above)")

    try:
        if "main" in phases:
            for model in models:
                phase(f"{model}: the rest of its main variants", run.model_main, model)
        if "preempt" in phases:
            for model in [m for m in models if m in args.preempt.split(",")]:
                phase(f"{model} preemption", run.preempt, model)
        if args.herd > 0 and "herd" in phases:
            herd_model = args.herd_model if args.herd_model in models else models[-1]
            wall = run.results["models"].get(herd_model, {}).get("cold", {}).get("wall_s", 100)
            need = run.herd_estimate(wall, "kiln") + run.herd_estimate(wall, "redis")
            if herd_model != "regional" and run.left() < need and "cold" in run.results["models"].get("regional", {}) and not args.herd_model_strict:
                run.checks.info("herd model", f"not enough time for a {herd_model} herd ({run.left():.0f} s left, ~{need:.0f} s needed): the regional model instead")
                herd_model = "regional"
            phase("herd", run.herd, herd_model, args.herd)
        if not args.no_a and "a" in phases:
            for model in models:
                phase(f"{model} (a)", run.no_cache, model)
        for model in models:
            run.values_agree(model)
    except Exception as e:  # noqa: BLE001
        import traceback

        traceback.print_exc()
        run.checks.record("torch warm start ran to the end", False, f"{type(e).__name__}: {e}")
    finally:
        for k in list(run.kilnds):
            run.stop_kilnd(k)
        md = run.save()
        print("\n" + md, flush=True)
        print(run.checks.summary(), flush=True)
    if run.checks.failed:
        status = 1
    elif run.results["skipped"]:
        status = 3
    return status


if __name__ == "__main__":
    sys.exit(main())
