"""kiln's callbacks on Dynamo's frame compiles, kept across ``torch._dynamo.reset()``.

Dynamo calls its start callbacks when it begins compiling a frame and its end callbacks when it
is done (``torch._dynamo.callback``). ``torch._dynamo.reset()`` clears every callback, so the
first :func:`keep` wraps it to register kiln's again after each reset.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType
from typing import Any

Callback = Callable[..., None]

#: kiln's callbacks: (start callbacks, end callbacks).
_kept: tuple[list[Callback], list[Callback]] = ([], [])


def keep(dynamo: ModuleType, *, start: Callback | None = None, end: Callback | None = None) -> None:
    """Registers ``start`` and ``end`` on ``dynamo`` (the ``torch._dynamo`` module), now and
    after every reset; a callback already kept is not added twice."""
    for callback, kept in ((start, _kept[0]), (end, _kept[1])):
        if callback is not None and callback not in kept:
            kept.append(callback)
    _register(dynamo.callback)
    reset = dynamo.reset
    if not getattr(reset, "_kiln", False):

        @functools.wraps(reset)
        def reset_and_reattach(*args: Any, **kwargs: Any) -> Any:
            try:
                return reset(*args, **kwargs)
            finally:
                _register(dynamo.callback)

        reset_and_reattach._kiln = True  # type: ignore[attr-defined]
        dynamo.reset = reset_and_reattach  # type: ignore[attr-defined]


def _register(callback: ModuleType) -> None:
    handler = callback.callback_handler
    for fn in _kept[0]:
        if fn not in handler.start_callbacks:
            handler.register_start_callback(fn)
    for fn in _kept[1]:
        if fn not in handler.end_callbacks:
            handler.register_end_callback(fn)
