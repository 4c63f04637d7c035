// y[M, N] = x[M, K] @ W[K, N] in float32, W packed once into column panels: [N / 32][K][32], in float32,
// bfloat16 (widened to float32 as it is read: half the bytes to stream, the same float32 products) or
// int8 with a float32 scale per column (W = int8 * scale: a quarter of the bytes; the int8 values are
// widened to float32 as they are read, multiplied in float32, and the sums scaled as they are stored).
//
// Built for the few rows of a decode or verify step (1-16), where library GEMMs lose to the time it
// takes to stream the weights once: each panel is read from memory once, its next rows prefetched into
// L2 ahead of use, and every row of x (up to 12 at a time with AVX-512, 4 with AVX2) multiplies it while
// it is in cache (L1 or L2), so 8 rows cost little more than one. Larger forwards (prefill) read the
// panels the same way, with a block shaped for the multiply-adds (below).
// Each output element is one FMA chain over k in order, whatever M and however rows are grouped, so a
// row's result does not depend on the rows beside it. The torch reference is x @ W (panel_gemm.py).
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include "kernels.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

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
//
// Those few-row calls are bound by the weights' stream. Forwards of many rows (prefill) are bound by the
// multiply-adds instead, and there AVX2's 4 x 32 block falls short: its 16 accumulators and the
// broadcast row value need 17 registers (GCC spills two accumulators), and every FMA loads its weight
// vector again. Above kChunkedRows rows AVX2 therefore multiplies half a panel (16 columns) by up to 6
// rows per call: 12 accumulators, 2 weight vectors, 1 broadcast (the classic 6 x 16 block), which
// keeps the two FMA pipes busy (a 1,024-row product of SmolLM2's MLP: 1.6x faster than 4 x 32, 1.15x
// faster than MKL's sgemm). AVX-512 keeps its 12 x 32 block.
#if defined(__AVX512F__)
constexpr int kVecBytes = 64;
constexpr int kMaxRows = 12;
constexpr int kManyRows = 12;
constexpr int kManySlices = 1;   // column slices per panel above kChunkedRows rows
constexpr int kChunkedRows = 12;
#elif defined(__AVX__)
constexpr int kVecBytes = 32;
constexpr int kMaxRows = 4;
constexpr int kManyRows = 6;
constexpr int kManySlices = 2;
constexpr int kChunkedRows = 8;  // rows up to which whole panels still beat slices
#else
constexpr int kVecBytes = 16;
constexpr int kMaxRows = 1;
constexpr int kManyRows = 1;
constexpr int kManySlices = 1;
constexpr int kChunkedRows = 1;
#endif
constexpr int kLanes = kVecBytes / static_cast<int>(sizeof(float));
constexpr int kVecs = static_cast<int>(kPanel) / kLanes;  // vectors per panel row
constexpr int kSliceVecs = kVecs / kManySlices;             // vectors per slice row
static_assert(kSliceVecs * kManySlices == kVecs, "a panel splits into whole slices");

// A lone row has only kVecs FMA chains per panel, too few to hide the FMA latency with AVX2's narrow
// vectors (one row ran slower than three), so there one row takes two panels per call. Each output
// element is still one chain over k in order.
#if defined(__AVX512F__) || !defined(__AVX__)
constexpr int kOneRowPanels = 1;
#else
constexpr int kOneRowPanels = 2;
#endif

typedef float vec __attribute__((vector_size(kVecBytes)));
typedef uint16_t half_vec __attribute__((vector_size(kVecBytes / 2)));
typedef uint32_t bits_vec __attribute__((vector_size(kVecBytes)));

