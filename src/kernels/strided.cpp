// Building strided walks (strided.hpp, Note [strided walks]).
#include "tapegrad/kernels/strided.hpp"

#include "tapegrad/tensor/error.hpp"

namespace tapegrad::kernels {

View contiguous_view(const Shape& shape) {
  View v;
  v.shape = shape;
  int64_t s = 1;
  for (int d = shape.ndim() - 1; d >= 0; --d) {
    v.stride[static_cast<size_t>(d)] = s;
    s *= shape[d];
  }
  return v;
}

View permuted_view(const Shape& shape, const std::array<int, kMaxDims>& perm) {
  const View in = contiguous_view(shape);
  View v;
  for (int d = 0; d < shape.ndim(); ++d) {
    const int from = perm[static_cast<size_t>(d)];
    v.shape.push_back(shape[from]);
    v.stride[static_cast<size_t>(d)] = in.stride[static_cast<size_t>(from)];
  }
  return v;
}

View sliced_view(const Shape& shape, int axis, int64_t begin, int64_t end) {
  View v = contiguous_view(shape);
  v.shape.set(axis, end - begin);
  v.offset = begin * v.stride[static_cast<size_t>(axis)];
  return v;
}

namespace {

// Drops axes of extent 1 and merges axis d into d - 1 where every operand steps through the pair
// as one axis (stride[d - 1] == stride[d] * size[d]).
template <int N>
void coalesce(Walk<N>& w) {
  int n = 0;
  for (int d = 0; d < w.ndim; ++d) {
    if (w.size[d] == 1) continue;
    bool merge = n > 0;
    for (int k = 0; k < N && merge; ++k) merge = w.stride[k][n - 1] == w.stride[k][d] * w.size[d];
    if (merge) {
      w.size[n - 1] *= w.size[d];
      for (int k = 0; k < N; ++k) w.stride[k][n - 1] = w.stride[k][d];
    } else {
      w.size[n] = w.size[d];
      for (int k = 0; k < N; ++k) w.stride[k][n] = w.stride[k][d];
      ++n;
    }
  }
  w.ndim = n;
}

}  // namespace

template <int N>
Walk<N> make_walk(const Shape& shape, const std::array<View, N>& views) {
  Walk<N> w;
  w.ndim = shape.ndim();
  w.numel = shape.numel();
  for (int d = 0; d < w.ndim; ++d) w.size[d] = shape[d];
  for (int k = 0; k < N; ++k) {
    const View& v = views[static_cast<size_t>(k)];
    const int lead = w.ndim - v.shape.ndim();
    TG_CHECK(lead >= 0, "[walk] an operand has more axes than the walk");
    w.offset[k] = v.offset;
    for (int d = 0; d < w.ndim; ++d) {
      const int vd = d - lead;
      if (vd < 0 || v.shape[vd] == 1) {
        w.stride[k][d] = 0;
      } else {
        TG_CHECK(v.shape[vd] == shape[d], "[walk] an operand does not broadcast to the walk's shape");
        w.stride[k][d] = v.stride[static_cast<size_t>(vd)];
      }
    }
  }
  coalesce(w);
  return w;
}

template Walk<1> make_walk<1>(const Shape&, const std::array<View, 1>&);
template Walk<2> make_walk<2>(const Shape&, const std::array<View, 2>&);
template Walk<3> make_walk<3>(const Shape&, const std::array<View, 3>&);
template Walk<4> make_walk<4>(const Shape&, const std::array<View, 4>&);

ReduceWalk make_reduce_walk(const Shape& shape, const Shape& kept) {
  TG_CHECK(shape.ndim() == kept.ndim(), "[reduce] the kept shape must have the input's axes");
  const View x = contiguous_view(shape);
  ReduceWalk r;
  View x_outer = x, out = contiguous_view(kept);
  Shape reduced;  // the input's extents on reduced axes, 1 elsewhere
  View x_inner = x;
  for (int d = 0; d < shape.ndim(); ++d) {
    const bool is_reduced = kept[d] == 1 && shape[d] != 1;
    reduced.push_back(is_reduced ? shape[d] : 1);
    if (is_reduced) x_outer.stride[static_cast<size_t>(d)] = 0;
  }
  x_outer.shape = kept;
  x_inner.shape = reduced;
  r.outer = make_walk<2>(kept, {out, x_outer});
  r.inner = make_walk<1>(reduced, {x_inner});
  return r;
}

AxisSplit split_at(const Shape& shape, int axis) {
  AxisSplit s;
  for (int d = 0; d < shape.ndim(); ++d) {
    if (d < axis) s.outer *= shape[d];
    else if (d == axis) s.n = shape[d];
    else s.inner *= shape[d];
  }
  return s;
}

}  // namespace tapegrad::kernels
