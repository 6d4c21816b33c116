// Shared checks for op front-ends: every message starts with the op name in brackets.
#pragma once

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

}  // namespace tapegrad::ops::detail