// A vector of weights: float32 as they lie, or bfloat16 widened to float32 (its 16 bits are the top
// half of the float32's, so the widening is exact: a zero-extension and a shift).
inline vec load_weights(const float* p) {
  vec v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
// int8, sign-extended and converted to float32 (exact): one widening and one conversion per vector.
#if defined(__AVX512F__)
inline vec load_weights(const int8_t* p) {
  const __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  vec v;
  __builtin_memcpy(&v, &f, sizeof v);
  return v;
}
#elif defined(__AVX2__)
inline vec load_weights(const int8_t* p) {
  const __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  vec v;
  __builtin_memcpy(&v, &f, sizeof v);
  return v;
}
#else
typedef int8_t char_vec __attribute__((vector_size(kVecBytes / 4)));
typedef int32_t int_vec __attribute__((vector_size(kVecBytes)));
inline vec load_weights(const int8_t* p) {
  char_vec c;
  __builtin_memcpy(&c, p, sizeof c);
  return __builtin_convertvector(__builtin_convertvector(c, int_vec), vec);
}
#endif
#if defined(__AVX512F__)
// GCC lowers the generic 16 x 16-bit to 32-bit conversion below in two 256-bit halves (two widenings,
// an extract and an insert: four shuffles per vector, on the port the second FMA unit shares), which
// made bfloat16 panels slower than float32 ones for 8 rows; AVX-512's one 512-bit widening avoids it.
inline vec load_weights(const uint16_t* p) {
  const __m512i bits = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16);
  vec v;
  __builtin_memcpy(&v, &bits, sizeof v);
  return v;
}
#else
inline vec load_weights(const uint16_t* p) {
  half_vec h;
  __builtin_memcpy(&h, p, sizeof h);
  const bits_vec bits = __builtin_convertvector(h, bits_vec) << 16;
  vec v;
  __builtin_memcpy(&v, &bits, sizeof v);
  return v;
}
#endif

// Block weights (`matmul_blocks`): a panel row of 4-bit values holds column c in byte c % 16, its low
// nibble for c < 16 and its high nibble above; the vector of columns [c0, c0 + kLanes) as float32.
#if defined(__AVX512F__)
inline vec load_nibbles(const uint8_t* row, int c0) {
  __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + c0 % 16)));
  q = c0 < 16 ? _mm512_and_si512(q, _mm512_set1_epi32(15)) : _mm512_srli_epi32(q, 4);
  const __m512 f = _mm512_cvtepi32_ps(q);
  vec v;
  __builtin_memcpy(&v, &f, sizeof v);
  return v;
}
#elif defined(__AVX2__)
inline vec load_nibbles(const uint8_t* row, int c0) {
  __m256i q = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + c0 % 16)));
  q = c0 < 16 ? _mm256_and_si256(q, _mm256_set1_epi32(15)) : _mm256_srli_epi32(q, 4);
  const __m256 f = _mm256_cvtepi32_ps(q);
  vec v;
  __builtin_memcpy(&v, &f, sizeof v);
  return v;
}
#else
typedef uint8_t byte_vec __attribute__((vector_size(kVecBytes / 4)));
typedef int32_t nibble_int_vec __attribute__((vector_size(kVecBytes)));
inline vec load_nibbles(const uint8_t* row, int c0) {
  byte_vec c;
  __builtin_memcpy(&c, row + c0 % 16, sizeof c);
  const nibble_int_vec q = __builtin_convertvector(c, nibble_int_vec);
  return __builtin_convertvector(c0 < 16 ? (q & 15) : (q >> 4), vec);
}
#endif

// Rows [M] of x times V vectors of columns of panels [P] (each K * kPanel floats apart; `panel` points
// at the first column taken) into y's matching columns; int8 weights' sums times their columns' scales
// (`scale` points at the first column's; float weights have none).
template <int M, int P, int V, typename W>
void micro_kernel(const float* x, int64_t ldx, const W* panel, int64_t K, float* y, int64_t ldy,
                  const float* scale) {
  constexpr int kAcc = P * V;
  const int64_t stride = K * kPanel;
  vec acc[M][kAcc];
  _Pragma("GCC unroll 32") for (int m = 0; m < M; ++m) {
    _Pragma("GCC unroll 32") for (int v = 0; v < kAcc; ++v) acc[m][v] = vec{};
  }
  for (int64_t k = 0; k < K; ++k) {
    vec w[kAcc];
    _Pragma("GCC unroll 32") for (int q = 0; q < P; ++q) {
      const W* row = panel + q * stride + k * kPanel;
      const char* ahead = reinterpret_cast<const char*>(row + kAhead * kPanel);
      __builtin_prefetch(ahead, 0, 2);
      if (sizeof(W) * kPanel > 64) __builtin_prefetch(ahead + 64, 0, 2);  // the whole panel row: a slice's sibling too
      _Pragma("GCC unroll 32") for (int v = 0; v < V; ++v) w[q * V + v] = load_weights(row + v * kLanes);
    }
    _Pragma("GCC unroll 32") for (int m = 0; m < M; ++m) {
      const float b = x[m * ldx + k];
      _Pragma("GCC unroll 32") for (int v = 0; v < kAcc; ++v) acc[m][v] += b * w[v];
    }
  }
  if constexpr (std::is_same_v<W, int8_t>) {
    _Pragma("GCC unroll 32") for (int q = 0; q < P; ++q) {
      _Pragma("GCC unroll 32") for (int v = 0; v < V; ++v) {
        const vec s = load_weights(scale + q * kPanel + v * kLanes);
        _Pragma("GCC unroll 32") for (int m = 0; m < M; ++m) acc[m][q * V + v] *= s;
      }
    }
  }
  _Pragma("GCC unroll 32") for (int m = 0; m < M; ++m) {
    _Pragma("GCC unroll 32") for (int q = 0; q < P; ++q) {
      _Pragma("GCC unroll 32") for (int v = 0; v < V; ++v) {
        __builtin_memcpy(y + m * ldy + q * kPanel + v * kLanes, &acc[m][q * V + v], sizeof(vec));
      }
    }
  }
}

