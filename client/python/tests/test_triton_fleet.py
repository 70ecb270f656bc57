"""The Triton drop-in end to end: real Python processes running triton.compile with
TRITON_CACHE_MANAGER/TRITON_REMOTE_CACHE_BACKEND pointing at kiln, real kilnds, kiln-cache and
redis-server. Compiles are counted by a hook on Triton (ASTSource.make_ir), never by kiln."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from harness import PYTHON_DIR, Kilnd

sys.path.insert(0, str(PYTHON_DIR / "bench"))
from herd_kernels import KERNELS  # noqa: E402
from herd_run import Herd, run_herd  # noqa: E402

KILN_TRITON = {
    "TRITON_CACHE_MANAGER": "triton.runtime.cache:RemoteCacheManager",
    "TRITON_REMOTE_CACHE_BACKEND": "kiln.triton:KilnRemoteCacheBackend",
}
WARNING = "kiln: kilnd is unreachable"


@pytest.fixture(scope="module")
def herd(kilnd: Kilnd, tmp_path_factory: pytest.TempPathFactory) -> Herd:
    """4 processes, each with an empty Triton cache, compile the same 20 kernels at once."""
    return run_herd(4, tmp_path_factory.mktemp("herd"), {**KILN_TRITON, "KILN_DAEMON": kilnd.uri})


def test_a_herd_of_four_compiles_each_kernel_once(herd: Herd) -> None:
    per_process = [r["compiles"] for r in herd.reports]
    assert herd.compiles == len(KERNELS) == 20, f"compiles per process: {per_process}"
    compiled = sorted(name for r in herd.reports for name in r["compiled"])
    assert len(set(compiled)) == len(compiled), f"a kernel compiled twice: {compiled}"
    assert not any(WARNING in e for e in herd.stderr), herd.stderr


def test_every_process_of_the_herd_has_the_same_cubins(herd: Herd) -> None:
    first = herd.reports[0]["cubins"]
    assert len(first) == 20
    for r in herd.reports[1:]:
        assert r["cubins"] == first, "cubins differ between processes"


def test_a_fresh_host_gets_every_kernel_from_the_fleet(herd: Herd, kilnd_fresh: Kilnd, tmp_path: Path) -> None:
    """A second kilnd with an empty cache directory, on the same kiln-cache: a fresh host."""
    fresh = run_herd(1, tmp_path, {**KILN_TRITON, "KILN_DAEMON": kilnd_fresh.uri})
    (report,) = fresh.reports
    assert report["compiles"] == 0, f"compiled {report['compiled']}"
    assert report["cubins"] == herd.reports[0]["cubins"]
    assert WARNING not in fresh.stderr[0]


def test_with_kilnd_stopped_triton_compiles_locally_with_one_warning(tmp_path: Path) -> None:
    stopped = Kilnd(tmp_path / "kilnd-stopped")
    uri = stopped.uri
    assert stopped.stop() == 0
    job = run_herd(1, tmp_path / "job", {**KILN_TRITON, "KILN_DAEMON": uri}, only=4)
    (report,) = job.reports
    assert report["compiles"] == 4 and len(report["cubins"]) == 4
    assert job.stderr[0].count(WARNING) == 1, job.stderr[0]
    assert "Traceback" not in job.stderr[0], job.stderr[0]
