// The CPU's widest float vectors (16 floats with AVX-512, 8 with AVX2, 4 else) and the math the kernels
// share on them (tree_attention.cpp, row_ops.cpp). GCC vector extensions, compiled with -march=native.
#pragma once
#include <cstdint>
#include <cstring>

namespace treespec::vec_math {

#if defined(__AVX512F__)
constexpr int kLanes = 16;
#elif defined(__AVX__)
constexpr int kLanes = 8;
#else
constexpr int kLanes = 4;
#endif

typedef float vec __attribute__((vector_size(kLanes * sizeof(float))));
typedef int32_t ivec __attribute__((vector_size(kLanes * sizeof(int32_t))));

// x in every lane: a scalar minus the zero vector is one broadcast (exact: x - 0 is x, -0 included).
// Setting the lanes one by one compiled to a masked insert per lane with AVX-512, which made the
// row attention kernel about 6x slower there (and slower than torch's SDPA).
inline vec splat(float x) { return x - vec{}; }
inline vec load(const float* p) {
  vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, vec v) { std::memcpy(p, &v, sizeof v); }

// e^x for x <= 0; lanes below -87 (-inf included) give 0. Cephes' expf: x = n ln2 + r, a degree-5
// polynomial for e^r, 2^n built in the exponent bits.
inline vec vexp(vec x) {
  const vec floor_x = splat(-87.0f);
  const ivec under = x < floor_x;
  const vec xc = under ? floor_x : x;
  const ivec n = -__builtin_convertvector(0.5f - xc * 1.44269504088896341f, ivec);  // round, x <= 0
  const vec nf = __builtin_convertvector(n, vec);
  const vec r = xc - nf * 0.693359375f + nf * 2.12194440e-4f;
  const vec r2 = r * r;
  vec p = 1.9875691500e-4f * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r2 + r + 1.0f;
  const ivec bits = (n + 127) << 23;
  vec scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return under ? vec{} : p * scale;
}

}  // namespace treespec::vec_math