template <typename W>
using MicroKernel = void (*)(const float*, int64_t, const W*, int64_t, float*, int64_t, const float*);

template <typename W, int V, int... M>
constexpr std::array<MicroKernel<W>, sizeof...(M) + 1> kernel_table(std::integer_sequence<int, M...>) {
  return {nullptr, &micro_kernel<M + 1, 1, V, W>...};
}

// kFewRows[rows]: the whole-panel micro-kernel for 1..kMaxRows rows; kManyRowsKernels[rows]: the
// slice micro-kernel for 1..kManyRows rows.
template <typename W>
constexpr auto kFewRows = kernel_table<W, kVecs>(std::make_integer_sequence<int, kMaxRows>{});
template <typename W>
constexpr auto kManyRowsKernels = kernel_table<W, kSliceVecs>(std::make_integer_sequence<int, kManyRows>{});

// Rows of x in chunks of at most `max_rows`, as even as can be (AVX2, 13 rows in chunks of up to 6: 5, 4,
// 4, not 6, 6, 1), times panel p, slice by slice (`slices` of them, `table[rows]` multiplying one);
// `scale`: the panel's column scales (int8; block values: its block scales, in one slice), else null.
template <typename W>
void panel_chunks(const MicroKernel<W>* table, int max_rows, int slices, const float* x, int64_t M, int64_t K,
                  const W* panel, float* y, int64_t N, const float* scale) {
  const int64_t chunks = (M + max_rows - 1) / max_rows;
  const int64_t width = kPanel / slices;
  for (int s = 0; s < slices; ++s) {
    const float* slice_scale = scale == nullptr ? nullptr : scale + s * width;
    for (int64_t c = 0, m = 0; c < chunks; ++c) {
      const int rows = static_cast<int>((M - m) / (chunks - c));
      table[rows](x + m * K, K, panel + s * width, K, y + m * N + s * width, N, slice_scale);
      m += rows;
    }
  }
}

// Rows of x times panels [p0, p1). A lone row goes over kOneRowPanels panels per call; up to
// kChunkedRows rows go in chunks of whole panels; more in chunks of kManyRows over column slices (with
// AVX2 measured on SmolLM2's products: slices took 0.9x the time of whole panels for 10 rows, 0.7x for
// 32, but 1.1x for 8). Every chunk multiplies a panel before the next panel is read, so the weights
// stream from memory once whatever the row count (chunk by chunk, they were read once per chunk: with
// AVX2, 5 rows took 1.4x as long as 4, a prefill a pass over the weights per 4 rows).
template <typename W>
void panel_range(const float* x, int64_t M, int64_t K, const W* panels, int64_t p0, int64_t p1, float* y,
                 int64_t N, const float* scales) {
  const auto panel_scale = [&](int64_t p) { return scales == nullptr ? nullptr : scales + p * kPanel; };
  int64_t p = p0;
  if (M == 1) {
    for (; p + kOneRowPanels <= p1; p += kOneRowPanels) {
      micro_kernel<1, kOneRowPanels, kVecs, W>(x, K, panels + p * K * kPanel, K, y + p * kPanel, N,
                                               panel_scale(p));
    }
  }
  const bool sliced = M > kChunkedRows;
  for (; p < p1; ++p) {
    const W* panel = panels + p * K * kPanel;
    if (sliced) {
      panel_chunks(kManyRowsKernels<W>.data(), kManyRows, kManySlices, x, M, K, panel, y + p * kPanel, N,
                   panel_scale(p));
    } else {
      panel_chunks(kFewRows<W>.data(), kMaxRows, 1, x, M, K, panel, y + p * kPanel, N, panel_scale(p));
    }
  }
}

