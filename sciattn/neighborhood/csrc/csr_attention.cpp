// Fused CPU kernels of neighbourhood attention over a CSR index (sciattn/neighborhood/_cpu.py):
//
//   out_i = sum_{n in row i} p_n v_{j(n)},  p_n = exp(t_n - lse_i),  t_n = scale q_i . k_{j(n)} + log w_{j(n)} + c_n,
//   lse_i = log sum_n exp(t_n)
//
// (c_n the optional per-entry bias, log of a pair's multiplicity). One query row at a time: its logits into a
// small buffer (dot products over the head channels, which the compiler vectorises), a vectorised exponential,
// then the weighted sum of the gathered value rows. Nothing of size nnz is stored. The backward recomputes the
// probabilities from the saved log-sum-exp:
//
//   dp_n = dO_i . v_j,  ds_n = p_n (dp_n - dO_i . O_i),  dq_i = scale sum_n ds_n k_j,
//   dk_j += scale ds_n q_i,  dv_j += p_n dO_i,  dlogw_{b,h,j} += ds_n,
//
// one task per (batch, head), which owns that head's dk, dv and dlogw rows: no atomics, and the same sums in the
// same order on every run (deterministic). Layout: q (B, H, Nq, D), k (B, H, Nk, D), v (B, H, Nk, E), out
// (B, H, Nq, E) and the gradients, with any strides but unit stride along the channels (heads split from a
// token-major projection are read in place); logw (B, Nk) (-inf on padding); lse (B, H, Nq) contiguous;
// row_offsets (Nq + 1) and
// col_indices (nnz) int64, canonical (sorted, duplicate-free). A row without a live key (empty, or every key at
// -inf) gets out = 0 and lse = -inf, and contributes nothing to any gradient.
#include "simd.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>
#include <torch/library.h>

#include <algorithm>
#include <utility>
#include <vector>

