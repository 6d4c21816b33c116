// Helpers shared by the CPU kernels: dtype dispatch, flat xtensor views over tensor storage, and
// the chunk sizes kernels hand to parallel_for (src/tensor/parallel.hpp).
#pragma once

#include <algorithm>
#include <array>
#include <string>

#include <xtensor/xadapt.hpp>

#include "tapegrad/tensor/parallel.hpp"
#include "tapegrad/tensor/tensor.hpp"

namespace tapegrad::cpu {

// Calls f.template operator()<T>() with T = double or float; other dtypes are an error naming op.
template <class F>
decltype(auto) dispatch_float(const char* op, DType t, F&& f) {
  switch (t) {
    case DType::f64: return f.template operator()<double>();
    case DType::f32: return f.template operator()<float>();
    default:
      throw Error(std::string("[") + op + "] no CPU kernel for " + dtype_name(t) + " (f64 and f32 only)");
  }
}

// Calls f.template operator()<I>() with I = int32_t or int64_t for index tensors.
template <class F>
decltype(auto) dispatch_index(const char* op, DType t, F&& f) {
  switch (t) {
    case DType::i32: return f.template operator()<int32_t>();
    case DType::i64: return f.template operator()<int64_t>();
    default:
      throw Error(std::string("[") + op + "] indices must be i32 or i64, got " + dtype_name(t));
  }
}

// A 1-D xtensor view over every element of t (no copy, no ownership). Assigning to it evaluates.
template <class T>
auto flat(const Tensor& t) {
  size_t n = static_cast<size_t>(t.numel());
  return xt::adapt(static_cast<T*>(t.raw_data()), n, xt::no_ownership(), std::array<size_t, 1>{n});
}

// The same over elements [begin, end) only (one parallel_for range).
template <class T>
auto flat(const Tensor& t, int64_t begin, int64_t end) {
  size_t n = static_cast<size_t>(end - begin);
  return xt::adapt(static_cast<T*>(t.raw_data()) + begin, n, xt::no_ownership(), std::array<size_t, 1>{n});
}

// The chunk for a loop over n rows of row_bytes each whose rows are costly (a max, exponentials,
// a sum and divisions per element): about 4 KiB of rows a chunk, so that even a few dozen rows
// spread over the threads; n (the whole loop on its caller) under 8 KiB in all.
inline int64_t costly_rows_chunk(int64_t n, int64_t row_bytes) {
  if (n * row_bytes < 8192) return n;
  return std::max<int64_t>(1, 4096 / std::max<int64_t>(row_bytes, 1));
}

// cpuperf: a loop that `chunk` would split (chunk < n) as one range per thread instead, where that
// is the larger chunk. The pool deals chunk c to thread c % threads (Note [intra-op threads]), so
// with one range each, thread t gets the t-th part of every loop over the same tensor whatever
// chunk sizes the kernels would pick (rows of a softmax, 16 KiB of elements): a softmax's y, its
// product with r and the backward's reads stay in the core that wrote them. The split never
// changes an element's bits (each is computed by one thread either way). The price: a worker that
// is descheduled in the middle of its range holds the loop up by the rest of that range, not by
// one chunk.
inline int64_t range_per_thread(int64_t n, int64_t chunk) {
  if (chunk >= n) return n;
  const int64_t threads = num_threads();
  return std::max(chunk, (n + threads - 1) / threads);
}

}  // namespace tapegrad::cpu
