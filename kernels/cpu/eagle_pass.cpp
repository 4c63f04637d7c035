// One pass of an EAGLE head's layer for the few rows of a drafting level or a catch-up, in one call from
// Python.
//
// What EagleHead.layer_input, qkv, the drafter's attention and EagleHead.finish do
// (services/drafter/eagle/head.py) with the own kernels: EAGLE-3's fc over target features (when the
// rows carry them), its input and hidden norms side by side, or EAGLE-2's fc over (embedding, feature);
// the fused q/k/v product, the rotary embedding of the query and key heads together, each request's new
// keys and values written into its draft cache, the row attention kernel over that cache and the
// step's earlier rows (tree_attention.cpp, with the new keys wider than the rows), the output product
// and the residual, the MLP and its residual, and EAGLE-3's final norm. What goes is the Python and the
// torch dispatch around some forty small operations a pass (README, EAGLE drafting).
#include <ATen/core/Tensor.h>
#include <ATen/ops/add.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/tensor.h>

#include "kernels.h"

#include <cmath>
#include <cstdint>
#include <vector>

namespace {

// The head's tensors in eagle_pass's `tensors` (an undefined or empty tensor where a head has none).
enum Tensor : int64_t {
  kFcPanels, kFcScales, kFcBias,    // fc: EAGLE-3 3H -> H over target features; EAGLE-2 2H -> H
  kInputNorm, kHiddenNorm,          // EAGLE-3's norms of the embedding and of the hidden state
  kQkvPanels, kQkvScales, kQkvBias, // q, k and v side by side
  kOPanels, kOScales,
  kPostNorm,
  kGateUpPanels, kGateUpScales,
  kDownPanels, kDownScales,
  kFinalNorm,                       // EAGLE-3's norm before its lm_head
  kTensors
};

bool given(const at::Tensor& t) { return t.defined() && t.numel() > 0; }

// x @ panels (int8 ones with their column scales) + bias.
at::Tensor product(const at::Tensor& x, const std::vector<at::Tensor>& t, int64_t panels, int64_t scales,
                   int64_t bias = -1) {
  at::Tensor y = treespec::matmul(x, t[panels], given(t[scales]) ? std::optional<at::Tensor>(t[scales]) : std::nullopt);
  return bias >= 0 && given(t[bias]) ? at::add(y, t[bias]) : y;
}

}  // namespace

namespace treespec {

std::vector<at::Tensor> eagle_pass(const at::Tensor& embeds, const at::Tensor& hidden,
                                   const std::vector<at::Tensor>& t, const at::Tensor& cos, const at::Tensor& sin,
                                   const std::vector<at::Tensor>& k_caches, const std::vector<at::Tensor>& v_caches,
                                   const at::Tensor& groups, const at::Tensor& masks, int64_t num_heads,
                                   int64_t num_kv_heads, int64_t head_dim, double eps) {
  TORCH_CHECK(static_cast<int64_t>(t.size()) == kTensors, "eagle_pass: need ", kTensors, " tensors");
  TORCH_CHECK(embeds.dim() == 2 && hidden.dim() == 2 && embeds.size(0) == hidden.size(0), "eagle_pass: rows");
  TORCH_CHECK(groups.dim() == 2 && groups.size(1) == 3 && groups.scalar_type() == at::kLong &&
                  groups.is_contiguous(), "eagle_pass: bad groups");
  TORCH_CHECK(masks.dim() == 1 && masks.scalar_type() == at::kBool && masks.is_contiguous(), "eagle_pass: bad masks");
  const int64_t G = groups.size(0);
  TORCH_CHECK(static_cast<int64_t>(k_caches.size()) == G && static_cast<int64_t>(v_caches.size()) == G,
              "eagle_pass: a K and a V cache per group");
  const int64_t H = embeds.size(1);
  const bool eagle3 = given(t[kInputNorm]);
  // The layer's input: its residual and what its attention reads.
  at::Tensor residual, attn_in;
  if (eagle3) {
    residual = hidden.size(1) != H ? product(hidden, t, kFcPanels, kFcScales, kFcBias) : hidden;
    attn_in = at::cat({rms_norm(embeds, t[kInputNorm], eps), rms_norm(residual, t[kHiddenNorm], eps)}, 1);
  } else {
    residual = attn_in = product(at::cat({embeds, hidden}, 1), t, kFcPanels, kFcScales, kFcBias);
  }
  const HeadRows heads = rotated_heads(product(attn_in, t, kQkvPanels, kQkvScales, kQkvBias), num_heads,
                                       num_kv_heads, head_dim, cos, sin, "eagle_pass");
  const at::Tensor &q = heads.q, &k = heads.k, &v = heads.v;
  // Each request's rows: keys and values into its cache after the cache and the step's earlier rows,
  // then attention over all of them, the earlier rows as its mask allows.
  const double scale = std::pow(static_cast<double>(head_dim), -0.5);
  const int64_t* g = groups.data_ptr<int64_t>();
  std::vector<at::Tensor> attended;
  int64_t row = 0, mask_at = 0;
  for (int64_t i = 0; i < G; ++i) {
    const int64_t rows = g[i * 3], cached = g[i * 3 + 1], scratch = g[i * 3 + 2];
    const int64_t start = cached + scratch, keys = start + rows;
    TORCH_CHECK(rows >= 1 && cached >= 0 && scratch >= 0 && row + rows <= q.size(0), "eagle_pass: group ", i);
    TORCH_CHECK(k_caches[i].size(0) >= keys && v_caches[i].size(0) >= keys, "eagle_pass: cache too short");
    TORCH_CHECK(mask_at + rows * (scratch + rows) <= masks.numel(), "eagle_pass: masks");
    k_caches[i].narrow(0, start, rows).copy_(k.narrow(0, row, rows));
    v_caches[i].narrow(0, start, rows).copy_(v.narrow(0, row, rows));
    const at::Tensor sequence = at::tensor({int64_t{0}, rows, cached, int64_t{0}, int64_t{0}, scratch + rows},
                                           at::kLong).view({1, 6});
    const at::Tensor mask = masks.narrow(0, mask_at, rows * (scratch + rows));
    attended.push_back(attend(q.narrow(0, row, rows), k_caches[i], v_caches[i], sequence,
                              at::arange(keys, at::kLong), mask, scale));
    row += rows;
    mask_at += rows * (scratch + rows);
  }
  TORCH_CHECK(row == q.size(0), "eagle_pass: the groups' rows are not all the rows");
  const at::Tensor h = at::add(residual, product(G == 1 ? attended[0] : at::cat(attended, 0), t, kOPanels, kOScales));
  const at::Tensor gate_up = product(rms_norm(h, t[kPostNorm], eps), t, kGateUpPanels, kGateUpScales);
  const at::Tensor out = at::add(h, product(silu_mul(gate_up), t, kDownPanels, kDownScales));
  return {out, eagle3 ? rms_norm(out, t[kFinalNorm], eps) : out};
}

}  // namespace treespec
