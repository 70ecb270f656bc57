"""torch._inductor.runtime.triton_compat: Triton's ``triton_key``, imported by name when this
module is imported, through which torch calls it. Triton is used only with FAKE_TORCH_TRITON=1
(importing it costs every test process a second otherwise)."""

import os

HAS_TRITON = False
if os.environ.get("FAKE_TORCH_TRITON") == "1":
    from triton.runtime.cache import triton_key

    HAS_TRITON = True
