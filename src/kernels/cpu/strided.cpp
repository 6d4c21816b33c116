// CPU N-d kernels over strided walks (Note [strided walks] in src/kernels/strided.hpp):
// broadcasting binary ops and their partials, comparisons, where, strided copies and adds, reductions along
// axes, argmax, gather / scatter along an axis, index_select / index_add, casts and clamp.
//
// Rule: an output element is computed by one thread, from its operands' elements in a fixed
// order, so the bits never depend on the thread count; a reduction's order is its inner walk's
// (row-major over the reduced axes), accumulated in double.
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "tapegrad/kernels/bf16.hpp"
#include "tapegrad/kernels/binary_ops.hpp"
#include "tapegrad/kernels/dtype_dispatch.hpp"
#include "tapegrad/kernels/cpu/cpu_kernels.hpp"
#include "tapegrad/kernels/cpu/dispatch.hpp"
#include "tapegrad/kernels/strided.hpp"

namespace tapegrad::cpu {

using kernels::Compare;
using kernels::dispatch_arithmetic;
using kernels::dispatch_bytes;
using kernels::make_walk;
using kernels::View;
using kernels::Walk;

namespace {

// f(off, n, inner) for each run of the walk's last axis inside elements [begin, end): off are the
// operands' offsets at the run's first element, n its length, inner the operands' last-axis strides.
// The position of `begin` is found once (Walk::at's divisions); each next run's comes from the
// last one's by stepping the axes' indices like an odometer, which for short runs (a transpose's
// rows of one head) is most of the cost that dividing per run would have been.
template <int N, class F>
void for_each_run(const Walk<N>& w, int64_t begin, int64_t end, F&& f) {
  int64_t inner[N];
  for (int k = 0; k < N; ++k) inner[k] = w.ndim > 0 ? w.stride[k][w.ndim - 1] : 0;
  if (begin >= end) return;
  int64_t off[N];
  w.at(begin, off);
  if (w.ndim == 0) return f(off, end - begin, inner);  // the one element
  int64_t index[kernels::kMaxDims];  // begin's index along each axis
  for (int64_t d = w.ndim - 1, i = begin; d >= 0; --d) {
    index[d] = i % w.size[d];
    i /= w.size[d];
  }
  const int last = w.ndim - 1;
  for (int64_t i = begin; i < end;) {
    const int64_t n = std::min(w.size[last] - index[last], end - i);
    f(off, n, inner);
    i += n;
    index[last] += n;
    for (int k = 0; k < N; ++k) off[k] += n * inner[k];
    for (int d = last; d > 0 && index[d] == w.size[d]; --d) {  // carry into the axes outside
      index[d] = 0;
      ++index[d - 1];
      for (int k = 0; k < N; ++k) off[k] += w.stride[k][d - 1] - w.size[d] * w.stride[k][d];
    }
  }
}

template <int N>
int64_t walk_chunk(const Walk<N>& w, int64_t item_bytes, Work work) {
  return chunk_for(w.numel, item_bytes, work);
}

// Calls f.template operator()<U>() with U an unsigned integer of the dtype's size: copies move
// elements of any dtype as bytes.

View view_of(const Tensor& t) { return kernels::contiguous_view(t.shape()); }


}  // namespace

// out = F(a, b) with a and b broadcast to out's shape; runs with unit or zero strides get their own
// loops (the compiler vectorizes those).
void binary_walk(Binary op, const Tensor& a, const Tensor& b, Tensor& out) {
  auto run = [&]<class F, class T>() {
    const Walk<3> w = make_walk<3>(out.shape(), {view_of(out), view_of(a), view_of(b)});
    const T* A = static_cast<const T*>(a.raw_data());
    const T* B = static_cast<const T*>(b.raw_data());
    T* O = static_cast<T*>(out.raw_data());
    parallel_for(w.numel, range_per_thread(w.numel, walk_chunk(w, sizeof(T), Work::arithmetic)), [&](int64_t begin, int64_t end) {
      for_each_run(w, begin, end, [&](const int64_t* off, int64_t n, const int64_t* s) {
        T* o = O + off[0];
        const T* x = A + off[1];
        const T* y = B + off[2];
        if (s[1] == 1 && s[2] == 1) for (int64_t j = 0; j < n; ++j) o[j] = F::forward(x[j], y[j]);
        else if (s[1] == 1 && s[2] == 0) for (int64_t j = 0; j < n; ++j) o[j] = F::forward(x[j], y[0]);
        else if (s[1] == 0 && s[2] == 1) for (int64_t j = 0; j < n; ++j) o[j] = F::forward(x[0], y[j]);
        else for (int64_t j = 0; j < n; ++j) o[j] = F::forward(x[j * s[1]], y[j * s[2]]);
      });
    });
  };
  if (out.dtype() == DType::i32 || out.dtype() == DType::i64) {
    kernels::visit_integer_binary(op, [&]<class F>() {
      dispatch_index(F::name, out.dtype(), [&]<class T>() { run.template operator()<F, T>(); });
    });
    return;
  }
  kernels::visit_binary(op, [&]<class F>() {
    dispatch_float(F::name, out.dtype(), [&]<class T>() { run.template operator()<F, T>(); });
  });
}

void binary_backward(Binary op, int k, const Tensor& a, const Tensor& b, const Tensor& y, const Tensor& dy,
                     Tensor& d) {
  kernels::visit_binary(op, [&]<class F>() {
    dispatch_float(F::name, d.dtype(), [&]<class T>() {
      const Walk<4> w = make_walk<4>(dy.shape(), {view_of(a), view_of(b), view_of(y), view_of(dy)});
      const T* A = static_cast<const T*>(a.raw_data());
      const T* B = static_cast<const T*>(b.raw_data());
      const T* Y = static_cast<const T*>(y.raw_data());
      const T* dY = static_cast<const T*>(dy.raw_data());
      T* D = static_cast<T*>(d.raw_data());  // dy's shape, contiguous: element i at i
      // One run: operand strides SA and SB known (0 or 1) or read from s (-1); y and dy in steps of s.
      auto run = [&]<int K, int SA, int SB>(const int64_t* off, int64_t n, const int64_t* s, T* o) {
        const T *x = A + off[0], *z = B + off[1], *r = Y + off[2], *g = dY + off[3];
        const int64_t sa = SA < 0 ? s[0] : SA, sb = SB < 0 ? s[1] : SB, sy = SA < 0 ? s[2] : 1, sg = SA < 0 ? s[3] : 1;
        for (int64_t j = 0; j < n; ++j) {
          const T xa = x[j * sa], zb = z[j * sb], ry = r[j * sy], gd = g[j * sg];
          o[j] = K == 0 ? F::da(xa, zb, ry, gd) : F::db(xa, zb, ry, gd);
        }
      };
      auto runs = [&]<int K>(int64_t begin, int64_t end) {
        int64_t i = begin;
        for_each_run(w, begin, end, [&](const int64_t* off, int64_t n, const int64_t* s) {
          if (s[2] == 1 && s[3] == 1 && s[0] == 1 && s[1] == 1) run.template operator()<K, 1, 1>(off, n, s, D + i);
          else if (s[2] == 1 && s[3] == 1 && s[0] == 1 && s[1] == 0) run.template operator()<K, 1, 0>(off, n, s, D + i);
          else if (s[2] == 1 && s[3] == 1 && s[0] == 0 && s[1] == 1) run.template operator()<K, 0, 1>(off, n, s, D + i);
          else run.template operator()<K, -1, -1>(off, n, s, D + i);
          i += n;
        });
      };
      parallel_for(w.numel, range_per_thread(w.numel, walk_chunk(w, sizeof(T), Work::arithmetic)), [&](int64_t begin, int64_t end) {
        if (k == 0) runs.template operator()<0>(begin, end);
        else runs.template operator()<1>(begin, end);
      });
    });
  });
}

void compare(Compare op, const Tensor& a, const Tensor& b, Tensor& out) {
  dispatch_arithmetic("compare", "CPU", a.dtype(), [&]<class T>() {
    const Walk<3> w = make_walk<3>(out.shape(), {view_of(out), view_of(a), view_of(b)});
    const T* A = static_cast<const T*>(a.raw_data());
    const T* B = static_cast<const T*>(b.raw_data());
    uint8_t* O = static_cast<uint8_t*>(out.raw_data());
    parallel_for(w.numel, walk_chunk(w, sizeof(T), Work::streaming), [&](int64_t begin, int64_t end) {
      for_each_run(w, begin, end, [&](const int64_t* off, int64_t n, const int64_t* s) {
        for (int64_t j = 0; j < n; ++j)
          O[off[0] + j] = kernels::compare_of(op, A[off[1] + j * s[1]], B[off[2] + j * s[2]]) ? 1 : 0;
      });
    });
  });
}

void where(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out) {
  dispatch_bytes(out.dtype(), [&]<class U>() {
    const Walk<4> w = make_walk<4>(out.shape(), {view_of(out), view_of(cond), view_of(a), view_of(b)});
    const uint8_t* C = static_cast<const uint8_t*>(cond.raw_data());
    const U* A = static_cast<const U*>(a.raw_data());
    const U* B = static_cast<const U*>(b.raw_data());
    U* O = static_cast<U*>(out.raw_data());
    parallel_for(w.numel, walk_chunk(w, sizeof(U), Work::streaming), [&](int64_t begin, int64_t end) {
      for_each_run(w, begin, end, [&](const int64_t* off, int64_t n, const int64_t* s) {
        for (int64_t j = 0; j < n; ++j)
          O[off[0] + j] = C[off[1] + j * s[1]] ? A[off[2] + j * s[2]] : B[off[3] + j * s[3]];
      });
    });
  });
}

void copy_strided(const Tensor& src, const View& src_view, Tensor& dst, const View& dst_view) {
  dispatch_bytes(dst.dtype(), [&]<class U>() {
    const Walk<2> w = make_walk<2>(dst_view.shape, {dst_view, src_view});
    const U* S = static_cast<const U*>(src.raw_data());
    U* D = static_cast<U*>(dst.raw_data());
    parallel_for(w.numel, walk_chunk(w, sizeof(U), Work::streaming), [&](int64_t begin, int64_t end) {
      for_each_run(w, begin, end, [&](const int64_t* off, int64_t n, const int64_t* s) {
        U* d = D + off[0];
        const U* x = S + off[1];
        if (s[0] == 1 && s[1] == 1) std::memcpy(d, x, static_cast<size_t>(n) * sizeof(U));
        else if (s[1] == 0) for (int64_t j = 0; j < n; ++j) d[j * s[0]] = x[0];
        else for (int64_t j = 0; j < n; ++j) d[j * s[0]] = x[j * s[1]];
      });
    });
  });
}

// dst's element + src's, in f32 for bf16 and rounded once (Note [bf16 elementwise]), as binary's add
void add_strided(const Tensor& src, const View& src_view, Tensor& dst, const View& dst_view) {
  if (src.dtype() != dst.dtype())
    throw Error(std::string("[add_strided] adds ") + dtype_name(src.dtype()) + " into " + dtype_name(dst.dtype()) +
                "; the dtypes must be equal");
  auto run = [&]<class T>() {
    const Walk<2> w = make_walk<2>(dst_view.shape, {dst_view, src_view});
    const T* S = static_cast<const T*>(src.raw_data());
    T* D = static_cast<T*>(dst.raw_data());
    parallel_for(w.numel, walk_chunk(w, sizeof(T), Work::streaming), [&](int64_t begin, int64_t end) {
      for_each_run(w, begin, end, [&](const int64_t* off, int64_t n, const int64_t* s) {
        T* d = D + off[0];
        const T* x = S + off[1];
        for (int64_t j = 0; j < n; ++j) {
          T& o = d[j * s[0]];
          if constexpr (std::is_same_v<T, kernels::bf16>) o = kernels::to_bf16(kernels::widen(o) + kernels::widen(x[j * s[1]]));
          else o = o + x[j * s[1]];
        }
      });
    });
  };
  if (dst.dtype() == DType::bf16) return run.template operator()<kernels::bf16>();
  dispatch_float("add_strided", dst.dtype(), [&]<class T>() { run.template operator()<T>(); });
}

// Each output element reduces its inner walk in order, in double. When the reduced axes are all
// in front of the kept ones (a bias gradient: (N, C) -> (C,)), whole rows are added in turn into
// a row of accumulators instead: the same additions in the same order per element, read
// contiguously.
void reduce(Reduce op, const Tensor& x, const Shape& kept, Tensor& out) {
  dispatch_float("reduce", x.dtype(), [&]<class T>() {
    const kernels::ReduceWalk r = kernels::make_reduce_walk(x.shape(), kept);
    const T* X = static_cast<const T*>(x.raw_data());
    T* O = static_cast<T*>(out.raw_data());
    const int64_t count = r.inner.numel;
    const double init = op == Reduce::max ? -INFINITY : op == Reduce::min ? INFINITY : 0.0;
    auto step = [op](double acc, double v) {
      switch (op) {
        case Reduce::max: return v != v || acc != acc ? (acc != acc ? acc : v) : (v > acc ? v : acc);
        case Reduce::min: return v != v || acc != acc ? (acc != acc ? acc : v) : (v < acc ? v : acc);
        default: return acc + v;
      }
    };
    auto finish = [&](double acc) { return static_cast<T>(op == Reduce::mean ? acc / static_cast<double>(count) : acc); };
    const int64_t m = r.outer.numel;
    const bool rows = r.inner.ndim == 1 && r.outer.ndim == 1 && r.outer.stride[1][0] == 1 && r.inner.stride[0][0] == m;
    if (rows) {  // x (count, m) -> (m,), in bands of at least 128 columns (whole cache lines of each row)
      const int64_t band = chunk_for(m, count * static_cast<int64_t>(sizeof(T)), Work::arithmetic) < m ? 128 : m;
      parallel_for(m, band,
                   [&](int64_t begin, int64_t end) {
                     std::vector<double> acc(static_cast<size_t>(end - begin), init);
                     double* __restrict a = acc.data();
                     const int64_t width = end - begin;
                     if (op == Reduce::sum || op == Reduce::mean) {  // the same additions, in a loop the compiler vectorizes
                       for (int64_t i = 0; i < count; ++i) {
                         const T* __restrict row = X + i * m + begin;
                         for (int64_t j = 0; j < width; ++j) a[j] += static_cast<double>(row[j]);
                       }
                     } else {
                       for (int64_t i = 0; i < count; ++i) {
                         const T* row = X + i * m + begin;
                         for (int64_t j = 0; j < width; ++j) a[j] = step(a[j], row[j]);
                       }
                     }
                     for (int64_t j = begin; j < end; ++j) O[j] = finish(acc[static_cast<size_t>(j - begin)]);
                   });
      return;
    }
    const bool contiguous = r.inner.ndim <= 1 && (r.inner.ndim == 0 || r.inner.stride[0][0] == 1);
    parallel_for(m, chunk_for(m, count * static_cast<int64_t>(sizeof(T)), Work::arithmetic),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t o = begin; o < end; ++o) {
                     int64_t off[2];
                     r.outer.at(o, off);
                     const T* base = X + off[1];
                     double acc = init;
                     if (contiguous) {
                       for (int64_t j = 0; j < count; ++j) acc = step(acc, base[j]);
                     } else {
                       for_each_run(r.inner, 0, count, [&](const int64_t* in, int64_t n, const int64_t* s) {
                         for (int64_t j = 0; j < n; ++j) acc = step(acc, base[in[0] + j * s[0]]);
                       });
                     }
                     O[off[0]] = finish(acc);
                   }
                 });
  });
}

