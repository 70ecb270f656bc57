"""The fleet herd: N Python processes x 20 Triton kernels starting at once, with kiln's Triton
backend against Triton's own RedisRemoteCacheBackend (construction bug patched, see
redis_peer.py), on the same redis-server, with the same compile-counting hook (herd_worker.py).

Phases, each with a fresh empty TRITON_CACHE_DIR per process:
- kiln, cold: empty kilnd, kiln-cache and Redis;
- kiln, warm (same host): the same kilnd again;
- kiln, warm (fresh host): a second kilnd with an empty cache directory, on the same fleet;
- Triton Redis, cold: its own empty key prefix in the same Redis;
- Triton Redis, warm: the same prefix again.

Wall time is from the barrier's release until the last process has every kernel. Prints a
markdown table; ``--json PATH`` also writes the figures.

    .venv/bin/python client/python/bench/fleet_herd.py [--processes 8] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from harness import REPO, CacheServer, Kilnd, Redis  # noqa: E402
from herd_kernels import KERNELS  # noqa: E402
from herd_run import Herd, run_herd  # noqa: E402

KILN = {
    "TRITON_CACHE_MANAGER": "triton.runtime.cache:RemoteCacheManager",
    "TRITON_REMOTE_CACHE_BACKEND": "kiln.triton:KilnRemoteCacheBackend",
}
PEER = {
    "TRITON_CACHE_MANAGER": "triton.runtime.cache:RemoteCacheManager",
    "TRITON_REMOTE_CACHE_BACKEND": "redis_peer:PatchedRedisRemoteCacheBackend",
}


def row(backend: str, phase: str, herd: Herd, n: int) -> dict:
    per = [r["compiles"] for r in herd.reports]
    have_all = all(len(r["cubins"]) == len(KERNELS) for r in herd.reports)
    same = all(r["cubins"] == herd.reports[0]["cubins"] for r in herd.reports)
    return {
        "backend": backend,
        "phase": phase,
        "processes": n,
        "kernels": len(KERNELS),
        "compiles": herd.compiles,
        "max_compiles_per_process": max(per),
        "wall_secs": round(herd.wall_secs, 3),
        "all_have_every_kernel": have_all,
        "identical_cubins": same,
    }


def markdown(rows: list[dict], ratio: float | None, n: int, preinit: bool) -> str:
    start = (
        "with Triton's own per-process key (triton_key()) computed before the barrier"
        if preinit
        else "each paying Triton's own per-process key (triton_key(), ~0.3 s of CPU) in its first compile"
    )
    lines = [
        f"Fleet herd: {n} Python processes x {len(KERNELS)} Triton kernels (sm_90, no GPU) starting at once, "
        f"each with an empty TRITON_CACHE_DIR, {start}; compiles counted by a hook on Triton's compile in every "
        f"process; {os.cpu_count()} CPUs.",
        "",
        "| backend | phase | total compiles | most by one process | wall time (s) | identical cubins |",
        "|---|---|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['backend']} | {r['phase']} | {r['compiles']} | {r['max_compiles_per_process']} | "
            f"{r['wall_secs']:.2f} | {'yes' if r['identical_cubins'] else 'NO'} |"
        )
    if ratio is not None:
        lines += ["", f"kiln's cold wall time is {ratio:.2f}x Triton Redis's (target: at most 0.25x)."]
    lines += [
        "",
        "Triton Redis is Triton 3.6.0's RedisRemoteCacheBackend with only its construction bug patched "
        "(it reads knobs.cache.redis, which 3.6.0 lacks, so unpatched it raises at construction).",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--triton-preinit",
        action="store_true",
        help="processes compute Triton's own per-process key (triton_key(), ~0.3 s of CPU each, the same with any "
        "cache) before the barrier, so the wall time holds only compiles and cache traffic",
    )
    parser.add_argument("--bin-dir", type=Path, help="kilnd and kiln-cache (default: KILN_BIN_DIR, else target/release, else target/debug)")
    args = parser.parse_args()
    if args.bin_dir is None and not os.environ.get("KILN_BIN_DIR"):
        release = REPO / "target" / "release"
        args.bin_dir = release if (release / "kilnd").is_file() else REPO / "target" / "debug"
    if args.bin_dir is not None:
        os.environ["KILN_BIN_DIR"] = str(args.bin_dir)
    n = args.processes
    opts = {"triton_preinit": args.triton_preinit}
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="kiln-herd-") as tmp:
        root = Path(tmp)
        redis = Redis(root / "redis")
        cache = kilnd = fresh = None
        try:
            cache = CacheServer(root / "kiln-cache", redis)
            kilnd = Kilnd(root / "kilnd-a", remote=cache)
            kiln_env = {**KILN, "KILN_DAEMON": kilnd.uri}
            rows.append(row("kiln", "cold", run_herd(n, root / "kiln-cold", kiln_env, **opts), n))
            rows.append(row("kiln", "warm (same host)", run_herd(n, root / "kiln-warm", kiln_env, **opts), n))
            fresh = Kilnd(root / "kilnd-b", remote=cache)
            fresh_env = {**KILN, "KILN_DAEMON": fresh.uri}
            rows.append(row("kiln", "warm (fresh host, from the fleet)", run_herd(n, root / "kiln-fresh", fresh_env, **opts), n))
            peer_env = {
                **PEER,
                "KILN_PEER_REDIS_SOCKET": str(redis.socket),
                "KILN_PEER_REDIS_KEY_FORMAT": f"triton-peer-{uuid.uuid4().hex}:{{key}}:{{filename}}",
            }
            rows.append(row("Triton Redis (patched)", "cold", run_herd(n, root / "peer-cold", peer_env, **opts), n))
            rows.append(row("Triton Redis (patched)", "warm", run_herd(n, root / "peer-warm", peer_env, **opts), n))
        finally:
            for p in (fresh, kilnd, cache):
                if p is not None:
                    p.stop()
            redis.kill9()
    ratio = rows[0]["wall_secs"] / rows[3]["wall_secs"] if rows[3]["wall_secs"] else None
    print(markdown(rows, ratio, n, args.triton_preinit))
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "benchmark": "fleet_herd",
                    "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
                    "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
                    "processes": n,
                    "kernels": len(KERNELS),
                    "triton_preinit": args.triton_preinit,
                    "rows": rows,
                    "kiln_cold_over_peer_cold": ratio,
                },
                indent=2,
            )
            + "\n"
        )
    ok = all(r["all_have_every_kernel"] and r["identical_cubins"] for r in rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