// Block weights: W[k][c] = q[k][c] * d[k / 32][c] + m[k / 32][c], q 4-bit (two a byte, load_nibbles) or
// int8, d and m float32 for each block of 32 k of a column: a panel's scales are [K / 32][2][32], d's row
// then m's. The packer (panel_gemm.py) takes only weights that are exactly of this form, with d of at
// most float16's 11 significant bits, so that q * d is exact: a weight then widens to the very float32
// of the dense weight (one rounding, of q * d + m, multiplied and added or fused alike), and the rows'
// FMAs run as over float32 panels: the same results bit for bit, from 0.75 (4-bit) or 1.25 bytes a
// weight instead of 4. A model imported from GGUF's Q4_1 and Q8_0 (the bundled one) is of this form.
constexpr int64_t kBlock = 32;

struct Nibbles {};
template <typename Q>
constexpr int64_t kBlockRowBytes = std::is_same_v<Q, Nibbles> ? kPanel / 2 : kPanel;

template <typename Q>
inline vec load_block_values(const uint8_t* row, int c0) {
  if constexpr (std::is_same_v<Q, Nibbles>) {
    return load_nibbles(row, c0);
  } else {
    return load_weights(reinterpret_cast<const int8_t*>(row) + c0);
  }
}

// A block's d and m vectors, from its panel's scales.
struct BlockScales {
  vec d[kVecs], m[kVecs];
  BlockScales(const float* scales, int64_t block) {
    const float* s = scales + block * 2 * kPanel;
    _Pragma("GCC unroll 32") for (int v = 0; v < kVecs; ++v) {
      d[v] = load_weights(s + v * kLanes);
      m[v] = load_weights(s + kPanel + v * kLanes);
    }
  }
};

// Rows [M] of x times one panel of block weights, the weights widened as they are read (few rows).
template <int M, typename Q>
void block_kernel(const float* x, int64_t ldx, const uint8_t* panel, int64_t K, float* y, int64_t ldy,
                  const float* scales) {
  constexpr int64_t kBytes = kBlockRowBytes<Q>;
  vec acc[M][kVecs];
  _Pragma("GCC unroll 32") for (int m = 0; m < M; ++m) {
    _Pragma("GCC unroll 32") for (int v = 0; v < kVecs; ++v) acc[m][v] = vec{};
  }
  for (int64_t b = 0; b < K / kBlock; ++b) {
    const BlockScales bs(scales, b);
    const char* next = reinterpret_cast<const char*>(scales + (b + 2) * 2 * kPanel);
    for (int line = 0; line < 2 * kPanel * 4; line += 64) __builtin_prefetch(next + line, 0, 2);
    for (int64_t k = b * kBlock; k < (b + 1) * kBlock; ++k) {
      const uint8_t* row = panel + k * kBytes;
      __builtin_prefetch(row + kAhead * kBytes, 0, 2);
      vec w[kVecs];
      _Pragma("GCC unroll 32") for (int v = 0; v < kVecs; ++v) {
        w[v] = load_block_values<Q>(row, v * kLanes) * bs.d[v] + bs.m[v];
      }
      _Pragma("GCC unroll 32") for (int m = 0; m < M; ++m) {
        const float xv = x[m * ldx + k];
        _Pragma("GCC unroll 32") for (int v = 0; v < kVecs; ++v) acc[m][v] += xv * w[v];
      }
    }
  }
  _Pragma("GCC unroll 32") for (int m = 0; m < M; ++m) {
    _Pragma("GCC unroll 32") for (int v = 0; v < kVecs; ++v) {
      __builtin_memcpy(y + m * ldy + v * kLanes, &acc[m][v], sizeof(vec));
    }
  }
}