// out (outer, inner) i64 = the first index of the largest element along the axis (a NaN counts as
// the largest, as PyTorch's argmax has it)
void argmax(const Tensor& x, int axis, Tensor& out) {
  dispatch_float("argmax", x.dtype(), [&]<class T>() {
    const kernels::AxisSplit s = kernels::split_at(x.shape(), axis);
    const T* X = static_cast<const T*>(x.raw_data());
    int64_t* O = static_cast<int64_t*>(out.raw_data());
    parallel_for(s.outer * s.inner, chunk_for(s.outer * s.inner, s.n * static_cast<int64_t>(sizeof(T)), Work::arithmetic),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t p = begin; p < end; ++p) {
                     const int64_t o = p / s.inner, i = p % s.inner;
                     const T* col = X + o * s.n * s.inner + i;
                     int64_t best = 0;
                     T top = col[0];
                     for (int64_t j = 1; j < s.n && top == top; ++j) {
                       const T v = col[j * s.inner];
                       if (v > top || v != v) { top = v; best = j; }
                     }
                     O[p] = best;
                   }
                 });
  });
}

namespace {

template <class I>
int64_t checked_id(const char* op, I id, int64_t n, int axis, const Shape& shape) {
  const int64_t v = static_cast<int64_t>(id);
  if (v < 0 || v >= n)
    throw Error(std::string("[") + op + "] index " + std::to_string(v) + " is out of range for axis " +
                std::to_string(axis) + " of size " + std::to_string(n) + " (x " + shape.str() + ")");
  return v;
}

}  // namespace

