"""kilnd's Triton compile worker.

kilnd starts a pool of these, lazily, and talks to each over stdin/stdout in frames: a u32
little-endian length, then the payload. Requests and the first frame, the worker's hello
(versions and the inputs of the toolchain fingerprint, or an error), are one JSON object each;
a response is a u32 length and the JSON of every field but the cubin, then the cubin's bytes
(triton_box.encode_answer).

A request runs client code (the kernel's module), so kilnd gives the worker a clean
environment, its own TRITON_CACHE_DIR with TRITON_ALWAYS_COMPILE=1 (Triton's cache must never
answer for kiln's), an unprivileged user when kilnd is root, and an address-space limit set here
at start. The worker itself never runs client code: each request is compiled in a child forked
for it alone (ahead of the request, as a spare), inside the box of triton_box.py, and the worker
only passes its answer on. The kernel's module runs from memory (see load_module).
"""

import collections
import contextlib
import hashlib
import inspect
import json
import linecache
import os
import resource
import struct
import sys
import time
import traceback
import types

import triton_box


def read_frame(fd):
    """The next request, read from the descriptor itself (no buffer, so `select` on it tells
    whether one is waiting), or None at the end of input."""
    try:
        return json.loads(triton_box.read_frame(fd))
    except EOFError:
        return None


def write_frame(stream, obj):
    data = json.dumps(obj, default=str).encode()
    stream.write(struct.pack("<I", len(data)))
    stream.write(data)
    stream.flush()


def limit_resources():
    memory_mb = int(os.environ.get("KILN_WORKER_MEMORY_MB", "0"))
    if memory_mb > 0:
        limit = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def hello():
    import triton
    from triton._C.libtriton import get_cache_invalidating_env_vars
    from triton.backends.nvidia.compiler import get_ptxas, get_ptxas_version
    from triton.runtime.cache import triton_key

    ptxas_versions, locations = {}, {}
    for arch in (90, 100):
        ptxas_versions[str(arch)] = get_ptxas_version(arch)
        locations[f"ptxas_sm{arch}"] = get_ptxas(arch).path
    return {
        "version": triton.__version__,
        "location": os.path.dirname(triton.__file__),
        "locations": locations,
        # Everything that can change Triton's output, and nothing host-specific: this is hashed
        # into the toolchain fingerprint, and so into every key.
        "fingerprint": {
            "version": triton.__version__,
            "python": sys.version.split()[0],
            "triton_key": triton_key(),
            "ptxas_versions": ptxas_versions,
            "TRITON_PTXAS_PATH": os.environ.get("TRITON_PTXAS_PATH", ""),
            "cache_invalidating_env_vars": get_cache_invalidating_env_vars(),
        },
    }


def constexpr_value(c):
    for kind in ("int", "float", "bool", "string"):
        if kind in c:
            return c[kind]
    raise ValueError(f"constexpr {c.get('name')} has no value")


