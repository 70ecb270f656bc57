"""Inductor's cache directory: TORCHINDUCTOR_CACHE_DIR, else a default set into the variable."""

import getpass
import os
import tempfile


def cache_dir():
    path = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if path is None:
        path = os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(tempfile.gettempdir(), "torchinductor_" + getpass.getuser())
    os.makedirs(path, exist_ok=True)
    return path
