// Fused CPU kernels of quadrature-weighted softmax attention with an optional distance bias
// (sciattn/weighted_softmax/_cpu.py):
//
//   o_i = sum_j p_ij v_j,  p_ij = exp(s_ij - lse_i),  lse_i = log sum_j exp(s_ij),
//   s_ij = scale q_i . k_j + log w_j - lam_h d_ij,  d_ij = |p_i - p_j|   (distance term optional)
//
// Queries sit in the vector lanes: a block of QB = QV * kLanes queries is held transposed (channel-major), so a
// score tile is lane-vector += q[d]-vector * broadcast(k_j[d]) over the channels, and the softmax's row maxima,
// exponentials and sums are lane-wise (no horizontal reductions). The forward runs an online softmax over key
// blocks of KB keys (the running maximum m, the sum l and the transposed output block rescaled when m grows) and
// saves lse; nothing of size Nq * Nk is stored. The backward recomputes p from lse, per query block and key block:
//
//   dp_ij = dO_i . v_j,  ds_ij = p_ij (dp_ij - delta_i)  (delta_i = dO_i . o_i),
//   dq_i = scale sum_j ds_ij k_j,  dk_j += scale sum_i ds_ij q_i,  dv_j += sum_i p_ij dO_i,  dlogw_hj += sum_i ds_ij,
//   dlam_h = -sum ds_ij d_ij,  G_ij = -lam_h ds_ij / d_ij (0 where d_ij = 0),
//   dqpos_hi = sum_j G_ij (p_i - p_j),  dkpos_hj = -sum_i G_ij (p_i - p_j)
//
// (per head; the caller sums dlogw, dqpos, dkpos over heads and dlam over the batch). dq and the query-side sums
// accumulate in lanes; dk and dv (rows, vectorised along the channels) and the per-key sums accumulate in the
// task's own rows: one backward task per (batch, head), no atomics, the same sums in the same order on every run.
//
// Layout: q (B, H, Nq, D), k (B, H, Nk, D), v (B, H, Nk, E), out (B, H, Nq, E), all contiguous, D and E multiples
// of kLanes (the caller pads with zero channels); logw (B, Nk) (-inf on padding); qpos (B, Nq, P), kpos (B, Nk, P),
// lam (H); lse (B, H, Nq). A query without a live key gets out = 0, lse = -inf and zero gradients. One templated
// path for float and double: float64 runs the same code as float32 (the tests' oracle comparison).
#include "lanes.h"

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>
#include <torch/library.h>

namespace sciattn_wsm {
namespace {

template <typename T>
Args<T> args_of(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& logw,
                const c10::optional<at::Tensor>& qpos, const c10::optional<at::Tensor>& kpos,
                const c10::optional<at::Tensor>& lam, double scale) {
  const bool dist = qpos.has_value();
  return Args<T>{q.data_ptr<T>(), k.data_ptr<T>(), v.data_ptr<T>(), logw.data_ptr<T>(),
                 dist ? qpos->data_ptr<T>() : nullptr, dist ? kpos->data_ptr<T>() : nullptr,
                 dist ? lam->data_ptr<T>() : nullptr, q.size(0), q.size(1), q.size(2), k.size(2), q.size(3),
                 v.size(3), dist ? qpos->size(2) : 0, static_cast<T>(scale)};
}

void check(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& logw,
           const c10::optional<at::Tensor>& qpos, const c10::optional<at::Tensor>& kpos,
           const c10::optional<at::Tensor>& lam) {
  TORCH_CHECK(q.device().is_cpu() && k.device().is_cpu() && v.device().is_cpu() && logw.device().is_cpu(),
              "weighted_softmax cpu: expected CPU tensors, got q on ", q.device());
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && logw.dim() == 2,
              "weighted_softmax cpu: expected q, k, v (B, H, N, D) and logw (B, Nk)");
  TORCH_CHECK(q.scalar_type() == at::kFloat || q.scalar_type() == at::kDouble,
              "weighted_softmax cpu: float32 or float64, got ", q.scalar_type());
  for (const at::Tensor* t : {&q, &k, &v, &logw})
    TORCH_CHECK(t->is_contiguous() && t->scalar_type() == q.scalar_type(),
                "weighted_softmax cpu: expected contiguous q, k, v, logw of one dtype");
  TORCH_CHECK(k.size(0) == q.size(0) && v.size(0) == q.size(0) && logw.size(0) == q.size(0) &&
                  k.size(1) == q.size(1) && v.size(1) == q.size(1) && k.size(3) == q.size(3) &&
                  v.size(2) == k.size(2) && logw.size(1) == k.size(2),
              "weighted_softmax cpu: q, k, v, logw sizes do not match");
  TORCH_CHECK(q.size(3) % kLanes == 0 && v.size(3) % kLanes == 0,
              "weighted_softmax cpu: head sizes must be multiples of ", kLanes, " (pad with zero channels)");
  TORCH_CHECK(qpos.has_value() == kpos.has_value() && kpos.has_value() == lam.has_value(),
              "weighted_softmax cpu: qpos, kpos, lam together");
  if (qpos.has_value()) {
    for (const at::Tensor* t : {&*qpos, &*kpos, &*lam})
      TORCH_CHECK(t->is_contiguous() && t->scalar_type() == q.scalar_type(),
                  "weighted_softmax cpu: positions and lam contiguous, of q's dtype");
    TORCH_CHECK(qpos->dim() == 3 && kpos->dim() == 3 && qpos->size(0) == q.size(0) && qpos->size(1) == q.size(2) &&
                    kpos->size(0) == q.size(0) && kpos->size(1) == k.size(2) && kpos->size(2) == qpos->size(2) &&
                    lam->numel() == q.size(1),
                "weighted_softmax cpu: qpos (B, Nq, P), kpos (B, Nk, P), lam (H)");
  }
}

}  // namespace

