// Operator registration of the fused CPU box-attention kernels and their input checks. The library name is
// passed by the loader (sciattn/multipole/_cpu_extension.py), one per build, so builds never collide.
#include "kernels.h"

#include <ATen/Dispatch.h>
#include <torch/library.h>

namespace sciattn_box {

void check_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& logw,
                  c10::IntArrayRef n, c10::IntArrayRef m, at::TensorList starts, at::TensorList logphi) {
  TORCH_CHECK(q.device().is_cpu() && k.device().is_cpu() && v.device().is_cpu() && logw.device().is_cpu(),
              "box_attention: expected CPU tensors, got q on ", q.device());
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && logw.dim() == 2,
              "box_attention: expected q, k, v (B, H, D, N) and logw (B, N)");
  TORCH_CHECK(q.is_contiguous() && k.is_contiguous() && v.is_contiguous() && logw.is_contiguous(),
              "box_attention: expected contiguous q, k, v, logw");
  TORCH_CHECK(k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type() &&
                  logw.scalar_type() == q.scalar_type(),
              "box_attention: expected q, k, v, logw of one dtype");
  TORCH_CHECK(k.size(0) == q.size(0) && v.size(0) == q.size(0) && logw.size(0) == q.size(0) &&
                  k.size(1) == q.size(1) && v.size(1) == q.size(1) && k.size(2) == q.size(2) &&
                  v.size(2) == q.size(2) && v.size(3) == k.size(3) && logw.size(1) == k.size(3),
              "box_attention: q, k, v, logw sizes do not match");
  TORCH_CHECK(n.size() == 3 && m.size() == 3 && starts.size() == 3 && logphi.size() == 3,
              "box_attention: expected 3 axes");
  TORCH_CHECK(n[0] * n[1] * n[2] == q.size(3) && m[0] * m[1] * m[2] == k.size(3), "box_attention: grid sizes");
  for (int a = 0; a < 3; ++a) {
    TORCH_CHECK(starts[a].numel() == n[a] && starts[a].scalar_type() == at::kLong && starts[a].is_contiguous(),
                "box_attention: starts");
    TORCH_CHECK(logphi[a].dim() == 2 && logphi[a].size(0) == n[a] && logphi[a].is_contiguous() &&
                    logphi[a].scalar_type() == q.scalar_type() && logphi[a].size(1) <= m[a],
                "box_attention: logphi");
    const int64_t* st = starts[a].data_ptr<int64_t>();
    for (int64_t i = 0; i < n[a]; ++i)
      TORCH_CHECK(st[i] >= 0 && st[i] + logphi[a].size(1) <= m[a], "box_attention: a box leaves the key grid");
  }
}

void check_outputs(const at::Tensor& q, const at::Tensor& out, const at::Tensor& lse) {
  TORCH_CHECK(out.is_contiguous() && lse.is_contiguous() && out.sizes() == q.sizes() &&
                  lse.numel() == q.size(0) * q.size(1) * q.size(3) && out.scalar_type() == q.scalar_type() &&
                  lse.scalar_type() == q.scalar_type(),
              "box_attention: out (B, H, D, N) and lse (B, H, N) like q");
}

void check_gamma(const at::Tensor& q, const c10::optional<at::Tensor>& gamma) {
  if (gamma.has_value())
    TORCH_CHECK(gamma->dim() == 1 && gamma->size(0) == q.size(1) && gamma->is_contiguous() &&
                    gamma->scalar_type() == q.scalar_type(),
                "box_attention: gamma (H,) of q's dtype");
}

void check_gradients(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& logw,
                     const at::Tensor& gout, const at::Tensor& dq, const at::Tensor& dk, const at::Tensor& dv,
                     const c10::optional<at::Tensor>& dlogw) {
  for (const at::Tensor* t : {&gout, &dq, &dk, &dv})
    TORCH_CHECK(t->is_contiguous() && t->scalar_type() == q.scalar_type(), "box_attention: backward buffers");
  TORCH_CHECK(dq.sizes() == q.sizes() && dk.sizes() == k.sizes() && dv.sizes() == v.sizes() &&
                  gout.sizes() == q.sizes(),
              "box_attention: gradient sizes");
  if (dlogw.has_value())
    TORCH_CHECK(dlogw->sizes() == logw.sizes() && dlogw->is_contiguous() && dlogw->scalar_type() == q.scalar_type(),
                "box_attention: dlogw");
}

