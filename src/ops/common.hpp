// Shared checks for op front-ends: every message starts with the op name in brackets.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "tapegrad/graph/graph.hpp"
#include "tapegrad/kernels/kernels.hpp"

namespace tapegrad::ops::detail {

inline Graph& graph_of(const char* op, std::initializer_list<Var> vs) {
  Graph* g = nullptr;
  for (const Var& v : vs) {
    if (!v.defined()) throw Error(std::string("[") + op + "] an input Var is empty");
    if (g && &v.graph() != g) throw Error(std::string("[") + op + "] inputs belong to different graphs");
    g = &v.graph();
  }
  return *g;
}

inline void need_ndim(const char* op, const char* what, const Tensor& t, int ndim) {
  if (t.ndim() != ndim)
    throw Error(std::string("[") + op + "] " + what + " must have " + std::to_string(ndim) + " dimension" +
                (ndim == 1 ? "" : "s") + ", got shape " + t.shape().str());
}

inline void need_float(const char* op, const char* what, const Tensor& t) {
  if (t.dtype() != DType::f64 && t.dtype() != DType::f32)
    throw Error(std::string("[") + op + "] " + what + " must be f64 or f32, got " + dtype_name(t.dtype()));
}

// need_float, or bf16 (an autocast activation, Note [bf16 activations] in autocast.hpp)
inline void need_float_or_bf16(const char* op, const char* what, const Tensor& t) {
  if (t.dtype() != DType::f64 && t.dtype() != DType::f32 && t.dtype() != DType::bf16)
    throw Error(std::string("[") + op + "] " + what + " must be f64, f32 or bf16, got " + dtype_name(t.dtype()));
}

inline void need_index(const char* op, const char* what, const Tensor& t) {
  if (!is_integer(t.dtype()))
    throw Error(std::string("[") + op + "] " + what + " must be i32 or i64 indices, got " + dtype_name(t.dtype()));
}

inline void same_dtype(const char* op, const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype())
    throw Error(std::string("[") + op + "] dtypes differ: " + dtype_name(a.dtype()) + " and " + dtype_name(b.dtype()));
}

inline Tensor like(const Tensor& t) { return Tensor::empty(t.shape(), t.dtype(), t.device()); }
inline Tensor empty_on(const Shape& s, const Tensor& like_dtype_device) {
  return Tensor::empty(s, like_dtype_device.dtype(), like_dtype_device.device());
}

// ---- N-d helpers (common.cpp)

// axis in [-ndim, ndim) -> [0, ndim); otherwise "[op] axis 3 is out of range for a tensor of 3
// dimensions". A negative axis counts from the end, as in PyTorch.
int normalize_axis(const char* op, int axis, int ndim);
// The axes as a mask over ndim axes (each once; "[op] axis 1 is given twice"); no axes: all of them.
std::vector<bool> axes_mask(const char* op, const std::vector<int>& axes, int ndim);
// NumPy broadcasting: "[op] cannot broadcast shapes (2, 3) and (4,)".
Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b);
// g summed over the axes along which `shape` was broadcast to g's shape, reshaped to `shape` (g
// itself when the shapes are equal).
Tensor sum_to(const Tensor& g, const Shape& shape);
// t (shape `from`, which broadcasts to `to`) copied out to `to`.
Tensor expand(const Tensor& t, const Shape& from, const Shape& to);
// A scalar of t's dtype on t's device, as an input of g (no gradient): the scalar side of x + 1.
Var constant(Graph& g, double value, const Tensor& like);
// Integers kept in a node for its backward (axes, offsets): a host i64 tensor, and back.
Tensor host_ints(const std::vector<int64_t>& values);
std::vector<int64_t> ints_of(const Tensor& t);
// The operand a product multiplies: v itself, or its copy in the compute dtype (Note [autocast]).
Tensor operand(const Tensor& v, DType compute);
// The dtype of an elementwise result of a and b (Note [bf16 activations]): theirs when they agree,
// f32 for f32 with bf16; f64 with anything else is "[op] dtypes differ: f64 and bf16".
DType promote(const char* op, const Tensor& a, const Tensor& b);
// x, or x cast to f32 by a recorded to() when it is bf16: how an op with no bf16 kernel takes an
// autocast activation (its result f32, as torch.autocast's f32 ops give).
Var widened(Var x);
// The record of a + b (equal shapes) whose value `sum` a fused kernel made: the node, name and
// backward that ops::add would record (src/ops/elementwise.cpp).
Var record_add(Graph& g, Tensor sum, Var a, Var b);

// ---- linear's parts (linalg.cpp), shared with the fused MLP (fused/mlp.cpp); its forward is
// kernels::linear_rows
// x (..., in) seen as the (N, in) matrix of its rows: N is the product of the leading extents.
Shape as_matrix_of_rows(const Shape& s);
// The dtype a product of x and w computes in and returns (Note [bf16 activations] in
// autocast.hpp): f64 for f64 operands; bf16 where either is bf16 or an Autocast scope is open;
// else f32. f64 with another dtype is an error naming both.
DType product_dtype(const char* op, const Tensor& x, const Tensor& w);
// The copies a product's backward reads in place of its operands: each operand's copy in the
// compute dtype where the forward made one, else undefined (the input itself).
std::array<Tensor, 2> saved_copies(const Tensor& x, const Tensor& xc, const Tensor& w, const Tensor& wc);
// The record of linear(x, w, b) (b undefined: none) whose value `out` was made from xc and Wc, x's
// (N, in) rows and w in the products' dtype: the node, name, saved copies and backward that
// ops::linear records.
Var record_linear(Graph& g, Tensor out, Var x, Var w, Var b, const Tensor& xc, const Tensor& Wc);
// The parameters' gradients of a node shaped as linear's (inputs x, W (out, in) and maybe b
// (out,)), from dy (N, out), dyc (dy in the products' dtype) and xc (N, in), added to the node's
// inputs 1 and 2 where they need them: dW = dyc^T xc in W's dtype, db = dy's column sums in b's
// dtype, summed in f32 for a bf16 b. bf16 products with an f32 W and b: both from one GEMM (Note
// [bias in the epilogue]).
void accumulate_linear_param_grads(BackwardContext& ctx, const Tensor& dy, const Tensor& dyc, const Tensor& xc);

}  // namespace tapegrad::ops::detail
