// Shape: up to kMaxDims extents held inline (no heap allocation per tensor), printed as Python
// prints a tuple: (3, 2), (4,), ().
//
// Rule: a Shape's element count always fits an int64_t. Every way to make or change a Shape (the
// constructors, push_back, set) checks the product of its extents (__builtin_mul_overflow) and
// throws tapegrad::Error "[shape] (4611686018427387905, 4) has more elements than fit in 64 bits"
// otherwise; the count is kept, so numel() is a load. Extents of 0 give 0 elements, but the other
// extents' product must still fit (strides are computed from it).
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
  int64_t numel() const { return numel_; }
  void push_back(int64_t extent);
  // Changes extent i (0 <= i < ndim()), checking it as push_back does.
  void set(int i, int64_t extent);
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
  // Sets numel_ from d_, or throws (leaving the Shape unchanged) if the count does not fit.
  void recount(const std::array<int64_t, kMaxDims>& dims, int n);

  std::array<int64_t, kMaxDims> d_{};
  int64_t numel_ = 1;
  uint8_t n_ = 0;
};

}  // namespace tapegrad
