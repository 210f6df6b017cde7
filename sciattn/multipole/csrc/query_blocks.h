// Blocks of queries for the shared-box kernel (shared_boxes.cpp): the queries of a box share every key load. Dot
// products and value sums take up to kRowQ queries of one row at a time; the key and value gradients are added to
// the box's once per kBlockQ buffered queries. Per query every sum runs in the order of the one-query loop, so
// the results do not depend on the blocking.
#pragma once

#include "vec.h"

namespace sciattn_box {

constexpr int kRowQ = 4;  // queries of one row whose dot products share every key load

// acc[j * nb + b0 + c] = sum_d x[j * xs + d] * blk[(b0 + c) * D + d] for NQ queries and NC blocks: each key vector
// loaded once for the NQ queries. Per query the sums run over d in order, as a one-query loop's.
template <typename T, int NQ, int NC>
inline void multi_block_dots(const T* __restrict x, int64_t xs, const T* __restrict blk, int64_t D, int64_t b0,
                             int64_t nb, V<T>* acc) {
  V<T> a[NQ][NC] = {};
  const T* base = blk + b0 * D * kLanes;
  for (int64_t d = 0; d < D; ++d) {
    V<T> kv[NC];
    for (int c = 0; c < NC; ++c) kv[c] = ld(base + (c * D + d) * kLanes);
    for (int j = 0; j < NQ; ++j) {
      const T xd = x[j * xs + d];
      for (int c = 0; c < NC; ++c) a[j][c] += xd * kv[c];
    }
  }
  for (int j = 0; j < NQ; ++j)
    for (int c = 0; c < NC; ++c) acc[j * nb + b0 + c] = a[j][c];
}

template <typename T, int NQ>
inline void multi_all_block_dots(const T* x, int64_t xs, const T* blk, int64_t D, int64_t nb, V<T>* acc) {
  int64_t b = 0;
  for (; b + 4 <= nb; b += 4) multi_block_dots<T, NQ, 4>(x, xs, blk, D, b, nb, acc);
  switch (nb - b) {
    case 3: multi_block_dots<T, NQ, 3>(x, xs, blk, D, b, nb, acc); break;
    case 2: multi_block_dots<T, NQ, 2>(x, xs, blk, D, b, nb, acc); break;
    case 1: multi_block_dots<T, NQ, 1>(x, xs, blk, D, b, nb, acc); break;
    default: break;
  }
}

// out[j * Dp + e] = sum_p w[j * ws + p] * rows[p * Dp + e] for NQ queries, each row loaded once for all of them;
// per query four accumulators over p (p mod 4), added as (a0 + a1) + (a2 + a3).
template <typename T, int NQ>
inline void multi_row_sums(const T* __restrict w, int64_t ws, const T* __restrict rows, int64_t P, int64_t Dp,
                           T* __restrict out) {
  for (int64_t e0 = 0; e0 < Dp; e0 += kLanes) {
    V<T> a[NQ][4] = {};
    const T* r = rows + e0;
    int64_t p = 0;
    for (; p + 4 <= P; p += 4)
      for (int u = 0; u < 4; ++u) {
        const V<T> row = ld(r + (p + u) * Dp);
        for (int j = 0; j < NQ; ++j) a[j][u] += w[j * ws + p + u] * row;
      }
    for (; p < P; ++p) {
      const V<T> row = ld(r + p * Dp);
      for (int j = 0; j < NQ; ++j) a[j][0] += w[j * ws + p] * row;
    }
    for (int j = 0; j < NQ; ++j) st(out + j * Dp + e0, (a[j][0] + a[j][1]) + (a[j][2] + a[j][3]));
  }
}

// The two helpers for a runtime count of queries (1 to kRowQ).
template <typename T>
inline void dots_n(int nq, const T* x, int64_t xs, const T* blk, int64_t D, int64_t nb, V<T>* acc) {
  switch (nq) {
    case 4: multi_all_block_dots<T, 4>(x, xs, blk, D, nb, acc); break;
    case 3: multi_all_block_dots<T, 3>(x, xs, blk, D, nb, acc); break;
    case 2: multi_all_block_dots<T, 2>(x, xs, blk, D, nb, acc); break;
    case 1: multi_all_block_dots<T, 1>(x, xs, blk, D, nb, acc); break;
    default: break;
  }
}
template <typename T>
inline void row_sums_n(int nq, const T* w, int64_t ws, const T* rows, int64_t P, int64_t Dp, T* out) {
  switch (nq) {
    case 4: multi_row_sums<T, 4>(w, ws, rows, P, Dp, out); break;
    case 3: multi_row_sums<T, 3>(w, ws, rows, P, Dp, out); break;
    case 2: multi_row_sums<T, 2>(w, ws, rows, P, Dp, out); break;
    case 1: multi_row_sums<T, 1>(w, ws, rows, P, Dp, out); break;
    default: break;
  }
}

// dK[p] += sum_j (ds_j[p] scale) q_j and dV[p] += sum_j prob_j[p] dO_j over NQ buffered queries (rows of Pp
// scores, rows of Dp channels, zero beyond D), the queries' vectors held in registers: one load and one store of
// each key's gradient rows per NQ queries, not per query. The additions run query by query, in the order of the
// unblocked loop, so the sums are the same.
template <typename T, int NQ>
inline void add_outer(T* __restrict dka, T* __restrict dva, const T* __restrict ds, const T* __restrict prob,
                      const T* __restrict qs, const T* __restrict gs, int64_t P, int64_t Pp, int64_t Dp, T scale) {
  for (int64_t e0 = 0; e0 < Dp; e0 += kLanes) {
    V<T> qv[NQ], gv[NQ];
    for (int j = 0; j < NQ; ++j) {
      qv[j] = ld(qs + j * Dp + e0);
      gv[j] = ld(gs + j * Dp + e0);
    }
    for (int64_t p = 0; p < P; ++p) {
      V<T> kacc = ld(dka + p * Dp + e0), vacc = ld(dva + p * Dp + e0);
      for (int j = 0; j < NQ; ++j) {
        const T dss = ds[j * Pp + p] * scale;
        kacc = kacc + dss * qv[j];
        vacc = vacc + prob[j * Pp + p] * gv[j];
      }
      st(dka + p * Dp + e0, kacc);
      st(dva + p * Dp + e0, vacc);
    }
  }
}

constexpr int kBlockQ = 8;  // queries whose key and value gradients are added to the box's at once

template <typename T>
inline void flush_outer(int nq, T* dka, T* dva, const T* ds, const T* prob, const T* qs, const T* gs, int64_t P,
                        int64_t Pp, int64_t Dp, T scale) {
  switch (nq) {
    case 8: add_outer<T, 8>(dka, dva, ds, prob, qs, gs, P, Pp, Dp, scale); break;
    case 7: add_outer<T, 7>(dka, dva, ds, prob, qs, gs, P, Pp, Dp, scale); break;
    case 6: add_outer<T, 6>(dka, dva, ds, prob, qs, gs, P, Pp, Dp, scale); break;
    case 5: add_outer<T, 5>(dka, dva, ds, prob, qs, gs, P, Pp, Dp, scale); break;
    case 4: add_outer<T, 4>(dka, dva, ds, prob, qs, gs, P, Pp, Dp, scale); break;
    case 3: add_outer<T, 3>(dka, dva, ds, prob, qs, gs, P, Pp, Dp, scale); break;
    case 2: add_outer<T, 2>(dka, dva, ds, prob, qs, gs, P, Pp, Dp, scale); break;
    case 1: add_outer<T, 1>(dka, dva, ds, prob, qs, gs, P, Pp, Dp, scale); break;
    default: break;
  }
}

}  // namespace sciattn_box
