//! Sample CUDA sources and request builders.

use kiln_proto::pb::{self, kernel::Source};

/// An `extern "C"` vector add whose body depends on `n`, so each `n` is a distinct kernel.
pub fn vector_add(n: usize) -> String {
    format!(
        "extern \"C\" __global__ void add_{n}(const float* a, const float* b, float* c, int len) {{\n\
         \x20 int i = blockIdx.x * blockDim.x + threadIdx.x;\n\
         \x20 if (i < len) c[i] = a[i] + b[i] * {n}.0f;\n}}\n"
    )
}

/// A template kernel that needs name expressions.
pub const SAXPY_TEMPLATE: &str = "template <typename T>\n\
__global__ void saxpy(T a, const T* x, T* y, int n) {\n\
  int i = blockIdx.x * blockDim.x + threadIdx.x;\n\
  if (i < n) y[i] = a * x[i] + y[i];\n}\n";

/// Uses the toolkit headers nvcc puts on the path by default, CCCL included.
pub const TOOLKIT_HEADERS: &str = "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n#include <cooperative_groups.h>\n\
namespace cg = cooperative_groups;\n\
extern \"C\" __global__ void mixed(const __half* h, const __nv_bfloat16* b, float* out, int n) {\n\
  cg::thread_block block = cg::this_thread_block();\n\
  int i = blockIdx.x * blockDim.x + threadIdx.x;\n\
  if (i < n) out[i] = __half2float(h[i]) + __bfloat162float(b[i]);\n\
  block.sync();\n}\n";

pub fn cuda(source: &str) -> pb::CudaSource {
    pb::CudaSource { source: source.into(), ..Default::default() }
}

/// [`cuda`] with one header, given by its content as a client sends it, under `name`.
pub fn cuda_with_header(source: &str, name: &str, content: &str) -> pb::CudaSource {
    pb::CudaSource { headers: vec![pb::Header { name: name.into(), content: content.into() }], ..cuda(source) }
}

pub fn kernel(id: &str, source: pb::CudaSource) -> pb::Kernel {
    pb::Kernel { id: id.into(), source: Some(Source::Cuda(source)) }
}

pub fn request(target: &str, kernels: Vec<pb::Kernel>) -> pb::CompileRequest {
    pb::CompileRequest {
        graph: Some(pb::CompileGraph { name: "test".into(), target: target.into(), kernels }),
        ..Default::default()
    }
}

/// A graph of `n` distinct vector-add kernels.
pub fn vector_graph(target: &str, n: usize) -> pb::CompileRequest {
    request(target, (0..n).map(|i| kernel(&format!("add_{i}"), cuda(&vector_add(i)))).collect())
}

/// Tier of a result as the CLI prints it.
pub fn tier(r: &pb::KernelResult) -> pb::Tier {
    r.tier()
}

/// A kernel that takes NVRTC a while: `statements` lines of dependent math (about 1 s per 2,500
/// on a 2-core build machine; the time grows faster than linearly).
pub fn slow_kernel(statements: usize) -> String {
    let mut s = String::from("extern \"C\" __global__ void slow(float* x) {\n  float a = x[0], b = x[1];\n");
    for i in 0..statements {
        s.push_str(&format!("  a = __sinf(a) * {i}.5f + b; b = b * a + {i}.25f;\n"));
    }
    s.push_str("  x[0] = a + b;\n}\n");
    s
}

/// Signatures of the kernels in examples/triton/kernels.py, in parameter order.
pub const TRITON_ADD: &[(&str, &str)] =
    &[("x_ptr", "*fp32"), ("y_ptr", "*fp32"), ("out_ptr", "*fp32"), ("n", "i32"), ("BLOCK", "constexpr")];
pub const TRITON_SOFTMAX: &[(&str, &str)] =
    &[("out_ptr", "*fp32"), ("in_ptr", "*fp32"), ("row_stride", "i32"), ("n_cols", "i32"), ("BLOCK", "constexpr")];
pub const TRITON_LAYER_NORM: &[(&str, &str)] = &[
    ("x_ptr", "*fp32"),
    ("y_ptr", "*fp32"),
    ("w_ptr", "*fp32"),
    ("b_ptr", "*fp32"),
    ("stride", "i32"),
    ("n_cols", "i32"),
    ("eps", "fp32"),
    ("BLOCK", "constexpr"),
];
pub const TRITON_MATMUL: &[(&str, &str)] = &[
    ("a_ptr", "*fp16"),
    ("b_ptr", "*fp16"),
    ("c_ptr", "*fp32"),
    ("M", "i32"),
    ("N", "i32"),
    ("K", "i32"),
    ("BM", "constexpr"),
    ("BN", "constexpr"),
    ("BK", "constexpr"),
];

/// The Triton kernels of examples/triton/kernels.py.
pub fn triton_module() -> String {
    std::fs::read_to_string(crate::env::repo_root().join("examples/triton/kernels.py"))
        .expect("examples/triton/kernels.py")
}

/// A Triton kernel request: `sig` as (name, type) pairs, `ints` as integer constexprs.
pub fn triton(
    source: &str,
    name: &str,
    sig: &[(&str, &str)],
    ints: &[(&str, i64)],
    num_warps: u32,
) -> pb::TritonSource {
    pb::TritonSource {
        source: source.into(),
        kernel_name: name.into(),
        signature: sig.iter().map(|(n, t)| pb::TritonArg { name: (*n).into(), r#type: (*t).into() }).collect(),
        constexprs: ints
            .iter()
            .map(|(n, v)| pb::TritonConstexpr {
                name: (*n).into(),
                value: Some(pb::triton_constexpr::Value::IntValue(*v)),
            })
            .collect(),
        options: Some(pb::TritonOptions { num_warps, ..Default::default() }),
        ..Default::default()
    }
}

/// A kernel of any toolchain.
pub fn any_kernel(id: &str, source: pb::kernel::Source) -> pb::Kernel {
    pb::Kernel { id: id.into(), source: Some(source) }
}
