"""A stand-in for torch 2.11 with only the pieces kiln.torch touches, for the tests of the
adapter where torch is not installed. It models the interfaces (names, signatures, how the
remote cache classes are looked up, when Dynamo's compile callbacks run), not torch's code.
FAKE_TORCH_VERSION sets the version. As in torch 2.11, ``import torch`` imports no
``torch._dynamo`` module; ``torch.compile()`` does, and Inductor's ``codecache``."""

import os

__version__ = os.environ.get("FAKE_TORCH_VERSION", "2.11.0+cu130")


def compile(fn):
    """A compiled ``fn``: each call runs one fake compile (see torch._dynamo.convert_frame)."""
    import torch._dynamo
    import torch._inductor.codecache
    import torch._inductor.runtime.triton_compat

    def compiled(*args):
        return torch._dynamo.convert_frame.compile_and_run(fn, args)

    return compiled
