// scaled_dot_product_attention on the native ATTENTION kernel, through
// PyTorch's SDPA dispatch for PrivateUse1 backends: F.scaled_dot_product_
// attention asks _fused_sdp_choice_stub which backend to use; for inputs
// the kernel takes we answer "overrideable", and PyTorch then calls
// _scaled_dot_product_fused_attention_overrideable (and, through its
// autograd formula, the _backward). Everything else (dropout, inputs of
// other ranks, a mask that needs a gradient, ...) gets "math", PyTorch's
// own decomposition, which runs on this device's native ops.
//
// On the way PyTorch has already checked the inputs (validate_sdpa_input)
// and turned a bool mask into an additive one (-inf where false). A mask
// reaches the kernel as a strided view broadcast to [B, H, L, S] (stride
// 0 in broadcast dims, no copy). enable_gqa is not passed to the
// overrideable op: the choice admits differing head counts only with it,
// and the kernel then reads kv head h / (H / Hk) itself.
#include <ATen/Context.h>
#include <ATen/ExpandUtils.h>
#include <ATen/SDPBackend.h>
#include <ATen/core/grad_mode.h>
#include <ATen/native/transformers/attention.h>
#include <torch/library.h>

#include <cmath>

#include "core/glue.h"

namespace torch_tpu {
namespace {

bool kernel_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16;
}

// Whether the native kernel computes these inputs as SDPA defines them.
bool kernel_takes(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                  const std::optional<at::Tensor>& mask, double dropout_p, bool enable_gqa) {
  if (dropout_p != 0.0 || q.is_nested() || k.is_nested() || v.is_nested()) return false;
  const int64_t nd = q.dim();
  if ((nd != 3 && nd != 4) || k.dim() != nd || v.dim() != nd) return false;
  if (!kernel_dtype(q.scalar_type()) || k.scalar_type() != q.scalar_type() || v.scalar_type() != q.scalar_type())
    return false;
  // E == 0 makes the default scale infinite; the decomposition's
  // arithmetic on it is what SDPA means there.
  if (q.size(-1) == 0 || k.size(-1) != q.size(-1) || k.size(-2) != v.size(-2)) return false;
  if (k.size(0) != q.size(0) || v.size(0) != q.size(0)) return false;
  if (nd == 4) {
    const int64_t h = q.size(1), hk = k.size(1);
    if (v.size(1) != hk) return false;
    if (h != hk && !(enable_gqa && hk > 0 && h % hk == 0)) return false;
  }
  if (mask.has_value() && mask->defined()) {
    const at::Tensor& m = *mask;
    if (m.is_nested() || (m.scalar_type() != at::kBool && !at::isFloatingType(m.scalar_type()))) return false;
    // The kernel computes no gradient for the mask.
    if (m.requires_grad() && at::GradMode::is_enabled()) return false;
    std::vector<int64_t> scores(q.sizes().begin(), q.sizes().end() - 1);
    scores.push_back(k.size(-2));
    if (m.dim() > nd || !at::is_expandable_to(m.sizes(), scores)) return false;
  }
  return true;
}

// The backend choice (PrivateUse1's _fused_sdp_choice_stub, and the
// aten::_fused_sdp_choice op). The fused kernel counts as enabled under
// the overrideable flag or the flash one (code that picks flash for CUDA
// or CPU keeps working); math under its own flag, as PyTorch's
// sdpa_kernel context manager sets them.
int64_t fused_sdp_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const std::optional<at::Tensor>& mask, double dropout_p, bool /*is_causal*/,
                         std::optional<double> /*scale*/, bool enable_gqa) {
  // The decomposition would fail later on an integer matmul (as on CPU,
  // with a RuntimeError); say what is wrong instead.
  TORCH_CHECK(at::isFloatingType(q.scalar_type()), "scaled_dot_product_attention: expected query, key and value "
              "of a floating dtype, got ", q.scalar_type());
  const at::Context& ctx = at::globalContext();
  const bool fused = ctx.userEnabledOverrideableSDP() || ctx.userEnabledFlashSDP();
  if (fused && kernel_takes(q, k, v, mask, dropout_p, enable_gqa))
    return static_cast<int64_t>(at::SDPBackend::overrideable);
  TORCH_CHECK(ctx.userEnabledMathSDP(), "scaled_dot_product_attention: no viable backend on tpu: the native "
              "kernel ", fused ? "does not take these inputs (it needs 3-d or 4-d float query, key and value, "
              "dropout_p 0 and a mask without gradient)" : "is disabled (overrideable and flash)",
              " and the math backend is disabled");
  return static_cast<int64_t>(at::SDPBackend::math);
}

