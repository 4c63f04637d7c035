// A run of decoder layers for the few rows of a decode or verify step, in one call from Python.
//
// Each layer is what CausalLM.forward does (shared/model/causal_lm.py) with the own kernels: RMSNorm,
// the fused q/k/v product, the rotary embedding of the query and key heads together, the new keys and
// values written into the layer's pools, the row attention kernel, the output product and the residual;
// then RMSNorm, the gate/up product, silu(gate) * up, the down product and the residual. The same
// kernels are called on the same tensors in the same order, so the rows are the Python loop's bit for
// bit; what goes is the Python around them (about 17 us a layer: 0.5 ms of a 5.9 ms SmolLM2 forward).
// Python checks that a model and a step fit (kernels/decode_layers.py): panel weights without biases
// or q/k norms, one row-kernel attention group.
#include <ATen/core/Tensor.h>
#include <ATen/ops/add.h>

#include "kernels.h"

#include <cstdint>
#include <vector>

namespace {

constexpr int64_t kTensorsPerLayer = 10;  // input norm, post norm, then (panels, scales) of 4 products
constexpr int64_t kProductsPerLayer = 4;  // q/k/v, output, gate/up, down

enum Form : int64_t { kPanels = 0, kScaledPanels = 1, kBlocks = 2 };

at::Tensor product(const at::Tensor& x, const at::Tensor& panels, const at::Tensor& scales, int64_t form) {
  switch (form) {
    case kPanels:
      return treespec::matmul(x, panels, std::nullopt);
    case kScaledPanels:
      return treespec::matmul(x, panels, scales);
    case kBlocks:
      return treespec::matmul_blocks(x, panels, scales);
    default:
      TORCH_CHECK(false, "decode_layers: unknown weight form ", form);
  }
}

}  // namespace

namespace treespec {

HeadRows rotated_heads(const at::Tensor& qkv, int64_t num_heads, int64_t num_kv_heads, int64_t head_dim,
                       const at::Tensor& cos, const at::Tensor& sin, const char* what) {
  const int64_t qk_width = (num_heads + num_kv_heads) * head_dim, kv_width = num_kv_heads * head_dim;
  TORCH_CHECK(qkv.size(1) == qk_width + kv_width, what, ": q/k/v width");
  const at::Tensor qk = qkv.narrow(1, 0, qk_width).view({-1, num_heads + num_kv_heads, head_dim});
  const at::Tensor rotated = rope(qk.contiguous(), cos, sin);
  return {rotated.narrow(1, 0, num_heads), rotated.narrow(1, num_heads, num_kv_heads),
          qkv.narrow(1, qk_width, kv_width).view({-1, num_kv_heads, head_dim})};
}

at::Tensor decode_layers(const at::Tensor& h_in, int64_t first, int64_t last, const std::vector<at::Tensor>& tensors,
                         const std::vector<int64_t>& forms, const at::Tensor& cos, const at::Tensor& sin,
                         const at::Tensor& k_pool, const at::Tensor& v_pool, const at::Tensor& write_slots,
                         const at::Tensor& sequences, const at::Tensor& slots, const at::Tensor& masks,
                         int64_t num_heads, int64_t num_kv_heads, int64_t head_dim, double eps, double scale) {
  const int64_t layers = static_cast<int64_t>(forms.size()) / kProductsPerLayer;
  TORCH_CHECK(static_cast<int64_t>(tensors.size()) == layers * kTensorsPerLayer &&
                  static_cast<int64_t>(forms.size()) == layers * kProductsPerLayer,
              "decode_layers: need ", kTensorsPerLayer, " tensors and ", kProductsPerLayer, " forms a layer");
  TORCH_CHECK(0 <= first && first <= last && last <= layers && last <= k_pool.size(0) && last <= v_pool.size(0),
              "decode_layers: layers out of range");
  at::Tensor h = h_in;
  for (int64_t i = first; i < last; ++i) {
    const at::Tensor* t = tensors.data() + i * kTensorsPerLayer;
    const int64_t* f = forms.data() + i * kProductsPerLayer;
    const HeadRows heads = rotated_heads(product(rms_norm(h, t[0], eps), t[2], t[3], f[0]), num_heads, num_kv_heads,
                                         head_dim, cos, sin, "decode_layers");
    const at::Tensor &q = heads.q, &k = heads.k, &v = heads.v;
    at::Tensor k_flat = k_pool.select(0, i).flatten(0, 1);
    at::Tensor v_flat = v_pool.select(0, i).flatten(0, 1);
    k_flat.index_copy_(0, write_slots, k);
    v_flat.index_copy_(0, write_slots, v);
    const at::Tensor attended = attend(q, k_flat, v_flat, sequences, slots, masks, scale);
    h = at::add(h, product(attended, t[4], t[5], f[1]));
    const at::Tensor gate_up = product(rms_norm(h, t[1], eps), t[6], t[7], f[2]);
    h = at::add(h, product(silu_mul(gate_up), t[8], t[9], f[3]));
  }
  return h;
}

}  // namespace treespec
