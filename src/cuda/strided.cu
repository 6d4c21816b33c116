// CUDA N-d kernels over strided walks (Note [strided walks] in src/kernels/strided.hpp), the same
// list and contracts as src/kernels/cpu/strided.cpp: broadcasting binary ops and their partials,
// comparisons, where, strided copies and adds, reductions along axes, argmax, gather / scatter along an
// axis, index_select / index_add, casts and clamp.
//
// Rule: an output element is computed by one thread from the same operands in the same order as
// the CPU's loop (a reduction in its inner walk's order, in double), so the results equal the
// CPU's bit for bit where the arithmetic is the same (not exp/log/pow in f32, Note [exp and log
// on each device]). The adjoints of gathers (scatter_add_axis, index_add) add with atomics, in
// no fixed order: their sums may differ from the CPU's in the last bits when ids repeat.
#include <type_traits>

#include "tapegrad/cuda/common.cuh"
#include "tapegrad/cuda/cuda_kernels.hpp"
#include "tapegrad/kernels/bf16.hpp"
#include "tapegrad/kernels/binary_ops.hpp"
#include "tapegrad/kernels/dtype_dispatch.hpp"
#include "tapegrad/kernels/strided.hpp"

namespace tapegrad::cuda {

using kernels::Compare;
using kernels::dispatch_arithmetic;
using kernels::dispatch_bytes;
using kernels::make_walk;
using kernels::View;
using kernels::Walk;

namespace {

#define TG_GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); i += int64_t{gridDim.x} * blockDim.x)

View view_of(const Tensor& t) { return kernels::contiguous_view(t.shape()); }




// ---- kernels

// Packed (Note [packed loops] in common.cuh) when the last axis holds whole packs: a thread finds
// its pack's first element through the walk and steps the operands' last-axis strides from there.
template <class F, class T>
__global__ void binary_walk_kernel(Walk<3> w, const T* a, const T* b, T* out, bool packed) {
  if (packed) {
    constexpr int N = Pack<T>::N;
    const int64_t sa = w.stride[1][w.ndim - 1], sb = w.stride[2][w.ndim - 1];
    TG_GRID_STRIDE(p, w.numel / N) {
      int64_t off[3];
      w.at(p * N, off);
      Pack<T> r;
      for (int j = 0; j < N; ++j) r.v[j] = F::forward(a[off[1] + j * sa], b[off[2] + j * sb]);
      *reinterpret_cast<Pack<T>*>(out + off[0]) = r;
    }
    return;
  }
  TG_GRID_STRIDE(i, w.numel) {
    int64_t off[3];
    w.at(i, off);
    out[off[0]] = F::forward(a[off[1]], b[off[2]]);
  }
}

// Whether a walk whose operand 0 is a contiguous output can run packed.
template <class T, int K>
bool walk_packable(const Walk<K>& w, const void* out) {
  return w.ndim > 0 && w.size[w.ndim - 1] % Pack<T>::N == 0 && w.stride[0][w.ndim - 1] == 1 && packable({out});
}

template <class F, class T>
__global__ void binary_backward_kernel(Walk<4> w, int k, const T* a, const T* b, const T* y, const T* dy, T* d) {
  TG_GRID_STRIDE(i, w.numel) {
    int64_t off[4];
    w.at(i, off);
    const T x = a[off[0]], z = b[off[1]], r = y[off[2]], g = dy[off[3]];
    d[i] = k == 0 ? F::da(x, z, r, g) : F::db(x, z, r, g);
  }
}

template <class T>
__global__ void compare_kernel(Walk<3> w, Compare op, const T* a, const T* b, uint8_t* out) {
  TG_GRID_STRIDE(i, w.numel) {
    int64_t off[3];
    w.at(i, off);
    out[off[0]] = kernels::compare_of(op, a[off[1]], b[off[2]]) ? 1 : 0;
  }
}

template <class U>
__global__ void where_kernel(Walk<4> w, const uint8_t* c, const U* a, const U* b, U* out) {
  TG_GRID_STRIDE(i, w.numel) {
    int64_t off[4];
    w.at(i, off);
    out[off[0]] = c[off[1]] ? a[off[2]] : b[off[3]];
  }
}

template <class U>
__global__ void copy_strided_kernel(Walk<2> w, const U* src, U* dst) {
  TG_GRID_STRIDE(i, w.numel) {
    int64_t off[2];
    w.at(i, off);
    dst[off[0]] = src[off[1]];
  }
}

template <class T>
__global__ void add_strided_kernel(Walk<2> w, const T* src, T* dst) {
  TG_GRID_STRIDE(i, w.numel) {
    int64_t off[2];
    w.at(i, off);
    if constexpr (std::is_same_v<T, kernels::bf16>) dst[off[0]] = kernels::to_bf16(kernels::widen(dst[off[0]]) + kernels::widen(src[off[1]]));
    else dst[off[0]] = dst[off[0]] + src[off[1]];
  }
}

__device__ inline double reduce_step(kernels::Reduce op, double acc, double v) {
  switch (op) {
    case kernels::Reduce::max: return v != v || acc != acc ? (acc != acc ? acc : v) : (v > acc ? v : acc);
    case kernels::Reduce::min: return v != v || acc != acc ? (acc != acc ? acc : v) : (v < acc ? v : acc);
    default: return acc + v;
  }
}
__device__ inline double reduce_init(kernels::Reduce op) {
  return op == kernels::Reduce::max ? -INFINITY : op == kernels::Reduce::min ? INFINITY : 0.0;
}

// Few outputs over long strided runs (a bias gradient: (N, C) -> (C,)): blockIdx.y takes one of
// gridDim.y consecutive pieces of every run, and partials[piece][o] keeps its result; then
// reduce_pieces_kernel joins the pieces in order. Deterministic, and every SM has work.
template <class T>
__global__ void reduce_partials_kernel(Walk<2> outer, int64_t count, int64_t stride, kernels::Reduce op, const T* x,
                                       double* partials) {
  const int64_t piece = (count + gridDim.y - 1) / gridDim.y, begin = blockIdx.y * piece;
  const int64_t end = begin + piece < count ? begin + piece : count;
  TG_GRID_STRIDE(o, outer.numel) {
    int64_t off[2];
    outer.at(o, off);
    double acc = reduce_init(op);
    for (int64_t j = begin; j < end; ++j) acc = reduce_step(op, acc, static_cast<double>(x[off[1] + j * stride]));
    partials[blockIdx.y * outer.numel + o] = acc;
  }
}

template <class T>
__global__ void reduce_pieces_kernel(int64_t outputs, int pieces, int64_t count, kernels::Reduce op,
                                     const double* partials, T* out) {
  TG_GRID_STRIDE(o, outputs) {
    double acc = reduce_init(op);
    for (int p = 0; p < pieces; ++p) acc = reduce_step(op, acc, partials[p * outputs + o]);
    out[o] = static_cast<T>(op == kernels::Reduce::mean ? acc / static_cast<double>(count) : acc);
  }
}

template <class T>
__global__ void reduce_kernel(Walk<2> outer, Walk<1> inner, kernels::Reduce op, const T* x, T* out) {
  TG_GRID_STRIDE(o, outer.numel) {
    int64_t off[2];
    outer.at(o, off);
    double acc = op == kernels::Reduce::max ? -INFINITY : op == kernels::Reduce::min ? INFINITY : 0.0;
    const int64_t stride = inner.ndim == 1 ? inner.stride[0][0] : 0;  // one axis: no index arithmetic
    for (int64_t j = 0; j < inner.numel; ++j) {
      int64_t in[1] = {j * stride};
      if (inner.ndim > 1) inner.at(j, in);
      const double v = x[off[1] + in[0]];
      switch (op) {
        case kernels::Reduce::max: acc = v != v || acc != acc ? (acc != acc ? acc : v) : (v > acc ? v : acc); break;
        case kernels::Reduce::min: acc = v != v || acc != acc ? (acc != acc ? acc : v) : (v < acc ? v : acc); break;
        default: acc += v;
      }
    }
    out[off[0]] = static_cast<T>(op == kernels::Reduce::mean ? acc / static_cast<double>(inner.numel) : acc);
  }
}

// One warp per output when its reduced elements are contiguous (a reduction over the last axes):
// the lanes stride through the run and a fixed butterfly joins them (deterministic, but not the
// CPU's left-to-right order).
template <class T>
__global__ void reduce_runs_kernel(Walk<2> outer, int64_t count, kernels::Reduce op, const T* x, T* out) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = int64_t{gridDim.x} * (blockDim.x / 32);
  for (int64_t o = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32; o < outer.numel; o += warps) {
    int64_t off[2];
    outer.at(o, off);
    const T* run = x + off[1];
    const bool is_max = op == kernels::Reduce::max, is_min = op == kernels::Reduce::min;
    auto step = [&](double acc, double v) {
      if (is_max) return v != v || acc != acc ? (acc != acc ? acc : v) : (v > acc ? v : acc);
      if (is_min) return v != v || acc != acc ? (acc != acc ? acc : v) : (v < acc ? v : acc);
      return acc + v;
    };
    double acc = is_max ? -INFINITY : is_min ? INFINITY : 0.0;
    for (int64_t j = lane; j < count; j += 32) acc = step(acc, static_cast<double>(run[j]));
    for (int width = 16; width > 0; width /= 2) acc = step(acc, __shfl_xor_sync(0xffffffffu, acc, width));
    if (lane == 0) out[off[0]] = static_cast<T>(op == kernels::Reduce::mean ? acc / static_cast<double>(count) : acc);
  }
}

template <class T>
__global__ void argmax_kernel(const T* x, int64_t outer, int64_t n, int64_t inner, int64_t* out) {
  TG_GRID_STRIDE(p, outer * inner) {
    const int64_t o = p / inner, i = p % inner;
    const T* col = x + o * n * inner + i;
    int64_t best = 0;
    T top = col[0];
    for (int64_t j = 1; j < n && top == top; ++j) {
      const T v = col[j * inner];
      if (v > top || v != v) {
        top = v;
        best = j;
      }
    }
    out[p] = best;
  }
}

// An id outside [0, n) records an error (Note [kernel errors] in memory.cu) and reads or adds nothing.
template <class I>
__device__ bool id_ok(I id, int64_t n, int64_t position, const ErrorSite& site) {
  const int64_t v = static_cast<int64_t>(id);
  if (v >= 0 && v < n) return true;
  record_error(site, ErrorKind::axis_index_out_of_range, position, v);
  return false;
}

template <class U, class I>
__global__ void gather_axis_kernel(const U* x, const I* ids, U* out, int64_t total, int64_t n, int64_t k,
                                   int64_t inner, ErrorSite site) {
  TG_GRID_STRIDE(p, total) {
    const int64_t i = p % inner, o = p / (inner * k);
    if (id_ok(ids[p], n, p, site)) out[p] = x[(o * n + static_cast<int64_t>(ids[p])) * inner + i];
  }
}

template <class T, class I>
__global__ void scatter_add_axis_kernel(T* dst, const I* ids, const T* src, int64_t total, int64_t n, int64_t k,
                                        int64_t inner, ErrorSite site) {
  TG_GRID_STRIDE(p, total) {
    const int64_t i = p % inner, o = p / (inner * k);
    if (id_ok(ids[p], n, p, site)) atomicAdd(dst + (o * n + static_cast<int64_t>(ids[p])) * inner + i, src[p]);
  }
}

template <class U, class I>
__global__ void index_select_kernel(const U* x, const I* ids, U* out, int64_t total, int64_t n, int64_t k,
                                    int64_t inner, ErrorSite site) {
  TG_GRID_STRIDE(p, total) {
    const int64_t i = p % inner, j = (p / inner) % k, o = p / (inner * k);
    if (id_ok(ids[j], n, j, site)) out[p] = x[(o * n + static_cast<int64_t>(ids[j])) * inner + i];
  }
}

template <class T, class I>
__global__ void index_add_kernel(T* dst, const I* ids, const T* src, int64_t total, int64_t n, int64_t k,
                                 int64_t inner, ErrorSite site) {
  TG_GRID_STRIDE(p, total) {
    const int64_t i = p % inner, j = (p / inner) % k, o = p / (inner * k);
    if (id_ok(ids[j], n, j, site)) atomicAdd(dst + (o * n + static_cast<int64_t>(ids[j])) * inner + i, src[p]);
  }
}

template <class S, class D>
__global__ void cast_kernel(const S* x, D* out, int64_t n) {
  TG_GRID_STRIDE(i, n) out[i] = kernels::convert<D>(x[i]);
}

// f32 -> bf16 four elements a thread, a float4 in and 8 bytes out (autocast's casts: every
// product's operands and dy), each element by convert's rounding. x and out 16- and 8-byte aligned.
__global__ void cast_f32_bf16x4_kernel(const float4* x, uint2* out, int64_t quads) {
  TG_GRID_STRIDE(i, quads) {
    const float4 v = x[i];
    out[i] = make_uint2(kernels::pack_bf16x2(v.x, v.y), kernels::pack_bf16x2(v.z, v.w));
  }
}

template <class T>
__global__ void clamp_kernel(const T* x, T lo, T hi, T* y, int64_t n) {
  TG_GRID_STRIDE(i, n) y[i] = kernels::clamp_of(x[i], lo, hi);
}

template <class T>
__global__ void clamp_backward_kernel(const T* x, T lo, T hi, const T* dy, T* dx, int64_t n) {
  TG_GRID_STRIDE(i, n) dx[i] = kernels::clamp_grad_of(x[i], lo, hi, dy[i]);
}

}  // namespace

