// The relative-position score bias inside the fused kernels (sciattn/multipole/relative_bias.py): the table
// (H, K0, K1, K2) (K_a = 1 on unused leading axes) and, per axis, the node position u of every (query, box cell)
// pair (n_a, L_a), in the layout of the box tables. The bias of a query and a box cell is the multilinear
// interpolation of the head's table at (u0, u1, u2). The kernels contract the leading axes once per query row,
// tp[(p0, p1)][k2] (rows), and interpolate the last axis per score; the table's gradient is the score gradients
// times the same hat weights (the last axis per score, the leading axes per query row, add_rows).
#pragma once

#include "kernels.h"

namespace sciattn_box {

template <typename T>
struct Bias {
  const T* table = nullptr;
  int64_t K[3] = {1, 1, 1}, Kt = 1, step2 = 0;
  const T* u[3] = {nullptr, nullptr, nullptr};

  Bias(const c10::optional<at::Tensor>& t, at::TensorList upos) {
    if (!t.has_value()) return;
    table = t->data_ptr<T>();
    for (int a = 0; a < 3; ++a) {
      K[a] = t->size(1 + a);
      u[a] = upos[a].data_ptr<T>();
    }
    Kt = K[0] * K[1] * K[2];
    step2 = K[2] > 1 ? 1 : 0;
  }
  bool on() const { return table != nullptr; }

  // Linear interpolation on K nodes at u in [0, K - 1]: the lower node lo (at most K - 2) and the weight f of lo + 1.
  static void hat(T x, int64_t K, int64_t& lo, T& f) {
    if (K == 1) {
      lo = 0;
      f = T(0);
      return;
    }
    lo = std::min<int64_t>(std::max<int64_t>(static_cast<int64_t>(std::floor(x)), 0), K - 2);
    f = x - static_cast<T>(lo);
  }

  // The last axis at node position x: lower node and weight of the next one (hi = lo + step2).
  void last(T x, int64_t& lo, T& f) const { hat(x, K[2], lo, f); }

  // The four corners of the leading axes' interpolation for box row (p0, p1) of query row (i0, i1): weights and
  // offsets of the table rows (K2 values each) within one head's (K0, K1, K2) table.
  void corners(const Level<T>& g, int64_t i0, int64_t i1, int64_t p0, int64_t p1, T w[4], int64_t at[4]) const {
    int64_t lo0, lo1;
    T f0, f1;
    hat(u[0][i0 * g.len[0] + p0], K[0], lo0, f0);
    hat(u[1][i1 * g.len[1] + p1], K[1], lo1, f1);
    const int64_t hi0 = lo0 + (K[0] > 1 ? 1 : 0), hi1 = lo1 + (K[1] > 1 ? 1 : 0);
    w[0] = (1 - f0) * (1 - f1);
    w[1] = (1 - f0) * f1;
    w[2] = f0 * (1 - f1);
    w[3] = f0 * f1;
    at[0] = (lo0 * K[1] + lo1) * K[2];
    at[1] = (lo0 * K[1] + hi1) * K[2];
    at[2] = (hi0 * K[1] + lo1) * K[2];
    at[3] = (hi0 * K[1] + hi1) * K[2];
  }

  // tp (L0 L1, K2): head h's table with the leading axes interpolated for query row (i0, i1), per box row.
  void rows(const Level<T>& g, int64_t h, int64_t i0, int64_t i1, T* tp) const {
    const int64_t K2 = K[2];
    const T* th = table + h * Kt;
    T w[4];
    int64_t at[4];
    for (int64_t p0 = 0, rr = 0; p0 < g.len[0]; ++p0)
      for (int64_t p1 = 0; p1 < g.len[1]; ++p1, ++rr) {
        corners(g, i0, i1, p0, p1, w, at);
        T* out = tp + rr * K2;
        for (int64_t k = 0; k < K2; ++k)
          out[k] = w[0] * th[at[0] + k] + w[1] * th[at[1] + k] + w[2] * th[at[2] + k] + w[3] * th[at[3] + k];
      }
  }

  // dt (K0, K1, K2) += the leading axes' hat weights of query row (i0, i1) times dtp (L0 L1, K2).
  void add_rows(const Level<T>& g, int64_t i0, int64_t i1, const T* dtp, T* dt) const {
    const int64_t K2 = K[2];
    T w[4];
    int64_t at[4];
    for (int64_t p0 = 0, rr = 0; p0 < g.len[0]; ++p0)
      for (int64_t p1 = 0; p1 < g.len[1]; ++p1, ++rr) {
        corners(g, i0, i1, p0, p1, w, at);
        const T* src = dtp + rr * K2;
        for (int c = 0; c < 4; ++c)
          if (w[c] != T(0))
            for (int64_t k = 0; k < K2; ++k) dt[at[c] + k] += w[c] * src[k];
      }
  }
};

}  // namespace sciattn_box
