"""python -m kiln doctor, against a live kilnd and a dead socket."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys

from harness import Kilnd

from kiln import Client

#: The Triton this environment has, as its installer recorded it (doctor asks the module).
TRITON = importlib.metadata.version("triton")


def doctor(uri: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KILN_DAEMON": uri}
    return subprocess.run([sys.executable, "-m", "kiln", "doctor", *args], env=env, capture_output=True, text=True)


def test_doctor_reports_a_live_daemon(kilnd: Kilnd) -> None:
    run = doctor(kilnd.uri)
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    with Client(kilnd.uri) as client:
        # The target kilnd picked for this host's GPU (or none), as doctor must show it.
        target = client.stats().default_target or "(none: graphs must name one)"
    assert f"daemon      {kilnd.uri}  (from KILN_DAEMON)" in out
    assert "answers   yes" in out and "toolchain nvrtc" in out and f"target    {target}\n" in out
    assert "fleet     http://127.0.0.1:" in out and "(up)" in out
    assert "grpcio      1." in out and f"triton      {TRITON}\n" in out


def test_doctor_json(kilnd: Kilnd) -> None:
    run = doctor(kilnd.uri, "--json")
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["daemon"]["reachable"] is True
    assert {t["name"] for t in report["daemon"]["toolchains"]} == {"nvrtc", "ptxas", "triton"}
    assert report["triton"] == {"importable": True, "version": TRITON}
    assert set(report["env"]) >= {"TRITON_CACHE_MANAGER", "TRITON_REMOTE_CACHE_BACKEND", "KILN_TORCH"}


def test_doctor_exits_1_with_a_clear_message_when_kilnd_is_down(tmp_path) -> None:
    uri = f"unix://{tmp_path}/none.sock"
    run = doctor(uri)
    assert run.returncode == 1
    assert f"error: kilnd is not reachable at {uri}" in run.stdout
    assert "answers   NO" in run.stdout


def test_a_refused_fleet_token_is_shown_with_its_reason() -> None:
    from kiln.doctor import _fleet

    base = {"remote": "http://cache:7171", "remote_up": False}
    refused = _fleet({**base, "remote_state": "refused", "remote_reason": "the fleet refused kilnd's token"})
    assert refused == "http://cache:7171 (REFUSED TOKEN): the fleet refused kilnd's token"
    assert _fleet({**base, "remote_state": "up", "remote_up": True}) == "http://cache:7171 (up)"
    # A kilnd from before remote_state says only up or down.
    assert _fleet(base) == "http://cache:7171 (DOWN)"
    assert _fleet({"remote": "", "remote_up": False}) == "none (no --remote)"


def test_with_kiln_torch_doctor_sends_a_tiny_graph_through_the_torch_workers(kilnd: Kilnd) -> None:
    env_run = subprocess.run(
        [sys.executable, "-m", "kiln", "doctor", "--json"],
        env={**os.environ, "KILN_DAEMON": kilnd.uri, "KILN_TORCH": "1"},
        capture_output=True,
        text=True,
    )
    assert env_run.returncode == 0, env_run.stdout + env_run.stderr
    graph = json.loads(env_run.stdout)["torch_graph"]
    assert graph["ok"] is True and graph["device"] == "cpu", graph
    assert graph["tier"] in ("compiled", "joined", "memory", "disk", "remote") and graph["compile_seconds"] > 0, graph
    # Without KILN_TORCH the graph path is not what the user runs: not tried.
    assert "torch_graph" not in json.loads(doctor(kilnd.uri, "--json").stdout)
    # The check started the workers: a job starting now finds them up, and doctor says so.
    again = subprocess.run(
        [sys.executable, "-m", "kiln", "doctor"], env={**os.environ, "KILN_DAEMON": kilnd.uri, "KILN_TORCH": "1"}, capture_output=True, text=True
    )
    assert "kilnd's torch workers: up (torch 2." in again.stdout, again.stdout
