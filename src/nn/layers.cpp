// The layers (layers.hpp): construction (sizes checked, parameters made and initialised in
// PyTorch's order) and forwards made of ops.
#include "tapegrad/nn/layers.hpp"

#include <cmath>
#include <cstdio>
#include <limits>

#include "tapegrad/nn/checks.hpp"
#include "tapegrad/nn/init.hpp"
#include "tapegrad/ops/fused/attention.hpp"
#include "tapegrad/ops/fused/mlp.hpp"
#include "tapegrad/ops/fused/norm.hpp"
#include "tapegrad/ops/ops.hpp"

namespace tapegrad::nn {

using detail::fresh;
using detail::need_positive;
using detail::need_probability;
using detail::times;

namespace {

// A composite layer's sizes, checked before any of its children makes a parameter (a refused
// construction leaves the graph as it was). Each returns dim.
int64_t checked_mlp(int64_t dim, int64_t hidden, double p) {
  need_positive("MLP", "dim", dim);
  need_positive("MLP", "hidden", hidden);
  need_probability("MLP", p);
  return dim;
}
int64_t checked_attention(const char* kind, int64_t dim, int64_t heads, double p) {
  need_positive(kind, "dim", dim);
  need_positive(kind, "heads", heads);
  if (dim % heads != 0)
    throw Error(std::string("[") + kind + "] dim " + std::to_string(dim) + " is not a multiple of heads " +
                std::to_string(heads));
  need_probability(kind, p);
  times(kind, "dim", 4, dim);
  return dim;
}

void need_last(const std::string& where, const char* what, const Var& x, int64_t extent) {
  const Shape& s = x.shape();
  if (s.ndim() == 0 || s[s.ndim() - 1] != extent)
    throw Error(where + what + " must be (..., " + std::to_string(extent) + "), got " + s.str());
}

}  // namespace

// ---- Linear: y = x W^T + b;  dx = dy W, dW = dy^T x, db = sum dy (ops::linear)
Linear::Linear(Factory& f, int64_t in, int64_t out, bool with_bias) : in_features(in), out_features(out) {
  need_positive("Linear", "in_features", in);
  need_positive("Linear", "out_features", out);
  weight = register_parameter("weight", fresh(f, "Linear", "weight", Shape{out, in}), f.graph);
  init::kaiming_uniform_(weight, f.generator, std::sqrt(5.0));  // U(-1/sqrt(in), 1/sqrt(in))
  if (with_bias) {
    bias = register_parameter("bias", fresh(f, "Linear", "bias", Shape{out}), f.graph);
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    init::uniform_(bias, -bound, bound, f.generator);
  }
}

Var Linear::operator()(Var x) {
  const auto s = scope(x.graph());
  need_last(where(), "x", x, in_features);
  return labelled(ops::linear(x, weight, bias));
}

// ---- Embedding: y[s] = weight[ids[s]];  dweight[i] = sum of dy over the positions holding i
Embedding::Embedding(Factory& f, int64_t num, int64_t dim) : num_embeddings(num), embedding_dim(dim) {
  need_positive("Embedding", "num_embeddings", num);
  need_positive("Embedding", "embedding_dim", dim);
  weight = register_parameter("weight", fresh(f, "Embedding", "weight", Shape{num, dim}), f.graph);
  init::normal_(weight, 0.0, 1.0, f.generator);
}

Var Embedding::operator()(Var ids) {
  const auto s = scope(ids.graph());
  return labelled(ops::embedding(weight, ids));
}

// ---- LayerNorm over the last axis (ops::layer_norm)
LayerNorm::LayerNorm(Factory& f, int64_t d, double e, bool elementwise_affine, bool with_bias) : dim(d), eps(e) {
  need_positive("LayerNorm", "dim", d);
  if (!(e >= 0 && std::isfinite(e))) throw Error("[LayerNorm] eps must be finite and >= 0");
  if (elementwise_affine) {
    weight = register_parameter("weight", fresh(f, "LayerNorm", "weight", Shape{d}), f.graph);
    init::ones_(weight);
    if (with_bias) {
      bias = register_parameter("bias", fresh(f, "LayerNorm", "bias", Shape{d}), f.graph);
      init::zeros_(bias);
    }
  }
}

Var LayerNorm::operator()(Var x) {
  const auto s = scope(x.graph());
  need_last(where(), "x", x, dim);
  return labelled(ops::layer_norm(x, weight, bias, eps));
}

ops::SumAndNorm LayerNorm::residual(Var x, Var r) {
  const auto s = scope(x.graph());
  need_last(where(), "x", x, dim);
  ops::SumAndNorm out = ops::add_layer_norm(x, r, weight, bias, eps);
  out.normed = labelled(out.normed);
  return out;
}

// ---- RMSNorm over the last axis (ops::rms_norm)
RMSNorm::RMSNorm(Factory& f, int64_t d, std::optional<double> e, bool elementwise_affine) : dim(d), eps(e) {
  need_positive("RMSNorm", "dim", d);
  if (e && !(*e >= 0 && std::isfinite(*e))) throw Error("[RMSNorm] eps must be finite and >= 0");
  if (elementwise_affine) {
    weight = register_parameter("weight", fresh(f, "RMSNorm", "weight", Shape{d}), f.graph);
    init::ones_(weight);
  }
}

// eps, or the machine epsilon of x's dtype (of the f32 it is normalised in, for an autocast bf16 x)
double RMSNorm::eps_for(const Var& x) const {
  if (eps) return *eps;
  return x.dtype() == DType::f64 ? std::numeric_limits<double>::epsilon()
                                 : static_cast<double>(std::numeric_limits<float>::epsilon());
}

Var RMSNorm::operator()(Var x) {
  const auto s = scope(x.graph());
  need_last(where(), "x", x, dim);
  return labelled(ops::rms_norm(x, weight, eps_for(x)));
}

ops::SumAndNorm RMSNorm::residual(Var x, Var r) {
  const auto s = scope(x.graph());
  need_last(where(), "x", x, dim);
  ops::SumAndNorm out = ops::add_rms_norm(x, r, weight, eps_for(x));
  out.normed = labelled(out.normed);
  return out;
}

// ---- Dropout (ops::dropout; the identity in eval mode)
Dropout::Dropout(Factory& f, double prob) : p(prob), generator_(&f.generator) { need_probability("Dropout", prob); }

Var Dropout::operator()(Var x) {
  if (!training() || p == 0.0) return x;
  const auto s = scope(x.graph());
  return labelled(ops::dropout(x, p, *generator_, true));
}

// ---- MLP: dropout(c_proj(act(c_fc(x))))
Var activate(Var x, Activation activation) {
  switch (activation) {
    case Activation::gelu: return ops::gelu(x);
    case Activation::gelu_tanh: return ops::gelu(x, ops::Gelu::tanh);
    case Activation::relu: return ops::relu(x);
    case Activation::relu_squared: return ops::square(ops::relu(x));
    case Activation::silu: return ops::silu(x);
  }
  throw Error("[activate] unknown activation");
}

MLP::MLP(Factory& f, int64_t dim, int64_t hidden, Activation act, double p, bool bias, bool fuse)
    : c_fc(f, checked_mlp(dim, hidden, p), hidden, bias), c_proj(f, hidden, dim, bias), dropout(f, p), activation(act),
      fused(fuse) {
  if (fused && activation == Activation::relu_squared)
    throw Error("[MLP] a fused MLP takes gelu, gelu_tanh, relu or silu; relu_squared is two ops (relu, then square)");
  register_module("c_fc", c_fc);
  register_module("c_proj", c_proj);
  register_module("dropout", dropout);
}

namespace {

ops::MlpActivation mlp_activation(Activation activation) {
  switch (activation) {
    case Activation::gelu: return ops::MlpActivation::gelu;
    case Activation::gelu_tanh: return ops::MlpActivation::gelu_tanh;
    case Activation::relu: return ops::MlpActivation::relu;
    case Activation::silu: return ops::MlpActivation::silu;
    case Activation::relu_squared: break;
  }
  throw Error("[MLP] a fused MLP takes gelu, gelu_tanh, relu or silu; relu_squared is two ops (relu, then square)");
}

}  // namespace

Var MLP::operator()(Var x) {
  const auto s = scope(x.graph());
  if (fused)
    return dropout(labelled(ops::mlp(x, c_fc.weight, c_proj.weight, mlp_activation(activation), c_fc.bias, c_proj.bias)));
  return dropout(c_proj(labelled(activate(c_fc(x), activation))));
}

// ---- CausalSelfAttention
CausalSelfAttention::CausalSelfAttention(Factory& f, int64_t d, int64_t h, double p, bool bias)
    : c_attn(f, checked_attention("CausalSelfAttention", d, h, p), 3 * d, bias), c_proj(f, d, d, bias),
      resid_dropout(f, p), dim(d), heads(h) {
  register_module("c_attn", c_attn);
  register_module("c_proj", c_proj);
  register_module("resid_dropout", resid_dropout);
}

// x (B, T, C) -> qkv (B, T, 3C) -> q, k, v (B, T, C) each; v += value_embed; heads (B, H, T, C/H);
// y = attention(q, k, v, causal) back to (B, T, C) -> c_proj -> dropout. The split, the head
// permutes and the value add happen inside ops::qkv_attention, without copies.
Var CausalSelfAttention::operator()(Var x, Var value_embed, ops::KVCache* cache) {
  const auto in_scope = scope(x.graph());
  const Shape& s = x.shape();
  if (s.ndim() != 3 || s[2] != dim)
    throw Error(where() + "x must be (B, T, " + std::to_string(dim) + "), got " + s.str());
  if (value_embed.defined()) {
    const Shape& e = value_embed.shape();
    bool fits = e.ndim() <= 3;
    for (int i = 1; fits && i <= e.ndim(); ++i) fits = e[e.ndim() - i] == 1 || e[e.ndim() - i] == s[3 - i];
    if (!fits)
      throw Error(where() + "value_embed of shape " + e.str() + " does not broadcast to v's shape " + s.str());
  }
  Var y = cache ? ops::qkv_attention_cached(c_attn(x), heads, *cache, value_embed)
                : ops::qkv_attention(c_attn(x), heads, /*causal=*/true, value_embed);
  return resid_dropout(c_proj(labelled(y)));
}

// ---- Block: x + attn(ln_1(x)), then + mlp(ln_2(x))
Block::Block(Factory& f, int64_t dim, int64_t heads, double p, bool bias, Activation activation, bool fused_mlp)
    : ln_1(f, checked_attention("Block", dim, heads, p), 1e-5, true, bias), attn(f, dim, heads, p, bias),
      ln_2(f, dim, 1e-5, true, bias), mlp(f, dim, 4 * dim, activation, p, bias, fused_mlp) {
  register_module("ln_1", ln_1);
  register_module("attn", attn);
  register_module("ln_2", ln_2);
  register_module("mlp", mlp);
}

Var Block::operator()(Var x, Var value_embed, ops::KVCache* cache) {
  const auto s = scope(x.graph());
  // x + attn(ln_1(x)), and ln_2 of that sum, from one pass over the stream (ops::add_layer_norm)
  const auto [sum, h] = ln_2.residual(x, attn(ln_1(x), value_embed, cache));
  return labelled(sum + mlp(h));
}

}  // namespace tapegrad::nn
