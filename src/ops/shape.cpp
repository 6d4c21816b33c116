// Shape ops: forward and backward together. reshape (and squeeze, unsqueeze, which are reshapes)
// shares the input's storage; every other op here copies into a contiguous result through a
// strided walk (Note [strided walks]): permute, transpose, broadcast_to, slice, concat, stack, split.
#include <algorithm>

#include "tapegrad/ops/common.hpp"
#include "tapegrad/ops/ops.hpp"

namespace tapegrad::ops {

using namespace detail;
using kernels::View;

// x (any) -> shape (same numel), sharing storage;  dx = dy reshaped to x's shape
Var reshape(Var x, const Shape& shape) {
  Graph& g = graph_of("reshape", {x});
  Tensor out = x.value().reshape(shape);
  return g.record("reshape", std::move(out), {x}, [](BackwardContext& ctx) {
    ctx.accumulate(0, ctx.grad_output().reshape(ctx.input(0).shape()));
  });
}

// As above, with at most one extent -1: the one that makes the element counts equal.
Var reshape(Var x, const std::vector<int64_t>& dims) {
  const Shape& from = x.shape();
  int infer = -1;
  int64_t known = 1;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] == -1) {
      if (infer >= 0) throw Error("[reshape] only one extent may be -1");
      infer = static_cast<int>(d);
    } else if (dims[d] < 0) {
      throw Error("[reshape] extent " + std::to_string(dims[d]) + " is negative (only -1, to infer one, is allowed)");
    } else if (__builtin_mul_overflow(known, dims[d], &known)) {
      throw Error("[reshape] the extents' product does not fit in 64 bits");
    }
  }
  std::vector<int64_t> out = dims;
  if (infer >= 0) {
    if (known == 0 || from.numel() % known != 0)
      throw Error("[reshape] cannot infer the -1 extent: " + std::to_string(from.numel()) + " elements of " +
                  from.str() + " do not split into parts of " + std::to_string(known));
    out[static_cast<size_t>(infer)] = from.numel() / known;
  }
  return reshape(x, Shape(out.begin(), out.end()));
}
Var reshape(Var x, std::initializer_list<int64_t> dims) { return reshape(x, std::vector<int64_t>(dims)); }

// x (s0, ..., sn) -> (s0, ..., s_start * ... * s_end, ..., sn);  dx = dy reshaped back (reshape's)
Var flatten(Var x, int start_dim, int end_dim) {
  const Shape& s = x.shape();
  if (s.ndim() == 0) {
    normalize_axis("flatten", start_dim, 1);
    normalize_axis("flatten", end_dim, 1);
    return reshape(x, Shape{1});
  }
  const int first = normalize_axis("flatten", start_dim, s.ndim()), last = normalize_axis("flatten", end_dim, s.ndim());
  if (first > last)
    throw Error("[flatten] start_dim " + std::to_string(start_dim) + " comes after end_dim " + std::to_string(end_dim) +
                " in a tensor of shape " + s.str());
  Shape out;
  int64_t joined = 1;
  for (int d = 0; d < s.ndim(); ++d) {
    if (d < first || d > last) out.push_back(s[d]);
    else joined *= s[d];
    if (d == last) out.push_back(joined);
  }
  return reshape(x, out);
}

// x (s) -> s with an extent 1 inserted at axis (axis in [-ndim - 1, ndim])
Var unsqueeze(Var x, int axis) {
  const Shape& s = x.shape();
  const int a = normalize_axis("unsqueeze", axis, s.ndim() + 1);
  Shape out;
  for (int d = 0; d <= s.ndim(); ++d) {
    if (d == a) out.push_back(1);
    if (d < s.ndim()) out.push_back(s[d]);
  }
  return reshape(x, out);
}

// x (s) -> s without axis, whose extent must be 1
Var squeeze(Var x, int axis) {
  const Shape& s = x.shape();
  const int a = normalize_axis("squeeze", axis, s.ndim());
  if (s.ndim() == 0) return x;
  if (s[a] != 1)
    throw Error("[squeeze] axis " + std::to_string(axis) + " of " + s.str() + " has size " + std::to_string(s[a]) +
                ", not 1");
  Shape out;
  for (int d = 0; d < s.ndim(); ++d)
    if (d != a) out.push_back(s[d]);
  return reshape(x, out);
}