// ---- launchers

void binary_walk(Binary op, const Tensor& a, const Tensor& b, Tensor& out) {
  if (out.numel() == 0) return;
  auto run = [&]<class F, class T>() {
    const Walk<3> w = make_walk<3>(out.shape(), {view_of(out), view_of(a), view_of(b)});
    const bool packed = walk_packable<T>(w, out.raw_data());
    binary_walk_kernel<F, T><<<blocks_for(packed ? w.numel / Pack<T>::N : w.numel), kBlock, 0, stream_for(out)>>>(
        w, cdata<T>(a), cdata<T>(b), mdata<T>(out), packed);
    TG_CUDA_CHECK_LAUNCH();
  };
  if (out.dtype() == DType::i32 || out.dtype() == DType::i64) {  // add, sub, mul of ids (binary_ops.hpp)
    kernels::visit_integer_binary(op, [&]<class F>() {
      dispatch_index(F::name, out.dtype(), [&]<class T>() { run.template operator()<F, T>(); });
    });
    return;
  }
  kernels::visit_binary(op, [&]<class F>() {
    dispatch_float(F::name, out.dtype(), [&]<class T>() { run.template operator()<F, T>(); });
  });
}

void binary_backward(Binary op, int k, const Tensor& a, const Tensor& b, const Tensor& y, const Tensor& dy, Tensor& d) {
  if (d.numel() == 0) return;
  kernels::visit_binary(op, [&]<class F>() {
    dispatch_float(F::name, d.dtype(), [&]<class T>() {
      const Walk<4> w = make_walk<4>(dy.shape(), {view_of(a), view_of(b), view_of(y), view_of(dy)});
      binary_backward_kernel<F, T><<<blocks_for(w.numel), kBlock, 0, stream_for(d)>>>(
          w, k, cdata<T>(a), cdata<T>(b), cdata<T>(y), cdata<T>(dy), mdata<T>(d));
      TG_CUDA_CHECK_LAUNCH();
    });
  });
}

