"""What a torch.compile graph asks kilnd, and what kiln.torch does with the answer.

kilnd keys each graph with the process's torch, Triton, Python and CUDA and the host's GPUs, and
answers with torch's own cache artifacts (a tier's, the fleet's, or another process's compile,
waited for), a grant to compile the graph here and share it (:mod:`kiln.torch._claim`), or a
reason the process compiles it itself: a fallback, counted by reason (:data:`FALLBACK_REASONS`)
and never a wrong result.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import settings
from .._torch_calls import TorchGraphClaim, TorchGraphRequest
from .._torch_results import TorchGraphAnswer
from .._warn import warn_once
from . import _inductor
from ._answer import BadBundle, Bundle, place
from ._answer import parse as parse_bundle
from ._claim import Grant
from ._ledger import GraphRecord, _ledger
from ._ledger import report_soon as _report_soon

log = logging.getLogger("kiln")

#: The longest a graph's call to kilnd lasts: a claim's life while its process compiles and
#: publishes, and an async graph's wait for kilnd's workers (a cold GPT-2 graph takes tens of
#: seconds). A blocking wait for another process's compile is bounded by :func:`wait_bound`.
COMPILE_WAIT_SECS = 1800.0

#: Why a graph was compiled in-process instead of by kilnd. Each is counted and named; none
#: costs the job more than torch's own compile of the graph (plus the round trip that found it).
FALLBACK_REASONS = (
    "kilnd_unreachable",  # no answer from kilnd (down, or backing off after it was)
    "unserializable",  # the graph or its inputs cannot travel (dynamic shapes, tensor subclasses...)
    "worker_failed",  # kilnd's worker crashed, timed out or raised
    # the graph calls an operator the job registered itself (torch.library), which kilnd's
    # workers, importing torch alone, do not have
    "job_operator",
    "torch_mismatch",  # kilnd's torch workers run another torch
    "not_reused",  # kilnd's artifacts did not give torch a cache hit here
    "no_torch_worker",  # kilnd has no interpreter with torch for its workers
    "late",  # another process's compile of it did not land within the wait bound (wait_bound)
    # no tier had it, and it was not shared: its code names its own GPU, another process or host
    # was compiling it (a rank waits for nobody), or its compile left nothing to share
    "unshared",
    "not_chosen",  # KILN_TORCH_GRAPHS names other layouts than the graph's: no warning
)
#: Reasons that are what the user asked for, the default, or what torch itself would do: logged,
#: not warned.
QUIET_REASONS = frozenset({"not_chosen", "unshared"})


def fallback(reason: str, detail: object, *, eager: bool = False) -> None:
    """Counts and reports a graph's fallback; warns unless its reason is quiet. ``eager``: the
    graph is an async one, which runs eagerly for the rest of the process instead (never compiled
    on the training thread), and the warning says so."""
    with _ledger.lock:
        _ledger.fallbacks[reason] = _ledger.fallbacks.get(reason, 0) + 1
        _ledger.unreported[reason] = _ledger.unreported.get(reason, 0) + 1
    # Reported like every graph's cost, even by a process none of whose graphs reached kilnd.
    _report_soon()
    if reason in QUIET_REASONS:
        log.info("kiln: a torch.compile graph is compiled in this process (%s): %s", reason, detail)
        return
    instead = (
        "runs eagerly for the rest of this process instead of compiled by kilnd (%s): %s "
        "(KILN_TORCH_ASYNC=0, or kiln.torch.blocking() around its first call, compiles it in the process)"
        if eager
        else "is compiled in this process instead of by kilnd (%s): %s"
    )
    warn_once(f"torch-graph:{reason}", "kiln: a torch.compile graph " + instead, reason, detail)


def nothing_shared(record: GraphRecord) -> None:
    """Counts a claimed graph whose compile left torch no cache artifacts to share (one that
    generated no code): compiled here as torch would, and nobody else's to load."""
    if record.how == "in-process":
        fallback("unshared", "its compile left no cache artifacts to share")



@dataclass
class Answer:
    bundle: Bundle
    tier: str
    compile_s: float
    key: str = ""


@dataclass(frozen=True)
class Request:
    """What this process asks kilnd for one graph, and how.

    ``claim``: the process can share its own compile (its code is what every process of the
    graph runs), so where nobody has the graph it is granted the claim and compiles it;
    ``no_worker``: the process waits for nobody's compile: it takes a stored answer, or (with
    ``claim``) the claim where nobody else holds one, and otherwise compiles the graph for itself
    at once, as torch would."""

    payload: bytes
    name: str
    claim: bool = False
    wait_for_claim: float = 0.0
    no_worker: bool = False


