// Shape and device helpers.
#include "tapegrad/tensor/shape.hpp"

#include "tapegrad/tensor/dtype.hpp"
#include "tapegrad/tensor/error.hpp"

namespace tapegrad {

Shape::Shape(std::initializer_list<int64_t> dims) {
  for (int64_t d : dims) push_back(d);
}

void Shape::push_back(int64_t extent) {
  if (n_ >= kMaxDims)
    throw Error("[shape] tensors have at most " + std::to_string(kMaxDims) + " dimensions");
  if (extent < 0) throw Error("[shape] negative extent " + std::to_string(extent));
  d_[n_++] = extent;
}

std::string Shape::str() const {
  std::string s = "(";
  for (int i = 0; i < n_; ++i) {
    if (i) s += ", ";
    s += std::to_string(d_[static_cast<size_t>(i)]);
  }
  if (n_ == 1) s += ",";
  return s + ")";
}

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
