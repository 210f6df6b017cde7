// Fused CPU kernels of quadrature-weighted softmax attention with an optional distance bias
// (sciattn/weighted_softmax/_cpu.py):
//
//   o_i = sum_j p_ij v_j,  p_ij = exp(s_ij - lse_i),  lse_i = log sum_j exp(s_ij),
//   s_ij = scale q_i . k_j + log w_j - lam_h d_ij,  d_ij = |p_i - p_j|   (distance term optional)
//
// Queries sit in the vector lanes: a block of QB = QV * kLanes queries is held transposed (channel-major), so a
// score tile is lane-vector += q[d]-vector * broadcast(k_j[d]) over the channels, and the softmax's row maxima,
// exponentials and sums are lane-wise (no horizontal reductions). The forward runs an online softmax over key
// blocks of KB keys (the running maximum m, the sum l and the transposed output block rescaled when m grows) and
// saves lse; nothing of size Nq * Nk is stored. The backward recomputes p from lse, per query block and key block:
//
//   dp_ij = dO_i . v_j,  ds_ij = p_ij (dp_ij - delta_i)  (delta_i = dO_i . o_i),
//   dq_i = scale sum_j ds_ij k_j,  dk_j += scale sum_i ds_ij q_i,  dv_j += sum_i p_ij dO_i,  dlogw_hj += sum_i ds_ij,
//   dlam_h = -sum ds_ij d_ij,  G_ij = -lam_h ds_ij / d_ij (0 where d_ij = 0),
//   dqpos_hi = sum_j G_ij (p_i - p_j),  dkpos_hj = -sum_i G_ij (p_i - p_j)
//
// (per head; the caller sums dlogw, dqpos, dkpos over heads and dlam over the batch). dq and the query-side sums
// accumulate in lanes; dk and dv (rows, vectorised along the channels) and the per-key sums accumulate in the
// task's own rows: one backward task per (batch, head), no atomics, the same sums in the same order on every run.
//
// Layout: q (B, H, Nq, D), k (B, H, Nk, D), v (B, H, Nk, E), out (B, H, Nq, E), all contiguous, D and E multiples
// of kLanes (the caller pads with zero channels); logw (B, Nk) (-inf on padding); qpos (B, Nq, P), kpos (B, Nk, P),
// lam (H); lse (B, H, Nq). A query without a live key gets out = 0, lse = -inf and zero gradients. One templated
// path for float and double: float64 runs the same code as float32 (the tests' oracle comparison).
#include "simd.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>
#include <torch/library.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <vector>

