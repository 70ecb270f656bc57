"""The plumbing of torch_warmstart.py: what it runs and how, apart from the scenarios.

A `Harness` starts the measured processes (torch_child.py) in their own process groups with a
clean environment, counting shims for the C compilers first on PATH and the cache directories
removed where a scenario says so; times them against the run's deadline; starts and stops the
kilnds of the fleet; talks to Redis; and keeps every raw figure in `results` (written as
torch.json by `save`). The scenarios (torch_warmstart.py's `Run`) only say which processes run in
which order and what must hold.
"""

from __future__ import annotations

import argparse
import getpass
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
from torch_report import MULTI, median, render  # noqa: E402

HERE = Path(__file__).resolve().parent

MODELS = ("gpt2", "regional", "convnet")

#: Variables of the caller's environment that would change what a child does.
STRIP_PREFIXES = ("TORCHINDUCTOR_", "TRITON_", "TORCH_COMPILE_", "TORCH_DYNAMO_", "KILN_")
KEEP_NAMES = ("KILN_LOG", "KILN_GPU_PROFILE_DIR")
STRIP_NAMES = ("CC", "CXX")  # Triton and Inductor would run these instead of the counting shims

TORCH_REDIS_FLAGS = {
    "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE": "1",
    "TORCHINDUCTOR_AUTOTUNE_REMOTE_CACHE": "1",
    "TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE": "1",
    "TORCH_DYNAMO_AUTOMATIC_DYNAMIC_REMOTE_PGO": "1",
}

#: C compilers Triton (its driver helpers, launchers) and Inductor (C++) may run.
COMPILERS = ("cc", "gcc", "c++", "g++", "clang", "clang++")

#: Relative difference of a variant's loss (checksum) from the cold run's that still counts as
#: the same computation (bf16 training: kernels may differ in rounding, never in result).
VALUE_TOL = {"gpt2": 2e-2, "regional": 1e-3, "convnet": 2e-2}

#: Before a model's first process: seconds of wall per process on an H100 (run 4: process walls
#: with a normal exit, which the measured processes now skip), for the time budget.
GPU_COLD_WALL = {"gpt2": 60, "convnet": 60, "regional": 35}
GPU_WARM_WALL = {"gpt2": 25, "convnet": 25, "regional": 22}


#: wait_snapshot's outcomes that count as the snapshot having landed: a save made after the first
#: step's end, or (kiln saved inside the step, and the save after it changed nothing) one that has
#: not changed for seconds.
LANDED = ("saved after the first step", "saved during the first step, unchanged since")



class OutOfTime(Exception):
    pass


def pth_dirs() -> list[str]:
    """Directories on sys.path holding kiln-torch.pth (a ``pip install --target`` dir)."""
    return [p for p in sys.path if p and os.path.isfile(os.path.join(p, "kiln-torch.pth"))]


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-")


def count_events(d: Path) -> tuple[int, int, dict[str, list[str]]]:
    """Triton compiles and loads the sitecustomize hook wrote, and the compiled kernels per pid."""
    compiles, loads, per_pid = 0, 0, {}
    if d.is_dir():
        for f in d.glob("*.txt"):
            lines = f.read_text(errors="replace").splitlines()
            per_pid[f.stem] = [ln.split(" ", 1)[1] for ln in lines if ln.startswith("compile ")]
            compiles += sum(1 for ln in lines if ln.startswith("compile "))
            loads += sum(1 for ln in lines if ln.startswith("load "))
    return compiles, loads, per_pid


def cc_runs(log: Path) -> list[str]:
    """The C compiler runs the shims logged (one line each: pid, compiler, arguments)."""
    return log.read_text(errors="replace").splitlines() if log.exists() else []


def default_inductor_dirs() -> list[Path]:
    """Where torch (``tempfile.gettempdir()``) and kiln (``/tmp``) put Inductor's directory when
    ``TORCHINDUCTOR_CACHE_DIR`` is unset: ``<tmp>/torchinductor_<user>``."""
    user = re.sub(r'[\\/:*?"<>|]', "_", getpass.getuser())
    return sorted({Path(tempfile.gettempdir()) / f"torchinductor_{user}", Path("/tmp") / f"torchinductor_{user}"})


