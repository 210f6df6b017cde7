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
// task, so no two tasks write one gradient. With the relative-position bias each query's bias row over the box is
// interpolated from the head's table contracted over the leading axes for its row (bias.h), at the last axis' node
// of each box cell; the box's cells are then numbered with the last axis outermost (Box), so a bias row is two
// lane-wise multiply-adds per last-axis cell and the gradient accumulates lane-wise per (table node, box row).
#include "bias.h"
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
  // f(i0, i1) for every query row of group r (the leading axes' runs r[0], r[1]), in order
  template <typename F>
  void for_rows(const int64_t r[3], F f) const {
    for (int64_t i0 = begin[0][r[0]]; i0 < begin[0][r[0] + 1]; ++i0)
      for (int64_t i1 = begin[1][r[1]]; i1 < begin[1][r[1] + 1]; ++i1) f(i0, i1);
  }
};

// One box for one (batch, head): keys transposed in blocks (kt[blk][d][lane]), keys and values row-major (kr for
// the backward; vr), the transposed values (vt, backward), the key cells' log weights, the row base (logw + w0 +
// w1) and the last axis' window weights of each query of the run, -inf on the padding. The box cells are numbered
// with the last axis innermost, p = (p0 L1 + p1) L2 + p2, or, with a bias, outermost, p = p2 L01 + (p0 L1 + p1):
// then one query's bias over a run of L01 cells is the row table tpt (nodes x rows, rows padded to L01p with zeros)
// at one node pair of the last axis, a few lane-wise multiply-adds, and so is its gradient.
template <typename T>
struct Box {
  int64_t P, Pp, nb, D, Dp;
  bool p2major;
  int64_t L01, L01p, L2, K2;
  std::vector<int64_t> cell;
  std::vector<T> kt, kr, vr, vt, lw, base, w2;
  std::vector<int64_t> blo;  // with a bias, per query of the run and last-axis cell: the lower table node
  std::vector<T> bfw;        // and the weight of the next node
  Box(const Level<T>& g, const Runs& runs, int64_t D_, bool backward, const Bias<T>& bias)
      : P(g.P), Pp((g.P + kLanes - 1) / kLanes * kLanes), nb(Pp / kLanes), D(D_),
        Dp((D_ + kLanes - 1) / kLanes * kLanes), p2major(bias.on()), L01(g.len[0] * g.len[1]),
        L01p((L01 + kLanes - 1) / kLanes * kLanes), L2(g.len[2]), K2(bias.K[2]), cell(P), kt(Pp * D_, T(0)),
        kr(backward ? P * Dp : 0, T(0)), vr(P * Dp, T(0)), vt(backward ? Pp * D_ : 0, T(0)), lw(P), base(Pp, T(0)),
        w2(runs.max2 * Pp), blo(p2major ? runs.max2 * L2 : 0), bfw(blo.size()) {}

  // (p0 L1 + p1, p2) of box cell p
  int64_t row_of(int64_t p) const { return p2major ? p % L01 : p / L2; }
  int64_t last_of(int64_t p) const { return p2major ? p / L01 : p % L2; }

