// The intra-op thread pool: CPU kernels split a large loop over independent items (elements,
// rows, columns) into contiguous ranges that run on several cores at once.
//
// Rule: a result never depends on the thread count. parallel_for hands each range to a body that
// does with it exactly what one thread does with the whole loop; it is for items whose results
// are independent of each other (an elementwise update, one output row per input row, the columns
// of a row add). A sum across items (a row's total, a mean) is never split: it stays in one range,
// in its order. See Note [intra-op threads] in parallel.cpp for the pool itself.
//
// Thread count: TAPEGRAD_NUM_THREADS when set (a whole number from 1 to 1024), else the physical
// cores this process may run on (SMT siblings once); set_num_threads() changes it at any time (1:
// every kernel on the calling thread). Whatever the count, a loop smaller than chunk_for's
// thresholds runs on its caller alone: the count is a ceiling, the work's size decides.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

namespace tapegrad {

// The threads a CPU kernel may use (the caller included), at least 1. The first call reads
// TAPEGRAD_NUM_THREADS and throws tapegrad::Error naming it when it is not a number from 1 to 1024.
int num_threads();
// From now on kernels use n threads (1 to 1024; otherwise throws tapegrad::Error). Waits for a
// parallel loop running on another thread to finish.
void set_num_threads(int n);
// What num_threads() starts from: TAPEGRAD_NUM_THREADS when set (checked as above), else the
// number of physical cores this process may run on.
int default_num_threads();

// ---- how kernels cut their loops (Note [intra-op threads] in parallel.cpp has the measurements)
// Chunk c of a loop runs on thread c % threads whenever the threads are awake, so kernels that cut
// the same tensor into the same 16 KiB pieces find each piece in the cache of the core that last
// touched it.
inline constexpr int64_t kChunkBytes = 16 * 1024;
// What a loop does per byte decides from what size the hand-off pays. A loop that streams
// through memory (a copy, a fill, an add) gains little from a second core unless the data is
// large and already split the same way; one with real arithmetic per element (square roots,
// divisions, exponentials) gains from a few tens of KiB on.
enum class Work { streaming, arithmetic };
inline constexpr int64_t kMinParallelStreamingBytes = 1024 * 1024;
inline constexpr int64_t kMinParallelArithmeticBytes = 64 * 1024;

// The chunk for a loop over n items of item_bytes each: kChunkBytes' worth of items (at least
// one), or n, so the loop runs whole on its caller, below the size from which `work` pays.
inline int64_t chunk_for(int64_t n, int64_t item_bytes, Work work = Work::streaming) {
  const int64_t least = work == Work::streaming ? kMinParallelStreamingBytes : kMinParallelArithmeticBytes;
  if (item_bytes <= 0 || n * item_bytes < least) return n;
  return item_bytes >= kChunkBytes ? 1 : kChunkBytes / item_bytes;
}

namespace detail {
using RangeFn = void (*)(void* body, int64_t begin, int64_t end);
void parallel_for(int64_t n, int64_t chunk, RangeFn fn, void* body);
}  // namespace detail

// body(begin, end) over [0, n) in contiguous ranges of `chunk` items (the last one shorter), each
// range once, some on the pool's threads, in no particular order; returns when all are done. A
// loop of one chunk (n <= chunk), a nested call (from inside a body) and a call while another
// thread's loop has the pool run body(0, n) on the caller instead. Streaming loops take
// chunk_for(); a loop whose items are costly (a softmax row each) may take smaller chunks, as long
// as a chunk is still a microsecond of work or so. An exception from a body is rethrown here,
// after every range has finished (the one from the lowest range when several throw).
template <class F>
void parallel_for(int64_t n, int64_t chunk, F&& body) {
  if (n <= 0) return;
  if (chunk <= 0 || n <= chunk) {  // one range: no hand-off
    body(int64_t{0}, n);
    return;
  }
  using Body = std::remove_reference_t<F>;
  detail::parallel_for(
      n, chunk, [](void* b, int64_t begin, int64_t end) { (*static_cast<Body*>(b))(begin, end); },
      const_cast<void*>(static_cast<const void*>(&body)));
}

}  // namespace tapegrad
