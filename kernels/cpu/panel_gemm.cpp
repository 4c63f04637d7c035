// y[M, N] = x[M, K] @ W[K, N] in float32, W packed once into column panels: [N / 32][K][32].
//
// Built for the few rows of a decode or verify step (1-16), where library GEMMs lose to the time it
// takes to stream the weights once: each panel is read from memory once, its next rows prefetched into
// L2 ahead of use, and every row of x (up to 12 at a time with AVX-512, 4 with AVX2) multiplies it while
// it is in cache (L1 or L2), so 8 rows cost little more than one. Larger forwards (prefill) run through
// the same loop.
// Each output element is one FMA chain over k in order, whatever M and however rows are grouped, so a
// row's result does not depend on the rows beside it. The torch reference is x @ W (panel_gemm.py).
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

namespace {

constexpr int64_t kPanel = 32;   // columns per panel
constexpr int64_t kAhead = 64;   // panel rows prefetched ahead (8 KiB), into L2

// The widest vectors this build's CPU has, and as many rows per micro-kernel call as keep every
// accumulator in a register (a panel row takes kVecs of them per row of x): AVX-512 (32 registers of 16
// floats): 12 rows, 24 accumulators; AVX2 (16 of 8): 4 rows, 16, the weights read as FMA operands (on a
// 2-core AMD EPYC without AVX-512, 4 rows took as long as 1 for the lm_head of SmolLM2, 3 rows 1.3x, 6
// or 8 rows no less time per row); SSE: 1.
// Wider vectors than the CPU has, or more accumulators than registers, leave them in memory, and every
// FMA then waits on a store and a load (several times slower than the library's GEMM).
#if defined(__AVX512F__)
constexpr int kVecBytes = 64;
constexpr int kMaxRows = 12;
#elif defined(__AVX__)
constexpr int kVecBytes = 32;
constexpr int kMaxRows = 4;
#else
constexpr int kVecBytes = 16;
constexpr int kMaxRows = 1;
#endif
constexpr int kLanes = kVecBytes / static_cast<int>(sizeof(float));
constexpr int kVecs = static_cast<int>(kPanel) / kLanes;  // vectors per panel row

// A lone row has only kVecs FMA chains per panel, too few to hide the FMA latency with AVX2's narrow
// vectors (one row ran slower than three), so there one row takes two panels per call. Each output
// element is still one chain over k in order.
#if defined(__AVX512F__) || !defined(__AVX__)
constexpr int kOneRowPanels = 1;
#else
constexpr int kOneRowPanels = 2;
#endif

typedef float vec __attribute__((vector_size(kVecBytes)));

// Rows [M] of x times panels [P] (each K * kPanel floats apart) into y's P * kPanel columns.
template <int M, int P>
void micro_kernel(const float* x, int64_t ldx, const float* panel, int64_t K, float* y, int64_t ldy) {
  constexpr int kAcc = P * kVecs;
  const int64_t stride = K * kPanel;
  vec acc[M][kAcc];
  _Pragma("GCC unroll 32") for (int m = 0; m < M; ++m) {
    _Pragma("GCC unroll 32") for (int v = 0; v < kAcc; ++v) acc[m][v] = vec{};
  }
  for (int64_t k = 0; k < K; ++k) {
    vec w[kAcc];
    _Pragma("GCC unroll 32") for (int q = 0; q < P; ++q) {
      const float* row = panel + q * stride + k * kPanel;
      __builtin_prefetch(row + kAhead * kPanel, 0, 2);
      __builtin_prefetch(row + kAhead * kPanel + 16, 0, 2);
      _Pragma("GCC unroll 32") for (int v = 0; v < kVecs; ++v) __builtin_memcpy(&w[q * kVecs + v], row + v * kLanes, sizeof(vec));
    }
    _Pragma("GCC unroll 32") for (int m = 0; m < M; ++m) {
      const float b = x[m * ldx + k];
      _Pragma("GCC unroll 32") for (int v = 0; v < kAcc; ++v) acc[m][v] += b * w[v];
    }
  }
  _Pragma("GCC unroll 32") for (int m = 0; m < M; ++m) {
    _Pragma("GCC unroll 32") for (int v = 0; v < kAcc; ++v) __builtin_memcpy(y + m * ldy + v * kLanes, &acc[m][v], sizeof(vec));
  }
}

using MicroKernel = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t);

template <int... M>
constexpr std::array<MicroKernel, sizeof...(M) + 1> kernel_table(std::integer_sequence<int, M...>) {
  return {nullptr, &micro_kernel<M + 1, 1>...};
}

// kKernels[rows]: the one-panel micro-kernel for 1..kMaxRows rows.
constexpr auto kKernels = kernel_table(std::make_integer_sequence<int, kMaxRows>{});

// Rows [begin, end) of x times panels [p0, p1): rows in chunks of at most kMaxRows, as even as can be
// (AVX2, 9 rows: 3, 3, 3, not 4, 4, 1), a lone row over kOneRowPanels panels at a time.
void panel_range(const float* x, int64_t M, int64_t K, const float* panels, int64_t p0, int64_t p1,
                 float* y, int64_t N) {
  const int64_t chunks = (M + kMaxRows - 1) / kMaxRows;
  for (int64_t c = 0, m = 0; c < chunks; ++c) {
    const int rows = static_cast<int>((M - m) / (chunks - c));
    const float* xs = x + m * K;
    float* ys = y + m * N;
    int64_t p = p0;
    if (rows == 1) {
      for (; p + kOneRowPanels <= p1; p += kOneRowPanels) {
        micro_kernel<1, kOneRowPanels>(xs, K, panels + p * K * kPanel, K, ys + p * kPanel, N);
      }
    }
    for (; p < p1; ++p) kKernels[rows](xs, K, panels + p * K * kPanel, K, ys + p * kPanel, N);
    m += rows;
  }
}

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
  at::parallel_for(0, P, 1, [&](int64_t begin, int64_t end) { panel_range(xs, M, K, ps, begin, end, ys, N); });
  return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("pack", &pack, "W [K, N] -> panels [N / 32, K, 32]");
  m.def("matmul", &matmul, "x [M, K] @ panels -> y [M, N]");
}
