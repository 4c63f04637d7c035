// Causal attention of prefill chunks (many new rows per sequence) over the paged KV cache, in float32,
// reading K and V where they lie in the pool (no gather, no dense mask).
//
// A sequence's new rows are a chain: row i (position cached_len + i) sees every key at or before its
// position. Work is split by (sequence, query head, tile of kTile rows); each work item walks the keys
// its rows see in blocks of kKeyBlock, with the tile's queries in vector lanes: the block's scores
// (keys by query lanes), the running max and sum of the online softmax, and the weighted sum of V
// rescaled as the max rises (flash attention's recurrence). Keys past a row's position are masked
// only in the blocks that reach past the tile's first row. Each lane is one query, so no horizontal
// reduction is needed anywhere; a row's result depends only on its own keys, not on the rows beside it.
// The torch reference is SDPA with is_causal over the gathered keys (prefill_attention.py).
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include "kernels.h"
#include "vec_math.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace {

using treespec::vec_math::ivec;
using treespec::vec_math::kLanes;
using treespec::vec_math::load;
using treespec::vec_math::splat;
using treespec::vec_math::store;
using treespec::vec_math::vec;
using treespec::vec_math::vexp;

constexpr int kTile = 32;                 // query rows per work item, in kTile / kLanes vectors
constexpr int kTileVecs = kTile / kLanes;
constexpr int64_t kKeyBlock = 64;         // keys per online-softmax step
// Accumulators per micro-kernel: 16 of the 32 AVX-512 registers, or of AVX2's 16 (the operands
// broadcast from memory), 8 of SSE's 16.
constexpr int kAccumulators = kLanes >= 8 ? 16 : 8;
constexpr int kKeysPerPass = std::max(1, kAccumulators / kTileVecs);  // score micro-kernel: keys x tile
constexpr int kDimsPerPass = std::max(1, kAccumulators / kTileVecs);  // V micro-kernel: head dims x tile

struct Sequence {
  int64_t row_start;    // first row of its queries in q
  int64_t num_new;      // its new tokens (query rows)
  int64_t cached_len;   // keys before its first row
  int64_t slot_offset;  // its cached_len + num_new slots in `slots`
  int64_t out_row;      // first row of its output
};

struct Problem {
  const float* q;
  int64_t q_row_stride, q_head_stride;
  const float* k;
  const float* v;
  int64_t slot_stride;  // floats per slot: kv_heads * head_dim
  const int64_t* slots;
  int64_t heads_per_group;
  int64_t heads;
  float scale;
  float* out;  // [rows, heads * head_dim]
};

struct WorkItem {
  int64_t sequence, head, tile;
};

// One tile's state: scaled queries transposed qt[d][kTile], the block's scores s[j][kTile] (then the
// softmax numerators), the weighted V sums transposed ot[d][kTile], and per lane the max and the sum.
template <int D>
struct TileState {
  alignas(64) float qt[D * kTile];
  alignas(64) float s[kKeyBlock * kTile];
  alignas(64) float ot[D * kTile];
  vec maxes[kTileVecs];
  vec sums[kTileVecs];
};

// Scores of keys [first, first + nk) against the tile's queries: s[j][lane]. `keys[j]` points at key j's
// head_dim floats of the query head's KV head.
template <int D>
void score_block(const float* const* keys, int64_t nk, TileState<D>& st) {
  for (int64_t j0 = 0; j0 < nk; j0 += kKeysPerPass) {
    const float* kp[kKeysPerPass];
    _Pragma("GCC unroll 32") for (int b = 0; b < kKeysPerPass; ++b)  // past the block: its last key again
      kp[b] = keys[std::min<int64_t>(j0 + b, nk - 1)];
    vec acc[kKeysPerPass][kTileVecs];
    _Pragma("GCC unroll 32") for (int b = 0; b < kKeysPerPass; ++b)
      _Pragma("GCC unroll 32") for (int t = 0; t < kTileVecs; ++t) acc[b][t] = vec{};
    for (int d = 0; d < D; ++d) {
      vec qd[kTileVecs];
      _Pragma("GCC unroll 32") for (int t = 0; t < kTileVecs; ++t) qd[t] = load(st.qt + d * kTile + t * kLanes);
      _Pragma("GCC unroll 32") for (int b = 0; b < kKeysPerPass; ++b) {
        const vec kd = splat(kp[b][d]);
        _Pragma("GCC unroll 32") for (int t = 0; t < kTileVecs; ++t) acc[b][t] += kd * qd[t];
      }
    }
    for (int b = 0; b < kKeysPerPass && j0 + b < nk; ++b)
      _Pragma("GCC unroll 32") for (int t = 0; t < kTileVecs; ++t) store(st.s + (j0 + b) * kTile + t * kLanes, acc[b][t]);
  }
}

