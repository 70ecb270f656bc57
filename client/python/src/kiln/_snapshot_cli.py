"""``python -m kiln snapshot save|restore|list|show``: the ``kiln snapshot`` command line of the
Rust CLI for hosts that have only the Python package. Same arguments, same NDJSON lines with
``--json`` (every result line has an ``event``), same exit codes: 0 done, 1 no snapshot
(restore, show), 2 usage, connection or RPC errors.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from typing import Any

from . import errors, snapshot
from .snapshot_results import RestoreResult, SnapshotManifest, SnapshotProgress, SnapshotSummary

EXIT_NOT_FOUND = 1
EXIT_ERROR = 2


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m kiln snapshot",
        description="Job snapshots: JIT cache directories saved into kilnd and restored on another host.",
    )
    sub = p.add_subparsers(dest="command", required=True)

    def common(q: argparse.ArgumentParser, job_required: bool) -> None:
        q.add_argument("--daemon", help="kilnd's URI (default: KILN_DAEMON, else the default socket)")
        q.add_argument("--job", required=job_required, help="the job's name")
        q.add_argument("--json", action="store_true", help="print NDJSON")

    save = sub.add_parser("save", help="save directories into the job's snapshot")
    common(save, True)
    save.add_argument("--key", action="append", default=[], metavar="K=V", help="a key part (repeatable)")
    save.add_argument("dirs", nargs="+", metavar="DIR|NAME=DIR")
    restore = sub.add_parser("restore", help="restore the job's snapshot (every root to its recorded path without DIRs)")
    common(restore, True)
    restore.add_argument("--key", action="append", default=[], metavar="K=V")
    restore.add_argument("dirs", nargs="*", metavar="DIR|NAME=DIR")
    listing = sub.add_parser("list", help="the snapshots of every job, or of one")
    common(listing, False)
    show = sub.add_parser("show", help="the job's manifest for this host")
    common(show, True)
    show.add_argument("--key", action="append", default=[], metavar="K=V")
    return p


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def _line(obj: dict[str, Any]) -> None:
    print(json.dumps(obj, default=str), flush=True)


class _Bar:
    """One progress line on stderr, only on a terminal and without --json."""

    def __init__(self, on: bool) -> None:
        self.on = on and sys.stderr.isatty()
        self.last = 0.0

    def __call__(self, p: SnapshotProgress) -> None:
        now = time.monotonic()
        if not self.on or (now - self.last < 0.1 and p.files_done < p.files_total):
            return
        self.last = now
        done = f"{p.files_done}/{p.files_total} files, {_size(p.bytes_done)}/{_size(p.bytes_total)}"
        sys.stderr.write(f"\r{p.phase:<6} {p.root:<12} {done}\x1b[K")

    def done(self) -> None:
        if self.on and self.last:
            sys.stderr.write("\r\x1b[K")


def _summary_json(s: SnapshotSummary) -> dict[str, Any]:
    return {
        "job": s.job, "key": s.key, "environment": dict(sorted(s.environment.items())), "files": s.files,
        "total_bytes": s.total_bytes, "updated_unix_ms": s.updated_unix_ms, "saved_by": s.saved_by,
        "roots": [dataclasses.asdict(r) for r in s.roots],
    }


def _summary_text(s: SnapshotSummary) -> str:
    ago = max(0, int(time.time() * 1000) - s.updated_unix_ms) // 1000
    env = ", ".join(f"{k}={v}" for k, v in sorted(s.environment.items())) or "no key parts"
    lines = [f"{s.job}  {s.files} files ({_size(s.total_bytes)})  saved {ago} s ago by {s.saved_by or '(unknown)'}  key {s.key}"]
    lines.append(f"    environment  {env}")
    lines += [f"    root {r.name}  {r.path}" for r in s.roots]
    return "\n".join(lines)


def _not_found(job: str, keys: dict[str, str], host_environment: dict[str, str], as_json: bool) -> int:
    if as_json:
        _line({"event": "not_found", "job": job, "keys": keys, "host_environment": host_environment})
    else:
        parts = ", ".join(f"{k}={v}" for k, v in sorted({**keys, **host_environment}.items())) or "no key parts"
        print(f"no snapshot of job `{job}` for {parts}")
    return EXIT_NOT_FOUND


def _restored(r: RestoreResult, as_json: bool) -> None:
    for warning in snapshot.restore_warnings(r):
        print(f"warning: {warning}", file=sys.stderr)
    if as_json:
        for root in r.roots:
            _line({"event": "root", **dataclasses.asdict(root), "placement": str(root.placement)})
        _line({
            "event": "restored", "job": r.job, "key": r.key, "restored_files": r.restored_files,
            "restored_bytes": r.restored_bytes, "present": r.present, "missing": r.missing,
            "relocated": [root.name for root in r.relocated], "unknown_roots": r.unknown_roots,
            "environment": r.environment, "saved_by": r.saved_by, "updated_unix_ms": r.updated_unix_ms, "seconds": r.seconds,
        })
        return
    for root in r.roots:
        restored = f"{root.restored_files} restored ({_size(root.restored_bytes)})"
        print(f"{root.name} -> {root.path}: {restored}, {root.present} present, {root.missing} missing")
    print(f"restored job `{r.job}`: {r.restored_files} files ({_size(r.restored_bytes)}) in {r.seconds:.3f} s; {r.present} present, "
          f"{r.missing} missing; snapshot {r.key} saved by {r.saved_by or '(unknown)'}")


def _show(m: SnapshotManifest, as_json: bool) -> None:
    if as_json:
        for f in m.files:
            _line(dataclasses.asdict(f))
        _line({"event": "manifest", **_summary_json(m.summary())})
        return
    print(_summary_text(m.summary()))
    for f in m.files:
        print(f"    {f.mode:04o}  {_size(f.size):>10}  {f.digest[:16]}  {f.root}/{f.path}")


def _run(args: argparse.Namespace) -> int:
    from .client import Client

    with Client(args.daemon) as client:
        keys = snapshot.parse_keys(getattr(args, "key", []))
        if args.command == "save":
            bar = _Bar(not args.json)
            r = snapshot.save(client, args.job, args.dirs, keys, on_progress=bar)
            bar.done()
            if args.json:
                _line({"event": "saved", **dataclasses.asdict(r)})
            else:
                skipped = f"; skipped {r.skipped} that vanished or could not be read" if r.skipped else ""
                if r.symlinks:
                    skipped += f"; left out {r.symlinks} symbolic link{'s' if r.symlinks != 1 else ''} " \
                        "(snapshots hold regular files only)"
                print(f"saved job `{r.job}`: {r.files} files ({_size(r.bytes)}) from {len(r.roots)} roots; "
                      f"sent {r.files_uploaded} files ({_size(r.bytes_uploaded)}){skipped}")
                print(f"snapshot {r.key}: {r.manifest_files} files ({_size(r.manifest_bytes)}), "
                      + (f"{r.files_added} added or changed" if r.changed else "unchanged"))
            return 0
        if args.command == "restore":
            bar = _Bar(not args.json)
            restored = snapshot.restore(client, args.job, args.dirs or None, keys, on_progress=bar, warn=False)
            bar.done()
            if not restored.found:
                return _not_found(args.job, keys, restored.host_environment, args.json)
            _restored(restored, args.json)
            return 0
        if args.command == "list":
            found = snapshot.list_snapshots(client, args.job)
            for s in found:
                if args.json:
                    _line(_summary_json(s))
                else:
                    print(_summary_text(s))
            if args.json:
                _line({"event": "listed", "snapshots": len(found)})
            elif not found:
                print("no snapshots")
            return 0
        info = snapshot.show(client, args.job, keys)
        if info.manifest is None:
            return _not_found(args.job, keys, info.host_environment, args.json)
        _show(info.manifest, args.json)
        return 0


def main(argv: list[str]) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as e:  # argparse: usage errors exit 2, --help 0
        return int(e.code or 0)
    try:
        return _run(args)
    except errors.KilnError as e:
        code = e.code.name if e.code is not None else "error"
        print(f"error: {code.lower()}: {e.details}", file=sys.stderr)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
    return EXIT_ERROR
