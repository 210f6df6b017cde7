// The backward of the weighted-softmax CPU kernels: the probabilities recomputed from lse per query block and key
// block, every gradient accumulated without atomics (formulas and layout: ops.cpp).
#include "lanes.h"

namespace sciattn_wsm {

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

template void backward_impl<float>(const Args<float>&, const float*, const float*, const float*, const Grads&);
template void backward_impl<double>(const Args<double>&, const double*, const double*, const double*, const Grads&);

}  // namespace sciattn_wsm