// x (s) -> (s[dims[0]], s[dims[1]], ...);  dx = dy permuted by the inverse of dims
Var permute(Var x, const std::vector<int>& dims) {
  Graph& g = graph_of("permute", {x});
  const Tensor& v = x.value();
  const int n = v.ndim();
  if (static_cast<int>(dims.size()) != n)
    throw Error("[permute] " + std::to_string(dims.size()) + " axes given for a tensor of " + std::to_string(n) +
                " dimensions " + v.shape().str());
  std::array<int, kernels::kMaxDims> perm{};
  std::vector<bool> seen(static_cast<size_t>(n), false);
  for (int d = 0; d < n; ++d) {
    const int a = normalize_axis("permute", dims[static_cast<size_t>(d)], n);
    if (seen[static_cast<size_t>(a)]) throw Error("[permute] axis " + std::to_string(dims[static_cast<size_t>(d)]) + " is given twice");
    seen[static_cast<size_t>(a)] = true;
    perm[static_cast<size_t>(d)] = a;
  }
  const View view = kernels::permuted_view(v.shape(), perm);
  Tensor out = empty_on(view.shape, v);
  kernels::copy_strided(v, view, out, kernels::contiguous_view(view.shape));
  std::vector<int64_t> inverse(static_cast<size_t>(n));
  for (int d = 0; d < n; ++d) inverse[static_cast<size_t>(perm[static_cast<size_t>(d)])] = d;
  return g.record("permute", std::move(out), {x}, [](BackwardContext& ctx) {
    const std::vector<int64_t> inv = ints_of(ctx.saved(0));
    std::array<int, kernels::kMaxDims> p{};
    for (size_t d = 0; d < inv.size(); ++d) p[d] = static_cast<int>(inv[d]);
    const Tensor& dy = ctx.grad_output();
    const View view = kernels::permuted_view(dy.shape(), p);
    Tensor dx = empty_on(view.shape, dy);
    kernels::copy_strided(dy, view, dx, kernels::contiguous_view(view.shape));
    ctx.accumulate(0, dx);
  }, {host_ints(inverse)});
}

// x (s) -> s with axes d0 and d1 swapped
Var transpose(Var x, int d0, int d1) {
  const int n = x.value().ndim();
  const int a = normalize_axis("transpose", d0, n), b = normalize_axis("transpose", d1, n);
  std::vector<int> dims(static_cast<size_t>(n));
  for (int d = 0; d < n; ++d) dims[static_cast<size_t>(d)] = d;
  std::swap(dims[static_cast<size_t>(a)], dims[static_cast<size_t>(b)]);
  return permute(x, dims);
}

// x (s) -> shape (s broadcasts to it);  dx = dy summed over the broadcast axes
Var broadcast_to(Var x, const Shape& shape) {
  Graph& g = graph_of("broadcast_to", {x});
  const Tensor& v = x.value();
  if (!(broadcast_shapes("broadcast_to", v.shape(), shape) == shape))
    throw Error("[broadcast_to] cannot broadcast " + v.shape().str() + " to " + shape.str());
  if (v.shape() == shape) return x;
  Tensor out = expand(v, v.shape(), shape);
  return g.record("broadcast_to", std::move(out), {x}, [](BackwardContext& ctx) {
    ctx.accumulate(0, sum_to(ctx.grad_output(), ctx.input(0).shape()));
  });
}

namespace {

// Python's slice bounds: negative counts from the end, then clamped to [0, n], end at least begin.
std::pair<int64_t, int64_t> slice_bounds(int64_t begin, int64_t end, int64_t n) {
  auto fix = [n](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + n : i, 0, n); };
  const int64_t b = fix(begin);
  return {b, std::max(b, fix(end))};
}

// A copy of t (shape `shape`) restricted to [begin, end) along axis.
Tensor slice_of(const Tensor& t, int axis, int64_t begin, int64_t end) {
  const View view = kernels::sliced_view(t.shape(), axis, begin, end);
  Tensor out = empty_on(view.shape, t);
  kernels::copy_strided(t, view, out, kernels::contiguous_view(view.shape));
  return out;
}

}  // namespace

