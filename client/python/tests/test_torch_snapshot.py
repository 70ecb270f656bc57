"""kiln.torch.snapshot under KILN_TORCH=1, with tests/fake_torch (torch 2.11's compile callbacks
and a fake compile that reads and writes the Inductor and Triton cache directories) and real
kilnds: the restore starts at interpreter start-up and is joined at the first compile, the cache
directory defaults to the same path on every host, the process saves after its compile, and a
fresh host compiles nothing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from harness import Kilnd
from test_torch_adapter import FAKE_TORCH, _pth_installed

import kiln
from kiln.torch import _job

SCRIPT = """
    import json, os, sys, time
    import kiln.torch.snapshot as ts
    started_at_startup = ts._state.restore_proc is not None
    import torch

    def step(x):
        return x + 1

    def other(x):
        return x * 2

    torch.compile(step)(1)
    if os.environ.get("SECOND_MODEL"):
        torch._dynamo.reset()
        torch.compile(other)(1)
    ts.wait_for_saves(30)
    import torch._dynamo.convert_frame as cf
    import torch._inductor.codecache as cc
    from torch._inductor.runtime import triton_compat as tc
    print(json.dumps({
        "started_at_startup": started_at_startup,
        "counters": cf.counters,
        "stats": ts.stats(),
        "computed_in": cc.computed_in,
        "triton_key": tc.triton_key() if tc.HAS_TRITON else None,
        "triton_key_given": tc.HAS_TRITON and getattr(tc.triton_key, "kiln_given", False),
    }), flush=True)
    if os.environ.get("HOLD_SECS"):
        time.sleep(float(os.environ["HOLD_SECS"]))
