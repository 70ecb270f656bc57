"""Keys of schema kiln-key-v1, computed as kilnd computes them (proto/src/key.rs).

Each field is a one-byte tag, a u64 little-endian length and the bytes, in a fixed order; the
key is blake3 over them, as 64 lowercase hex characters. Test vectors:
proto/testdata/key-vectors.json. Needs the ``blake3`` package (``pip install 'kiln[keys]'``);
nothing else in kiln does, so it is imported only when a key is computed here.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import Any

KEY_SCHEMA = "kiln-key-v1"
GRAPH_SCHEMA = "kiln-graph-v1"
BLOB_SCHEMA = "kiln-blob-v1"

_SCHEMA = 0x01
_TOOLCHAIN = 0x02
_FINGERPRINT = 0x03
_TARGET = 0x04
_SOURCE = 0x05
_OPTION = 0x06
_HEADER_NAME = 0x07
_HEADER_CONTENT = 0x08
_ENTRY = 0x09
_KERNEL_ID = 0x0A
_KERNEL_KEY = 0x0B
_NAMESPACE = 0x0C
_TOOL_VERSION = 0x0D
_CALLER_KEY = 0x0E


def _hasher() -> Any:
    try:
        import blake3
    except ImportError as e:
        raise ImportError("kiln.keys needs the blake3 package, a dependency of kiln: pip install blake3") from e
    return blake3.blake3()


class _Encoder:
    def __init__(self, schema: str) -> None:
        self._h = _hasher()
        self.field(_SCHEMA, schema.encode())

    def field(self, tag: int, data: bytes) -> None:
        self._h.update(bytes([tag]) + struct.pack("<Q", len(data)))
        self._h.update(data)

    def hexdigest(self) -> str:
        digest: str = self._h.hexdigest()
        return digest


def _b(value: str | bytes) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def blob_key(namespace: str, tool_version: str, caller_key: str | bytes) -> str:
    """The key kilnd stores a named blob under: blake3("kiln-blob-v1" ‖ namespace ‖ tool
    version ‖ caller key)."""
    e = _Encoder(BLOB_SCHEMA)
    e.field(_NAMESPACE, namespace.encode())
    e.field(_TOOL_VERSION, tool_version.encode())
    e.field(_CALLER_KEY, _b(caller_key))
    return e.hexdigest()


def kernel_key(
    toolchain: str,
    fingerprint: str,
    target: str,
    source: str | bytes,
    options: Sequence[str] = (),
    headers: Iterable[tuple[str, str | bytes]] = (),
    entries: Sequence[str] = (),
) -> str:
    """One kernel's key. ``fingerprint`` is the toolchain's 64 hex characters (``kiln doctor``
    prints it); options keep their order; headers are sorted by name (then content)."""
    e = _Encoder(KEY_SCHEMA)
    e.field(_TOOLCHAIN, toolchain.encode())
    e.field(_FINGERPRINT, bytes.fromhex(fingerprint))
    e.field(_TARGET, target.encode())
    e.field(_SOURCE, _b(source))
    for option in options:
        e.field(_OPTION, option.encode())
    for name, content in sorted((n.encode(), _b(c)) for n, c in headers):
        e.field(_HEADER_NAME, name)
        e.field(_HEADER_CONTENT, content)
    for entry in entries:
        e.field(_ENTRY, entry.encode())
    return e.hexdigest()


def graph_key(target: str, kernels: Iterable[tuple[str, str]]) -> str:
    """A graph manifest's key: the target and each kernel's ``(id, key hex)``, in graph order."""
    e = _Encoder(GRAPH_SCHEMA)
    e.field(_TARGET, target.encode())
    for kernel_id, key in kernels:
        e.field(_KERNEL_ID, kernel_id.encode())
        e.field(_KERNEL_KEY, bytes.fromhex(key))
    return e.hexdigest()
