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
  if (text == "cpu") return Device::cpu();
  if (text == "cuda") return Device::cuda(0);
  if (text.substr(0, 5) == "cuda:" && text.size() > 5) {
    int idx = 0;
    for (char c : text.substr(5)) {
      if (c < '0' || c > '9') idx = -1;
      if (idx < 0) break;
      idx = idx * 10 + (c - '0');
    }
    if (idx >= 0) return Device::cuda(idx);
  }
  throw Error("[device] unknown device '" + std::string(text) + "': expected cpu, cuda or cuda:N");
}

}  // namespace tapegrad
