// Box attention with queries in the vector lanes: the fused CPU kernel for levels whose boxes slide with the
// query (the local near field, key grids finer than about eight input cells per key cell).
//
// Along the last axis the queries are split into residue classes i2 = rho + r t (r = n2 / gcd(n2, m2)); within a
// class the box start of query t is a t + const (a = m2 / gcd), except where the domain boundary clamps the
// window. kLanes consecutive queries t0 .. t0+15 of a class form a lane set: their keys for box offset c are
// the cells a (t0 + l) + b0 + c, one vector load from a copy of the keys whose last axis is split by residue
// mod a (so consecutive lanes are consecutive entries) and padded, so a set near the boundary takes a wider
// box (its lanes' boxes are shifted by the clamp) with per-lane window weights that exclude what lies outside
// each lane's own box. Scores, softmax and the value sums are then lane-wise fused multiply-adds: no gathers,
// no masks, no key lanes wasted on padding. The relative-position bias of a lane's key at box offset c depends on
// the displacement x_i - y = (rho + 1/2) a / r - b0 - c only, the same for every lane of the set, so it is one
// value per (box row, c), added to all lanes.
#include "bias.h"
#include "kernels.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <memory>

namespace sciattn_box {
namespace {

struct LaneSet {
  int64_t rho, t0, count, b0, width, first;  // first: the set's first entry in LaneLayout's per-set tables
};

// The lane sets of one level and what depends on a set alone, computed once per call: per box offset c of each set,
// the lane-wise window weights of the last axis (w2, -inf outside each lane's box) and, with a bias, that axis'
// lower table node and the weight of the next (blo, bf; the same for every lane of the set).
template <typename T>
struct LaneLayout {
  int64_t a, r, padl, S, aS, R, M01, max_width;
  std::vector<LaneSet> sets;
  std::vector<V<T>> w2;
  std::vector<int64_t> blo;
  std::vector<T> bf;

  LaneLayout(const Level<T>& g, int64_t a_, int64_t r_, const Bias<T>& bias) : a(a_), r(r_) {
    const int64_t n2 = g.n[2], L2 = g.len[2], m2 = g.m[2];
    const int64_t* s = g.start[2];
    int64_t ymin = 0, ymax = m2 - 1;
    max_width = 0;
    for (int64_t rho = 0; rho < std::min(r, n2); ++rho) {
      const int64_t count_all = (n2 - rho + r - 1) / r;
      for (int64_t t0 = 0; t0 < count_all; t0 += kLanes) {
        const int64_t count = std::min<int64_t>(kLanes, count_all - t0);
        int64_t lo = s[rho + r * t0] - a * t0, hi = lo;
        for (int64_t l = 1; l < count; ++l) {
          const int64_t t = t0 + l, off = s[rho + r * t] - a * t;
          lo = std::min(lo, off);
          hi = std::max(hi, off);
        }
        const int64_t first = sets.empty() ? 0 : sets.back().first + sets.back().width;
        sets.push_back(LaneSet{rho, t0, count, lo, L2 + hi - lo, first});
        max_width = std::max(max_width, L2 + hi - lo);
        ymin = std::min(ymin, a * t0 + lo);
        ymax = std::max(ymax, a * (t0 + kLanes - 1) + hi + L2 - 1);
      }
    }
    padl = ymin < 0 ? (-ymin + a - 1) / a * a : 0;
    S = (ymax + padl) / a + 1;
    aS = a * S;
    R = g.len[0] * g.len[1];
    M01 = g.m[0] * g.m[1];
    const int64_t total = sets.back().first + sets.back().width;
    w2.assign(total, splat<T>(static_cast<T>(kNegInf)));
    blo.assign(total, 0);
    bf.assign(total, T(0));
    for (const LaneSet& set : sets)
      for (int64_t c = 0; c < set.width; ++c) {
        V<T>& w = w2[set.first + c];
        bool biased = false;
        for (int64_t l = 0; l < set.count; ++l) {
          const int64_t t = set.t0 + l, i2 = set.rho + r * t;
          const int64_t off = a * t + set.b0 + c - g.start[2][i2];
          if (off >= 0 && off < L2) {
            w[l] = g.logphi[2][i2 * L2 + off];
            if (bias.on() && !biased) {  // the first lane holding this key: every lane has the same displacement
              bias.last(bias.u[2][i2 * L2 + off], blo[set.first + c], bf[set.first + c]);
              biased = true;
            }
          }
        }
      }
  }
  int64_t pos(int64_t y2) const {
    const int64_t f = y2 + padl;
    return (f % a) * S + f / a;
  }
};

// Keys or values (B, H, D, Nk) into the lane layout (B, H, M01, D, aS), zero padding.
template <typename T>
void to_lanes(const T* src, std::vector<T>& dst, const LaneLayout<T>& L, int64_t BH, int64_t D, int64_t m2) {
  dst.assign(BH * L.M01 * D * L.aS, T(0));
  const int64_t Nk = L.M01 * m2;
  at::parallel_for(0, BH * L.M01, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t task = b0; task < b1; ++task) {
      const int64_t bh = task / L.M01, row = task % L.M01;
      for (int64_t d = 0; d < D; ++d) {
        const T* from = src + (bh * D + d) * Nk + row * m2;
        T* to = dst.data() + (task * D + d) * L.aS;
        if (L.a == 1) {
          std::memcpy(to + L.padl, from, sizeof(T) * m2);
        } else {
          for (int64_t y = 0; y < m2; ++y) to[L.pos(y)] = from[y];
        }
      }
    }
  });
}

