"""Python values as the wire's fields: a leaf the client's modules share."""

from __future__ import annotations

import enum


class WireEnum(enum.IntEnum):
    """A protobuf enum as Python's: the wire's numbers, printed as the name in lower case
    (``memory``, ``failed``), as the command line and the logs show them."""

    def __str__(self) -> str:
        return self.name.lower()


def milliseconds(seconds: float | None, field: str) -> int:
    """``seconds`` as a request's milliseconds field: 0 for none (or 0), at least 1 otherwise;
    ``field`` names it in the error for a negative value."""
    if seconds is None:
        return 0
    if seconds < 0:
        raise ValueError(f"{field}: must not be negative")
    return max(1, round(seconds * 1000)) if seconds > 0 else 0
