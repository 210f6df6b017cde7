// Box attention with keys in the vector lanes: the fused CPU kernel for levels whose boxes are shared by runs
// of queries (key cells holding many input cells, the global level, sizes with no lane structure).
//
// Queries with the same box start on every axis share the box, gathered once per (batch, head, box) with its
// keys transposed into blocks of kLanes keys. The scores of one query are kLanes-wide fused multiply-adds over
// the head channels (up to four blocks in flight, so no accumulator waits on the previous one); the softmax
// runs on whole blocks (the last axis' window weights are padded with -inf, so padding lanes drop out), and
// the value sum keeps four accumulators over the keys. The backward recomputes the scores from the saved
// log-sum-exp (as flash attention does), accumulates the box's key, value and log-weight gradients (the key and
// value rows once per block of eight queries) and adds them into place after the box; one (batch, head) pair per
// task, so no two tasks write one gradient.
#include "kernels.h"
#include "query_blocks.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>


namespace sciattn_box {
namespace {

struct Runs {
  std::vector<int64_t> begin[3];  // per axis: query runs with one box start, [begin[r], begin[r + 1])
  int64_t count[3], max2;
  template <typename T>
  explicit Runs(const Level<T>& g) {
    max2 = 0;
    for (int a = 0; a < 3; ++a) {
      for (int64_t i = 0; i < g.n[a]; ++i)
        if (i == 0 || g.start[a][i] != g.start[a][i - 1]) begin[a].push_back(i);
      begin[a].push_back(g.n[a]);
      count[a] = static_cast<int64_t>(begin[a].size()) - 1;
    }
    for (int64_t r = 0; r < count[2]; ++r) max2 = std::max(max2, begin[2][r + 1] - begin[2][r]);
  }
  int64_t groups() const { return count[0] * count[1] * count[2]; }
};

// One box for one (batch, head): keys transposed in blocks (kt[blk][d][lane]), keys and values row-major (kr for
// the backward; vr), the transposed values (vt, backward), the key cells' log weights, the row base (logw + w0 +
// w1) and the last axis' window weights of each query of the run, -inf on the padding.
template <typename T>
struct Box {
  int64_t P, Pp, nb, D, Dp;
  std::vector<int64_t> cell;
  std::vector<T> kt, kr, vr, vt, lw, base, w2;
  Box(const Level<T>& g, const Runs& runs, int64_t D_, bool backward)
      : P(g.P), Pp((g.P + kLanes - 1) / kLanes * kLanes), nb(Pp / kLanes), D(D_),
        Dp((D_ + kLanes - 1) / kLanes * kLanes), cell(P), kt(Pp * D_, T(0)), kr(backward ? P * Dp : 0, T(0)),
        vr(P * Dp, T(0)), vt(backward ? Pp * D_ : 0, T(0)), lw(P), base(Pp, T(0)), w2(runs.max2 * Pp) {}

  void load(const Level<T>& g, const Runs& runs, const int64_t r[3], const T* k, const T* v, const T* logw) {
    const int64_t s0 = g.start[0][runs.begin[0][r[0]]], s1 = g.start[1][runs.begin[1][r[1]]],
                  s2 = g.start[2][runs.begin[2][r[2]]];
    int64_t p = 0;
    for (int64_t a = 0; a < g.len[0]; ++a)
      for (int64_t b = 0; b < g.len[1]; ++b)
        for (int64_t c = 0; c < g.len[2]; ++c, ++p) cell[p] = ((s0 + a) * g.m[1] + (s1 + b)) * g.m[2] + (s2 + c);
    for (p = 0; p < P; ++p) {
      const int64_t y = cell[p];
      T* kb = kt.data() + (p / kLanes) * D * kLanes + p % kLanes;
      for (int64_t d = 0; d < D; ++d) {
        const T kv = k[d * g.Nk + y], vv = v[d * g.Nk + y];
        kb[d * kLanes] = kv;
        vr[p * Dp + d] = vv;
        if (!kr.empty()) {
          kr[p * Dp + d] = kv;
          vt[(p / kLanes) * D * kLanes + d * kLanes + p % kLanes] = vv;
        }
      }
      lw[p] = logw[y];
    }
    const int64_t l2 = g.len[2], b2 = runs.begin[2][r[2]], e2 = runs.begin[2][r[2] + 1];
    for (int64_t i2 = b2; i2 < e2; ++i2) {
      T* row = w2.data() + (i2 - b2) * Pp;
      const T* w = g.logphi[2] + i2 * l2;
      for (p = 0; p < P; ++p) row[p] = w[p % l2];
      for (; p < Pp; ++p) row[p] = static_cast<T>(kNegInf);
    }
  }