// Log key weights (B, Nk) into the lane layout (B, M01, aS), -inf padding.
template <typename T>
void logw_to_lanes(const T* src, std::vector<T>& dst, const LaneLayout<T>& L, int64_t B, int64_t Nk, int64_t m2) {
  dst.assign(B * L.M01 * L.aS, static_cast<T>(kNegInf));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t row = 0; row < L.M01; ++row)
      for (int64_t y = 0; y < m2; ++y) dst[(b * L.M01 + row) * L.aS + L.pos(y)] = src[b * Nk + row * m2 + y];
}

// The keys and values of one (b, h) in the lane layout, a key row at a time, in a ring of `ring` rows (D x aS each):
// for 2-D and 1-D levels, whose query rows take the key rows [start(i), start(i) + R) with start non-decreasing, so
// query rows taken in order never need a row again once they have passed it. A row is converted when the first
// query row needs it, into the slot of the row `ring` before it (no later query row needs that one). With gradients
// the key and value gradients accumulate in the same slots and are written out when their row leaves the ring (and
// zero for rows no query needed). Instead of the whole level in the lane layout (B H M01 D aS entries, fresh memory
// on every call), the ring stays in cache.
template <typename T>
struct RowRing {
  const LaneLayout<T>& L;
  int64_t D, m2, Nk, ring, row_size;
  std::vector<T> k, v, dk, dv;
  std::vector<int64_t> held;  // per slot: its key row, -1 if none
  std::vector<char> done;     // backward: per key row, its gradients written
  int64_t next = 0;           // key rows below `next` are loaded or never needed

  RowRing(const LaneLayout<T>& L_, int64_t D_, int64_t m2_, int64_t Nk_, bool grads)
      : L(L_), D(D_), m2(m2_), Nk(Nk_), ring(L_.R), row_size(D_ * L_.aS), k(ring * row_size), v(ring * row_size),
        dk(grads ? ring * row_size : 0), dv(dk.size()), held(ring, -1), done(grads ? L_.M01 : 0, 0) {}

  void reset() {
    std::fill(held.begin(), held.end(), -1);
    std::fill(done.begin(), done.end(), 0);
    next = 0;
  }