// q, k, v (and what derives from them) as the kernel's 4-d views: a 3-d
// [B, L, E] is one head, [B, 1, L, E].
at::Tensor as_4d(const at::Tensor& t) { return t.dim() == 3 ? t.unsqueeze(1) : t; }

void check_operands(const char* name, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  TORCH_CHECK((q.dim() == 3 || q.dim() == 4) && k.dim() == q.dim() && v.dim() == q.dim(), name,
              ": query, key and value must all be 3-d or all 4-d, got ", q.dim(), "-d, ", k.dim(), "-d and ",
              v.dim(), "-d");
  TORCH_CHECK_NOT_IMPLEMENTED(kernel_dtype(q.scalar_type()), name, ": dtype ", q.scalar_type(),
                              " is not supported (float32, float64, float16, bfloat16)");
  TORCH_CHECK(k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type(), name,
              ": query, key and value must share a dtype, got ", q.scalar_type(), ", ", k.scalar_type(),
              " and ", v.scalar_type());
  const at::Tensor q4 = as_4d(q), k4 = as_4d(k), v4 = as_4d(v);
  TORCH_CHECK(k4.size(0) == q4.size(0) && v4.size(0) == q4.size(0) && k4.size(3) == q4.size(3) &&
                  v4.size(1) == k4.size(1) && v4.size(2) == k4.size(2),
              name, ": query ", q.sizes(), ", key ", k.sizes(), " and value ", v.sizes(),
              " do not fit (key [B, Hk, S, E] and value [B, Hk, S, Ev] for query [B, H, L, E])");
  const int64_t h = q4.size(1), hk = k4.size(1);
  TORCH_CHECK(hk == 0 ? h == 0 : h % hk == 0, name, ": ", h, " query heads are not a multiple of ", hk,
              " key/value heads");
}

// The mask as the record's [B, H, L, S] view (absent when undefined).
// `view` keeps the expanded view alive until the record is submitted.
tpu_tensor describe_mask(const at::Tensor& mask, const at::Tensor& q4, const at::Tensor& k4, bool three_d,
                         at::Tensor& view, const char* name) {
  if (!mask.defined()) return tpu_tensor{};
  TORCH_CHECK(mask.scalar_type() == at::kBool || at::isFloatingType(mask.scalar_type()), name,
              ": attn_mask must be bool or floating, got ", mask.scalar_type());
  const int64_t b = q4.size(0), h = q4.size(1), l = q4.size(2), s = k4.size(2);
  const std::vector<int64_t> target =
      three_d ? std::vector<int64_t>{b, l, s} : std::vector<int64_t>{b, h, l, s};
  TORCH_CHECK(mask.dim() <= static_cast<int64_t>(target.size()) && at::is_expandable_to(mask.sizes(), target), name,
              ": attn_mask of sizes ", mask.sizes(), " does not broadcast to the scores' ", at::IntArrayRef(target));
  check_in_storage(mask, name);
  view = mask.expand(target);
  if (three_d) view = view.unsqueeze(1);
  return describe(view, name);
}

using Forward = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor,
                           at::Tensor, at::Tensor>;