  void row_base(const Level<T>& g, int64_t i0, int64_t i1) {
    const T* w0 = g.logphi[0] + i0 * g.len[0];
    const T* w1 = g.logphi[1] + i1 * g.len[1];
    int64_t p = 0;
    for (int64_t a = 0; a < g.len[0]; ++a)
      for (int64_t b = 0; b < g.len[1]; ++b) {
        const T w = w0[a] + w1[b];
        for (int64_t c = 0; c < g.len[2]; ++c, ++p) base[p] = lw[p] + w;
      }
  }
};

template <typename T>
struct Tensors {
  const T *q, *k, *v, *logw;
  int64_t B, H, D;
};

template <typename T>
void forward_impl(const Tensors<T>& x, const Level<T>& g, T scale, T* out, T* lse, const T* gamma) {
  const int64_t H = x.H, D = x.D, Nq = g.Nq, Nk = g.Nk;
  const Runs runs(g);
  const int64_t groups = runs.groups();
  at::parallel_for(0, x.B * H * groups, 1, [&](int64_t begin, int64_t end) {
    Box<T> box(g, runs, D, false);
    const int64_t Pp = box.Pp, nb = box.nb;
    std::vector<T> o(kRowQ * box.Dp), qsc(kRowQ * D), S(kRowQ * Pp);
    std::vector<V<T>> acc(kRowQ * nb);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t bh = task / groups, grp = task % groups, b = bh / H;
      const int64_t r[3] = {grp / (runs.count[1] * runs.count[2]), grp / runs.count[2] % runs.count[1],
                            grp % runs.count[2]};
      box.load(g, runs, r, x.k + bh * D * Nk, x.v + bh * D * Nk, x.logw + b * Nk);
      const T* qb = x.q + bh * D * Nq;
      T* ob = out + bh * D * Nq;
      T* lb = lse + bh * Nq;
      const int64_t b2 = runs.begin[2][r[2]], e2 = runs.begin[2][r[2] + 1];
      for (int64_t i0 = runs.begin[0][r[0]]; i0 < runs.begin[0][r[0] + 1]; ++i0)
        for (int64_t i1 = runs.begin[1][r[1]]; i1 < runs.begin[1][r[1] + 1]; ++i1) {
          box.row_base(g, i0, i1);
          const int64_t row0 = (i0 * g.n[1] + i1) * g.n[2];
          for (int64_t j2 = b2; j2 < e2; j2 += kRowQ) {  // kRowQ queries of the row at a time
            const int nq = static_cast<int>(std::min<int64_t>(kRowQ, e2 - j2));
            const int64_t iq0 = row0 + j2;
            for (int j = 0; j < nq; ++j)
              for (int64_t d = 0; d < D; ++d) qsc[j * D + d] = qb[d * Nq + iq0 + j] * scale;
            dots_n<T>(nq, qsc.data(), D, box.kt.data(), D, nb, acc.data());
            bool empty[kRowQ];
            T total[kRowQ], mxs[kRowQ];
            for (int j = 0; j < nq; ++j) {
              const T* w2row = box.w2.data() + (j2 + j - b2) * Pp;
              T* sj = S.data() + j * Pp;
              V<T> mv = splat<T>(static_cast<T>(kNegInf));
              for (int64_t bb = 0; bb < nb; ++bb) {
                const V<T> z = acc[j * nb + bb] + ld(box.base.data() + bb * kLanes) + ld(w2row + bb * kLanes);
                st(sj + bb * kLanes, z);
                mv = mv > z ? mv : z;
              }
              const T mx = hmax<T>(mv);
              mxs[j] = mx;
              empty[j] = mx == static_cast<T>(kNegInf);
              V<T> sum{};
              for (int64_t bb = 0; bb < nb; ++bb) {
                const V<T> e = empty[j] ? V<T>{} : vexp(ld(sj + bb * kLanes) - mx);
                st(sj + bb * kLanes, e);
                sum += e;
              }
              total[j] = hsum<T>(sum);
            }
            row_sums_n<T>(nq, S.data(), Pp, box.vr.data(), box.P, box.Dp, o.data());
            for (int j = 0; j < nq; ++j) {
              const int64_t iq = iq0 + j;
              const T* oj = o.data() + j * box.Dp;
              if (empty[j]) {
                if (!gamma) {
                  for (int64_t e = 0; e < D; ++e) ob[e * Nq + iq] = 0;
                  lb[iq] = mxs[j];
                }
                continue;
              }
              const T inv = T(1) / total[j];
              if (gamma) {  // accumulate: out += gamma_h A (inference; no log-sum-exp kept)
                const T gh = gamma[bh % H] * inv;
                for (int64_t e = 0; e < D; ++e) ob[e * Nq + iq] += oj[e] * gh;
                continue;
              }
              for (int64_t e = 0; e < D; ++e) ob[e * Nq + iq] = oj[e] * inv;
              lb[iq] = mxs[j] + std::log(total[j]);
            }
          }
        }
    }
  });
}

template <typename T>
void backward_impl(const Tensors<T>& x, const Level<T>& g, T scale, const T* out, const T* lse, const T* gout,
                   T* dq, T* dk, T* dv, T* dlogw) {
  static_assert(kBlockQ == 8 && kBlockQ % kRowQ == 0, "flush_outer handles blocks of up to 8 queries");
  const int64_t H = x.H, D = x.D, Nq = g.Nq, Nk = g.Nk, B = x.B;
  const Runs runs(g);
  std::vector<T> dlw(dlogw ? B * H * Nk : 0, T(0));  // per (batch, head), summed over the heads afterwards
  at::parallel_for(0, B * H, 1, [&](int64_t begin, int64_t end) {
    Box<T> box(g, runs, D, true);
    const int64_t P = box.P, Pp = box.Pp, nb = box.nb;
    const int64_t Dp = box.Dp;
    // per buffered query: probabilities and score gradients (Pp), its query and output gradient (Dp, zero beyond D)
    std::vector<T> prob(kBlockQ * Pp), ds(kBlockQ * Pp), dkb(P * Dp), dvb(P * Dp), dlb(Pp), gq(kRowQ * Dp),
        gos(kBlockQ * Dp, T(0)), qrows(kBlockQ * Dp, T(0)), qsc(kRowQ * D);
    std::vector<V<T>> sacc(kRowQ * nb), dacc(kRowQ * nb);
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t b = bh / H;
      const T* qb = x.q + bh * D * Nq;
      const T* ob = out + bh * D * Nq;
      const T* gb = gout + bh * D * Nq;
      T* dqb = dq + bh * D * Nq;
      const T* lb = lse + bh * Nq;
      for (int64_t grp = 0; grp < runs.groups(); ++grp) {
        const int64_t r[3] = {grp / (runs.count[1] * runs.count[2]), grp / runs.count[2] % runs.count[1],
                              grp % runs.count[2]};
        box.load(g, runs, r, x.k + bh * D * Nk, x.v + bh * D * Nk, x.logw + b * Nk);
        std::fill(dkb.begin(), dkb.end(), T(0));
        std::fill(dvb.begin(), dvb.end(), T(0));
        std::fill(dlb.begin(), dlb.end(), T(0));
        int nq = 0;
        const int64_t b2 = runs.begin[2][r[2]], e2 = runs.begin[2][r[2] + 1];
        for (int64_t i0 = runs.begin[0][r[0]]; i0 < runs.begin[0][r[0] + 1]; ++i0)
          for (int64_t i1 = runs.begin[1][r[1]]; i1 < runs.begin[1][r[1] + 1]; ++i1) {
            box.row_base(g, i0, i1);
            const int64_t row0 = (i0 * g.n[1] + i1) * g.n[2];
            for (int64_t j2 = b2; j2 < e2; j2 += kRowQ) {  // kRowQ queries of the row at a time
              const int64_t cnt = std::min<int64_t>(kRowQ, e2 - j2);
              if (nq + kRowQ > kBlockQ) {
                flush_outer<T>(nq, dkb.data(), dvb.data(), ds.data(), prob.data(), qrows.data(), gos.data(), P, Pp,
                               Dp, scale);
                nq = 0;
              }
              int nl = 0;  // live queries (with an admissible key), in slots nq .. nq + nl - 1
              int64_t iqs[kRowQ];
              T ls[kRowQ], dis[kRowQ];
              const T* w2rows[kRowQ];
              for (int64_t i2 = j2; i2 < j2 + cnt; ++i2) {
                const int64_t iq = row0 + i2;
                const T l = lb[iq];
                if (l == static_cast<T>(kNegInf)) {
                  for (int64_t d = 0; d < D; ++d) dqb[d * Nq + iq] = 0;
                  continue;
                }
                T* go = gos.data() + (nq + nl) * Dp;
                T* qrow = qrows.data() + (nq + nl) * Dp;
                T di = 0;
                for (int64_t e = 0; e < D; ++e) {
                  go[e] = gb[e * Nq + iq];
                  qrow[e] = qb[e * Nq + iq];
                  qsc[nl * D + e] = qrow[e] * scale;
                  di += go[e] * ob[e * Nq + iq];
                }
                iqs[nl] = iq;
                ls[nl] = l;
                dis[nl] = di;
                w2rows[nl] = box.w2.data() + (i2 - b2) * Pp;
                ++nl;
              }
              if (!nl) continue;
              dots_n<T>(nl, qsc.data(), D, box.kt.data(), D, nb, sacc.data());                 // scores
              dots_n<T>(nl, gos.data() + nq * Dp, Dp, box.vt.data(), D, nb, dacc.data());  // dO . v_p
              for (int j = 0; j < nl; ++j) {
                T* pq = prob.data() + (nq + j) * Pp;
                T* dsq = ds.data() + (nq + j) * Pp;
                for (int64_t bb = 0; bb < nb; ++bb) {
                  const V<T> sc = sacc[j * nb + bb] + ld(box.base.data() + bb * kLanes) + ld(w2rows[j] + bb * kLanes);
                  V<T> z = sc - ls[j];
                  z = z > T(0) ? V<T>{} : z;
                  const V<T> pv = vexp(z);
                  const V<T> dsv = pv * (dacc[j * nb + bb] - dis[j]);
                  st(pq + bb * kLanes, pv);
                  st(dsq + bb * kLanes, dsv);
                  st(dlb.data() + bb * kLanes, ld(dlb.data() + bb * kLanes) + dsv);
                }
              }
              row_sums_n<T>(nl, ds.data() + nq * Pp, Pp, box.kr.data(), P, Dp, gq.data());
              for (int j = 0; j < nl; ++j)
                for (int64_t d = 0; d < D; ++d) dqb[d * Nq + iqs[j]] = gq[j * Dp + d] * scale;
              nq += nl;
            }
          }
        flush_outer<T>(nq, dkb.data(), dvb.data(), ds.data(), prob.data(), qrows.data(), gos.data(), P, Pp, Dp,
                       scale);
        T* dkh = dk + bh * D * Nk;
        T* dvh = dv + bh * D * Nk;
        for (int64_t p = 0; p < P; ++p) {
          const int64_t y = box.cell[p];
          for (int64_t d = 0; d < D; ++d) {
            dkh[d * Nk + y] += dkb[p * Dp + d];
            dvh[d * Nk + y] += dvb[p * Dp + d];
          }
          if (dlogw) dlw[bh * Nk + y] += dlb[p];
        }
      }
    }
  });
  if (dlogw)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t j = 0; j < Nk; ++j) dlogw[b * Nk + j] += dlw[(b * H + h) * Nk + j];
}

}  // namespace