  // row y of src (one (b, h) of (B, H, D, Nk)) into the slot at dst, zero padding
  void convert(const T* src, int64_t y, T* dst) const {
    for (int64_t d = 0; d < D; ++d) {
      T* to = dst + d * L.aS;
      const T* from = src + d * Nk + y * m2;
      std::fill(to, to + L.aS, T(0));
      if (L.a == 1) {
        std::memcpy(to + L.padl, from, sizeof(T) * m2);
      } else {
        for (int64_t y2 = 0; y2 < m2; ++y2) to[L.pos(y2)] = from[y2];
      }
    }
  }
  // the accumulated gradients of the slot's row into dkb, dvb (one (b, h) of (B, H, D, Nk))
  void write(int64_t slot, T* dkb, T* dvb) {
    const int64_t y = held[slot];
    for (int64_t d = 0; d < D; ++d) {
      const T* fk = dk.data() + slot * row_size + d * L.aS;
      const T* fv = dv.data() + slot * row_size + d * L.aS;
      T* tk = dkb + d * Nk + y * m2;
      T* tv = dvb + d * Nk + y * m2;
      for (int64_t y2 = 0; y2 < m2; ++y2) {
        tk[y2] = fk[L.pos(y2)];
        tv[y2] = fv[L.pos(y2)];
      }
    }
    done[y] = 1;
  }
  // key rows [lo, hi) loaded (rows below next are not reloaded); the backward writes out each slot's previous row
  void need(int64_t lo, int64_t hi, const T* kb, const T* vb, T* dkb, T* dvb) {
    for (int64_t y = std::max(lo, next); y < hi; ++y) {
      const int64_t slot = y % ring;
      if (dkb && held[slot] >= 0) write(slot, dkb, dvb);
      convert(kb, y, k.data() + slot * row_size);
      convert(vb, y, v.data() + slot * row_size);
      if (dkb) {
        std::fill(dk.begin() + slot * row_size, dk.begin() + (slot + 1) * row_size, T(0));
        std::fill(dv.begin() + slot * row_size, dv.begin() + (slot + 1) * row_size, T(0));
      }
      held[slot] = y;
    }
    next = std::max(next, hi);
  }
  // backward: the rows still held written out, zero gradients for the rows no query needed
  void finish(T* dkb, T* dvb) {
    for (int64_t slot = 0; slot < ring; ++slot)
      if (held[slot] >= 0) write(slot, dkb, dvb);
    for (int64_t y = 0; y < L.M01; ++y)
      if (!done[y])
        for (int64_t d = 0; d < D; ++d) {
          std::fill(dkb + d * Nk + y * m2, dkb + d * Nk + (y + 1) * m2, T(0));
          std::fill(dvb + d * Nk + y * m2, dvb + d * Nk + (y + 1) * m2, T(0));
        }
  }
};

// Query rows per task of the forward with the ring (each task converts its first rows' keys again).
constexpr int64_t kRingRows = 64;

// The ring applies to levels with one leading axis of size 1 and box starts along the other that never decrease.
template <typename T>
bool ring_applies(const Level<T>& g) {
  if (g.n[0] != 1 || g.m[0] != 1 || g.len[0] != 1) return false;
  for (int64_t i = 1; i < g.n[1]; ++i)
    if (g.start[1][i] < g.start[1][i - 1]) return false;
  return true;
}

template <typename T>
struct LaneSetData {
  std::vector<int64_t> base;  // per (row, c): offset of lane 0's key in the lane layout of one (b, h), minus row*D*aS
  std::vector<int64_t> lpos;  // per (row, c): offset of lane 0 in the log weights of one b
  const V<T>* w2;             // per c: the set's entries of LaneLayout::w2, blo, bf
  const int64_t* blo;
  const T* bf;
  std::vector<T> w01;         // per row
  std::vector<int64_t> rowid;
  // ring > 0: key rows live in a RowRing of that many slots (keys at slot * D * aS), else the whole level's layout
  void prepare(const Level<T>& g, const LaneLayout<T>& L, const LaneSet& set, int64_t i0, int64_t i1, int64_t D,
               int64_t ring = 0) {
    const int64_t W = set.width;
    base.resize(L.R * W);
    lpos.resize(L.R * W);
    w2 = L.w2.data() + set.first;
    blo = L.blo.data() + set.first;
    bf = L.bf.data() + set.first;
    w01.resize(L.R);
    rowid.resize(L.R);
    int64_t rr = 0;
    for (int64_t p0 = 0; p0 < g.len[0]; ++p0)
      for (int64_t p1 = 0; p1 < g.len[1]; ++p1, ++rr) {
        rowid[rr] = (g.start[0][i0] + p0) * g.m[1] + (g.start[1][i1] + p1);
        w01[rr] = g.logphi[0][i0 * g.len[0] + p0] + g.logphi[1][i1 * g.len[1] + p1];
      }
    for (int64_t c = 0; c < W; ++c) {
      const int64_t p = L.pos(L.a * set.t0 + set.b0 + c);
      for (rr = 0; rr < L.R; ++rr) {
        base[rr * W + c] = (ring ? rowid[rr] % ring : rowid[rr]) * D * L.aS + p;
        lpos[rr * W + c] = rowid[rr] * L.aS + p;
      }
    }
  }
};

