// The CPU kernels' entry points (panel_gemm.cpp, tree_attention.cpp, prefill_attention.cpp,
// row_ops.cpp, decode_layers.cpp, eagle_pass.cpp), bound for Python in bindings.cpp: one extension of all of them, its sources compiled
// side by side. The kernels include ATen's headers only; torch's Python bindings are compiled once, in
// bindings.cpp.
#pragma once
#include <ATen/core/Tensor.h>

#include <optional>
#include <vector>

namespace treespec {

// W [K, N] float32, bfloat16 or int8 (N a multiple of 32) -> panels [N / 32, K, 32] in W's dtype.
at::Tensor pack(const at::Tensor& weight);

// x [M, K] float32, panels [P, K, 32] float32, bfloat16 or int8 (with scales [P * 32] float32, one per
// column) -> y [M, P * 32] float32.
at::Tensor matmul(const at::Tensor& x_in, const at::Tensor& panels, const std::optional<at::Tensor>& scales);

// x [M, K] float32 times block weights q * d + m: q [P, K, 16] uint8 (4-bit) or [P, K, 32] int8, scales
// [P, K / 32, 2, 32] float32 (d, m per block of 32 k and column) -> y [M, P * 32] float32.
at::Tensor matmul_blocks(const at::Tensor& x_in, const at::Tensor& q, const at::Tensor& scales);

// Rows of each sequence attended over the paged KV cache (tree_attention.cpp has the layout).
at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& sequences,
                  const at::Tensor& slots, const at::Tensor& masks, double scale);

// Prefill chunks' causal rows over the paged KV cache (prefill_attention.cpp has the layout).
at::Tensor prefill_attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const at::Tensor& sequences, const at::Tensor& slots, double scale);

// x [T, H] float32, weight [H] -> x * rsqrt(mean(x^2, -1) + eps) * weight.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

// x [T, heads, D] float32, cos and sin [T, D] -> x * cos + rotate_half(x) * sin (HF Llama's half split).
at::Tensor rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// gate_up [T, 2I] float32 -> silu(gate_up[:, :I]) * gate_up[:, I:] [T, I].
at::Tensor silu_mul(const at::Tensor& gate_up);

// logits [T, V] float32 -> {the k largest log-probabilities [T, k] best first (ties: lower index), their
// indices [T, k] long}.
std::vector<at::Tensor> top_logprobs(const at::Tensor& logits, int64_t k);

// A q/k/v product's rows [T, (heads + 2 kv heads) * D] split into heads, the query and key heads rotated
// together (decode_layers.cpp): q [T, heads, D] and k [T, kv heads, D] views of the rotated rows, v a view.
struct HeadRows {
  at::Tensor q, k, v;
};
HeadRows rotated_heads(const at::Tensor& qkv, int64_t num_heads, int64_t num_kv_heads, int64_t head_dim,
                       const at::Tensor& cos, const at::Tensor& sin, const char* what);

// Layers [first, last) of a decode or verify step (decode_layers.cpp): h [T, H] float32; per layer 10
// tensors (input norm, post-attention norm, then panels and scales of the q/k/v, output, gate/up and
// down products; an empty tensor where a product has no scales) and 4 forms (0: panels, 1: int8
// panels with column scales, 2: block values); cos, sin [T, D]; the K and V pools [L, blocks, block
// size, kv heads, D]; the new tokens' slots [T]; the row attention kernel's sequences, slots, masks.
at::Tensor decode_layers(const at::Tensor& h_in, int64_t first, int64_t last, const std::vector<at::Tensor>& tensors,
                         const std::vector<int64_t>& forms, const at::Tensor& cos, const at::Tensor& sin,
                         const at::Tensor& k_pool, const at::Tensor& v_pool, const at::Tensor& write_slots,
                         const at::Tensor& sequences, const at::Tensor& slots, const at::Tensor& masks,
                         int64_t num_heads, int64_t num_kv_heads, int64_t head_dim, double eps, double scale);

// One pass of an EAGLE head's layer (eagle_pass.cpp): embeds [T, H] and hidden [T, W] float32 (W: EAGLE-3's
// fc input, or H for the head's own output; EAGLE-2: H); 16 tensors (fc panels, scales, bias; EAGLE-3's
// input and hidden norms; q/k/v panels, scales, bias; output panels, scales; post-attention norm;
// gate/up panels, scales; down panels, scales; EAGLE-3's final norm; an empty tensor where the head has
// none); cos, sin [T, D]; per group of rows (a request's) its draft K and V caches [capacity, kv heads,
// D], written in place; groups [G, 3] long (rows, cached keys, the step's earlier rows); masks: each
// group's rows x (earlier rows + rows) bool, flattened and concatenated -> {output, what the lm_head
// reads} [T, H].
std::vector<at::Tensor> eagle_pass(const at::Tensor& embeds, const at::Tensor& hidden,
                                   const std::vector<at::Tensor>& tensors, const at::Tensor& cos, const at::Tensor& sin,
                                   const std::vector<at::Tensor>& k_caches, const std::vector<at::Tensor>& v_caches,
                                   const at::Tensor& groups, const at::Tensor& masks, int64_t num_heads,
                                   int64_t num_kv_heads, int64_t head_dim, double eps);

}  // namespace treespec
