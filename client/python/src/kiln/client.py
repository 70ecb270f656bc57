"""`Client`: kilnd's Compiler, Blobs and Snapshots services over one gRPC channel.

Errors come back as :class:`kiln.KilnError` subclasses carrying the gRPC status; results as the
dataclasses of :mod:`kiln.results`. A client is thread-safe (gRPC channels are) but not
fork-safe: make a new one in a child process.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import grpc

from . import _auth, errors
from ._closing import Closing
from ._proto import blob_pb2 as bpb
from ._proto import blob_pb2_grpc, kiln_pb2_grpc
from ._proto import kiln_pb2 as pb
from ._torch_calls import TorchGraphCalls
from ._wire import milliseconds
from .blob_lease import Lease
from .explain import Explanation
from .graph import Graph, Kernel
from .paths import daemon_uri, grpc_target
from .results import (
    BlobEntry,
    CompileResult,
    Event,
    JobFailedEvent,
    Priority,
    Stats,
    WarmProgress,
    events_from_proto,
)
from .snapshot_results import (
    RestoreResult,
    SaveResult,
    SnapshotInfo,
    SnapshotProgress,
    SnapshotSummary,
)

if TYPE_CHECKING:
    from . import snapshot

#: kilnd's gRPC message limit (max_message_mb, 256 by default); the client matches it, so a
#: large cubin or blob group never meets gRPC's default of 4 MiB.
MAX_MESSAGE_BYTES = 256 * 1024 * 1024

CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
]

GraphLike = Graph | Iterable[Kernel]
Key = bytes | str


def _key_bytes(key: Key) -> bytes:
    return key.encode() if isinstance(key, str) else bytes(key)


def _scope(namespace: str, tool_version: str) -> bpb.BlobScope:
    return bpb.BlobScope(namespace=namespace, tool_version=tool_version)


def _files(files: Mapping[str, bytes] | bytes) -> list[bpb.BlobFile]:
    if isinstance(files, (bytes, bytearray, memoryview)):
        return [bpb.BlobFile(name="", data=bytes(files))]
    return [bpb.BlobFile(name=name, data=bytes(data)) for name, data in files.items()]


class Client(TorchGraphCalls, Closing):
    """A connection to one kilnd.

    ``uri`` is ``unix:///path``, ``http://host:port`` or ``https://host:port``; left out, it is
    ``KILN_DAEMON`` or the default socket (see :mod:`kiln.paths`). ``timeout`` is the default
    deadline in seconds of the unary calls (``stats``, ``submit``, the blob calls); ``None``
    waits as long as the call takes. Streams take their own ``timeout``.

    For kilnd's TCP listener: ``token_file`` (else ``KILN_TOKEN_FILE``) holds the bearer token sent
    on every call, and ``ca_file`` (else ``KILN_CA_FILE``) a CA to trust for ``https://`` besides
    the system's. The Unix socket needs neither.
    """

    def __init__(
        self,
        uri: str | None = None,
        *,
        timeout: float | None = None,
        token_file: str | None = None,
        ca_file: str | None = None,
    ) -> None:
        self.uri = uri or daemon_uri()
        self.timeout = timeout
        target, tls = grpc_target(self.uri)
        token = _auth.read_token(token_file)
        if tls:
            credentials = grpc.ssl_channel_credentials(root_certificates=_auth.read_ca(ca_file))
            channel = grpc.secure_channel(target, credentials, options=CHANNEL_OPTIONS)
        else:
            channel = grpc.insecure_channel(target, options=CHANNEL_OPTIONS)
        self._channel = _auth.with_token(channel, token)
        self._compiler = kiln_pb2_grpc.CompilerStub(self._channel)
        self._blobs = blob_pb2_grpc.BlobsStub(self._channel)

    # -- lifecycle --

    def close(self) -> None:
        """Closes the channel; calls still running (and leases still held) end with it."""
        self._channel.close()

    def __repr__(self) -> str:
        return f"kiln.Client({self.uri!r})"

    @contextlib.contextmanager
    def _rpc(self) -> Iterator[None]:
        try:
            yield
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e, self.uri) from e

    def _timeout(self, timeout: float | None) -> float | None:
        return self.timeout if timeout is None else timeout

    # -- Compiler --

    def _request(
        self, graph: GraphLike, target: str | None, priority: Priority, omit_artifacts: bool
    ) -> pb.CompileRequest:
        g = graph if isinstance(graph, Graph) else Graph(kernels=list(graph))
        proto = g.to_proto()
        if target is not None:
            proto.target = target
        # batch_results: a warm graph's hits come in one message; _events hands them on one by one.
        return pb.CompileRequest(
            graph=proto, priority=cast("pb.Priority", int(priority)), omit_artifacts=omit_artifacts, batch_results=True
        )

    def _events(self, call: Iterator[pb.JobEvent]) -> Iterator[Event]:
        with self._rpc():
            for m in call:
                yield from events_from_proto(m)

    def _collect(self, events: Iterator[Event], on_event: Callable[[Event], None] | None) -> CompileResult:
        result = CompileResult()
        for event in events:
            if on_event is not None:
                on_event(event)
            if isinstance(event, JobFailedEvent):
                raise errors.JobFailed(event.reason, partial=result, uri=self.uri)
            result.add(event)
        return result

    def compile_events(
        self,
        graph: GraphLike,
        *,
        target: str | None = None,
        priority: Priority = Priority.UNSPECIFIED,
        omit_artifacts: bool = False,
        timeout: float | None = None,
    ) -> Iterator[Event]:
        """Submits ``graph`` and yields its events (queued, started, one per kernel, done)."""
        call = self._compiler.Compile(self._request(graph, target, priority, omit_artifacts), timeout=timeout)
        return self._events(call)

    def compile(
        self,
        graph: GraphLike,
        *,
        target: str | None = None,
        priority: Priority = Priority.UNSPECIFIED,
        omit_artifacts: bool = False,
        timeout: float | None = None,
        on_event: Callable[[Event], None] | None = None,
    ) -> CompileResult:
        """Compiles ``graph`` (a :class:`Graph` or kernels) and returns every kernel's result.

        A kernel that does not compile is a result with ``outcome == Outcome.FAILED`` and the
        compiler's log, not an exception. Raises :class:`kiln.JobFailed` when the job as a whole
        fails, and :class:`kiln.KilnError` subclasses for RPC errors.
        """
        events = self.compile_events(
            graph, target=target, priority=priority, omit_artifacts=omit_artifacts, timeout=timeout
        )
        return self._collect(events, on_event)

    def submit(
        self,
        graph: GraphLike,
        *,
        target: str | None = None,
        priority: Priority = Priority.UNSPECIFIED,
        omit_artifacts: bool = False,
        timeout: float | None = None,
    ) -> str:
        """Submits ``graph`` as a background job and returns its id at once."""
        request = self._request(graph, target, priority, omit_artifacts)
        with self._rpc():
            job_id: str = self._compiler.Submit(request, timeout=self._timeout(timeout)).job_id
            return job_id

    def watch_events(self, job_id: str, *, timeout: float | None = None) -> Iterator[Event]:
        """A job's events; those already emitted come first."""
        return self._events(self._compiler.Watch(pb.WatchRequest(job_id=job_id, batch_results=True), timeout=timeout))

    def watch(
        self, job_id: str, *, timeout: float | None = None, on_event: Callable[[Event], None] | None = None
    ) -> CompileResult:
        """Waits for a submitted job and returns its results."""
        return self._collect(self.watch_events(job_id, timeout=timeout), on_event)

    def lookup(
        self,
        graph: GraphLike,
        *,
        target: str | None = None,
        omit_artifacts: bool = False,
        timeout: float | None = None,
    ) -> CompileResult:
        """Asks the caches only; a kernel in no tier has ``outcome == Outcome.MISS``."""
        request = self._request(graph, target, Priority.UNSPECIFIED, omit_artifacts)
        return self._collect(self._events(self._compiler.Lookup(request, timeout=timeout)), None)

    def explain(
        self,
        graph: GraphLike | None = None,
        *,
        keys: Iterable[str] = (),
        torch_graphs: Iterable[tuple[str, str]] = (),
        target: str | None = None,
        timeout: float | None = None,
    ) -> list[Explanation]:
        """Why each kernel of ``graph`` (or each of ``keys``, hex as results carry them) would hit
        or miss: the inputs of its key that differ from the nearest recipe kilnd or the fleet kept
        for the same kernel. ``torch_graphs`` names torch.compile graphs by (job, name), as
        kiln.torch reports them: the latest ask for each on this kilnd. Compiles nothing."""
        request = pb.ExplainRequest(keys=list(keys), torch_graphs=[pb.TorchGraphName(job=j, name=n) for j, n in torch_graphs])
        if graph is not None:
            request.graph.CopyFrom(self._request(graph, target, Priority.UNSPECIFIED, True).graph)
        with self._rpc():
            response = self._compiler.Explain(request, timeout=self._timeout(timeout))
        return [Explanation.from_proto(k) for k in response.kernels]

    def stats(self, *, timeout: float | None = None) -> Stats:
        """Toolchains, GPUs, tiers, counters and the fleet cache of the daemon."""
        with self._rpc():
            return Stats.from_proto(self._compiler.Stats(pb.StatsRequest(), timeout=self._timeout(timeout)))

    def warm(
        self,
        graph_keys: Iterable[str] = (),
        kernel_keys: Iterable[str] = (),
        *,
        timeout: float | None = None,
        on_progress: Callable[[WarmProgress], None] | None = None,
    ) -> WarmProgress:
        """Pulls graphs (by graph key) and kernels (by key) from the fleet cache into the local
        tiers ahead of a job; returns the last progress report."""
        request = pb.WarmRequest(graph_keys=list(graph_keys), kernel_keys=list(kernel_keys))
        last = WarmProgress(0, 0, 0, 0, 0, [], False)
        with self._rpc():
            for m in self._compiler.Warm(request, timeout=timeout):
                last = WarmProgress.from_proto(m)
                if on_progress is not None:
                    on_progress(last)
        return last

    # -- Blobs --

    def get_blobs(
        self, namespace: str, tool_version: str, keys: Sequence[Key], *, timeout: float | None = None
    ) -> list[BlobEntry | None]:
        """Looks up entries by the caller's own keys, through every tier; one answer per key, in
        order, ``None`` for a miss."""
        request = bpb.GetBlobsRequest(scope=_scope(namespace, tool_version), keys=[_key_bytes(k) for k in keys])
        with self._rpc():
            response = self._blobs.GetBlobs(request, timeout=self._timeout(timeout))
        return [BlobEntry.from_proto(e) for e in response.entries]

    def put_blob(
        self,
        namespace: str,
        tool_version: str,
        key: Key,
        files: Mapping[str, bytes] | bytes,
        *,
        timeout: float | None = None,
    ) -> str:
        """Stores one entry: ``files`` by name (a group readers always see whole), or bytes for a
        single unnamed file. Returns the stored key (64 hex characters, schema kiln-blob-v1).
        Publishing releases every process and host waiting on the key's lease."""
        request = bpb.PutBlobRequest(scope=_scope(namespace, tool_version), key=_key_bytes(key), files=_files(files))
        with self._rpc():
            stored_key: str = self._blobs.PutBlob(request, timeout=self._timeout(timeout)).stored_key
            return stored_key

    def lease_blob(
        self,
        namespace: str,
        tool_version: str,
        key: Key,
        *,
        wait: float | None = None,
        hold: float | None = None,
        timeout: float | None = None,
    ) -> Lease:
        """Fleet single-flight for one entry; returns once kilnd says who produces it.

        ``wait``: seconds to wait for another producer before PROCEED (``None``: kilnd's hedge
        bound). ``hold``: seconds a GRANTED lease may be held before kilnd ends it (``None``:
        kilnd's default, 10 minutes). ``timeout`` bounds the whole stream, held lease included.
        A GRANTED lease lives while the returned :class:`Lease` is open; close it (or exit the
        process) to release it fleet-wide. A :meth:`put_blob` of the key ends it as PUBLISHED.
        """
        request = bpb.LeaseBlobRequest(
            scope=_scope(namespace, tool_version),
            key=_key_bytes(key),
            wait_ms=milliseconds(wait, "wait"),
            hold_ms=milliseconds(hold, "hold"),
        )
        call = self._blobs.LeaseBlob(request, timeout=timeout)
        try:
            with self._rpc():
                first = next(call)
        except StopIteration as e:
            call.cancel()
            raise errors.KilnError(
                grpc.StatusCode.INTERNAL, "LeaseBlob ended before its first event", uri=self.uri
            ) from e
        except BaseException:
            call.cancel()
            raise
        return Lease(call, first, self.uri)

    # -- Snapshots (the algorithm is in kiln.snapshot, imported on first use: the Triton and
    # torch integrations, which need only blobs, import this module inside a job's compile) --

    @functools.cached_property
    def _snapshots(self) -> Any:
        from ._proto import snapshot_pb2_grpc

        return snapshot_pb2_grpc.SnapshotsStub(self._channel)

    def snapshot_save(
        self,
        job: str,
        dirs: snapshot.Roots,
        keys: snapshot.Keys = None,
        *,
        timeout: float | None = None,
        on_progress: Callable[[SnapshotProgress], None] | None = None,
    ) -> SaveResult:
        """Saves ``dirs`` (``{name: dir}``, or ``DIR``/``NAME=DIR`` strings) into ``job``'s snapshot
        for this host's environment; ``keys`` are the caller's key parts (``{"torch": "2.11.0"}``
        or ``["torch=2.11.0"]``). kilnd unions them with what is stored: a save never shrinks a
        snapshot, and a file no tier lacks is never sent. See :func:`kiln.snapshot.save`."""
        from . import snapshot

        return snapshot.save(self, job, dirs, keys, timeout=timeout, on_progress=on_progress)

    def snapshot_restore(
        self,
        job: str,
        dirs: snapshot.Roots | None = None,
        keys: snapshot.Keys = None,
        *,
        timeout: float | None = None,
        on_progress: Callable[[SnapshotProgress], None] | None = None,
    ) -> RestoreResult:
        """Restores ``job``'s snapshot: every root to its recorded path, or the roots named in
        ``dirs`` to the directories given. Never overwrites a file; ``found`` is false when this
        host's environment has no snapshot of the job. See :func:`kiln.snapshot.restore`."""
        from . import snapshot

        return snapshot.restore(self, job, dirs, keys, timeout=timeout, on_progress=on_progress)

    def snapshot_list(self, job: str | None = None, *, timeout: float | None = None) -> list[SnapshotSummary]:
        """The snapshots saved through the fleet: every job's, or ``job``'s (one per environment)."""
        from . import snapshot

        return snapshot.list_snapshots(self, job, timeout=timeout)

    def snapshot_show(self, job: str, keys: snapshot.Keys = None, *, timeout: float | None = None) -> SnapshotInfo:
        """``job``'s manifest for this host's environment (``manifest`` is ``None`` if none)."""
        from . import snapshot

        return snapshot.show(self, job, keys, timeout=timeout)
