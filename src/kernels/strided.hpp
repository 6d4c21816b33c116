// Strided walks: how every N-d kernel (broadcasting, permutes, slices, reductions along axes) finds
// its operands' elements, written once for the CPU loops and the CUDA kernels.
//
// Note [strided walks]
// An N-d kernel visits the elements of its output (or of the shape it iterates) in row-major order.
// Each operand is read or written at an element offset that is linear in the output's index:
//   offset_k + sum_d i_d * stride_k[d].
// A broadcast axis is a stride of 0, a permutation permuted strides, a slice an offset and the
// input's strides, a reduction a second walk over the reduced axes. Tensors themselves stay
// contiguous (tensor.hpp); only kernels see strides. Before a kernel runs, the walk is coalesced:
// axes of extent 1 drop out, and adjacent axes that every operand steps through as one merge, so a
// contiguous operand is one axis and a bias over rows is two. The index arithmetic is then a few
// divisions per element on CUDA and one carry per run of the last axis on the CPU.
#pragma once

#include <array>
#include <cstdint>

#include "tapegrad/kernels/cr_math.hpp"  // TG_HD
#include "tapegrad/tensor/shape.hpp"

namespace tapegrad::kernels {

inline constexpr int kMaxDims = Shape::kMaxDims;

// A walk over `size` (ndim axes, numel elements) of N operands.
template <int N>
struct Walk {
  int ndim = 0;
  int64_t numel = 1;
  int64_t size[kMaxDims] = {};
  int64_t stride[N][kMaxDims] = {};
  int64_t offset[N] = {};

  // The element offsets of every operand at linear index i (0 <= i < numel).
  TG_HD void at(int64_t i, int64_t (&off)[N]) const {
    for (int k = 0; k < N; ++k) off[k] = offset[k];
    for (int d = ndim - 1; d >= 0; --d) {
      const int64_t q = i / size[d], r = i - q * size[d];
      i = q;
      for (int k = 0; k < N; ++k) off[k] += r * stride[k][d];
    }
  }
};

// How an operand lays out its elements: a shape with element strides and an offset. A
// contiguous tensor's view has row-major strides and offset 0.
struct View {
  Shape shape;
  std::array<int64_t, kMaxDims> stride{};
  int64_t offset = 0;
};
View contiguous_view(const Shape& shape);
// The view of a contiguous `shape` whose axes are read in the order perm (out axis d = in axis perm[d]).
View permuted_view(const Shape& shape, const std::array<int, kMaxDims>& perm);
// The view of a contiguous `shape` restricted to [begin, end) along axis.
View sliced_view(const Shape& shape, int axis, int64_t begin, int64_t end);

// The walk over `shape` of operands whose views broadcast to it (NumPy rules: right-aligned, an
// axis of extent 1 or a missing one is read with stride 0), coalesced (Note [strided walks]).
template <int N>
Walk<N> make_walk(const Shape& shape, const std::array<View, N>& views);

// A reduction: `outer` walks the output (operand 0, contiguous, keepdim shape) and the input's
// element where each output's reduction starts (operand 1); `inner` walks the reduced axes of the
// input (operand 0). Output element o is the reduction, in inner's order, of input[outer(o) + inner(j)].
struct ReduceWalk {
  Walk<2> outer;
  Walk<1> inner;
};
// x contiguous of `shape`; `kept` its shape with every reduced axis at extent 1 (same ndim).
ReduceWalk make_reduce_walk(const Shape& shape, const Shape& kept);

// The (outer, n, inner) form of a contiguous `shape` split at `axis`: the elements before the
// axis, the axis's extent and the elements after it. Softmax, index_select and gather use it.
struct AxisSplit {
  int64_t outer = 1, n = 1, inner = 1;
};
AxisSplit split_at(const Shape& shape, int axis);

}  // namespace tapegrad::kernels