  void load(const Level<T>& g, const Runs& runs, const int64_t r[3], const T* k, const T* v, const T* logw,
            const Bias<T>& bias) {
    const int64_t s0 = g.start[0][runs.begin[0][r[0]]], s1 = g.start[1][runs.begin[1][r[1]]],
                  s2 = g.start[2][runs.begin[2][r[2]]];
    int64_t p = 0;
    for (p = 0; p < P; ++p) {
      const int64_t ab = row_of(p), c = last_of(p), a = ab / g.len[1], b = ab % g.len[1];
      cell[p] = ((s0 + a) * g.m[1] + (s1 + b)) * g.m[2] + (s2 + c);
    }
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
      for (p = 0; p < P; ++p) row[p] = w[last_of(p)];
      for (; p < Pp; ++p) row[p] = static_cast<T>(kNegInf);
      if (p2major)
        for (int64_t c = 0; c < l2; ++c)
          bias.last(bias.u[2][i2 * l2 + c], blo[(i2 - b2) * l2 + c], bfw[(i2 - b2) * l2 + c]);
    }
  }

  // With a bias: head h's table interpolated for query row (i0, i1) (tp, Bias::rows) and transposed into tpt.
  void bias_rows(const Bias<T>& bias, const Level<T>& g, int64_t h, int64_t i0, int64_t i1, T* tp, T* tpt) const {
    if (!bias.on()) return;
    bias.rows(g, h, i0, i1, tp);
    transpose_rows(tp, tpt);
  }

  // tpt (K2, L01p) = tp (L01, K2) transposed, zero on the padding rows.
  void transpose_rows(const T* tp, T* tpt) const {
    for (int64_t k = 0; k < K2; ++k)
      for (int64_t i = 0; i < L01p; ++i) tpt[k * L01p + i] = i < L01 ? tp[i * K2 + k] : T(0);
  }

  // dst[p] = the bias of the run's query j over the box (0 on the padding) from the row table tpt. dst holds
  // Pp + kLanes values: whole vectors are stored per last-axis cell, lanes past L01 are 0 and the next cell's
  // store overwrites them.
  void bias_row(const Bias<T>& bias, int64_t j, const T* tpt, T* dst) const {
    const int64_t* lo = blo.data() + j * L2;
    const T* f = bfw.data() + j * L2;
    for (int64_t c = 0; c < L2; ++c) {
      const T* t0 = tpt + lo[c] * L01p;
      const T* t1 = tpt + (lo[c] + bias.step2) * L01p;
      for (int64_t i = 0; i < L01; i += kLanes)
        st(dst + c * L01 + i, (1 - f[c]) * ld(t0 + i) + f[c] * ld(t1 + i));
    }
  }

  // gt (K2, L01p) += the hat weights of bias_row times the run's query j's score gradients ds (readable to
  // P + kLanes and finite: lanes past L01 add into gt's padding, which is never read).
  void bias_grad(const Bias<T>& bias, int64_t j, const T* ds, T* gt) const {
    const int64_t* lo = blo.data() + j * L2;
    const T* f = bfw.data() + j * L2;
    for (int64_t c = 0; c < L2; ++c) {
      T* g0 = gt + lo[c] * L01p;
      T* g1 = gt + (lo[c] + bias.step2) * L01p;
      for (int64_t i = 0; i < L01; i += kLanes) {
        const V<T> d = ld(ds + c * L01 + i);
        st(g0 + i, ld(g0 + i) + (1 - f[c]) * d);
        st(g1 + i, ld(g1 + i) + f[c] * d);
      }
    }
  }

  // dtp (L01, K2) = gt transposed; gt zeroed.
  void untranspose_grad(T* gt, T* dtp) const {
    for (int64_t i = 0; i < L01; ++i)
      for (int64_t k = 0; k < K2; ++k) dtp[i * K2 + k] = gt[k * L01p + i];
    std::fill(gt, gt + K2 * L01p, T(0));
  }

  // A query row (i0, i1) of head h begins: its row base and, with a bias, its row table (bias_rows).
  void start_row(const Level<T>& g, const Bias<T>& bias, int64_t h, int64_t i0, int64_t i1, T* tp, T* tpt) {
    row_base(g, i0, i1);
    bias_rows(bias, g, h, i0, i1, tp, tpt);
  }

  void row_base(const Level<T>& g, int64_t i0, int64_t i1) {
    const T* w0 = g.logphi[0] + i0 * g.len[0];
    const T* w1 = g.logphi[1] + i1 * g.len[1];
    for (int64_t p = 0; p < P; ++p) {
      const int64_t ab = row_of(p);
      base[p] = lw[p] + (w0[ab / g.len[1]] + w1[ab % g.len[1]]);
    }
  }
};

template <typename T>
struct Tensors {
  const T *q, *k, *v, *logw;
  int64_t B, H, D;
};