// acc[c] = sum_d x[d] * src[base[c] + d * stride] for NC pairs, lane-wise.
template <typename T, int NC>
inline void lane_dots(const V<T>* x, const T* src, const int64_t* base, int64_t D, int64_t stride, V<T>* acc) {
  V<T> a[NC] = {};
  for (int64_t d = 0; d < D; ++d) {
    const V<T> xd = x[d];
    for (int c = 0; c < NC; ++c) a[c] += xd * ld(src + base[c] + d * stride);
  }
  for (int c = 0; c < NC; ++c) acc[c] = a[c];
}

template <typename T>
inline void all_lane_dots(const V<T>* x, const T* src, const int64_t* base, int64_t n, int64_t D, int64_t stride,
                          V<T>* acc) {
  int64_t c = 0;
  for (; c + 4 <= n; c += 4) lane_dots<T, 4>(x, src, base + c, D, stride, acc + c);
  switch (n - c) {
    case 3: lane_dots<T, 3>(x, src, base + c, D, stride, acc + c); break;
    case 2: lane_dots<T, 2>(x, src, base + c, D, stride, acc + c); break;
    case 1: lane_dots<T, 1>(x, src, base + c, D, stride, acc + c); break;
    default: break;
  }
}

// The set's queries (B, H, D, Nq) channel by channel into lanes (times `mul`), zero beyond count.
template <typename T>
inline void load_lanes(const T* src, int64_t Nq, int64_t qbase, const LaneSet& set, int64_t r, int64_t D, T mul,
                       V<T>* dst) {
  const int64_t first = qbase + set.rho + r * set.t0;
  for (int64_t d = 0; d < D; ++d) {
    const T* p = src + d * Nq + first;
    if (r == 1 && set.count == kLanes) {
      dst[d] = ld(p) * mul;
    } else {
      V<T> v{};
      for (int64_t l = 0; l < set.count; ++l) v[l] = p[r * l] * mul;
      dst[d] = v;
    }
  }
}

template <typename T>
inline void store_lanes(T* dst, int64_t Nq, int64_t qbase, const LaneSet& set, int64_t r, int64_t D, const V<T>* src) {
  const int64_t first = qbase + set.rho + r * set.t0;
  for (int64_t d = 0; d < D; ++d) {
    T* p = dst + d * Nq + first;
    if (r == 1 && set.count == kLanes) {
      st(p, src[d]);
    } else {
      for (int64_t l = 0; l < set.count; ++l) p[r * l] = src[d][l];
    }
  }
}

template <typename T>
struct Lanes {
  const T *q, *k, *v, *logw;
  int64_t B, H, D;
};

// The keys, values and log weights of a call in the lane layout: the log weights always (B M01 aS, small), the keys
// and values of the whole level only where the row ring does not apply (ring_applies).
template <typename T>
struct LaneKeys {
  std::vector<T> kt, vt, lwt;
  LaneKeys(const Lanes<T>& x, const Level<T>& g, const LaneLayout<T>& L, bool ring) {
    if (!ring) {
      to_lanes(x.k, kt, L, x.B * x.H, x.D, g.m[2]);
      to_lanes(x.v, vt, L, x.B * x.H, x.D, g.m[2]);
    }
    logw_to_lanes(x.logw, lwt, L, x.B, g.Nk, g.m[2]);
  }
};

// out[d] = sum_pc w[pc] * src[base[pc] + d * stride] lane-wise, NC channels at a time in registers.
template <typename T, int NC>
inline void lane_sums_chunk(const V<T>* w, const T* src, const int64_t* base, int64_t np, int64_t d0,
                            int64_t stride, V<T>* out) {
  V<T> a[NC] = {};
  for (int64_t pc = 0; pc < np; ++pc) {
    const V<T> wv = w[pc];
    const T* p = src + base[pc] + d0 * stride;
    for (int c = 0; c < NC; ++c) a[c] += wv * ld(p + c * stride);
  }
  for (int c = 0; c < NC; ++c) out[d0 + c] = a[c];
}