void boxes_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& logw,
                   c10::IntArrayRef n, c10::IntArrayRef m, at::TensorList starts, at::TensorList logphi, double scale,
                   const at::Tensor& out, const at::Tensor& lse, const c10::optional<at::Tensor>& gamma) {
  check_inputs(q, k, v, logw, n, m, starts, logphi);
  check_outputs(q, out, lse);
  check_gamma(q, gamma);
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "boxes_forward", [&] {
    Level<scalar_t> g(n, m, starts, logphi);
    Tensors<scalar_t> x{q.data_ptr<scalar_t>(), k.data_ptr<scalar_t>(), v.data_ptr<scalar_t>(),
                        logw.data_ptr<scalar_t>(), q.size(0), q.size(1), q.size(2)};
    forward_impl<scalar_t>(x, g, static_cast<scalar_t>(scale), out.data_ptr<scalar_t>(), lse.data_ptr<scalar_t>(),
                           gamma.has_value() ? gamma->data_ptr<scalar_t>() : nullptr);
  });
}

void boxes_backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& logw,
                    c10::IntArrayRef n, c10::IntArrayRef m, at::TensorList starts, at::TensorList logphi,
                    double scale, const at::Tensor& out, const at::Tensor& lse, const at::Tensor& gout,
                    const at::Tensor& dq, const at::Tensor& dk, const at::Tensor& dv,
                    const c10::optional<at::Tensor>& dlogw) {
  check_inputs(q, k, v, logw, n, m, starts, logphi);
  check_outputs(q, out, lse);
  check_gradients(q, k, v, logw, gout, dq, dk, dv, dlogw);
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "boxes_backward", [&] {
    Level<scalar_t> g(n, m, starts, logphi);
    Tensors<scalar_t> x{q.data_ptr<scalar_t>(), k.data_ptr<scalar_t>(), v.data_ptr<scalar_t>(),
                        logw.data_ptr<scalar_t>(), q.size(0), q.size(1), q.size(2)};
    scalar_t* dl = dlogw.has_value() ? dlogw->data_ptr<scalar_t>() : nullptr;
    backward_impl<scalar_t>(x, g, static_cast<scalar_t>(scale), out.data_ptr<scalar_t>(), lse.data_ptr<scalar_t>(),
                            gout.data_ptr<scalar_t>(), dq.data_ptr<scalar_t>(), dk.data_ptr<scalar_t>(),
                            dv.data_ptr<scalar_t>(), dl);
  });
}

}  // namespace sciattn_box
