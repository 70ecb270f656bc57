"""kilnd's torch.compile graph worker.

kilnd starts a pool of these, lazily, on the first graph request, and talks to each over
stdin/stdout in frames: a u32 little-endian length, then the payload. The first frame is the
worker's hello (one JSON object: versions, or an error). A request is a u32 length, a JSON header
({"timeout_seconds"}, and {"check": true} for ``kilnd check``'s probe, which has no payload) and
then the graph's payload as kiln.torch serializes it; an answer is a u32
length, a JSON header ({"ok", "log", "compile_micros"}) and then the answer's body: torch's
artifacts (torch.compiler.save_cache_artifacts) and the C++ the compile built (see ``bundle``).

The worker imports torch, Dynamo and Inductor once (seconds on a GPU host) and never touches the
GPU or a request itself: each request is compiled in a child forked for it alone, ahead of it, so
that its Inductor compile pool is up when the request comes (see ``Spare``); the child reads the
payload through a restricted unpickler, runs AOTAutograd and Inductor on the graph with inputs
of the graph's metadata (``torch_payload_reader``, shipped beside this script), writes its answer
to a pipe and exits. A child that crashes or runs past
its timeout is that graph's failed answer, and the worker lives on. CUDA is initialised only in
children (a process that initialised CUDA cannot fork a child that uses it).
"""

import contextlib
import inspect
import json
import os
import resource
import select
import shutil
import signal
import struct
import sys
import tempfile
import threading
import time
import traceback

from torch_payload_reader import (  # shipped beside this script, which Python puts first on sys.path
    apply_ambient,
    decode_payload,
    example_input,
    restricted_loads,
    typed_like,
)


def read_exactly(stream, n):
    data = stream.read(n)
    if len(data) != n:
        raise EOFError("kilnd closed the pipe")
    return data


def read_request(stream):
    """(header, payload), or None at the end of input."""
    try:
        (length,) = struct.unpack("<I", read_exactly(stream, 4))
    except EOFError:
        return None
    frame = read_exactly(stream, length)
    (header_len,) = struct.unpack("<I", frame[:4])
    return json.loads(frame[4 : 4 + header_len]), frame[4 + header_len :]


def write_frame(stream, data):
    stream.write(struct.pack("<I", len(data)))
    stream.write(data)
    stream.flush()


def encode_answer(header, body=b""):
    head = json.dumps(header).encode()
    return struct.pack("<I", len(head)) + head + body


def compile_backward_now():
    """Makes AOTAutograd compile a backward graph with its forward, not at a first backward
    that never runs here: the cache entry a client loads is saved only once both exist.

    functorch's config has a switch for this, but the config is part of AOTAutograd's cache
    key, and the key must be the client's. So the switch is set where AOTAutograd copies it
    into the compile's own settings, below the key."""
    import functools

    from torch._functorch import aot_autograd

    prepare = aot_autograd.prepare_aot_module_simplified
    if getattr(prepare, "kiln_backward_now", False):
        return

    @functools.wraps(prepare)
    def prepare_backward_now(*args, **kwargs):
        kwargs["force_non_lazy_backward_lowering"] = True
        return prepare(*args, **kwargs)

    prepare_backward_now.kiln_backward_now = True
    aot_autograd.prepare_aot_module_simplified = prepare_backward_now


def remote_caches_off():
    """Makes torch's remote caches (Redis, in open-source torch) answer nothing in this child.

    The client's settings travel with its graph, and some of them switch remote caches on: kiln's
    own, in the client. Here torch would look up its own Redis classes, fail and log it for every
    graph. The switches stay as the client set them, since some are part of AOTAutograd's cache key;
    the classes they name are replaced by one that misses and stores nothing."""
    from torch._inductor import remote_cache

    class Off(remote_cache.RemoteCache):
        def __init__(self, *args, **kwargs):
            pass

        def get(self, key):
            return None

        def put(self, key, value):
            pass

    for name in ("RemoteFxGraphCache", "RemoteAutotuneCache", "RemoteBundledAutotuneCache", "RemoteAOTAutogradCache",
                 "RemoteDynamoPGOCache"):
        if hasattr(remote_cache, name):
            setattr(remote_cache, name, Off)


