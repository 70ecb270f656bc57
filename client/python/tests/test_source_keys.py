"""kiln.torch._source_keys: torch's and Triton's source hashes travel in the job's snapshot, are checked
against this host's packages by the restore process, and are handed to the first compile. With
tests/fake_torch (whose ``torch_key()`` names the threads that computed it, and has torch's
setter), the real Triton of this interpreter, real kilnds and a real kiln-cache."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

from harness import Kilnd
from test_torch_adapter import _pth_installed
from test_torch_snapshot import run_script

from kiln.torch import _source_keys

TRITON_KEY = """
import json, sys
from triton.runtime.cache import triton_key
print(json.dumps(triton_key()))
"""


def real_triton_key() -> str:
    run = subprocess.run([sys.executable, "-c", TRITON_KEY], capture_output=True, text=True, check=True)
    return json.loads(run.stdout)


def test_the_fingerprint_sees_each_files_size_and_time_and_not_bytecode(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub" / "__pycache__").mkdir(parents=True)
    (pkg / "__init__.py").write_text("x = 1\n")
    (pkg / "sub" / "mod.py").write_text("y = 2\n")
    first = _source_keys.fingerprint(str(pkg))
    (pkg / "sub" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"bytecode")
    assert _source_keys.fingerprint(str(pkg)) == first, "bytecode is written at run time"
    (pkg / "sub" / "mod.py").write_text("y = 3\n")  # same size, later time
    os.utime(pkg / "sub" / "mod.py", ns=(1, 1))
    second = _source_keys.fingerprint(str(pkg))
    assert second != first
    (pkg / "sub" / "mod.py").write_text("y = 33\n")
    os.utime(pkg / "sub" / "mod.py", ns=(1, 1))
    assert _source_keys.fingerprint(str(pkg)) not in (first, second)
    copy = tmp_path / "copy"
    shutil.copytree(pkg, copy, copy_function=shutil.copy2)
    assert _source_keys.fingerprint(str(copy)) != _source_keys.fingerprint(str(pkg)), "another path"


def test_a_package_is_found_without_importing_it() -> None:
    before = set(sys.modules)
    directory = _source_keys.package_dir("triton")
    assert directory is not None and os.path.isfile(os.path.join(directory, "__init__.py"))
    assert ("triton" in sys.modules) == ("triton" in before)
    assert _source_keys.package_dir("no_such_package_here") is None


def test_a_fresh_host_is_handed_both_keys_and_computes_neither(kilnd: Kilnd, kilnd_fresh: Kilnd, tmp_path: Path) -> None:
    _pth_installed()
    job = f"keys-{uuid.uuid4().hex[:8]}"
    inductor, home = tmp_path / "inductor", tmp_path / "home"
    env = {"KILN_TORCH_JOB": job, "TORCHINDUCTOR_CACHE_DIR": str(inductor), "FAKE_TORCH_TRITON": "1"}
    first = run_script(tmp_path, {**env, "KILN_DAEMON": kilnd.uri})
    assert first["computed_in"] == ["MainThread"] and first["triton_key_given"] is False
    restore = first["stats"]["restore"]
    assert set(restore["fingerprints"]) == {"torch", "triton"} and restore["source_keys"] == {}
    memo = json.loads((inductor / _source_keys.MEMO_NAME).read_text())
    expected_triton = real_triton_key()
    assert memo["keys"]["torch"][0]["key"] == b"fake torch key".hex()
    assert memo["keys"]["triton"][0]["key"] == expected_triton
    assert memo["keys"]["triton"][0]["fingerprint"] == restore["fingerprints"]["triton"]["fingerprint"]

    # A fresh host: same paths, nothing in them, another kilnd of the fleet.
    shutil.rmtree(inductor)
    shutil.rmtree(home)
    second = run_script(tmp_path, {**env, "KILN_DAEMON": kilnd_fresh.uri})
    assert second["counters"] == {"hit": 1, "miss": 0}
    assert second["stats"]["restore"]["source_keys_given"] == {"torch": "given", "triton": "given"}
    assert second["computed_in"] == [], "torch_key was handed over, never computed"
    assert second["triton_key_given"] is True and second["triton_key"] == expected_triton
    assert second["stderr"] == ""


def test_keys_remembered_for_other_packages_are_not_handed_over(kilnd: Kilnd, tmp_path: Path) -> None:
    _pth_installed()
    job = f"keys-{uuid.uuid4().hex[:8]}"
    inductor = tmp_path / "inductor"
    env = {"KILN_TORCH_JOB": job, "TORCHINDUCTOR_CACHE_DIR": str(inductor), "FAKE_TORCH_TRITON": "1", "KILN_DAEMON": kilnd.uri}
    run_script(tmp_path, env)
    memo_path = inductor / _source_keys.MEMO_NAME
    memo = json.loads(memo_path.read_text())
    # Another installation: the fingerprints differ (and the values with them).
    for entries in memo["keys"].values():
        entries[0]["fingerprint"] = "0" * 64
        entries[0]["key"] = "00"
    memo_path.write_text(json.dumps(memo))
    again = run_script(tmp_path, env)
    assert again["stats"]["restore"]["source_keys"] == {}
    assert again["computed_in"] == ["MainThread"] and again["triton_key_given"] is False
    assert again["triton_key"] == real_triton_key()
    # The save then adds this installation's values beside the others.
    memo = json.loads(memo_path.read_text())
    assert [len(memo["keys"][name]) for name in ("torch", "triton")] == [2, 2]


def test_the_switch_turns_it_off(kilnd: Kilnd, tmp_path: Path) -> None:
    _pth_installed()
    inductor = tmp_path / "inductor"
    env = {
        "KILN_TORCH_JOB": f"keys-{uuid.uuid4().hex[:8]}", "TORCHINDUCTOR_CACHE_DIR": str(inductor),
        "KILN_DAEMON": kilnd.uri, "KILN_TORCH_SOURCE_KEYS": "0",
    }
    run_script(tmp_path, env)
    again = run_script(tmp_path, env)
    assert "fingerprints" not in again["stats"]["restore"] and again["computed_in"] == ["MainThread"]
    assert not (inductor / _source_keys.MEMO_NAME).exists()
