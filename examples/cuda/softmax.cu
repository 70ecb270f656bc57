// A template kernel: compile with --name-expression 'softmax_rows<float>' to get its lowered name.
template <typename T>
__global__ void softmax_rows(const T* x, T* y, int cols) {
  const T* row = x + blockIdx.x * cols;
  T* out = y + blockIdx.x * cols;
  T m = row[0];
  for (int c = 1; c < cols; ++c) m = row[c] > m ? row[c] : m;
  T sum = 0;
  for (int c = 0; c < cols; ++c) sum += exp(row[c] - m);
  for (int c = threadIdx.x; c < cols; c += blockDim.x) out[c] = exp(row[c] - m) / sum;
}
