"""The checked-in gRPC stubs are what scripts/gen-python-stubs writes from proto/ today."""

import filecmp
import subprocess

from harness import PYTHON_DIR, REPO

STUBS = PYTHON_DIR / "src" / "kiln" / "_proto"


def test_checked_in_stubs_are_fresh(tmp_path) -> None:
    out = tmp_path / "stubs"
    run = subprocess.run([str(REPO / "scripts" / "gen-python-stubs"), str(out)], capture_output=True, text=True)
    assert run.returncode == 0, f"scripts/gen-python-stubs failed:\n{run.stderr}"
    generated = sorted(p.name for p in out.iterdir())
    checked_in = sorted(p.name for p in STUBS.iterdir() if p.is_file() and p.suffix in (".py", ".pyi"))
    assert generated == checked_in, f"stub files differ: generated {generated}, checked in {checked_in}"
    _, stale, missing = filecmp.cmpfiles(out, STUBS, generated, shallow=False)
    assert not stale and not missing, (
        f"client/python/src/kiln/_proto is stale ({', '.join(stale + missing)} differ from proto/): "
        "run scripts/gen-python-stubs and commit the result"
    )


def test_stub_imports_are_package_relative() -> None:
    for path in STUBS.glob("*.py*"):
        for line in path.read_text().splitlines():
            assert not line.startswith(("from kiln.v1", "import kiln.v1")), f"{path.name}: {line}"
