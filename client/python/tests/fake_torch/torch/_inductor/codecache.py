"""torch._inductor.codecache's ``torch_key()``: a per-process hash of torch's sources, memoized
as torch 2.11's ``torch_key_cache`` does (with its ``set``, which fills the memo and asserts it was
empty), that ``torch.compile()`` imports and every compile calls. ``computed_in`` names the threads
that computed it; FAKE_TORCH_KEY_SECS is how long computing it takes."""

import os
import threading
import time

computed_in = []
_cache = []


def torch_key():
    if not _cache:
        computed_in.append(threading.current_thread().name)
        time.sleep(float(os.environ.get("FAKE_TORCH_KEY_SECS", "0.05")))
        _cache.append(b"fake torch key")
    return _cache[0]


def _set(value):
    assert len(_cache) == 0
    _cache.append(value)


torch_key.set = _set
