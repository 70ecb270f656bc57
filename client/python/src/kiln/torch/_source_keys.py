"""The source hashes of torch and Triton, kept in the job's snapshot so that a fresh process need
not compute them (``KILN_TORCH=1``; ``KILN_TORCH_SOURCE_KEYS=0`` turns this part off).

A process's first compile computes two keys before it can look anything up in a cache:
Inductor's ``torch_key()`` (a hash of torch's Python sources) and Triton's ``triton_key()`` (a
hash of Triton's sources and of ``libtriton.so``, about 400 MB). Each is computed once per
process and memoized, so a warm host pays them on every start too. On an H100 (GPT-2 training
step, warm caches, torch 2.11, Triton 3.6) they took 0.10-0.14 s and 0.38-0.43 s of a 2.6-2.9 s
first call, and with both computed before the first call it was 0.59 s shorter (median of three
against three; tests/gpu/first_call_keys).

Computing them in a thread of the job does not work: each file read and each SHA-256 update
gives the GIL away, and getting it back waits up to the interpreter's switch interval (5 ms)
while the job's thread runs Python. On the H100 ``torch_key()`` took 3.5-5.1 s in a thread
started at ``torch.compile()``, ``triton_key()`` 3.0-3.5 s, and the first compile, asking before
they were done, computed them again.

So the values come from a process that already has them:

- **Remembered.** After a compile, the process that saves the job's snapshot writes both
  values, as torch and Triton computed them, to ``kiln-source-keys.json`` in the Inductor
  directory, so they travel with the snapshot. Beside each value it writes the *fingerprint*
  of the package it hashes: the package directory and, for every file in it (``__pycache__``
  left out), its path, size and modification time.
- **Checked** by the restore process (:mod:`kiln.torch._restore`, a process of its own, so its
  directory walks cost the job nothing): it fingerprints the packages this interpreter would
  import, without importing them, and reports only the values whose fingerprint is the same.
  A host with torch or Triton installed differently (another version, a patched file, another
  path) gets nothing and computes the keys as without kiln. Like ``make`` or rsync's quick
  check, this trusts size and modification time: a file changed in place with both kept
  would go unnoticed.
- **Given** at the first compile, before any cache key is computed: ``torch_key.set()`` (the
  setter torch provides for exactly this) and, as Triton's memo has no setter, a memoized
  function returning the value in place of ``triton_key`` in the modules that hold it
  (``triton.runtime.cache``, ``triton.runtime.autotuner``, and torch's
  ``torch._inductor.runtime.triton_compat``, through which all of torch calls it). Only when
  the imported package is the one fingerprinted, and only where the key was not computed yet.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any, NamedTuple

from .. import settings

SWITCH_ENV = settings.TORCH_SOURCE_KEYS.name
MEMO_NAME = "kiln-source-keys.json"
PACKAGES = ("torch", "triton")
#: Fingerprints kept per package: a directory shared by a few installations keeps each one's.
MAX_PER_PACKAGE = 4
#: Modules holding Triton's ``triton_key`` (imported by name at their own import).
TRITON_KEY_HOLDERS = ("triton.runtime.cache", "triton.runtime.autotuner", "torch._inductor.runtime.triton_compat")


def enabled() -> bool:
    return settings.TORCH_SOURCE_KEYS.switch()


def package_dir(name: str) -> str | None:
    """Where ``import name`` would find the package, without importing it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return os.path.realpath(locations[0]) if len(locations) == 1 else None


