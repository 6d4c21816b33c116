// The model: nanoGPT's GPT (Karpathy's model.py) from tapegrad::nn layers, with modded-nanogpt's
// value embeddings as an option. The whole model is this file; train.cpp and main.cpp train it,
// save it and sample from it. The engine differentiates every line below: there is no gradient
// code here.
//
//   ids (B, T) i32 -> x = wte(ids) + wpe(0..T-1)                      (B, T, C)
//                  -> x = block_l(x [, ve_l]) for l = 0..L-1          (B, T, C)
//                  -> logits = ln_f(x) @ wte.weight^T                (B, T, V)  (the head is tied)
//   training: loss = linear_cross_entropy(ln_f(x), wte.weight, targets), the head and the loss
//   fused in blocks of rows, without the (B, T, V) logits
//   sampling: the same forward with a KV cache per layer (ops::KVCache), ids and positions then
//   the positions after the cached ones (sample.cpp)
//
// Value embeddings (modded-nanogpt): P tables of (V, C), one row per token id, held as one
// (P*V, C) parameter "ve.weight". Plane p is added to the values of block p's attention
// (v = v + ve_p, CausalSelfAttention's value_embed), for p < P <= L. Two ways to look them up:
// - sparse: ops::value_embed_lookup, whose backward adds into a persistent buffer (never a dense
//   (P*V, C) gradient); the trainer pulls the touched rows into optim::SparseAdamW at each update;
// - dense: ops::embedding over ids offset by p*V, a dense gradient, updated by the AdamW of the
//   other parameters (for comparison: same forward, the usual path).
#pragma once

#include <tapegrad/tapegrad.hpp>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gpt {

using namespace tapegrad;

enum class ValueEmbeds : uint8_t { sparse, dense };

struct Config {
  int64_t vocab = 0;             // set from the data
  int64_t block = 64;            // T: the context length
  int64_t dim = 128;             // C
  int64_t heads = 4;             // H, dividing C
  int64_t layers = 2;            // L
  int64_t batch = 16;            // B
  double dropout = 0.0;          // after the embeddings, in each attention's output and each MLP
  int64_t value_embeds = 0;      // P planes, 0 <= P <= L
  ValueEmbeds ve_mode = ValueEmbeds::sparse;
  DType products = DType::f32;   // bf16: every product of the model in bf16 (ops::Autocast)
  bool gelu_tanh = false;        // the MLP's GELU: exact (nanoGPT's nn.GELU()) or the tanh form (GPT-2's)
  bool fused_mlp = false;        // each MLP as one op (ops::mlp), its GELU in GEMM epilogues where it can
};

struct GPT : nn::Module {
  GPT(nn::Factory& f, const Config& c)
      : config(c), wte(f, c.vocab, c.dim), wpe(f, c.block, c.dim), drop(f, c.dropout),
        ln_f(f, c.dim, 1e-5, true, false) {
    register_module("wte", wte);
    register_module("wpe", wpe);
    register_module("drop", drop);
    const auto gelu = c.gelu_tanh ? nn::Activation::gelu_tanh : nn::Activation::gelu;
    for (int64_t l = 0; l < c.layers; ++l) h.emplace_back(f, c.dim, c.heads, c.dropout, /*bias=*/false, gelu, c.fused_mlp);
    register_module("h", h);
    register_module("ln_f", ln_f);
    if (c.value_embeds > 0) register_module("ve", ve.emplace(f, c.value_embeds * c.vocab, c.dim));
    if (c.value_embeds > 0 && c.ve_mode == ValueEmbeds::dense) {  // plane p's first row, p V: (P, 1, 1) i32
      std::vector<int32_t> offsets;
      for (int64_t p = 0; p < c.value_embeds; ++p) offsets.push_back(static_cast<int32_t>(p * c.vocab));
      ve_offsets = Tensor::from_vector(offsets, Shape{c.value_embeds, 1, 1}, f.device);
    }
    // nanoGPT's initialisation: N(0, 0.02) for every matrix and embedding, the residual
    // projections N(0, 0.02 / sqrt(2 L)) (GPT-2's scaling of the paths that add into x).
    for (auto& [name, p] : named_parameters()) {
      if (p.shape().ndim() != 2) continue;
      const bool residual = name.ends_with("c_proj.weight");
      nn::init::normal_(p, 0.0, residual ? 0.02 / std::sqrt(2.0 * static_cast<double>(c.layers)) : 0.02,
                        f.generator);
    }
  }
  const char* kind() const override { return "GPT"; }