void compare(Compare op, const Tensor& a, const Tensor& b, Tensor& out) {
  if (out.numel() == 0) return;
  dispatch_arithmetic("compare", "CUDA", a.dtype(), [&]<class T>() {
    const Walk<3> w = make_walk<3>(out.shape(), {view_of(out), view_of(a), view_of(b)});
    compare_kernel<T><<<blocks_for(w.numel), kBlock, 0, stream_for(out)>>>(w, op, cdata<T>(a), cdata<T>(b),
                                                                            mdata<uint8_t>(out));
    TG_CUDA_CHECK_LAUNCH();
  });
}

void where(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out) {
  if (out.numel() == 0) return;
  dispatch_bytes(out.dtype(), [&]<class U>() {
    const Walk<4> w = make_walk<4>(out.shape(), {view_of(out), view_of(cond), view_of(a), view_of(b)});
    where_kernel<U><<<blocks_for(w.numel), kBlock, 0, stream_for(out)>>>(w, cdata<uint8_t>(cond), cdata<U>(a),
                                                                          cdata<U>(b), mdata<U>(out));
    TG_CUDA_CHECK_LAUNCH();
  });
}

// The walk in 16-byte packs (Note [packed loops]) when its innermost axis is contiguous in both
// operands and every extent, stride and offset falls on a pack: a head permute (B, T, H, hd) ->
// (B, H, T, hd) or a slice of columns, the copies a transformer is made of. One pack per step
// moves four f32 at the index arithmetic of one. False (w unchanged) otherwise.
static bool pack_walk(Walk<2>& w, int64_t element_bytes, const void* a, const void* b) {
  const int64_t per = 16 / element_bytes;
  const int last = w.ndim - 1;
  if (per <= 1 || last < 0 || !packable({a, b}) || w.size[last] % per != 0) return false;
  for (int k = 0; k < 2; ++k) {
    if (w.stride[k][last] != 1 || w.offset[k] % per != 0) return false;
    for (int d = 0; d < last; ++d)
      if (w.stride[k][d] % per != 0) return false;
  }
  w.size[last] /= per;
  w.numel /= per;
  for (int k = 0; k < 2; ++k) {
    w.offset[k] /= per;
    for (int d = 0; d < last; ++d) w.stride[k][d] /= per;
  }
  return true;
}

