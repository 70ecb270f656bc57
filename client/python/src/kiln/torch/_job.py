"""What a torch.compile snapshot is called and which directories it covers (see
:mod:`kiln.torch.snapshot`). Everything here runs at interpreter start-up, before torch is
imported, so none of it imports torch: versions come from the installed distributions' metadata.

Directories (torch 2.11, triton 3.6.0):

- **inductor**: ``TORCHINDUCTOR_CACHE_DIR``, else torch's default
  (``torch/_inductor/runtime/cache_dir_utils.py``: ``<tempfile.gettempdir()>/torchinductor_<user>``).
  A per-host ``TMPDIR`` (Slurm sets one) gives every host another path, and Inductor's cache is
  only fast at the path it was written at, so kiln sets the variable to
  ``/tmp/torchinductor_<user>`` (torch's default when ``TMPDIR`` is unset) when the user has not.
  Inductor keeps the Triton kernels it compiles inside it: when ``TRITON_CACHE_DIR`` is unset,
  its ``triton_cache_dir(device)`` is ``<inductor>/triton/<device>``.
- **triton**: Triton's own cache for the rest (the launcher it builds with a C compiler, kernels
  compiled outside Inductor): ``TRITON_CACHE_DIR`` when set outside the Inductor directory, else
  Triton's default ``$TRITON_HOME/.triton/cache`` (``~/.triton/cache``; triton/knobs.py).
"""

from __future__ import annotations

import contextlib
import functools
import getpass
import hashlib
import importlib.util
import os
import platform
import re
import sys

from .. import settings

JOB_ENV = settings.TORCH_JOB.name
INDUCTOR_ENV = "TORCHINDUCTOR_CACHE_DIR"
TRITON_ENV = "TRITON_CACHE_DIR"


def default_inductor_dir() -> str | None:
    """``/tmp/torchinductor_<user>``, the user name sanitized as torch does; ``None`` when the
    user has no name (torch then fails on its own)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        return None
    return os.path.join("/tmp", "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))


def set_default_dirs() -> None:
    """Sets ``TORCHINDUCTOR_CACHE_DIR`` to the same path on every host unless the user set it."""
    if os.environ.get(INDUCTOR_ENV) is None and (default := default_inductor_dir()) is not None:
        os.environ[INDUCTOR_ENV] = default


def _inside(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def triton_default_dir() -> str:
    home = os.environ.get("TRITON_HOME") or os.path.expanduser("~/")
    return os.path.join(home, ".triton", "cache")


def roots() -> dict[str, str]:
    """The snapshot's roots as this process has them now: ``inductor``, and ``triton`` unless
    Triton's cache is inside the Inductor directory."""
    inductor = os.path.abspath(os.environ.get(INDUCTOR_ENV) or default_inductor_dir() or "/tmp/torchinductor")
    out = {"inductor": inductor}
    triton = os.environ.get(TRITON_ENV)
    if not triton:
        out["triton"] = os.path.abspath(triton_default_dir())
    elif not _inside(os.path.abspath(triton), inductor):
        out["triton"] = os.path.abspath(triton)
    return out


def _torch_package_dirs() -> list[str]:
    with contextlib.suppress(ImportError, ValueError):
        spec = importlib.util.find_spec("torch")
        if spec is not None and spec.submodule_search_locations:
            return [os.path.abspath(d) for d in spec.submodule_search_locations]
    return []


def is_helper(argv: list[str]) -> bool:
    """Whether this process serves another (Inductor's compile workers, multiprocessing's
    spawned children): it neither restores nor saves; its parent does."""
    if "--multiprocessing-fork" in argv:
        return True
    main = os.path.abspath(argv[0]) if argv and argv[0] not in ("", "-c", "-m", "-") else ""
    return bool(main) and f"{os.sep}torch{os.sep}" in main and any(_inside(main, d) for d in _torch_package_dirs())


