"""kiln.torch_artifacts against a real kilnd, with the fake torch's mega-cache calls: a process
that compiled stores its artifacts at exit, and the next process of the same job loads them."""

from __future__ import annotations

import json

from harness import Kilnd
from test_torch_adapter import run_with_fake_torch

RESTORE = """
import json
from kiln import torch_artifacts
torch_artifacts.restore_once()
print(json.dumps(torch_artifacts.stats()))
"""


def run(kilnd: Kilnd, tmp_path, job: str, **env: str) -> dict:
    loaded = tmp_path / "loaded"
    loaded.unlink(missing_ok=True)
    out = run_with_fake_torch(
        RESTORE, {"KILN_DAEMON": kilnd.uri, "KILN_TORCH_JOB": job, "FAKE_TORCH_LOADED": str(loaded), **env}
    )
    assert out.returncode == 0, out.stderr
    stats = json.loads(out.stdout.strip().splitlines()[-1])
    stats["bytes_loaded"] = loaded.read_bytes() if loaded.exists() else None
    return stats


def test_a_job_stores_its_artifacts_at_exit_and_the_next_process_loads_them(kilnd: Kilnd, tmp_path) -> None:
    first = run(kilnd, tmp_path, "train-gpt2", FAKE_TORCH_ARTIFACTS="artifacts-v1")
    assert not first["loaded"] and first["bytes_loaded"] is None
    second = run(kilnd, tmp_path, "train-gpt2")
    assert second["loaded"] and second["bytes_loaded"] == b"artifacts-v1"
    # A process that compiled nothing new leaves the stored set alone; one that did replaces it.
    assert run(kilnd, tmp_path, "train-gpt2")["bytes_loaded"] == b"artifacts-v1"
    run(kilnd, tmp_path, "train-gpt2", FAKE_TORCH_ARTIFACTS="artifacts-v2")
    assert run(kilnd, tmp_path, "train-gpt2")["bytes_loaded"] == b"artifacts-v2"
    # Another job, or the switch off, loads nothing.
    assert run(kilnd, tmp_path, "other-job")["bytes_loaded"] is None
    assert run(kilnd, tmp_path, "train-gpt2", KILN_TORCH_ARTIFACTS="0")["bytes_loaded"] is None
