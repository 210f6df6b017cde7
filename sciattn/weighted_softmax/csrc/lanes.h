// Shared by the weighted-softmax CPU kernels (forward.cpp, backward.cpp, ops.cpp): the block sizes, the inputs'
// view, and the micro-kernels over a block of QB queries held in the vector lanes (see ops.cpp for the formulas).
#pragma once

#include "simd.h"

#include <ATen/Parallel.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace sciattn_wsm {

using namespace sciattn_simd;

constexpr int QV = 4;                 // query vectors per block
constexpr int64_t QB = QV * kLanes;   // queries per block
constexpr int64_t KB = 64;            // keys per block
constexpr int NKB = 4;                // keys per score micro-tile
constexpr int64_t SB = 8;             // query blocks per pass over a panel of keys
constexpr double kPosInf = std::numeric_limits<double>::infinity();

// x in every lane. Written as x - 0 (exact for every x, -0 included), which the compiler folds into a broadcast
// operand of the consuming instruction; simd.h's splat (0 + x, not an identity at x = -0) costs an add and a
// register broadcast per use.
template <typename T>
inline V<T> bc(T x) {
  return x - V<T>{};
}

// A vector the micro-kernels reuse across several fused multiply-adds, pinned in a register: left to itself the
// compiler folds its load into every one of them, and the loads (one 512-bit load per cycle) become the limit.
inline V<float> in_reg(V<float> x) {
#if defined(__x86_64__) && defined(__AVX512F__)
  asm("" : "+v"(x));
#endif
  return x;
}
inline V<double> in_reg(V<double> x) {
  return x;
}

// Lane l = the sum of p[l]'s lanes, for kLanes vectors (simd.h's transposing tree of shuffles for float).
inline V<float> key_sums(const V<float>* p) {
  V<float> t[kLanes];
  for (int l = 0; l < kLanes; ++l) t[l] = p[l];
  return transpose_sum(t);
}
inline V<double> key_sums(const V<double>* p) {
  V<double> r;
  for (int l = 0; l < kLanes; ++l) r[l] = hsum<double>(p[l]);
  return r;
}

// sqrt lane by lane (the vector instruction where there is one; the C library's otherwise: correctly rounded).
inline V<double> vsqrt(V<double> x) {
  V<double> r;
  for (int l = 0; l < kLanes; ++l) r[l] = std::sqrt(x[l]);
  return r;
}
inline V<float> vsqrt(V<float> x) {
#if defined(__AVX512F__)
  return (V<float>)_mm512_sqrt_ps((__m512)x);
#else
  V<float> r;
  for (int l = 0; l < kLanes; ++l) r[l] = std::sqrt(x[l]);
  return r;
#endif
}

template <typename T>
struct Args {
  const T *q, *k, *v, *lw, *qp, *kp, *lam;  // qp, kp, lam null without the distance term
  int64_t B, H, Nq, Nk, D, E, P;
  T scale;
};

// dst[w * QV + c] lane l = src[(c * kLanes + l) * W + w] * mul for the block's n rows, 0 past them.
template <typename T>
void to_lanes(const T* src, int64_t n, int64_t W, T mul, V<T>* dst) {
  std::fill(dst, dst + W * QV, V<T>{});
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = i / kLanes, l = i % kLanes;
    for (int64_t w = 0; w < W; ++w) dst[w * QV + c][l] = src[i * W + w] * mul;
  }
}

// s[(j - j0) * QV + c] = sum_w x[w * QV + c] * y[j * W + w] for keys j in [j0, j1).
template <typename T>
inline void lane_scores(const V<T>* x, const T* y, int64_t W, int64_t j0, int64_t j1, V<T>* s) {
  for (int64_t j = j0; j < j1; j += NKB) {
    const T* yr[NKB];
    for (int n = 0; n < NKB; ++n) yr[n] = y + std::min<int64_t>(j + n, j1 - 1) * W;
    V<T> a[NKB][QV] = {};
    for (int64_t w = 0; w < W; ++w) {
      V<T> xw[QV];
      for (int c = 0; c < QV; ++c) xw[c] = in_reg(x[w * QV + c]);
      for (int n = 0; n < NKB; ++n) {
        const V<T> b = bc<T>(yr[n][w]);
        for (int c = 0; c < QV; ++c) a[n][c] += xw[c] * b;
      }
    }
    for (int n = 0; n < NKB && j + n < j1; ++n)
      for (int c = 0; c < QV; ++c) s[(j - j0 + n) * QV + c] = a[n][c];
  }
}

// s += log w_j - lam d_ij over the key block (d_ij into dist when given); returns the lane-wise maxima in mx.
template <typename T>
inline void add_bias(const Args<T>& a, int64_t b, T neg_lam, const V<T>* qpT, int64_t j0, int64_t j1, V<T>* s,
                     V<T>* dist, V<T>* mx) {
  const T* lw = a.lw + b * a.Nk;
  const T* kp = a.kp ? a.kp + b * a.Nk * a.P : nullptr;
  for (int64_t j = j0; j < j1; ++j) {
    const T w = lw[j];
    for (int c = 0; c < QV; ++c) {
      V<T> z = s[(j - j0) * QV + c] + w;
      if (kp) {
        V<T> d2{};
        for (int64_t p = 0; p < a.P; ++p) {
          const V<T> df = qpT[p * QV + c] - kp[j * a.P + p];
          d2 += df * df;
        }
        const V<T> dd = vsqrt(d2);
        if (dist) dist[(j - j0) * QV + c] = dd;
        z += neg_lam * dd;
      }
      s[(j - j0) * QV + c] = z;
      if (mx) mx[c] = mx[c] > z ? mx[c] : z;
    }
  }
}