void copy_strided(const Tensor& src, const View& src_view, Tensor& dst, const View& dst_view) {
  if (dst_view.shape.numel() == 0) return;
  dispatch_bytes(dst.dtype(), [&]<class U>() {
    Walk<2> w = make_walk<2>(dst_view.shape, {dst_view, src_view});
    if (pack_walk(w, sizeof(U), src.raw_data(), dst.raw_data())) {
      copy_strided_kernel<uint4><<<blocks_for(w.numel), kBlock, 0, stream_for(dst)>>>(
          w, cdata<uint4>(src), mdata<uint4>(dst));
    } else {
      copy_strided_kernel<U><<<blocks_for(w.numel), kBlock, 0, stream_for(dst)>>>(w, cdata<U>(src), mdata<U>(dst));
    }
    TG_CUDA_CHECK_LAUNCH();
  });
}

// dst's element + src's, in f32 for bf16 and rounded once, as the CPU's (and binary's add)
void add_strided(const Tensor& src, const View& src_view, Tensor& dst, const View& dst_view) {
  if (src.dtype() != dst.dtype())
    throw Error(std::string("[add_strided] adds ") + dtype_name(src.dtype()) + " into " + dtype_name(dst.dtype()) +
                "; the dtypes must be equal");
  if (dst_view.shape.numel() == 0) return;
  auto run = [&]<class T>() {
    const Walk<2> w = make_walk<2>(dst_view.shape, {dst_view, src_view});
    add_strided_kernel<T><<<blocks_for(w.numel), kBlock, 0, stream_for(dst)>>>(w, cdata<T>(src), mdata<T>(dst));
    TG_CUDA_CHECK_LAUNCH();
  };
  if (dst.dtype() == DType::bf16) return run.template operator()<kernels::bf16>();
  dispatch_float("add_strided", dst.dtype(), [&]<class T>() { run.template operator()<T>(); });
}

