"""The kernels of the end-to-end GPU test: vector add, a sum reduction, row-wise softmax, layer
norm and a small matmul, each as CUDA C++ (NVRTC), as PTX (ptxas) and as Triton.

Two CUDA kernels are templates, so the test also exercises name expressions and the lowered
names kilnd returns for them. The PTX versions are the example's vector_add.ptx and, when nvcc is
there, nvcc's PTX of the CUDA sources (templates instantiated explicitly).
"""

from __future__ import annotations

from pathlib import Path

# -- CUDA C++ --

VECTOR_ADD = r"""
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
"""

# One partial sum per block; launched twice (inputs, then the partials) for the total.
REDUCE_SUM = r"""
template <int BLOCK>
__global__ void reduce_sum(const float* __restrict__ in, float* __restrict__ out, int n) {
  __shared__ float s[BLOCK];
  float acc = 0.0f;
  for (int i = blockIdx.x * BLOCK + threadIdx.x; i < n; i += gridDim.x * BLOCK) acc += in[i];
  s[threadIdx.x] = acc;
  __syncthreads();
  for (int w = BLOCK / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}
"""

# One block of 256 threads per row.
SOFTMAX = r"""
#define THREADS 256
extern "C" __global__ void softmax_rows(const float* __restrict__ x, float* __restrict__ y, int cols) {
  __shared__ float red[THREADS];
  const float* xr = x + (size_t)blockIdx.x * cols;
  float* yr = y + (size_t)blockIdx.x * cols;
  const int t = threadIdx.x;
  float m = __int_as_float(0xff800000);  // -inf
  for (int j = t; j < cols; j += THREADS) m = fmaxf(m, xr[j]);
  red[t] = m;
  __syncthreads();
  for (int w = THREADS / 2; w > 0; w >>= 1) {
    if (t < w) red[t] = fmaxf(red[t], red[t + w]);
    __syncthreads();
  }
  m = red[0];
  __syncthreads();
  float s = 0.0f;
  for (int j = t; j < cols; j += THREADS) s += expf(xr[j] - m);
  red[t] = s;
  __syncthreads();
  for (int w = THREADS / 2; w > 0; w >>= 1) {
    if (t < w) red[t] += red[t + w];
    __syncthreads();
  }
  s = red[0];
  for (int j = t; j < cols; j += THREADS) yr[j] = expf(xr[j] - m) / s;
}
"""

LAYER_NORM = r"""
#define THREADS 256
extern "C" __global__ void layer_norm(const float* __restrict__ x, const float* __restrict__ w,
                                      const float* __restrict__ b, float* __restrict__ y, int cols,
                                      float eps) {
  __shared__ float red[THREADS];
  const float* xr = x + (size_t)blockIdx.x * cols;
  float* yr = y + (size_t)blockIdx.x * cols;
  const int t = threadIdx.x;
  float s = 0.0f;
  for (int j = t; j < cols; j += THREADS) s += xr[j];
  red[t] = s;
  __syncthreads();
  for (int k = THREADS / 2; k > 0; k >>= 1) {
    if (t < k) red[t] += red[t + k];
    __syncthreads();
  }
  const float mean = red[0] / cols;
  __syncthreads();
  float v = 0.0f;
  for (int j = t; j < cols; j += THREADS) {
    float d = xr[j] - mean;
    v += d * d;
  }
  red[t] = v;
  __syncthreads();
  for (int k = THREADS / 2; k > 0; k >>= 1) {
    if (t < k) red[t] += red[t + k];
    __syncthreads();
  }
  const float rstd = rsqrtf(red[0] / cols + eps);
  for (int j = t; j < cols; j += THREADS) yr[j] = (xr[j] - mean) * rstd * w[j] + b[j];
}
"""

