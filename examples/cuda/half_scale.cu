#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void half_scale(__half* h, __nv_bfloat16* b, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    h[i] = __hmul(h[i], __float2half(s));
    b[i] = __float2bfloat16(__bfloat162float(b[i]) * s);
  }
}