"""


def run_script(tmp_path: Path, env: dict[str, str], wait: bool = True, as_module: bool = False) -> subprocess.Popen[str] | dict:
    """Runs SCRIPT as a main script (or as ``python -m train``) under KILN_TORCH=1 with the fake
    torch; its last line."""
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SCRIPT))
    full = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH", "KILN_TORCH", "TRITON_"))}
    full.update({"KILN_TORCH": "1", "HOME": str(tmp_path / "home"), "PYTHONPATH": f"{FAKE_TORCH}{os.pathsep}{tmp_path}"})
    full.update(env)
    command = [sys.executable, "-m", "train"] if as_module else [sys.executable, str(script)]
    proc = subprocess.Popen(command, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if not wait:
        return proc
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    result["stderr"] = err
    return result


def keys() -> dict[str, str]:
    # The child's key parts: the same interpreter and packages as this one (the fake torch has
    # no distribution metadata, so "none").
    return _job.keys()


def test_a_fresh_host_restores_before_its_first_compile_and_compiles_nothing(
    kilnd: Kilnd, kilnd_fresh: Kilnd, tmp_path: Path
) -> None:
    _pth_installed()
    job = f"torch-{uuid.uuid4().hex[:8]}"
    inductor, home = tmp_path / "inductor", tmp_path / "home"
    env = {"KILN_TORCH_JOB": job, "TORCHINDUCTOR_CACHE_DIR": str(inductor)}
    first = run_script(tmp_path, {**env, "KILN_DAEMON": kilnd.uri, "SECOND_MODEL": "1"})
    assert first["started_at_startup"] and first["counters"] == {"hit": 0, "miss": 2}
    stats = first["stats"]
    assert stats["job"] == job and stats["restore"]["found"] is False and stats["joined"] and stats["saver"] is True
    assert stats["roots"] == {"inductor": str(inductor), "triton": str(home / ".triton" / "cache")}
    assert stats["saves"] and stats["saves"][0]["files_uploaded"] >= 3, stats
    with kiln.Client(kilnd.uri) as c:
        manifest = c.snapshot_show(job, keys()).manifest
    assert manifest is not None, "a save after the compile (kept across torch._dynamo.reset())"
    assert {(f.root, f.path) for f in manifest.files} >= {
        ("inductor", "fxgraph/step.json"), ("inductor", "fxgraph/other.json"), ("inductor", "triton/0/STEP/step.cubin"),
        ("triton", "LAUNCHER/cuda_utils.so"),
    }
    assert not any(p.endswith(".tmp") for p in (f.path for f in manifest.files))
    # A fresh host: same paths, nothing in them, another kilnd of the fleet.
    shutil.rmtree(inductor)
    shutil.rmtree(home)
    second = run_script(tmp_path, {**env, "KILN_DAEMON": kilnd_fresh.uri})
    assert second["started_at_startup"] and second["counters"] == {"hit": 1, "miss": 0}, second
    restore = second["stats"]["restore"]
    assert restore["found"] and restore["files"] >= 4 and restore["relocated"] == [] and not restore["running"]
    assert "waited_s" in restore and second["stats"]["saves"] == [], "nothing new: nothing saved"
    assert (home / ".triton" / "cache" / "LAUNCHER" / "cuda_utils.so").exists()
    assert second["stderr"] == ""
    # The same job started as `python -m train` on another fresh host restores at start-up too.
    shutil.rmtree(inductor)
    shutil.rmtree(home)
    third = run_script(tmp_path, {**env, "KILN_DAEMON": kilnd_fresh.uri}, as_module=True)
    assert third["started_at_startup"] and third["counters"] == {"hit": 1, "miss": 0}, third
    assert third["stats"]["restore"]["found"] and third["stderr"] == ""


def test_the_job_is_the_scripts_content_and_dirs_default_to_one_path(tmp_path: Path) -> None:
    _pth_installed()
    code = "import os, kiln.torch.snapshot as ts; print(os.environ.get('TORCHINDUCTOR_CACHE_DIR'), ts._state.job)"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH", "KILN_TORCH", "TRITON_"))}
    script = tmp_path / "probe.py"
    script.write_text(code)
    down = {**env, "KILN_TORCH": "1", "KILN_DAEMON": f"unix://{tmp_path}/none.sock"}
    probe = subprocess.run([sys.executable, str(script)], env=down, capture_output=True, text=True)
    assert probe.returncode == 0, probe.stderr
    assert probe.stderr == "", "kilnd is down, but a process that never compiles never warns"
    directory, job = probe.stdout.split()
    assert directory == _job.default_inductor_dir() and directory.startswith("/tmp/torchinductor_")
    assert job == _job.job_of_script(str(script)) and job.startswith("script:")
    # The same bytes at another path are the same job; -c has no job until it compiles.
    other = tmp_path / "elsewhere" / "probe.py"
    other.parent.mkdir()
    other.write_text(code)
    assert _job.job_of_script(str(other)) == job
    inline = subprocess.run([sys.executable, "-c", code], env={**env, "KILN_TORCH": "1"}, capture_output=True, text=True)
    assert inline.stdout.split()[1] == "None"
    off_env = {**env, "KILN_TORCH": "1", "KILN_TORCH_SNAPSHOT": "0"}
    off = subprocess.run([sys.executable, str(script)], env=off_env, capture_output=True, text=True)
    assert off.stdout.split() == ["None", "None"], "KILN_TORCH_SNAPSHOT=0: no default, no restore"


def test_one_process_per_host_saves(kilnd: Kilnd, tmp_path: Path) -> None:
    _pth_installed()
    env = {"KILN_DAEMON": kilnd.uri, "KILN_TORCH_JOB": f"torch-{uuid.uuid4().hex[:8]}"}
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / "ind")
    holder = run_script(tmp_path, {**env, "HOLD_SECS": "30"}, wait=False)
    assert isinstance(holder, subprocess.Popen) and holder.stdout is not None
    first = json.loads(holder.stdout.readline())
    assert first["stats"]["saver"] is True
    second = run_script(tmp_path, env)
    assert second["stats"]["saver"] is False and second["stats"]["saves"] == []
    holder.kill()
    holder.wait()


def test_kilnd_down_is_a_cold_start_and_one_warning(tmp_path: Path) -> None:
    _pth_installed()
    env = {"KILN_DAEMON": f"unix://{tmp_path}/none.sock", "KILN_TORCH_JOB": "j", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "ind")}
    out = run_script(tmp_path, {**env, "SECOND_MODEL": "1"})
    assert out["counters"] == {"hit": 0, "miss": 2}
    assert out["stderr"].count("kilnd is unreachable") == 1, out["stderr"]
    assert "Traceback" not in out["stderr"]


def test_a_restore_slower_than_the_wait_bound_is_stopped_before_it_places_anything(
    client: kiln.Client, kilnd: Kilnd, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first compile waits at most KILN_TORCH_RESTORE_WAIT_SECS; the restore process is then
    told to stop and places nothing, so the compile never meets files appearing under it. Here it
    waits on the host lock another rank holds."""
    from kiln.torch import snapshot as ts
    from kiln._snapshot_place import lock_path, release, try_flock

    job, inductor = f"torch-{uuid.uuid4().hex[:8]}", tmp_path / "ind"
    (inductor / "fxgraph").mkdir(parents=True)
    (inductor / "fxgraph" / "g.json").write_bytes(os.urandom(100))
    client.snapshot_save(job, {"inductor": str(inductor)}, keys())
    shutil.rmtree(inductor)
    monkeypatch.setattr(ts, "_state", ts._State())
    for name, value in {ts.WAIT_ENV: "0.5", "KILN_DAEMON": kilnd.uri, "KILN_TORCH_JOB": job}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(inductor))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(inductor / "triton"))
    held = try_flock(lock_path(str(tmp_path), "ind"))
    assert held is not None
    try:
        ts._start_restore(job)
        started = time.monotonic()
        ts.join()
        assert time.monotonic() - started < 5
    finally:
        release(held)
    restore = ts.stats()["restore"]
    assert restore["timed_out"] and restore.get("cancelled"), restore
    assert not inductor.exists()