# C[M,N] = A[M,K] @ B[K,N], row-major, TILE x TILE threads per block, any M, N, K.
MATMUL = r"""
template <int TILE>
__global__ void matmul_tiled(const float* __restrict__ A, const float* __restrict__ B,
                             float* __restrict__ C, int M, int N, int K) {
  __shared__ float As[TILE][TILE];
  __shared__ float Bs[TILE][TILE];
  const int row = blockIdx.y * TILE + threadIdx.y;
  const int col = blockIdx.x * TILE + threadIdx.x;
  float acc = 0.0f;
  for (int k0 = 0; k0 < K; k0 += TILE) {
    const int ka = k0 + threadIdx.x, kb = k0 + threadIdx.y;
    As[threadIdx.y][threadIdx.x] = (row < M && ka < K) ? A[(size_t)row * K + ka] : 0.0f;
    Bs[threadIdx.y][threadIdx.x] = (kb < K && col < N) ? B[(size_t)kb * N + col] : 0.0f;
    __syncthreads();
    for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
    __syncthreads();
  }
  if (row < M && col < N) C[(size_t)row * N + col] = acc;
}
"""

#: id -> (source, name expressions, entry name for extern "C" kernels, explicit instantiation
#: for nvcc's PTX)
CUDA = {
    "vector_add": (VECTOR_ADD, (), "vector_add", ""),
    "reduce_sum": (REDUCE_SUM, ("reduce_sum<256>",), "", "template __global__ void reduce_sum<256>(const float*, float*, int);\n"),
    "softmax": (SOFTMAX, (), "softmax_rows", ""),
    "layer_norm": (LAYER_NORM, (), "layer_norm", ""),
    "matmul": (MATMUL, ("matmul_tiled<16>",), "", "template __global__ void matmul_tiled<16>(const float*, const float*, float*, int, int, int);\n"),
}

# -- Triton --

#: The Triton kernels: examples/triton/kernels.py, the one module every part of kiln compiles.
TRITON_MODULE = (Path(__file__).resolve().parents[2] / "examples" / "triton" / "kernels.py").read_text()

P32, P16 = "*fp32", "*fp16"

#: id -> (kernel name, signature in parameter order, constexprs, pointer argument indices
#: (tt.divisibility 16), num_warps)
TRITON = {
    "add": ("add_kernel", [("x_ptr", P32), ("y_ptr", P32), ("out_ptr", P32), ("n", "i32"), ("BLOCK", "constexpr")], {"BLOCK": 1024}, (0, 1, 2), 4),
    "sum": ("sum_kernel", [("x_ptr", P32), ("out_ptr", P32), ("n", "i32"), ("BLOCK", "constexpr")], {"BLOCK": 1024}, (0, 1), 4),
    "softmax": (
        "softmax_kernel",
        [("out_ptr", P32), ("in_ptr", P32), ("row_stride", "i32"), ("n_cols", "i32"), ("BLOCK", "constexpr")],
        {"BLOCK": 1024},
        (0, 1),
        4,
    ),
    "layer_norm": (
        "layer_norm_kernel",
        [("x_ptr", P32), ("y_ptr", P32), ("w_ptr", P32), ("b_ptr", P32), ("stride", "i32"), ("n_cols", "i32"), ("eps", "fp32"), ("BLOCK", "constexpr")],
        {"BLOCK": 1024},
        (0, 1, 2, 3),
        4,
    ),
    "matmul": (
        "matmul_kernel",
        [("a_ptr", P16), ("b_ptr", P16), ("c_ptr", P32), ("M", "i32"), ("N", "i32"), ("K", "i32"), ("BM", "constexpr"), ("BN", "constexpr"), ("BK", "constexpr")],
        {"BM": 64, "BN": 64, "BK": 32},
        (0, 1, 2),
        4,
    ),
}

# -- shapes of the launches (odd sizes on purpose, so bounds checks matter) --

N_VEC = (1 << 20) + 3
ROWS, COLS = 512, 1000
MM_M, MM_N, MM_K = 200, 136, 260  # CUDA matmul: any shape
TMM_M, TMM_N, TMM_K = 128, 128, 256  # Triton matmul: multiples of its blocks
LN_EPS = 1e-5