template <typename T>
inline void lane_sums(const V<T>* w, const T* src, const int64_t* base, int64_t np, int64_t D, int64_t stride,
                      V<T>* out) {
  int64_t d = 0;
  for (; d + 4 <= D; d += 4) lane_sums_chunk<T, 4>(w, src, base, np, d, stride, out);
  switch (D - d) {
    case 3: lane_sums_chunk<T, 3>(w, src, base, np, d, stride, out); break;
    case 2: lane_sums_chunk<T, 2>(w, src, base, np, d, stride, out); break;
    case 1: lane_sums_chunk<T, 1>(w, src, base, np, d, stride, out); break;
    default: break;
  }
}

// s[pc] += the relative-position bias of box row rr and offset c, tp[rr] interpolated at the set's node of c.
template <typename T>
inline void add_bias(V<T>* s, const T* tp, const LaneSetData<T>& sd, const Bias<T>& bias, int64_t R, int64_t W) {
  const int64_t K2 = bias.K[2], step = bias.step2;
  for (int64_t rr = 0; rr < R; ++rr) {
    const T* t = tp + rr * K2;
    for (int64_t c = 0; c < W; ++c) {
      const T f = sd.bf[c];
      const int64_t lo = sd.blo[c];
      s[rr * W + c] += (1 - f) * t[lo] + f * t[lo + step];
    }
  }
}

// s[pc] += logw + w01[row] + w2[c] over the set's pairs (row-major, width W); returns the lane-wise maximum.
template <typename T>
inline V<T> add_weights(V<T>* s, const T* lb, const LaneSetData<T>& sd, int64_t R, int64_t W) {
  V<T> mx = splat<T>(static_cast<T>(kNegInf));
  for (int64_t rr = 0; rr < R; ++rr) {
    const T w01 = sd.w01[rr];
    for (int64_t c = 0; c < W; ++c) {
      const int64_t pc = rr * W + c;
      const V<T> z = s[pc] + ld(lb + sd.lpos[pc]) + w01 + sd.w2[c];
      s[pc] = z;
      mx = mx > z ? mx : z;
    }
  }
  return mx;
}

template <typename T>
void forward_impl(const Lanes<T>& x, const Level<T>& g, const LaneLayout<T>& L, const Bias<T>& bias, T scale,
                  T* out, T* lse, const T* gamma) {
  const int64_t H = x.H, D = x.D, Nq = g.Nq, Nk = g.Nk, BH = x.B * H, m2 = g.m[2];
  const bool use_ring = ring_applies(g);
  const LaneKeys<T> keys(x, g, L, use_ring);
  const std::vector<T>&kt = keys.kt, &vt = keys.vt, &lwt = keys.lwt;
  const int64_t rows = g.n[0] * g.n[1];
  // with the ring, tasks of (b, h, a run of kRingRows query rows), each starting from an empty ring
  const int64_t chunk = use_ring ? std::min<int64_t>(rows, kRingRows) : 1, chunks = (rows + chunk - 1) / chunk;
  at::parallel_for(0, BH * chunks, 1, [&](int64_t begin, int64_t end) {
    LaneSetData<T> sd;
    V<T> qt[kMaxHead], o[kMaxHead];
    std::vector<V<T>> s(L.R * L.max_width);
    std::vector<T> tp(bias.on() ? L.R * bias.K[2] : 0);
    std::unique_ptr<RowRing<T>> ring(use_ring ? new RowRing<T>(L, D, m2, Nk, false) : nullptr);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t bh = task / chunks, ch = task % chunks, b = bh / H;
      if (ring) ring->reset();
      for (int64_t qr = ch * chunk; qr < std::min(rows, (ch + 1) * chunk); ++qr) {
        const int64_t i0 = qr / g.n[1], i1 = qr % g.n[1], qbase = qr * g.n[2];
        if (ring) ring->need(g.start[1][i1], g.start[1][i1] + g.len[1], x.k + bh * D * Nk, x.v + bh * D * Nk, nullptr,
                             nullptr);
        const T* kb = ring ? ring->k.data() : kt.data() + bh * L.M01 * D * L.aS;
        const T* vb = ring ? ring->v.data() : vt.data() + bh * L.M01 * D * L.aS;
        const T* lb = lwt.data() + b * L.M01 * L.aS;
        if (bias.on()) bias.rows(g, bh % H, i0, i1, tp.data());
        for (const LaneSet& set : L.sets) {
          sd.prepare(g, L, set, i0, i1, D, ring ? ring->ring : 0);
          const int64_t np = L.R * set.width;
          load_lanes(x.q + bh * D * Nq, Nq, qbase, set, L.r, D, scale, qt);
          all_lane_dots<T>(qt, kb, sd.base.data(), np, D, L.aS, s.data());
          if (bias.on()) add_bias(s.data(), tp.data(), sd, bias, L.R, set.width);
          const V<T> mx = add_weights(s.data(), lb, sd, L.R, set.width);
          const V<T> empty = mx == static_cast<T>(kNegInf) ? splat<T>(1) : V<T>{};
          const V<T> mxs = empty != T(0) ? V<T>{} : mx;
          V<T> sum{};
          for (int64_t pc = 0; pc < np; ++pc) {
            s[pc] = vexp(s[pc] - mxs);
            sum += s[pc];
          }
          lane_sums(s.data(), vb, sd.base.data(), np, D, L.aS, o);
          const V<T> inv = empty != T(0) ? V<T>{} : T(1) / (sum + empty);
          for (int64_t e = 0; e < D; ++e) o[e] *= inv;
          if (gamma) {  // accumulate: out += gamma_h A (inference; no log-sum-exp kept)
            V<T> prev[kMaxHead];
            load_lanes(out + bh * D * Nq, Nq, qbase, set, L.r, D, T(1), prev);
            for (int64_t e = 0; e < D; ++e) o[e] = prev[e] + gamma[bh % H] * o[e];
            store_lanes(out + bh * D * Nq, Nq, qbase, set, L.r, D, o);
            continue;
          }
          store_lanes(out + bh * D * Nq, Nq, qbase, set, L.r, D, o);
          V<T> l = mx;
          for (int ln = 0; ln < kLanes; ++ln)
            l[ln] = empty[ln] != T(0) ? static_cast<T>(kNegInf) : mx[ln] + std::log(sum[ln]);
          store_lanes(lse + bh * Nq, Nq, qbase, set, L.r, 1, &l);
        }
      }
    }
  });
}

