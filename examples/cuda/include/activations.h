// Shared by the example kernels; sent to kilnd by content (kiln compile -I examples/cuda/include).
#pragma once
#define GELU_C 0.7978845608f
__device__ inline float gelu(float x) { return 0.5f * x * (1.0f + tanhf(GELU_C * (x + 0.044715f * x * x * x))); }
