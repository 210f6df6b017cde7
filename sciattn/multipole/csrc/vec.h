// Shared pieces of the fused CPU kernels of sciattn.multipole: the vectors of sciattn/csrc/simd.h and the
// geometry of a level (per-axis box starts and log window weights).
//
// Layout of every kernel (channels first, as the layer's projections produce them): q and out (B, H, D, Nq),
// k and v (B, H, D, Nk), log key weights (B, Nk), log-sum-exp (B, H, Nq); Nq = n0 n1 n2 and Nk = m0 m1 m2 in
// C order; unused leading axes have n = m = 1.
#pragma once

#include "simd.h"

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace sciattn_box {

using namespace sciattn_simd;

constexpr int kMaxHead = 64;  // head channels the kernels take (the layer falls back to SDPA beyond)

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