template <typename T>
void backward_impl(const Lanes<T>& x, const Level<T>& g, const LaneLayout<T>& L, const Bias<T>& bias, T scale,
                   const T* out, const T* lse, const T* gout, T* dq, T* dk, T* dv, T* dlogw, T* dtable) {
  const int64_t H = x.H, D = x.D, Nq = g.Nq, Nk = g.Nk, BH = x.B * H, m2 = g.m[2];
  const bool use_ring = ring_applies(g);
  const LaneKeys<T> keys(x, g, L, use_ring);
  const std::vector<T>&kt = keys.kt, &vt = keys.vt, &lwt = keys.lwt;
  std::vector<T> dkt(kt.size(), T(0)), dvt(vt.size(), T(0));
  std::vector<T> dlwt(dlogw ? BH * L.M01 * L.aS : 0, T(0));
  const int64_t rows = g.n[0] * g.n[1], aS = L.aS;
  at::parallel_for(0, BH, 1, [&](int64_t begin, int64_t end) {
    LaneSetData<T> sd;
    V<T> qt[kMaxHead], go[kMaxHead], ot[kMaxHead], dqt[kMaxHead];
    std::vector<V<T>> s(L.R * L.max_width), ds(L.R * L.max_width);
    const int64_t K2 = bias.K[2], step = bias.step2;
    std::vector<T> tp(bias.on() ? L.R * K2 : 0), dtp(tp.size());
    std::vector<V<T>> bk(tp.size());  // per (box row, table node of the last axis): lane-wise score gradients
    std::unique_ptr<RowRing<T>> ring(use_ring ? new RowRing<T>(L, D, m2, Nk, true) : nullptr);
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t b = bh / H;
      const T* kb = ring ? ring->k.data() : kt.data() + bh * L.M01 * D * aS;
      const T* vb = ring ? ring->v.data() : vt.data() + bh * L.M01 * D * aS;
      T* dkb = ring ? ring->dk.data() : dkt.data() + bh * L.M01 * D * aS;
      T* dvb = ring ? ring->dv.data() : dvt.data() + bh * L.M01 * D * aS;
      T* dlb = dlogw ? dlwt.data() + bh * L.M01 * aS : nullptr;
      const T* lb = lwt.data() + b * L.M01 * aS;
      if (ring) ring->reset();
      for (int64_t qr = 0; qr < rows; ++qr) {
        const int64_t i0 = qr / g.n[1], i1 = qr % g.n[1], qbase = qr * g.n[2];
        if (ring)
          ring->need(g.start[1][i1], g.start[1][i1] + g.len[1], x.k + bh * D * Nk, x.v + bh * D * Nk,
                     dk + bh * D * Nk, dv + bh * D * Nk);
        if (bias.on()) {
          bias.rows(g, bh % x.H, i0, i1, tp.data());
          std::fill(bk.begin(), bk.end(), V<T>{});
        }
        for (const LaneSet& set : L.sets) {
          sd.prepare(g, L, set, i0, i1, D, ring ? ring->ring : 0);
          const int64_t np = L.R * set.width;
          load_lanes(x.q + bh * D * Nq, Nq, qbase, set, L.r, D, scale, qt);
          load_lanes(gout + bh * D * Nq, Nq, qbase, set, L.r, D, T(1), go);
          load_lanes(out + bh * D * Nq, Nq, qbase, set, L.r, D, T(1), ot);
          V<T> lsev;
          load_lanes(lse + bh * Nq, Nq, qbase, set, L.r, 1, T(1), &lsev);
          for (int64_t l = set.count; l < kLanes; ++l) lsev[l] = static_cast<T>(kNegInf);
          const V<T> lse_safe = lsev == static_cast<T>(kNegInf) ? splat<T>(std::numeric_limits<T>::infinity()) : lsev;
          V<T> di{};
          for (int64_t e = 0; e < D; ++e) di += go[e] * ot[e];
          all_lane_dots<T>(qt, kb, sd.base.data(), np, D, aS, s.data());  // scores
          if (bias.on()) add_bias(s.data(), tp.data(), sd, bias, L.R, set.width);
          add_weights(s.data(), lb, sd, L.R, set.width);
          all_lane_dots<T>(go, vb, sd.base.data(), np, D, aS, ds.data());  // dO . v
          for (int64_t pc = 0; pc < np; ++pc) {
            V<T> z = s[pc] - lse_safe;
            z = z > T(0) ? V<T>{} : z;
            s[pc] = vexp(z);                  // probabilities
            ds[pc] = s[pc] * (ds[pc] - di);  // score gradients
          }
          lane_sums(ds.data(), kb, sd.base.data(), np, D, aS, dqt);
          for (int64_t d = 0; d < D; ++d) dqt[d] *= scale;
          store_lanes(dq + bh * D * Nq, Nq, qbase, set, L.r, D, dqt);
          // dK += ds q (scaled), dV += p dO, dlogw += ds, key by key
          for (int64_t pc = 0; pc < np; ++pc) {
            const V<T> p = s[pc], dsv = ds[pc];
            const int64_t bo = sd.base[pc];
            T* __restrict dkp = dkb + bo;
            T* __restrict dvp = dvb + bo;
            for (int64_t d = 0; d < D; ++d) {
              st(dkp + d * aS, ld(dkp + d * aS) + dsv * qt[d]);
              st(dvp + d * aS, ld(dvp + d * aS) + p * go[d]);
            }
            if (dlb) st(dlb + sd.lpos[pc], ld(dlb + sd.lpos[pc]) + dsv);
          }
          if (bias.on()) {  // the table's gradient: ds at the set's nodes of the last axis, per box row
            const int64_t W = set.width;
            for (int64_t rr = 0; rr < L.R; ++rr)
              for (int64_t c = 0; c < W; ++c) {
                V<T>* bucket = bk.data() + rr * K2 + sd.blo[c];
                bucket[0] += (1 - sd.bf[c]) * ds[rr * W + c];
                bucket[step] += sd.bf[c] * ds[rr * W + c];
              }
          }
        }
        if (bias.on()) {
          for (size_t j = 0; j < bk.size(); ++j) dtp[j] = hsum<T>(bk[j]);
          bias.add_rows(g, i0, i1, dtp.data(), dtable + bh * bias.Kt);
        }
      }
      if (ring) ring->finish(dk + bh * D * Nk, dv + bh * D * Nk);
    }
  });
  if (!use_ring) at::parallel_for(0, BH * L.M01, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t task = b0; task < b1; ++task) {
      const int64_t bh = task / L.M01, row = task % L.M01;
      for (int64_t d = 0; d < D; ++d) {
        const T* fk = dkt.data() + (task * D + d) * L.aS;
        const T* fv = dvt.data() + (task * D + d) * L.aS;
        T* tk = dk + (bh * D + d) * Nk + row * m2;
        T* tv = dv + (bh * D + d) * Nk + row * m2;
        for (int64_t y = 0; y < m2; ++y) {
          tk[y] = fk[L.pos(y)];
          tv[y] = fv[L.pos(y)];
        }
      }
    }
  });
  if (dlogw)
    for (int64_t b = 0; b < x.B; ++b)
      for (int64_t row = 0; row < L.M01; ++row)
        for (int64_t y = 0; y < m2; ++y) {
          T acc = 0;
          for (int64_t h = 0; h < H; ++h) acc += dlwt[((b * H + h) * L.M01 + row) * L.aS + L.pos(y)];
          dlogw[b * Nk + row * m2 + y] = acc;
        }
}