void reduce(kernels::Reduce op, const Tensor& x, const Shape& kept, Tensor& out) {
  if (out.numel() == 0) return;
  dispatch_float("reduce", x.dtype(), [&]<class T>() {
    const kernels::ReduceWalk r = kernels::make_reduce_walk(x.shape(), kept);
    if (r.inner.ndim == 1 && r.inner.stride[0][0] == 1 && r.inner.numel >= 32) {
      reduce_runs_kernel<T><<<blocks_for(r.outer.numel * 32), kBlock, 0, stream_for(out)>>>(r.outer, r.inner.numel, op,
                                                                                          cdata<T>(x), mdata<T>(out));
      TG_CUDA_CHECK_LAUNCH();
      return;
    }
    const int64_t outputs = r.outer.numel, count = r.inner.numel;
    if (r.inner.ndim == 1 && outputs < 32 * 1024 && count >= 256) {
      const int pieces = static_cast<int>(std::min<int64_t>(64, count / 64));
      Tensor partials = Tensor::empty(Shape{pieces, outputs}, DType::f64, out.device());
      const dim3 grid(static_cast<unsigned>((outputs + kBlock - 1) / kBlock), static_cast<unsigned>(pieces));
      reduce_partials_kernel<T><<<grid, kBlock, 0, stream_for(out)>>>(r.outer, count, r.inner.stride[0][0], op,
                                                                       cdata<T>(x), mdata<double>(partials));
      TG_CUDA_CHECK_LAUNCH();
      reduce_pieces_kernel<T><<<blocks_for(outputs), kBlock, 0, stream_for(out)>>>(outputs, pieces, count, op,
                                                                                    cdata<double>(partials), mdata<T>(out));
      TG_CUDA_CHECK_LAUNCH();
      return;
    }
    reduce_kernel<T><<<blocks_for(r.outer.numel), kBlock, 0, stream_for(out)>>>(r.outer, r.inner, op, cdata<T>(x),
                                                                                 mdata<T>(out));
    TG_CUDA_CHECK_LAUNCH();
  });
}

