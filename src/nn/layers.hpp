// The layers: PyTorch's modules of the same names (nanoGPT's for MLP, CausalSelfAttention and
// Block), with PyTorch's parameter names, shapes and default initialisation. Each forward is ops::
// calls only; the engine differentiates it.
//
//   Linear(in, out, bias)            x (..., in) -> (..., out)          weight (out, in), bias (out,)
//   Embedding(num, dim)              ids (s..., ) i32/i64 -> (s..., dim)  weight (num, dim)
//   LayerNorm(dim, eps, affine, bias) x (..., dim) -> (..., dim)         weight (dim,), bias (dim,)
//   RMSNorm(dim, eps, affine)        x (..., dim) -> (..., dim)         weight (dim,)
//   Dropout(p)                       x -> x * mask / (1 - p) in training, x in eval
//   MLP(dim, hidden, activation)     x (..., dim) -> c_proj(act(c_fc(x))), dropped out
//   CausalSelfAttention(dim, heads)  x (B, T, dim) [, value_embed (B, T, dim) or broadcastable]
//                                    [, a KV cache] -> (B, T, dim)
//   Block(dim, heads)                x (B, T, dim) -> x + attn(ln_1(x)), then + mlp(ln_2(x))
//
// Default initialisation (torch.nn's): Linear's weight and bias U(-1/sqrt(in), 1/sqrt(in));
// Embedding's weight N(0, 1); the norms' weights 1 and biases 0. A GPT that wants nanoGPT's
// N(0, 0.02) re-fills its parameters with init::normal_ after building them.
#pragma once

#include <optional>

#include "tapegrad/nn/module.hpp"
#include "tapegrad/ops/fused/attention.hpp"
#include "tapegrad/ops/fused/norm.hpp"

namespace tapegrad::nn {

class Linear : public Module {
 public:
  Linear(Factory& f, int64_t in_features, int64_t out_features, bool bias = true);
  const char* kind() const override { return "Linear"; }
  Var operator()(Var x);
  Var weight, bias;  // bias undefined when built without one
  int64_t in_features, out_features;
};

class Embedding : public Module {
 public:
  Embedding(Factory& f, int64_t num_embeddings, int64_t embedding_dim);
  const char* kind() const override { return "Embedding"; }
  Var operator()(Var ids);
  Var weight;
  int64_t num_embeddings, embedding_dim;
};

class LayerNorm : public Module {
 public:
  LayerNorm(Factory& f, int64_t dim, double eps = 1e-5, bool elementwise_affine = true, bool bias = true);
  const char* kind() const override { return "LayerNorm"; }
  Var operator()(Var x);
  // {x + r, this norm of it} (ops::add_layer_norm: one pass over a residual stream's rows); both
  // nodes are recorded in this module's scope
  ops::SumAndNorm residual(Var x, Var r);
  Var weight, bias;  // undefined without them
  int64_t dim;
  double eps;
};

class RMSNorm : public Module {
 public:
  // eps: nullopt (PyTorch's None) is the machine epsilon of the input's dtype at each forward.
  RMSNorm(Factory& f, int64_t dim, std::optional<double> eps = std::nullopt, bool elementwise_affine = true);
  const char* kind() const override { return "RMSNorm"; }
  Var operator()(Var x);
  // {x + r, this norm of it} (ops::add_rms_norm)
  ops::SumAndNorm residual(Var x, Var r);
  Var weight;
  int64_t dim;
  std::optional<double> eps;

 private:
  double eps_for(const Var& x) const;
};

class Dropout : public Module {
 public:
  Dropout(Factory& f, double p = 0.5);
  const char* kind() const override { return "Dropout"; }
  Var operator()(Var x);  // x itself in eval mode or with p = 0
  double p;

 private:
  Generator* generator_;
};

// The MLP's nonlinearity: gelu is PyTorch's exact (erf) GELU, gelu_tanh its approximate='tanh',
// relu_squared modded-nanogpt's relu(x)^2.
enum class Activation : uint8_t { gelu, gelu_tanh, relu, relu_squared, silu };
Var activate(Var x, Activation activation);

// fused: c_fc, the activation and c_proj as one op (ops::mlp: two nodes, "linear" and "mlp", where
// the unfused MLP records three), whose activation a GEMM applies in its epilogue where it can
// (Note [the MLP's epilogues]). The same parameters and the same bits, but where a CUDA epilogue
// runs (bf16 products, gelu_tanh): within bf16's rounding there. Every activation but relu_squared
// (two ops) fuses.
class MLP : public Module {
 public:
  MLP(Factory& f, int64_t dim, int64_t hidden, Activation activation = Activation::gelu, double dropout = 0.0,
      bool bias = true, bool fused = false);
  const char* kind() const override { return "MLP"; }
  Var operator()(Var x);
  Linear c_fc, c_proj;
  Dropout dropout;
  Activation activation;
  bool fused;
};

// nanoGPT's CausalSelfAttention. `dropout` is the residual dropout after c_proj; the fused
// attention op has no dropout on its probabilities (nanoGPT's attn_dropout), so none is applied
// there. value_embed (modded-nanogpt's value embeddings) is added to v before the heads are split:
// v = v + value_embed, value_embed (B, T, dim) or any shape that broadcasts to it. With a cache
// (for sampling, under NoGrad), x holds the positions after the cached ones and attends to those
// too (ops::qkv_attention_cached): the same rows as the whole sequence at once gives.
class CausalSelfAttention : public Module {
 public:
  CausalSelfAttention(Factory& f, int64_t dim, int64_t heads, double dropout = 0.0, bool bias = true);
  const char* kind() const override { return "CausalSelfAttention"; }
  Var operator()(Var x, Var value_embed = Var(), ops::KVCache* cache = nullptr);
  Linear c_attn, c_proj;
  Dropout resid_dropout;
  int64_t dim, heads;
};

// nanoGPT's pre-norm Block; the MLP's hidden size is 4 dim.
class Block : public Module {
 public:
  Block(Factory& f, int64_t dim, int64_t heads, double dropout = 0.0, bool bias = true,
        Activation activation = Activation::gelu, bool fused_mlp = false);
  const char* kind() const override { return "Block"; }
  Var operator()(Var x, Var value_embed = Var(), ops::KVCache* cache = nullptr);  // cache: its attention's
  LayerNorm ln_1;
  CausalSelfAttention attn;
  LayerNorm ln_2;
  MLP mlp;
};

}  // namespace tapegrad::nn