// x (outer, n, inner), ids (outer, k, inner) -> out (outer, k, inner): out[o, j, i] = x[o, ids[o, j, i], i]
void gather_axis(const Tensor& x, int axis, const Tensor& ids, Tensor& out) {
  dispatch_bytes(x.dtype(), [&]<class U>() {
    dispatch_index("gather", ids.dtype(), [&]<class I>() {
      const kernels::AxisSplit s = kernels::split_at(x.shape(), axis);
      const int64_t k = ids.shape()[axis];
      const U* X = static_cast<const U*>(x.raw_data());
      const I* ID = static_cast<const I*>(ids.raw_data());
      U* O = static_cast<U*>(out.raw_data());
      const int64_t total = out.numel();
      parallel_for(total, chunk_for(total, sizeof(U)), [&](int64_t begin, int64_t end) {
        for (int64_t p = begin; p < end; ++p) {
          const int64_t i = p % s.inner, o = p / (s.inner * k);
          const int64_t id = checked_id("gather", ID[p], s.n, axis, x.shape());
          O[p] = X[(o * s.n + id) * s.inner + i];
        }
      });
    });
  });
}

// dst (outer, n, inner) += src (outer, k, inner) at ids (outer, k, inner) along the axis, in j order
// for each (o, i): columns are independent, so they split over threads
void scatter_add_axis(Tensor& dst, int axis, const Tensor& ids, const Tensor& src) {
  dispatch_float("gather_backward", dst.dtype(), [&]<class T>() {
    dispatch_index("gather_backward", ids.dtype(), [&]<class I>() {
      const kernels::AxisSplit s = kernels::split_at(dst.shape(), axis);
      const int64_t k = ids.shape()[axis];
      const I* ID = static_cast<const I*>(ids.raw_data());
      const T* S = static_cast<const T*>(src.raw_data());
      T* D = static_cast<T*>(dst.raw_data());
      const int64_t columns = s.outer * s.inner;
      parallel_for(columns, chunk_for(columns, k * static_cast<int64_t>(sizeof(T))), [&](int64_t begin, int64_t end) {
        for (int64_t c = begin; c < end; ++c) {
          const int64_t o = c / s.inner, i = c % s.inner;
          for (int64_t j = 0; j < k; ++j) {
            const int64_t p = (o * k + j) * s.inner + i;
            const int64_t id = checked_id("gather_backward", ID[p], s.n, axis, dst.shape());
            D[(o * s.n + id) * s.inner + i] += S[p];
          }
        }
      });
    });
  });
}