void argmax(const Tensor& x, int axis, Tensor& out) {
  if (out.numel() == 0) return;
  dispatch_float("argmax", x.dtype(), [&]<class T>() {
    const kernels::AxisSplit s = kernels::split_at(x.shape(), axis);
    argmax_kernel<T><<<blocks_for(s.outer * s.inner), kBlock, 0, stream_for(out)>>>(cdata<T>(x), s.outer, s.n, s.inner,
                                                                                   mdata<int64_t>(out));
    TG_CUDA_CHECK_LAUNCH();
  });
}

void gather_axis(const Tensor& x, int axis, const Tensor& ids, Tensor& out) {
  const int64_t total = out.numel();
  if (total == 0) return;
  const kernels::AxisSplit s = kernels::split_at(x.shape(), axis);
  const int64_t k = ids.shape()[axis];
  const ErrorSite site = context(x).error_site("gather", s.n, axis);
  dispatch_bytes(x.dtype(), [&]<class U>() {
    dispatch_index("gather", ids.dtype(), [&]<class I>() {
      gather_axis_kernel<U, I><<<blocks_for(total), kBlock, 0, stream_for(x)>>>(cdata<U>(x), cdata<I>(ids), mdata<U>(out),
                                                                                total, s.n, k, s.inner, site);
      TG_CUDA_CHECK_LAUNCH();
    });
  });
}

void scatter_add_axis(Tensor& dst, int axis, const Tensor& ids, const Tensor& src) {
  const int64_t total = src.numel();
  if (total == 0) return;
  const kernels::AxisSplit s = kernels::split_at(dst.shape(), axis);
  const int64_t k = ids.shape()[axis];
  const ErrorSite site = context(dst).error_site("gather_backward", s.n, axis);
  dispatch_float("gather_backward", dst.dtype(), [&]<class T>() {
    dispatch_index("gather_backward", ids.dtype(), [&]<class I>() {
      scatter_add_axis_kernel<T, I><<<blocks_for(total), kBlock, 0, stream_for(dst)>>>(
          mdata<T>(dst), cdata<I>(ids), cdata<T>(src), total, s.n, k, s.inner, site);
      TG_CUDA_CHECK_LAUNCH();
    });
  });
}

