"""kiln.torch without torch: the storage adapter against a real kilnd, and install() and the
KILN_TORCH switch against tests/fake_torch, a stand-in with torch 2.11's remote-cache
interfaces. (Real torch runs in test_torch_real.py where it is installed.)"""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
from harness import Kilnd

import kiln
from kiln import _fleet
from kiln.torch import KilnStore, UnsupportedTorchVersion, check_version

FAKE_TORCH = Path(__file__).resolve().parent / "fake_torch"


def run_with_fake_torch(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH", "KILN_TORCH", "TRITON_"))}
    full_env.update(env)
    full_env["PYTHONPATH"] = os.pathsep.join([str(FAKE_TORCH), *filter(None, [os.environ.get("PYTHONPATH")])])
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full_env, capture_output=True, text=True)


def test_versions() -> None:
    check_version("2.11.0+cu130")
    check_version("2.11.3")
    for bad in ("2.10.0", "2.12.0", "3.0.0", "nonsense"):
        with pytest.raises(UnsupportedTorchVersion, match=r"tested with torch 2\.11\.x") as e:
            check_version(bad)
        assert bad in str(e.value) and "KILN_TORCH_UNTESTED" in str(e.value)
    check_version("2.12.0", allow_untested=True)


def test_the_store_round_trips_through_kilnd(client: kiln.Client, fleet_env: Kilnd) -> None:
    store = KilnStore("inductor-fx", "2.11.0+cu130", "fx-graph-v1")
    key = uuid.uuid4().hex
    assert store.get(key) is None
    store.put(key, b'{"graph": 1}')
    assert store.get(key) == b'{"graph": 1}'
    (entry,) = client.get_blobs("inductor-fx", "2.11.0+cu130", [f"fx-graph-v1::{key}"])
    assert entry is not None and entry.files == {"": b'{"graph": 1}'}


