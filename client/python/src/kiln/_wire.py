"""Python values as the wire's fields: a leaf the client's modules share."""

from __future__ import annotations


def milliseconds(seconds: float | None, field: str) -> int:
    """``seconds`` as a request's milliseconds field: 0 for none (or 0), at least 1 otherwise;
    ``field`` names it in the error for a negative value."""
    if seconds is None:
        return 0
    if seconds < 0:
        raise ValueError(f"{field}: must not be negative")
    return max(1, round(seconds * 1000)) if seconds > 0 else 0