template <typename T>
void forward_impl(const Tensors<T>& x, const Level<T>& g, const Bias<T>& bias, T scale, T* out, T* lse,
                  const T* gamma) {
  const int64_t H = x.H, D = x.D, Nq = g.Nq, Nk = g.Nk;
  const Runs runs(g);
  const int64_t groups = runs.groups();
  at::parallel_for(0, x.B * H * groups, 1, [&](int64_t begin, int64_t end) {
    Box<T> box(g, runs, D, false, bias);
    const int64_t Pp = box.Pp, nb = box.nb;
    std::vector<T> o(kRowQ * box.Dp), qsc(kRowQ * D), S(kRowQ * Pp);
    std::vector<T> tp(bias.on() ? box.L01 * box.K2 : 0), tpt(bias.on() ? box.K2 * box.L01p : 0),
        brow(bias.on() ? kRowQ * Pp + kLanes : 0, T(0));
    std::vector<V<T>> acc(kRowQ * nb);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t bh = task / groups, grp = task % groups, b = bh / H;
      const int64_t r[3] = {grp / (runs.count[1] * runs.count[2]), grp / runs.count[2] % runs.count[1],
                            grp % runs.count[2]};
      box.load(g, runs, r, x.k + bh * D * Nk, x.v + bh * D * Nk, x.logw + b * Nk, bias);
      const T* qb = x.q + bh * D * Nq;
      T* ob = out + bh * D * Nq;
      T* lb = lse + bh * Nq;
      const int64_t b2 = runs.begin[2][r[2]], e2 = runs.begin[2][r[2] + 1];
      runs.for_rows(r, [&](int64_t i0, int64_t i1) {
        box.start_row(g, bias, bh % H, i0, i1, tp.data(), tpt.data());
        const int64_t row0 = (i0 * g.n[1] + i1) * g.n[2];
        for (int64_t j2 = b2; j2 < e2; j2 += kRowQ) {  // kRowQ queries of the row at a time
          const int nq = static_cast<int>(std::min<int64_t>(kRowQ, e2 - j2));
          if (bias.on())
            for (int j = 0; j < nq; ++j) box.bias_row(bias, j2 + j - b2, tpt.data(), brow.data() + j * Pp);
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
              V<T> z = acc[j * nb + bb] + ld(box.base.data() + bb * kLanes) + ld(w2row + bb * kLanes);
              if (bias.on()) z += ld(brow.data() + j * Pp + bb * kLanes);
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
      });
    }
  });
}

template <typename T>
void backward_impl(const Tensors<T>& x, const Level<T>& g, const Bias<T>& bias, T scale, const T* out,
                   const T* lse, const T* gout, T* dq, T* dk, T* dv, T* dlogw, T* dtable) {
  static_assert(kBlockQ == 8 && kBlockQ % kRowQ == 0, "flush_outer handles blocks of up to 8 queries");
  const int64_t H = x.H, D = x.D, Nq = g.Nq, Nk = g.Nk, B = x.B;
  const Runs runs(g);
  std::vector<T> dlw(dlogw ? B * H * Nk : 0, T(0));  // per (batch, head), summed over the heads afterwards
  at::parallel_for(0, B * H, 1, [&](int64_t begin, int64_t end) {
    Box<T> box(g, runs, D, true, bias);
    const int64_t P = box.P, Pp = box.Pp, nb = box.nb;
    const int64_t Dp = box.Dp;
    // per buffered query: probabilities and score gradients (Pp), its query and output gradient (Dp, zero beyond D)
    std::vector<T> prob(kBlockQ * Pp), ds(kBlockQ * Pp + kLanes, T(0)), dkb(P * Dp), dvb(P * Dp), dlb(Pp),
        gq(kRowQ * Dp), gos(kBlockQ * Dp, T(0)), qrows(kBlockQ * Dp, T(0)), qsc(kRowQ * D);
    std::vector<V<T>> sacc(kRowQ * nb), dacc(kRowQ * nb);
    std::vector<T> tp(bias.on() ? box.L01 * box.K2 : 0), dtp(tp.size()), tpt(bias.on() ? box.K2 * box.L01p : 0),
        gt(tpt.size(), T(0)), brow(bias.on() ? Pp + kLanes : 0, T(0));
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
        box.load(g, runs, r, x.k + bh * D * Nk, x.v + bh * D * Nk, x.logw + b * Nk, bias);
        std::fill(dkb.begin(), dkb.end(), T(0));
        std::fill(dvb.begin(), dvb.end(), T(0));
        std::fill(dlb.begin(), dlb.end(), T(0));
        int nq = 0;
        const int64_t b2 = runs.begin[2][r[2]], e2 = runs.begin[2][r[2] + 1];
        runs.for_rows(r, [&](int64_t i0, int64_t i1) {
          box.start_row(g, bias, bh % H, i0, i1, tp.data(), tpt.data());
          const int64_t row0 = (i0 * g.n[1] + i1) * g.n[2];
          for (int64_t j2 = b2; j2 < e2; j2 += kRowQ) {  // kRowQ queries of the row at a time
            const int64_t cnt = std::min<int64_t>(kRowQ, e2 - j2);
            if (nq + kRowQ > kBlockQ) {
              flush_outer<T>(nq, dkb.data(), dvb.data(), ds.data(), prob.data(), qrows.data(), gos.data(), P, Pp,
                             Dp, scale);
              nq = 0;
            }
            int nl = 0;  // live queries (with an admissible key), in slots nq .. nq + nl - 1
            int64_t iqs[kRowQ], runj[kRowQ];
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
              runj[nl] = i2 - b2;
              ++nl;
            }
            if (!nl) continue;
            dots_n<T>(nl, qsc.data(), D, box.kt.data(), D, nb, sacc.data());                 // scores
            dots_n<T>(nl, gos.data() + nq * Dp, Dp, box.vt.data(), D, nb, dacc.data());  // dO . v_p
            for (int j = 0; j < nl; ++j) {
              T* pq = prob.data() + (nq + j) * Pp;
              T* dsq = ds.data() + (nq + j) * Pp;
              if (bias.on()) box.bias_row(bias, runj[j], tpt.data(), brow.data());
              for (int64_t bb = 0; bb < nb; ++bb) {
                V<T> sc = sacc[j * nb + bb] + ld(box.base.data() + bb * kLanes) + ld(w2rows[j] + bb * kLanes);
                if (bias.on()) sc += ld(brow.data() + bb * kLanes);
                V<T> z = sc - ls[j];
                z = z > T(0) ? V<T>{} : z;
                const V<T> pv = vexp(z);
                const V<T> dsv = pv * (dacc[j * nb + bb] - dis[j]);
                st(pq + bb * kLanes, pv);
                st(dsq + bb * kLanes, dsv);
                st(dlb.data() + bb * kLanes, ld(dlb.data() + bb * kLanes) + dsv);
              }
              if (bias.on()) box.bias_grad(bias, runj[j], dsq, gt.data());
            }
            row_sums_n<T>(nl, ds.data() + nq * Pp, Pp, box.kr.data(), P, Dp, gq.data());
            for (int j = 0; j < nl; ++j)
              for (int64_t d = 0; d < D; ++d) dqb[d * Nq + iqs[j]] = gq[j * Dp + d] * scale;
            nq += nl;
          }
          if (bias.on()) {  // the row's table gradient, through the leading axes' hat weights
            box.untranspose_grad(gt.data(), dtp.data());
            bias.add_rows(g, i0, i1, dtp.data(), dtable + bh * bias.Kt);
          }
        });
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
                   const c10::optional<at::Tensor>& table, at::TensorList upos, const at::Tensor& out,
                   const at::Tensor& lse, const c10::optional<at::Tensor>& gamma) {
  check_forward(q, k, v, logw, n, m, starts, logphi, table, upos, out, lse, gamma);
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "boxes_forward", [&] {
    Level<scalar_t> g(n, m, starts, logphi);
    const Bias<scalar_t> bias(table, upos);
    Tensors<scalar_t> x{q.data_ptr<scalar_t>(), k.data_ptr<scalar_t>(), v.data_ptr<scalar_t>(),
                        logw.data_ptr<scalar_t>(), q.size(0), q.size(1), q.size(2)};
    forward_impl<scalar_t>(x, g, bias, static_cast<scalar_t>(scale), out.data_ptr<scalar_t>(), lse.data_ptr<scalar_t>(),
                           gamma.has_value() ? gamma->data_ptr<scalar_t>() : nullptr);
  });
}

