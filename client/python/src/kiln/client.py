"""`Client`: kilnd's Compiler, Blobs and Snapshots services over one gRPC channel.

Errors come back as :class:`kiln.KilnError` subclasses carrying the gRPC status; results as the
dataclasses of :mod:`kiln.results`. A client is thread-safe (gRPC channels are) but not
fork-safe: make a new one in a child process.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import grpc

from . import _auth, errors
from ._closing import Closing
from ._proto import blob_pb2 as bpb
from ._proto import blob_pb2_grpc, kiln_pb2_grpc
from ._proto import kiln_pb2 as pb
from ._torch_results import TorchGraphAnswer, TorchGraphCost, TorchJobReturn, TorchJobs
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


def _ms(seconds: float | None, field: str) -> int:
    if seconds is None:
        return 0
    if seconds < 0:
        raise ValueError(f"{field}: must not be negative")
    return max(1, round(seconds * 1000)) if seconds > 0 else 0


class TorchGraphClaim(Closing):
    """kilnd's answer to :meth:`Client.claim_torch_graph`; where it is ``compile_here``, the
    claim, held until :meth:`close` (a context manager closes it)."""

    def __init__(self, answer: TorchGraphAnswer, call: Any) -> None:
        self.answer = answer
        self._call = call

    def close(self) -> None:
        """Ends the claim: after a publish, or to hand the compile to whoever asks next."""
        self._call.cancel()


class Client(Closing):
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
        self._snapshots_stub: Any = None
        self._graphs_stub: Any = None

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
            wait_ms=_ms(wait, "wait"),
            hold_ms=_ms(hold, "hold"),
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

    # -- torch.compile graphs (kiln.torch's graph path; the stubs are imported on first use) --

    @property
    def _graphs(self) -> Any:
        if self._graphs_stub is None:
            from ._proto import graph_pb2_grpc

            self._graphs_stub = graph_pb2_grpc.TorchGraphsStub(self._channel)
        return self._graphs_stub

    def compile_torch_graph(
        self,
        payload: bytes,
        torch_version: str,
        *,
        job: str = "",
        name: str = "",
        compile_timeout: float | None = None,
        timeout: float | None = None,
        triton_version: str = "",
        python_version: str = "",
        cuda_version: str = "",
        wait_for_claim: float = 0.0,
        no_worker: bool = False,
    ) -> TorchGraphAnswer:
        """Compiles one serialized torch.compile graph in kilnd's torch workers, or answers it
        from the caches; waits for the answer (``timeout`` bounds the call, ``compile_timeout`` the
        compile, ``None`` for kilnd's). The payload is what :mod:`kiln.torch._graph` writes.
        The versions besides torch's are the process's environment: with them the graph is keyed
        by it, and a stored answer comes back without kilnd starting a torch worker.
        ``wait_for_claim`` (seconds, at most 10): how long kilnd waits for another process to
        claim the graph (:meth:`claim_torch_graph`) before its worker compiles it. With
        ``no_worker`` no worker compiles it and kilnd waits for nobody's compile of it: where no
        tier holds it, the answer is ``compile_here`` with an empty key (compile it yourself;
        there is nothing to publish)."""
        from ._proto import graph_pb2

        request = self._graph_request(
            graph_pb2, payload, torch_version, job, name, compile_timeout, triton_version, python_version, cuda_version
        )
        request.wait_for_claim_ms = _ms(wait_for_claim, "wait_for_claim")
        request.no_worker = no_worker
        with self._rpc():
            reply = self._graphs.CompileTorchGraph(request, timeout=self._timeout(timeout))
        return TorchGraphAnswer.from_proto(reply)

    def claim_torch_graph(
        self,
        payload: bytes,
        torch_version: str,
        *,
        job: str = "",
        name: str = "",
        compile_timeout: float | None = None,
        timeout: float | None = None,
        triton_version: str = "",
        python_version: str = "",
        cuda_version: str = "",
        prefer_workers: bool = False,
        answer_within: float | None = None,
        wait_for_claim: float = 0.0,
        no_worker: bool = False,
    ) -> TorchGraphClaim:
        """:meth:`compile_torch_graph` for a process that can compile the graph itself: where
        nobody has it and nobody compiles it, the answer is ``compile_here`` and the claim is this
        process's until :meth:`TorchGraphClaim.close`. It compiles the graph, then calls
        :meth:`publish_torch_graph` with the answer's key; meanwhile every other process asking
        for the graph waits for that publish, and a claim closed without one releases them. With
        ``prefer_workers``, a graph nobody has is compiled by an idle torch worker of kilnd's and
        answered, and claimed only where no worker is idle. ``answer_within`` (seconds) bounds the
        wait for the first answer (another process's compile, say) apart from the claim's life:
        past it the call is cancelled and :class:`errors.DeadlineExceeded` raised.
        ``wait_for_claim`` (seconds, at most 10): how long kilnd waits for another process to
        claim the graph before granting this one the claim. ``no_worker``: kilnd waits for
        nobody's compile: where another process or host compiles the graph, the answer is
        ``compile_here`` with an empty key (compile it for yourself; publish nothing)."""
        from ._proto import graph_pb2

        request = self._graph_request(
            graph_pb2, payload, torch_version, job, name, compile_timeout, triton_version, python_version, cuda_version
        )
        request.prefer_workers = prefer_workers
        request.wait_for_claim_ms = _ms(wait_for_claim, "wait_for_claim")
        request.no_worker = no_worker
        with self._rpc():
            call = self._graphs.ClaimTorchGraph(request, timeout=self._timeout(timeout))
            first = _first_message(call, answer_within, self.uri)
        return TorchGraphClaim(TorchGraphAnswer.from_proto(first), call)

    def publish_torch_graph(self, key: str, artifacts: bytes, compile_seconds: float, *, timeout: float | None = None) -> None:
        """Stores what this process compiled under the key its claim was granted: in kilnd's
        tiers and the fleet, for every process waiting for it and every later one."""
        from ._proto import graph_pb2

        request = graph_pb2.PublishTorchGraphRequest(key=key, artifacts=artifacts, compile_micros=int(max(compile_seconds, 0.0) * 1e6))
        with self._rpc():
            self._graphs.PublishTorchGraph(request, timeout=self._timeout(timeout))

    @staticmethod
    def _graph_request(
        graph_pb2: Any,
        payload: bytes,
        torch_version: str,
        job: str,
        name: str,
        compile_timeout: float | None,
        triton_version: str,
        python_version: str,
        cuda_version: str,
    ) -> Any:
        return graph_pb2.TorchGraphRequest(
            torch_version=torch_version,
            triton_version=triton_version,
            python_version=python_version,
            cuda_version=cuda_version,
            payload=payload,
            job=job,
            name=name,
            timeout_ms=_ms(compile_timeout, "compile_timeout"),
        )

    def warm_torch_workers(self, *, start: bool = True, timeout: float | None = None) -> str | None:
        """Asks kilnd to start its torch workers now, in the background, so that the first
        graph does not pay their import of torch. Returns the workers' torch version when they
        were already up, else None (they are starting). With ``start=False`` kilnd only says
        whether they are up."""
        from ._proto import graph_pb2

        with self._rpc():
            request = graph_pb2.WarmTorchWorkersRequest(ask_only=not start)
            reply = self._graphs.WarmTorchWorkers(request, timeout=self._timeout(timeout))
        return reply.torch_version if reply.ready else None

    def report_torch_graphs(
        self,
        job: str,
        fallbacks: Mapping[str, int],
        graphs: Sequence[TorchGraphCost],
        *,
        process: str = "",
        rank: int = -1,
        started_unix_ms: int = 0,
        ended: bool = False,
        timeout: float | None = None,
    ) -> TorchJobReturn:
        """Reports a process's fallbacks (since its last report) and its graphs' costs (from its
        start, under ``process``, a random id new each time it starts: kilnd and the fleet keep
        each process's latest account); returns whether compiling paid off for the job, as the
        fleet reckons it (kilnd's own figures when it cannot reach the fleet cache)."""
        from ._proto import graph_pb2

        request = graph_pb2.TorchGraphReport(
            job=job,
            fallbacks=dict(fallbacks),
            graphs=[g.to_proto() for g in graphs],
            process=process,
            rank=rank,
            started_unix_ms=started_unix_ms,
            ended=ended,
        )
        with self._rpc():
            reply = self._graphs.ReportTorchGraphs(request, timeout=self._timeout(timeout))
        return TorchJobReturn.from_proto(reply.job)

    def torch_jobs(self, job: str = "", *, limit: int = 0, timeout: float | None = None) -> TorchJobs:
        """torch.compile jobs' returns, most recently reported first (one job's when ``job`` is
        given): the fleet ledger's, or this kilnd's without a fleet cache (``source`` says)."""
        from ._proto import kiln_pb2

        with self._rpc():
            reply = self._graphs.TorchJobs(kiln_pb2.TorchJobsRequest(job=job, limit=limit), timeout=self._timeout(timeout))
        return TorchJobs.from_proto(reply)

    # -- Snapshots (the algorithm is in kiln.snapshot, imported on first use: the Triton and
    # torch integrations, which need only blobs, import this module inside a job's compile) --

    @property
    def _snapshots(self) -> Any:
        if self._snapshots_stub is None:
            from ._proto import snapshot_pb2_grpc

            self._snapshots_stub = snapshot_pb2_grpc.SnapshotsStub(self._channel)
        return self._snapshots_stub

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


def _first_message(call: Any, within: float | None, uri: str) -> Any:
    """The first message of a server stream, waiting at most ``within`` seconds for it (None: as
    long as the call lasts); past that the call is cancelled."""
    if within is None:
        try:
            return next(call)
        except StopIteration:
            raise errors.KilnError(None, "kilnd ended a graph's claim without an answer", uri=uri) from None
    box: list[Any] = []
    done = threading.Event()

    def take() -> None:
        try:
            box.append(next(call))
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            box.append(e)
        finally:
            done.set()

    threading.Thread(target=take, name="kiln-first-answer", daemon=True).start()
    if not done.wait(max(within, 0.0)):
        call.cancel()
        raise errors.DeadlineExceeded(grpc.StatusCode.DEADLINE_EXCEEDED, f"no answer within {within:.1f} s", uri=uri)
    first = box[0]
    if isinstance(first, StopIteration):
        raise errors.KilnError(None, "kilnd ended a graph's claim without an answer", uri=uri)
    if isinstance(first, BaseException):
        raise first
    return first
