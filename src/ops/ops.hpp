// The differentiable ops. Each front-end checks its inputs (errors name the op, the shapes and the
// axis), computes through the kernel facades, and records a node whose backward rule is written
// beside its forward in the op's .cpp file. Every node's shapes, forward and derivative are in one
// table, ops/op_table.cpp, which docs/ops.md shows; the elementwise unary and binary ops are their
// functors (src/kernels/unary_ops.hpp, binary_ops.hpp), declared here from those lists.
//
// Conventions, as in PyTorch: an axis may be negative (-1 is the last); binary ops broadcast by
// NumPy's rules; reductions drop their axes unless keepdim; results are new contiguous tensors
// except reshape, squeeze and unsqueeze, which share the input's storage (docs/ops.md).
#pragma once

#include <initializer_list>
#include <optional>
#include <vector>

#include "tapegrad/graph/graph.hpp"
#include "tapegrad/kernels/binary_ops.hpp"  // TG_BINARY_OPS
#include "tapegrad/kernels/unary_ops.hpp"   // TG_UNARY_OPS

namespace tapegrad::ops {

enum class Reduction : uint8_t { mean, sum, none };

// ---- elementwise (elementwise.cpp)
// add sub mul div maximum minimum pow: a (s) op b (t) -> broadcast(s, t)
#define TG_BINARY_DECLARE(name, F) Var name(Var a, Var b);
TG_BINARY_OPS(TG_BINARY_DECLARE)
#undef TG_BINARY_DECLARE
Var pow(Var x, double exponent);
Var scale(Var x, double s);
// neg exp log tanh relu sigmoid silu gelu_tanh gelu_erf sqrt rsqrt abs square: y = f(x), any shape
#define TG_UNARY_DECLARE(name, F) Var name(Var x);
TG_UNARY_OPS(TG_UNARY_DECLARE)
#undef TG_UNARY_DECLARE
enum class Gelu : uint8_t { none, tanh };  // PyTorch's approximate='none' (erf, the default) or 'tanh'
Var gelu(Var x, Gelu approximate = Gelu::none);
Var clamp(Var x, double lo, double hi);
Var where(Var cond, Var a, Var b);                 // cond u8 mask; all three broadcast
Var masked_fill(Var x, Var mask, double value);    // where(mask, value, x)
// comparisons: a u8 mask of the broadcast shape (no gradient)
Var eq(Var a, Var b);
Var ne(Var a, Var b);
Var lt(Var a, Var b);
Var le(Var a, Var b);
Var gt(Var a, Var b);
Var ge(Var a, Var b);
Var to(Var x, DType dtype);  // a cast; between f64, f32 and bf16 it carries the gradient back

// ---- reductions (linalg.cpp: the full ones; reduce.cpp: along axes; no axes = all of them)
Var sum(Var x);   // -> (), correctly rounded in f64
Var mean(Var x);  // -> ()
Var sum(Var x, const std::vector<int>& axes, bool keepdim = false);
Var mean(Var x, const std::vector<int>& axes, bool keepdim = false);
Var var(Var x, const std::vector<int>& axes, bool keepdim = false, double correction = 1);
Var max(Var x, int axis, bool keepdim = false);  // the gradient goes to the first largest element
Var max(Var x);                                  // over everything -> ()
Var argmax(Var x, int axis, bool keepdim = false);  // i64, no gradient

// ---- softmax family and losses (nn.cpp)
Var softmax(Var x, int axis = -1);
Var log_softmax(Var x, int axis = -1);
Var logsumexp(Var x, int axis = -1, bool keepdim = false);
// logits (..., V), targets (...) -> () or (...) with none; rows whose target is ignore_index count
// for nothing (the mean is over the others)
Var cross_entropy(Var logits, Var targets, Reduction reduction = Reduction::mean, int64_t ignore_index = -100);

// ---- linear algebra (linalg.cpp)
Var matmul(Var a, Var b);
Var add_row(Var x, Var bias);  // x (n, m) + bias (m,)
Var transpose(Var x);          // (n, m) -> (m, n)

// ---- shape (shape.cpp)
Var reshape(Var x, const Shape& shape);
Var reshape(Var x, const std::vector<int64_t>& dims);  // one extent may be -1
Var reshape(Var x, std::initializer_list<int64_t> dims);
// x (s0, ..., sn) -> axes start_dim..end_dim as one, their extents' product (torch.flatten; a
// reshape, sharing storage); a 0-d x gives (1,)
Var flatten(Var x, int start_dim = 0, int end_dim = -1);
Var unsqueeze(Var x, int axis);
Var squeeze(Var x, int axis);
Var permute(Var x, const std::vector<int>& dims);
Var transpose(Var x, int d0, int d1);
Var broadcast_to(Var x, const Shape& shape);
Var slice(Var x, int axis, int64_t begin, int64_t end);  // Python's bounds
Var concat(const std::vector<Var>& xs, int axis = 0);
Var stack(const std::vector<Var>& xs, int axis = 0);
std::vector<Var> split(Var x, const std::vector<int64_t>& sizes, int axis = 0);

// ---- indexing and masks (nn.cpp: gather; index.cpp: the rest)
Var gather(Var table, Var ids);           // table (V, d), ids (B,) -> (B, d)
Var embedding(Var table, Var ids);        // table (V, d), ids any shape (s) -> (s..., d)
Var index_select(Var x, int axis, Var ids);  // ids (k,)
Var gather(Var x, int axis, Var ids);     // torch.gather; ids with x's extents outside axis
Var tril(Var x, int64_t k = 0);           // zero above the k-th diagonal of the last two axes
Tensor causal_mask(int64_t t, Device device = Device::cpu());  // (t, t) u8: 1 above the diagonal (hidden)

// ---- images (N, C, H, W) (conv.cpp): PyTorch's conv2d, max_pool2d and avg_pool2d
// x (N, C, H, W), weight (O, C, kh, kw), bias (O,) or an undefined Var -> (N, O, Ho, Wo),
// Ho = (H + 2 padding - kh) / stride + 1 (and Wo likewise), zero padding on each side.
Var conv2d(Var x, Var weight, Var bias = Var(), int stride = 1, int padding = 0);
// x (N, C, H, W) -> (N, C, Ho, Wo) over kernel x kernel windows; stride defaults to the kernel,
// padding (at most kernel / 2) is -inf for the max and counted as 0 in the average.
Var max_pool2d(Var x, int kernel, std::optional<int> stride = std::nullopt, int padding = 0);
Var avg_pool2d(Var x, int kernel, std::optional<int> stride = std::nullopt, int padding = 0);

// ---- linear algebra of the N-d ops (matmul above takes batches too)
// x (..., in) @ W (out, in)^T + b (out,) -> (..., out); b an undefined Var for no bias
Var linear(Var x, Var w, Var b = Var());

}  // namespace tapegrad::ops

// ---- normalisation and dropout: layer_norm, rms_norm (fused/norm.hpp); dropout and its
// Generator (fused/dropout.hpp)
#include "tapegrad/ops/fused/dropout.hpp"
#include "tapegrad/ops/fused/norm.hpp"
#include "tapegrad/ops/autocast.hpp"

namespace tapegrad {
inline Var operator+(Var a, Var b) { return ops::add(a, b); }
inline Var operator-(Var a, Var b) { return ops::sub(a, b); }
inline Var operator*(Var a, Var b) { return ops::mul(a, b); }
inline Var operator/(Var a, Var b) { return ops::div(a, b); }
inline Var operator-(Var a) { return ops::neg(a); }
Var operator+(Var a, double s);
Var operator+(double s, Var a);
Var operator-(Var a, double s);
Var operator-(double s, Var a);
Var operator*(Var a, double s);
Var operator*(double s, Var a);
Var operator/(Var a, double s);
Var operator/(double s, Var a);
}  // namespace tapegrad