namespace sciattn_wsm {
namespace {

using namespace sciattn_simd;

constexpr int QV = 4;                 // query vectors per block
constexpr int64_t QB = QV * kLanes;   // queries per block
constexpr int64_t KB = 64;            // keys per block
constexpr int NKB = 4;                // keys per score micro-tile
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
// and (transposed) output o of its online softmax.
template <typename T>
struct FwdBlock {
  std::vector<V<T>> x, qpT, o;
  V<T> m[QV], l[QV];
  int64_t i0 = 0, n = 0;
};

// The online softmax step of one query block over the keys [j0, j1) (s: the block's score buffer).
template <typename T>
inline void forward_step(const Args<T>& a, int64_t b, T neg_lam, const T* vh, const T* kh, FwdBlock<T>& q, int64_t j0,
                         int64_t j1, V<T>* s) {
  const V<T> ninf = bc<T>(static_cast<T>(kNegInf));
  lane_scores(q.x.data(), kh, a.D, j0, j1, s);
  V<T> mx[QV];
  for (int c = 0; c < QV; ++c) mx[c] = q.m[c];
  add_bias(a, b, neg_lam, q.qpT.data(), j0, j1, s, static_cast<V<T>*>(nullptr), mx);
  V<T> mu[QV];
  bool grew = false;
  for (int c = 0; c < QV; ++c) {
    mu[c] = mx[c] == ninf ? V<T>{} : mx[c];  // the shift: 0 while a lane has no live key
    for (int ln = 0; ln < kLanes; ++ln) grew = grew || mx[c][ln] > q.m[c][ln];
  }
  if (grew) {
    for (int c = 0; c < QV; ++c) {
      const V<T> alpha = vexp(q.m[c] == ninf ? ninf : q.m[c] - mu[c]);
      q.l[c] *= alpha;
      for (int64_t e = 0; e < a.E; ++e) q.o[e * QV + c] *= alpha;
    }
  }
  for (int c = 0; c < QV; ++c) q.m[c] = mx[c];
  for (int64_t j = 0; j < j1 - j0; ++j)
    for (int c = 0; c < QV; ++c) {
      const V<T> p = vexp(s[j * QV + c] - mu[c]);
      s[j * QV + c] = p;
      q.l[c] += p;
    }
  lane_acc(q.o.data(), s, vh, a.E, j0, j1);
}

// Tasks are (batch, head, SB query blocks); the keys are taken in panels of KP (whose key and value rows stay in
// the core's cache while the task's query blocks pass over them), each panel in blocks of KB. Every query block
// visits the key blocks in the same order whatever the panels: the sums do not depend on them.
constexpr int64_t SB = 8;
constexpr int64_t KP = 1024;

template <typename T>
void forward_impl(const Args<T>& a, T* out, T* lse) {
  const int64_t B = a.B, H = a.H, Nq = a.Nq, Nk = a.Nk, D = a.D, E = a.E, P = a.P;
  const int64_t nsb = (Nq + SB * QB - 1) / (SB * QB);
  at::parallel_for(0, B * H * nsb, 1, [&](int64_t t0, int64_t t1) {
    std::vector<FwdBlock<T>> blocks(SB);
    for (auto& q : blocks) q.x.resize(D * QV), q.qpT.resize(std::max<int64_t>(P, 1) * QV), q.o.resize(E * QV);
    std::vector<V<T>> s(KB * QV);
    for (int64_t task = t0; task < t1; ++task) {
      const int64_t bh = task / nsb, b = bh / H, h = bh % H, first = (task % nsb) * SB * QB;
      const int64_t nb = std::min<int64_t>(SB, (Nq - first + QB - 1) / QB);
      const T *kh = a.k + bh * Nk * D, *vh = a.v + bh * Nk * E;
      const T neg_lam = a.lam ? -a.lam[h] : T(0);
      for (int64_t t = 0; t < nb; ++t) {
        FwdBlock<T>& q = blocks[t];
        q.i0 = first + t * QB;
        q.n = std::min(QB, Nq - q.i0);
        to_lanes(a.q + (bh * Nq + q.i0) * D, q.n, D, a.scale, q.x.data());
        if (a.qp) to_lanes(a.qp + (b * Nq + q.i0) * P, q.n, P, T(1), q.qpT.data());
        for (int c = 0; c < QV; ++c) q.m[c] = bc<T>(static_cast<T>(kNegInf)), q.l[c] = V<T>{};
        std::fill(q.o.begin(), q.o.end(), V<T>{});
      }
      for (int64_t p0 = 0; p0 < Nk; p0 += KP)
        for (int64_t t = 0; t < nb; ++t)
          for (int64_t j0 = p0; j0 < std::min(Nk, p0 + KP); j0 += KB)
            forward_step(a, b, neg_lam, vh, kh, blocks[t], j0, std::min(Nk, j0 + KB), s.data());
      for (int64_t t = 0; t < nb; ++t) {
        const FwdBlock<T>& q = blocks[t];
        for (int64_t i = 0; i < q.n; ++i) {
          const int c = static_cast<int>(i / kLanes), ln = static_cast<int>(i % kLanes);
          const T li = q.l[c][ln], mi = q.m[c][ln];
          T* oi = out + (bh * Nq + q.i0 + i) * E;
          if (li > T(0)) {
            const T r = T(1) / li;
            for (int64_t e = 0; e < E; ++e) oi[e] = q.o[e * QV + c][ln] * r;
            lse[bh * Nq + q.i0 + i] = mi + std::log(li);
          } else {
            std::fill(oi, oi + E, T(0));
            lse[bh * Nq + q.i0 + i] = static_cast<T>(kNegInf);
          }
        }
      }
    }
  });
}

struct Grads {
  void *dq, *dk, *dv, *dlw, *dqp, *dkp, *dlam;
};

// One block of QB queries in the backward: its scaled queries, output gradients and positions in lanes, its query
// and output-gradient rows (zero past the block's n queries), lse (+inf where p = 0: no live key, or padding) and
// delta in lanes, and its lane accumulators: dq (transposed) and dqpos = sum_j G_ij (p_i - p_j).
template <typename T>
struct BwdBlock {
  std::vector<V<T>> x, dot, qpT, dqT, gk;
  std::vector<T> qrows, drows;
  V<T> lv[QV], dl[QV];
  int64_t i0 = 0, n = 0;
};

// Per (batch, head) task: what the query blocks add to its key rows.
template <typename T>
struct KeySide {
  const T *kh, *vh, *kpb;
  T *dkh, *dvh, *dlwh, *dkph;
  T neg_lam;
  V<T> lam_acc;
};

template <typename T>
inline void backward_step(const Args<T>& a, int64_t b, KeySide<T>& ks, BwdBlock<T>& q, int64_t j0, int64_t j1,
                          V<T>* s, V<T>* ds, V<T>* dist, V<T>* red) {
  const int64_t nk = j1 - j0, D = a.D, E = a.E, P = a.P;
  const bool distance = ks.kpb != nullptr;
  lane_scores(q.x.data(), ks.kh, D, j0, j1, s);
  add_bias(a, b, ks.neg_lam, q.qpT.data(), j0, j1, s, distance ? dist : nullptr, static_cast<V<T>*>(nullptr));
  lane_scores(q.dot.data(), ks.vh, E, j0, j1, ds);  // dp
  for (int64_t j = 0; j < nk; ++j)
    for (int c = 0; c < QV; ++c) {
      const V<T> p = vexp(s[j * QV + c] - q.lv[c]);
      s[j * QV + c] = p;
      ds[j * QV + c] = p * (ds[j * QV + c] - q.dl[c]);
    }
  lane_acc(q.dqT.data(), ds, ks.kh, D, j0, j1);
  row_acc(ks.dkh, ds, q.qrows.data(), D, j0, j1);
  row_acc(ks.dvh, s, q.drows.data(), E, j0, j1);
  // Per-key sums over the block's queries (lanes), kLanes keys at a time: red holds, per key, the sum over the
  // query vectors of dS, then of G (p_i - p_j) (each coordinate); key_sums reduces kLanes of them at once.
  const int64_t nr = (nk + kLanes - 1) / kLanes * kLanes;
  V<T>*rl = red, *rq = red + KB;
  if (ks.dlwh) {
    for (int64_t j = 0; j < nk; ++j) {
      V<T> t = ds[j * QV];
      for (int c = 1; c < QV; ++c) t += ds[j * QV + c];
      rl[j] = t;
    }
    std::fill(rl + nk, rl + nr, V<T>{});
    for (int64_t g0 = 0; g0 < nk; g0 += kLanes) {
      const V<T> t = key_sums(rl + g0);
      for (int64_t l = 0; l < std::min<int64_t>(kLanes, nk - g0); ++l) ks.dlwh[j0 + g0 + l] += t[l];
    }
  }
  if (!distance) return;
  // dp_i = sum_j G_ij (p_i - p_j) and dp_j = -sum_i G_ij (p_i - p_j), from the differences themselves (not as
  // p_i sum_j G_ij - sum_j G_ij p_j, which cancels catastrophically far from the origin).
  for (int64_t j = 0; j < nk; ++j) {
    const T* kpj = ks.kpb + (j0 + j) * P;
    for (int c = 0; c < QV; ++c) {
      const V<T> dd = dist[j * QV + c], dsv = ds[j * QV + c];
      ks.lam_acc -= dsv * dd;
      V<T> gv = (ks.neg_lam * dsv) / dd;
      ds[j * QV + c] = dd > V<T>{} ? gv : V<T>{};  // G = 0 where d = 0 (and 0/0 never reaches a sum)
    }
    for (int64_t p = 0; p < P; ++p) {
      V<T> gq{};
      for (int c = 0; c < QV; ++c) {
        const V<T> gd = ds[j * QV + c] * (q.qpT[p * QV + c] - kpj[p]);
        q.gk[p * QV + c] += gd;
        gq += gd;
      }
      rq[p * KB + j] = gq;
    }
  }
  for (int64_t p = 0; p < P; ++p) std::fill(rq + p * KB + nk, rq + p * KB + nr, V<T>{});
  for (int64_t g0 = 0; g0 < nk; g0 += kLanes) {
    const int64_t cnt = std::min<int64_t>(kLanes, nk - g0);
    for (int64_t p = 0; p < P; ++p) {
      const V<T> gq = key_sums(rq + p * KB + g0);
      for (int64_t l = 0; l < cnt; ++l) ks.dkph[(j0 + g0 + l) * P + p] -= gq[l];
    }
  }
}

constexpr int64_t KPB = 512;  // keys per panel in the backward (k, v, dk, dv rows stay in the core's cache)

template <typename T>
void backward_impl(const Args<T>& a, const T* lse, const T* delta, const T* gout, const Grads& g_) {
  const int64_t B = a.B, H = a.H, Nq = a.Nq, Nk = a.Nk, D = a.D, E = a.E, P = a.P;
  T *dqp = static_cast<T*>(g_.dq), *dkp = static_cast<T*>(g_.dk), *dvp = static_cast<T*>(g_.dv);
  T *dlwp = static_cast<T*>(g_.dlw), *dqpp = static_cast<T*>(g_.dqp), *dkpp = static_cast<T*>(g_.dkp);
  T* dlamp = static_cast<T*>(g_.dlam);
  const bool distance = a.kp != nullptr;
  at::parallel_for(0, B * H, 1, [&](int64_t t0, int64_t t1) {
    const int64_t P1 = std::max<int64_t>(P, 1);
    std::vector<BwdBlock<T>> blocks(SB);
    for (auto& q : blocks) {
      q.x.resize(D * QV), q.dot.resize(E * QV), q.qpT.resize(P1 * QV), q.dqT.resize(D * QV), q.gk.resize(P1 * QV);
      q.qrows.resize(QB * D), q.drows.resize(QB * E);
    }
    std::vector<V<T>> s(KB * QV), ds(KB * QV), dist(KB * QV), red((1 + P1) * KB);
    for (int64_t bh = t0; bh < t1; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      KeySide<T> ks{a.k + bh * Nk * D, a.v + bh * Nk * E, distance ? a.kp + b * Nk * P : nullptr,
                    dkp + bh * Nk * D, dvp + bh * Nk * E, dlwp ? dlwp + bh * Nk : nullptr,
                    distance ? dkpp + bh * Nk * P : nullptr, distance ? -a.lam[h] : T(0), V<T>{}};
      for (int64_t first = 0; first < Nq; first += SB * QB) {
        const int64_t nb = std::min<int64_t>(SB, (Nq - first + QB - 1) / QB);
        for (int64_t t = 0; t < nb; ++t) {
          BwdBlock<T>& q = blocks[t];
          const int64_t i0 = q.i0 = first + t * QB, n = q.n = std::min(QB, Nq - i0);
          to_lanes(a.q + (bh * Nq + i0) * D, n, D, a.scale, q.x.data());
          to_lanes(gout + (bh * Nq + i0) * E, n, E, T(1), q.dot.data());
          if (distance) to_lanes(a.qp + (b * Nq + i0) * P, n, P, T(1), q.qpT.data());
          std::fill(q.qrows.begin(), q.qrows.end(), T(0));
          std::fill(q.drows.begin(), q.drows.end(), T(0));
          std::copy(a.q + (bh * Nq + i0) * D, a.q + (bh * Nq + i0 + n) * D, q.qrows.begin());
          std::copy(gout + (bh * Nq + i0) * E, gout + (bh * Nq + i0 + n) * E, q.drows.begin());
          for (int c = 0; c < QV; ++c)
            q.lv[c] = bc<T>(static_cast<T>(kPosInf)), q.dl[c] = V<T>{};
          for (int64_t i = 0; i < n; ++i) {
            const T li = lse[bh * Nq + i0 + i];
            if (li > static_cast<T>(kNegInf)) q.lv[i / kLanes][i % kLanes] = li;
            q.dl[i / kLanes][i % kLanes] = delta[bh * Nq + i0 + i];
          }
          std::fill(q.dqT.begin(), q.dqT.end(), V<T>{});
          std::fill(q.gk.begin(), q.gk.end(), V<T>{});
        }
        for (int64_t p0 = 0; p0 < Nk; p0 += KPB)
          for (int64_t t = 0; t < nb; ++t)
            for (int64_t j0 = p0; j0 < std::min(Nk, p0 + KPB); j0 += KB)
              backward_step(a, b, ks, blocks[t], j0, std::min(Nk, j0 + KB), s.data(), ds.data(), dist.data(),
                            red.data());
        for (int64_t t = 0; t < nb; ++t) {
          const BwdBlock<T>& q = blocks[t];
          for (int64_t i = 0; i < q.n; ++i) {
            const int c = static_cast<int>(i / kLanes), ln = static_cast<int>(i % kLanes);
            T* dqi = dqp + (bh * Nq + q.i0 + i) * D;
            for (int64_t d = 0; d < D; ++d) dqi[d] = a.scale * q.dqT[d * QV + c][ln];
            if (distance) {
              T* dpi = dqpp + (bh * Nq + q.i0 + i) * P;
              for (int64_t p = 0; p < P; ++p) dpi[p] = q.gk[p * QV + c][ln];
            }
          }
        }
      }
      for (int64_t t = 0; t < Nk * D; ++t) ks.dkh[t] *= a.scale;
      if (distance) dlamp[bh] = hsum<T>(ks.lam_acc);
    }
  });
}

template <typename T>
Args<T> args_of(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& logw,
                const c10::optional<at::Tensor>& qpos, const c10::optional<at::Tensor>& kpos,
                const c10::optional<at::Tensor>& lam, double scale) {
  const bool dist = qpos.has_value();
  return Args<T>{q.data_ptr<T>(), k.data_ptr<T>(), v.data_ptr<T>(), logw.data_ptr<T>(),
                 dist ? qpos->data_ptr<T>() : nullptr, dist ? kpos->data_ptr<T>() : nullptr,
                 dist ? lam->data_ptr<T>() : nullptr, q.size(0), q.size(1), q.size(2), k.size(2), q.size(3),
                 v.size(3), dist ? qpos->size(2) : 0, static_cast<T>(scale)};
}

void check(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& logw,
           const c10::optional<at::Tensor>& qpos, const c10::optional<at::Tensor>& kpos,
           const c10::optional<at::Tensor>& lam) {
  TORCH_CHECK(q.device().is_cpu() && k.device().is_cpu() && v.device().is_cpu() && logw.device().is_cpu(),
              "weighted_softmax cpu: expected CPU tensors, got q on ", q.device());
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && logw.dim() == 2,
              "weighted_softmax cpu: expected q, k, v (B, H, N, D) and logw (B, Nk)");
  TORCH_CHECK(q.scalar_type() == at::kFloat || q.scalar_type() == at::kDouble,
              "weighted_softmax cpu: float32 or float64, got ", q.scalar_type());
  for (const at::Tensor* t : {&q, &k, &v, &logw})
    TORCH_CHECK(t->is_contiguous() && t->scalar_type() == q.scalar_type(),
                "weighted_softmax cpu: expected contiguous q, k, v, logw of one dtype");
  TORCH_CHECK(k.size(0) == q.size(0) && v.size(0) == q.size(0) && logw.size(0) == q.size(0) &&
                  k.size(1) == q.size(1) && v.size(1) == q.size(1) && k.size(3) == q.size(3) &&
                  v.size(2) == k.size(2) && logw.size(1) == k.size(2),
              "weighted_softmax cpu: q, k, v, logw sizes do not match");
  TORCH_CHECK(q.size(3) % kLanes == 0 && v.size(3) % kLanes == 0,
              "weighted_softmax cpu: head sizes must be multiples of ", kLanes, " (pad with zero channels)");
  TORCH_CHECK(qpos.has_value() == kpos.has_value() && kpos.has_value() == lam.has_value(),
              "weighted_softmax cpu: qpos, kpos, lam together");
  if (qpos.has_value()) {
    for (const at::Tensor* t : {&*qpos, &*kpos, &*lam})
      TORCH_CHECK(t->is_contiguous() && t->scalar_type() == q.scalar_type(),
                  "weighted_softmax cpu: positions and lam contiguous, of q's dtype");
    TORCH_CHECK(qpos->dim() == 3 && kpos->dim() == 3 && qpos->size(0) == q.size(0) && qpos->size(1) == q.size(2) &&
                    kpos->size(0) == q.size(0) && kpos->size(1) == k.size(2) && kpos->size(2) == qpos->size(2) &&
                    lam->numel() == q.size(1),
                "weighted_softmax cpu: qpos (B, Nq, P), kpos (B, Nk, P), lam (H)");
  }
}

}  // namespace

