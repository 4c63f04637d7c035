// Attention of a few query rows per sequence (decode tokens, draft-tree nodes) over the paged KV
// cache, in float32, reading K and V where they lie in the pool (no gather, no dense mask).
//
// A sequence's new rows see its cached prefix whole and, among its new tokens, what its mask allows
// (a tree's ancestor mask, a chain's causal one). A sequence may have more new keys than rows: an EAGLE
// head's tree level, whose rows see the cache and, of the nodes drafted in the step so far (keys, no
// longer queries), their own ancestors. Work is split by (sequence, KV head, chunk of
// kChunk key positions); each work item scores every query of the KV head's group against its keys
// with the queries in vector lanes (GQA: the group's query heads and rows side by side), takes the
// chunk's softmax and its weighted sum of V; the chunks are merged per query at the end. Masked keys
// add exact zeros, and the chunks lie at fixed key positions, so a query's result depends only on the
// keys it sees: not on the other rows, and a verified chain's row equals the decode row, bit for bit.
// The torch reference is SDPA with the same mask (tree_attention.py).
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include "kernels.h"
#include "vec_math.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

namespace {

using treespec::vec_math::ivec;
using treespec::vec_math::kLanes;
using treespec::vec_math::load;
using treespec::vec_math::splat;
using treespec::vec_math::store;
using treespec::vec_math::vec;
using treespec::vec_math::vexp;

// Queries lie in the lanes of the CPU's widest vectors (vec_math.h). Vectors wider than the CPU's, or
// more accumulators than its registers, would live in memory and every FMA would wait on a store and a
// load (several times slower than torch's SDPA on an AVX2 CPU).
#if defined(__AVX512F__)
constexpr int kRowBlock = 4;     // queries whose V sums share each V load (4 x head_dim / 16 registers)
#else
constexpr int kRowBlock = 1;     // AVX2: a head_dim of 64 already takes 8 of the 16 registers per query
#endif
constexpr int64_t kChunk = 256;  // key positions per work item
constexpr int64_t kPrefetchKeys = 16;  // keys prefetched ahead of the scores
constexpr int kLineFloats = 16;  // a 64-byte cache line

struct Sequence {
  int64_t row_start;   // first row of its queries in q
  int64_t num_new;     // its new tokens (query rows)
  int64_t cached_len;  // keys every row sees
  int64_t slot_offset; // its kv_len slots in `slots`
  int64_t mask_offset; // its num_new x new_keys mask in `masks`
  int64_t out_row;     // first row of its output
  int64_t new_keys;    // keys after the cached prefix, which the mask governs (num_new unless given)
};

struct Problem {
  const float* q;
  int64_t q_row_stride, q_head_stride;
  const float* k;
  const float* v;
  int64_t slot_stride;  // floats per slot: kv_heads * head_dim
  const int64_t* slots;
  const uint8_t* masks;
  int64_t heads_per_group;
  float scale;
};

struct WorkItem {
  int64_t sequence, group, chunk;
  int64_t partial;  // offset of its queries' (max, sum, acc[D]) in the partial buffer
};

constexpr int kMaxQueries = 128;  // queries per KV head (rows x query heads per KV head)
constexpr int kMaxQueryVecs = kMaxQueries / kLanes;

// Scores of the chunk's keys against every query (lanes), scaled queries in qt[d][QV * kLanes]; masked
// keys -inf; and each lane's max. Keys go KB at a time so that KB * QV accumulator chains overlap.
template <int D, int QV>
void score_chunk(const Problem& pb, const Sequence& s, int64_t group, int64_t first, int64_t nk,
                 const float* qt, float* scores, vec* maxes) {
  constexpr int KB = QV >= 8 ? 1 : 8 / QV;
  constexpr int64_t QP = QV * kLanes;
  const int64_t hpg = pb.heads_per_group;
  const int64_t Q = s.num_new * hpg;
  const vec neg_inf = splat(-std::numeric_limits<float>::infinity());
  _Pragma("GCC unroll 32") for (int qv = 0; qv < QV; ++qv) maxes[qv] = neg_inf;
  for (int64_t j0 = 0; j0 < nk; j0 += KB) {
    const float* keys[KB];
    _Pragma("GCC unroll 32") for (int b = 0; b < KB; ++b) {  // past the chunk's end: its last key again, scores dropped
      const int64_t pos = first + std::min<int64_t>(j0 + b, nk - 1);
      keys[b] = pb.k + pb.slots[s.slot_offset + pos] * pb.slot_stride + group * D;
    }
    for (int64_t j = j0 + kPrefetchKeys; j < std::min(nk, j0 + kPrefetchKeys + KB); ++j) {
      // Keys ahead of use, and their values for the pass after the softmax (a chunk's stay in L2).
      const int64_t slot = pb.slots[s.slot_offset + first + j] * pb.slot_stride + group * D;
      for (int line = 0; line < D; line += kLineFloats) {
        __builtin_prefetch(pb.k + slot + line, 0, 3);
        __builtin_prefetch(pb.v + slot + line, 0, 2);
      }
    }
    vec acc[KB][QV];
    _Pragma("GCC unroll 32") for (int b = 0; b < KB; ++b)
      _Pragma("GCC unroll 32") for (int qv = 0; qv < QV; ++qv) acc[b][qv] = vec{};
    for (int d = 0; d < D; ++d) {
      vec qd[QV];
      _Pragma("GCC unroll 32") for (int qv = 0; qv < QV; ++qv) qd[qv] = load(qt + d * QP + qv * kLanes);
      _Pragma("GCC unroll 32") for (int b = 0; b < KB; ++b) {
        const vec kd = splat(keys[b][d]);
        _Pragma("GCC unroll 32") for (int qv = 0; qv < QV; ++qv) acc[b][qv] += kd * qd[qv];
      }
    }
    for (int b = 0; b < KB && j0 + b < nk; ++b) {
      const int64_t pos = first + j0 + b;
      if (pos >= s.cached_len) {  // a new token: visible to the rows whose mask allows it
        const uint8_t* column = pb.masks + s.mask_offset + (pos - s.cached_len);
        _Pragma("GCC unroll 32") for (int qv = 0; qv < QV; ++qv) {
          ivec seen;
          _Pragma("GCC unroll 32") for (int l = 0; l < kLanes; ++l) {
            const int64_t r = qv * kLanes + l;
            seen[l] = r < Q && column[(r / hpg) * s.new_keys] ? -1 : 0;
          }
          acc[b][qv] = seen ? acc[b][qv] : neg_inf;
        }
      }
      _Pragma("GCC unroll 32") for (int qv = 0; qv < QV; ++qv) {
        store(scores + (j0 + b) * QP + qv * kLanes, acc[b][qv]);
        maxes[qv] = acc[b][qv] > maxes[qv] ? acc[b][qv] : maxes[qv];
      }
    }
  }
}

using ScoreKernel = void (*)(const Problem&, const Sequence&, int64_t, int64_t, int64_t, const float*, float*,
                             vec*);
template <int D, int... QV>
constexpr std::array<ScoreKernel, sizeof...(QV) + 1> score_table(std::integer_sequence<int, QV...>) {
  return {nullptr, &score_chunk<D, QV + 1>...};
}

// kScoreKernels<D>[QV]: the score kernel for QV vectors of queries.
template <int D>
constexpr auto kScoreKernels = score_table<D>(std::make_integer_sequence<int, kMaxQueryVecs>{});

// One work item: for every query of the group, the max score, the sum of e^(score - max) and the
// weighted sum of V over the chunk's visible keys. DV: head_dim / kLanes.
template <int DV>
void chunk_partials(const Problem& pb, const Sequence& s, const WorkItem& w, float* partial) {
  constexpr int D = DV * kLanes;
  const int64_t hpg = pb.heads_per_group;
  const int64_t Q = s.num_new * hpg;
  const int64_t QV = (Q + kLanes - 1) / kLanes;
  const int64_t QP = QV * kLanes;
  const int64_t kv_len = s.cached_len + s.new_keys;
  const int64_t first = w.chunk * kChunk;
  const int64_t nk = std::min(kv_len, first + kChunk) - first;
  // Queries transposed, scaled: qt[d][r], r = row * hpg + head within the group.
  std::vector<float> qt(D * QP, 0.0f);
  for (int64_t r = 0; r < Q; ++r) {
    const float* qr = pb.q + (s.row_start + r / hpg) * pb.q_row_stride + (w.group * hpg + r % hpg) * pb.q_head_stride;
    for (int d = 0; d < D; ++d) qt[d * QP + r] = qr[d] * pb.scale;
  }
  // Scores, keys by query lanes; masked ones -inf.
  std::vector<float> scores(nk * QP);
  const vec neg_inf = splat(-std::numeric_limits<float>::infinity());
  vec maxes[kMaxQueryVecs];
  kScoreKernels<D>[QV](pb, s, w.group, first, nk, qt.data(), scores.data(), maxes);
  // Softmax numerators in place, and their sums.
  vec sums[kMaxQueryVecs];
  for (int64_t qv = 0; qv < QV; ++qv) {
    const ivec none = maxes[qv] == neg_inf;
    const vec shift = none ? vec{} : maxes[qv];
    vec sum = vec{};
    for (int64_t j = 0; j < nk; ++j) {
      const vec p = vexp(load(&scores[j * QP + qv * kLanes]) - shift);
      store(&scores[j * QP + qv * kLanes], p);
      sum += p;
    }
    sums[qv] = sum;
  }
  // Weighted sums of V, kRowBlock queries per pass over the chunk's values.
  const int64_t stride = D + 2;
  for (int64_t r0 = 0; r0 < Q; r0 += kRowBlock) {
    const int64_t rows = std::min<int64_t>(kRowBlock, Q - r0);
    vec acc[kRowBlock][DV];
    _Pragma("GCC unroll 32") for (int b = 0; b < kRowBlock; ++b)
      _Pragma("GCC unroll 32") for (int dv = 0; dv < DV; ++dv) acc[b][dv] = vec{};
    for (int64_t j = 0; j < nk; ++j) {
      const float* value = pb.v + pb.slots[s.slot_offset + first + j] * pb.slot_stride + w.group * D;
      vec vv[DV];
      _Pragma("GCC unroll 32") for (int dv = 0; dv < DV; ++dv) vv[dv] = load(value + dv * kLanes);
      const float* p = &scores[j * QP + r0];
      _Pragma("GCC unroll 32") for (int b = 0; b < kRowBlock; ++b) {
        if (b >= rows) break;
        const vec pb_ = splat(p[b]);
        _Pragma("GCC unroll 32") for (int dv = 0; dv < DV; ++dv) acc[b][dv] += pb_ * vv[dv];
      }
    }
    for (int64_t b = 0; b < rows; ++b) {
      const int64_t r = r0 + b;
      float* out = partial + r * stride;
      out[0] = maxes[r / kLanes][r % kLanes];
      out[1] = sums[r / kLanes][r % kLanes];
      _Pragma("GCC unroll 32") for (int dv = 0; dv < DV; ++dv) store(out + 2 + dv * kLanes, acc[b][dv]);
    }
  }
}

using ChunkKernel = void (*)(const Problem&, const Sequence&, const WorkItem&, float*);

ChunkKernel kernel_for(int64_t head_dim) {
  switch (head_dim) {
    case 16: return chunk_partials<16 / kLanes>;
    case 32: return chunk_partials<32 / kLanes>;
    case 64: return chunk_partials<64 / kLanes>;
    case 128: return chunk_partials<128 / kLanes>;
    case 256: return chunk_partials<256 / kLanes>;
    default: return nullptr;
  }
}

// Per query: the chunks' partials merged into softmax(scores) @ V.
void merge(const Sequence& s, int64_t group, int64_t hpg, int64_t head_dim, int64_t chunks,
           const float* partials, int64_t heads, float* out) {
  const int64_t Q = s.num_new * hpg;
  const int64_t stride = head_dim + 2;
  for (int64_t r = 0; r < Q; ++r) {
    float top = -std::numeric_limits<float>::infinity();
    for (int64_t c = 0; c < chunks; ++c) {
      const float* part = partials + (c * Q + r) * stride;
      if (part[1] > 0.0f) top = std::max(top, part[0]);
    }
    float* o = out + (s.out_row + r / hpg) * heads * head_dim + (group * hpg + r % hpg) * head_dim;
    std::fill(o, o + head_dim, 0.0f);
    float total = 0.0f;
    for (int64_t c = 0; c < chunks; ++c) {
      const float* part = partials + (c * Q + r) * stride;
      if (!(part[1] > 0.0f)) continue;  // the query sees no key of this chunk
      const float weight = std::exp(part[0] - top);
      total += part[1] * weight;
      for (int64_t d = 0; d < head_dim; ++d) o[d] += part[2 + d] * weight;
    }
    const float inv = 1.0f / total;
    for (int64_t d = 0; d < head_dim; ++d) o[d] *= inv;
  }
}

}  // namespace

