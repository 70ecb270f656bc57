"""Loaded at start-up by every Python process of the torch runs (tests/gpu/site is first on their
PYTHONPATH): the parent, Inductor's compile workers, anything they start.

- ``KILN_GPU_COUNT_DIR``: counts Triton's work in this process, one line per event appended to
  ``$KILN_GPU_COUNT_DIR/<pid>.txt``: ``compile <kernel>`` for a real compile and ``load <kernel>``
  for every ``triton.compile`` call (a cache hit is a load without a compile). A cache hit
  returns from ``triton.compile`` before the pipeline starts, and a real compile always calls
  ``ASTSource.make_ir`` first, so a wrapper around ``make_ir`` counts real compiles only. The
  wrappers go in right after ``triton.compiler.compiler`` is executed (an import hook), so a
  process that never uses Triton never imports it, and ``triton.compile`` (bound by name in
  ``triton/compiler/__init__.py`` just after) is the wrapped one.
- ``KILN_GPU_SITEDIRS``: directories (``:``-separated) passed to ``site.addsitedir``, so the
  ``.pth`` files of a ``pip install --target`` directory on PYTHONPATH run as they would in
  site-packages (kiln's ``kiln-torch.pth``: ``KILN_TORCH=1``).

Then it runs the ``sitecustomize`` this one shadows, if there is one.
"""

import os
import sys


def _count_dir():
    return os.environ.get("KILN_GPU_COUNT_DIR", "")


def _record(kind, name):
    try:
        with open(os.path.join(_count_dir(), f"{os.getpid()}.txt"), "a") as f:
            f.write(f"{kind} {name}\n")
    except OSError:
        pass


def _wrap_triton(module):
    ast_source = module.ASTSource
    make_ir = ast_source.make_ir

    def counting_make_ir(self, *args, **kwargs):
        _record("compile", getattr(self, "name", "?"))
        return make_ir(self, *args, **kwargs)

    ast_source.make_ir = counting_make_ir
    compile_fn = module.compile

    def counting_compile(src, *args, **kwargs):
        _record("load", getattr(src, "name", "?"))
        return compile_fn(src, *args, **kwargs)

    counting_compile.__wrapped__ = compile_fn
    module.compile = counting_compile


def _install_count_hook():
    import importlib.abc
    import importlib.machinery

    watched = "triton.compiler.compiler"

    class Loader(importlib.abc.Loader):
        def __init__(self, inner):
            self._inner = inner

        def create_module(self, spec):
            return self._inner.create_module(spec)

        def exec_module(self, module):
            self._inner.exec_module(module)
            _wrap_triton(module)

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path, target=None):
            if fullname != watched:
                return None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                        spec.loader = Loader(spec.loader)
                    return spec
            return None

    if watched in sys.modules:
        _wrap_triton(sys.modules[watched])
    else:
        sys.meta_path.insert(0, Finder())


if _count_dir():
    _install_count_hook()

for _d in filter(None, os.environ.get("KILN_GPU_SITEDIRS", "").split(":")):
    import site

    site.addsitedir(_d)


def _chain():
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.origin and os.path.abspath(spec.origin) != os.path.abspath(__file__):
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


try:
    _chain()
except Exception:  # noqa: BLE001 - another sitecustomize's failure is not ours to raise
    pass