void wsm_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& logw,
                 const c10::optional<at::Tensor>& qpos, const c10::optional<at::Tensor>& kpos,
                 const c10::optional<at::Tensor>& lam, double scale, const at::Tensor& out, const at::Tensor& lse) {
  check(q, k, v, logw, qpos, kpos, lam);
  TORCH_CHECK(out.is_contiguous() && lse.is_contiguous() && out.scalar_type() == q.scalar_type() &&
                  lse.scalar_type() == q.scalar_type() && out.numel() == q.size(0) * q.size(1) * q.size(2) * v.size(3) &&
                  lse.numel() == q.size(0) * q.size(1) * q.size(2),
              "weighted_softmax cpu: out (B, H, Nq, E) and lse (B, H, Nq) like q");
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "wsm_forward", [&] {
    forward_impl<scalar_t>(args_of<scalar_t>(q, k, v, logw, qpos, kpos, lam, scale), out.data_ptr<scalar_t>(),
                           lse.data_ptr<scalar_t>());
  });
}

void wsm_backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& logw,
                  const c10::optional<at::Tensor>& qpos, const c10::optional<at::Tensor>& kpos,
                  const c10::optional<at::Tensor>& lam, double scale, const at::Tensor& lse, const at::Tensor& delta,
                  const at::Tensor& gout, const at::Tensor& dq, const at::Tensor& dk, const at::Tensor& dv,
                  const c10::optional<at::Tensor>& dlogw, const c10::optional<at::Tensor>& dqpos,
                  const c10::optional<at::Tensor>& dkpos, const c10::optional<at::Tensor>& dlam) {
  check(q, k, v, logw, qpos, kpos, lam);
  for (const at::Tensor* t : {&lse, &delta, &gout, &dq, &dk, &dv})
    TORCH_CHECK(t->is_contiguous() && t->scalar_type() == q.scalar_type(), "weighted_softmax cpu: backward buffers");
  TORCH_CHECK(dq.sizes() == q.sizes() && dk.sizes() == k.sizes() && dv.sizes() == v.sizes() &&
                  gout.numel() == q.size(0) * q.size(1) * q.size(2) * v.size(3) && lse.numel() == delta.numel() &&
                  lse.numel() == q.size(0) * q.size(1) * q.size(2),
              "weighted_softmax cpu: gradient sizes");
  const int64_t B = q.size(0), H = q.size(1), Nq = q.size(2), Nk = k.size(2);
  if (dlogw.has_value())
    TORCH_CHECK(dlogw->is_contiguous() && dlogw->scalar_type() == q.scalar_type() && dlogw->numel() == B * H * Nk,
                "weighted_softmax cpu: dlogw (B, H, Nk)");
  if (qpos.has_value()) {
    const int64_t P = qpos->size(2);
    TORCH_CHECK(dqpos.has_value() && dkpos.has_value() && dlam.has_value(),
                "weighted_softmax cpu: dqpos, dkpos, dlam with the distance term");
    for (const at::Tensor* t : {&*dqpos, &*dkpos, &*dlam})
      TORCH_CHECK(t->is_contiguous() && t->scalar_type() == q.scalar_type(), "weighted_softmax cpu: position grads");
    TORCH_CHECK(dqpos->numel() == B * H * Nq * P && dkpos->numel() == B * H * Nk * P && dlam->numel() == B * H,
                "weighted_softmax cpu: dqpos (B, H, Nq, P), dkpos (B, H, Nk, P), dlam (B, H)");
  }
  auto ptr = [](const c10::optional<at::Tensor>& t) { return t.has_value() ? t->data_ptr() : nullptr; };
  const Grads g{dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), ptr(dlogw), ptr(dqpos), ptr(dkpos), ptr(dlam)};
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "wsm_backward", [&] {
    backward_impl<scalar_t>(args_of<scalar_t>(q, k, v, logw, qpos, kpos, lam, scale), lse.data_ptr<scalar_t>(),
                            delta.data_ptr<scalar_t>(), gout.data_ptr<scalar_t>(), g);
  });
}

}  // namespace sciattn_wsm

#define SCIATTN_WSM_ARGS "Tensor q, Tensor k, Tensor v, Tensor logw, Tensor? qpos, Tensor? kpos, Tensor? lam, float scale"

TORCH_LIBRARY(SCIATTN_LIBRARY, lib) {
  lib.def("wsm_forward(" SCIATTN_WSM_ARGS ", Tensor(a!) out, Tensor(b!) lse) -> ()", &sciattn_wsm::wsm_forward);
  lib.def("wsm_backward(" SCIATTN_WSM_ARGS
          ", Tensor lse, Tensor delta, Tensor gout, Tensor(a!) dq, Tensor(b!) dk, Tensor(c!) dv, Tensor(d!)? dlogw, "
          "Tensor(e!)? dqpos, Tensor(f!)? dkpos, Tensor(g!)? dlam) -> ()",
          &sciattn_wsm::wsm_backward);
}
