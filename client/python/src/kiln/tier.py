"""Which tier answered a request: a leaf module, so that every result type can name it."""

from __future__ import annotations

import enum

from ._proto import kiln_pb2 as pb


class Tier(enum.IntEnum):
    UNSPECIFIED = pb.TIER_UNSPECIFIED
    MEMORY = pb.TIER_MEMORY
    DISK = pb.TIER_DISK
    REMOTE = pb.TIER_REMOTE
    #: This request paid the compile.
    COMPILED = pb.TIER_COMPILED
    #: This request waited on a compile another request had started.
    JOINED = pb.TIER_JOINED

    def __str__(self) -> str:
        return self.name.lower()