  // ids (B, T) i32 with T <= block, positions (T,) i32 = 0..T-1 -> logits (B, T, V). `buffer` is
  // the sparse value embeddings' gradient buffer (undefined: a plain gather, for evaluation).
  // `caches` (one per layer, under NoGrad): ids are the positions after the cached ones, and
  // positions their indices, Tc .. Tc + T - 1.
  Var operator()(Var ids, Var positions, const ops::ValueEmbedBuffer& buffer = {},
                 std::vector<ops::KVCache>* caches = nullptr) {
    ops::Autocast precision(config.products);  // the products' dtype (Note [autocast])
    Var logits = ops::linear(features(ids, positions, buffer, caches), wte.weight);  // tied head: (B, T, C) @ (V, C)^T
    return ops::to(logits, DType::f32);  // bf16 under autocast: the sampler's softmax wants f32
  }

  // The mean cross-entropy of the next tokens `targets` (B, T): the head and the loss as one fused
  // op, the (B, T, V) logits never whole (linear_cross_entropy).
  Var loss(Var ids, Var positions, Var targets, const ops::ValueEmbedBuffer& buffer = {}) {
    ops::Autocast precision(config.products);
    return ops::linear_cross_entropy(features(ids, positions, buffer), wte.weight, targets);
  }

  // The last layer norm's output, what the head reads: (B, T, C).
  Var features(Var ids, Var positions, const ops::ValueEmbedBuffer& buffer,
               std::vector<ops::KVCache>* caches = nullptr) {
    const int64_t B = ids.shape()[0], T = ids.shape()[1], C = config.dim, P = config.value_embeds;
    Var x = drop(wte(ids) + wpe(positions));  // (B, T, C) + (T, C)
    Var planes;                               // (P, B, T, C)
    if (P > 0) planes = ops::reshape(value_embeds(ids, buffer), {P, B, T, C});
    for (int64_t l = 0; l < config.layers; ++l) {
      Var ve_l = l < P ? ops::reshape(ops::slice(planes, 0, l, l + 1), {B, T, C}) : Var();
      x = h[static_cast<size_t>(l)](x, ve_l, caches ? &(*caches)[static_cast<size_t>(l)] : nullptr);
    }
    return ln_f(x);
  }

  // ids (B, T) -> the P planes' rows, (P, B*T, C) (sparse) or (P, B, T, C) (dense).
  Var value_embeds(Var ids, const ops::ValueEmbedBuffer& buffer) {
    const int64_t P = config.value_embeds;
    if (config.ve_mode == ValueEmbeds::sparse) {
      ops::ValueEmbedOptions options;  // the deterministic backward: a resumed run gets the same bits
      options.accumulate = ops::ValueEmbedAccumulate::deterministic;
      return ops::value_embed_lookup(ve->weight, ops::reshape(ids, {-1}), static_cast<int>(P),
                                     buffer, options);
    }
    // plane p reads rows p V .. p V + V - 1 of the same (P V, C) table: ids (1, B, T) + p V
    // (P, 1, 1) -> (P, B, T), integer arithmetic. The offsets were put on the device once, so a
    // captured step holds no copy from the host.
    return (*ve)(ops::unsqueeze(ids, 0) + ids.graph().input(ve_offsets));
  }

  Config config;
  nn::Embedding wte, wpe;
  nn::Dropout drop;
  nn::ModuleList<nn::Block> h;
  nn::LayerNorm ln_f;
  std::optional<nn::Embedding> ve;  // (P V, C), with value embeddings only
  Tensor ve_offsets;                // (P, 1, 1) i32: p V, with dense value embeddings only
};

}  // namespace gpt