def removable(p: Path) -> bool:
    """A cache directory this script may remove: absolute, at least two levels deep, not a home."""
    p = Path(os.path.abspath(p))
    return len(p.parts) >= 3 and p != Path.home() and str(p) not in ("/tmp", "/var/tmp", "/root", "/home")


class Harness:
    def __init__(self, args: argparse.Namespace) -> None:
        self.a = args
        self.work: Path = args.work
        self.work.mkdir(parents=True, exist_ok=True)
        self.deadline = time.monotonic() + args.deadline_s
        self.checks = common.Checks("torch.compile warm start" + (" (CPU, tiny models: harness check only)" if args.device == "cpu" else ""))
        self.results: dict = {"device": args.device, "tiny": args.tiny, "runs_per_variant": args.runs, "models": {}, "herd": {}, "skipped": []}
        self.serial = 0
        self.kilnds: list[common.Kilnd] = []
        # The fixed paths every variant shares, emptied before each fresh-host process.
        self.triton_home = self.work / "triton-home"
        self.inductor_dir: Path | None = args.inductor_dir.resolve() if args.inductor_dir else None
        self.cache_paths: list[Path] = [self.triton_home] + ([self.inductor_dir] if self.inductor_dir else default_inductor_dirs())
        self.results["cache_layout"] = {
            "TORCHINDUCTOR_CACHE_DIR": str(self.inductor_dir) if self.inductor_dir else "unset (default)",
            "TRITON_CACHE_DIR": "unset (default: <inductor dir>/triton/<device> for Inductor's kernels)",
            "TRITON_HOME": str(self.triton_home),
            "emptied before each fresh-host process": [str(p) for p in self.cache_paths],
        }
        self.shims = self.make_cc_shims()

    def save(self) -> str:
        """torch.md and torch.json as they stand; returns the tables."""
        md = render(self.results)
        self.results["checks"] = self.checks.to_json()
        (self.a.out / "torch.md").write_text(md + "\n" + self.checks.summary() + "\n")
        common.write_json(self.a.out / "torch.json", self.results)
        return md

    # -- time --

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def need(self, seconds: float, what: str) -> None:
        if self.left() < seconds:
            raise OutOfTime(f"{what}: needs about {seconds:.0f} s, {self.left():.0f} s left")

    # -- the fresh host: directories and compilers --

    def make_cc_shims(self) -> Path:
        """A directory, first on the children's PATH, with a shim per C compiler found on PATH:
        it appends a line to $KILN_GPU_CC_LOG and runs the real compiler (the next one on
        PATH). Only compilers that exist get a shim, so Triton's and Inductor's choice of
        compiler is the one they would make without it."""
        d = self.work / "cc-shims"
        d.mkdir(parents=True, exist_ok=True)
        found = []
        for name in COMPILERS:
            real = shutil.which(name)
            if real is None:
                continue
            found.append(f"{name}={real}")
            shim = d / name
            shim.write_text(
                "#!/bin/sh\n"
                "# tests/gpu (torch_warmstart.py): count a C compiler run, then run the real compiler.\n"
                f'name="{name}"\n'
                f'self_dir="{d}"\n'
                'if [ -n "${KILN_GPU_CC_LOG:-}" ]; then printf \'%s %s %s\\n\' "$$" "$name" "$*" >>"$KILN_GPU_CC_LOG" 2>/dev/null || true; fi\n'
                'IFS=:\n'
                'for dir in $PATH; do\n'
                '  [ -z "$dir" ] && continue\n'
                '  [ "$dir" = "$self_dir" ] && continue\n'
                '  if [ -x "$dir/$name" ] && [ ! -d "$dir/$name" ]; then exec "$dir/$name" "$@"; fi\n'
                'done\n'
                'echo "tests/gpu cc shim: no real $name on PATH ($PATH)" >&2\n'
                'exit 127\n'
            )
            shim.chmod(0o755)
        self.results["cc_shims"] = found
        if not found:
            self.checks.info("C compiler shims", "no C compiler on PATH: none to count (Triton needs one to build its launchers)")
        return d

    def empty_caches(self) -> None:
        """A fresh host: the cache paths removed, and beside each what kiln keeps there (its
        restore's host lock and staging directories, its saver's lock), which a fresh host
        does not have either."""
        for p in self.cache_paths:
            leftovers = list(p.parent.glob(f".kiln-snapshot-{p.name}*")) + list(p.parent.glob(".kiln-torch-save-*.lock"))
            for q in [p] + leftovers:
                if q.is_symlink() or q.is_file():
                    q.unlink()
                elif q.exists():
                    shutil.rmtree(q)
            if p.exists():
                raise RuntimeError(f"could not empty {p}")

    def note_dirs(self, who: str, dirs: dict | None) -> None:
        """Adds the cache directories a process reports to those emptied before a fresh host,
        unless one already emptied holds them."""
        for key in ("inductor", "triton"):
            value = (dirs or {}).get(key)
            if not value:
                continue
            p = Path(value)
            if any(p == q or q in p.parents for q in self.cache_paths):
                continue
            if not removable(p):
                self.checks.info("cache directory", f"{who} used {p}, which this script will not remove: fresh-host runs may see it")
                continue
            self.cache_paths.append(p)
            self.results["cache_layout"]["emptied before each fresh-host process"].append(str(p))
            self.checks.info("cache directory", f"{who} used {p}: now emptied before each fresh-host process too")

    # -- processes --

    def env(self, mode: str, counts: Path, daemon: str = "", job: str = "", dirs: Path | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if k in KEEP_NAMES or not (k.startswith(STRIP_PREFIXES) or k in STRIP_NAMES)}
        env["PYTHONPATH"] = os.pathsep.join([str(self.a.sitecustomize)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        env["PATH"] = os.pathsep.join([str(self.shims)] + [p for p in env.get("PATH", "").split(os.pathsep) if p])
        env["KILN_GPU_COUNT_DIR"] = str(counts)
        env["KILN_GPU_CC_LOG"] = str(counts / "cc.log")
        env["PYTHONUNBUFFERED"] = "1"
        if dirs is not None:  # the herd: every process a host of its own
            env["TORCHINDUCTOR_CACHE_DIR"] = str(dirs / "inductor")
            env["TRITON_CACHE_DIR"] = str(dirs / "triton")
            env["TRITON_HOME"] = str(dirs / "triton-home")
        else:
            env["TRITON_HOME"] = str(self.triton_home)
            if self.inductor_dir is not None:
                env["TORCHINDUCTOR_CACHE_DIR"] = str(self.inductor_dir)
        if mode == "nocache":
            env["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] = "1"
        elif mode == "redis":
            env.update(TORCH_REDIS_FLAGS)
            env["TORCHINDUCTOR_REDIS_HOST"] = "127.0.0.1"
            env["TORCHINDUCTOR_REDIS_PORT"] = str(self.a.redis_port)
        elif mode == "kiln":
            # What a user sets: KILN_TORCH=1 (kiln-torch.pth does the rest at start-up), the job,
            # and where kilnd is (a real host has it at the default socket).
            env["KILN_TORCH"] = "1"
            env["KILN_TORCH_JOB"] = job
            env["KILN_DAEMON"] = daemon
            env["KILN_GPU_KILN"] = "1"
            env["KILN_GPU_SITEDIRS"] = os.pathsep.join(pth_dirs())
        elif mode != "plain":
            raise ValueError(mode)
        return env

    def spawn(self, label: str, model: str, mode: str, *, daemon: str = "", job: str = "", dirs: Path | None = None,
              barrier: Path | None = None, marker: Path | None = None, hold: bool = False, fast_exit: bool = False) -> dict:
        self.serial += 1
        name = f"{self.serial:02d}-{model}-{slug(label)}"
        counts = self.work / "counts" / name
        counts.mkdir(parents=True, exist_ok=True)
        result = self.work / "results" / f"{name}.json"
        result.parent.mkdir(parents=True, exist_ok=True)
        log = self.work / f"{name}.log"
        args = [self.a.python, str(HERE / "torch_child.py"), "--model", model, "--device", self.a.device, "--result", str(result)]
        if self.a.tiny:
            args.append("--tiny")
        if barrier is not None:
            args += ["--barrier", str(barrier)]
        if marker is not None:
            args += ["--marker", str(marker)]
        if hold:
            args.append("--hold")
        if fast_exit:
            args.append("--fast-exit")
        env = self.env(mode, counts, daemon, job, dirs)
        shown = {k: env[k] for k in sorted(env) if k.startswith(("KILN_", "TORCHINDUCTOR_", "TRITON_", "TORCH_"))}
        with open(log, "wb") as f:
            f.write(f"$ {' '.join(args)}\n# env: {json.dumps(shown)}\n".encode())
            f.flush()
            started_wall = time.time()
            # A session of its own, so the process and its compile workers can be killed together.
            proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=str(self.work),
                                    start_new_session=True)
        return {"label": label, "model": model, "mode": mode, "name": name, "proc": proc, "result": result, "log": log,
                "counts": counts, "started": time.monotonic(), "started_wall": started_wall, "daemon": daemon, "job": job}

    @staticmethod
    def kill_group(proc: subprocess.Popen, sig: int = signal.SIGKILL) -> bool:
        try:
            os.killpg(proc.pid, sig)
            return True
        except (ProcessLookupError, PermissionError):
            return False

    def reap_group(self, proc: subprocess.Popen, grace: float) -> int:
        """After the leader exited: waits up to ``grace`` s for the rest of its session (compile
        workers) to leave, then kills what is left. Returns 1 when it had to kill, else 0."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < grace:
            try:
                os.killpg(proc.pid, 0)
            except (ProcessLookupError, PermissionError):
                return 0
            time.sleep(0.1)
        killed = self.kill_group(proc)
        return 1 if killed else 0

    def finish(self, p: dict, timeout: float, quiet_rc: tuple = ()) -> dict:
        proc: subprocess.Popen = p["proc"]
        try:
            rc = proc.wait(max(1.0, timeout - (time.monotonic() - p["started"])))
        except subprocess.TimeoutExpired:
            self.kill_group(proc)
            proc.wait()
            rc = "timeout"
            print(f"--- {p['model']} {p['label']}: killed after {timeout:.0f} s (the time bound)", flush=True)
        ended_wall = time.time()
        wall = time.monotonic() - p["started"]
        strays = self.reap_group(proc, 2.0)
        out: dict = {"rc": rc, "wall_s": wall, "log": p["log"].name, "mode": p["mode"], "job": p["job"] or None,
                     "daemon": p["daemon"] or None, "stray_processes_killed": bool(strays)}
        if rc == 0 and p["result"].exists():
            out.update(json.loads(p["result"].read_text()))
            out["startup_s"] = out.get("start_wall", p["started_wall"]) - p["started_wall"]
            if "end_wall" in out:
                out["exit_s"] = ended_wall - out["end_wall"]
        elif rc not in quiet_rc:
            tail = p["log"].read_text(errors="replace")[-5000:]
            print(f"--- {p['model']} {p['label']}: exit {rc} after {wall:.0f} s; the end of {p['log'].name}:\n{tail}\n---", flush=True)
        text = p["log"].read_text(errors="replace")
        out["kiln_unreachable_warning"] = "kilnd is unreachable" in text
        out["compiles"], out["loads"], per_pid = count_events(p["counts"])
        out["compiled_kernels"] = sorted({k for ks in per_pid.values() for k in ks})
        cc = cc_runs(p["counts"] / "cc.log")
        out["cc_runs"], out["cc_lines"] = len(cc), [ln[:300] for ln in cc[:12]]
        return out

    def measure(self, label: str, model: str, mode: str, *, fresh: bool, estimate: float, daemon: str = "", job: str = "",
                fast_exit: bool = True) -> dict:
        """One process of one variant: empties the cache paths first when ``fresh``."""
        self.need(estimate, f"{model} {label}")
        if fresh:
            self.empty_caches()
        timeout = min(self.left() - 5, 420)
        print(f"==> {model} {label}: mode {mode}{', emptied' if fresh else ', caches kept'}{', job ' + job if job else ''}"
              f"{', kilnd ' + daemon if daemon else ''} ({self.left():.0f} s left)", flush=True)
        p = self.spawn(label, model, mode, daemon=daemon, job=job, fast_exit=fast_exit)
        out = self.finish(p, timeout)
        out["fresh"] = fresh
        self.note_dirs(f"{model} {label}", out.get("dirs"))
        ok = out["rc"] == 0 and isinstance(out.get("value"), float) and math.isfinite(out["value"])
        self.checks.record(f"{model} {label}: the process runs the step", ok,
                           f"first call {out.get('first_call_s', float('nan')):.2f} s (start-up {out.get('startup_s', float('nan')):.1f}, "
                           f"import {out.get('import_s', float('nan')):.1f}, set-up {out.get('setup_s', float('nan')):.1f}), wall {out['wall_s']:.0f} s, "
                           f"Triton compiles {out['compiles']}, loads {out['loads']}, C compiler runs {out['cc_runs']}, value {out.get('value')}, "
                           f"inductor dir {out.get('dirs', {}).get('inductor')}")
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
        self.checks.record(f"kilnd {k.name} exits 0 on SIGTERM", rc == 0, f"exit {rc}" + ("" if rc == 0 else f"; its log's end:\n{k.log.read_text(errors='replace')[-3000:]}"))
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

    def snapshot(self, uri: str, job: str) -> dict:
        """The job's snapshot as kilnd at ``uri`` lists it: the newest, or ``{"error": ...}``."""
        try:
            snaps = common.list_snapshots(uri, job)
        except Exception as e:  # noqa: BLE001 - reported; an old kilnd answers UNIMPLEMENTED
            return {"error": f"ListSnapshots({job}) through {uri}: {type(e).__name__}: {e}"}
        if not snaps:
            return {"found": False}
        s = max(snaps, key=lambda x: x["updated_unix_ms"])
        return {"found": True, "environments": len(snaps), **s}

    # -- phases --

    def estimates(self, model: str) -> tuple[float, float]:
        """Seconds of wall for a cold and for a warm process of ``model``, from what ran so far."""
        res = self.results["models"].get(model, {})
        if self.a.device == "cpu":
            cold, warm = 90.0, 40.0
        else:
            cold, warm = float(GPU_COLD_WALL[model]), float(GPU_WARM_WALL[model])
        colds = [res[k]["wall_s"] for k in ("cold", "d_fill", "c_fill") if isinstance(res.get(k, {}).get("wall_s"), float) and res[k].get("rc") == 0]
        if colds:
            cold = max(max(colds) * 1.3, 20)
        warms = [r["wall_s"] for k in MULTI for r in res.get(k, {}).get("runs", []) if r.get("rc") == 0]
        if warms:
            warm = max(max(warms) * 1.3 + 3, 12)
        elif colds:
            c = res.get("cold", {})
            if isinstance(c.get("import_s"), float) and isinstance(c.get("setup_s"), float):
                warm = max(c.get("startup_s", 1) + c["import_s"] + c["setup_s"] + 0.3 * c.get("first_call_s", 10) + 8, 12)
        return cold, warm

    def add_run(self, res: dict, key: str, run: dict) -> None:
        v = res.setdefault(key, {"runs": []})
        v["runs"].append(run)
        v["first_call_s_runs"] = [r.get("first_call_s") for r in v["runs"]]
        # The median of the runs that ran the step (a run that did not is a failed check).
        v["first_call_s"] = median([r.get("first_call_s") for r in v["runs"] if r.get("rc") == 0])
        v["failed_runs"] = sum(1 for r in v["runs"] if r.get("rc") != 0)
        for field in ("compiles", "loads", "cc_runs"):
            v[field] = sum(r.get(field, 0) for r in v["runs"])
        for field in ("startup_s", "import_s", "setup_s", "wall_s"):
            v[field] = median([r.get(field) for r in v["runs"]])

    def same_path(self, model: str, what: str, ref: dict, runs: list[dict]) -> None:
        want = (ref.get("dirs") or {}).get("inductor")
        got = [(r.get("dirs") or {}).get("inductor") for r in runs if r.get("rc") == 0]
        self.checks.record(f"{model} {what}: ran at its fill's absolute Inductor path, as a real fresh host would", bool(want) and all(g == want for g in got),
                           f"fill {want}, runs {got}")
