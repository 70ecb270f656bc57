"""Every environment variable kiln's Python side reads: its name, its default and what it does.

The one list. Each is declared once here, and read here: switches by :meth:`Setting.switch`,
numbers by :meth:`Setting.number`.
``kiln doctor`` shows each one's value from it, the README's table of a job's
variables is checked against it by a test, and so is every ``KILN_*`` name the package's code
reads: a variable added without a line here fails the suite. The modules that read a variable
keep their own name for it (``kiln.torch._graph.ASYNC_ENV``), taken from here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ._warn import warn_once


@dataclass(frozen=True)
class Setting:
    #: The variable's name.
    name: str
    #: What an unset variable means, as the README's table says it.
    default: str
    #: What it does, in one line.
    meaning: str

    def value(self) -> str | None:
        """The variable as set, or None."""
        return os.environ.get(self.name)

    def switch(self) -> bool:
        """The variable read as a switch, the one way the modules read their switches: one whose
        default is ``1`` is off only at ``0``; any other (``0`` or unset by default) is on unless
        it is unset, empty or ``0``. The value counts as written: `` 0`` is not ``0``."""
        value = os.environ.get(self.name)
        if self.default == "1":
            return value != "0"
        return value not in (None, "", "0")

    def number(self, default: float) -> float:
        """The variable read as a number of seconds or calls, at least 0, the one way the modules
        read their numbers: unset or blank gives ``default``, and so does a value that is not a
        number, with one warning naming the variable."""
        raw = (os.environ.get(self.name) or "").strip()
        if not raw:
            return default
        try:
            return max(0.0, float(raw))
        except ValueError:
            warn_once(self.name, "kiln: %s=%r is not a number; using %s", self.name, raw, default)
            return default


DAEMON = Setting("KILN_DAEMON", "the local socket", "kilnd's address: `unix:///path` or `http(s)://host:port`")
TOKEN_FILE = Setting("KILN_TOKEN_FILE", "unset", "a file holding the token for a kilnd that asks for one")
CA_FILE = Setting("KILN_CA_FILE", "the system's roots", "a PEM file of the CA to trust for `https://` addresses")
TORCH = Setting("KILN_TORCH", "unset", "`1` installs kiln.torch at interpreter start-up (snapshots, remote caches, the graph path)")
TORCH_JOB = Setting(
    "KILN_TORCH_JOB", "the main script", "the job's name: its snapshot's, and its ledger's across processes, ranks, hosts and restarts"
)
TORCH_GRAPHS = Setting(
    "KILN_TORCH_GRAPHS", "every layout", "which layouts' graphs go to kilnd (`0`: none, `1`: all, or names)"
)
TORCH_ASYNC = Setting(
    "KILN_TORCH_ASYNC", "0", "`1`: a graph runs eagerly until kilnd's compile of it is ready (and its eager step is measured for free)"
)
TORCH_CLAIM = Setting(
    "KILN_TORCH_CLAIM",
    "1",
    "`1`: a blocking graph nobody has is compiled in its own process, as torch would, and shared through kilnd; `0`: "
    "kilnd's torch workers compile it",
)
TORCH_SPLIT = Setting(
    "KILN_TORCH_SPLIT",
    "a job of several ranks on several hosts",
    "`1`: the ranks and hosts of a job split its cold compile: a rank waits for a graph another claimed (no longer "
    "than its own compile of it would take), compiled with its backward at once; `0`: a rank waits for nobody, compiles a "
    "graph nobody stored as torch would, and shares it after its first backward",
)
TORCH_GRAPH_WAIT_SECS = Setting(
    "KILN_TORCH_GRAPH_WAIT_SECS",
    "the process's own compile of the graph, estimated from its compiles, or before any from Dynamo's trace (at least 30)",
    "how long a blocking graph waits for another process's compile of it before compiling it itself",
)
TORCH_MEASURE = Setting(
    "KILN_TORCH_MEASURE",
    "0",
    "N eager calls of each graph after its compile, for a blocking job's eager baseline; off by default because an eager "
    "step can need more memory than a compiled one",
)
TORCH_QUIET = Setting("KILN_TORCH_QUIET", "0", "`1`: no line at exit about what torch.compile cost the job and saved")
TORCH_SNAPSHOT = Setting("KILN_TORCH_SNAPSHOT", "1", "`0`: no job snapshot restored at start-up or saved after the first compile")
TORCH_RESTORE_WAIT_SECS = Setting(
    "KILN_TORCH_RESTORE_WAIT_SECS", "120", "how long the first compile waits for the snapshot's restore before compiling without it"
)
TORCH_SOURCE_KEYS = Setting(
    "KILN_TORCH_SOURCE_KEYS", "1", "`0`: torch's and Triton's source hashes are computed at the first compile, not restored from the snapshot"
)
TORCH_UNTESTED = Setting("KILN_TORCH_UNTESTED", "0", "`1`: install kiln.torch on a torch it was not tested with")
TRITON_WAIT_SECS = Setting("KILN_TRITON_WAIT_SECS", "60", "how long a Triton kernel waits for another process's compile of it")
TRITON_HOLD_SECS = Setting("KILN_TRITON_HOLD_SECS", "the wait", "how long a Triton compile holds the fleet's lease on its kernel")

#: In the order ``kiln doctor`` and the README list them.
SETTINGS: tuple[Setting, ...] = (
    DAEMON,
    TOKEN_FILE,
    CA_FILE,
    TORCH,
    TORCH_JOB,
    TORCH_GRAPHS,
    TORCH_ASYNC,
    TORCH_CLAIM,
    TORCH_SPLIT,
    TORCH_GRAPH_WAIT_SECS,
    TORCH_MEASURE,
    TORCH_QUIET,
    TORCH_SNAPSHOT,
    TORCH_RESTORE_WAIT_SECS,
    TORCH_SOURCE_KEYS,
    TORCH_UNTESTED,
    TRITON_WAIT_SECS,
    TRITON_HOLD_SECS,
)

#: Variables of torch and Triton that decide what kiln does, shown by ``kiln doctor`` beside
#: kiln's own, with the value each needs to switch kiln on where one does.
FOREIGN: dict[str, str | None] = {
    "TRITON_CACHE_MANAGER": "triton.runtime.cache:RemoteCacheManager",
    "TRITON_REMOTE_CACHE_BACKEND": "kiln.triton:KilnRemoteCacheBackend",
    "TORCHINDUCTOR_CACHE_DIR": None,
    "TRITON_CACHE_DIR": None,
}


def readme_table() -> list[str]:
    """The README's table of the variables, row by row, as both READMEs carry it (a test checks
    them against it): ``python -m kiln.settings`` prints it to paste."""
    return ["| variable | default | meaning |", "|---|---|---|"] + [f"| `{s.name}` | {s.default} | {s.meaning} |" for s in SETTINGS]


if __name__ == "__main__":
    print("\n".join(readme_table()))