namespace treespec {

// q [T, H, D] (last dim contiguous); k, v [S, Hkv, D] contiguous slot pools; sequences [B, 5] long:
// (row_start, num_new, cached_len, slot_offset, mask_offset), or [B, 6] with new_keys last (else
// num_new); slots: every sequence's cached_len + new_keys flat slots; masks: every sequence's num_new x
// new_keys bool mask over its new keys (row: query).
// Returns [sum num_new, H * D], the sequences' rows in order.
at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const at::Tensor& sequences, const at::Tensor& slots, const at::Tensor& masks,
                     double scale) {
  TORCH_CHECK(q.dim() == 3 && q.scalar_type() == at::kFloat && q.stride(2) == 1, "attend: bad q");
  TORCH_CHECK(k.dim() == 3 && k.is_contiguous() && k.scalar_type() == at::kFloat, "attend: bad k");
  TORCH_CHECK(v.sizes() == k.sizes() && v.is_contiguous() && v.scalar_type() == at::kFloat, "attend: bad v");
  const int64_t columns = sequences.dim() == 2 ? sequences.size(1) : 0;
  TORCH_CHECK((columns == 5 || columns == 6) && sequences.scalar_type() == at::kLong &&
                  sequences.is_contiguous(), "attend: bad sequences");
  TORCH_CHECK(slots.scalar_type() == at::kLong && slots.is_contiguous(), "attend: bad slots");
  TORCH_CHECK(masks.scalar_type() == at::kBool && masks.is_contiguous(), "attend: bad masks");
  const int64_t heads = q.size(1), head_dim = q.size(2), kv_heads = k.size(1);
  TORCH_CHECK(k.size(2) == head_dim && kv_heads > 0 && heads % kv_heads == 0, "attend: head shapes");
  const ChunkKernel kernel = kernel_for(head_dim);
  TORCH_CHECK(kernel != nullptr, "attend: head_dim ", head_dim, " not supported");
  const int64_t hpg = heads / kv_heads;
  const int64_t B = sequences.size(0);
  const int64_t* seq = sequences.data_ptr<int64_t>();
  std::vector<Sequence> seqs(B);
  std::vector<WorkItem> items;
  std::vector<int64_t> first_item(B * kv_heads), chunk_count(B);
  int64_t rows = 0, partial_floats = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t* row = seq + b * columns;
    Sequence s{row[0], row[1], row[2], row[3], row[4], rows, columns == 6 ? row[5] : row[1]};
    TORCH_CHECK(s.new_keys >= s.num_new, "attend: sequence ", b, " has fewer new keys than rows");
    TORCH_CHECK(s.num_new >= 1 && s.cached_len >= 0 && s.row_start >= 0 && s.row_start + s.num_new <= q.size(0),
                "attend: sequence ", b, " rows out of range");
    TORCH_CHECK((s.num_new * hpg + kLanes - 1) / kLanes <= kMaxQueryVecs, "attend: at most ", kMaxQueryVecs * kLanes / hpg, " rows");
    TORCH_CHECK(s.slot_offset >= 0 && s.slot_offset + s.cached_len + s.new_keys <= slots.numel(), "attend: slots");
    TORCH_CHECK(s.mask_offset >= 0 && s.mask_offset + s.num_new * s.new_keys <= masks.numel(), "attend: masks");
    seqs[b] = s;
    rows += s.num_new;
    const int64_t kv_len = s.cached_len + s.new_keys;
    chunk_count[b] = (kv_len + kChunk - 1) / kChunk;
    for (int64_t g = 0; g < kv_heads; ++g) {
      first_item[b * kv_heads + g] = static_cast<int64_t>(items.size());
      for (int64_t c = 0; c < chunk_count[b]; ++c) {
        items.push_back({b, g, c, partial_floats});
        partial_floats += s.num_new * hpg * (head_dim + 2);
      }
    }
  }
  const int64_t* slot_data = slots.data_ptr<int64_t>();
  const int64_t num_slots = k.size(0);
  for (int64_t i = 0; i < slots.numel(); ++i)
    TORCH_CHECK(slot_data[i] >= 0 && slot_data[i] < num_slots, "attend: slot out of range");
  const Problem pb{q.data_ptr<float>(), q.stride(0), q.stride(1), k.data_ptr<float>(), v.data_ptr<float>(),
                   kv_heads * head_dim, slot_data, reinterpret_cast<const uint8_t*>(masks.data_ptr<bool>()),
                   hpg, static_cast<float>(scale)};
  std::vector<float> partials(partial_floats);
  at::parallel_for(0, static_cast<int64_t>(items.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const WorkItem& w = items[i];
      kernel(pb, seqs[w.sequence], w, partials.data() + w.partial);
    }
  });
  at::Tensor out = at::empty({rows, heads * head_dim}, q.options());
  float* o = out.data_ptr<float>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t g = 0; g < kv_heads; ++g) {
      const WorkItem& w = items[first_item[b * kv_heads + g]];
      merge(seqs[b], g, hpg, head_dim, chunk_count[b], partials.data() + w.partial, heads, o);
    }
  return out;
}

}  // namespace treespec
