"""kiln._torch_prewarm: Triton's source hash, computed in the background once ``torch.compile()``
imports Inductor's codecache, with the real Triton of this interpreter (whose ``triton_key()``
hashes its sources and ``libtriton.so``) and tests/fake_torch (whose ``torch_key()`` names the
thread that computed it: the compile's, always)."""

from __future__ import annotations

import json

from harness import Kilnd
from test_torch_adapter import _pth_installed, run_with_fake_torch

COMPILE = """
    import json, os, sys
    if os.environ.get("IMPORT_TRITON"):
        import triton.runtime.cache
    import torch
    if os.environ.get("INSTALL"):
        import kiln.torch
        kiln.torch.install(snapshots=False)
    compiled = torch.compile(lambda x: x + 1)
    from kiln import _torch_prewarm
    done = _torch_prewarm.wait(60)
    compiled(1)
    import torch._inductor.codecache as cc
    out = {"done": done, "computed_in": cc.computed_in, "stats": _torch_prewarm.stats()}
    if "triton.runtime.cache" in sys.modules:
        info = sys.modules["triton.runtime.cache"].triton_key.cache_info()
        out["triton_key"] = {"hits": info.hits, "misses": info.misses}
    print(json.dumps(out))
"""


def compile_once(kilnd: Kilnd, **env: str) -> dict:
    run = run_with_fake_torch(COMPILE, {"KILN_DAEMON": kilnd.uri, "KILN_TORCH_SNAPSHOT": "0", **env})
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_triton_key_is_computed_in_the_background_before_the_first_compile(kilnd: Kilnd) -> None:
    _pth_installed()
    out = compile_once(kilnd, KILN_TORCH="1", IMPORT_TRITON="1")
    assert out["done"] is True
    # Triton's memo: computed once, by kiln's thread, before the compile.
    assert out["triton_key"] == {"hits": 0, "misses": 1}
    stats = out["stats"]
    assert stats["done"] is True and "error" not in stats, stats
    assert stats["triton_key_s"] > 0
    # torch_key stays with the compile (many small reads: slower in a thread than inline).
    assert out["computed_in"] == ["MainThread"]


def test_without_triton_imported_the_thread_imports_nothing(kilnd: Kilnd) -> None:
    _pth_installed()
    out = compile_once(kilnd, KILN_TORCH="1")
    assert "triton_key" not in out
    assert out["stats"]["triton_key"] == "skipped: triton.runtime.cache not imported"


def test_the_switch_turns_it_off(kilnd: Kilnd) -> None:
    _pth_installed()
    out = compile_once(kilnd, KILN_TORCH="1", KILN_TORCH_PREWARM="0", IMPORT_TRITON="1")
    assert out["triton_key"] == {"hits": 0, "misses": 0}
    assert out["stats"] == {}


def test_install_in_code_prewarms_too(kilnd: Kilnd) -> None:
    out = compile_once(kilnd, INSTALL="1", IMPORT_TRITON="1")
    assert out["triton_key"] == {"hits": 0, "misses": 1}
    assert "triton_key_s" in out["stats"]


def test_without_kiln_nothing_is_computed_early(kilnd: Kilnd) -> None:
    out = compile_once(kilnd, IMPORT_TRITON="1")
    assert out["triton_key"] == {"hits": 0, "misses": 0}
    assert out["stats"] == {}
