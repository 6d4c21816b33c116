// Shape and device helpers.
#include "tapegrad/tensor/shape.hpp"

#include "tapegrad/tensor/dtype.hpp"
#include "tapegrad/tensor/error.hpp"

namespace tapegrad {

Shape::Shape(std::initializer_list<int64_t> dims) {
  for (int64_t d : dims) push_back(d);
}

namespace {

std::string tuple_str(const std::array<int64_t, Shape::kMaxDims>& dims, int n) {
  std::string s = "(";
  for (int i = 0; i < n; ++i) {
    if (i) s += ", ";
    s += std::to_string(dims[static_cast<size_t>(i)]);
  }
  if (n == 1) s += ",";
  return s + ")";
}

}  // namespace

void Shape::recount(const std::array<int64_t, kMaxDims>& dims, int n) {
  int64_t product = 1;  // of the nonzero extents: strides come from it even when one extent is 0
  bool empty = false;
  for (int i = 0; i < n; ++i) {
    const int64_t d = dims[static_cast<size_t>(i)];
    if (d == 0) {
      empty = true;
      continue;
    }
    if (__builtin_mul_overflow(product, d, &product))
      throw Error("[shape] " + tuple_str(dims, n) + " has more elements than fit in 64 bits");
  }
  numel_ = empty ? 0 : product;
}

void Shape::push_back(int64_t extent) {
  if (n_ >= kMaxDims)
    throw Error("[shape] tensors have at most " + std::to_string(kMaxDims) + " dimensions");
  if (extent < 0) throw Error("[shape] negative extent " + std::to_string(extent));
  std::array<int64_t, kMaxDims> dims = d_;
  dims[n_] = extent;
  recount(dims, n_ + 1);
  d_ = dims;
  ++n_;
}

void Shape::set(int i, int64_t extent) {
  if (i < 0 || i >= n_)
    throw Error("[shape] set(" + std::to_string(i) + ", " + std::to_string(extent) + ") on " + str() + ", which has " +
                std::to_string(n_) + " dimensions");
  if (extent < 0) throw Error("[shape] negative extent " + std::to_string(extent));
  std::array<int64_t, kMaxDims> dims = d_;
  dims[static_cast<size_t>(i)] = extent;
  recount(dims, n_);
  d_ = dims;
}

std::string Shape::str() const { return tuple_str(d_, n_); }

Device parse_device(std::string_view text) {
  constexpr int max_index = 1023;  // far above any host's device count; keeps the index from overflowing
  if (text == "cpu") return Device::cpu();
  if (text == "cuda") return Device::cuda(0);
  if (text.substr(0, 5) == "cuda:" && text.size() > 5) {
    const std::string_view digits = text.substr(5);
    if (digits.find_first_not_of("0123456789") == std::string_view::npos) {
      int idx = 0;
      for (char c : digits) {
        idx = idx * 10 + (c - '0');
        if (idx > max_index)
          throw Error("[device] device '" + std::string(text) + "' is out of range: expected cuda:N with N from 0 to " +
                      std::to_string(max_index));
      }
      return Device::cuda(idx);
    }
  }
  throw Error("[device] unknown device '" + std::string(text) + "': expected cpu, cuda or cuda:N");
}

}  // namespace tapegrad
