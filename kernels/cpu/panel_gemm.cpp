// y[M, N] = x[M, K] @ W[K, N] in float32, W packed once into column panels: [N / 32][K][32].
//
// Built for the few rows of a decode or verify step (1-16), where library GEMMs lose to the time it
// takes to stream the weights once: each panel is read from memory once, its next rows prefetched into
// L2 ahead of use, and every row of x (up to 12 at a time) multiplies it while it is in cache, so 8 rows
// cost little more than one. Larger forwards (prefill) run through the same loop, 12 rows at a time.
// Each output element is one FMA chain over k in order, whatever M and however rows are grouped, so a
// row's result does not depend on the rows beside it. The torch reference is x @ W (panel_gemm.py).
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>

namespace {

constexpr int64_t kPanel = 32;   // columns per panel: two 16-float vectors
constexpr int kMaxRows = 12;     // rows per micro-kernel call: up to 24 vector accumulators
constexpr int64_t kAhead = 64;   // panel rows prefetched ahead (8 KiB), into L2

typedef float vec16 __attribute__((vector_size(64)));

template <int M>
void micro_kernel(const float* x, int64_t ldx, const float* panel, int64_t K, float* y, int64_t ldy) {
  vec16 lo[M], hi[M];
  for (int m = 0; m < M; ++m) {
    lo[m] = vec16{};
    hi[m] = vec16{};
  }
  for (int64_t k = 0; k < K; ++k) {
    const float* row = panel + k * kPanel;
    __builtin_prefetch(row + kAhead * kPanel, 0, 2);
    __builtin_prefetch(row + kAhead * kPanel + 16, 0, 2);
    vec16 w_lo, w_hi;
    __builtin_memcpy(&w_lo, row, sizeof(vec16));
    __builtin_memcpy(&w_hi, row + 16, sizeof(vec16));
    for (int m = 0; m < M; ++m) {
      const float b = x[m * ldx + k];
      lo[m] += b * w_lo;
      hi[m] += b * w_hi;
    }
  }
  for (int m = 0; m < M; ++m) {
    __builtin_memcpy(y + m * ldy, &lo[m], sizeof(vec16));
    __builtin_memcpy(y + m * ldy + 16, &hi[m], sizeof(vec16));
  }
}

using MicroKernel = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t);
constexpr MicroKernel kKernels[kMaxRows + 1] = {
    nullptr,         micro_kernel<1>, micro_kernel<2>, micro_kernel<3>, micro_kernel<4>,
    micro_kernel<5>, micro_kernel<6>, micro_kernel<7>, micro_kernel<8>,
    micro_kernel<9>, micro_kernel<10>, micro_kernel<11>, micro_kernel<12>,
};

}  // namespace

// W [K, N] float32 (N a multiple of 32) -> panels [N / 32, K, 32].
torch::Tensor pack(const torch::Tensor& weight) {
  TORCH_CHECK(weight.dim() == 2 && weight.scalar_type() == torch::kFloat32, "pack: need a 2-D float32 weight");
  TORCH_CHECK(weight.size(1) % kPanel == 0, "pack: columns must be a multiple of ", kPanel);
  const int64_t K = weight.size(0), N = weight.size(1);
  return weight.view({K, N / kPanel, kPanel}).permute({1, 0, 2}).contiguous();
}

// x [M, K] float32, panels [P, K, 32] -> y [M, P * 32].
torch::Tensor matmul(const torch::Tensor& x_in, const torch::Tensor& panels) {
  TORCH_CHECK(x_in.dim() == 2 && x_in.scalar_type() == torch::kFloat32, "matmul: need a 2-D float32 input");
  TORCH_CHECK(panels.dim() == 3 && panels.size(2) == kPanel && panels.is_contiguous(), "matmul: bad panels");
  TORCH_CHECK(x_in.size(1) == panels.size(1), "matmul: input width ", x_in.size(1), " != ", panels.size(1));
  const torch::Tensor x = x_in.contiguous();
  const int64_t M = x.size(0), K = x.size(1), P = panels.size(0), N = P * kPanel;
  torch::Tensor y = torch::empty({M, N}, x.options());
  if (M == 0 || N == 0) return y;
  const float* xs = x.data_ptr<float>();
  const float* ps = panels.data_ptr<float>();
  float* ys = y.data_ptr<float>();
  at::parallel_for(0, P, 1, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      for (int64_t m = 0; m < M; m += kMaxRows) {
        const int rows = static_cast<int>(std::min<int64_t>(kMaxRows, M - m));
        kKernels[rows](xs + m * K, K, ps + p * K * kPanel, K, ys + m * N + p * kPanel, N);
      }
    }
  });
  return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("pack", &pack, "W [K, N] -> panels [N / 32, K, 32]");
  m.def("matmul", &matmul, "x [M, K] @ panels -> y [M, N]");
}