void check_lane_strides(c10::IntArrayRef n, c10::IntArrayRef m, int64_t a, int64_t r) {
  TORCH_CHECK(a >= 1 && r >= 1 && n[2] % r == 0 && m[2] % a == 0 && n[2] / r == m[2] / a,
              "box_attention: lane strides a, r must split the last axis (n2 / r = m2 / a)");
}

}  // namespace

void lanes_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& logw,
                   c10::IntArrayRef n, c10::IntArrayRef m, at::TensorList starts, at::TensorList logphi, double scale,
                   int64_t a, int64_t r, const c10::optional<at::Tensor>& table, at::TensorList upos,
                   const at::Tensor& out, const at::Tensor& lse, const c10::optional<at::Tensor>& gamma) {
  check_forward(q, k, v, logw, n, m, starts, logphi, table, upos, out, lse, gamma);
  check_lane_strides(n, m, a, r);
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "lanes_forward", [&] {
    Level<scalar_t> g(n, m, starts, logphi);
    const Bias<scalar_t> bias(table, upos);
    LaneLayout<scalar_t> L(g, a, r, bias);
    Lanes<scalar_t> x{q.data_ptr<scalar_t>(), k.data_ptr<scalar_t>(), v.data_ptr<scalar_t>(),
                      logw.data_ptr<scalar_t>(), q.size(0), q.size(1), q.size(2)};
    forward_impl<scalar_t>(x, g, L, bias, static_cast<scalar_t>(scale), out.data_ptr<scalar_t>(),
                           lse.data_ptr<scalar_t>(), gamma.has_value() ? gamma->data_ptr<scalar_t>() : nullptr);
  });
}