def test_install_in_code_restores_at_the_first_compile(kilnd: Kilnd, tmp_path: Path) -> None:
    """Without KILN_TORCH, kiln.torch.install() restores at the first compile (no start-up
    overlap) and saves after it."""
    job = f"torch-{uuid.uuid4().hex[:8]}"
    env = {"KILN_TORCH_JOB": job, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "ind"), "KILN_DAEMON": kilnd.uri}
    assert run_script(tmp_path, env)["counters"] == {"hit": 0, "miss": 1}
    shutil.rmtree(tmp_path / "ind")
    code = """
        import json, kiln.torch, torch
        kiln.torch.install()

        def step(x):
            return x + 1

        torch.compile(step)(1)
        import torch._dynamo.convert_frame as cf
        print(json.dumps({"counters": cf.counters, "stats": kiln.torch.snapshot_stats()}))
    """
    full = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH", "KILN_TORCH", "TRITON_"))}
    full.update(env, HOME=str(tmp_path / "home"), PYTHONPATH=str(FAKE_TORCH))
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["counters"] == {"hit": 1, "miss": 0}
    assert out["stats"]["restore"]["found"] and out["stats"]["joined"]


def test_helper_processes_restore_only_if_they_compile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # torch and its tools start `python -c`/`-m` helpers that inherit KILN_TORCH_JOB and never
    # compile: they must not restore at start-up (each would ask kilnd and stat every file).
    monkeypatch.setenv(_job.JOB_ENV, "job-x")
    script = tmp_path / "train.py"
    script.write_text("print('train')\n")
    assert _job.job_at_startup([str(script)]) == "job-x"
    for argv in (["-c", "import torch"], ["-m", "torch.distributed.run"], [""]):
        assert _job.job_at_startup(argv, ["python", *argv]) is None, argv
    # The job's own module restores at start-up like a script; torch's, Triton's, kiln's and the
    # standard library's do not, however the command line spells -m.
    for orig in (["python", "-m", "train"], ["python", "-u", "-m", "pkg.train", "--lr", "1"], ["python", "-um", "train"],
                 ["python", "-mtrain"], ["python", "-X", "dev", "-m", "train"], ["python", "-Wignore", "-m", "train"]):
        assert _job.job_at_startup(["-m"], orig) == "job-x", orig
    for orig in (["python", "-m", "torch._inductor.compile_worker"], ["python", "-m", "triton.tools.compile"],
                 ["python", "-m", "kiln", "doctor"], ["python", "-m", "multiprocessing.forkserver"],
                 ["python", "-m", "json.tool"], ["python", "-c", "x", "-m", "train"], ["python", "-m"]):
        assert _job.job_at_startup(["-m"], orig) is None, orig
    monkeypatch.delenv(_job.JOB_ENV)
    assert _job.job_at_startup(["-m"], ["python", "-m", "train"]) is None


def test_the_save_runs_on_a_thread_at_the_lowest_priority_and_leaves_the_job_s_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import threading

    import kiln.torch.snapshot as ts

    seen: list[tuple[int, int]] = []

    def record() -> None:
        seen.append((threading.get_native_id(), os.getpriority(os.PRIO_PROCESS, threading.get_native_id())))

    state = ts._State()
    state.joined, state.job = True, "nice-test"
    monkeypatch.setattr(ts, "_state", state)
    monkeypatch.setattr(ts, "SAVE_DELAY_SECS", 0.0)
    monkeypatch.setattr(ts, "_save_if_changed", record)
    before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    ts.compile_started()
    ts.request_save()
    saver = state.save_thread
    assert saver is not None, "a save was scheduled"
    saver.join(timeout=30)
    assert not saver.is_alive()
    assert len(seen) == 1 and seen[0][0] != threading.get_native_id(), seen
    assert seen[0][1] == 19, f"the save ran at nice {seen[0][1]}"
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == before, "the job's own thread changed"