namespace sciattn_csr {
namespace {

using namespace sciattn_simd;

template <typename T>
inline T dot(const T* a, const T* b, int64_t n) {
  T s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t d = 0; d < n; ++d) s += a[d] * b[d];
  return s;
}

template <typename T>
inline void axpy(T alpha, const T* x, T* y, int64_t n) {
#pragma omp simd
  for (int64_t d = 0; d < n; ++d) y[d] += alpha * x[d];
}

// buf[0:n] = exp(buf[0:n] - shift), lane by lane (buf holds at least n rounded up to kLanes values).
template <typename T>
inline void exp_shifted(T* buf, int64_t n, T shift) {
  const V<T> s = splat<T>(shift);
  for (int64_t c = 0; c < n; c += kLanes) st(buf + c, vexp(ld(buf + c) - s));
}

struct Csr {
  const int64_t* ro;
  const int64_t* ci;
  int64_t nq, nk, max_row;
};

// Rows of a (B, H, N, C) tensor with unit stride along C: head (b, h) starts at b sb + h sh, its rows sn apart.
template <typename T>
struct Rows {
  T* p;
  int64_t sb, sh, sn;
  explicit Rows(const at::Tensor& t) : p(t.data_ptr<T>()), sb(t.stride(0)), sh(t.stride(1)), sn(t.stride(2)) {}
  T* head(int64_t b, int64_t h) const { return p + b * sb + h * sh; }
};

Csr csr_of(const at::Tensor& row_offsets, const at::Tensor& col_indices, int64_t nq, int64_t nk) {
  Csr c{row_offsets.data_ptr<int64_t>(), col_indices.data_ptr<int64_t>(), nq, nk, 0};
  for (int64_t i = 0; i < nq; ++i) c.max_row = std::max(c.max_row, c.ro[i + 1] - c.ro[i]);
  return c;
}

// row(scratch, bh, b, h, i) for every query row i of every (batch, head) bh = b H + h, in parallel over blocks of kRows
// rows of one head; make_scratch() builds a worker's buffers once per range of blocks.
template <typename MakeScratch, typename Row>
void for_each_query_row(int64_t B, int64_t H, int64_t Nq, const MakeScratch& make_scratch, const Row& row) {
  constexpr int64_t kRows = 256;
  const int64_t blocks = (Nq + kRows - 1) / kRows;
  at::parallel_for(0, B * H * blocks, 1, [&](int64_t t0, int64_t t1) {
    auto scratch = make_scratch();
    for (int64_t task = t0; task < t1; ++task) {
      const int64_t bh = task / blocks, b = bh / H, h = bh % H, i0 = (task % blocks) * kRows;
      const int64_t i1 = std::min(Nq, i0 + kRows);
      for (int64_t i = i0; i < i1; ++i) row(scratch, bh, b, h, i);
    }
  });
}

// The logits t_n of row i into buf; returns their maximum (-inf when the row has no live key).
template <typename T>
inline T row_logits(const Csr& g, int64_t i, const T* qi, const T* kh, int64_t ks, const T* lw, const T* eb,
                    int64_t D, T scale, T* buf) {
  const int64_t lo = g.ro[i], n = g.ro[i + 1] - lo;
  T m = static_cast<T>(kNegInf);
  for (int64_t t = 0; t < n; ++t) {
    const int64_t j = g.ci[lo + t];
    T s = scale * dot(qi, kh + j * ks, D) + lw[j];
    if (eb) s += eb[lo + t];
    buf[t] = s;
    m = s > m ? s : m;
  }
  for (int64_t t = n; t < (n + kLanes - 1) / kLanes * kLanes; ++t) buf[t] = static_cast<T>(kNegInf);
  return m;
}

template <typename T>
void forward_impl(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& logw,
                  const Csr& g, const c10::optional<at::Tensor>& edge_bias, double scale_, const at::Tensor& out,
                  const at::Tensor& lse) {
  const int64_t B = q.size(0), H = q.size(1), Nq = q.size(2), D = q.size(3), Nk = k.size(2), E = v.size(3);
  const T scale = static_cast<T>(scale_);
  const Rows<T> Q(q), K(k), V(v), O(out);
  const T* lwp = logw.data_ptr<T>();
  const T* eb = edge_bias.has_value() ? edge_bias->data_ptr<T>() : nullptr;
  T* lp = lse.data_ptr<T>();
  const int64_t padded = (g.max_row + kLanes - 1) / kLanes * kLanes + kLanes;
  const auto scratch = [&] { return std::make_pair(std::vector<T>(padded), std::vector<T>(E)); };
  for_each_query_row(B, H, Nq, scratch, [&](auto& bufs, int64_t bh, int64_t b, int64_t h, int64_t i) {
    std::vector<T>& buf = bufs.first;
    std::vector<T>& acc = bufs.second;
    const T* vh = V.head(b, h);
    T* oi = O.head(b, h) + i * O.sn;
    const T m = row_logits(g, i, Q.head(b, h) + i * Q.sn, K.head(b, h), K.sn, lwp + b * Nk, eb, D, scale, buf.data());
    if (!(m > static_cast<T>(kNegInf))) {
      std::fill(oi, oi + E, T(0));
      lp[bh * Nq + i] = static_cast<T>(kNegInf);
      return;
    }
    const int64_t lo = g.ro[i], n = g.ro[i + 1] - lo;
    exp_shifted(buf.data(), n, m);
    std::fill(acc.begin(), acc.end(), T(0));
    T z = 0;
    for (int64_t t = 0; t < n; ++t) {
      z += buf[t];
      axpy(buf[t], vh + g.ci[lo + t] * V.sn, acc.data(), E);
    }
    const T rz = T(1) / z;
#pragma omp simd
    for (int64_t e = 0; e < E; ++e) oi[e] = acc[e] * rz;
    lp[bh * Nq + i] = m + std::log(z);
  });
}

template <typename T>
void backward_impl(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& logw,
                   const Csr& g, const c10::optional<at::Tensor>& edge_bias, double scale_, const at::Tensor& out,
                   const at::Tensor& lse, const at::Tensor& gout, const at::Tensor& dq, const at::Tensor& dk,
                   const at::Tensor& dv, const c10::optional<at::Tensor>& dlogw) {
  const int64_t B = q.size(0), H = q.size(1), Nq = q.size(2), D = q.size(3), Nk = k.size(2), E = v.size(3);
  const T scale = static_cast<T>(scale_);
  const Rows<T> Q(q), K(k), V(v), O(out), G(gout), DQ(dq), DK(dk), DV(dv);
  const T *lwp = logw.data_ptr<T>(), *lp = lse.data_ptr<T>();
  const T* eb = edge_bias.has_value() ? edge_bias->data_ptr<T>() : nullptr;
  T* dlp = dlogw.has_value() ? dlogw->data_ptr<T>() : nullptr;
  const int64_t padded = (g.max_row + kLanes - 1) / kLanes * kLanes + kLanes;
  at::parallel_for(0, B * H, 1, [&](int64_t t0, int64_t t1) {
    std::vector<T> buf(padded), acc(D);
    for (int64_t bh = t0; bh < t1; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      const T *kh = K.head(b, h), *vh = V.head(b, h), *lw = lwp + b * Nk;
      T *dkh = DK.head(b, h), *dvh = DV.head(b, h), *dlh = dlp ? dlp + bh * Nk : nullptr;
      for (int64_t i = 0; i < Nq; ++i) {
        const T *qi = Q.head(b, h) + i * Q.sn, *gi = G.head(b, h) + i * G.sn;
        T* dqi = DQ.head(b, h) + i * DQ.sn;
        const T l = lp[bh * Nq + i];
        if (!(l > static_cast<T>(kNegInf))) {
          std::fill(dqi, dqi + D, T(0));
          continue;
        }
        const int64_t lo = g.ro[i], n = g.ro[i + 1] - lo;
        row_logits(g, i, qi, kh, K.sn, lw, eb, D, scale, buf.data());
        exp_shifted(buf.data(), n, l);
        const T delta = dot(gi, O.head(b, h) + i * O.sn, E);
        std::fill(acc.begin(), acc.end(), T(0));
        for (int64_t t = 0; t < n; ++t) {
          const int64_t j = g.ci[lo + t];
          const T p = buf[t];
          const T ds = p * (dot(gi, vh + j * V.sn, E) - delta);
          axpy(ds, kh + j * K.sn, acc.data(), D);
          axpy(scale * ds, qi, dkh + j * DK.sn, D);
          axpy(p, gi, dvh + j * DV.sn, E);
          if (dlh) dlh[j] += ds;
        }
#pragma omp simd
        for (int64_t d = 0; d < D; ++d) dqi[d] = scale * acc[d];
      }
    }
  });
}

// ---- float32 with D, E multiples of kLanes (at most 4 vectors): the rows' neighbours in blocks of kLanes ----
//
// The logits of kLanes neighbours are kLanes dot products, each a vector of partial sums (DV fused multiply-adds),
// reduced together by simd.h's transpose_sum (15 combines instead of kLanes horizontal sums); lane l of the
// result is neighbour l's logit. A block past the row's end repeats its last neighbour and masks it out.

using VF = V<float>;

// Logits of neighbours lo + t0 .. lo + t0 + kLanes - 1 of one row (qv its query, scaled), -inf past n.
template <int DV>
inline VF block_logits(const VF* qv, const float* kh, int64_t ks, const int64_t* cols, int64_t t0, int64_t n,
                       const float* lw, const float* eb, int64_t* j) {
  VF part[kLanes];
  for (int l = 0; l < kLanes; ++l) {
    j[l] = cols[std::min<int64_t>(t0 + l, n - 1)];
    const float* kj = kh + j[l] * ks;
    VF a = qv[0] * ld(kj);
    for (int dv = 1; dv < DV; ++dv) a += qv[dv] * ld(kj + dv * kLanes);
    part[l] = a;
  }
  alignas(64) float bias[kLanes];
  for (int l = 0; l < kLanes; ++l)
    bias[l] = t0 + l < n ? lw[j[l]] + (eb ? eb[t0 + l] : 0.0f) : static_cast<float>(kNegInf);
  return transpose_sum(part) + ld(bias);
}

template <int DV, int EV>
void forward_fast(const Rows<float>& Q, const Rows<float>& K, const Rows<float>& V, const Rows<float>& O,
                  const float* lwp, const Csr& g, const float* eb, float scale, float* lp, int64_t B, int64_t H) {
  const int64_t Nq = g.nq, Nk = g.nk;
  const int64_t padded = (g.max_row + kLanes - 1) / kLanes * kLanes + kLanes;
  const auto scratch = [&] { return std::make_pair(std::vector<float>(padded), std::vector<int64_t>(padded)); };
  for_each_query_row(B, H, Nq, scratch, [&](auto& bufs, int64_t bh, int64_t b, int64_t h, int64_t i) {
    std::vector<float>& buf = bufs.first;
    std::vector<int64_t>& jj = bufs.second;
    const float *kh = K.head(b, h), *vh = V.head(b, h), *lw = lwp + b * Nk;
    float* oi = O.head(b, h) + i * O.sn;
    const int64_t lo = g.ro[i], n = g.ro[i + 1] - lo;
    VF qv[DV];
    for (int dv = 0; dv < DV; ++dv) qv[dv] = ld(Q.head(b, h) + i * Q.sn + dv * kLanes) * scale;
    VF mv = splat<float>(static_cast<float>(kNegInf));
    for (int64_t t = 0; t < n; t += kLanes) {
      const VF s = block_logits<DV>(qv, kh, K.sn, g.ci + lo, t, n, lw, eb ? eb + lo : nullptr, jj.data() + t);
      st(buf.data() + t, s);
      mv = s > mv ? s : mv;
    }
    const float m = n > 0 ? hmax<float>(mv) : static_cast<float>(kNegInf);
    if (!(m > static_cast<float>(kNegInf))) {
      std::fill(oi, oi + EV * kLanes, 0.0f);
      lp[bh * Nq + i] = static_cast<float>(kNegInf);
      return;
    }
    VF acc[EV] = {}, zv = {};
    for (int64_t t = 0; t < n; t += kLanes) {
      const VF p = vexp(ld(buf.data() + t) - m);  // 0 past the row's end
      zv += p;
      alignas(64) float pl[kLanes];
      st(pl, p);
      const int64_t* js = jj.data() + t;
      if (n - t >= kLanes) {
        for (int l = 0; l < kLanes; ++l) {
          const float* vj = vh + js[l] * V.sn;
          for (int ev = 0; ev < EV; ++ev) acc[ev] += pl[l] * ld(vj + ev * kLanes);
        }
      } else {
        for (int64_t l = 0; l < n - t; ++l) {
          const float* vj = vh + js[l] * V.sn;
          for (int ev = 0; ev < EV; ++ev) acc[ev] += pl[l] * ld(vj + ev * kLanes);
        }
      }
    }
    const float z = hsum<float>(zv);
    for (int ev = 0; ev < EV; ++ev) st(oi + ev * kLanes, acc[ev] * (1.0f / z));
    lp[bh * Nq + i] = m + std::log(z);
  });
}

template <int DV, int EV>
void backward_fast(const Rows<float>& Q, const Rows<float>& K, const Rows<float>& V, const Rows<float>& O,
                   const Rows<float>& G, const Rows<float>& DQ, const Rows<float>& DK, const Rows<float>& DVr,
                   const float* lwp, const Csr& g, const float* eb, float scale, const float* lp, float* dlp,
                   int64_t B, int64_t H) {
  const int64_t Nq = g.nq, Nk = g.nk;
  at::parallel_for(0, B * H, 1, [&](int64_t t0, int64_t t1) {
    int64_t jj[kLanes];
    for (int64_t bh = t0; bh < t1; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      const float *kh = K.head(b, h), *vh = V.head(b, h), *lw = lwp + b * Nk;
      float *dkh = DK.head(b, h), *dvh = DVr.head(b, h), *dlh = dlp ? dlp + bh * Nk : nullptr;
      for (int64_t i = 0; i < Nq; ++i) {
        const float *qi = Q.head(b, h) + i * Q.sn, *gi = G.head(b, h) + i * G.sn, *oi = O.head(b, h) + i * O.sn;
        float* dqi = DQ.head(b, h) + i * DQ.sn;
        const float l = lp[bh * Nq + i];
        const int64_t lo = g.ro[i], n = g.ro[i + 1] - lo;
        if (!(l > static_cast<float>(kNegInf))) {
          std::fill(dqi, dqi + DV * kLanes, 0.0f);
          continue;
        }
        VF qv[DV], qs[DV], gv[EV], dq[DV] = {};
        VF dv0 = {};
        for (int dv = 0; dv < DV; ++dv) {
          qv[dv] = ld(qi + dv * kLanes);
          qs[dv] = qv[dv] * scale;
        }
        for (int ev = 0; ev < EV; ++ev) {
          gv[ev] = ld(gi + ev * kLanes);
          dv0 += gv[ev] * ld(oi + ev * kLanes);
        }
        const float delta = hsum<float>(dv0);
        for (int64_t t = 0; t < n; t += kLanes) {
          const VF p = vexp(block_logits<DV>(qs, kh, K.sn, g.ci + lo, t, n, lw, eb ? eb + lo : nullptr, jj) - l);
          VF part[kLanes];
          for (int x = 0; x < kLanes; ++x) {
            const float* vj = vh + jj[x] * V.sn;
            VF a = gv[0] * ld(vj);
            for (int ev = 1; ev < EV; ++ev) a += gv[ev] * ld(vj + ev * kLanes);
            part[x] = a;
          }
          const VF ds = p * (transpose_sum(part) - delta);  // 0 past the row's end (p = 0 there)
          const int64_t cnt = std::min<int64_t>(kLanes, n - t);
          for (int64_t x = 0; x < cnt; ++x) {
            const int64_t j = jj[x];
            const float* kj = kh + j * K.sn;
            float *dkj = dkh + j * DK.sn, *dvj = dvh + j * DVr.sn;
            const float d = ds[x], sd = scale * ds[x], px = p[x];
            for (int dv = 0; dv < DV; ++dv) {
              dq[dv] += d * ld(kj + dv * kLanes);
              st(dkj + dv * kLanes, ld(dkj + dv * kLanes) + sd * qv[dv]);
            }
            for (int ev = 0; ev < EV; ++ev) st(dvj + ev * kLanes, ld(dvj + ev * kLanes) + px * gv[ev]);
            if (dlh) dlh[j] += d;
          }
        }
        for (int dv = 0; dv < DV; ++dv) st(dqi + dv * kLanes, dq[dv] * scale);
      }
    }
  });
}

using R = const Rows<float>&;
using ForwardFast = void (*)(R, R, R, R, const float*, const Csr&, const float*, float, float*, int64_t, int64_t);
using BackwardFast = void (*)(R, R, R, R, R, R, R, R, const float*, const Csr&, const float*, float, const float*,
                              float*, int64_t, int64_t);

template <int DV>
std::pair<ForwardFast, BackwardFast> fast_for_e(int64_t ev) {
  switch (ev) {
    case 1: return {forward_fast<DV, 1>, backward_fast<DV, 1>};
    case 2: return {forward_fast<DV, 2>, backward_fast<DV, 2>};
    case 3: return {forward_fast<DV, 3>, backward_fast<DV, 3>};
    case 4: return {forward_fast<DV, 4>, backward_fast<DV, 4>};
    default: return {nullptr, nullptr};
  }
}

// The specialised float32 kernels for head sizes D, E (multiples of kLanes up to 4 kLanes), or nulls.
std::pair<ForwardFast, BackwardFast> fast_kernels(const at::Tensor& q, const at::Tensor& v) {
  const int64_t D = q.size(3), E = v.size(3);
  if (q.scalar_type() != at::kFloat || D % kLanes || E % kLanes) return {nullptr, nullptr};
  switch (D / kLanes) {
    case 1: return fast_for_e<1>(E / kLanes);
    case 2: return fast_for_e<2>(E / kLanes);
    case 3: return fast_for_e<3>(E / kLanes);
    case 4: return fast_for_e<4>(E / kLanes);
    default: return {nullptr, nullptr};
  }
}

bool unit_rows(const at::Tensor& t) { return t.dim() == 4 && (t.stride(3) == 1 || t.size(3) == 1); }

void check(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& logw,
           const at::Tensor& row_offsets, const at::Tensor& col_indices, const c10::optional<at::Tensor>& edge_bias) {
  TORCH_CHECK(q.device().is_cpu() && k.device().is_cpu() && v.device().is_cpu() && logw.device().is_cpu(),
              "csr_attention: expected CPU tensors, got q on ", q.device());
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && logw.dim() == 2,
              "csr_attention: expected q, k, v (B, H, N, D) and logw (B, Nk)");
  for (const at::Tensor* t : {&q, &k, &v})
    TORCH_CHECK(unit_rows(*t) && t->scalar_type() == q.scalar_type(),
                "csr_attention: expected q, k, v of one dtype with unit stride along the channels");
  TORCH_CHECK(logw.is_contiguous() && logw.scalar_type() == q.scalar_type(), "csr_attention: logw contiguous");
  TORCH_CHECK(k.size(0) == q.size(0) && v.size(0) == q.size(0) && logw.size(0) == q.size(0) &&
                  k.size(1) == q.size(1) && v.size(1) == q.size(1) && k.size(3) == q.size(3) &&
                  v.size(2) == k.size(2) && logw.size(1) == k.size(2),
              "csr_attention: q, k, v, logw sizes do not match");
  TORCH_CHECK(row_offsets.dim() == 1 && row_offsets.numel() == q.size(2) + 1 && row_offsets.is_contiguous() &&
                  row_offsets.scalar_type() == at::kLong && col_indices.dim() == 1 && col_indices.is_contiguous() &&
                  col_indices.scalar_type() == at::kLong,
              "csr_attention: expected int64 row_offsets (Nq + 1) and col_indices (nnz)");
  if (edge_bias.has_value())
    TORCH_CHECK(edge_bias->numel() == col_indices.numel() && edge_bias->is_contiguous() &&
                    edge_bias->scalar_type() == q.scalar_type(),
                "csr_attention: edge_bias (nnz,) of q's dtype");
}

}  // namespace