// x (.., n, ..) -> (.., end - begin, ..), elements [begin, end) of axis (Python's bounds: negative
// from the end, clamped);  dx = dy in those positions, 0 elsewhere: handed to the engine as the part
// it is (Note [regions]), so a slice's backward costs the slice, not its whole input
Var slice(Var x, int axis, int64_t begin, int64_t end) {
  Graph& g = graph_of("slice", {x});
  const Tensor& v = x.value();
  const int a = normalize_axis("slice", axis, v.ndim());
  if (v.ndim() == 0) throw Error("[slice] cannot slice a 0-d tensor");
  const auto [b, e] = slice_bounds(begin, end, v.dim(a));
  Tensor out = slice_of(v, a, b, e);
  return g.record("slice", std::move(out), {x}, [](BackwardContext& ctx) {
    const std::vector<int64_t> p = ints_of(ctx.saved(0));
    const int axis = static_cast<int>(p[0]);
    const Tensor& dy = ctx.grad_output();
    ctx.accumulate(0, dy, kernels::sliced_view(ctx.input(0).shape(), axis, p[1], p[1] + dy.dim(axis)));
  }, {host_ints({a, b})});
}

// xs (.., n_i, ..) -> (.., sum n_i, ..) along axis; all other extents equal;  dx_i = dy's slice i
Var concat(const std::vector<Var>& xs, int axis) {
  if (xs.empty()) throw Error("[concat] needs at least one tensor");
  Graph& g = graph_of("concat", {xs[0]});
  const Tensor& first = xs[0].value();
  const int a = normalize_axis("concat", axis, first.ndim());
  if (first.ndim() == 0) throw Error("[concat] cannot concatenate 0-d tensors; stack them instead");
  Shape shape = first.shape();
  int64_t total = 0;
  for (size_t k = 0; k < xs.size(); ++k) {
    graph_of("concat", {xs[0], xs[k]});
    const Tensor& t = xs[k].value();
    same_dtype("concat", first, t);
    bool ok = t.ndim() == first.ndim();
    for (int d = 0; ok && d < t.ndim(); ++d) ok = d == a || t.dim(d) == first.dim(d);
    if (!ok)
      throw Error("[concat] tensor " + std::to_string(k) + " has shape " + t.shape().str() + ", which does not match " +
                  first.shape().str() + " outside axis " + std::to_string(axis));
    if (__builtin_add_overflow(total, t.dim(a), &total)) throw Error("[concat] the result's extent overflows");
  }
  shape.set(a, total);
  Tensor out = empty_on(shape, first);
  int64_t at = 0;
  for (const Var& x : xs) {
    const Tensor& t = x.value();
    kernels::copy_strided(t, kernels::contiguous_view(t.shape()), out, kernels::sliced_view(shape, a, at, at + t.dim(a)));
    at += t.dim(a);
  }
  return g.record("concat", std::move(out), std::span<const Var>(xs.data(), xs.size()), [](BackwardContext& ctx) {
    const int axis = static_cast<int>(ctx.scalar());
    const Tensor& dy = ctx.grad_output();
    int64_t at = 0;
    for (int k = 0; k < ctx.node().inputs.size(); ++k) {
      const int64_t n = ctx.input(k).dim(axis);
      if (ctx.needs_grad(k)) ctx.accumulate(k, slice_of(dy, axis, at, at + n));
      at += n;
    }
  }, {}, static_cast<double>(a));
}

// xs (s) -> s with a new axis of extent len(xs) at axis
Var stack(const std::vector<Var>& xs, int axis) {
  if (xs.empty()) throw Error("[stack] needs at least one tensor");
  const int a = normalize_axis("stack", axis, xs[0].value().ndim() + 1);
  std::vector<Var> parts;
  for (size_t k = 0; k < xs.size(); ++k) {
    if (!(xs[k].shape() == xs[0].shape()))
      throw Error("[stack] tensor " + std::to_string(k) + " has shape " + xs[k].shape().str() + ", tensor 0 " +
                  xs[0].shape().str() + "; stack needs equal shapes");
    parts.push_back(unsqueeze(xs[k], a));
  }
  return concat(parts, a);
}

// x (.., n, ..) -> pieces of sizes[i] along axis (they must add up to n)
std::vector<Var> split(Var x, const std::vector<int64_t>& sizes, int axis) {
  const int a = normalize_axis("split", axis, x.value().ndim());
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) throw Error("[split] size " + std::to_string(s) + " is negative");
    if (__builtin_add_overflow(total, s, &total)) throw Error("[split] the sizes' sum overflows");
  }
  if (x.value().ndim() == 0 || total != x.value().dim(a))
    throw Error("[split] sizes adding up to " + std::to_string(total) + " do not split axis " + std::to_string(axis) +
                " of " + x.shape().str());
  std::vector<Var> out;
  int64_t at = 0;
  for (int64_t s : sizes) {
    out.push_back(slice(x, a, at, at + s));
    at += s;
  }
  return out;
}

}  // namespace tapegrad::ops