def fingerprint(directory: str) -> str:
    """The directory, and the path, size and modification time of every file in it."""
    h = hashlib.sha256(b"kiln-source-fingerprint-v1\0" + directory.encode())
    for parent, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            path = os.path.join(parent, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            rel = os.path.relpath(path, directory)
            h.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def fingerprints() -> dict[str, dict[str, str]]:
    """``{package: {"dir": ..., "fingerprint": ...}}`` for the packages this interpreter has."""
    out = {}
    for name in PACKAGES:
        directory = package_dir(name)
        if directory is not None:
            out[name] = {"dir": directory, "fingerprint": fingerprint(directory)}
    return out


def _read_memo(inductor_root: str) -> dict[str, list[dict[str, str]]]:
    try:
        with open(os.path.join(inductor_root, MEMO_NAME), encoding="utf-8") as f:
            memo = json.load(f)
    except (OSError, ValueError):
        return {}
    keys = memo.get("keys") if isinstance(memo, dict) and memo.get("version") == 1 else None
    if not isinstance(keys, dict):
        return {}
    return {
        name: [e for e in entries if isinstance(e, dict) and isinstance(e.get("fingerprint"), str) and isinstance(e.get("key"), str)]
        for name, entries in keys.items()
        if name in PACKAGES and isinstance(entries, list)
    }


def matching(inductor_root: str, prints: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """The remembered keys whose package fingerprint is this interpreter's (the restore
    process's report): ``{package: {"dir": ..., "key": ...}}``."""
    out = {}
    for name, entries in _read_memo(inductor_root).items():
        mine = prints.get(name)
        for entry in entries:
            if mine is not None and entry["fingerprint"] == mine["fingerprint"]:
                out[name] = {"dir": mine["dir"], "key": entry["key"]}
                break
    return out


def _imported(name: str) -> ModuleType | None:
    """The module, if it is imported and done initialising."""
    module = sys.modules.get(name)
    if module is None or getattr(getattr(module, "__spec__", None), "_initializing", False):
        return None
    return module


def _imported_from(name: str, directory: str) -> ModuleType | None:
    """The module, if it is imported, done initialising, and loaded from under `directory` (the
    package that was fingerprinted)."""
    module = _imported(name)
    path = getattr(module, "__file__", None)
    if path is None or not os.path.realpath(path).startswith(directory.rstrip(os.sep) + os.sep):
        return None
    return module


def _give_torch_key(key_hex: str, codecache: ModuleType) -> str:
    torch_key = getattr(codecache, "torch_key", None)
    setter = getattr(torch_key, "set", None)
    if setter is None:
        return "not given: this torch_key has no setter"
    try:
        setter(bytes.fromhex(key_hex))
    except AssertionError:
        return "not given: computed already"
    return "given"


def _give_triton_key(key: str, cache: ModuleType) -> str:
    original = getattr(cache, "triton_key", None)
    info = getattr(original, "cache_info", None)
    if info is None:
        return "not given: this triton_key is not memoized"
    if info().currsize:
        return "not given: computed already"

    @functools.lru_cache
    def triton_key() -> str:
        return key

    triton_key.kiln_given = True  # type: ignore[attr-defined]
    for holder in TRITON_KEY_HOLDERS:
        module = _imported(holder)
        if module is not None and getattr(module, "triton_key", None) is original:
            module.triton_key = triton_key  # type: ignore[attr-defined]
    return "given"


class _Giver(NamedTuple):
    """How one package's key is given: to the module that computes it, once that module is
    imported from the fingerprinted package."""

    module: str
    #: The package as the reasons name it.
    package: str
    give: Callable[[str, ModuleType], str]


_GIVERS = {
    "torch": _Giver("torch._inductor.codecache", "torch", _give_torch_key),
    "triton": _Giver("triton.runtime.cache", "Triton", _give_triton_key),
}


def give(keys: dict[str, dict[str, str]]) -> dict[str, str]:
    """At the first compile, before any cache key: hands torch and Triton the remembered values.
    Says what became of each."""
    out = {}
    for name, entry in keys.items():
        if name in _GIVERS:
            try:
                out[name] = _give(_GIVERS[name], entry["key"], entry["dir"])
            except Exception as e:  # noqa: BLE001 - the compile computes the key itself
                out[name] = f"not given: {type(e).__name__}: {e}"
    return out


def _give(giver: _Giver, key: str, directory: str) -> str:
    module = _imported_from(giver.module, directory)
    if module is None:
        return f"not given: {giver.module} not imported from the fingerprinted {giver.package}"
    return giver.give(key, module)


def _current(prints: dict[str, dict[str, str]]) -> dict[str, str]:
    """The values this process has computed (or was given), for the packages fingerprinted."""
    out = {}
    codecache = _imported_from(_GIVERS["torch"].module, prints["torch"]["dir"]) if "torch" in prints else None
    if codecache is not None:
        value = codecache.torch_key()  # memoized: the compile computed it
        if isinstance(value, bytes):
            out["torch"] = value.hex()
    cache = _imported_from(_GIVERS["triton"].module, prints["triton"]["dir"]) if "triton" in prints else None
    if cache is not None:
        fn = getattr(cache, "triton_key", None)
        info = getattr(fn, "cache_info", None)
        if fn is not None and info is not None and info().currsize:  # never computed here
            out["triton"] = str(fn())
    return out


def remember(inductor_root: str, prints: dict[str, dict[str, str]]) -> bool:
    """Writes this process's values into the Inductor directory's memo (atomically), when they are
    not there yet. Returns whether it wrote."""
    current = _current(prints)
    if not current or not os.path.isdir(inductor_root):
        return False
    memo = _read_memo(inductor_root)
    changed = False
    for name, key in current.items():
        entry = {"fingerprint": prints[name]["fingerprint"], "key": key}
        entries = memo.get(name, [])
        if entry in entries:
            continue
        others = [e for e in entries if e["fingerprint"] != entry["fingerprint"]]
        memo[name] = [entry, *others[: MAX_PER_PACKAGE - 1]]
        changed = True
    if not changed:
        return False
    path = os.path.join(inductor_root, MEMO_NAME)
    tmp = os.path.join(inductor_root, f".{MEMO_NAME}.{os.getpid()}.tmp")
    body: dict[str, Any] = {"version": 1, "keys": memo}
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(body, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return True