void index_select(const Tensor& x, int axis, const Tensor& ids, Tensor& out) {
  const int64_t total = out.numel();
  if (total == 0) return;
  const kernels::AxisSplit s = kernels::split_at(x.shape(), axis);
  const ErrorSite site = context(x).error_site("index_select", s.n, axis);
  dispatch_bytes(x.dtype(), [&]<class U>() {
    dispatch_index("index_select", ids.dtype(), [&]<class I>() {
      index_select_kernel<U, I><<<blocks_for(total), kBlock, 0, stream_for(x)>>>(
          cdata<U>(x), cdata<I>(ids), mdata<U>(out), total, s.n, ids.numel(), s.inner, site);
      TG_CUDA_CHECK_LAUNCH();
    });
  });
}

void index_add(Tensor& dst, int axis, const Tensor& ids, const Tensor& src) {
  const int64_t total = src.numel();
  if (total == 0) return;
  const kernels::AxisSplit s = kernels::split_at(dst.shape(), axis);
  const ErrorSite site = context(dst).error_site("index_select_backward", s.n, axis);
  dispatch_float("index_select_backward", dst.dtype(), [&]<class T>() {
    dispatch_index("index_select_backward", ids.dtype(), [&]<class I>() {
      index_add_kernel<T, I><<<blocks_for(total), kBlock, 0, stream_for(dst)>>>(
          mdata<T>(dst), cdata<I>(ids), cdata<T>(src), total, s.n, ids.numel(), s.inner, site);
      TG_CUDA_CHECK_LAUNCH();
    });
  });
}

void cast(const Tensor& x, Tensor& out) {
  const int64_t n = x.numel();
  if (n == 0) return;
  if (x.dtype() == DType::f32 && out.dtype() == DType::bf16 && reinterpret_cast<uintptr_t>(x.raw_data()) % 16 == 0 &&
      reinterpret_cast<uintptr_t>(out.raw_data()) % 8 == 0) {
    const int64_t quads = n / 4;
    if (quads > 0) {
      cast_f32_bf16x4_kernel<<<blocks_for(quads), kBlock, 0, stream_for(x)>>>(cdata<float4>(x), mdata<uint2>(out), quads);
      TG_CUDA_CHECK_LAUNCH();
    }
    if (n % 4 == 0) return;
    cast_kernel<float, kernels::bf16><<<1, kBlock, 0, stream_for(x)>>>(cdata<float>(x) + 4 * quads,
                                                                       mdata<kernels::bf16>(out) + 4 * quads, n % 4);
    TG_CUDA_CHECK_LAUNCH();
    return;
  }
  kernels::dispatch_castable("to", "CUDA", x.dtype(), [&]<class S>() {
    kernels::dispatch_castable("to", "CUDA", out.dtype(), [&]<class D>() {
      cast_kernel<S, D><<<blocks_for(n), kBlock, 0, stream_for(x)>>>(cdata<S>(x), mdata<D>(out), n);
      TG_CUDA_CHECK_LAUNCH();
    });
  });
}

void clamp(const Tensor& x, double lo, double hi, Tensor& y) {
  const int64_t n = x.numel();
  if (n == 0) return;
  dispatch_float("clamp", x.dtype(), [&]<class T>() {
    clamp_kernel<T><<<blocks_for(n), kBlock, 0, stream_for(x)>>>(cdata<T>(x), static_cast<T>(lo), static_cast<T>(hi),
                                                                  mdata<T>(y), n);
    TG_CUDA_CHECK_LAUNCH();
  });
}

void clamp_backward(const Tensor& x, double lo, double hi, const Tensor& dy, Tensor& dx) {
  const int64_t n = x.numel();
  if (n == 0) return;
  dispatch_float("clamp", x.dtype(), [&]<class T>() {
    clamp_backward_kernel<T><<<blocks_for(n), kBlock, 0, stream_for(x)>>>(cdata<T>(x), static_cast<T>(lo),
                                                                           static_cast<T>(hi), cdata<T>(dy), mdata<T>(dx), n);
    TG_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace tapegrad::cuda
