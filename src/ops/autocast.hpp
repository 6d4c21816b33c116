// Autocast: a scope inside which matrix products of f32 operands compute in bf16.
//
// Note [autocast]
// torch.autocast's idea, for the products only: inside an ops::Autocast scope (thread-local, like
// PyTorch's), ops::matmul and ops::linear of f32 operands multiply bf16 copies of them (rounded
// to nearest even) on the tensor cores, summing in f32 into an f32 result. Their backward rounds
// dy to bf16 as well and writes f32 gradients from f32 sums: dx = bf16(dy) @ bf16(W), dW =
// bf16(dy)^T @ bf16(x). linear_cross_entropy's products are bf16 the same way (its softmax and
// losses f32, its dz = softmax - onehot rounded to bf16 as it enters the gradients' products).
// qkv_attention's and scaled_dot_product_attention's products on CUDA's flash kernels go to the
// tensor cores (Note [bf16 flash attention] in src/cuda/flash_bf16.cu: Q, K, V, P and dS rounded to
// bf16 as they enter a product; the softmax and every sum f32; the CPU's attention stays f32).
// Everything else (norms, the optimizer) stays f32, and parameters stay f32 (master weights). A
// product is decided
// when it is recorded: its backward computes as its forward did, scope or not.
// Where this differs from torch.autocast: PyTorch's products return bf16 and its elementwise ops
// then run in bf16; here every activation stays f32, a gradient is never rounded to bf16 on its
// way out of a product, and the cost is f32 activations' memory and bandwidth.
// f64 operands are never cast (an f64 model is a checking tool); on the CPU the products widen the
// bf16 copies and run the f32 BLAS, the reference the CUDA path is tested against.
#pragma once

#include "tapegrad/tensor/dtype.hpp"

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

}  // namespace tapegrad::ops