Forward sdpa_forward(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                     const std::optional<at::Tensor>& attn_bias, double dropout_p, bool is_causal,
                     bool return_debug_mask, std::optional<double> scale) {
  const char* name = "aten::_scaled_dot_product_fused_attention_overrideable";
  const at::Tensor bias = attn_bias.value_or(at::Tensor());
  check_same_device(name, query.device(), {{"key", &key}, {"value", &value}, {"attn_bias", &bias}});
  TORCH_CHECK(dropout_p == 0.0, name, ": dropout_p must be 0, got ", dropout_p,
              " (scaled_dot_product_attention sends dropout to the math backend)");
  TORCH_CHECK(!return_debug_mask, name, ": return_debug_mask is not supported");
  check_operands(name, query, key, value);
  const bool three_d = query.dim() == 3;
  const at::Tensor q = as_4d(query), k = as_4d(key), v = as_4d(value);
  const int64_t b = q.size(0), h = q.size(1), l = q.size(2), e = q.size(3), s = k.size(2), ev = v.size(3);
  at::Tensor out = at::empty({b, h, l, ev}, query.options());
  // f32 statistics for f32/f16/bf16 (their compute type), f64 for f64.
  const at::ScalarType stat = query.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor lse = at::empty({b, h, l}, query.options().dtype(stat));
  at::Tensor mask_view;
  tpu_op op{};
  op.code = TPU_OP_ATTENTION;
  op.fn = TPU_ATTENTION_FORWARD;
  op.n_in = 4;
  op.n_aux = 1;
  op.in[3] = describe_mask(bias, q, k, three_d, mask_view, name);
  if (lse.numel() > 0) {
    for (const at::Tensor* t : {&query, &key, &value}) check_in_storage(*t, name);
    op.in[0] = describe(q, name);
    op.in[1] = describe(k, name);
    op.in[2] = describe(v, name);
    op.out = describe(out, name);
    op.aux[0] = describe(lse, name);
    op.p.attn.scale = scale.has_value() ? *scale : 1.0 / std::sqrt(static_cast<double>(e));
    op.p.attn.is_causal = is_causal;
    submit(query.device().index(), op, name);
  }
  if (three_d) {
    out = out.squeeze(1);
    lse = lse.squeeze(1);
  }
  // No sequence offsets (dense inputs), no dropout seeds, no debug mask.
  return {out, lse, at::Tensor(), at::Tensor(), c10::SymInt(l), c10::SymInt(s), at::Tensor(), at::Tensor(),
          at::Tensor()};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> sdpa_backward(
    const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& attn_bias, std::array<bool, 4> grad_input_mask, const at::Tensor& out,
    const at::Tensor& logsumexp, const at::Tensor& /*cum_seq_q*/, const at::Tensor& /*cum_seq_k*/,
    c10::SymInt /*max_q*/, c10::SymInt /*max_k*/, double dropout_p, bool is_causal,
    const at::Tensor& /*philox_seed*/, const at::Tensor& /*philox_offset*/, std::optional<double> scale) {
  const char* name = "aten::_scaled_dot_product_fused_attention_overrideable_backward";
  if (!grad_out.defined()) return {};
  check_same_device(name, query.device(),
                    {{"grad_out", &grad_out}, {"key", &key}, {"value", &value}, {"attn_bias", &attn_bias},
                     {"out", &out}, {"logsumexp", &logsumexp}});
  TORCH_CHECK(dropout_p == 0.0, name, ": dropout_p must be 0, got ", dropout_p);
  TORCH_CHECK(!(grad_input_mask[3] && attn_bias.defined()), name,
              ": the gradient of attn_mask is not computed by the native kernel (scaled_dot_product_attention "
              "sends a mask that requires grad to the math backend)");
  check_operands(name, query, key, value);
  const bool three_d = query.dim() == 3;
  const at::Tensor q = as_4d(query), k = as_4d(key), v = as_4d(value), g = as_4d(grad_out);
  const int64_t b = q.size(0), h = q.size(1), l = q.size(2), e = q.size(3);
  TORCH_CHECK(grad_out.dim() == query.dim() && g.size(0) == b && g.size(1) == h && g.size(2) == l &&
                  g.size(3) == v.size(3),
              name, ": grad_out has sizes ", grad_out.sizes(), ", expected the output's");
  TORCH_CHECK(grad_out.scalar_type() == query.scalar_type(), name, ": grad_out is ", grad_out.scalar_type(),
              " but query is ", query.scalar_type());
  // The forward's results: the kernel reads them instead of recomputing.
  TORCH_CHECK(out.defined() && out.sizes() == grad_out.sizes() && out.scalar_type() == query.scalar_type(), name,
              ": out must be the forward's output (sizes ", grad_out.sizes(), ", dtype ", query.scalar_type(),
              "), got ", out.defined() ? out.sizes() : at::IntArrayRef{}, out.defined() ? " " : "undefined",
              out.defined() ? c10::toString(out.scalar_type()) : "");
  const at::ScalarType stat = query.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const at::Tensor lse4 = logsumexp.defined() && logsumexp.dim() == query.dim() - 1
                              ? (three_d ? logsumexp.unsqueeze(1) : logsumexp)
                              : at::Tensor();
  TORCH_CHECK(lse4.defined() && lse4.dim() == 3 && lse4.size(0) == b && lse4.size(1) == h && lse4.size(2) == l &&
                  logsumexp.scalar_type() == stat,
              name, ": logsumexp must be the forward's (sizes ", grad_out.sizes().slice(0, grad_out.dim() - 1),
              ", dtype ", stat, "), got ", logsumexp.defined() ? logsumexp.sizes() : at::IntArrayRef{},
              logsumexp.defined() ? " " : "undefined", logsumexp.defined() ? c10::toString(logsumexp.scalar_type()) : "");
  const auto contiguous = at::MemoryFormat::Contiguous;
  at::Tensor dq = at::empty(q.sizes(), query.options().memory_format(contiguous));
  at::Tensor dk = at::empty(k.sizes(), key.options().memory_format(contiguous));
  at::Tensor dv = at::empty(v.sizes(), value.options().memory_format(contiguous));
  at::Tensor mask_view, scratch;
  tpu_op op{};
  op.code = TPU_OP_ATTENTION;
  op.fn = TPU_ATTENTION_BACKWARD;
  op.n_in = 7;
  op.n_aux = 2;
  op.in[4] = describe_mask(attn_bias, q, k, three_d, mask_view, name);
  if (dq.numel() > 0 || dk.numel() > 0 || dv.numel() > 0) {
    for (const at::Tensor* t : {&grad_out, &query, &key, &value, &out, &logsumexp}) check_in_storage(*t, name);
    op.in[0] = describe(g, name);
    op.in[1] = describe(q, name);
    op.in[2] = describe(k, name);
    op.in[3] = describe(v, name);
    op.in[5] = describe(as_4d(out), name);
    op.in[6] = describe(lse4, name);
    op.out = describe(dq, name);
    op.aux[0] = describe(dk, name);
    op.aux[1] = describe(dv, name);
    op.p.attn.scale = scale.has_value() ? *scale : 1.0 / std::sqrt(static_cast<double>(e));
    op.p.attn.is_causal = is_causal;
    // Each query row's statistics (and, for few heads, parts of dq) pass
    // between the phases through device scratch.
    scratch = attach_scratch(op, query);
    submit(query.device().index(), op, name);
  }
  auto shaped = [&](const at::Tensor& t, bool wanted) {
    if (!wanted) return at::Tensor();
    return three_d ? t.squeeze(1) : t;
  };
  return {shaped(dq, grad_input_mask[0]), shaped(dk, grad_input_mask[1]), shaped(dv, grad_input_mask[2]),
          at::Tensor()};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_fused_sdp_choice", fused_sdp_choice);
  m.impl("_scaled_dot_product_fused_attention_overrideable", sdpa_forward);
  m.impl("_scaled_dot_product_fused_attention_overrideable_backward", sdpa_backward);
}

}  // namespace torch_tpu

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torch_tpu::fused_sdp_choice)
}  // namespace at::native
