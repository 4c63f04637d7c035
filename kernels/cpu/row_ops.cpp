// The forward's per-row steps between its matmuls, each in one pass over a row instead of a chain of
// torch ops: RMSNorm (y = x / sqrt(mean(x^2) + eps) * w), the rotary embedding of HF Llama's half-split
// convention, the MLP's silu(gate) * up, and a drafting level's top-k log-probabilities. A decode step's rows are a few hundred floats, where each
// torch op costs several microseconds of dispatch for nanoseconds of work: six ops per norm, 61 norms,
// 30 rotations and 30 gates per forward of SmolLM2-135M. Every row is computed by the same code whatever the row count (the
// rows are only split between threads), so a row's result does not depend on the rows beside it.
// The torch references are in row_ops.py.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>

#include "kernels.h"
#include "vec_math.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace {

namespace vm = treespec::vec_math;

constexpr int64_t kRowsPerTask = 64;  // rows a thread takes at least: a decode step's stay on the caller
constexpr int kSumLanes = 16;          // partial sums of squares, added up in a fixed order

// Sum of squares of n floats in kSumLanes interleaved partial sums (vectorised by the compiler), then
// added in order: the same order for every row and every row count.
float sum_of_squares(const float* x, int64_t n) {
  float part[kSumLanes] = {};
  int64_t i = 0;
  for (; i + kSumLanes <= n; i += kSumLanes) {
    for (int l = 0; l < kSumLanes; ++l) part[l] += x[i + l] * x[i + l];
  }
  for (int l = 0; i < n; ++i, ++l) part[l] += x[i] * x[i];
  float total = 0.0f;
  for (int l = 0; l < kSumLanes; ++l) total += part[l];
  return total;
}

// silu(g) * u = g * sigmoid(g) * u, sigmoid from e = exp(-|g|) (at most 1, so the kernels' exp for x <= 0
// serves): 1 / (1 + e) for g >= 0, e / (1 + e) below.
inline vm::vec silu_times(vm::vec g, vm::vec u) {
  const vm::ivec negative = g < vm::vec{};
  const vm::vec e = vm::vexp(negative ? g : -g);
  const vm::vec inv = 1.0f / (1.0f + e);
  return g * (negative ? e * inv : inv) * u;
}

constexpr int64_t kSumBlock = 64;  // vectors of exps summed in float before their sum goes into a double

double lane_sum(const vm::vec& v) {
  double sum = 0.0;
  for (int l = 0; l < vm::kLanes; ++l) sum += v[l];
  return sum;
}

void check_rows(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.scalar_type() == at::kFloat && t.is_contiguous(), what, ": need a contiguous float32 tensor");
}

}  // namespace

namespace treespec {

// x [T, H] float32, weight [H] float32 -> x * rsqrt(mean(x^2, -1) + eps) * weight.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  check_rows(x, "rms_norm");
  check_rows(weight, "rms_norm weight");
  TORCH_CHECK(x.dim() == 2 && weight.dim() == 1 && weight.size(0) == x.size(1), "rms_norm: need x [T, H], weight [H]");
  const int64_t rows = x.size(0), width = x.size(1);
  at::Tensor y = at::empty_like(x);
  const float* xs = x.data_ptr<float>();
  const float* w = weight.data_ptr<float>();
  float* ys = y.data_ptr<float>();
  const float epsilon = static_cast<float>(eps);
  at::parallel_for(0, rows, kRowsPerTask, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = xs + r * width;
      float* yr = ys + r * width;
      const float inv = 1.0f / std::sqrt(sum_of_squares(xr, width) / static_cast<float>(width) + epsilon);
      for (int64_t i = 0; i < width; ++i) yr[i] = xr[i] * inv * w[i];
    }
  });
  return y;
}

// x [T, heads, D] float32, cos and sin [T, D] float32 -> x * cos + rotate_half(x) * sin, where
// rotate_half(x) = (-x[D/2:], x[:D/2]).
at::Tensor rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  check_rows(x, "rope");
  check_rows(cos, "rope cos");
  check_rows(sin, "rope sin");
  TORCH_CHECK(x.dim() == 3 && x.size(2) % 2 == 0, "rope: need x [T, heads, D] with an even D");
  const int64_t rows = x.size(0), heads = x.size(1), dim = x.size(2), half = dim / 2;
  TORCH_CHECK(cos.dim() == 2 && cos.size(0) == rows && cos.size(1) == dim && sin.sizes() == cos.sizes(),
              "rope: need cos and sin [T, D]");
  at::Tensor y = at::empty_like(x);
  const float* xs = x.data_ptr<float>();
  const float* cs = cos.data_ptr<float>();
  const float* ss = sin.data_ptr<float>();
  float* ys = y.data_ptr<float>();
  at::parallel_for(0, rows, kRowsPerTask, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* c = cs + r * dim;
      const float* s = ss + r * dim;
      for (int64_t h = 0; h < heads; ++h) {
        const float* xh = xs + (r * heads + h) * dim;
        float* yh = ys + (r * heads + h) * dim;
        for (int64_t i = 0; i < half; ++i) yh[i] = xh[i] * c[i] + (-xh[i + half]) * s[i];
        for (int64_t i = half; i < dim; ++i) yh[i] = xh[i] * c[i] + xh[i - half] * s[i];
      }
    }
  });
  return y;
}

