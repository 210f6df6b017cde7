// Fused CPU kernels of the elementwise steps of Galerkin attention's chunked backend (sciattn/galerkin/_cpu.py):
// per chunk of key or value rows x (B, H, c, F), one pass that reads a row once and writes what the chunk's matrix
// products (BLAS, in Python) need.
//
// gal_features:  y_j = w_j · LN(x̃_j)    with x̃_j = x_j where keep_j, else 0 (NaN-poisoned padding never read),
//   LN(x)_f = γ_f (x_f − μ) r + β_f for f < Dn,  LN(x)_f = x_f for f ≥ Dn,
//   μ = mean_{f<Dn} x_f,  r = 1 / sqrt(mean_{f<Dn} (x_f − μ)² + eps)
//   (no LayerNorm: LN(x) = x; no w: w_j = 1).
// gal_features_backward, from dy_j = ∂L/∂LN(x̃_j) · (given) and the same x, keep, w:
//   g_j = w_j dy_j;  dw_j += Σ_{h,f} dy_j · LN(x̃_j)  (before the × w_j);
//   dγ_f += Σ g_f x̂_f, dβ_f += Σ g_f  (x̂ = (x − μ) r);
//   dx_f = r (γ_f g_f − mean_{f'<Dn}(γ g) − x̂_f mean_{f'<Dn}(γ g x̂))  for f < Dn,  dx_f = g_f for f ≥ Dn;
//   padded rows (keep_j false) get dx_j = 0.
// These are the formulas of chunked.py's _features/_layer_norm/_layer_norm_backward, in the same order of
// operations per row (so float64 agrees with the reference to round-off). Sums over rows (dγ, dβ, dw over heads)
// go through per-(batch, head) partial buffers reduced in a fixed order: no atomics, the same result on every run.
//
// Layout: x, y, dy, dx (B, H, c, F), any strides with unit stride along F; keep (B, c) bool and w (B, c) any
// strides; γ, β (H, Dn); dγ, dβ (H, Dn) contiguous; dw (B, c) any strides. float32 and float64 (one template).
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "simd.h"

