// Autocast: a scope inside which matrix products compute in bf16 and return bf16 activations.
//
// Note [autocast]
// torch.autocast's idea: inside an ops::Autocast scope (thread-local, like PyTorch's), ops::matmul
// and ops::linear of f32 operands multiply bf16 copies of them (rounded to nearest even) on the
// tensor cores, summing in f32, and return the result rounded to bf16 (Note [bf16 activations]).
// Their backward writes each gradient in its operand's dtype from f32 sums: dx = dy @ bf16(W)
// (bf16 for a bf16 x, f32 for an f32 one), dW = dy^T @ bf16(x) in f32 for an f32 parameter.
// linear_cross_entropy's products are bf16 the same way (its softmax and losses f32, its dz =
// softmax - onehot rounded to bf16 as it enters the gradients' products, x and W f32).
// qkv_attention's and scaled_dot_product_attention's products on CUDA's flash kernels go to the
// tensor cores (Note [bf16 flash attention] in src/cuda/flash_bf16.cu: Q, K, V, P and dS in bf16
// as they enter a product; the softmax and every sum f32; the CPU's attention computes in f32).
// Parameters stay f32 (master weights), and so do the optimizer and its state. A product is
// decided when it is recorded: its backward computes as its forward did, scope or not. f64
// operands are never cast (an f64 model is a checking tool); on the CPU the products widen the
// bf16 copies and run the f32 BLAS, the reference the CUDA path is tested against.
//
// Note [bf16 activations]
// What the products return is bf16, as under torch.autocast, and the ops after them take it:
// - the unary ops (gelu, relu, ...) of a bf16 x return bf16, computed in f32 and rounded once, and
//   so does their backward (Note [bf16 elementwise] in src/kernels/cpu/elementwise.cpp);
// - a binary op promotes: bf16 with bf16 gives bf16, f32 with bf16 gives f32 (the f32 residual
//   stream plus a product's bf16 output stays f32), f64 with bf16 is an error; each operand's
//   gradient comes back in its own dtype. Equal shapes run one fused kernel; a bf16 operand of a
//   broadcast is cast to f32 first (a recorded to());
// - the attention ops take bf16 operands and return bf16 (lse f32);
// - layer_norm and rms_norm normalise in f32 (a bf16 x through a recorded to(), as torch.autocast
//   runs its norms in f32) and, inside the scope, write their f32 result rounded to bf16: what
//   follows a norm in a transformer is a product, which would round it anyway, so the norm's
//   output and its gradient move half the bytes and no cast runs between them (torch.autocast
//   returns f32 there and casts in the product: the same values). Their statistics, dx and the
//   weight's gradient stay f32; dropout drops a bf16 x in f32 and rounds it back;
// - every other op wants f32 or f64 and says so ("[sum] input must be f64 or f32, got bf16");
//   ops::to(x, DType::f32) widens an activation for it.
// A product reads a bf16 operand as it is (no copy), so a chain of norms, products and activations
// moves half the bytes of f32 and makes no casts.
//
// Note [bf16 weight copies]
// Under autocast every product casts its f32 weight to bf16, every step: GPT-2's step makes 79
// such casts, 6 bytes a parameter. An optimizer that rounds each weight into a bf16 copy as it
// writes the weight (AdamW::keep_bf16_copies) makes them unnecessary: operand() (what a product
// multiplies) takes a registered copy in place of a cast when the copy is current, that is when
// the weight's storage has had no write since the copy was registered (Tensor::version). Any
// other write (copy_from, a loaded state, another optimizer) leaves the copy stale, and the
// product casts as before. A copy holds the cast's bits (kernels::to_bf16 of the same f32
// values), so no result changes; a captured step (CUDA graphs) reads the copy its own update
// wrote in the replay before. A replay moves no version on the host, so a captured product reads
// the copy its capture found whatever happened to the weight since: a weight written between
// replays by anything but the optimizer needs AdamW::refresh_bf16_copies() (writing weights
// before capturing, as gpt train does, needs nothing), and copies kept after a capture would
// never be written by the captured update (keep_bf16_copies refuses then).
#pragma once

#include <vector>

#include "tapegrad/tensor/dtype.hpp"
#include "tapegrad/tensor/tensor.hpp"

namespace tapegrad::ops {

class Autocast {
 public:
  // dtype: bf16 (f32 turns autocast off inside an outer scope); anything else is an error.
  explicit Autocast(DType dtype = DType::bf16);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  DType previous_;
};

// The dtype f32 products compute in on this thread: bf16 inside an Autocast scope, else f32.
DType autocast_dtype();
// The dtype a product of `operands` computes in: autocast_dtype() for f32, else the operands' own
// (f64 is never cast).
inline DType compute_dtype(DType operands) { return operands == DType::f32 ? autocast_dtype() : operands; }

// Registrations of bf16 weight copies (Note [bf16 weight copies]), dropped with the object.
class Bf16Copies {
 public:
  Bf16Copies() = default;
  ~Bf16Copies();
  Bf16Copies(const Bf16Copies&) = delete;
  Bf16Copies& operator=(const Bf16Copies&) = delete;

  // Registers copy (bf16, weight's shape and device) as the bf16 image of weight (f32) as it is
  // now, at its current version; registering again refreshes the version. Throws naming both
  // tensors when they do not match, or when another owner registered a copy of weight.
  void keep(const Tensor& weight, const Tensor& copy);

 private:
  std::vector<const void*> keys_;  // the weights' storages
};

// The registered bf16 copy of the f32 tensor v, shaped as v, when it is current (v's storage has
// had no write since it was registered); else an undefined tensor.
Tensor current_bf16_copy(const Tensor& v);

}  // namespace tapegrad::ops