def test_the_store_is_quiet_when_kilnd_is_down(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KILN_DAEMON", f"unix://{tmp_path}/none.sock")
    _fleet.reset_for_tests()
    try:
        store = KilnStore("inductor-fx", "2.11.0", "fx-graph-v1")
        assert store.get("k") is None
        store.put("k", b"x")
        assert store.get("k") is None
    finally:
        _fleet.reset_for_tests()


INSTALL = """
    import json, os
    import kiln.torch
    replaced = kiln.torch.install()
    import torch._inductor.config as ic, torch._functorch.config as fc, torch._dynamo.config as dc
    import torch._inductor.remote_cache as rc
    key = os.environ["KEY"]
    cache = rc.create_cache("fx-graph-v1", False, "FbRemoteFxGraphCache", "RemoteFxGraphCache")
    before = cache.get(key)
    cache.put(key, {"graph": "compiled", "n": 3})
    print(json.dumps({
        "replaced": replaced,
        "classes": {n: getattr(rc, n).__name__ for n in replaced},
        "flags": [ic.fx_graph_remote_cache, ic.autotune_remote_cache, ic.bundled_autotune_remote_cache,
                  fc.enable_remote_autograd_cache, dc.automatic_dynamic_remote_pgo],
        "before": before,
        "again": rc.create_cache("fx-graph-v1", False, "Fb", "RemoteFxGraphCache").get(key),
        "installed_twice": kiln.torch.install(),
        "triton_backend": os.environ.get("TRITON_REMOTE_CACHE_BACKEND"),
    }))
"""


def test_install_replaces_the_remote_caches_and_switches_them_on(client: kiln.Client, kilnd: Kilnd) -> None:
    key = uuid.uuid4().hex
    run = run_with_fake_torch(INSTALL, {"KILN_DAEMON": kilnd.uri, "KEY": key})
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert sorted(out["replaced"]) == sorted(
        ["RemoteFxGraphCache", "RemoteAutotuneCache", "RemoteBundledAutotuneCache", "RemoteAOTAutogradCache", "RemoteDynamoPGOCache"]
    )
    assert out["classes"]["RemoteFxGraphCache"] == "KilnFxGraphCache"
    # Every unset flag on, except the bundled autotune cache (see kiln.torch).
    assert out["flags"] == [True, True, None, True, True]
    assert out["before"] is None and out["again"] == {"graph": "compiled", "n": 3}
    assert out["installed_twice"] == []
    assert out["triton_backend"] == "kiln.triton:KilnRemoteCacheBackend"
    (entry,) = client.get_blobs("inductor-fx", "2.11.0+cu130", [f"fx-graph-v1::{key}"])
    assert entry is not None and json.loads(entry.files[""]) == {"graph": "compiled", "n": 3}


def test_install_leaves_flags_the_user_set(kilnd: Kilnd) -> None:
    code = """
        import kiln.torch, torch._inductor.config as ic
        kiln.torch.install()
        print(ic.fx_graph_remote_cache, ic.autotune_remote_cache)
    """
    run = run_with_fake_torch(code, {"KILN_DAEMON": kilnd.uri, "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE": "0"})
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["False", "True"]


def test_install_refuses_an_untested_torch(kilnd: Kilnd) -> None:
    code = """
        import kiln.torch
        try:
            kiln.torch.install()
        except kiln.torch.UnsupportedTorchVersion as e:
            print("refused:", e)
    """
    run = run_with_fake_torch(code, {"KILN_DAEMON": kilnd.uri, "FAKE_TORCH_VERSION": "2.9.1"})
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("refused: kiln.torch is tested with torch 2.11.x, and this is torch 2.9.1")


def _pth_installed() -> Path:
    for d in site.getsitepackages():
        if (Path(d) / "kiln-torch.pth").is_file():
            return Path(d) / "kiln-torch.pth"
    pytest.fail(
        f"kiln-torch.pth is not in the site-packages of {sys.executable}: install the package "
        "(scripts/test pip-installs client/python into .venv/)"
    )


SWITCHED = """
    import json, os, sys
    import torch._inductor.config as ic
    import torch._inductor.remote_cache as rc
    print(json.dumps({
        "fx_flag": ic.fx_graph_remote_cache,
        "fx_class": rc.RemoteFxGraphCache.__name__,
        "triton_backend": os.environ.get("TRITON_REMOTE_CACHE_BACKEND"),
        "grpc_loaded": "grpc" in sys.modules,
        "setup_charged": sorted(sys.modules["kiln._import_hooks"].spent) if "kiln._import_hooks" in sys.modules else None,
    }))
"""


def test_kiln_torch_switch_plugs_kiln_in_with_no_code_change(kilnd: Kilnd) -> None:
    _pth_installed()
    run = run_with_fake_torch(SWITCHED, {"KILN_DAEMON": kilnd.uri, "KILN_TORCH": "1"})
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out == {
        "fx_flag": True,
        "fx_class": "KilnFxGraphCache",
        "triton_backend": "kiln.triton:KilnRemoteCacheBackend",
        "grpc_loaded": False,  # nothing talks to kilnd until a cache is used
        # kiln's set-up is timed where it runs (graph_stats()["setup_s"]): at start and per hook
        "setup_charged": ["start", "torch._inductor.config", "torch._inductor.remote_cache"],
    }
    assert run.stderr == ""


def test_without_the_switch_nothing_changes_and_kiln_is_not_imported(kilnd: Kilnd) -> None:
    _pth_installed()
    code = textwrap.dedent(SWITCHED) + "print('kiln' in sys.modules)\n"
    for value in (None, "0"):
        env = {"KILN_DAEMON": kilnd.uri} | ({"KILN_TORCH": value} if value else {})
        run = run_with_fake_torch(code, env)
        assert run.returncode == 0, run.stderr
        first, second = run.stdout.splitlines()
        out = json.loads(first)
        assert out["fx_flag"] is None and out["fx_class"] == "RemoteFxGraphCache" and out["triton_backend"] is None
        assert out["setup_charged"] is None
        assert second == "False"


def test_the_switch_with_an_untested_torch_warns_once_and_stays_off(kilnd: Kilnd) -> None:
    _pth_installed()
    run = run_with_fake_torch(SWITCHED, {"KILN_DAEMON": kilnd.uri, "KILN_TORCH": "1", "FAKE_TORCH_VERSION": "2.13.0"})
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["fx_flag"] is None and out["fx_class"] == "RemoteFxGraphCache"
    assert run.stderr.count("kiln: KILN_TORCH is set but kiln stays off") == 1, run.stderr
    assert "2.13.0" in run.stderr and "2.11.x" in run.stderr