void lanes_backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& logw,
                    c10::IntArrayRef n, c10::IntArrayRef m, at::TensorList starts, at::TensorList logphi,
                    double scale, int64_t a, int64_t r, const c10::optional<at::Tensor>& table, at::TensorList upos,
                    const at::Tensor& out, const at::Tensor& lse, const at::Tensor& gout, const at::Tensor& dq,
                    const at::Tensor& dk, const at::Tensor& dv, const c10::optional<at::Tensor>& dlogw,
                    const c10::optional<at::Tensor>& dtable) {
  check_backward(q, k, v, logw, n, m, starts, logphi, table, upos, out, lse, gout, dq, dk, dv, dlogw, dtable);
  check_lane_strides(n, m, a, r);
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "lanes_backward", [&] {
    Level<scalar_t> g(n, m, starts, logphi);
    const Bias<scalar_t> bias(table, upos);
    LaneLayout<scalar_t> L(g, a, r, bias);
    Lanes<scalar_t> x{q.data_ptr<scalar_t>(), k.data_ptr<scalar_t>(), v.data_ptr<scalar_t>(),
                      logw.data_ptr<scalar_t>(), q.size(0), q.size(1), q.size(2)};
    scalar_t* dl = dlogw.has_value() ? dlogw->data_ptr<scalar_t>() : nullptr;
    backward_impl<scalar_t>(x, g, L, bias, static_cast<scalar_t>(scale), out.data_ptr<scalar_t>(),
                            lse.data_ptr<scalar_t>(), gout.data_ptr<scalar_t>(), dq.data_ptr<scalar_t>(),
                            dk.data_ptr<scalar_t>(), dv.data_ptr<scalar_t>(), dl,
                            dtable.has_value() ? dtable->data_ptr<scalar_t>() : nullptr);
  });
}

}  // namespace sciattn_box
