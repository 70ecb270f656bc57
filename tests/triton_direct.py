"""Compiles add_kernel (BLOCK=1024, 4 warps, sm_90) straight through triton.compile and writes the
cubin to stdout, for the test that kiln's Triton cubin equals Triton's own.

The module is loaded under the same content-derived file name kiln's worker uses, because Triton
writes the source file name into the cubin's line information."""
import hashlib
import linecache
import sys
import types

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler.compiler import ASTSource

text = open(sys.argv[1]).read()
digest = hashlib.sha256(text.encode()).hexdigest()[:16]
filename = f"kiln/{digest}/kernel.py"
linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
module = types.ModuleType(f"kiln_{digest}")
sys.modules[module.__name__] = module
exec(compile(text, filename, "exec"), module.__dict__)
signature = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
source = ASTSource(module.add_kernel, signature, constexprs={"BLOCK": 1024}, attrs={})
kernel = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
sys.stdout.buffer.write(kernel.asm["cubin"])