def wait_bound() -> float:
    """How long a graph waits for another process's compile of it before compiling it itself.

    The waiter would otherwise compile the graph itself, in about the time the process it waits
    for takes: that one started first, so waiting ends sooner unless it stalls or died. A dead
    claimant's claim ends with its connection (kilnd hands the compile to the next); the bound
    covers one that is alive and stuck. ``KILN_TORCH_GRAPH_WAIT_SECS`` sets it; unset, it is
    twice the longest compile this process has paid itself, and at least :data:`MIN_WAIT_SECS`
    (a cold GPT-2 graph takes about 30 s on an H100)."""
    with _ledger.lock:
        own = [g.phases.get("compile", 0.0) for g in _ledger.graphs]
    return settings.TORCH_GRAPH_WAIT_SECS.number(max(MIN_WAIT_SECS, 2.0 * max(own, default=0.0)))


#: The shortest default wait for another process's compile (see :func:`wait_bound`).
MIN_WAIT_SECS = 120.0


#: How long an async graph waits out kilnd's absence (:func:`ask_patiently`) before it stays
#: eager for good: long enough for a kilnd restarted by its supervisor, or one too busy starting
#: its workers to answer a report in time.
PATIENCE_SECS = 600.0

#: What :func:`ask` returns, counted, when kilnd does not answer.
UNREACHABLE = "kilnd_unreachable"

#: Failures an async graph asks again after: a worker that crashed or timed out on a loaded host,
#: or workers that did not start, may compile it the next time. kilnd remembers a failure for its
#: ``negative_ttl_secs`` (a minute by default), so the first retry comes after that.
RETRIED = frozenset({"worker_failed", "no_torch_worker"})
#: Seconds before each retry of :data:`RETRIED`: then the failure counts, and the graph stays eager.
RETRY_AFTER_SECS = (75.0, 300.0)


@dataclass(frozen=True)
class Again:
    """An async graph's ask that kiln tries again, uncounted (:func:`ask_patiently`)."""

    reason: str
    detail: str


def ask_patiently(
    request: Request, *, patience: float = PATIENCE_SECS, retry_after: tuple[float, ...] = RETRY_AFTER_SECS
) -> Answer | Grant | str:
    """An async graph's :func:`ask`, for a graph that runs eagerly meanwhile, so that no wait
    costs a step, while a fallback would leave it eager for the rest of the job, which torch
    would have compiled. While kilnd does not answer (it is down, or kiln backs off after any call
    of this process timed out), it asks again once the back-off ends, for up to ``patience``
    seconds. A compile kilnd's worker failed (or workers that did not start) it asks for again
    after each of ``retry_after``'s seconds. Only the last try's fallback counts."""
    from .. import _fleet

    deadline = time.monotonic() + patience
    retries = list(retry_after)
    while True:
        again = (frozenset({UNREACHABLE}) if time.monotonic() < deadline else frozenset()) | (RETRIED if retries else frozenset())
        answer = _ask(request, again=again, runs_eagerly=True)
        if not isinstance(answer, Again):
            return answer
        if answer.reason == UNREACHABLE:
            pause = min(max(_fleet.retry_in(), 1.0), max(deadline - time.monotonic(), 0.0))
        else:
            pause = retries.pop(0)
            log.info("kiln: graph %s: %s (%s); it runs eagerly and asks kilnd again in %.0f s", request.name, answer.reason, answer.detail, pause)
        time.sleep(pause)


def ask(request: Request, *, bound: float | None = None) -> Answer | Grant | str:
    """kilnd's answer (for a ``claim``, maybe the compile itself), or the fallback reason
    (already counted). ``bound`` (seconds) is how long to wait for the answer: past it the process
    compiles the graph itself (``late``)."""
    answer = _ask(request, bound=bound)
    return answer.reason if isinstance(answer, Again) else answer