// A panel of block weights widened to float32 [K][32] (many rows: the float32 kernels then multiply it).
template <typename Q>
void widen_panel(const uint8_t* panel, const float* scales, int64_t K, float* out) {
  constexpr int64_t kBytes = kBlockRowBytes<Q>;
  for (int64_t b = 0; b < K / kBlock; ++b) {
    const BlockScales bs(scales, b);
    for (int64_t k = b * kBlock; k < (b + 1) * kBlock; ++k) {
      _Pragma("GCC unroll 32") for (int v = 0; v < kVecs; ++v) {
        const vec w = load_block_values<Q>(panel + k * kBytes, v * kLanes) * bs.d[v] + bs.m[v];
        __builtin_memcpy(out + k * kPanel + v * kLanes, &w, sizeof(vec));
      }
    }
  }
}

// A block micro-kernel has the float32 ones' signature, its panel's scales in place of the column scales.
using BlockKernel = MicroKernel<uint8_t>;

template <typename Q, int... M>
constexpr std::array<BlockKernel, sizeof...(M) + 1> block_table(std::integer_sequence<int, M...>) {
  return {nullptr, &block_kernel<M + 1, Q>...};
}

// kBlockRows<Q>[rows]: the block micro-kernel for 1..kMaxRows rows.
template <typename Q>
constexpr auto kBlockRows = block_table<Q>(std::make_integer_sequence<int, kMaxRows>{});

// Narrow vectors (AVX2: 16 registers of 8 floats) cannot hold block_kernel's scales (8 vectors a block)
// beside more than one row's accumulators: its 2-row and 4-row kernels spilled. There 2 or more rows of
// x multiply a panel of block weights in column groups of V vectors, M * V accumulators at most
// kGroupAccumulators (as in the float32 6 x 16 block), each block's d and m read as FMA operands, a
// group's weights widened once per chunk of rows: 2-3 rows over the whole panel, 4-6 over halves, more
// in chunks of 6 at most (quarters, 7-12 rows in one chunk, were no faster). On a 2-core AMD EPYC without
// AVX-512, SmolLM2's layer products, interleaved with the whole-panel kernels: 4 rows took 0.91x their
// time, 6 rows 0.85x, 1-3 rows the same (one row keeps block_kernel: two panels per call were slower).
constexpr int kGroupAccumulators = 12;
constexpr int kGroupRows = kGroupAccumulators / 2;  // rows per chunk: two vectors per group at least

template <int M>
constexpr int group_vecs() {
  int v = kVecs;
  while (v > 2 && M * v > kGroupAccumulators) v /= 2;
  return v;
}

// Rows [M] of x times columns [C0, C0 + V * kLanes) of a panel of block weights (`panel`, `scales`: the
// whole panel's; `y`: the row's first column of the panel).
template <int M, typename Q, int V, int C0>
void block_group(const float* x, int64_t ldx, const uint8_t* panel, int64_t K, float* y, int64_t ldy,
                 const float* scales) {
  constexpr int64_t kBytes = kBlockRowBytes<Q>;
  vec acc[M][V];
  _Pragma("GCC unroll 32") for (int m = 0; m < M; ++m) {
    _Pragma("GCC unroll 32") for (int v = 0; v < V; ++v) acc[m][v] = vec{};
  }
  for (int64_t b = 0; b < K / kBlock; ++b) {
    const float* d = scales + b * 2 * kPanel + C0;
    const float* offset = d + kPanel;
    __builtin_prefetch(d + 4 * kPanel, 0, 2);
    __builtin_prefetch(offset + 4 * kPanel, 0, 2);
    for (int64_t k = b * kBlock; k < (b + 1) * kBlock; ++k) {
      const uint8_t* row = panel + k * kBytes;
      if constexpr (C0 == 0) __builtin_prefetch(row + kAhead * kBytes, 0, 2);
      vec w[V];
      _Pragma("GCC unroll 32") for (int v = 0; v < V; ++v) {
        w[v] = load_block_values<Q>(row, C0 + v * kLanes) * load_weights(d + v * kLanes) +
               load_weights(offset + v * kLanes);
      }
      _Pragma("GCC unroll 32") for (int m = 0; m < M; ++m) {
        const float xv = x[m * ldx + k];
        _Pragma("GCC unroll 32") for (int v = 0; v < V; ++v) acc[m][v] += xv * w[v];
      }
    }
  }
  _Pragma("GCC unroll 32") for (int m = 0; m < M; ++m) {
    _Pragma("GCC unroll 32") for (int v = 0; v < V; ++v) {
      __builtin_memcpy(y + m * ldy + C0 + v * kLanes, &acc[m][v], sizeof(vec));
    }
  }
}