// Keys past a lane's position -inf: lane l is the query at `first_query + l`, key j at `first_key + j`.
template <int D>
void mask_block(int64_t first_key, int64_t nk, int64_t first_query, TileState<D>& st) {
  const vec neg_inf = splat(-std::numeric_limits<float>::infinity());
  ivec lane;
  for (int l = 0; l < kLanes; ++l) lane[l] = l;
  for (int64_t j = 0; j < nk; ++j) {
    const int64_t behind = first_key + j - first_query;  // lanes below this see no key j
    if (behind <= 0) continue;
    _Pragma("GCC unroll 32") for (int t = 0; t < kTileVecs; ++t) {
      const ivec hidden = lane + t * kLanes < static_cast<int32_t>(std::min<int64_t>(behind, kTile));
      float* row = st.s + j * kTile + t * kLanes;
      store(row, hidden ? neg_inf : load(row));
    }
  }
}

// The online softmax over the block: new maxes, the running sums and V sums rescaled to them, and the
// block's numerators in place of its scores. Returns each lane's rescaling factor in `alpha`.
template <int D>
void softmax_block(int64_t nk, TileState<D>& st, vec* alpha) {
  const vec neg_inf = splat(-std::numeric_limits<float>::infinity());
  _Pragma("GCC unroll 32") for (int t = 0; t < kTileVecs; ++t) {
    vec top = st.maxes[t];
    for (int64_t j = 0; j < nk; ++j) {
      const vec x = load(st.s + j * kTile + t * kLanes);
      top = x > top ? x : top;
    }
    const ivec none = top == neg_inf;  // a lane that has seen no key yet keeps its zeros
    const vec shift = none ? vec{} : top;
    alpha[t] = vexp(st.maxes[t] - shift);  // 0 for a lane's first keys (-inf - shift)
    vec sum = vec{};
    for (int64_t j = 0; j < nk; ++j) {
      float* row = st.s + j * kTile + t * kLanes;
      const vec p = vexp(load(row) - shift);
      store(row, p);
      sum += p;
    }
    st.maxes[t] = top;
    st.sums[t] = st.sums[t] * alpha[t] + sum;
  }
}

// ot[d][lane] = ot[d][lane] * alpha[lane] + sum_j values[j][d] * s[j][lane].
template <int D>
void accumulate_values(const float* const* values, int64_t nk, const vec* alpha, TileState<D>& st) {
  for (int d0 = 0; d0 < D; d0 += kDimsPerPass) {
    vec acc[kDimsPerPass][kTileVecs];
    _Pragma("GCC unroll 32") for (int e = 0; e < kDimsPerPass; ++e)
      _Pragma("GCC unroll 32") for (int t = 0; t < kTileVecs; ++t)
        acc[e][t] = load(st.ot + (d0 + e) * kTile + t * kLanes) * alpha[t];
    for (int64_t j = 0; j < nk; ++j) {
      const float* value = values[j] + d0;
      vec p[kTileVecs];
      _Pragma("GCC unroll 32") for (int t = 0; t < kTileVecs; ++t) p[t] = load(st.s + j * kTile + t * kLanes);
      _Pragma("GCC unroll 32") for (int e = 0; e < kDimsPerPass; ++e) {
        const vec ve = splat(value[e]);
        _Pragma("GCC unroll 32") for (int t = 0; t < kTileVecs; ++t) acc[e][t] += ve * p[t];
      }
    }
    _Pragma("GCC unroll 32") for (int e = 0; e < kDimsPerPass; ++e)
      _Pragma("GCC unroll 32") for (int t = 0; t < kTileVecs; ++t) store(st.ot + (d0 + e) * kTile + t * kLanes, acc[e][t]);
  }
}

// One work item: the tile's rows of one query head, attended over every key they see.
template <int D>
void attend_tile(const Problem& pb, const Sequence& s, const WorkItem& w) {
  static_assert(D % kDimsPerPass == 0, "head_dim must be a multiple of the V micro-kernel's dims");
  TileState<D> st;
  const int64_t r0 = w.tile * kTile;
  const int64_t rows = std::min<int64_t>(kTile, s.num_new - r0);
  const int64_t group = w.head / pb.heads_per_group;
  std::fill(st.qt, st.qt + D * kTile, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const float* qr = pb.q + (s.row_start + r0 + r) * pb.q_row_stride + w.head * pb.q_head_stride;
    for (int d = 0; d < D; ++d) st.qt[d * kTile + r] = qr[d] * pb.scale;
  }
  std::fill(st.ot, st.ot + D * kTile, 0.0f);
  for (int t = 0; t < kTileVecs; ++t) {
    st.maxes[t] = splat(-std::numeric_limits<float>::infinity());
    st.sums[t] = vec{};
  }
  const int64_t first_query = s.cached_len + r0;  // position of the tile's first row
  const int64_t kv_end = first_query + rows;      // keys the tile's last row sees
  const float* keys[kKeyBlock];
  const float* values[kKeyBlock];
  for (int64_t first = 0; first < kv_end; first += kKeyBlock) {
    const int64_t nk = std::min(kKeyBlock, kv_end - first);
    for (int64_t j = 0; j < nk; ++j) {
      const int64_t slot = pb.slots[s.slot_offset + first + j] * pb.slot_stride + group * D;
      keys[j] = pb.k + slot;
      values[j] = pb.v + slot;
    }
    score_block<D>(keys, nk, st);
    if (first + nk - 1 > first_query) mask_block<D>(first, nk, first_query, st);
    vec alpha[kTileVecs];
    softmax_block<D>(nk, st, alpha);
    accumulate_values<D>(values, nk, alpha, st);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float inv = 1.0f / st.sums[r / kLanes][r % kLanes];
    float* o = pb.out + (s.out_row + r0 + r) * pb.heads * D + w.head * D;
    for (int d = 0; d < D; ++d) o[d] = st.ot[d * kTile + r] * inv;
  }
}

