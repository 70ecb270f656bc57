"""``python -m kiln doctor``: what this Python environment and its kilnd look like to kiln.

Prints the daemon URI and where it came from, whether kilnd answers (its toolchains, GPUs,
tiers and fleet cache), the versions of kiln, grpcio and protobuf, whether Triton and torch
import (and whether kiln supports that torch), and the environment variables that switch kiln
on. With ``KILN_TORCH=1`` (and the graph path not off), it sends a tiny torch graph through
kilnd's torch workers and says what came back. Exits 1 when kilnd does not answer or that graph
fails, 0 otherwise.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import os
import sys
from typing import Any

from . import __version__, settings
from .paths import DAEMON_ENV, daemon_uri

#: Variables kiln reads (:mod:`kiln.settings`), and the value each needs to switch kiln on where
#: one does.
SWITCHES: dict[str, str | None] = {**{s.name: None for s in settings.SETTINGS}, **settings.FOREIGN}


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _probe_import(module: str) -> dict[str, Any]:
    try:
        mod = importlib.import_module(module)
    except Exception as e:  # noqa: BLE001 - any failure to import is the answer
        return {"importable": False, "error": f"{type(e).__name__}: {e}"}
    return {"importable": True, "version": str(getattr(mod, "__version__", "?"))}


def gather(timeout: float = 5.0, torch_timeout: float = 300.0) -> dict[str, Any]:
    """Everything doctor reports, as a dict (``--json`` prints it)."""
    from . import errors
    from .client import Client

    uri = daemon_uri()
    report: dict[str, Any] = {
        "kiln": {"version": __version__, "location": os.path.dirname(os.path.abspath(__file__))},
        "grpcio": _version("grpcio"),
        "protobuf": _version("protobuf"),
        "python": sys.version.split()[0],
        "daemon": {"uri": uri, "from": DAEMON_ENV if os.environ.get(DAEMON_ENV) else "default socket rule"},
    }
    try:
        with Client(uri) as client:
            stats = client.stats(timeout=timeout)
            # Asked before the graph check below starts them: whether a job starting now finds them up.
            workers = client.warm_torch_workers(start=False, timeout=timeout)
        report["daemon"].update(
            reachable=True,
            version=stats.version,
            toolchains=[{"name": t.name, "version": t.version, "fingerprint": t.fingerprint} for t in stats.toolchains],
            gpus=[{"index": g.index, "name": g.name, "target": g.target} for g in stats.gpus],
            default_target=stats.default_target,
            tiers=[{"tier": t.tier, "entries": t.entries, "bytes": t.bytes} for t in stats.tiers],
            remote=stats.remote,
            remote_up=stats.remote_up,
            remote_state=stats.remote_state,
            remote_reason=stats.remote_reason,
            torch_workers=workers,
        )
    except (errors.KilnError, ValueError) as e:
        report["daemon"].update(reachable=False, error=str(e))
    report["triton"] = _probe_import("triton")
    torch = _probe_import("torch")
    if torch["importable"]:
        from .torch import UnsupportedTorchVersion, check_version, tested_versions_text

        try:
            check_version(torch["version"])
            torch["supported"] = True
        except UnsupportedTorchVersion:
            torch["supported"] = False
        torch["tested"] = tested_versions_text()
    report["torch"] = torch
    report["env"] = {name: os.environ.get(name) for name in SWITCHES}
    graph_path = report["env"]["KILN_TORCH"] not in (None, "", "0") and report["env"]["KILN_TORCH_GRAPHS"] != "0"
    if graph_path and torch.get("supported") and report["daemon"].get("reachable"):
        report["torch_graph"] = _torch_graph_check(uri, torch_timeout)
    return report


def _torch_graph_check(uri: str, timeout: float) -> dict[str, Any]:
    """Sends a tiny graph through kilnd's torch workers as ``KILN_TORCH=1`` would (Dynamo's graph,
    serialized, compiled by a worker, answered with torch's artifacts): whether the graph path
    works end to end, and what a first graph costs. The first call starts the workers."""
    import time

    import torch

    from . import errors
    from ._torch_calls import TorchGraphRequest
    from .client import Client
    from .torch._ask import environment
    from .torch._payload import serialize

    payloads: list[bytes] = []

    def capture(gm: Any, inputs: list[Any]) -> Any:
        payloads.append(serialize(gm, inputs, {}))
        return gm

    device = "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.randn(16, 16, device=device, requires_grad=True)
    torch.compile(lambda t: torch.nn.functional.gelu(t).sum(), backend=capture)(x)
    triton, python, cuda = environment()
    started = time.perf_counter()
    try:
        with Client(uri) as client:
            graph = TorchGraphRequest(
                payloads[0],
                torch.__version__,
                job="kiln-doctor",
                name="doctor:tiny",
                triton_version=triton,
                python_version=python,
                cuda_version=cuda,
            )
            answer = client.compile_torch_graph(graph, timeout=timeout)
    except errors.KilnError as e:
        return {"ok": False, "device": device, "error": str(e)}
    seconds = time.perf_counter() - started
    if not answer.ok:
        last = answer.log.strip().splitlines()[-1:] or ["no log"]
        return {"ok": False, "device": device, "error": f"the worker's compile failed: {last[0]}", "seconds": seconds}
    return {
        "ok": True,
        "device": device,
        "seconds": seconds,
        "tier": str(answer.tier),
        "compile_seconds": answer.compile_seconds,
    }


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _fleet(d: dict[str, Any]) -> str:
    """The fleet cache's line: a refused token is a configuration error, said with its reason."""
    if not d["remote"]:
        return "none (no --remote)"
    state = d.get("remote_state") or ("up" if d["remote_up"] else "down")
    reason = d.get("remote_reason") or ""
    word = {"up": "up", "refused": "REFUSED TOKEN", "starting": "not answered yet"}.get(state, "DOWN")
    return f"{d['remote']} ({word})" + (f": {reason}" if reason else "")