def compile_graph(payload, phases):
    """Compiles one payload; returns the artifacts' bytes. Runs in the child only. Adds the
    seconds each step took to ``phases``, for kilnd's log."""
    import torch
    import torch._inductor.config as inductor_config
    from torch._inductor.compile_fx import compile_fx
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.compiler._cache import CacheArtifactManager
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatefulSymbolicContext

    started = time.monotonic()
    header, graph = decode_payload(payload)
    fake_mode = FakeTensorMode(shape_env=ShapeEnv())
    gm, sources = restricted_loads(graph, fake_mode)
    if not isinstance(gm, torch.fx.GraphModule):
        raise ValueError("the payload's graph is not a GraphModule")
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    if len(sources) != len(placeholders):
        raise ValueError(f"{len(sources)} sources for {len(placeholders)} placeholders")
    for node, source in zip(placeholders, sources):
        node._dynamo_source = source
    inputs = [example_input(torch, s) for s in header["inputs"]]
    # Settings that change what a compile makes are the client's, sent in the payload.
    compile_backward_now()
    remote_caches_off()
    # Dynamo fakifies each input with a static context unless a dimension was marked dynamic (the
    # client sends no graph with a symbolic input). Without one here, AOTAutograd would fakify
    # the inputs with fresh symbols: a different cache key from the client's, and a dynamic compile.
    tracing = torch._guards.TracingContext(fake_mode)
    for i, (value, source, spec) in enumerate(zip(inputs, sources, header["inputs"])):
        if isinstance(value, torch.Tensor):
            context = StatefulSymbolicContext(
                dynamic_sizes=[DimDynamic.STATIC] * value.dim(),
                constraint_sizes=[None] * value.dim(),
                tensor_source=source,
                shape_env_to_source_to_symbol_cache={},
            )
            if spec.get("fake"):
                # Fake in the process (a piece of Dynamo's DDP optimizer), so fake here:
                # AOTAutograd's cache key records it, and the process looks up that key.
                value = inputs[i] = fake_mode.from_tensor(value, source=source, symbolic_context=context)
            tracing.tensor_to_context[value] = context
    CacheArtifactManager.clear()
    autocast = apply_ambient(torch, header.get("ambient", {}))
    phases["read"] = time.monotonic() - started
    started = time.monotonic()
    with (
        contextlib.ExitStack() as stack,
        inductor_config.patch(typed_like(inductor_config, header.get("inductor_config", {}))),
        torch._functorch.config.patch(typed_like(torch._functorch.config, header.get("functorch_config", {}))),
        torch.set_grad_enabled(bool(header.get("grad_enabled", True))),
        torch._guards.tracing(tracing),
    ):
        for device, dtype in autocast:
            stack.enter_context(torch.autocast(device, dtype=dtype))
        compile_fx(gm, inputs, config_patches=header.get("config_patches") or None)
        cache_on = bool(inductor_config.fx_graph_cache)
    phases["compile"] = time.monotonic() - started
    started = time.monotonic()
    artifacts = torch.compiler.save_cache_artifacts()
    phases["save"] = time.monotonic() - started
    if artifacts is None:
        if not cache_on:
            raise RuntimeError("the compile left no cache artifacts (Inductor's FX graph cache is off)")
        # A graph that generates no code (a resume function returning a detached tensor, say)
        # leaves torch nothing to cache. The answer says so, empty: it is stored like any other,
        # so that every process that asks compiles the graph itself at once, as torch would.
        return b""
    return artifacts[0]


#: The start of an answer that carries Inductor's compiled C++ beside torch's cache artifacts.
BUNDLE_MAGIC = b"KILNGB1\n"
#: Inductor's compiled C++ a process would otherwise build again after loading the artifacts:
#: the kernels' and the wrapper's shared objects, and precompiled headers.
NATIVE_SUFFIXES = (".so", ".gch")


def native_files(cache_dir):
    """(path under the cache, bytes) of each compiled C++ file the compile left in its cache.

    torch's cache artifacts hold the C++ source, not what it compiled to: without these, a process
    that loads the artifacts on a CPU runs the C++ compiler again for every kernel. Each sits at a
    path made of a hash of its source and compile command, where the process looks first."""
    found = []
    for root, _, files in os.walk(cache_dir):
        for name in files:
            if name.endswith(NATIVE_SUFFIXES):
                path = os.path.join(root, name)
                with open(path, "rb") as f:
                    found.append((os.path.relpath(path, cache_dir), f.read()))
    return sorted(found)


