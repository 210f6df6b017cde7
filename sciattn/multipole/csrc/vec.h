// Shared pieces of the fused CPU kernels of sciattn.multipole: fixed-width vectors (GCC/Clang vector
// extensions: kLanes floats are one 512-bit register, or two 256-bit ones where the CPU has no AVX-512),
// a vectorised exponential, and the geometry of a level (per-axis box starts and log window weights).
//
// Layout of every kernel (channels first, as the layer's projections produce them): q and out (B, H, D, Nq),
// k and v (B, H, D, Nk), log key weights (B, Nk), log-sum-exp (B, H, Nq); Nq = n0 n1 n2 and Nk = m0 m1 m2 in
// C order; unused leading axes have n = m = 1.
#pragma once

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace sciattn_box {

constexpr int kLanes = 16;
constexpr int kMaxHead = 64;  // head channels the kernels take (the layer falls back to SDPA beyond)

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
  return V<T>{} + x;
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

// One level: query grid n, key grid m, per axis the box start of every query coordinate and the log window
// weights (n_a, L_a) of the box's cells (sciattn/multipole/geometry.py).
template <typename T>
struct Level {
  int64_t n[3], m[3], len[3];
  const int64_t* start[3];
  const T* logphi[3];
  int64_t Nq, Nk, P;
  Level(c10::IntArrayRef n_, c10::IntArrayRef m_, at::TensorList starts, at::TensorList lphi) {
    P = 1;
    for (int a = 0; a < 3; ++a) {
      n[a] = n_[a];
      m[a] = m_[a];
      len[a] = lphi[a].size(1);
      start[a] = starts[a].data_ptr<int64_t>();
      logphi[a] = lphi[a].data_ptr<T>();
      P *= len[a];
    }
    Nq = n[0] * n[1] * n[2];
    Nk = m[0] * m[1] * m[2];
  }
};

}  // namespace sciattn_box