def render(report: dict[str, Any]) -> str:
    lines = []
    d = report["daemon"]
    lines.append(f"daemon      {d['uri']}  (from {d['from']})")
    if d.get("reachable"):
        lines.append(f"  answers   yes, kilnd {d['version']}")
        for t in d["toolchains"]:
            fp = t["fingerprint"][:16] or "(known once its workers start)"
            lines.append(f"  toolchain {t['name']:<7} {t['version']}  fingerprint {fp}")
        gpus = ", ".join(f"{g['index']}: {g['name']} ({g['target']})" for g in d["gpus"]) or "none"
        lines.append(f"  gpus      {gpus}")
        lines.append(f"  target    {d['default_target'] or '(none: graphs must name one)'}")
        tiers = ", ".join(f"{t['tier']} {t['entries']} entries" for t in d["tiers"])
        lines.append(f"  tiers     {tiers}")
        lines.append(f"  fleet     {_fleet(d)}")
    else:
        lines.append(f"  answers   NO: {d['error']}")
    lines.append(f"kiln        {report['kiln']['version']}  ({report['kiln']['location']})")
    lines.append(f"grpcio      {report['grpcio']}   protobuf {report['protobuf']}   python {report['python']}")
    for name in ("triton", "torch"):
        p = report[name]
        if p["importable"]:
            extra = ""
            if name == "torch":
                extra = "  (supported)" if p["supported"] else f"  (NOT supported by kiln.torch; tested: {p['tested']})"
            lines.append(f"{name:<11} {p['version']}{extra}")
        else:
            lines.append(f"{name:<11} not importable ({p['error']})")
    env = report["env"]
    triton_on = all(env[k] == SWITCHES[k] for k in ("TRITON_CACHE_MANAGER", "TRITON_REMOTE_CACHE_BACKEND"))
    lines.append(
        f"triton via kiln  {_yes(triton_on)}"
        + ("" if triton_on else "  (set TRITON_CACHE_MANAGER and TRITON_REMOTE_CACHE_BACKEND; see the README)")
    )
    torch_on = env["KILN_TORCH"] not in (None, "", "0")
    lines.append(
        f"torch via kiln   {_yes(torch_on)}" + ("" if torch_on else "  (KILN_TORCH=1, or kiln.torch.install())")
    )
    if torch_on:
        from .torch._layout import BadSetting, chosen

        try:
            layouts = chosen().describe()
        except BadSetting as e:
            layouts = f"NONE: {e}"
        lines.append(f"  graphs through kilnd for layouts: {layouts}")
        if d.get("reachable"):
            up = d.get("torch_workers")
            lines.append(
                f"  kilnd's torch workers: up (torch {up})"
                if up
                else "  kilnd's torch workers: not up when asked (one process's graphs stay in the process until they are; "
                "torch_prestart = true in kilnd.toml starts them with kilnd)"
            )
    graph = report.get("torch_graph")
    if graph is not None:
        if graph["ok"]:
            lines.append(
                f"  a tiny graph on {graph['device']} through kilnd's torch workers: {graph['seconds']:.1f} s "
                f"({graph['tier']}; the worker's compile {graph['compile_seconds']:.1f} s)"
            )
        else:
            lines.append(f"  a tiny graph on {graph['device']} through kilnd's torch workers: FAILED: {graph['error']}")
    for name, value in env.items():
        if value is not None:
            lines.append(f"  {name}={value}")
    if not d.get("reachable"):
        lines.append("")
        lines.append(f"error: kilnd is not reachable at {d['uri']}: start kilnd, or point {DAEMON_ENV} at it")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kiln doctor", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for kilnd (default 5)")
    parser.add_argument(
        "--torch-timeout",
        type=float,
        default=300.0,
        help="seconds for the tiny torch graph's compile, which may start kilnd's torch workers (default 300)",
    )
    args = parser.parse_args(argv)
    report = gather(args.timeout, args.torch_timeout)
    print(json.dumps(report, indent=2) if args.json else render(report))
    graph_failed = not report.get("torch_graph", {"ok": True})["ok"]
    return 0 if report["daemon"].get("reachable") and not graph_failed else 1