def load_module(source, blocks=()):
    """Runs the kernel's module from memory under a file name derived from its content.

    @triton.jit reads its function's source through inspect, which finds it in linecache; the
    name (not a temporary path) is what Triton writes into the cubin's line information, so
    the same source gives the same cubin on every host and in every worker. `blocks` are the
    function extents an earlier compile of this module found (SourceBlocks); returns the
    module's name, the module, and every extent known once it has run."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    name = f"kiln_{digest}"
    filename = f"kiln/{digest}/kernel.py"
    lines = source.splitlines(True)
    linecache.cache[filename] = (len(source), None, lines, filename)
    module = types.ModuleType(name)
    module.__file__ = filename
    sys.modules[name] = module
    known = {start: count for start, count in blocks}
    with _known_extents(filename, known):
        exec(compile(source, filename, "exec"), module.__dict__)
    return name, module, sorted(known.items())


@contextlib.contextmanager
def _known_extents(filename, known):
    """inspect.getsourcelines, for the functions of `filename` only, answering from `known`
    (first line -> line count) and adding what it had to find. Everything else, and every
    other file, goes to inspect itself. Restored afterwards: the zygote loads a module too."""
    real = inspect.getsourcelines

    def getsourcelines(obj):
        fn = inspect.unwrap(obj)
        if not inspect.isfunction(fn) or fn.__code__.co_filename != filename:
            return real(obj)
        lines, start = inspect.findsource(fn)
        count = known.get(start)
        if count is None:
            block = inspect.getblock(lines[start:])
            known[start] = len(block)
            return block, start + 1
        return lines[start : start + count], start + 1

    inspect.getsourcelines = getsourcelines
    try:
        yield
    finally:
        inspect.getsourcelines = real


class SourceBlocks:
    """Where each function of a kernel module ends, as inspect found it, kept by the worker
    across the compiles of one module.

    @triton.jit reads every function's source with inspect.getsourcelines, whose getblock
    tokenizes it in pure Python: about 3 ms for a module of a dozen kernels, paid again by each
    compile, since each runs in a child of its own. The child reports the extents it found
    (first line, line count); the worker hands them to the next child that compiles the same
    source, which then slices lines instead of tokenizing them: the same lines, so the same
    cubin. Nothing else crosses, and only into compiles of that exact source: a hostile module
    that reports false extents misleads only later compiles of itself, whose code it already
    runs."""

    MODULES = 256
    PER_MODULE = 4096

    def __init__(self):
        self.known = collections.OrderedDict()

    @staticmethod
    def key(source):
        """The whole SHA-256 of the source (the module's name keeps only 64 bits of it)."""
        return hashlib.sha256(source.encode()).digest()

    def attach(self, request):
        """Adds to `request` what is known of its module."""
        source = request.get("source")
        key = self.key(source) if isinstance(source, str) else None
        if key in self.known:
            self.known.move_to_end(key)
            request["source_blocks"] = self.known[key]

    def learn(self, request, response):
        """Keeps the extents a child reported for its request's module, if every one fits the
        module's lines; removes them from the answer, which kilnd does not read."""
        reported = response.pop("source_blocks", None)
        source = request.get("source")
        if not isinstance(source, str) or not isinstance(reported, list) or len(reported) > self.PER_MODULE:
            return
        lines = len(source.splitlines())
        fits = lambda e: (
            isinstance(e, list)
            and len(e) == 2
            and all(type(x) is int for x in e)
            and 0 <= e[0] < lines
            and 1 <= e[1] <= lines - e[0]
        )
        if reported and all(fits(e) for e in reported):
            key = self.key(source)
            self.known[key] = reported
            self.known.move_to_end(key)
            while len(self.known) > self.MODULES:
                self.known.popitem(last=False)


def compile_one(request):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import ASTSource

    module_name = None
    try:
        module_name, module, extents = load_module(request["source"], request.get("source_blocks") or ())
        fn = getattr(module, request["kernel_name"], None)
        if fn is None:
            raise NameError(f"the module defines no `{request['kernel_name']}`")
        signature = {a["name"]: a["type"] for a in request["signature"]}
        constexprs = {c["name"]: constexpr_value(c) for c in request.get("constexprs", [])}
        attrs = {}
        for a in request.get("attributes", []):
            attrs.setdefault((a["arg_index"],), []).append([a["name"], a["value"]])
        source = ASTSource(fn, signature, constexprs=constexprs, attrs=attrs)
        target = GPUTarget("cuda", request["capability"], 32)
        started = time.perf_counter()
        kernel = triton.compile(source, target=target, options=request.get("options") or {})
        micros = int((time.perf_counter() - started) * 1e6)
        metadata = kernel.metadata._asdict()
        metadata["target"] = {"backend": target.backend, "arch": target.arch, "warp_size": target.warp_size}
        return {
            "ok": True,
            "cubin": bytes(kernel.asm["cubin"]),
            "ptx": kernel.asm.get("ptx", ""),
            "metadata_json": json.dumps(metadata, default=str, sort_keys=True),
            "log": "",
            "compile_micros": micros,
            "source_blocks": [list(e) for e in extents],
        }
    finally:
        if module_name:
            sys.modules.pop(module_name, None)


def readable_paths(greeting):
    """What a compile may read besides the system's libraries: the interpreter's installation,
    its import path (minus this script's directory, which holds the workers' home), Triton, and
    the ptxas binaries Triton runs."""
    here = os.path.dirname(os.path.abspath(__file__))
    paths = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, greeting["location"]]
    paths += [p for p in sys.path[1:] if p and os.path.abspath(p) != here]
    paths += [os.path.dirname(p) for p in greeting["locations"].values()]
    if os.environ.get("TRITON_PTXAS_PATH"):
        paths.append(os.path.dirname(os.environ["TRITON_PTXAS_PATH"]))
    return paths


WARM_UP = """
import triton
import triton.language as tl

@triton.jit
def kiln_warm_up(x_ptr, BLOCK: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, BLOCK))
    tl.store(x_ptr + tl.arange(0, BLOCK), x + 1)
"""


def warm_up():
    """One compile of kiln's own kernel in the zygote, so every child starts with Triton's
    first-compile work (lazy imports, LLVM and MLIR set-up) already done."""
    request = {
        "source": WARM_UP,
        "kernel_name": "kiln_warm_up",
        "signature": [{"name": "x_ptr", "type": "*fp32"}, {"name": "BLOCK", "type": "constexpr"}],
        "constexprs": [{"name": "BLOCK", "int": 128}],
        "capability": 90,
    }
    response = compile_one(request)
    if not response.get("ok"):
        raise RuntimeError("the warm-up compile failed: " + response.get("log", ""))


def main():
    # The protocol gets a private copy of fd 1, and fd 1 goes to stderr, so nothing a kernel
    # module or Triton prints can corrupt a frame.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    inp = sys.stdin.fileno()
    try:
        limit_resources()
        greeting = hello()
        protocol_fds = [inp, out.fileno()]
        box = triton_box.Box(
            os.path.join(os.environ["HOME"], "boxes"), readable_paths(greeting), compile_one, protocol_fds
        )
        greeting["box"] = triton_box.status()
        warm_up()
        box.prepare()
    except BaseException:
        write_frame(out, {"error": "Triton is not usable: " + traceback.format_exc()})
        return 1
    write_frame(out, greeting)
    blocks = SourceBlocks()
    while True:
        box.wait_for_input(inp)
        request = read_frame(inp)
        if request is None:
            return 0
        blocks.attach(request)
        try:
            response = box.run(
                request,
                cpu_seconds=request.get("cpu_seconds", 300),
                wall_seconds=request.get("wall_seconds", 300),
            )
        except BaseException:
            response = {"ok": False, "log": traceback.format_exc(), "compile_micros": 0}
        blocks.learn(request, response)
        out.write(triton_box.encode_answer(response))
        out.flush()
        # After the answer, before the next request: nothing of this compile lives on into the
        # next one, and the next spare is boxed while kilnd handles the answer.
        box.finish()


if __name__ == "__main__":
    sys.exit(main())
