//! The tiny kernels that prove a toolchain compiles: `kilnd check` compiles each in its own
//! toolchain, and `kiln doctor` sends each through a running kilnd, one graph apiece so that one
//! broken toolchain does not hide the others. Each is the smallest kernel its toolchain accepts,
//! so its compile time is the toolchain's own cost (a worker's start, Triton's import and JIT).

use crate::Target;
use crate::pb::{self, kernel::Source};

/// The graph name of a probe: recipes and misses of probes are known as kiln's own.
pub const GRAPH_NAME: &str = "kiln-check";

/// The target a probe compiles for when the daemon has no default (no `target` set, no GPU):
/// sm_90, which every toolchain of the pinned CUDA 13 release supports (the probe PTX is written
/// for an older one).
pub fn fallback_target() -> Target {
    Target::from_capability(9, 0)
}

const CUDA: &str = "extern \"C\" __global__ void kiln_check(float* x) { x[threadIdx.x] = 1.0f; }\n";

/// PTX ISA 8.0 for sm_75, the oldest target CUDA 13 keeps: ptxas assembles it for any newer one.
const PTX: &str = ".version 8.0\n.target sm_75\n.address_size 64\n\n.visible .entry kiln_check()\n{\n\tret;\n}\n";

const TRITON: &str = "import triton
import triton.language as tl


@triton.jit
def kiln_check(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, 1.0, mask=offs < n)
";

/// One probe: the toolchain it proves (`nvrtc`, `ptxas`, `triton`) and its kernel.
#[derive(Debug, Clone)]
pub struct Probe {
    pub toolchain: &'static str,
    pub source: Source,
}

impl Probe {
    /// The probe as a graph of its one kernel, for `target` (empty: the daemon's default).
    pub fn graph(&self, target: &str) -> pb::CompileGraph {
        pb::CompileGraph {
            name: GRAPH_NAME.into(),
            target: target.into(),
            kernels: vec![pb::Kernel { id: self.toolchain.into(), source: Some(self.source.clone()) }],
        }
    }
}

/// The probes, in the order kiln lists toolchains: NVRTC, ptxas, Triton.
pub fn all() -> [Probe; 3] {
    [
        Probe { toolchain: "nvrtc", source: Source::Cuda(cuda()) },
        Probe { toolchain: "ptxas", source: Source::Ptx(ptx()) },
        Probe { toolchain: "triton", source: Source::Triton(triton()) },
    ]
}

/// NVRTC's probe: one store.
pub fn cuda() -> pb::CudaSource {
    pb::CudaSource { source: CUDA.into(), ..Default::default() }
}

/// ptxas's probe: an empty entry point.
pub fn ptx() -> pb::PtxSource {
    pb::PtxSource { ptx: PTX.into(), ..Default::default() }
}

/// Triton's probe: a masked store of one block.
pub fn triton() -> pb::TritonSource {
    let arg = |name: &str, ty: &str| pb::TritonArg { name: name.into(), r#type: ty.into() };
    pb::TritonSource {
        source: TRITON.into(),
        kernel_name: "kiln_check".into(),
        signature: vec![arg("x_ptr", "*fp32"), arg("n", "i32"), arg("BLOCK", "constexpr")],
        constexprs: vec![pb::TritonConstexpr {
            name: "BLOCK".into(),
            value: Some(pb::triton_constexpr::Value::IntValue(64)),
        }],
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_probe_is_a_graph_of_one_kernel_named_for_its_toolchain() {
        let names: Vec<_> = all().iter().map(|p| p.toolchain).collect();
        assert_eq!(names, ["nvrtc", "ptxas", "triton"]);
        let g = all()[1].graph("sm_90");
        assert_eq!((g.name.as_str(), g.target.as_str(), g.kernels.len()), (GRAPH_NAME, "sm_90", 1));
        assert_eq!(g.kernels[0].id, "ptxas");
    }
}
