import os


def _tristate(name):
    value = os.environ.get(name)
    return None if value is None else value == "1"


fx_graph_remote_cache = _tristate("TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE")
autotune_remote_cache = _tristate("TORCHINDUCTOR_AUTOTUNE_REMOTE_CACHE")
bundled_autotune_remote_cache = _tristate("TORCHINDUCTOR_BUNDLED_AUTOTUNE_REMOTE_CACHE")
