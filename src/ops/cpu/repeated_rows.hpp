// RepeatedRows: finds, for each row of a matrix in turn, the first earlier row with the same bits,
// so a row-wise kernel can compute each distinct row once and copy it for the repeats.
//
// Note [repeated rows]
// A batch gathered from a table repeats the table's rows: bob's 256 examples use about 26
// distinct bytes, so 90% of its logits rows are copies. cross_entropy computes the softmax and
// logsumexp of each distinct row once. Two rows count as equal only when all their bytes are
// equal (a cheap hash of a few sampled words picks the candidates, memcmp decides), and a row
// kernel is a function of its row's bits, so a copied row holds exactly the bits a fresh
// computation would give: this changes the time a kernel takes, never its result. The search is
// bounded (a few probes and compares per row), so rows built to collide cost at most a few
// compares each before they are computed like any other row.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

namespace tapegrad::cpu {

class RepeatedRows {
 public:
  // `rows` holds `count` rows of `row_bytes` bytes each (a multiple of 4), one after another.
  RepeatedRows(const void* rows, int64_t count, size_t row_bytes)
      : rows_(static_cast<const char*>(rows)), row_bytes_(row_bytes) {
    size_t capacity = 16;
    while (capacity < 2 * static_cast<size_t>(count)) capacity *= 2;
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
  }

  // The index of the first row before row i with the same bytes, or i itself when there is none
  // (or the bounded search gave up). Call with i = 0, 1, 2, ... in order.
  int64_t first_equal(int64_t i) {
    const char* row = rows_ + static_cast<size_t>(i) * row_bytes_;
    const uint64_t h = hash(row);
    size_t at = h & mask_;
    for (int probe = 0; probe < kMaxProbes; ++probe, at = (at + 1) & mask_) {
      Slot& slot = slots_[at];
      if (slot.row < 0) {  // a free slot: row i is the first of its kind
        slot = {i, h};
        return i;
      }
      if (slot.hash == h && std::memcmp(rows_ + static_cast<size_t>(slot.row) * row_bytes_, row, row_bytes_) == 0)
        return slot.row;
    }
    return i;
  }

 private:
  static constexpr int kMaxProbes = 8;
  static constexpr int kSampledWords = 8;

  struct Slot {
    int64_t row = -1;
    uint64_t hash = 0;
  };

  // Mixes kSampledWords 32-bit words spread evenly over the row (first and last included).
  uint64_t hash(const char* row) const {
    const size_t words = row_bytes_ / 4;
    uint64_t h = 0x9e3779b97f4a7c15ull ^ row_bytes_;
    for (int k = 0; k < kSampledWords && words > 0; ++k) {
      uint32_t word;
      std::memcpy(&word, row + 4 * (static_cast<size_t>(k) * (words - 1) / (kSampledWords - 1)), 4);
      h = (h ^ word) * 0xbf58476d1ce4e5b9ull;
      h ^= h >> 31;
    }
    return h;
  }

  const char* rows_;
  size_t row_bytes_;
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

}  // namespace tapegrad::cpu