// acc[w * QV + c] += sum_j coef[(j - j0) * QV + c] * y[j * W + w] for w in [w0, w0 + NW).
template <typename T, int NW>
inline void lane_acc_chunk(V<T>* acc, const V<T>* coef, const T* y, int64_t W, int64_t w0, int64_t j0, int64_t j1) {
  V<T> a[NW][QV];
  for (int n = 0; n < NW; ++n)
    for (int c = 0; c < QV; ++c) a[n][c] = acc[(w0 + n) * QV + c];
  for (int64_t j = j0; j < j1; ++j) {
    V<T> p[QV];
    for (int c = 0; c < QV; ++c) p[c] = in_reg(coef[(j - j0) * QV + c]);
    const T* yr = y + j * W + w0;
    for (int n = 0; n < NW; ++n) {
      const V<T> bv = bc<T>(yr[n]);
      for (int c = 0; c < QV; ++c) a[n][c] += p[c] * bv;
    }
  }
  for (int n = 0; n < NW; ++n)
    for (int c = 0; c < QV; ++c) acc[(w0 + n) * QV + c] = a[n][c];
}

template <typename T>
inline void lane_acc(V<T>* acc, const V<T>* coef, const T* y, int64_t W, int64_t j0, int64_t j1) {
  int64_t w = 0;
  for (; w + 4 <= W; w += 4) lane_acc_chunk<T, 4>(acc, coef, y, W, w, j0, j1);
  switch (W - w) {
    case 3: lane_acc_chunk<T, 3>(acc, coef, y, W, w, j0, j1); break;
    case 2: lane_acc_chunk<T, 2>(acc, coef, y, W, w, j0, j1); break;
    case 1: lane_acc_chunk<T, 1>(acc, coef, y, W, w, j0, j1); break;
    default: break;
  }
}

// y[j * W + w] += sum_{i < QB} coef_(j, i) x[i * W + w] for NJ keys from j, channel vectors [v0, v0 + NV).
template <typename T, int NJ, int NV>
inline void row_acc_chunk(T* y, const T* coef, const T* x, int64_t W, int64_t j, int64_t j0, int64_t v0) {
  V<T> a[NJ][NV] = {};
  for (int64_t i = 0; i < QB; ++i) {
    V<T> xv[NV];
    for (int n = 0; n < NV; ++n) xv[n] = in_reg(ld(x + i * W + (v0 + n) * kLanes));
    for (int m = 0; m < NJ; ++m) {
      const V<T> cv = bc<T>(coef[(j + m - j0) * QB + i]);
      for (int n = 0; n < NV; ++n) a[m][n] += cv * xv[n];
    }
  }
  for (int m = 0; m < NJ; ++m)
    for (int n = 0; n < NV; ++n) {
      T* p = y + (j + m) * W + (v0 + n) * kLanes;
      st(p, ld(p) + a[m][n]);
    }
}

template <typename T, int NJ>
inline void row_acc_keys(T* y, const T* coef, const T* x, int64_t W, int64_t j, int64_t j0) {
  const int64_t nv = W / kLanes;
  int64_t v = 0;
  for (; v + 2 <= nv; v += 2) row_acc_chunk<T, NJ, 2>(y, coef, x, W, j, j0, v);
  if (v < nv) row_acc_chunk<T, NJ, 1>(y, coef, x, W, j, j0, v);
}

// Rows y_j (width W) += sum_i coef_ji x_i over the key block, coef the block's tile (key-major, query lanes).
template <typename T>
inline void row_acc(T* y, const V<T>* coef, const T* x, int64_t W, int64_t j0, int64_t j1) {
  const T* cf = reinterpret_cast<const T*>(coef);
  int64_t j = j0;
  for (; j + 4 <= j1; j += 4) row_acc_keys<T, 4>(y, cf, x, W, j, j0);
  switch (j1 - j) {
    case 3: row_acc_keys<T, 3>(y, cf, x, W, j, j0); break;
    case 2: row_acc_keys<T, 2>(y, cf, x, W, j, j0); break;
    case 1: row_acc_keys<T, 1>(y, cf, x, W, j, j0); break;
    default: break;
  }
}

// One block of QB queries in the forward: its scaled queries and positions in lanes, the running maximum m, sum l

struct Grads {
  void *dq, *dk, *dv, *dlw, *dqp, *dkp, *dlam;
};

// One block of QB queries in the backward: its scaled queries, output gradients and positions in lanes, its query
// and output-gradient rows (zero past the block's n queries), lse (+inf where p = 0: no live key, or padding) and
// delta in lanes, and its lane accumulators: dq (transposed) and dqpos = sum_j G_ij (p_i - p_j).

template <typename T>
void forward_impl(const Args<T>& a, T* out, T* lse);
template <typename T>
void backward_impl(const Args<T>& a, const T* lse, const T* delta, const T* gout, const Grads& g);

}  // namespace sciattn_wsm
