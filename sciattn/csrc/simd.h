// Fixed-width vectors shared by the fused CPU kernels of sciattn (GCC/Clang vector extensions: kLanes values are
// one 512-bit register of floats, or two 256-bit ones where the CPU has no AVX-512), unaligned loads and stores,
// a vectorised exponential and horizontal reductions.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

namespace sciattn_simd {

constexpr int kLanes = 16;

template <typename T>
struct VecT {
  typedef T type __attribute__((vector_size(kLanes * sizeof(T))));
};
template <typename T>
using V = typename VecT<T>::type;
using VI = VecT<int32_t>::type;

// Unaligned loads and stores through a vector type of the element type (not memcpy, which may alias
// anything and would make the compiler reload every size and pointer after each store).
template <typename T>
struct VecU {
  typedef T type __attribute__((vector_size(kLanes * sizeof(T)), aligned(alignof(T))));
};
template <typename T>
inline V<T> ld(const T* p) {
  return *reinterpret_cast<const typename VecU<T>::type*>(p);
}
template <typename T>
inline void st(T* p, const V<T>& v) {
  *reinterpret_cast<typename VecU<T>::type*>(p) = v;
}
template <typename T>
inline V<T> splat(T x) {
  return x - V<T>{};  // x − 0 is x for every x (−0 and NaN included), so this folds to a broadcast; 0 + x does not
}

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// exp lane by lane, exactly 0 below the float range (and for -inf). float: Cody-Waite reduction and the
// degree-6 polynomial of Cephes' expf (within 2 ulp); double: the C library (tests and oracles run in float64).
inline V<float> vexp(V<float> x) {
  const V<float> xc = x < -87.0f ? splat(-87.0f) : x;
  const V<float> t = xc * 1.44269504088896341f + 0.5f;
  VI n = __builtin_convertvector(t, VI);
  n = n + (__builtin_convertvector(n, V<float>) > t);  // truncation to floor: -1 where it rounded up
  const V<float> nf = __builtin_convertvector(n, V<float>);
  V<float> r = xc - nf * 0.693359375f;
  r = r - nf * -2.12194440e-4f;
  const V<float> r2 = r * r;
  V<float> y = r * 1.9875691500e-4f + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * r2 + r + 1.0f;
  const V<float> scale = (V<float>)((n + 127) << 23);
  return x < -87.0f ? V<float>{} : y * scale;
}
inline V<double> vexp(V<double> x) {
  V<double> r;
  for (int l = 0; l < kLanes; ++l) r[l] = std::exp(x[l]);
  return r;
}

template <typename T>
inline T hmax(const V<T>& v) {
  T m = v[0];
  for (int l = 1; l < kLanes; ++l) m = v[l] > m ? v[l] : m;
  return m;
}
template <typename T>
inline T hsum(const V<T>& v) {
  T s = 0;
  for (int l = 0; l < kLanes; ++l) s += v[l];
  return s;
}

// Horizontal sums of kLanes vectors at once, by a transposing tree of shuffles (15 combines instead of kLanes
// horizontal sums): lane l of transpose_sum(p) is the sum of p[l]'s lanes (p is overwritten).
using VF = V<float>;

// z lanes: the pairwise half-block sums of x's blocks, then y's (blocks of width 2W -> W). The masks are
// compile-time constants once the loop is unrolled.
template <int W>
inline VF combine(const VF& x, const VF& y) {
  VI lo, hi;
  for (int l = 0; l < kLanes; ++l) {
    const int blk = l / W, r = l % W, nb = kLanes / (2 * W);  // nb blocks per source vector
    const int src = (blk < nb ? 0 : kLanes) + (blk % nb) * 2 * W + r;
    lo[l] = src;
    hi[l] = src + W;
  }
  return __builtin_shuffle(x, y, lo) + __builtin_shuffle(x, y, hi);
}

// out lane l = the sum of p[l]'s lanes.
inline VF transpose_sum(VF* p) {
  for (int i = 0; i < 8; ++i) p[i] = combine<8>(p[2 * i], p[2 * i + 1]);
  for (int i = 0; i < 4; ++i) p[i] = combine<4>(p[2 * i], p[2 * i + 1]);
  for (int i = 0; i < 2; ++i) p[i] = combine<2>(p[2 * i], p[2 * i + 1]);
  return combine<1>(p[0], p[1]);
}

}  // namespace sciattn_simd
