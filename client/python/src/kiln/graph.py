"""Compile graphs: kernels of any toolchain (CUDA C++, PTX, Triton), mixed freely.

Build kernels with :func:`cuda_kernel`, :func:`ptx_kernel` and :func:`triton_kernel`, put them in
a :class:`Graph` and hand it to :meth:`kiln.Client.compile`. Every field goes into the kernel's
key on the daemon, so the order of options and of a Triton signature is kept as given, and a
Triton constexpr keeps its Python type (``1024`` and ``1024.0`` are different kernels).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ._proto import kiln_pb2 as pb

#: A Triton constexpr value; its Python type picks the protobuf field (bool before int).
Constexpr = bool | int | float | str


@dataclass(frozen=True)
class CudaSource:
    """CUDA C++ compiled by NVRTC straight to a cubin."""

    source: str
    #: Expressions such as ``saxpy<float>`` whose lowered names the caller needs.
    name_expressions: tuple[str, ...] = ()
    #: Headers by the name the ``#include`` spells, and their content.
    headers: tuple[tuple[str, str], ...] = ()
    #: NVRTC options from kilnd's allowlist, in order; the target goes in the graph.
    options: tuple[str, ...] = ()

    def to_proto(self) -> pb.CudaSource:
        return pb.CudaSource(
            source=self.source,
            name_expressions=list(self.name_expressions),
            headers=[pb.Header(name=n, content=c) for n, c in self.headers],
            options=list(self.options),
        )


@dataclass(frozen=True)
class PtxSource:
    """PTX assembled by ptxas for the graph's target."""

    ptx: str
    options: tuple[str, ...] = ()

    def to_proto(self) -> pb.PtxSource:
        return pb.PtxSource(ptx=self.ptx, options=list(self.options))


@dataclass(frozen=True)
class TritonSource:
    """A ``@triton.jit`` kernel in a Python module's source, compiled by kilnd's Triton workers."""

    source: str
    kernel_name: str
    #: ``(name, type)`` per parameter, in parameter order: ``("x_ptr", "*fp32")``,
    #: ``("BLOCK", "constexpr")``.
    signature: tuple[tuple[str, str], ...]
    constexprs: tuple[tuple[str, Constexpr], ...] = ()
    #: ``(arg_index, name, value)``, e.g. ``(0, "tt.divisibility", 16)``.
    attributes: tuple[tuple[int, str, int], ...] = ()
    num_warps: int = 0
    num_stages: int = 0
    num_ctas: int = 0
    maxnreg: int = 0
    #: ``None`` keeps Triton's default (fusion on).
    enable_fp_fusion: bool | None = None
    want_ptx: bool = False

    def to_proto(self) -> pb.TritonSource:
        return pb.TritonSource(
            source=self.source,
            kernel_name=self.kernel_name,
            signature=[pb.TritonArg(name=n, type=t) for n, t in self.signature],
            constexprs=[_constexpr(n, v) for n, v in self.constexprs],
            attributes=[pb.TritonAttribute(arg_index=i, name=n, value=v) for i, n, v in self.attributes],
            options=pb.TritonOptions(
                num_warps=self.num_warps,
                num_stages=self.num_stages,
                num_ctas=self.num_ctas,
                maxnreg=self.maxnreg,
                enable_fp_fusion=bool(self.enable_fp_fusion),
                enable_fp_fusion_set=self.enable_fp_fusion is not None,
            ),
            want_ptx=self.want_ptx,
        )


def _constexpr(name: str, value: Constexpr) -> pb.TritonConstexpr:
    # bool first: it is a subclass of int.
    if isinstance(value, bool):
        return pb.TritonConstexpr(name=name, bool_value=value)
    if isinstance(value, int):
        return pb.TritonConstexpr(name=name, int_value=value)
    if isinstance(value, float):
        return pb.TritonConstexpr(name=name, float_value=value)
    if isinstance(value, str):
        return pb.TritonConstexpr(name=name, string_value=value)
    raise TypeError(f"constexpr {name!r}: {type(value).__name__} is not bool, int, float or str")


Source = CudaSource | PtxSource | TritonSource


@dataclass(frozen=True)
class Kernel:
    """One kernel of a graph: an id unique within the graph, and its source."""

    id: str
    source: Source

    def to_proto(self) -> pb.Kernel:
        s = self.source
        if isinstance(s, CudaSource):
            return pb.Kernel(id=self.id, cuda=s.to_proto())
        if isinstance(s, PtxSource):
            return pb.Kernel(id=self.id, ptx=s.to_proto())
        if isinstance(s, TritonSource):
            return pb.Kernel(id=self.id, triton=s.to_proto())
        raise TypeError(f"kernel {self.id!r}: unknown source type {type(s).__name__}")


@dataclass
class Graph:
    """The unit a client needs together, e.g. every kernel of one compiled model."""

    kernels: list[Kernel] = field(default_factory=list)
    #: ``sm_90``, ``sm_90a``...; empty means the daemon's default (--target, else its GPU).
    target: str = ""
    #: Free text for logs; not part of any key.
    name: str = ""

    def add(self, kernel: Kernel) -> Graph:
        self.kernels.append(kernel)
        return self

    def to_proto(self) -> pb.CompileGraph:
        return pb.CompileGraph(name=self.name, target=self.target, kernels=[k.to_proto() for k in self.kernels])


def cuda_kernel(
    id: str,
    source: str,
    *,
    name_expressions: Iterable[str] = (),
    headers: Mapping[str, str] | Iterable[tuple[str, str]] = (),
    options: Iterable[str] = (),
) -> Kernel:
    """A CUDA C++ kernel. ``headers`` maps the name an ``#include`` spells to the content."""
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    return Kernel(id, CudaSource(source, tuple(name_expressions), tuple((n, c) for n, c in pairs), tuple(options)))


def ptx_kernel(id: str, ptx: str, *, options: Iterable[str] = ()) -> Kernel:
    """A PTX kernel, assembled by ptxas with ``options`` (from kilnd's allowlist)."""
    return Kernel(id, PtxSource(ptx, tuple(options)))


def triton_kernel(
    id: str,
    source: str,
    kernel_name: str,
    signature: Mapping[str, str] | Sequence[tuple[str, str]],
    constexprs: Mapping[str, Constexpr] | None = None,
    *,
    attributes: Iterable[tuple[int, str, int]] = (),
    num_warps: int = 0,
    num_stages: int = 0,
    num_ctas: int = 0,
    maxnreg: int = 0,
    enable_fp_fusion: bool | None = None,
    want_ptx: bool = False,
) -> Kernel:
    """A Triton kernel: ``source`` is a Python module with the ``@triton.jit`` function
    ``kernel_name`` (and the helpers it calls). ``signature`` lists every parameter in order (a
    dict keeps insertion order); ``constexprs`` gives the value of each ``constexpr`` one.
    """
    sig = tuple(signature.items()) if isinstance(signature, Mapping) else tuple((n, t) for n, t in signature)
    consts = tuple((constexprs or {}).items())
    for name, value in consts:
        _constexpr(name, value)  # the type check, early
    return Kernel(
        id,
        TritonSource(
            source=source,
            kernel_name=kernel_name,
            signature=sig,
            constexprs=consts,
            attributes=tuple((int(i), n, int(v)) for i, n, v in attributes),
            num_warps=num_warps,
            num_stages=num_stages,
            num_ctas=num_ctas,
            maxnreg=maxnreg,
            enable_fp_fusion=enable_fp_fusion,
            want_ptx=want_ptx,
        ),
    )
