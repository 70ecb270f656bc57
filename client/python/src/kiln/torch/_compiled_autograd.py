"""Compiled autograd while async graphs run eagerly: the backward runs eagerly too.

Under compiled autograd (torchtitan's ``compile.compiled_autograd`` option: ``loss.backward()``
inside ``torch._dynamo.compiled_autograd._enable``, or ``torch._dynamo.config.compiled_autograd``),
Dynamo captures each backward's autograd graph and compiles it in the process, with a backend of
torch's own, not through torch.compile's Inductor entry point that kiln routes. While an async
graph runs eagerly (``KILN_TORCH_ASYNC=1``, kilnd's compile not yet swapped in), the backward
compiled autograd captures is the eager forward's: a node for every op, where the compiled
forward leaves one. Compiled, it stalled the first step: on a CPU a small model's first step took
54 s against plain torch.compile's 32 s for forward and backward together; and once the compiled
forward swaps in, its backward is another autograd graph, compiled again.

So while any graph of this process runs eagerly, compiled autograd is not switched on: a
backward inside ``_enable`` runs on autograd's own engine, as without it (where ``_enable`` was
entered before a graph began to run eagerly, the graph it captures is handed back uncompiled and
runs as it is). Once kilnd's compiles have swapped in, ``_enable`` switches it on as torch would,
and its first capture, the compiled forward's backward, compiles in the process as in plain
torch.compile.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

from .._warn import warn_once
from ._ledger import _ledger

MODULE = "torch._dynamo.compiled_autograd"


def attach(module: ModuleType) -> None:
    """Wraps ``module._enable`` (torch's entry point to compiled autograd, looked up at each call
    by torch and by the job) so that its compiler defers to the eager graphs; idempotent."""
    original = getattr(module, "_enable", None)
    if original is None or getattr(original, "kiln_wrapped", False):
        return

    @contextlib.contextmanager
    def _enable(compiler_fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Iterator[Any]:
        if _ledger.running_eagerly():
            # The backward inside runs as it would without compiled autograd: autograd's own
            # engine, at eager speed (a captured graph run uncompiled is slower than it).
            _ran_eagerly()
            yield None
            return
        with original(_eager_while_graphs_are(compiler_fn), *args, **kwargs) as ctx:
            yield ctx

    _enable.kiln_wrapped = True  # type: ignore[attr-defined]
    module._enable = _enable  # type: ignore[attr-defined]


def _eager_while_graphs_are(compiler_fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(compiler_fn)
    def compile_unless_eager(graph: Any, *args: Any, **kwargs: Any) -> Any:
        if not _ledger.running_eagerly():
            return compiler_fn(graph, *args, **kwargs)
        # Compiled autograd was on before a graph began to run eagerly (entered around the
        # whole loop, say): the captured graph runs as it is.
        _ran_eagerly()
        return graph

    return compile_unless_eager


def _ran_eagerly() -> None:
    with _ledger.lock:
        _ledger.eager_backwards += 1
    warn_once(
        "compiled-autograd-eager",
        "kiln: a backward under compiled autograd runs eagerly while this process's graphs do "
        "(KILN_TORCH_ASYNC=1): compiled now it would be the eager forward's, a larger graph, "
        "compiled again once kilnd's compile swaps in",
    )
