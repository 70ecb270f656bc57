"""The restore of a torch.compile snapshot, as its own process (``python -m kiln.torch._restore
'{"job": ..., "roots": {...}}'``), started by :mod:`kiln.torch.snapshot` at interpreter start-up.

A process rather than a thread of the job: a restore thread in the job's interpreter contended
for the GIL with ``import torch``, which on an H100 made the import about a second slower and the
restore several times slower. Here the restore has a core of its own. SIGTERM (the job's first
compile gave up waiting) makes it stop before placing anything; a SIGKILL at any point leaves
only whole files, as any restore. Then it fingerprints torch and Triton and reads the source
hashes the snapshot remembers for them (:mod:`kiln.torch._source_keys`). Prints one JSON line: what it
restored, the warnings to log, or the error, which the job reports at its first compile (so a
process that never compiles never warns), and the source hashes that match.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from dataclasses import replace
from typing import Any

#: Deadline of each call: a restore that outlives the job's wait is stopped anyway.
CALL_SECS = 300.0


def restore(job: str, roots: dict[str, str], should_stop: threading.Event) -> dict[str, Any]:
    from .. import errors, snapshot
    from ..client import Client
    from . import UnsupportedTorchVersion, _job, check_version

    version = _job.keys()["torch"]
    try:
        if version != "none":
            check_version(version)
    except UnsupportedTorchVersion:
        return {"skipped": f"torch {version} is untested"}
    try:
        with Client() as client:
            result = snapshot.restore(
                client, job, roots, _job.keys(), timeout=CALL_SECS, should_stop=should_stop.is_set, warn=False
            )
    except errors.Cancelled:
        return {"cancelled": True}
    except errors.KilnError as e:
        return {"error": {"code": e.code.name if e.code is not None else None, "details": e.details}}
    return {
        "found": result.found, "key": result.key, "files": result.restored_files, "bytes": result.restored_bytes,
        "present": result.present, "missing": result.missing, "relocated": [r.name for r in result.relocated],
        "roots_restored": [r.name for r in result.roots],
        "warnings": snapshot.restore_warnings(replace(result, unknown_roots=[])),
    }


def source_keys(roots: dict[str, str]) -> dict[str, Any]:
    """This interpreter's torch and Triton fingerprints, and the source hashes remembered for them
    in the (restored) Inductor directory: see :mod:`kiln.torch._source_keys`."""
    from . import _source_keys

    if not _source_keys.enabled() or "inductor" not in roots:
        return {}
    started = time.perf_counter()
    try:
        prints = _source_keys.fingerprints()
        found = _source_keys.matching(roots["inductor"], prints)
    except Exception as e:  # noqa: BLE001 - the compile computes the keys itself
        return {"source_keys_error": f"{type(e).__name__}: {e}"}
    return {"fingerprints": prints, "source_keys": found, "source_keys_s": time.perf_counter() - started}


def main(argv: list[str]) -> int:
    started = time.perf_counter()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        request = json.loads(argv[0])
        out = restore(request["job"], request["roots"], stop)
    except Exception as e:  # noqa: BLE001 - reported by the job, which goes on cold
        out = {"error": {"code": None, "details": f"{type(e).__name__}: {e}"}}
        request = None
    if request is not None and not stop.is_set():
        out.update(source_keys(request["roots"]))
    out["seconds"] = time.perf_counter() - started
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
