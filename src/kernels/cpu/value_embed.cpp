// CPU kernels of the value-embed family (declared in src/kernels/value_embed_kernels.hpp): the
// reference every CUDA kernel of src/cuda/value_embed.cu is checked against.
//
// Rules: the atomic mode adds one contribution at a time in index order, each rounded to the
// buffer's dtype; the deterministic mode follows Note [value-embed arithmetic]
// (src/ops/value_embed.cpp) step by step, so it gives the CUDA kernel's bits. Every id is checked
// before the first write, so a refused call leaves the buffer as it was.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "tapegrad/tensor/half.hpp"
#include "tapegrad/kernels/cpu/dispatch.hpp"
#include "tapegrad/kernels/cpu/cpu_kernels.hpp"

namespace tapegrad::cpu {

int64_t value_embed_workspace_elements(Device, int64_t) { return 0; }  // the CPU groups nothing

namespace {

// The 16-bit storage types, as distinct C++ types so templates can tell them apart.
struct bf16_t { uint16_t bits; };
struct f16_t { uint16_t bits; };

inline float widen(float x) { return x; }
inline float widen(bf16_t x) { return bf16_to_f32(x.bits); }
inline float widen(f16_t x) { return f16_to_f32(x.bits); }

template <class T> T narrow(float x);  // round to nearest even
template <> float narrow<float>(float x) { return x; }
template <> bf16_t narrow<bf16_t>(float x) { return {f32_to_bf16(x)}; }
template <> f16_t narrow<f16_t>(float x) { return {f32_to_f16(x)}; }

// Calls f.template operator()<T>() with T the C++ type of a table or plane gradient (bf16, f32).
template <class F>
decltype(auto) dispatch_table(const char* op, DType t, F&& f) {
  switch (t) {
    case DType::bf16: return f.template operator()<bf16_t>();
    case DType::f32: return f.template operator()<float>();
    default: throw Error(std::string("[") + op + "] no CPU kernel for " + dtype_name(t) + " (bf16 and f32 only)");
  }
}

// The same for a gradient buffer (f16, f32).
template <class F>
decltype(auto) dispatch_buffer(const char* op, DType t, F&& f) {
  switch (t) {
    case DType::f16: return f.template operator()<f16_t>();
    case DType::f32: return f.template operator()<float>();
    default: throw Error(std::string("[") + op + "] no CPU kernel for a " + dtype_name(t) + " buffer (f16 and f32 only)");
  }
}

// ids as int64, every one checked against [0, vocab) first; the message names the op and one plane
// (vocab, d), as the CUDA kernels' does.
std::vector<int64_t> checked_ids(const char* op, const Tensor& ids, int64_t vocab, int64_t d) {
  return dispatch_index(op, ids.dtype(), [&]<class I>() {
    const I* id = static_cast<const I*>(ids.raw_data());
    std::vector<int64_t> out(static_cast<size_t>(ids.numel()));
    for (size_t i = 0; i < out.size(); ++i) {
      out[i] = static_cast<int64_t>(id[i]);
      if (out[i] < 0 || out[i] >= vocab)
        throw Error(std::string("[") + op + "] index " + std::to_string(out[i]) + " at position " + std::to_string(i) +
                    " is out of range for a table of " + std::to_string(vocab) + " rows (shape " +
                    Shape{vocab, d}.str() + ")");
    }
    return out;
  });
}

// Note [value-embed arithmetic], the deterministic mode, for one row's contributions `positions`
// (in index order, `first` = where they start in the sorted order): parts cut at multiples of the
// chunk size, each summed in fp32 from zero, the parts' sums added in order, then one rounding.
template <class G, class S>
void add_segment(const G* dplane, int64_t d, const std::vector<int64_t>& order, int64_t first, int64_t end,
                 S* row, std::vector<float>& part, std::vector<float>& total) {
  const int64_t chunk = kernels::kValueEmbedChunk;
  bool have_total = false;
  std::fill(part.begin(), part.end(), 0.0f);
  for (int64_t k = first; k < end; ++k) {
    const G* g = dplane + order[static_cast<size_t>(k)] * d;
    for (int64_t j = 0; j < d; ++j) part[static_cast<size_t>(j)] = part[static_cast<size_t>(j)] + widen(g[j]);
    if (k + 1 == end || (k + 1) % chunk == 0) {  // a part ends: at the row's end or a chunk boundary
      for (int64_t j = 0; j < d; ++j) {
        const size_t jj = static_cast<size_t>(j);
        total[jj] = have_total ? total[jj] + part[jj] : part[jj];
        part[jj] = 0.0f;
      }
      have_total = true;
    }
  }
  for (int64_t j = 0; j < d; ++j) row[j] = narrow<S>(widen(row[j]) + total[static_cast<size_t>(j)]);
}

}  // namespace

void value_embed_gather(const Tensor& weight, const Tensor& ids, Tensor& planes) {
  const int64_t p_count = planes.dim(0), t = planes.dim(1), d = weight.dim(1), vocab = p_count ? weight.dim(0) / p_count : 0;
  const std::vector<int64_t> id = checked_ids("value_embed_lookup", ids, vocab, d);
  if (planes.dtype() == weight.dtype()) {  // rows copied as bytes
    const size_t row_bytes = static_cast<size_t>(d) * dtype_size(weight.dtype());
    const char* src = static_cast<const char*>(weight.raw_data());
    char* dst = static_cast<char*>(planes.raw_data());
    for (int64_t p = 0; p < p_count; ++p)
      for (int64_t i = 0; i < t; ++i)
        std::memcpy(dst + static_cast<size_t>(p * t + i) * row_bytes,
                    src + static_cast<size_t>(p * vocab + id[static_cast<size_t>(i)]) * row_bytes, row_bytes);
    return;
  }
  const bf16_t* src = static_cast<const bf16_t*>(weight.raw_data());  // bf16 widened to f32 (checked by the op)
  float* dst = planes.mutable_data<float>();
  for (int64_t p = 0; p < p_count; ++p)
    for (int64_t i = 0; i < t; ++i)
      for (int64_t j = 0; j < d; ++j) dst[(p * t + i) * d + j] = widen(src[(p * vocab + id[static_cast<size_t>(i)]) * d + j]);
}

void value_embed_accumulate(const Tensor& dplanes, const Tensor& ids, kernels::ValueEmbedAccumulate mode,
                            kernels::ValueEmbedBuffer& buffer) {
  Tensor& sum = buffer.sum;  // the workspace is CUDA's: the CPU needs none
  Tensor& touched = buffer.touched;
  const int64_t p_count = dplanes.dim(0), t = dplanes.dim(1), d = dplanes.dim(2), vocab = touched.dim(0);
  const std::vector<int64_t> id = checked_ids("value_embed_backward", ids, vocab, d);
  dispatch_table("value_embed_lookup", dplanes.dtype(), [&]<class G>() {
    dispatch_buffer("value_embed_lookup", sum.dtype(), [&]<class S>() {
      const G* g = static_cast<const G*>(dplanes.raw_data());
      S* s = static_cast<S*>(sum.raw_data());
      if (mode == kernels::ValueEmbedAccumulate::atomic) {
        for (int64_t p = 0; p < p_count; ++p)
          for (int64_t i = 0; i < t; ++i) {  // index order: each add rounded on its own
            S* row = s + (p * vocab + id[static_cast<size_t>(i)]) * d;
            const G* src = g + (p * t + i) * d;
            for (int64_t j = 0; j < d; ++j) row[j] = narrow<S>(widen(row[j]) + widen(src[j]));
          }
        return;
      }
      // deterministic: positions sorted by id, stably, then one segment per distinct id
      std::vector<int64_t> order(static_cast<size_t>(t));
      std::iota(order.begin(), order.end(), int64_t{0});
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t a, int64_t b) { return id[static_cast<size_t>(a)] < id[static_cast<size_t>(b)]; });
      std::vector<float> part(static_cast<size_t>(d)), total(static_cast<size_t>(d));
      for (int64_t first = 0, end; first < t; first = end) {
        const int64_t token = id[static_cast<size_t>(order[static_cast<size_t>(first)])];
        for (end = first + 1; end < t && id[static_cast<size_t>(order[static_cast<size_t>(end)])] == token; ++end) {}
        for (int64_t p = 0; p < p_count; ++p)
          add_segment(g + p * t * d, d, order, first, end, s + (p * vocab + token) * d, part, total);
      }
    });
  });
  int32_t* mark = touched.mutable_data<int32_t>();
  for (int64_t token : id) mark[token] = 1;
}

