// StableVector: a vector whose elements never move, for the graph's values.
//
// Rule: an element's address is fixed from emplace_back() until it is popped, so a reference an
// op took from Var::value() stays valid while the op records its result (a std::vector would
// reallocate under it). Elements live in chunks of 256 that are kept for reuse: popping resets an
// element to its default state instead of freeing memory, so a training loop that clears its tape
// every step allocates nothing here after the first.
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <vector>

namespace tapegrad {

template <class T>
class StableVector {
 public:
  static constexpr size_t kChunk = 256;

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T& operator[](size_t i) { return (*chunks_[i / kChunk])[i % kChunk]; }
  const T& operator[](size_t i) const { return (*chunks_[i / kChunk])[i % kChunk]; }

  // A default-state element at the end.
  T& emplace_back() {
    if (size_ == chunks_.size() * kChunk) chunks_.push_back(std::make_unique<std::array<T, kChunk>>());
    return (*this)[size_++];
  }
  // Pops elements until n remain, resetting each to its default state.
  void shrink_to(size_t n) {
    while (size_ > n) (*this)[--size_] = T();
  }
  void clear() { shrink_to(0); }

 private:
  std::vector<std::unique_ptr<std::array<T, kChunk>>> chunks_;
  size_t size_ = 0;
};

}  // namespace tapegrad