void wsm_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& logw,
                 const c10::optional<at::Tensor>& qpos, const c10::optional<at::Tensor>& kpos,
                 const c10::optional<at::Tensor>& lam, double scale, const at::Tensor& out, const at::Tensor& lse) {
  check(q, k, v, logw, qpos, kpos, lam);
  TORCH_CHECK(out.is_contiguous() && lse.is_contiguous() && out.scalar_type() == q.scalar_type() &&
                  lse.scalar_type() == q.scalar_type() && out.numel() == q.size(0) * q.size(1) * q.size(2) * v.size(3) &&
                  lse.numel() == q.size(0) * q.size(1) * q.size(2),
              "weighted_softmax cpu: out (B, H, Nq, E) and lse (B, H, Nq) like q");
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "wsm_forward", [&] {
    forward_impl<scalar_t>(args_of<scalar_t>(q, k, v, logw, qpos, kpos, lam, scale), out.data_ptr<scalar_t>(),
                           lse.data_ptr<scalar_t>());
  });
}

void wsm_backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& logw,
                  const c10::optional<at::Tensor>& qpos, const c10::optional<at::Tensor>& kpos,
                  const c10::optional<at::Tensor>& lam, double scale, const at::Tensor& lse, const at::Tensor& delta,
                  const at::Tensor& gout, const at::Tensor& dq, const at::Tensor& dk, const at::Tensor& dv,
                  const c10::optional<at::Tensor>& dlogw, const c10::optional<at::Tensor>& dqpos,
                  const c10::optional<at::Tensor>& dkpos, const c10::optional<at::Tensor>& dlam) {
  check(q, k, v, logw, qpos, kpos, lam);
  for (const at::Tensor* t : {&lse, &delta, &gout, &dq, &dk, &dv})
    TORCH_CHECK(t->is_contiguous() && t->scalar_type() == q.scalar_type(), "weighted_softmax cpu: backward buffers");
  TORCH_CHECK(dq.sizes() == q.sizes() && dk.sizes() == k.sizes() && dv.sizes() == v.sizes() &&
                  gout.numel() == q.size(0) * q.size(1) * q.size(2) * v.size(3) && lse.numel() == delta.numel() &&
                  lse.numel() == q.size(0) * q.size(1) * q.size(2),
              "weighted_softmax cpu: gradient sizes");
  const int64_t B = q.size(0), H = q.size(1), Nq = q.size(2), Nk = k.size(2);
  if (dlogw.has_value())
    TORCH_CHECK(dlogw->is_contiguous() && dlogw->scalar_type() == q.scalar_type() && dlogw->numel() == B * H * Nk,
                "weighted_softmax cpu: dlogw (B, H, Nk)");
  if (qpos.has_value()) {
    const int64_t P = qpos->size(2);
    TORCH_CHECK(dqpos.has_value() && dkpos.has_value() && dlam.has_value(),
                "weighted_softmax cpu: dqpos, dkpos, dlam with the distance term");
    for (const at::Tensor* t : {&*dqpos, &*dkpos, &*dlam})
      TORCH_CHECK(t->is_contiguous() && t->scalar_type() == q.scalar_type(), "weighted_softmax cpu: position grads");
    TORCH_CHECK(dqpos->numel() == B * H * Nq * P && dkpos->numel() == B * H * Nk * P && dlam->numel() == B * H,
                "weighted_softmax cpu: dqpos (B, H, Nq, P), dkpos (B, H, Nk, P), dlam (B, H)");
  }
  auto ptr = [](const c10::optional<at::Tensor>& t) { return t.has_value() ? t->data_ptr() : nullptr; };
  const Grads g{dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), ptr(dlogw), ptr(dqpos), ptr(dkpos), ptr(dlam)};
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "wsm_backward", [&] {
    backward_impl<scalar_t>(args_of<scalar_t>(q, k, v, logw, qpos, kpos, lam, scale), lse.data_ptr<scalar_t>(),
                            delta.data_ptr<scalar_t>(), gout.data_ptr<scalar_t>(), g);
  });
}

}  // namespace sciattn_wsm

#define SCIATTN_WSM_ARGS "Tensor q, Tensor k, Tensor v, Tensor logw, Tensor? qpos, Tensor? kpos, Tensor? lam, float scale"

TORCH_LIBRARY(SCIATTN_LIBRARY, lib) {
  lib.def("wsm_forward(" SCIATTN_WSM_ARGS ", Tensor(a!) out, Tensor(b!) lse) -> ()", &sciattn_wsm::wsm_forward);
  lib.def("wsm_backward(" SCIATTN_WSM_ARGS
          ", Tensor lse, Tensor delta, Tensor gout, Tensor(a!) dq, Tensor(b!) dk, Tensor(c!) dv, Tensor(d!)? dlogw, "
          "Tensor(e!)? dqpos, Tensor(f!)? dkpos, Tensor(g!)? dlam) -> ()",
          &sciattn_wsm::wsm_backward);
}