// Rows [M] of x times a panel of block weights, group by group.
template <int M, typename Q, int... G>
void block_groups(const float* x, int64_t ldx, const uint8_t* panel, int64_t K, float* y, int64_t ldy,
                  const float* scales, std::integer_sequence<int, G...>) {
  constexpr int V = group_vecs<M>();
  (block_group<M, Q, V, G * V * kLanes>(x, ldx, panel, K, y, ldy, scales), ...);
}

template <int M, typename Q>
void block_grouped_kernel(const float* x, int64_t ldx, const uint8_t* panel, int64_t K, float* y, int64_t ldy,
                          const float* scales) {
  block_groups<M, Q>(x, ldx, panel, K, y, ldy, scales, std::make_integer_sequence<int, kVecs / group_vecs<M>()>{});
}

template <typename Q, int... M>
constexpr std::array<BlockKernel, sizeof...(M) + 2> block_grouped_table(std::integer_sequence<int, M...>) {
  return {nullptr, &block_kernel<1, Q>, &block_grouped_kernel<M + 2, Q>...};
}

// kBlockGroupedRows<Q>[rows]: one row by block_kernel, 2..kGroupRows rows by column groups.
template <typename Q>
constexpr auto kBlockGroupedRows = block_grouped_table<Q>(std::make_integer_sequence<int, kGroupRows - 1>{});
constexpr bool kGroupedBlocks = kLanes < 16;  // AVX-512's block_kernel holds its scales and 12 rows

// Rows of x times block panels [p0, p1): up to kWidenRows rows in chunks over the panels as they lie
// (each chunk widens the weights again: a few operations per weight, against 2 FMAs per row of it),
// more over each panel widened once into float32 (which writes and reads back 4 bytes a weight).
// With AVX-512 (SmolLM2's layer products on a 2-core AMD EPYC, one thread), in chunks 1-16 rows took
// 0.3-0.9x the time of float32 panels and 17-64 rows up to 1.07x; widened, 32 rows took 1.14x.
#if defined(__AVX512F__)
constexpr int64_t kWidenRows = 64;
#else
constexpr int64_t kWidenRows = kChunkedRows;  // AVX2's float32 slices beat its whole-panel blocks
#endif
template <typename Q>
void block_range(const float* x, int64_t M, int64_t K, const uint8_t* panels, const float* scales, int64_t p0,
                 int64_t p1, float* y, int64_t N) {
  const int64_t panel_bytes = K * kBlockRowBytes<Q>;
  const int64_t panel_scales = K / kBlock * 2 * kPanel;
  std::vector<float> widened(M > kWidenRows ? K * kPanel : 0);
  for (int64_t p = p0; p < p1; ++p) {
    const uint8_t* panel = panels + p * panel_bytes;
    const float* s = scales + p * panel_scales;
    if (M > kWidenRows) {
      widen_panel<Q>(panel, s, K, widened.data());
      panel_chunks(kManyRowsKernels<float>.data(), kManyRows, kManySlices, x, M, K, widened.data(), y + p * kPanel,
                   N, nullptr);
      continue;
    }
    if constexpr (kGroupedBlocks) {
      panel_chunks(kBlockGroupedRows<Q>.data(), kGroupRows, 1, x, M, K, panel, y + p * kPanel, N, s);
    } else {
      panel_chunks(kBlockRows<Q>.data(), kMaxRows, 1, x, M, K, panel, y + p * kPanel, N, s);
    }
  }
}

bool packable(const at::Tensor& t) {
  return t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kChar;
}

}  // namespace