namespace sciattn_gal {
namespace {

using sciattn_simd::hsum;
using sciattn_simd::kLanes;
using sciattn_simd::ld;
using sciattn_simd::st;
using sciattn_simd::V;

struct Rows {  // a (B, H, c, F) tensor with unit stride along F
  int64_t s0, s1, s2;
  template <typename T>
  static Rows of(const at::Tensor& t) {
    TORCH_CHECK(t.dim() == 4 && (t.stride(3) == 1 || t.size(3) == 1),
                "galerkin cpu: expected a (B, H, c, F) tensor with unit stride along F, got strides ", t.strides());
    return Rows{t.stride(0), t.stride(1), t.stride(2)};
  }
  int64_t at(int64_t b, int64_t h, int64_t j) const { return b * s0 + h * s1 + j * s2; }
};

// Row loops vectorised along the features: fn(V<T>{}, f) on kLanes features at a time, then fn(T{}, f) on the
// tail (the same expression for both: GCC/Clang vectors take scalar operands).
template <typename U, typename T>
inline U load(const T* p) {
  if constexpr (std::is_same<U, T>::value)
    return *p;
  else
    return ld(p);
}
template <typename T>
inline void put(T* p, T v) {
  *p = v;
}
template <typename T>
inline void put(T* p, const V<T>& v) {
  st(p, v);
}
template <typename T, typename Fn>
inline void each(int64_t lo, int64_t hi, Fn fn) {
  int64_t f = lo;
  for (; f + kLanes <= hi; f += kLanes) fn(V<T>{}, f);
  for (; f < hi; ++f) fn(T{}, f);
}
// A row's sum as a vector of partial sums and a scalar tail; kRows rows' sums are reduced together.
template <typename T>
struct Part {
  V<T> v;
  T s;
};
template <typename T, typename Fn>
inline Part<T> partial(int64_t lo, int64_t hi, Fn fn) {
  int64_t f = lo;
  Part<T> a{V<T>{}, T(0)};
  for (; f + kLanes <= hi; f += kLanes) a.v += fn(V<T>{}, f);
  for (; f < hi; ++f) a.s += fn(T{}, f);
  return a;
}

constexpr int kRows = kLanes;  // rows per block: one horizontal reduction per block of rows

// out[r] = the sum of row r's partial sums (r < nb; p.v is overwritten): by a transposing tree of shuffles for float, the lanes in
// order for double (the tests' oracle precision).
template <typename T>
struct Parts {  // kRows rows' partial sums (vectors and tails kept apart: no 64-byte reload of a 4-byte store)
  V<T> v[kRows];
  T s[kRows];
  void set(int r, const Part<T>& p) {
    v[r] = p.v;
    s[r] = p.s;
  }
};

inline void row_sums(Parts<float>& p, int nb, float* out) {
  for (int r = nb; r < kRows; ++r) p.v[r] = V<float>{};
  const V<float> t = sciattn_simd::transpose_sum(p.v);
  for (int r = 0; r < nb; ++r) out[r] = t[r] + p.s[r];
}
inline void row_sums(Parts<double>& p, int nb, double* out) {
  for (int r = 0; r < nb; ++r) out[r] = hsum<double>(p.v[r]) + p.s[r];
}

// The mean and reciprocal standard deviation of x_r[0:Dn] for the block's rows.
template <typename T>
inline void block_stats(const T* const* x, int nb, int64_t Dn, T eps, T* mu, T* rs) {
  Parts<T> p;
  for (int r = 0; r < nb; ++r) p.set(r, partial<T>(0, Dn, [&](auto z, int64_t f) { return load<decltype(z)>(x[r] + f); }));
  row_sums(p, nb, mu);
  for (int r = 0; r < nb; ++r) {
    mu[r] /= T(Dn);
    p.set(r, partial<T>(0, Dn, [&](auto z, int64_t f) {
      const auto c = load<decltype(z)>(x[r] + f) - mu[r];
      return c * c;
    }));
  }
  row_sums(p, nb, rs);
  for (int r = 0; r < nb; ++r) rs[r] = T(1) / std::sqrt(rs[r] / T(Dn) + eps);
}

struct Common {
  int64_t B, H, c, F, Dn;
  const bool* keep;
  int64_t ks0, ks1;
  bool ln;
};

Common common(const at::Tensor& x, const c10::optional<at::Tensor>& keep, const c10::optional<at::Tensor>& w,
              const c10::optional<at::Tensor>& gamma, const c10::optional<at::Tensor>& beta) {
  TORCH_CHECK(x.device().is_cpu() && x.dim() == 4, "galerkin cpu: expected a CPU tensor x (B, H, c, F)");
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble,
              "galerkin cpu: float32 or float64, got ", x.scalar_type());
  Common cm{x.size(0), x.size(1), x.size(2), x.size(3), x.size(3), nullptr, 0, 0, gamma.has_value()};
  if (keep.has_value()) {
    TORCH_CHECK(keep->scalar_type() == at::kBool && keep->dim() == 2 && keep->size(0) == cm.B &&
                    keep->size(1) == cm.c,
                "galerkin cpu: keep must be bool (B, c)");
    cm.keep = keep->data_ptr<bool>();
    cm.ks0 = keep->stride(0);
    cm.ks1 = keep->stride(1);
  }
  if (w.has_value())
    TORCH_CHECK(w->scalar_type() == x.scalar_type() && w->dim() == 2 && w->size(0) == cm.B && w->size(1) == cm.c,
                "galerkin cpu: w must be (B, c) of x's dtype");
  if (cm.ln) {
    TORCH_CHECK(beta.has_value() && gamma->is_contiguous() && beta->is_contiguous() && gamma->dim() == 2 &&
                    gamma->size(0) == cm.H && gamma->size(1) <= cm.F && gamma->sizes() == beta->sizes() &&
                    gamma->scalar_type() == x.scalar_type() && beta->scalar_type() == x.scalar_type(),
                "galerkin cpu: gamma, beta must be contiguous (H, Dn) of x's dtype with Dn <= F");
    cm.Dn = gamma->size(1);
  }
  return cm;
}

template <typename T, int FIX>
void features(const at::Tensor& x, const Common& cm, const c10::optional<at::Tensor>& w,
              const c10::optional<at::Tensor>& gamma, const c10::optional<at::Tensor>& beta, double eps_,
              const at::Tensor& out) {
  const Rows rx = Rows::of<T>(x), ro = Rows::of<T>(out);
  const T* xp = x.data_ptr<T>();
  T* op = out.data_ptr<T>();
  const T* wp = w.has_value() ? w->data_ptr<T>() : nullptr;
  const int64_t ws0 = w.has_value() ? w->stride(0) : 0, ws1 = w.has_value() ? w->stride(1) : 0;
  const T* gp = cm.ln ? gamma->data_ptr<T>() : nullptr;
  const T* bp = cm.ln ? beta->data_ptr<T>() : nullptr;
  const T eps = static_cast<T>(eps_);
  const int64_t F = FIX ? FIX : cm.F, Dn = FIX ? FIX : cm.Dn;  // FIX: both known at compile time
  const std::vector<T> zeros(F, T(0));  // a padded row is read as this
  at::parallel_for(0, cm.B * cm.H, 1, [&](int64_t lo, int64_t hi) {
    const T* xr[kRows];
    T mu[kRows], rs[kRows];
    for (int64_t bh = lo; bh < hi; ++bh) {
      const int64_t b = bh / cm.H, h = bh % cm.H;
      const T* g = gp ? gp + h * Dn : nullptr;
      const T* be = bp ? bp + h * Dn : nullptr;
      for (int64_t j0 = 0; j0 < cm.c; j0 += kRows) {
        const int nb = static_cast<int>(std::min<int64_t>(kRows, cm.c - j0));
        for (int r = 0; r < nb; ++r) {
          const int64_t j = j0 + r;
          const bool keep = cm.keep == nullptr || cm.keep[b * cm.ks0 + j * cm.ks1];
          xr[r] = keep ? xp + rx.at(b, h, j) : zeros.data();
        }
        if (cm.ln) block_stats(xr, nb, Dn, eps, mu, rs);
        for (int r = 0; r < nb; ++r) {
          const int64_t j = j0 + r;
          const T* x = xr[r];
          T* y = op + ro.at(b, h, j);
          const T wj = wp ? wp[b * ws0 + j * ws1] : T(1);
          const int64_t dn = cm.ln ? Dn : 0;
          if (cm.ln) {
            const T m = mu[r], rr = rs[r];
            each<T>(0, dn, [&](auto z, int64_t f) {
              using U = decltype(z);
              put(y + f, (load<U>(be + f) + ((load<U>(x + f) - m) * rr) * load<U>(g + f)) * wj);
            });
          }
          each<T>(dn, F, [&](auto z, int64_t f) { put(y + f, load<decltype(z)>(x + f) * wj); });
        }
      }
    }
  });
}

template <typename T, int FIX>
void features_backward(const at::Tensor& x, const Common& cm, const at::Tensor& dy,
                       const c10::optional<at::Tensor>& w, const c10::optional<at::Tensor>& gamma,
                       const c10::optional<at::Tensor>& beta, double eps_, const c10::optional<at::Tensor>& dx,
                       const c10::optional<at::Tensor>& dw, const c10::optional<at::Tensor>& dgamma,
                       const c10::optional<at::Tensor>& dbeta) {
  const Rows rx = Rows::of<T>(x), rdy = Rows::of<T>(dy);
  const Rows rdx = dx.has_value() ? Rows::of<T>(*dx) : Rows{0, 0, 0};
  const T* xp = x.data_ptr<T>();
  const T* dyp = dy.data_ptr<T>();
  T* dxp = dx.has_value() ? dx->data_ptr<T>() : nullptr;
  const T* wp = w.has_value() ? w->data_ptr<T>() : nullptr;
  const int64_t ws0 = w.has_value() ? w->stride(0) : 0, ws1 = w.has_value() ? w->stride(1) : 0;
  const T* gp = cm.ln ? gamma->data_ptr<T>() : nullptr;
  const T* bp = cm.ln ? beta->data_ptr<T>() : nullptr;
  const bool params = cm.ln && dgamma.has_value();
  const T eps = static_cast<T>(eps_);
  const int64_t BH = cm.B * cm.H, Dn = FIX ? FIX : cm.Dn, F = FIX ? FIX : cm.F, c = cm.c;
  // per-(b, h) partial sums: dγ, dβ (Dn each) and dw (c)
  std::vector<T> pg(params ? BH * Dn : 0, T(0)), pb(params ? BH * Dn : 0, T(0)), pw(dw.has_value() ? BH * c : 0);
  const std::vector<T> zeros(F, T(0));  // a padded row is read as this
  const int64_t dn = cm.ln ? Dn : 0;
  at::parallel_for(0, BH, 1, [&](int64_t lo, int64_t hi) {
    std::vector<T> xh(kRows * F), gv(kRows * F);  // per row of the block: x̂ and g = w dy
    const T* xr[kRows];
    T mu[kRows], rs[kRows], m1[kRows], m2[kRows], sw[kRows];
    Parts<T> p;
    for (int64_t bh = lo; bh < hi; ++bh) {
      const int64_t b = bh / cm.H, h = bh % cm.H;
      const T* g = gp ? gp + h * Dn : nullptr;
      const T* be = bp ? bp + h * Dn : nullptr;
      T* pgr = params ? pg.data() + bh * Dn : nullptr;
      T* pbr = params ? pb.data() + bh * Dn : nullptr;
      for (int64_t j0 = 0; j0 < c; j0 += kRows) {
        const int nb = static_cast<int>(std::min<int64_t>(kRows, c - j0));
        bool keep[kRows];
        for (int r = 0; r < nb; ++r) {
          const int64_t j = j0 + r;
          keep[r] = cm.keep == nullptr || cm.keep[b * cm.ks0 + j * cm.ks1];
          xr[r] = keep[r] ? xp + rx.at(b, h, j) : zeros.data();
        }
        if (cm.ln) {
          block_stats(xr, nb, Dn, eps, mu, rs);
          for (int r = 0; r < nb; ++r) {
            const T* x = xr[r];
            T* xhat = xh.data() + r * F;
            const T m = mu[r], rr = rs[r];
            each<T>(0, Dn, [&](auto z, int64_t f) { put(xhat + f, (load<decltype(z)>(x + f) - m) * rr); });
          }
        }
        if (dw.has_value()) {  // Σ_f dy · LN(x̃)
          for (int r = 0; r < nb; ++r) {
            const T* x = xr[r];
            const T* xhat = xh.data() + r * F;
            const T* d = dyp + rdy.at(b, h, j0 + r);
            Part<T> a = partial<T>(0, dn, [&](auto z, int64_t f) {
              using U = decltype(z);
              return load<U>(d + f) * (load<U>(be + f) + load<U>(xhat + f) * load<U>(g + f));
            });
            const Part<T> t = partial<T>(dn, F, [&](auto z, int64_t f) {
              using U = decltype(z);
              return load<U>(d + f) * load<U>(x + f);
            });
            p.set(r, Part<T>{a.v + t.v, a.s + t.s});
          }
          row_sums(p, nb, sw);
          for (int r = 0; r < nb; ++r) pw[bh * c + j0 + r] = sw[r];
        }
        if (dxp == nullptr && !params) continue;
        for (int r = 0; r < nb; ++r) {
          const T* d = dyp + rdy.at(b, h, j0 + r);
          T* gg = gv.data() + r * F;
          const T* xhat = xh.data() + r * F;
          const T wj = wp ? wp[b * ws0 + (j0 + r) * ws1] : T(1);
          each<T>(0, F, [&](auto z, int64_t f) { put(gg + f, load<decltype(z)>(d + f) * wj); });
          if (params)
            each<T>(0, Dn, [&](auto z, int64_t f) {
              using U = decltype(z);
              const U a = load<U>(gg + f);
              put(pgr + f, load<U>(pgr + f) + a * load<U>(xhat + f));
              put(pbr + f, load<U>(pbr + f) + a);
            });
        }
        if (dxp == nullptr) continue;
        if (cm.ln) {
          for (int r = 0; r < nb; ++r) {
            const T* gg = gv.data() + r * F;
            p.set(r, partial<T>(0, Dn, [&](auto z, int64_t f) {
              using U = decltype(z);
              return load<U>(gg + f) * load<U>(g + f);
            }));
          }
          row_sums(p, nb, m1);
          for (int r = 0; r < nb; ++r) {
            const T* gg = gv.data() + r * F;
            const T* xhat = xh.data() + r * F;
            p.set(r, partial<T>(0, Dn, [&](auto z, int64_t f) {
              using U = decltype(z);
              return load<U>(gg + f) * load<U>(g + f) * load<U>(xhat + f);
            }));
          }
          row_sums(p, nb, m2);
        }
        for (int r = 0; r < nb; ++r) {
          T* o = dxp + rdx.at(b, h, j0 + r);
          if (!keep[r]) {
            each<T>(0, F, [&](auto z, int64_t f) { put(o + f, decltype(z){} * T(0)); });
            continue;
          }
          const T* gg = gv.data() + r * F;
          const T* xhat = xh.data() + r * F;
          if (cm.ln) {
            const T a = m1[r] / T(Dn), bq = m2[r] / T(Dn), rr = rs[r];
            each<T>(0, Dn, [&](auto z, int64_t f) {
              using U = decltype(z);
              put(o + f, (load<U>(gg + f) * load<U>(g + f) - a - load<U>(xhat + f) * bq) * rr);
            });
          }
          each<T>(dn, F, [&](auto z, int64_t f) { put(o + f, load<decltype(z)>(gg + f)); });
        }
      }
    }
  });
  if (params) {  // reduce over the batch in order
    T* dg = dgamma->data_ptr<T>();
    T* db = dbeta->data_ptr<T>();
    for (int64_t b = 0; b < cm.B; ++b)
      for (int64_t h = 0; h < cm.H; ++h)
        for (int64_t f = 0; f < Dn; ++f) {
          dg[h * Dn + f] += pg[(b * cm.H + h) * Dn + f];
          db[h * Dn + f] += pb[(b * cm.H + h) * Dn + f];
        }
  }
  if (dw.has_value()) {  // reduce over the heads in order
    T* o = dw->data_ptr<T>();
    const int64_t d0 = dw->stride(0), d1 = dw->stride(1);
    for (int64_t b = 0; b < cm.B; ++b)
      for (int64_t j = 0; j < c; ++j) {
        T s = 0;
        for (int64_t h = 0; h < cm.H; ++h) s += pw[(b * cm.H + h) * c + j];
        o[b * d0 + j * d1] += s;
      }
  }
}

// Calls fn(std::integral_constant<int, W>) with W the row width where every row is W features wide and the
// LayerNorm (if any) takes them all (16, 32, 64: the loops then unroll), else W = 0 (widths read at run time).
template <typename Fn>
void with_width(const Common& cm, Fn fn) {
  const bool whole = !cm.ln || cm.Dn == cm.F;
  if (whole && cm.F == 32)
    fn(std::integral_constant<int, 32>{});
  else if (whole && cm.F == 64)
    fn(std::integral_constant<int, 64>{});
  else if (whole && cm.F == 16)
    fn(std::integral_constant<int, 16>{});
  else
    fn(std::integral_constant<int, 0>{});
}

void gal_features(const at::Tensor& x, const c10::optional<at::Tensor>& keep, const c10::optional<at::Tensor>& w,
                  const c10::optional<at::Tensor>& gamma, const c10::optional<at::Tensor>& beta, double eps,
                  const at::Tensor& out) {
  const Common cm = common(x, keep, w, gamma, beta);
  TORCH_CHECK(out.sizes() == x.sizes() && out.scalar_type() == x.scalar_type(), "galerkin cpu: out must match x");
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "gal_features", [&] {
    with_width(cm, [&](auto fix) { features<scalar_t, decltype(fix)::value>(x, cm, w, gamma, beta, eps, out); });
  });
}