// x (outer, n, inner), ids (k,) -> out (outer, k, inner) = x[:, ids, :]
void index_select(const Tensor& x, int axis, const Tensor& ids, Tensor& out) {
  dispatch_bytes(x.dtype(), [&]<class U>() {
    dispatch_index("index_select", ids.dtype(), [&]<class I>() {
      const kernels::AxisSplit s = kernels::split_at(x.shape(), axis);
      const int64_t k = ids.numel();
      const I* ID = static_cast<const I*>(ids.raw_data());
      std::vector<int64_t> checked(static_cast<size_t>(k));
      for (int64_t j = 0; j < k; ++j) checked[static_cast<size_t>(j)] = checked_id("index_select", ID[j], s.n, axis, x.shape());
      const U* X = static_cast<const U*>(x.raw_data());
      U* O = static_cast<U*>(out.raw_data());
      const int64_t rows = s.outer * k;
      parallel_for(rows, chunk_for(rows, s.inner * static_cast<int64_t>(sizeof(U))), [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const int64_t o = r / k, j = r % k;
          std::memcpy(O + r * s.inner, X + (o * s.n + checked[static_cast<size_t>(j)]) * s.inner,
                      static_cast<size_t>(s.inner) * sizeof(U));
        }
      });
    });
  });
}

