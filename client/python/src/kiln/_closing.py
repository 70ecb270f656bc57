"""What the objects holding a gRPC channel or stream share: a context manager that closes them.
A leaf module, so that :mod:`kiln.client` and :mod:`kiln.blob_lease` can both use it."""

from __future__ import annotations

from typing import TypeVar

_Self = TypeVar("_Self", bound="Closing")


class Closing:
    """A context manager whose exit calls :meth:`close`, which each subclass defines."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