void check_bias(const at::Tensor& q, c10::IntArrayRef n, at::TensorList logphi,
                const c10::optional<at::Tensor>& table, at::TensorList upos, const c10::optional<at::Tensor>& dtable) {
  if (!table.has_value()) {
    TORCH_CHECK(upos.empty() && !dtable.has_value(), "box_attention: node positions or dtable without a bias table");
    return;
  }
  const at::Tensor& t = *table;
  TORCH_CHECK(t.dim() == 4 && t.size(0) == q.size(1) && t.is_contiguous() && t.scalar_type() == q.scalar_type(),
              "box_attention: bias table (H, K0, K1, K2) of q's dtype");
  TORCH_CHECK(upos.size() == 3, "box_attention: expected node positions of 3 axes");
  for (int a = 0; a < 3; ++a) {
    TORCH_CHECK(upos[a].dim() == 2 && upos[a].size(0) == n[a] && upos[a].size(1) == logphi[a].size(1) &&
                    upos[a].is_contiguous() && upos[a].scalar_type() == q.scalar_type(),
                "box_attention: node positions (n_a, L_a) like logphi");
  }
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "check_bias", [&] {
    for (int a = 0; a < 3; ++a) {
      const scalar_t* u = upos[a].data_ptr<scalar_t>();
      const scalar_t top = static_cast<scalar_t>(t.size(1 + a) - 1);
      for (int64_t i = 0; i < upos[a].numel(); ++i)
        TORCH_CHECK(u[i] >= 0 && u[i] <= top, "box_attention: node positions outside the table");
    }
  });
  if (dtable.has_value())
    TORCH_CHECK(dtable->dim() == 5 && dtable->size(0) == q.size(0) && dtable->size(1) == t.size(0) &&
                    dtable->size(2) == t.size(1) && dtable->size(3) == t.size(2) && dtable->size(4) == t.size(3) &&
                    dtable->is_contiguous() && dtable->scalar_type() == q.scalar_type(),
                "box_attention: dtable (B, H, K0, K1, K2) of q's dtype");
}

void check_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& logw,
                   c10::IntArrayRef n, c10::IntArrayRef m, at::TensorList starts, at::TensorList logphi,
                   const c10::optional<at::Tensor>& table, at::TensorList upos, const at::Tensor& out,
                   const at::Tensor& lse, const c10::optional<at::Tensor>& gamma) {
  check_inputs(q, k, v, logw, n, m, starts, logphi);
  check_outputs(q, out, lse);
  check_gamma(q, gamma);
  check_bias(q, n, logphi, table, upos);
}

void check_backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& logw,
                    c10::IntArrayRef n, c10::IntArrayRef m, at::TensorList starts, at::TensorList logphi,
                    const c10::optional<at::Tensor>& table, at::TensorList upos, const at::Tensor& out,
                    const at::Tensor& lse, const at::Tensor& gout, const at::Tensor& dq, const at::Tensor& dk,
                    const at::Tensor& dv, const c10::optional<at::Tensor>& dlogw,
                    const c10::optional<at::Tensor>& dtable) {
  check_inputs(q, k, v, logw, n, m, starts, logphi);
  check_outputs(q, out, lse);
  check_gradients(q, k, v, logw, gout, dq, dk, dv, dlogw);
  check_bias(q, n, logphi, table, upos, dtable);
  TORCH_CHECK(table.has_value() == dtable.has_value(), "box_attention: a bias table needs dtable");
}

}  // namespace sciattn_box

#define SCIATTN_BOX_ARGS \
  "Tensor q, Tensor k, Tensor v, Tensor logw, int[] n, int[] m, Tensor[] starts, Tensor[] logphi, float scale"
#define SCIATTN_BOX_BIAS "Tensor? table, Tensor[] upos"
#define SCIATTN_BOX_GRADS \
  "Tensor out, Tensor lse, Tensor gout, Tensor(a!) dq, Tensor(b!) dk, Tensor(c!) dv, Tensor(d!)? dlogw, " \
  "Tensor(e!)? dtable"

TORCH_LIBRARY(SCIATTN_LIBRARY, lib) {
  lib.def("boxes_forward(" SCIATTN_BOX_ARGS ", " SCIATTN_BOX_BIAS
          ", Tensor(a!) out, Tensor(b!) lse, Tensor? gamma) -> ()",
          &sciattn_box::boxes_forward);
  lib.def("boxes_backward(" SCIATTN_BOX_ARGS ", " SCIATTN_BOX_BIAS ", " SCIATTN_BOX_GRADS ") -> ()",
          &sciattn_box::boxes_backward);
  lib.def("lanes_forward(" SCIATTN_BOX_ARGS ", int a, int r, " SCIATTN_BOX_BIAS
          ", Tensor(a!) out, Tensor(b!) lse, Tensor? gamma) -> ()",
          &sciattn_box::lanes_forward);
  lib.def("lanes_backward(" SCIATTN_BOX_ARGS ", int a, int r, " SCIATTN_BOX_BIAS ", " SCIATTN_BOX_GRADS ") -> ()",
          &sciattn_box::lanes_backward);
}
