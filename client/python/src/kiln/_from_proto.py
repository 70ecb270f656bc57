"""The one conversion every result type's ``from_proto`` shares: a leaf module, so that
:mod:`kiln.results`, :mod:`kiln.snapshot_results` and :mod:`kiln.torch.results` can all use it."""

from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    Result = TypeVar("Result", bound=DataclassInstance)


def from_message(cls: type[Result], m: Any, **converted: Any) -> Result:
    """A ``cls`` whose fields are copied from the same-named fields of the message ``m``, but for
    those given in ``converted``. The result types name their fields as the messages do, so a
    conversion states only what is more than a copy: repeated fields and maps (protobuf
    containers, made lists and dicts), nested messages, enums, bytes and renamed fields."""
    copied = {f.name: getattr(m, f.name) for f in fields(cls) if f.name not in converted}
    return cls(**copied, **converted)
