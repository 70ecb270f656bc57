"""Runs a hook on a module right after it is first imported, without importing it: kiln must not
import torch itself (a second or more in every process of a job), so it waits for the job to.
:mod:`kiln._autoinstall` (``KILN_TORCH=1``) and :func:`kiln.torch.install` both watch torch's
modules through :func:`watch`.

Only the standard library is imported here: ``kiln-torch.pth`` reaches this module at every
interpreter start.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import sys
import time
from collections.abc import Callable, Sequence
from types import ModuleType

log = logging.getLogger("kiln")

#: Seconds kiln's own work took in this process, by the module whose import ran it (and
#: ``"start"`` for what :mod:`kiln._autoinstall` does at interpreter start): what kiln adds to a
#: job's set-up, reported by ``kiln.torch.graph_stats()``.
spent: dict[str, float] = {}


def charge(name: str, seconds: float) -> None:
    spent[name] = spent.get(name, 0.0) + seconds


class _Loader(importlib.abc.Loader):
    """Runs the real loader, then the hook."""

    def __init__(self, inner: importlib.abc.Loader, hook: Callable[[ModuleType], None]) -> None:
        self._inner = inner
        self._hook = hook

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        started = time.perf_counter()
        try:
            self._hook(module)
        except Exception:  # noqa: BLE001 - the job goes on without kiln
            log.warning("kiln: KILN_TORCH: setting up %s failed; kiln stays off there", module.__name__, exc_info=True)
        finally:
            charge(module.__name__, time.perf_counter() - started)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for the watched names it asks the rest of ``sys.meta_path`` and
    wraps the loader of the spec it gets."""

    def __init__(self, hooks: dict[str, Callable[[ModuleType], None]]) -> None:
        self._hooks = hooks

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        hook = self._hooks.get(fullname)
        if hook is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader, hook)
                return spec
        return None


def watch(hooks: dict[str, Callable[[ModuleType], None]]) -> None:
    """Runs each hook on its module right after the module is first imported (at once for one
    imported already)."""
    pending = dict(hooks)
    for name in [n for n in pending if n in sys.modules]:
        pending.pop(name)(sys.modules[name])
    if not pending:
        return
    finder = next((f for f in sys.meta_path if isinstance(f, _Finder)), None)
    if finder is None:
        sys.meta_path.insert(0, _Finder(pending))
    else:
        finder._hooks.update(pending)
