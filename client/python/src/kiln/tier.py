"""Which tier answered a request: a leaf module, so that every result type can name it."""

from __future__ import annotations

from ._proto import kiln_pb2 as pb
from ._wire import WireEnum


class Tier(WireEnum):
    UNSPECIFIED = pb.TIER_UNSPECIFIED
    MEMORY = pb.TIER_MEMORY
    DISK = pb.TIER_DISK
    REMOTE = pb.TIER_REMOTE
    #: This request paid the compile.
    COMPILED = pb.TIER_COMPILED
    #: This request waited on a compile another request had started.
    JOINED = pb.TIER_JOINED