void csr_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& logw,
                 const at::Tensor& row_offsets, const at::Tensor& col_indices,
                 const c10::optional<at::Tensor>& edge_bias, double scale, const at::Tensor& out,
                 const at::Tensor& lse) {
  check(q, k, v, logw, row_offsets, col_indices, edge_bias);
  TORCH_CHECK(unit_rows(out) && lse.is_contiguous() && out.scalar_type() == q.scalar_type() &&
                  lse.scalar_type() == q.scalar_type() && out.size(2) == q.size(2) && out.size(3) == v.size(3) &&
                  lse.numel() == q.size(0) * q.size(1) * q.size(2),
              "csr_attention: out (B, H, Nq, E) and lse (B, H, Nq) like q");
  const Csr g = csr_of(row_offsets, col_indices, q.size(2), k.size(2));
  const auto fast = fast_kernels(q, v).first;
  if (fast) {
    fast(Rows<float>(q), Rows<float>(k), Rows<float>(v), Rows<float>(out), logw.data_ptr<float>(), g,
         edge_bias.has_value() ? edge_bias->data_ptr<float>() : nullptr, static_cast<float>(scale),
         lse.data_ptr<float>(), q.size(0), q.size(1));
    return;
  }
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "csr_forward",
                             [&] { forward_impl<scalar_t>(q, k, v, logw, g, edge_bias, scale, out, lse); });
}

