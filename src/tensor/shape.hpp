// Shape: up to kMaxDims extents held inline (no heap allocation per tensor), printed as Python
// prints a tuple: (3, 2), (4,), ().
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace tapegrad {

class Shape {
 public:
  static constexpr int kMaxDims = 6;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  template <class It> Shape(It first, It last) {
    for (; first != last; ++first) push_back(static_cast<int64_t>(*first));
  }

  int ndim() const { return n_; }
  int64_t operator[](int i) const { return d_[static_cast<size_t>(i)]; }
  int64_t& operator[](int i) { return d_[static_cast<size_t>(i)]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < n_; ++i) n *= d_[static_cast<size_t>(i)];
    return n;
  }
  void push_back(int64_t extent);
  const int64_t* begin() const { return d_.data(); }
  const int64_t* end() const { return d_.data() + n_; }
  bool operator==(const Shape& o) const {
    if (n_ != o.n_) return false;
    for (int i = 0; i < n_; ++i)
      if (d_[static_cast<size_t>(i)] != o.d_[static_cast<size_t>(i)]) return false;
    return true;
  }
  std::string str() const;  // "(3, 2)"

 private:
  std::array<int64_t, kMaxDims> d_{};
  uint8_t n_ = 0;
};

}  // namespace tapegrad