def _ask(
    request: Request, *, bound: float | None = None, again: frozenset[str] = frozenset(), runs_eagerly: bool = False
) -> Answer | Grant | str | Again:
    """:func:`ask`; a fallback whose reason is in ``again`` is returned uncounted, as
    :class:`Again` (kilnd's absence only where kiln backs off: any other error of the call is
    the request's). ``runs_eagerly``: an async graph's ask, whose fallback leaves the graph eager
    (:func:`fallback`)."""
    import torch

    from .. import _fleet, errors

    def fell(reason: str, detail: object) -> str | Again:
        if reason in again and (reason != UNREACHABLE or not _fleet.available()):
            return Again(reason, str(detail))
        fallback(reason, detail, eager=runs_eagerly)
        return reason

    if not _fleet.available():
        return fell(UNREACHABLE, "kilnd did not answer recently")
    try:
        triton_version, python_version, cuda_version = environment()
        client = _fleet.client()
        graph = TorchGraphRequest(
            request.payload,
            torch.__version__,
            job=_ledger.job,
            name=request.name,
            triton_version=triton_version,
            python_version=python_version,
            cuda_version=cuda_version,
            wait_for_claim=request.wait_for_claim,
            no_worker=request.no_worker,
        )
        timeout = COMPILE_WAIT_SECS if request.claim or bound is None else min(bound + request.wait_for_claim, COMPILE_WAIT_SECS)
        asked: TorchGraphClaim | TorchGraphAnswer = (
            client.claim_torch_graph(graph, timeout=timeout, answer_within=bound)
            if request.claim
            else client.compile_torch_graph(graph, timeout=timeout)
        )
        if isinstance(asked, TorchGraphClaim):
            if asked.answer.compile_here and asked.answer.key:
                return Grant(asked, asked.answer.key)
            asked.close()
            asked = asked.answer
        answer = asked
    except errors.DeadlineExceeded as e:
        return fell("late", f"no answer within {bound or COMPILE_WAIT_SECS:.0f} s ({e.details})")
    except errors.KilnError as e:
        details = e.details or ""
        if any(f"{part}_version" in details for part in ("torch", "triton", "python", "cuda")):
            return fell("torch_mismatch", details)
        if "no torch worker" in details:
            return fell("no_torch_worker", details)
        _fleet.failed(e, "torch graph compile")
        return fell(UNREACHABLE, details)
    if answer.compile_here:
        return fell("unshared", answer.log or "no tier had it, and nobody could share its compile: compiled here, as torch would")
    if not answer.ok:
        last = answer.log.strip().splitlines()[-1:] or ["no log"]
        log.debug("kiln: the torch worker's log for graph %s:\n%s", request.name, answer.log)
        missing = last[0].partition("MissingOperator: ")[2]
        if missing:
            # The worker imports torch alone: no retry compiles it.
            return fell("job_operator", f"{missing}: the job defines it (torch.library), and kilnd's workers import torch alone")
        return fell("worker_failed", last[0])
    try:
        bundle = parse_bundle(answer.artifacts)
    except BadBundle as e:
        return fell("worker_failed", f"kilnd's answer does not read: {e}")
    if not bundle.artifacts:
        # The graph's compile generates no code: torch keeps nothing of it to load.
        return fell("unshared", "its compile generates no code, so nothing of it is shared: it runs in this process, as torch would")
    return Answer(bundle, answer.tier.name.lower(), answer.compile_seconds, answer.key)


@functools.cache
def environment() -> tuple[str, str, str]:
    """This process's Triton, Python and CUDA versions, as kilnd's workers report theirs."""
    import sys

    import torch

    try:
        import triton

        triton_version = str(triton.__version__)
    except ImportError:
        triton_version = ""
    return triton_version, sys.version.split()[0], torch.version.cuda or ""


def load(torch: Any, answer: Answer, record: GraphRecord, inputs: list[Any], compile_in_process: Callable[[], Any]) -> tuple[Any, bool]:
    """Loads kilnd's artifacts and lets Inductor find them: (compiled, whether torch used them).

    torch hits at one of two levels. A graph hits AOTAutograd's cache, a DDP piece too (the
    worker makes its inputs fake, as here): nothing is traced again. A graph on another GPU than
    the first misses it (its key names the device), so AOTAutograd traces it again here and its
    forward and backward graphs hit Inductor's FX graph cache with the entries moved from
    ``cuda:0`` (:mod:`kiln.torch._device`): no code generation and no kernel compile."""
    import torch._dynamo.utils
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    place(answer.bundle.files, cache_dir())
    record.native_files = [path for path, _ in answer.bundle.files]
    torch.compiler.load_cache_artifacts(answer.bundle.artifacts)

    def lookups() -> tuple[int, int, int]:
        counters = torch._dynamo.utils.counters
        inductor = counters["inductor"]
        fx_misses = inductor["fxgraph_cache_miss"] + inductor["fxgraph_cache_bypass"]
        return counters["aot_autograd"]["autograd_cache_miss"], fx_misses, inductor["fxgraph_cache_hit"]

    before = lookups()
    _inductor.pool_off()
    _inductor.vec_isa_picked(inputs)
    compiled = compile_in_process()
    aot_misses, fx_misses, fx_hits = (after - was for after, was in zip(lookups(), before, strict=True))
    # Code generation is what a miss would cost: Inductor found the graph's code (an AOTAutograd
    # miss that hits the FX graph cache only traced the joint graph again).
    return compiled, fx_misses == 0 and (aot_misses == 0 or fx_hits > 0)
