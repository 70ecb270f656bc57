"""kiln-bench's baseline for the Triton figure: triton.compile called directly, in one long-lived
Python process that imports Triton once.

Reads one JSON request per line on stdin: {"source": MODULE, "kernels": [{"name", "signature":
[[name, type], ...], "constexprs": {name: value}, "num_warps"}]}. Loads the module once, under the
same content-derived name kiln's worker gives it (Triton writes the file name into the cubin's line
information, so only then do the cubins match), compiles every kernel in order, and answers one
JSON line: {"secs": wall time of load + compiles, "cubins": [hex, ...]}. The caller sets
TRITON_ALWAYS_COMPILE=1 and a private TRITON_CACHE_DIR, as kilnd does for its workers."""
import hashlib
import json
import linecache
import sys
import time
import types

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler.compiler import ASTSource


def load_module(text):
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    name = f"kiln_{digest}"
    filename = f"kiln/{digest}/kernel.py"
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    module = types.ModuleType(name)
    module.__file__ = filename
    sys.modules[name] = module
    exec(compile(text, filename, "exec"), module.__dict__)
    return name, module


def main():
    target = GPUTarget("cuda", 90, 32)
    for line in sys.stdin:
        request = json.loads(line)
        started = time.perf_counter()
        name, module = load_module(request["source"])
        cubins = []
        for k in request["kernels"]:
            source = ASTSource(getattr(module, k["name"]), dict(k["signature"]), constexprs=k["constexprs"], attrs={})
            kernel = triton.compile(source, target=target, options={"num_warps": k["num_warps"]})
            cubins.append(kernel.asm["cubin"])
        secs = time.perf_counter() - started
        sys.modules.pop(name, None)
        print(json.dumps({"secs": secs, "cubins": [c.hex() for c in cubins]}), flush=True)


if __name__ == "__main__":
    main()