void csr_backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& logw,
                  const at::Tensor& row_offsets, const at::Tensor& col_indices,
                  const c10::optional<at::Tensor>& edge_bias, double scale, const at::Tensor& out,
                  const at::Tensor& lse, const at::Tensor& gout, const at::Tensor& dq, const at::Tensor& dk,
                  const at::Tensor& dv, const c10::optional<at::Tensor>& dlogw) {
  check(q, k, v, logw, row_offsets, col_indices, edge_bias);
  for (const at::Tensor* t : {&out, &gout, &dq, &dk, &dv})
    TORCH_CHECK(unit_rows(*t) && t->scalar_type() == q.scalar_type(), "csr_attention: backward buffers");
  TORCH_CHECK(lse.is_contiguous() && lse.scalar_type() == q.scalar_type(), "csr_attention: lse");
  TORCH_CHECK(dq.sizes() == q.sizes() && dk.sizes() == k.sizes() && dv.sizes() == v.sizes() &&
                  gout.sizes() == out.sizes(),
              "csr_attention: gradient sizes");
  if (dlogw.has_value())
    TORCH_CHECK(dlogw->is_contiguous() && dlogw->scalar_type() == q.scalar_type() &&
                    dlogw->numel() == q.size(0) * q.size(1) * k.size(2),
                "csr_attention: dlogw (B, H, Nk)");
  const Csr g = csr_of(row_offsets, col_indices, q.size(2), k.size(2));
  const auto fast = fast_kernels(q, v).second;
  if (fast) {
    fast(Rows<float>(q), Rows<float>(k), Rows<float>(v), Rows<float>(out), Rows<float>(gout), Rows<float>(dq),
         Rows<float>(dk), Rows<float>(dv), logw.data_ptr<float>(), g,
         edge_bias.has_value() ? edge_bias->data_ptr<float>() : nullptr, static_cast<float>(scale),
         lse.data_ptr<float>(), dlogw.has_value() ? dlogw->data_ptr<float>() : nullptr, q.size(0), q.size(1));
    return;
  }
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "csr_backward", [&] {
    backward_impl<scalar_t>(q, k, v, logw, g, edge_bias, scale, out, lse, gout, dq, dk, dv, dlogw);
  });
}

}  // namespace sciattn_csr

#define SCIATTN_CSR_ARGS \
  "Tensor q, Tensor k, Tensor v, Tensor logw, Tensor row_offsets, Tensor col_indices, Tensor? edge_bias, float scale"

TORCH_LIBRARY(SCIATTN_LIBRARY, lib) {
  lib.def("csr_forward(" SCIATTN_CSR_ARGS ", Tensor(a!) out, Tensor(b!) lse) -> ()", &sciattn_csr::csr_forward);
  lib.def("csr_backward(" SCIATTN_CSR_ARGS
          ", Tensor out, Tensor lse, Tensor gout, Tensor(a!) dq, Tensor(b!) dk, Tensor(c!) dv, Tensor(d!)? dlogw) -> ()",
          &sciattn_csr::csr_backward);
}