using TileKernel = void (*)(const Problem&, const Sequence&, const WorkItem&);

TileKernel kernel_for(int64_t head_dim) {
  switch (head_dim) {
    case 16: return attend_tile<16>;
    case 32: return attend_tile<32>;
    case 64: return attend_tile<64>;
    case 128: return attend_tile<128>;
    case 256: return attend_tile<256>;
    default: return nullptr;
  }
}

}  // namespace

namespace treespec {

// q [T, H, D] (last dim contiguous); k, v [S, Hkv, D] contiguous slot pools; sequences [B, 4] long:
// (row_start, num_new, cached_len, slot_offset); slots: every sequence's cached_len + num_new flat slots.
// Returns [sum num_new, H * D], the sequences' rows in order.
at::Tensor prefill_attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const at::Tensor& sequences, const at::Tensor& slots, double scale) {
  TORCH_CHECK(q.dim() == 3 && q.scalar_type() == at::kFloat && q.stride(2) == 1, "prefill_attend: bad q");
  TORCH_CHECK(k.dim() == 3 && k.is_contiguous() && k.scalar_type() == at::kFloat, "prefill_attend: bad k");
  TORCH_CHECK(v.sizes() == k.sizes() && v.is_contiguous() && v.scalar_type() == at::kFloat, "prefill_attend: bad v");
  TORCH_CHECK(sequences.dim() == 2 && sequences.size(1) == 4 && sequences.scalar_type() == at::kLong &&
                  sequences.is_contiguous(), "prefill_attend: bad sequences");
  TORCH_CHECK(slots.scalar_type() == at::kLong && slots.is_contiguous(), "prefill_attend: bad slots");
  const int64_t heads = q.size(1), head_dim = q.size(2), kv_heads = k.size(1);
  TORCH_CHECK(k.size(2) == head_dim && kv_heads > 0 && heads % kv_heads == 0, "prefill_attend: head shapes");
  const TileKernel kernel = kernel_for(head_dim);
  TORCH_CHECK(kernel != nullptr, "prefill_attend: head_dim ", head_dim, " not supported");
  const int64_t B = sequences.size(0);
  const int64_t* seq = sequences.data_ptr<int64_t>();
  std::vector<Sequence> seqs(B);
  std::vector<WorkItem> items;
  int64_t rows = 0;
  for (int64_t b = 0; b < B; ++b) {
    Sequence s{seq[b * 4], seq[b * 4 + 1], seq[b * 4 + 2], seq[b * 4 + 3], rows};
    TORCH_CHECK(s.num_new >= 1 && s.cached_len >= 0 && s.row_start >= 0 && s.row_start + s.num_new <= q.size(0),
                "prefill_attend: sequence ", b, " rows out of range");
    TORCH_CHECK(s.slot_offset >= 0 && s.slot_offset + s.cached_len + s.num_new <= slots.numel(),
                "prefill_attend: slots");
    seqs[b] = s;
    rows += s.num_new;
    // Tiles from the last, which see the most keys, so that the threads' shares come out even.
    for (int64_t t = (s.num_new + kTile - 1) / kTile - 1; t >= 0; --t)
      for (int64_t h = 0; h < heads; ++h) items.push_back({b, h, t});
  }
  const int64_t* slot_data = slots.data_ptr<int64_t>();
  const int64_t num_slots = k.size(0);
  for (int64_t i = 0; i < slots.numel(); ++i)
    TORCH_CHECK(slot_data[i] >= 0 && slot_data[i] < num_slots, "prefill_attend: slot out of range");
  at::Tensor out = at::empty({rows, heads * head_dim}, q.options());
  const Problem pb{q.data_ptr<float>(), q.stride(0), q.stride(1), k.data_ptr<float>(), v.data_ptr<float>(),
                   kv_heads * head_dim, slot_data, heads / kv_heads, heads, static_cast<float>(scale),
                   out.data_ptr<float>()};
  const int64_t n = static_cast<int64_t>(items.size());
  const int threads = at::get_num_threads();
  // Item i goes to thread i % threads: the costly tiles (first in the list) are dealt out evenly.
  at::parallel_for(0, threads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      for (int64_t i = t; i < n; i += threads) kernel(pb, seqs[items[i].sequence], items[i]);
  });
  return out;
}

}  // namespace treespec