void boxes_backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& logw,
                    c10::IntArrayRef n, c10::IntArrayRef m, at::TensorList starts, at::TensorList logphi,
                    double scale, const c10::optional<at::Tensor>& table, at::TensorList upos, const at::Tensor& out,
                    const at::Tensor& lse, const at::Tensor& gout, const at::Tensor& dq, const at::Tensor& dk,
                    const at::Tensor& dv, const c10::optional<at::Tensor>& dlogw,
                    const c10::optional<at::Tensor>& dtable) {
  check_backward(q, k, v, logw, n, m, starts, logphi, table, upos, out, lse, gout, dq, dk, dv, dlogw, dtable);
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "boxes_backward", [&] {
    Level<scalar_t> g(n, m, starts, logphi);
    const Bias<scalar_t> bias(table, upos);
    Tensors<scalar_t> x{q.data_ptr<scalar_t>(), k.data_ptr<scalar_t>(), v.data_ptr<scalar_t>(),
                        logw.data_ptr<scalar_t>(), q.size(0), q.size(1), q.size(2)};
    scalar_t* dl = dlogw.has_value() ? dlogw->data_ptr<scalar_t>() : nullptr;
    backward_impl<scalar_t>(x, g, bias, static_cast<scalar_t>(scale), out.data_ptr<scalar_t>(),
                            lse.data_ptr<scalar_t>(), gout.data_ptr<scalar_t>(), dq.data_ptr<scalar_t>(),
                            dk.data_ptr<scalar_t>(), dv.data_ptr<scalar_t>(), dl,
                            dtable.has_value() ? dtable->data_ptr<scalar_t>() : nullptr);
  });
}

}  // namespace sciattn_box
