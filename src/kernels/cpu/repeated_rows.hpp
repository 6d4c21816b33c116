// RepeatedRows: finds, for each row of a matrix, an earlier row with the same bits, so a row-wise
// kernel can compute each distinct row once and copy it for the repeats.
//
// Note [repeated rows]
// A batch gathered from a table repeats the table's rows (a byte-level text batch: most of its
// rows are copies of a few dozen), so cross_entropy computes the softmax and logsumexp of each
// distinct row once. It goes in three steps, the first and the last split over the intra-op
// threads by rows: (1) hash each row (a few sampled words); (2) on one thread, give each row a
// candidate, the first row with the same hash (itself when it is the first); (3) a
// row whose candidate is another row is a repeat only when all their bytes are equal (memcmp);
// otherwise (two rows that differ outside the sampled words) it is computed like a first row. A
// row kernel is a function of its row's bits, so a copied row holds exactly the bits a fresh
// computation would give: this changes the time a kernel takes, never its result. Rows built to
// collide cost one compare each before they are computed like any other row, and the candidate
// search is bounded (a few probes of the hash table per row).
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

namespace tapegrad::cpu {

class RepeatedRows {
 public:
  // `rows` holds `count` rows of `row_bytes` bytes each (a multiple of 4), one after another.
  RepeatedRows(const void* rows, int64_t count, size_t row_bytes)
      : rows_(static_cast<const char*>(rows)), row_bytes_(row_bytes), hashes_(static_cast<size_t>(count)),
        candidates_(static_cast<size_t>(count)) {}

  // Step 1: the hashes of rows [begin, end); ranges may run on different threads.
  void hash(int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      hashes_[static_cast<size_t>(i)] = hash(rows_ + static_cast<size_t>(i) * row_bytes_);
  }

  // Step 2, after every hash: each row's candidate, the first row with its hash (or itself).
  void match() {
    const size_t count = hashes_.size();
    size_t capacity = 16;
    while (capacity < 2 * count) capacity *= 2;
    std::vector<int64_t> slots(capacity, -1);
    const size_t mask = capacity - 1;
    for (size_t i = 0; i < count; ++i) {
      const uint64_t h = hashes_[i];
      int64_t found = static_cast<int64_t>(i);
      size_t at = h & mask;
      for (int probe = 0; probe < kMaxProbes; ++probe, at = (at + 1) & mask) {
        if (slots[at] < 0) {  // a free slot: row i is the first of its kind
          slots[at] = static_cast<int64_t>(i);
          break;
        }
        if (hashes_[static_cast<size_t>(slots[at])] == h) {
          found = slots[at];
          break;
        }
      }
      candidates_[i] = found;
    }
  }

  // After step 2: the row whose result row i may copy, or i itself (compute it).
  int64_t candidate(int64_t i) const { return candidates_[static_cast<size_t>(i)]; }

  // Step 3: whether row i (a row whose candidate is another row) has its candidate's bytes.
  bool same_as_candidate(int64_t i) const {
    const int64_t c = candidate(i);
    return std::memcmp(rows_ + static_cast<size_t>(c) * row_bytes_, rows_ + static_cast<size_t>(i) * row_bytes_,
                       row_bytes_) == 0;
  }

 private:
  static constexpr int kMaxProbes = 8;
  static constexpr int kSampledWords = 8;

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
  std::vector<uint64_t> hashes_;
  std::vector<int64_t> candidates_;
};

}  // namespace tapegrad::cpu
