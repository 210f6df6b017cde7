// Entry points of the fused CPU kernels (registered as operators in ops.cpp) and their input checks.
#pragma once

#include "vec.h"

#include <c10/util/Optional.h>

namespace sciattn_box {

void check_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& logw,
                  c10::IntArrayRef n, c10::IntArrayRef m, at::TensorList starts, at::TensorList logphi);
void check_outputs(const at::Tensor& q, const at::Tensor& out, const at::Tensor& lse);
void check_gamma(const at::Tensor& q, const c10::optional<at::Tensor>& gamma);
void check_gradients(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& logw,
                     const at::Tensor& gout, const at::Tensor& dq, const at::Tensor& dk, const at::Tensor& dv,
                     const c10::optional<at::Tensor>& dlogw);
// The relative-position bias (bias.h): table (H, K0, K1, K2) and node positions (n_a, L_a) like logphi; its
// gradient (B, H, K0, K1, K2), zero on entry.
void check_bias(const at::Tensor& q, c10::IntArrayRef n, at::TensorList logphi,
                const c10::optional<at::Tensor>& table, at::TensorList upos,
                const c10::optional<at::Tensor>& dtable = c10::nullopt);
// Every check of a forward (inputs, outputs, gamma, bias) and of a backward (inputs, outputs, gradients, bias).
void check_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& logw,
                   c10::IntArrayRef n, c10::IntArrayRef m, at::TensorList starts, at::TensorList logphi,
                   const c10::optional<at::Tensor>& table, at::TensorList upos, const at::Tensor& out,
                   const at::Tensor& lse, const c10::optional<at::Tensor>& gamma);
void check_backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& logw,
                    c10::IntArrayRef n, c10::IntArrayRef m, at::TensorList starts, at::TensorList logphi,
                    const c10::optional<at::Tensor>& table, at::TensorList upos, const at::Tensor& out,
                    const at::Tensor& lse, const at::Tensor& gout, const at::Tensor& dq, const at::Tensor& dk,
                    const at::Tensor& dv, const c10::optional<at::Tensor>& dlogw,
                    const c10::optional<at::Tensor>& dtable);

// Forward: out and lse written; with gamma (H,) out += gamma_h A instead and lse is not written (inference).

// Keys in lanes, boxes shared by the queries of a run (shared_boxes.cpp).
void boxes_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& logw,
                   c10::IntArrayRef n, c10::IntArrayRef m, at::TensorList starts, at::TensorList logphi, double scale,
                   const c10::optional<at::Tensor>& table, at::TensorList upos, const at::Tensor& out,
                   const at::Tensor& lse, const c10::optional<at::Tensor>& gamma);
void boxes_backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& logw,
                    c10::IntArrayRef n, c10::IntArrayRef m, at::TensorList starts, at::TensorList logphi,
                    double scale, const c10::optional<at::Tensor>& table, at::TensorList upos, const at::Tensor& out,
                    const at::Tensor& lse, const at::Tensor& gout, const at::Tensor& dq, const at::Tensor& dk,
                    const at::Tensor& dv, const c10::optional<at::Tensor>& dlogw,
                    const c10::optional<at::Tensor>& dtable);

// Queries in lanes, residue classes of the last axis (query_lanes.cpp).
void lanes_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& logw,
                   c10::IntArrayRef n, c10::IntArrayRef m, at::TensorList starts, at::TensorList logphi, double scale,
                   int64_t a, int64_t r, const c10::optional<at::Tensor>& table, at::TensorList upos,
                   const at::Tensor& out, const at::Tensor& lse, const c10::optional<at::Tensor>& gamma);
void lanes_backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& logw,
                    c10::IntArrayRef n, c10::IntArrayRef m, at::TensorList starts, at::TensorList logphi,
                    double scale, int64_t a, int64_t r, const c10::optional<at::Tensor>& table, at::TensorList upos,
                    const at::Tensor& out, const at::Tensor& lse, const at::Tensor& gout, const at::Tensor& dq,
                    const at::Tensor& dk, const at::Tensor& dv, const c10::optional<at::Tensor>& dlogw,
                    const c10::optional<at::Tensor>& dtable);

}  // namespace sciattn_box