int64_t value_embed_select_touched(const Tensor& touched, Tensor& selected) {
  const int32_t* mark = touched.data<int32_t>();
  int32_t* out = selected.mutable_data<int32_t>();
  int64_t count = 0;
  for (int64_t token = 0; token < touched.dim(0); ++token)
    if (mark[token]) out[count++] = static_cast<int32_t>(token);
  return count;
}

void value_embed_take_rows(Tensor& sum, Tensor& touched, const Tensor& selected, int64_t count, Tensor& rows,
                           Tensor& grad) {
  const int64_t vocab = touched.dim(0), p_count = count ? rows.dim(0) / count : 0;
  const size_t row_bytes = static_cast<size_t>(sum.dim(1)) * dtype_size(sum.dtype());
  const int32_t* token = selected.data<int32_t>();
  int64_t* row_id = rows.mutable_data<int64_t>();
  char* s = static_cast<char*>(sum.raw_data());
  char* out = static_cast<char*>(grad.raw_data());
  for (int64_t p = 0; p < p_count; ++p)
    for (int64_t u = 0; u < count; ++u) {
      const int64_t r = p * count + u, row = p * vocab + token[u];
      row_id[r] = row;
      std::memcpy(out + static_cast<size_t>(r) * row_bytes, s + static_cast<size_t>(row) * row_bytes, row_bytes);
      std::memset(s + static_cast<size_t>(row) * row_bytes, 0, row_bytes);
    }
  int32_t* mark = touched.mutable_data<int32_t>();
  for (int64_t u = 0; u < count; ++u) mark[token[u]] = 0;
}