def bundle(artifacts, files):
    """An answer's body: the magic, a u32 length, a JSON index, torch's artifacts, then each file."""
    index = json.dumps({"artifacts": len(artifacts), "files": [[path, len(data)] for path, data in files]}).encode()
    return BUNDLE_MAGIC + struct.pack("<I", len(index)) + index + artifacts + b"".join(data for _, data in files)


def check_compile():
    """``kilnd check``'s probe: torch.compile of a tiny function, run and checked against eager,
    in a child as a graph's compile runs (its box, its fresh cache, the GPU when there is one).
    The device it ran on."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.linspace(-3.0, 3.0, 64, device=device)
    compiled = torch.compile(lambda t: torch.nn.functional.gelu(t) * 2 + 1, fullgraph=True)(x)
    expected = torch.nn.functional.gelu(x) * 2 + 1
    if not torch.allclose(compiled, expected, atol=1e-5):
        raise RuntimeError(f"the compiled probe disagrees with eager by {(compiled - expected).abs().max().item()}")
    return device


def child(payload, out_fd, timeout_seconds, kind="graph"):
    """The per-request child: compile (a graph, or ``kilnd check``'s probe), answer through
    out_fd, exit."""
    resource.setrlimit(resource.RLIMIT_CPU, (timeout_seconds * 4 + 10, timeout_seconds * 4 + 10))
    started = time.monotonic()
    phases = {}
    try:
        if kind == "check":
            device = check_compile()
            header = {"ok": True, "log": f"compiled and ran a tiny graph on {device}", "compile_micros": int((time.monotonic() - started) * 1e6)}
            answer = encode_answer(header)
        else:
            artifacts = compile_graph(payload, phases)
            bundled = time.monotonic()
            body = bundle(artifacts, native_files(os.environ["TORCHINDUCTOR_CACHE_DIR"]) if artifacts else [])
            phases["bundle"] = time.monotonic() - bundled
            header = {"ok": True, "compile_micros": int((time.monotonic() - started) * 1e6), "phases": phases}
            answer = encode_answer(header, body)
    except BaseException:
        answer = encode_answer(
            {"ok": False, "log": traceback.format_exc()[-16000:], "compile_micros": int((time.monotonic() - started) * 1e6)}
        )
    with os.fdopen(out_fd, "wb") as out:
        out.write(answer)
    os._exit(0)


#: How long a spare child waits for its request before it starts its compile pool. A request that
#: comes sooner (the next piece of a DDP graph, right after the last) would wait for a pool that
#: takes seconds to start, for a piece that compiles in a second without one; a graph that comes
#: after a pause finds the pool up.
IDLE_BEFORE_WARM_SECONDS = 2.0


#: The nice value of a spare's compile pool. Its start (each of its processes imports torch)
#: comes after a compile, while the job that asked runs its first steps: at the lowest priority it
#: takes only cores the host leaves idle. The pool's compiles run at it too, which costs nothing
#: on a host whose jobs wait for them.
POOL_NICE = 19


def start_compile_pool():
    """Starts Inductor's pool of compile processes, as torch's own backend starts it at a
    process's first graph, without waiting for it: until it takes work, Inductor compiles each
    Triton kernel in this process. A child that started its pool only at its first kernel
    compiled most of a large graph that way. The pool starts from a thread of its own whose
    priority is POOL_NICE (Linux keeps a nice value per thread, and a process started from a
    thread inherits that thread's), so this process's own compile keeps its priority. Best
    effort: a pool that does not start leaves the compile to do without it, as torch would."""

    def start():
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), POOL_NICE)
            from torch._inductor.async_compile import maybe_warm_pool

            maybe_warm_pool()
        except Exception:  # noqa: BLE001 - the compile runs without a pool
            traceback.print_exc(file=sys.stderr)

    starter = threading.Thread(target=start, name="pool-start")
    starter.start()
    starter.join()


class Spare:
    """A child forked before its request arrives, with a fresh Inductor cache directory and, once
    it has waited a moment, its compile pool started: the next graph's compile starts warm. The child
    waits for one byte on a pipe, then reads its request from a file in its directory (a pipe
    could block the worker on a child still warming up), compiles and answers through a second
    pipe. Its own session: killing it kills its compile pool too."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="graph-")
        self.cache = os.path.join(self.dir, "inductor")
        if ISA_PROBES is not None:
            shutil.copytree(ISA_PROBES, self.cache, ignore=shutil.ignore_patterns("*.lock", "locks"))
        else:
            os.mkdir(self.cache)
        # Inherited by the child and its compile pool: where the compile writes, and its artifacts.
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = self.cache
        go_r, self.go_w = os.pipe()
        self.answer_r, answer_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            os.close(self.go_w)
            os.close(self.answer_r)
            os.setsid()
            if not select.select([go_r], [], [], IDLE_BEFORE_WARM_SECONDS)[0]:
                start_compile_pool()
            if os.read(go_r, 1) != b"1":  # the worker ended, or dropped this spare
                os._exit(0)
            with open(os.path.join(self.dir, "request"), "rb") as f:
                timeout_seconds, kind, payload = int(f.readline()), f.readline().strip().decode(), f.read()
            child(payload, answer_w, timeout_seconds, kind)
        os.close(go_r)
        os.close(answer_w)

    def run(self, payload, timeout_seconds, kind="graph"):
        """Hands the child its payload and returns its answer frame; the child is gone after."""
        started = time.monotonic()
        path = os.path.join(self.dir, "request")
        with open(path + ".tmp", "wb") as f:
            f.write(b"%d\n%s\n" % (timeout_seconds, kind.encode()))
            f.write(payload)
        os.rename(path + ".tmp", path)
        os.write(self.go_w, b"1")
        os.close(self.go_w)
        self.go_w = None
        chunks = []
        deadline = started + timeout_seconds
        timed_out = False
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            ready, _, _ = select.select([self.answer_r], [], [], left)
            if not ready:
                continue
            data = os.read(self.answer_r, 1 << 20)
            if not data:
                break
            chunks.append(data)
        status = self.end()
        micros = int((time.monotonic() - started) * 1e6)
        if timed_out:
            return encode_answer({"ok": False, "log": f"the compile ran past its {timeout_seconds} s timeout", "compile_micros": micros})
        answer = b"".join(chunks)
        if len(answer) < 4:
            how = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit status {os.WEXITSTATUS(status)}"
            return encode_answer({"ok": False, "log": f"the compile's process died ({how}) before it answered", "compile_micros": micros})
        return answer

    def end(self):
        """Kills the child's whole session (its compile pool too), reaps it and removes its
        directory; the child's wait status (0 when it was already ended)."""
        if self.pid is None:
            return 0
        # Each descriptor closed once: a number closed twice may by then name another file.
        for fd in (self.go_w, self.answer_r):
            if fd is not None:
                os.close(fd)
        self.go_w = self.answer_r = None
        for target in (-self.pid, self.pid):
            try:
                os.kill(target, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _, status = os.waitpid(self.pid, 0)
        self.pid = None
        shutil.rmtree(self.dir, ignore_errors=True)
        return status


def fork_is_clean(torch):
    """Whether a child forked now may initialise CUDA (torch refuses in a child of a process that
    initialised it)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        os.write(write_fd, b"0" if torch.cuda._is_in_bad_fork() else b"1")
        os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as r:
        clean = r.read(1) == b"1"
    os.waitpid(pid, 0)
    return clean


#: Where the worker built the test programs of its vector-instruction pick (see
#: pick_cpu_vector_isa); None until it has.
ISA_PROBES = None


def pick_cpu_vector_isa():
    """Has Inductor's C++ backend pick the CPU's vector instructions now, in the worker, before
    its first fork. It picks by building a test program for each candidate and loading it in a
    fresh interpreter, once per process: about 11 s on a 2-core host, which a child forked for
    each compile would otherwise pay again for every graph (a piece of a DDP graph, say). Each
    child's cache starts with the test programs (Spare), so that its answer carries them as
    before and the process that loads it builds none. Best effort: a child that finds no pick
    makes its own."""
    global ISA_PROBES
    probes = tempfile.mkdtemp(prefix="isa-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = probes
    try:
        from torch._inductor import cpu_vec_isa

        cpu_vec_isa.pick_vec_isa()
        ISA_PROBES = probes
    except Exception:  # noqa: BLE001 - each compile picks for itself
        traceback.print_exc(file=sys.stderr)
    finally:
        del os.environ["TORCHINDUCTOR_CACHE_DIR"]


def warm_compiler(torch):
    """Does once, in the worker, first-compile work that torch caches per process and that each
    child forked for a compile would otherwise repeat: hashing torch's own sources into its cache
    keys and, on a host without a GPU, registering Inductor's pattern-matcher replacements (traced
    under a fake mode; about half a second on a 2-core host). Children forked after inherit both,
    so each piece of a DDP graph no longer pays them. A GPU host's replacements stay with each
    child: registered for ``cuda:0`` they initialise CUDA (seen on an H200 host, 1.7 s), and a
    child forked from a process that did may not use the GPU. Best effort: a child finds whatever
    is missing itself."""
    try:
        from torch._inductor.codecache import torch_key

        torch_key()
        if torch.cuda.device_count() == 0:
            from torch._inductor.fx_passes import joint_graph, post_grad

            joint_graph.lazy_init(torch.device("cpu"))
            post_grad.lazy_init()
    except Exception:  # noqa: BLE001 - each child warms up for itself
        traceback.print_exc(file=sys.stderr)


def same_ptxas():
    """Has Triton assemble with torch's own ptxas in this worker, its children and their compile
    pools, as the process that loads the answer does (kiln.torch sets the same). Triton keys its
    cache with the ptxas it uses, and torch sets its own only where it compiles a kernel: in a
    pool's process, or in the compiling process just before. A kernel compiled in the pool was
    then compiled again by the parent, which looked it up under Triton's bundled ptxas, and a
    process on another GPU, whose first kernel set torch's, missed every kernel of the answer."""
    try:
        from torch._inductor.runtime.compile_tasks import _set_triton_ptxas_path
    except ImportError:
        return
    _set_triton_ptxas_path()


def hello():
    import torch
    import torch._dynamo  # noqa: F401  (imported here once, before any request)
    import torch._inductor.compile_fx  # noqa: F401
    import torch.fx._graph_pickler  # noqa: F401
    from torch._functorch import aot_autograd

    warm_compiler(torch)
    # Each compile runs in a forked child, which may use CUDA only if this process never
    # initialised it (kilnd sets PYTORCH_NVML_BASED_CUDA_CHECK so that imports do not).
    # (A host without a GPU has nothing to lose: its compiles never touch CUDA.)
    if torch.cuda.device_count() > 0 and not fork_is_clean(torch):
        raise RuntimeError(
            "CUDA was initialised in the torch worker before its first fork, so no compile could use the GPU "
            "(is PYTORCH_NVML_BASED_CUDA_CHECK=1 honoured, and NVML available?)"
        )
    if torch.cuda.device_count() == 0:
        pick_cpu_vector_isa()
    same_ptxas()
    # compile_backward_now's hook: a torch without it cannot answer a training graph whole.
    if "force_non_lazy_backward_lowering" not in inspect.signature(aot_autograd.prepare_aot_module_simplified).parameters:
        raise RuntimeError(f"torch {torch.__version__}: AOTAutograd takes no force_non_lazy_backward_lowering")

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = ""
    return {
        "torch": torch.__version__,
        "location": os.path.dirname(torch.__file__),
        # Everything about the worker that can change a compile's output, and nothing
        # host-specific: kilnd adds the GPUs itself. Hashed into every graph's key.
        "fingerprint": {
            "torch": torch.__version__,
            "triton": triton_version,
            "python": sys.version.split()[0],
            "cuda": torch.version.cuda or "",
        },
    }


def main():
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    # The children's Triton caches live in this worker's private home, which kilnd made; each
    # child starts from an empty Inductor cache of its own so that its artifacts are whole.
    try:
        greeting = hello()
    except BaseException:
        write_frame(stdout, json.dumps({"error": traceback.format_exc()[-4000:]}).encode())
        return
    write_frame(stdout, json.dumps(greeting).encode())
    spare = Spare()
    try:
        while True:
            request = read_request(stdin)
            if request is None:
                return
            header, payload = request
            timeout_seconds = max(1, int(header.get("timeout_seconds", 600)))
            answer = spare.run(payload, timeout_seconds, "check" if header.get("check") else "graph")
            spare = Spare()
            write_frame(stdout, answer)
    finally:
        spare.end()

if __name__ == "__main__":
    main()
