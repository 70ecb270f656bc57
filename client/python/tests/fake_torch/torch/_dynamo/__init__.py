"""torch._dynamo as kiln meets it: the compile callbacks, and reset(), which clears them."""

from . import callback, config, convert_frame  # noqa: F401
from .callback import callback_handler, on_compile_end, on_compile_start  # noqa: F401
from torch._inductor.runtime.cache_dir_utils import cache_dir

cache_dir()  # torch 2.11 creates the Inductor directory when torch._dynamo is imported


def reset():
    callback_handler.clear()