void sparse_sgd_rows(Tensor& table, const Tensor& rows, const Tensor& grad, float lr) {
  const int64_t r_count = rows.dim(0), d = table.dim(1);
  const int64_t* row = rows.data<int64_t>();
  dispatch_table("sparse_sgd", table.dtype(), [&]<class W>() {
    dispatch_buffer("sparse_sgd", grad.dtype(), [&]<class G>() {
      W* w = static_cast<W*>(table.raw_data());
      const G* g = static_cast<const G*>(grad.raw_data());
      for (int64_t r = 0; r < r_count; ++r)
        for (int64_t j = 0; j < d; ++j) {
          W& x = w[row[r] * d + j];
          x = narrow<W>(widen(x) - lr * widen(g[r * d + j]));
        }
    });
  });
}

void sparse_adamw_rows(Tensor& table, const Tensor& rows, const Tensor& grad, Tensor& m, Tensor& v,
                       const kernels::AdamWScalars& s) {
  const int64_t r_count = rows.dim(0), d = table.dim(1);
  const int64_t* row = rows.data<int64_t>();
  float* mm = m.mutable_data<float>();
  float* vv = v.mutable_data<float>();
  const float decay = kernels::adamw_decay(s);
  const float one_minus_b1 = 1.0f - s.beta1, one_minus_b2 = 1.0f - s.beta2;
  dispatch_table("sparse_adamw", table.dtype(), [&]<class W>() {
    dispatch_buffer("sparse_adamw", grad.dtype(), [&]<class G>() {
      W* w = static_cast<W*>(table.raw_data());
      const G* g = static_cast<const G*>(grad.raw_data());
      for (int64_t r = 0; r < r_count; ++r)
        for (int64_t j = 0; j < d; ++j) {  // adamw.hpp's arithmetic: fp32, left to right, no FMA
          const int64_t k = row[r] * d + j;
          const float gk = widen(g[r * d + j]);
          float wk = widen(w[k]) * decay;
          const float mk = s.beta1 * mm[k] + one_minus_b1 * gk;
          const float vk = s.beta2 * vv[k] + one_minus_b2 * gk * gk;
          wk = wk - s.step_size * (mk / (std::sqrt(vk) / s.bc2_sqrt + s.eps));
          w[k] = narrow<W>(wk);
          mm[k] = mk;
          vv[k] = vk;
        }
    });
  });
}

}  // namespace tapegrad::cpu