void gal_features_backward(const at::Tensor& x, const c10::optional<at::Tensor>& keep, const at::Tensor& dy,
                           const c10::optional<at::Tensor>& w, const c10::optional<at::Tensor>& gamma,
                           const c10::optional<at::Tensor>& beta, double eps, const c10::optional<at::Tensor>& dx,
                           const c10::optional<at::Tensor>& dw, const c10::optional<at::Tensor>& dgamma,
                           const c10::optional<at::Tensor>& dbeta) {
  const Common cm = common(x, keep, w, gamma, beta);
  TORCH_CHECK(dy.sizes() == x.sizes() && dy.scalar_type() == x.scalar_type(), "galerkin cpu: dy must match x");
  if (dx.has_value())
    TORCH_CHECK(dx->sizes() == x.sizes() && dx->scalar_type() == x.scalar_type(), "galerkin cpu: dx must match x");
  if (dw.has_value())
    TORCH_CHECK(dw->dim() == 2 && dw->size(0) == cm.B && dw->size(1) == cm.c && dw->scalar_type() == x.scalar_type(),
                "galerkin cpu: dw must be (B, c) of x's dtype");
  if (dgamma.has_value())
    TORCH_CHECK(cm.ln && dbeta.has_value() && dgamma->is_contiguous() && dbeta->is_contiguous() &&
                    dgamma->sizes() == gamma->sizes() && dbeta->sizes() == gamma->sizes() &&
                    dgamma->scalar_type() == x.scalar_type() && dbeta->scalar_type() == x.scalar_type(),
                "galerkin cpu: dgamma, dbeta must be contiguous like gamma");
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "gal_features_backward", [&] {
    with_width(cm, [&](auto fix) {
      features_backward<scalar_t, decltype(fix)::value>(x, cm, dy, w, gamma, beta, eps, dx, dw, dgamma, dbeta);
    });
  });
}

}  // namespace
}  // namespace sciattn_gal

TORCH_LIBRARY(SCIATTN_LIBRARY, lib) {
  lib.def("gal_features(Tensor x, Tensor? keep, Tensor? w, Tensor? gamma, Tensor? beta, float eps, Tensor(a!) out)"
          " -> ()",
          &sciattn_gal::gal_features);
  lib.def("gal_features_backward(Tensor x, Tensor? keep, Tensor dy, Tensor? w, Tensor? gamma, Tensor? beta, "
          "float eps, Tensor(a!)? dx, Tensor(b!)? dw, Tensor(c!)? dgamma, Tensor(d!)? dbeta) -> ()",
          &sciattn_gal::gal_features_backward);
}