def job_of_script(path: str | None) -> str | None:
    """``script:<sha256 of the file>``: a script's path differs between hosts, its bytes do not."""
    if not path or not os.path.isfile(path):
        return None
    with open(path, "rb") as f:
        return "script:" + hashlib.sha256(f.read()).hexdigest()


#: Top-level packages whose ``-m`` entry points serve a job rather than being one (torchrun's
#: launcher is ``-m torch.distributed.run``).
HELPER_PACKAGES = frozenset({"torch", "torchgen", "functorch", "triton", "kiln"})


def job_at_startup(argv: list[str], orig_argv: list[str] | None = None) -> str | None:
    """The job as far as interpreter start-up can tell, for a process that runs a script:
    ``KILN_TORCH_JOB``, else the script (``sys.argv[0]`` is set when ``.pth`` files run;
    ``__main__.__file__`` is not). For ``python -m MODULE`` (``sys.argv[0]`` is ``-m`` then; the
    module is read from ``orig_argv``, by default ``sys.orig_argv``), ``KILN_TORCH_JOB`` when set
    and the module is the job's own, not one of the standard library, torch, Triton or kiln.
    ``None`` otherwise, and for ``-c`` and interactive sessions: torch and its tools start many
    such helper processes that inherit the job's environment and never compile (a GPT-2 step
    started ten), so they restore only if they reach a first compile, where :func:`job_now`
    tells."""
    if argv and argv[0] == "-m":
        module = main_module(sys.orig_argv if orig_argv is None else orig_argv)
        if module is None or module.partition(".")[0] in HELPER_PACKAGES | sys.stdlib_module_names:
            return None
        return settings.TORCH_JOB.value()
    if not argv or argv[0] in ("", "-c", "-"):
        return None
    return settings.TORCH_JOB.value() or job_of_script(argv[0])


def main_module(orig_argv: list[str]) -> str | None:
    """The module of ``python [OPTIONS] -m MODULE ...`` (``-m`` alone, ``-mMODULE``, or last in a
    group of flags such as ``-um``), or ``None``."""
    args = iter(orig_argv[1:])
    for arg in args:
        if not arg.startswith("-") or arg in ("-", "--"):
            return None
        if arg.startswith("--"):
            continue
        flags = arg[1:]
        for i, flag in enumerate(flags):
            if flag == "m":
                return flags[i + 1 :] or next(args, None)
            if flag == "c":
                return None
            if flag in "WX":  # takes a value: the rest of this argument, or the next one
                if not flags[i + 1 :]:
                    next(args, None)
                break
    return None


def job_now() -> str | None:
    """The job once the main module runs: ``KILN_TORCH_JOB``, else ``__main__``'s file."""
    return settings.TORCH_JOB.value() or job_of_script(getattr(sys.modules.get("__main__"), "__file__", None))


def _version(dist: str) -> str:
    import importlib.metadata  # 10 ms: not at start-up, where only the restore thread needs it

    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "none"


@functools.lru_cache(maxsize=1)
def _keys() -> tuple[tuple[str, str], ...]:
    parts = {"kind": "torch", "torch": _version("torch"), "triton": _version("triton"), "python": platform.python_version()}
    return tuple(parts.items())


def keys() -> dict[str, str]:
    """The key parts that make a torch.compile cache valid besides the host's (kilnd adds the
    GPU, target, driver and CUDA): torch, Triton and Python versions (read once: reading
    distribution metadata scans ``sys.path``)."""
    return dict(_keys())


def exclude(name: str) -> bool:
    """Files being written: Inductor's ``write_atomic`` temporaries (``.<pid>.<thread>.tmp``,
    torch/_inductor/codecache.py) and Triton's ``tmp.pid_<pid>_<uuid>`` directories
    (triton/runtime/cache.py); both are renamed into place when whole."""
    return name.startswith("tmp.pid_") or (name.startswith(".") and name.endswith(".tmp"))
