// The fused LSTM and GRU cells. PyTorch's RNN layers call these on any
// accelerator (CUDA, XPU, PrivateUse1) and they have no CPU kernel, so the
// fallback cannot serve them. Until native kernels exist, they are written
// here as a composition of tpu ops (gate arithmetic on the chip,
// activations through the counted fallback), with the same contract as
// CUDA's: forward returns a workspace that only the matching backward
// below reads.
#include <ATen/ATen.h>
#include <torch/library.h>

namespace torch_tpu {
namespace {

at::Tensor with_bias(const at::Tensor& gates, const std::optional<at::Tensor>& bias) {
  return bias.has_value() && bias->defined() ? gates + *bias : gates;
}

// Workspace: the activated gates [i, f, g, o] side by side.
std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell(const at::Tensor& input_gates,
                                                               const at::Tensor& hidden_gates, const at::Tensor& cx,
                                                               const std::optional<at::Tensor>& input_bias,
                                                               const std::optional<at::Tensor>& hidden_bias) {
  const at::Tensor gates = with_bias(with_bias(input_gates + hidden_gates, input_bias), hidden_bias);
  auto chunks = gates.chunk(4, 1);
  const at::Tensor i = chunks[0].sigmoid(), f = chunks[1].sigmoid(), g = chunks[2].tanh(), o = chunks[3].sigmoid();
  const at::Tensor cy = f * cx + i * g;
  const at::Tensor hy = o * cy.tanh();
  return {hy, cy, at::cat({i, f, g, o}, 1)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell_backward(const std::optional<at::Tensor>& grad_hy,
                                                                        const std::optional<at::Tensor>& grad_cy,
                                                                        const at::Tensor& cx, const at::Tensor& cy,
                                                                        const at::Tensor& workspace, bool has_bias) {
  auto gates = workspace.chunk(4, 1);
  const at::Tensor &i = gates[0], &f = gates[1], &g = gates[2], &o = gates[3];
  const at::Tensor tanh_cy = cy.tanh();
  const bool has_ghy = grad_hy.has_value() && grad_hy->defined();
  const bool has_gcy = grad_cy.has_value() && grad_cy->defined();
  // d(loss)/d(cy): through hy = o * tanh(cy), plus cy's own gradient.
  at::Tensor dcy = at::zeros_like(cy);
  at::Tensor d_o = at::zeros_like(o);
  if (has_ghy) {
    d_o = *grad_hy * tanh_cy;
    dcy = *grad_hy * o * (1 - tanh_cy * tanh_cy);
  }
  if (has_gcy) dcy = dcy + *grad_cy;
  const at::Tensor grad_gates = at::cat({dcy * g * i * (1 - i), dcy * cx * f * (1 - f), dcy * i * (1 - g * g),
                                         d_o * o * (1 - o)},
                                        1);
  const at::Tensor grad_cx = dcy * f;
  const at::Tensor grad_bias = has_bias ? grad_gates.sum(0) : at::Tensor();
  return {grad_gates, grad_cx, grad_bias};
}

// Workspace: [r, z, n, hx, hidden part of n] side by side, as on CUDA.
std::tuple<at::Tensor, at::Tensor> fused_gru_cell(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                                                  const at::Tensor& hx, const std::optional<at::Tensor>& input_bias,
                                                  const std::optional<at::Tensor>& hidden_bias) {
  auto ig = with_bias(input_gates, input_bias).chunk(3, 1);
  auto hg = with_bias(hidden_gates, hidden_bias).chunk(3, 1);
  const at::Tensor r = (ig[0] + hg[0]).sigmoid();
  const at::Tensor z = (ig[1] + hg[1]).sigmoid();
  const at::Tensor n = (ig[2] + r * hg[2]).tanh();
  const at::Tensor hy = n + z * (hx - n);
  return {hy, at::cat({r, z, n, hx, hg[2]}, 1)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> fused_gru_cell_backward(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
  auto parts = workspace.chunk(5, 1);
  const at::Tensor &r = parts[0], &z = parts[1], &n = parts[2], &hx = parts[3], &hn = parts[4];
  const at::Tensor d_n = grad_hy * (1 - z) * (1 - n * n);  // through tanh
  const at::Tensor d_z = grad_hy * (hx - n) * z * (1 - z);  // through sigmoid
  const at::Tensor d_r = d_n * hn * r * (1 - r);            // through sigmoid
  const at::Tensor grad_input_gates = at::cat({d_r, d_z, d_n}, 1);
  const at::Tensor grad_hidden_gates = at::cat({d_r, d_z, d_n * r}, 1);
  const at::Tensor grad_hx = grad_hy * z;
  at::Tensor grad_input_bias, grad_hidden_bias;
  if (has_bias) {
    grad_input_bias = grad_input_gates.sum(0);
    grad_hidden_bias = grad_hidden_gates.sum(0);
  }
  return {grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_thnn_fused_lstm_cell", fused_lstm_cell);
  m.impl("_thnn_fused_lstm_cell_backward_impl", fused_lstm_cell_backward);
  m.impl("_thnn_fused_gru_cell", fused_gru_cell);
  m.impl("_thnn_fused_gru_cell_backward", fused_gru_cell_backward);
}

}  // namespace torch_tpu
