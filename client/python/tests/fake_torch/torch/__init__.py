"""A stand-in for torch 2.11 with only the pieces kiln.torch touches, for the tests of the
adapter where torch is not installed. It models the interfaces (names, signatures, how the
remote cache classes are looked up), not torch's code. FAKE_TORCH_VERSION sets the version."""

import os

__version__ = os.environ.get("FAKE_TORCH_VERSION", "2.11.0+cu130")
from . import compiler  # noqa: E402,F401
