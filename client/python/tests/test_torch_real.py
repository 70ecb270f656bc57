"""kiln.torch with a real torch 2.11 (skipped where torch is not installed: torch is not
installable on the CI machine; the GPU hosts run this).

Two fresh processes, each with an empty Inductor cache directory, run the same torch.compile
with KILN_TORCH=1: the first stores its FX graph (and AOTAutograd) entries through kilnd, the
second gets them from kiln and counts remote hits in torch's own cache statistics.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from harness import Kilnd

import kiln.torch

torch = pytest.importorskip("torch", reason="torch is not installed in this interpreter (the GPU hosts run this test)")

JOB = """
    import json, torch
    from torch._inductor.remote_cache import cache_stats
    device = "cuda" if torch.cuda.is_available() else "cpu"

    def f(x, y):
        return (x.sin() + y.cos()).relu() * 2

    out = torch.compile(f)(torch.randn(256, device=device), torch.randn(256, device=device))
    print(json.dumps({n: {"hit": s.hit, "miss": s.miss, "put": s.put} for n, s in cache_stats._stats.items()}))
"""


def run_job(kilnd: Kilnd, cache_dir: Path) -> dict[str, dict[str, int]]:
    env = {**os.environ, "KILN_TORCH": "1", "KILN_DAEMON": kilnd.uri, "TORCHINDUCTOR_CACHE_DIR": str(cache_dir)}
    env["TRITON_CACHE_DIR"] = str(cache_dir / "triton")
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(JOB)], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_a_fresh_process_gets_the_compiled_graph_from_kiln(kilnd: Kilnd, tmp_path: Path) -> None:
    from kiln.torch import UnsupportedTorchVersion, check_version

    try:
        check_version(torch.__version__)
    except UnsupportedTorchVersion as e:
        # An untested torch must be refused by install(), loudly, not half-patched.
        with pytest.raises(UnsupportedTorchVersion):
            kiln.torch.install()
        assert torch.__version__ in str(e)
        return
    first = run_job(kilnd, tmp_path / "first")
    assert first["KilnFxGraphCache"]["put"] >= 1, first
    second = run_job(kilnd, tmp_path / "second")
    assert second["KilnFxGraphCache"]["hit"] >= 1 and second["KilnFxGraphCache"]["miss"] == 0, second