namespace treespec {

// W [K, N] float32, bfloat16 or int8 (N a multiple of 32) -> panels [N / 32, K, 32] in W's dtype.
at::Tensor pack(const at::Tensor& weight) {
  TORCH_CHECK(weight.dim() == 2 && packable(weight), "pack: need a 2-D float32, bfloat16 or int8 weight");
  TORCH_CHECK(weight.size(1) % kPanel == 0, "pack: columns must be a multiple of ", kPanel);
  const int64_t K = weight.size(0), N = weight.size(1);
  return weight.view({K, N / kPanel, kPanel}).permute({1, 0, 2}).contiguous();
}

// x [M, K] float32, panels [P, K, 32] float32, bfloat16 or int8 (with scales [P * 32] float32, one per
// column) -> y [M, P * 32] float32.
at::Tensor matmul(const at::Tensor& x_in, const at::Tensor& panels, const std::optional<at::Tensor>& scales) {
  TORCH_CHECK(x_in.dim() == 2 && x_in.scalar_type() == at::kFloat, "matmul: need a 2-D float32 input");
  TORCH_CHECK(panels.dim() == 3 && panels.size(2) == kPanel && panels.is_contiguous() && packable(panels),
              "matmul: bad panels");
  TORCH_CHECK(x_in.size(1) == panels.size(1), "matmul: input width ", x_in.size(1), " != ", panels.size(1));
  const bool int8 = panels.scalar_type() == at::kChar;
  TORCH_CHECK(int8 == scales.has_value(), "matmul: int8 panels take column scales, other panels none");
  if (int8) {
    const at::Tensor& s = *scales;
    TORCH_CHECK(s.dim() == 1 && s.scalar_type() == at::kFloat && s.is_contiguous() &&
                    s.size(0) == panels.size(0) * kPanel,
                "matmul: need float32 scales, one per column");
  }
  const at::Tensor x = x_in.contiguous();
  const int64_t M = x.size(0), K = x.size(1), P = panels.size(0), N = P * kPanel;
  at::Tensor y = at::empty({M, N}, x.options());
  if (M == 0 || N == 0) return y;
  const float* xs = x.data_ptr<float>();
  float* ys = y.data_ptr<float>();
  const float* column_scales = int8 ? scales->data_ptr<float>() : nullptr;
  const auto run = [&](const auto* ps) {
    at::parallel_for(0, P, 1, [&](int64_t begin, int64_t end) {
      panel_range(xs, M, K, ps, begin, end, ys, N, column_scales);
    });
  };
  if (panels.scalar_type() == at::kBFloat16) {
    run(reinterpret_cast<const uint16_t*>(panels.data_ptr<at::BFloat16>()));
  } else if (int8) {
    run(panels.data_ptr<int8_t>());
  } else {
    run(panels.data_ptr<float>());
  }
  return y;
}

// x [M, K] float32, q [P, K, 16] uint8 (4-bit values, column c of a row in byte c % 16, low nibble
// below 16) or [P, K, 32] int8, scales [P, K / 32, 2, 32] float32 (each block's d, then m) ->
// y [M, P * 32] float32, y = x @ (q * d + m).
at::Tensor matmul_blocks(const at::Tensor& x_in, const at::Tensor& q, const at::Tensor& scales) {
  TORCH_CHECK(x_in.dim() == 2 && x_in.scalar_type() == at::kFloat, "matmul_blocks: need a 2-D float32 input");
  const bool nibbles = q.scalar_type() == at::kByte;
  TORCH_CHECK(q.dim() == 3 && q.is_contiguous() && (nibbles || q.scalar_type() == at::kChar) &&
                  q.size(2) == (nibbles ? kPanel / 2 : kPanel),
              "matmul_blocks: need [P, K, 16] uint8 or [P, K, 32] int8 values");
  const int64_t M = x_in.size(0), K = q.size(1), P = q.size(0), N = P * kPanel;
  TORCH_CHECK(x_in.size(1) == K, "matmul_blocks: input width ", x_in.size(1), " != ", K);
  TORCH_CHECK(K % kBlock == 0, "matmul_blocks: K must be a multiple of ", kBlock);
  TORCH_CHECK(scales.scalar_type() == at::kFloat && scales.is_contiguous() &&
                  scales.sizes() == at::IntArrayRef({P, K / kBlock, 2, kPanel}),
              "matmul_blocks: need float32 scales [P, K / 32, 2, 32]");
  const at::Tensor x = x_in.contiguous();
  at::Tensor y = at::empty({M, N}, x.options());
  if (M == 0 || N == 0) return y;
  const float* xs = x.data_ptr<float>();
  const float* ss = scales.data_ptr<float>();
  float* ys = y.data_ptr<float>();
  const uint8_t* qs = static_cast<const uint8_t*>(q.data_ptr());
  at::parallel_for(0, P, 1, [&](int64_t begin, int64_t end) {
    if (nibbles) {
      block_range<Nibbles>(xs, M, K, qs, ss, begin, end, ys, N);
    } else {
      block_range<int8_t>(xs, M, K, qs, ss, begin, end, ys, N);
    }
  });
  return y;
}

}  // namespace treespec