// dst (outer, n, inner)[:, ids[j], :] += src (outer, k, inner)[:, j, :] for j in order; the outer
// slices are independent and split over threads
void index_add(Tensor& dst, int axis, const Tensor& ids, const Tensor& src) {
  dispatch_float("index_select_backward", dst.dtype(), [&]<class T>() {
    dispatch_index("index_select_backward", ids.dtype(), [&]<class I>() {
      const kernels::AxisSplit s = kernels::split_at(dst.shape(), axis);
      const int64_t k = ids.numel();
      const I* ID = static_cast<const I*>(ids.raw_data());
      const T* S = static_cast<const T*>(src.raw_data());
      T* D = static_cast<T*>(dst.raw_data());
      parallel_for(s.outer, chunk_for(s.outer, k * s.inner * static_cast<int64_t>(sizeof(T))), [&](int64_t begin, int64_t end) {
        for (int64_t o = begin; o < end; ++o)
          for (int64_t j = 0; j < k; ++j) {
            const int64_t id = checked_id("index_select_backward", ID[j], s.n, axis, dst.shape());
            T* d = D + (o * s.n + id) * s.inner;
            const T* x = S + (o * k + j) * s.inner;
            for (int64_t i = 0; i < s.inner; ++i) d[i] += x[i];
          }
      });
    });
  });
}