// gate_up [T, 2I] float32 (gate then up, as one product gives them) -> silu(gate) * up [T, I].
at::Tensor silu_mul(const at::Tensor& gate_up) {
  check_rows(gate_up, "silu_mul");
  TORCH_CHECK(gate_up.dim() == 2 && gate_up.size(1) % 2 == 0, "silu_mul: need gate_up [T, 2I]");
  const int64_t rows = gate_up.size(0), width = gate_up.size(1) / 2;
  at::Tensor y = at::empty({rows, width}, gate_up.options());
  const float* gs = gate_up.data_ptr<float>();
  float* ys = y.data_ptr<float>();
  at::parallel_for(0, rows, kRowsPerTask, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* g = gs + r * 2 * width;
      const float* u = g + width;
      float* yr = ys + r * width;
      int64_t i = 0;
      for (; i + vm::kLanes <= width; i += vm::kLanes) {
        vm::store(yr + i, silu_times(vm::load(g + i), vm::load(u + i)));
      }
      if (i < width) {  // the tail, through one zero-padded vector: the same arithmetic as every lane
        float gt[vm::kLanes] = {}, ut[vm::kLanes] = {}, yt[vm::kLanes];
        std::memcpy(gt, g + i, (width - i) * sizeof(float));
        std::memcpy(ut, u + i, (width - i) * sizeof(float));
        vm::store(yt, silu_times(vm::load(gt), vm::load(ut)));
        std::memcpy(yr + i, yt, (width - i) * sizeof(float));
      }
    }
  });
  return y;
}

// logits [T, V] float32, 1 <= k <= V -> {the k largest logits' log-probabilities (logit - logsumexp of
// the row) [T, k], best first, ties to the lower index; their indices [T, k] long}. What topk and
// logsumexp do as two passes of torch's, in one call: a drafting level's rows each pick their few
// children from a draft vocabulary of thousands.
std::vector<at::Tensor> top_logprobs(const at::Tensor& logits, int64_t k) {
  check_rows(logits, "top_logprobs");
  TORCH_CHECK(logits.dim() == 2 && k >= 1 && k <= logits.size(1), "top_logprobs: need logits [T, V], 1 <= k <= V");
  const int64_t rows = logits.size(0), width = logits.size(1);
  at::Tensor values = at::empty({rows, k}, logits.options());
  at::Tensor indices = at::empty({rows, k}, logits.options().dtype(at::kLong));
  const float* xs = logits.data_ptr<float>();
  float* vs = values.data_ptr<float>();
  int64_t* is = indices.data_ptr<int64_t>();
  at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* x = xs + r * width;
      float* top = vs + r * k;
      int64_t* index = is + r * k;
      int64_t filled = 0;
      float largest = -std::numeric_limits<float>::infinity();
      for (int64_t i = 0; i < width; ++i) {  // the k best so far, kept sorted: later equals go after
        const float v = x[i];
        largest = v > largest ? v : largest;
        if (filled == k && !(v > top[k - 1])) continue;
        int64_t j = filled < k ? filled++ : k - 1;
        for (; j > 0 && v > top[j - 1]; --j) {
          top[j] = top[j - 1];
          index[j] = index[j - 1];
        }
        top[j] = v;
        index[j] = i;
      }
      // exp(x - largest) summed in float vectors a block at a time, the blocks' sums in double: one
      // float accumulator over a vocabulary of 10^5 tokens drifted by 2e-5 (the error grows with the
      // adds into it), where torch's logsumexp stays within 1e-6.
      const vm::vec shift = vm::splat(largest);
      vm::vec sums = vm::vec{};
      double total = 0.0;
      int64_t i = 0, in_block = 0;
      for (; i + vm::kLanes <= width; i += vm::kLanes) {
        sums += vm::vexp(vm::load(x + i) - shift);
        if (++in_block == kSumBlock) {
          total += lane_sum(sums);
          sums = vm::vec{};
          in_block = 0;
        }
      }
      if (i < width) {  // the tail, padded with -inf (whose exp is 0)
        float tail[vm::kLanes];
        for (int l = 0; l < vm::kLanes; ++l) tail[l] = -std::numeric_limits<float>::infinity();
        std::memcpy(tail, x + i, (width - i) * sizeof(float));
        sums += vm::vexp(vm::load(tail) - shift);
      }
      const float lse = largest + static_cast<float>(std::log(total + lane_sum(sums)));
      for (int64_t j = 0; j < k; ++j) top[j] -= lse;
    }
  });
  return {values, indices};
}

}  // namespace treespec
