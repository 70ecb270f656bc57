"""``torch.compiler``'s mega-cache calls, as kiln.torch_artifacts uses them. FAKE_TORCH_ARTIFACTS
is what ``save_cache_artifacts`` returns (unset: nothing compiled, ``None``); ``load_cache_artifacts``
writes what it was given to the file FAKE_TORCH_LOADED."""

import os


def save_cache_artifacts():
    data = os.environ.get("FAKE_TORCH_ARTIFACTS")
    return None if data is None else (data.encode(), object())


def load_cache_artifacts(serialized_artifacts: bytes):
    with open(os.environ["FAKE_TORCH_LOADED"], "wb") as f:
        f.write(serialized_artifacts)
    return object()