// out = x converted to out's dtype (C++'s conversions: floats to integers truncate toward zero;
// bf16 by kernels::convert, bf16.hpp)
void cast(const Tensor& x, Tensor& out) {
  kernels::dispatch_castable("to", "CPU", x.dtype(), [&]<class S>() {
    kernels::dispatch_castable("to", "CPU", out.dtype(), [&]<class D>() {
      const S* X = static_cast<const S*>(x.raw_data());
      D* O = static_cast<D*>(out.raw_data());
      parallel_for(x.numel(), chunk_for(x.numel(), sizeof(D)), [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) O[i] = kernels::convert<D>(X[i]);
      });
    });
  });
}

void clamp(const Tensor& x, double lo, double hi, Tensor& y) {
  dispatch_float("clamp", x.dtype(), [&]<class T>() {
    const T* X = static_cast<const T*>(x.raw_data());
    T* Y = static_cast<T*>(y.raw_data());
    const T l = static_cast<T>(lo), h = static_cast<T>(hi);
    parallel_for(x.numel(), chunk_for(x.numel(), sizeof(T)), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) Y[i] = kernels::clamp_of(X[i], l, h);
    });
  });
}

void clamp_backward(const Tensor& x, double lo, double hi, const Tensor& dy, Tensor& dx) {
  dispatch_float("clamp", x.dtype(), [&]<class T>() {
    const T* X = static_cast<const T*>(x.raw_data());
    const T* dY = static_cast<const T*>(dy.raw_data());
    T* dX = static_cast<T*>(dx.raw_data());
    const T l = static_cast<T>(lo), h = static_cast<T>(hi);
    parallel_for(x.numel(), chunk_for(x.numel(), sizeof(T)), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) dX[i] = kernels::clamp_grad_of(X[i], l, h, dY[i]);
    });
  });
}

}  // namespace tapegrad::cpu
