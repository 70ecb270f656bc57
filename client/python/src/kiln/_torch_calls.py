"""kilnd's ``kiln.v1.TorchGraphs`` calls, as :class:`kiln.Client` makes them: kiln.torch's graph
path (a graph asked for, claimed and published), the torch workers, and the processes' accounts
of their jobs. The stubs are imported on first use, as the graph path is."""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from . import errors
from ._closing import Closing
from ._torch_results import TorchGraphAnswer, TorchGraphCost, TorchJobReturn, TorchJobs
from ._wire import milliseconds


@dataclass(frozen=True)
class TorchGraphRequest:
    """One torch.compile graph as this process asks kilnd for it (:meth:`Client.compile_torch_graph`,
    :meth:`Client.claim_torch_graph`). The payload is what :mod:`kiln.torch._graph` writes. The
    versions besides torch's are the process's environment: with them the graph is keyed by it,
    and a stored answer comes back without kilnd starting a torch worker. ``compile_timeout``
    bounds the compile (``None`` for kilnd's bound). ``wait_for_claim`` (seconds, at most 10): how
    long kilnd waits for another process to claim the graph before its worker compiles it (before
    granting this one the claim, for a claim). With ``no_worker`` kilnd waits for nobody's compile
    of it and no worker compiles it: where no tier holds it, the answer is ``compile_here`` with
    an empty key (compile it for yourself; there is nothing to publish)."""

    payload: bytes
    torch_version: str
    job: str = ""
    name: str = ""
    compile_timeout: float | None = None
    triton_version: str = ""
    python_version: str = ""
    cuda_version: str = ""
    wait_for_claim: float = 0.0
    no_worker: bool = False

    def to_proto(self) -> Any:
        from ._proto import graph_pb2

        return graph_pb2.TorchGraphRequest(
            torch_version=self.torch_version,
            triton_version=self.triton_version,
            python_version=self.python_version,
            cuda_version=self.cuda_version,
            payload=self.payload,
            job=self.job,
            name=self.name,
            timeout_ms=milliseconds(self.compile_timeout, "compile_timeout"),
            wait_for_claim_ms=milliseconds(self.wait_for_claim, "wait_for_claim"),
            no_worker=self.no_worker,
        )


class TorchGraphClaim(Closing):
    """kilnd's answer to :meth:`Client.claim_torch_graph`; where it is ``compile_here``, the
    claim, held until :meth:`close` (a context manager closes it)."""

    def __init__(self, answer: TorchGraphAnswer, call: Any) -> None:
        self.answer = answer
        self._call = call

    def close(self) -> None:
        """Ends the claim: after a publish, or to hand the compile to whoever asks next."""
        self._call.cancel()


class TorchGraphCalls:
    """The torch graph calls of :class:`kiln.Client`, which supplies its channel, its address,
    its error mapping (``_rpc``) and its default deadline (``_timeout``)."""

    uri: str
    _channel: grpc.Channel

    def _rpc(self) -> contextlib.AbstractContextManager[None]:
        raise NotImplementedError

    def _timeout(self, timeout: float | None) -> float | None:
        raise NotImplementedError

    @functools.cached_property
    def _graphs(self) -> Any:
        from ._proto import graph_pb2_grpc

        return graph_pb2_grpc.TorchGraphsStub(self._channel)

    def compile_torch_graph(self, graph: TorchGraphRequest, *, timeout: float | None = None) -> TorchGraphAnswer:
        """Compiles one serialized torch.compile graph in kilnd's torch workers, or answers it
        from the caches; waits for the answer (``timeout`` bounds the call, ``None`` for the
        client's default)."""
        request = graph.to_proto()
        with self._rpc():
            reply = self._graphs.CompileTorchGraph(request, timeout=self._timeout(timeout))
        return TorchGraphAnswer.from_proto(reply)

    def claim_torch_graph(
        self,
        graph: TorchGraphRequest,
        *,
        timeout: float | None = None,
        prefer_workers: bool = False,
        answer_within: float | None = None,
    ) -> TorchGraphClaim:
        """:meth:`compile_torch_graph` for a process that can compile the graph itself: where
        nobody has it and nobody compiles it, the answer is ``compile_here`` and the claim is this
        process's until :meth:`TorchGraphClaim.close`. It compiles the graph, then calls
        :meth:`publish_torch_graph` with the answer's key; meanwhile every other process asking
        for the graph waits for that publish, and a claim closed without one releases them. With
        ``prefer_workers``, a graph nobody has is compiled by an idle torch worker of kilnd's and
        answered, and claimed only where no worker is idle. ``answer_within`` (seconds) bounds the
        wait for the first answer (another process's compile, say) apart from the claim's life:
        past it the call is cancelled and :class:`errors.DeadlineExceeded` raised. With the
        graph's ``no_worker``, where another process or host compiles the graph, the answer is
        ``compile_here`` with an empty key (compile it for yourself; publish nothing)."""
        request = graph.to_proto()
        request.prefer_workers = prefer_workers
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
        first_step_unix_ms: int = 0,
        ended: bool = False,
        timeout: float | None = None,
    ) -> TorchJobReturn:
        """Reports a process's fallbacks (since its last report) and its graphs' costs (from its
        start, under ``process``, a random id new each time it starts: kilnd and the fleet keep
        each process's latest account; ``first_step_unix_ms``, when its first step ended, gives
        the job's rank skew); returns whether compiling paid off for the job, as the
        fleet reckons it (kilnd's own figures when it cannot reach the fleet cache)."""
        from ._proto import graph_pb2

        request = graph_pb2.TorchGraphReport(
            job=job,
            fallbacks=dict(fallbacks),
            graphs=[g.to_proto() for g in graphs],
            process=process,
            rank=rank,
            started_unix_ms=started_unix_ms,
            first_step_unix_ms=first_step_unix_ms,
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
