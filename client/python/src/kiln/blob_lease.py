"""A blob lease held as a stream: what :meth:`kiln.Client.lease_blob` answers.

kilnd grants a GRANTED lease for as long as the caller keeps the stream open; the object reads
the stream's end (PUBLISHED or EXPIRED) in a thread of its own only when asked to wait, so that
an open lease costs the caller nothing until then.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import cast

import grpc

from ._closing import Closing
from ._proto import blob_pb2 as bpb
from .results import BlobEntry, LeaseKind


class Lease(Closing):
    """The answer of :meth:`Client.lease_blob`, holding its stream.

    ``kind`` is GRANTED (the caller produces the entry and holds the lease while this object is
    open), FOUND (``entry`` holds the published entry) or PROCEED (``reason`` says why there is
    no lease). Close it to release a GRANTED lease at once; it is also a context manager.
    """

    def __init__(self, call: grpc.Call, first: bpb.LeaseBlobEvent, uri: str) -> None:
        self._call = call
        self._uri = uri
        self.kind = LeaseKind(first.kind) if first.kind in LeaseKind._value2member_map_ else LeaseKind.UNSPECIFIED
        self.entry: BlobEntry | None = BlobEntry.from_proto(first.entry) if first.HasField("entry") else None
        self.reason: str = first.reason
        self._end: LeaseKind | None = None
        self._end_reason = ""
        self._reader: threading.Thread | None = None
        self._lock = threading.Lock()
        if self.kind != LeaseKind.GRANTED:
            # FOUND and PROCEED end the exchange; nothing is held.
            self._end = self.kind
            call.cancel()

    @property
    def granted(self) -> bool:
        return self.kind == LeaseKind.GRANTED

    def _read_end(self) -> None:
        kind, reason = None, ""
        try:
            for m in cast("Iterator[bpb.LeaseBlobEvent]", self._call):
                if int(m.kind) in (LeaseKind.PUBLISHED, LeaseKind.EXPIRED):
                    kind, reason = LeaseKind(m.kind), m.reason
                    break
        except grpc.RpcError:
            pass
        self._end, self._end_reason = kind, reason

    def wait(self, timeout: float | None = None) -> LeaseKind | None:
        """For a GRANTED lease: waits until kilnd ends it, and returns PUBLISHED (a put of the key
        landed) or EXPIRED (the hold bound passed); ``None`` when the stream broke or was closed,
        or the timeout passed first. Other kinds return at once."""
        if self.kind != LeaseKind.GRANTED:
            return self.kind
        with self._lock:
            if self._reader is None:
                self._reader = threading.Thread(target=self._read_end, name="kiln-lease", daemon=True)
                self._reader.start()
        self._reader.join(timeout)
        return self._end

    @property
    def end_reason(self) -> str:
        """Why an EXPIRED lease ended."""
        return self._end_reason

    def close(self) -> None:
        """Releases the lease (if GRANTED and still held); safe to call twice."""
        self._call.cancel()

    def __repr__(self) -> str:
        return f"kiln.Lease({self.kind}, reason={self.reason!r})"
