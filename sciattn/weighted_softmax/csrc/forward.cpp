// The forward of the weighted-softmax CPU kernels: an online softmax over key blocks per block of QB queries
// (formulas and layout: ops.cpp).
#include "lanes.h"

namespace sciattn_wsm {

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

template void forward_impl<float>(const Args<float>&, float*, float*);
template void forward_impl<double>(const Args<double>&, double*, double*);

}  // namespace sciattn_wsm
