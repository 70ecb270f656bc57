"""``KILN_TORCH=1``: kiln behind torch.compile's caches with no change to the job's code.

torch has no plugin hook, so the package installs ``kiln-torch.pth`` into site-packages: Python
runs its one line at start-up, and when ``KILN_TORCH`` is set (and not ``0``) it imports this
module. Importing torch here would cost every Python process of the job a second or more, so
nothing is imported: an import hook waits for torch to load the modules kiln changes, and acts
right after each has run:

- ``torch._inductor.config``, ``torch._functorch.config``, ``torch._dynamo.config``: switch on
  the remote caches whose flags the user left unset;
- ``torch._inductor.remote_cache``: replace the remote cache classes (see :mod:`kiln.torch`);
- ``torch._dynamo``: route torch.compile's graphs through kilnd (see :mod:`kiln.torch._graph`), join the
  snapshot restore at the first compile and save after each (see
  :mod:`kiln.torch.snapshot`).

Before any of that, it starts restoring the job's torch.compile snapshot in a background process
(:func:`kiln.torch.snapshot.start`), so the restore overlaps ``import torch``. It also sets
Triton's two variables (unless set), so the Triton kernels Inductor compiles go through
:class:`kiln.triton.KilnRemoteCacheBackend` too. An untested torch version gets one warning and
is left alone; nothing here raises into the job.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from types import ModuleType

from . import settings
from ._import_hooks import watch
from ._warn import warn_once

log = logging.getLogger("kiln")


def _version_ok() -> bool:
    from . import torch as kt

    torch = sys.modules.get("torch")
    version = getattr(torch, "__version__", "?")
    try:
        kt.check_version(str(version))
    except kt.UnsupportedTorchVersion as e:
        warn_once("torch-version", "kiln: KILN_TORCH is set but kiln stays off: %s", e)
        return False
    return True


def _on_config(module: ModuleType) -> None:
    if _version_ok():
        from . import torch as kt

        kt.switch_on_flags(module, kt.FLAGS[module.__name__])


def _on_remote_cache(module: ModuleType) -> None:
    if _version_ok():
        from . import torch as kt

        kt.patch_remote_cache(module, str(sys.modules["torch"].__version__))


def _on_dynamo(module: ModuleType) -> None:
    if _version_ok():
        from .torch import _graph, _job, snapshot

        # The snapshot's callbacks first: a frame's trace is timed from after the restore's join.
        snapshot.attach(module)
        _graph.install(_job.job_now() or "")


def install_hooks() -> None:
    import time

    from . import _import_hooks
    from . import torch as kt

    started = time.perf_counter()
    from .torch import snapshot

    snapshot.start()
    hooks: dict[str, Callable[[ModuleType], None]] = {name: _on_config for name in kt.FLAGS}
    hooks[kt.REMOTE_CACHE_MODULE] = _on_remote_cache
    hooks["torch._dynamo"] = _on_dynamo
    watch(hooks)
    kt.switch_on_triton()
    _import_hooks.charge("start", time.perf_counter() - started)


def _kiln_itself() -> bool:
    """Whether this interpreter runs kiln's own command (``python -m kiln doctor``, say): a
    diagnostic restores and saves no job's snapshot and routes no graph, whatever the job's
    environment says, so that running it changes nothing."""
    argv = getattr(sys, "orig_argv", [])
    return any(argv[i : i + 2] == ["-m", "kiln"] for i in range(len(argv) - 1))


# kiln-torch.pth imports this module under KILN_TORCH.
if settings.TORCH.switch() and not _kiln_itself():
    try:
        install_hooks()
    except Exception:  # noqa: BLE001
        log.warning("kiln: KILN_TORCH is set but setting kiln up failed; torch runs without it", exc_info=True)
