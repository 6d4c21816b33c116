// The intra-op thread pool behind parallel_for (see parallel.hpp).
//
// Note [intra-op threads]
// One pool per process: num_threads() - 1 workers, started by the first parallel loop. A loop is
// cut into the caller's chunks, and the chunks are dealt round-robin into shares, one per thread
// (the caller is thread 0): share s holds chunks s, s + S, s + 2S, ... Each share has a claim
// word of its own (one cache line) holding the loop's generation and the share's next unclaimed
// chunk; a thread takes a chunk with one compare-and-swap on it, so exactly one thread runs each
// chunk. The caller writes the generation into every claim word (which also wakes the workers,
// spinning on their own), runs its own share, then takes what is left of the others; a worker
// runs its share, then takes what is left of the others too. Hence:
// - with every worker awake, chunk c runs on thread c % S in every loop of the same shape, so a
//   tensor's parts stay in the cache of the core that last touched them from one kernel to the
//   next (parallel.hpp: chunk_for). Moving a tensor of a few hundred KiB between two cores'
//   caches can cost about as much as streaming it once: handing chunks to whichever thread came
//   first made even an arithmetic loop slower than one thread, and with this schedule a streaming
//   kernel split over two threads can still lose time (a gather's backward reads batch rows and
//   writes table rows, so whatever split one kernel uses, the next finds half its data in the
//   other core), while loops with real arithmetic per element gain. Hence parallel.hpp's two
//   thresholds: streaming loops split from 1 MiB, arithmetic ones from 64 KiB (the measurements:
//   docs/bob.md, "Measurements behind the thread thresholds");
// - dealing the chunks round-robin spreads uneven work (AdamW on a table whose used rows
//   cluster), and taking what is left of other shares evens out the rest;
// - a loop never waits for a worker that is asleep, descheduled or slow by more than the one
//   chunk it is running: the other threads take the remaining chunks of its share;
// - results are the same bits for every thread count and every schedule (parallel.hpp's rule).
// A worker that arrives late finds the generation moved on and takes nothing. The loop's fields
// are atomics because such a worker may read them while the next loop's are written; it then
// fails its compare-and-swap and uses none of them (a successful one means the loop still has
// chunks to run, so the caller has not moved on). Each thread adds the chunks it ran to
// `finished` with a release increment that the caller acquires before it returns, which is how
// a worker's writes reach the caller.
//
// A worker spins (with a pause instruction) for kSpin after its last chunk, because a training
// step's next large kernel comes within microseconds, then sleeps on a futex (std::atomic::wait);
// a caller wakes sleepers only when there are some, so a busy loop makes no system call.
//
// Nested loops (a body calling parallel_for) and loops started while another thread's loop holds
// the pool run on their caller, whole. At exit the workers are stopped and joined; after that, and
// in a child process after fork(), loops run on the caller.
#include "tapegrad/tensor/parallel.hpp"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tapegrad/tensor/error.hpp"

namespace tapegrad {

namespace {

constexpr int kMaxThreads = 1024;
constexpr int64_t kMaxChunksPerShare = 0xffff;  // a share's next chunk fits 16 bits of its claim word
constexpr auto kSpin = std::chrono::microseconds(500);

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

#define TG_TLS __attribute__((tls_model("initial-exec"))) thread_local
TG_TLS bool t_in_loop = false;  // this thread runs chunks (or is a worker): nested loops run inline

// A share's claim word: the loop's generation (32 bits), the share's chunk count (16 bits) and
// its next unclaimed chunk (16 bits).
struct alignas(64) Claim {
  std::atomic<uint64_t> word{0};
};
uint32_t generation_of(uint64_t word) { return static_cast<uint32_t>(word >> 32); }
int64_t count_of(uint64_t word) { return static_cast<int64_t>((word >> 16) & 0xffff); }
int64_t next_of(uint64_t word) { return static_cast<int64_t>(word & 0xffff); }
uint64_t make_claim(uint32_t generation, int64_t count) {
  return uint64_t{generation} << 32 | static_cast<uint64_t>(count) << 16;
}

struct Pool {
  std::mutex owner;  // held by the thread whose loop has the pool, and while workers start or stop
  std::vector<std::thread> workers;
  std::unique_ptr<Claim[]> claims;  // one per thread: share s's claim word is claims[s]
  uint32_t generation = 0;          // the last loop's (written under owner)
  bool shut_down = false;
  std::atomic<int> threads{0};  // 0 until the first num_threads() reads the environment

  // the current loop (Note [intra-op threads])
  alignas(64) std::atomic<detail::RangeFn> fn{nullptr};
  std::atomic<void*> body{nullptr};
  std::atomic<int64_t> n{0}, chunk{0}, shares{0};
  alignas(64) std::atomic<int64_t> finished{0};  // chunks of the current loop done

  alignas(64) std::atomic<uint32_t> wake{0};  // bumped to wake sleeping workers
  std::atomic<int> sleepers{0};
  std::atomic<bool> stop{false};

  std::mutex error_mutex;  // the exception of the lowest chunk that threw
  std::exception_ptr error;
  int64_t error_chunk = 0;
};

Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: a kernel may run during static destruction
  return *p;
}

struct Loop {
  uint32_t generation;
  detail::RangeFn fn;
  void* body;
  int64_t n, chunk, shares;
};

void run_chunk(Pool& p, const Loop& loop, int64_t c) {
  const int64_t begin = c * loop.chunk, end = begin + loop.chunk < loop.n ? begin + loop.chunk : loop.n;
  try {
    loop.fn(loop.body, begin, end);
  } catch (...) {
    std::lock_guard lock(p.error_mutex);
    if (!p.error || c < p.error_chunk) {
      p.error = std::current_exception();
      p.error_chunk = c;
    }
  }
}

// Takes and runs chunks of share s of `loop` until none is left; returns how many it ran. The
// claim word alone says whether one is left: `loop` may hold another loop's values until a take
// succeeds (Note [intra-op threads]).
int64_t run_share(Pool& p, const Loop& loop, int64_t s) {
  std::atomic<uint64_t>& claim = p.claims[static_cast<size_t>(s)].word;
  int64_t ran = 0;
  uint64_t word = claim.load(std::memory_order_acquire);
  while (generation_of(word) == loop.generation && next_of(word) < count_of(word)) {
    if (claim.compare_exchange_weak(word, word + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
      run_chunk(p, loop, s + next_of(word) * loop.shares);
      ++ran;
      word = claim.load(std::memory_order_acquire);
    }
  }
  return ran;
}

// Thread `self`'s part of a loop: its own share, then what is left of the others.
void run_loop(Pool& p, const Loop& loop, int64_t self) {
  int64_t ran = run_share(p, loop, self);
  for (int64_t k = 1; k < loop.shares; ++k) ran += run_share(p, loop, (self + k) % loop.shares);
  if (ran) p.finished.fetch_add(ran, std::memory_order_release);
}

void worker_main(Pool& p, int64_t index) {
  t_in_loop = true;
  std::atomic<uint64_t>& claim = p.claims[static_cast<size_t>(index)].word;
  uint32_t seen = generation_of(claim.load(std::memory_order_acquire));
  auto idle_since = std::chrono::steady_clock::now();
  for (uint32_t spins = 0;; ++spins) {
    if (p.stop.load(std::memory_order_acquire)) return;
    const uint32_t generation = generation_of(claim.load(std::memory_order_acquire));
    if (generation != seen) {
      seen = generation;
      // Read the loop, then take chunks: a successful take means the caller is still waiting
      // for this loop, so these are its values (Note [intra-op threads]).
      const Loop loop{generation, p.fn.load(std::memory_order_relaxed), p.body.load(std::memory_order_relaxed),
                      p.n.load(std::memory_order_relaxed), p.chunk.load(std::memory_order_relaxed),
                      p.shares.load(std::memory_order_relaxed)};
      if (index < loop.shares) run_loop(p, loop, index);
      idle_since = std::chrono::steady_clock::now();
      spins = 0;
      continue;
    }
    if (spins % 64 != 63 || std::chrono::steady_clock::now() - idle_since < kSpin) {
      cpu_relax();
      continue;
    }
    // Sleep until a caller bumps `wake`. These steps and the caller's (claim words, then
    // sleepers) are sequentially consistent, so one side always sees the other's write.
    p.sleepers.fetch_add(1);
    const uint32_t w = p.wake.load();
    if (generation_of(claim.load()) == seen && !p.stop.load()) p.wake.wait(w);
    p.sleepers.fetch_sub(1);
    idle_since = std::chrono::steady_clock::now();
    spins = 0;
  }
}

// Stops and joins every worker; the caller holds p.owner.
void stop_workers(Pool& p) {
  if (p.workers.empty()) return;
  p.stop.store(true);
  p.wake.fetch_add(1);
  p.wake.notify_all();
  for (std::thread& t : p.workers) t.join();
  p.workers.clear();
  p.stop.store(false);
}

void start_workers(Pool& p, int count) {
  p.claims.reset(new Claim[static_cast<size_t>(count) + 1]);
  for (int i = 1; i <= count; ++i) p.workers.emplace_back(worker_main, std::ref(p), int64_t{i});
}

struct ShutdownAtExit {
  ~ShutdownAtExit() {
    Pool& p = pool();
    std::lock_guard lock(p.owner);
    stop_workers(p);
    p.shut_down = true;
  }
};
ShutdownAtExit shutdown_at_exit;

// In a child process after fork() the workers do not exist: forget them (never join them) and run
// every loop on the caller.
void forget_workers_in_child() {
  Pool& p = pool();
  static_cast<void>(new std::vector<std::thread>(std::move(p.workers)));  // leaked: nothing to join here
  p.workers.clear();
  p.shut_down = true;
}
[[maybe_unused]] const int atfork_registered = pthread_atfork(nullptr, nullptr, forget_workers_in_child);

// The CPUs this process may run on (its affinity mask), as ids.
std::vector<int> cpus_available() {
  std::vector<int> ids;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) ids.push_back(c);
  if (ids.empty())
    for (unsigned c = 0; c < std::max(1u, std::thread::hardware_concurrency()); ++c) ids.push_back(static_cast<int>(c));
  return ids;
}

// A whole number read from a sysfs file, or -1.
long read_number(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return -1;
  long v = -1;
  if (std::fscanf(f, "%ld", &v) != 1) v = -1;
  std::fclose(f);
  return v;
}

// The physical cores among the CPUs this process may run on: SMT siblings (two hardware threads of
// one core, which share its arithmetic units and caches) count once, as PyTorch counts them. Where
// Linux's topology files cannot be read, every CPU counts.
int cores_available() {
  const std::vector<int> cpus = cpus_available();
  std::vector<std::pair<long, long>> cores;  // (package, core) of each CPU
  for (int c : cpus) {
    const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(c) + "/topology/";
    const long package = read_number(dir + "physical_package_id"), core = read_number(dir + "core_id");
    if (package < 0 || core < 0) return std::min(static_cast<int>(cpus.size()), kMaxThreads);
    cores.emplace_back(package, core);
  }
  std::sort(cores.begin(), cores.end());
  const int n = static_cast<int>(std::unique(cores.begin(), cores.end()) - cores.begin());
  return std::clamp(n, 1, kMaxThreads);
}

}  // namespace

int default_num_threads() {
  const char* text = std::getenv("TAPEGRAD_NUM_THREADS");
  if (!text || !*text) return cores_available();
  int value = 0;
  bool ok = true;
  for (const char* c = text; *c && ok; ++c) {
    ok = *c >= '0' && *c <= '9' && value <= kMaxThreads;
    if (ok) value = value * 10 + (*c - '0');
  }
  if (!ok || value < 1 || value > kMaxThreads)
    throw Error(std::string("[threads] TAPEGRAD_NUM_THREADS must be a whole number from 1 to ") +
                std::to_string(kMaxThreads) + ", got \"" + text + "\"; unset it to use every physical core (" +
                std::to_string(cores_available()) + " here)");
  return value;
}

int num_threads() {
  Pool& p = pool();
  int n = p.threads.load(std::memory_order_relaxed);
  if (n == 0) {
    int expected = 0;
    n = default_num_threads();
    if (!p.threads.compare_exchange_strong(expected, n)) n = expected;
  }
  return n;
}

void set_num_threads(int n) {
  if (n < 1 || n > kMaxThreads)
    throw Error("[threads] set_num_threads(" + std::to_string(n) + "): the thread count must be from 1 to " +
                std::to_string(kMaxThreads));
  Pool& p = pool();
  std::lock_guard lock(p.owner);
  if (static_cast<int>(p.workers.size()) != n - 1) stop_workers(p);  // the next loop starts n - 1
  p.threads.store(n);
}

namespace detail {

void parallel_for(int64_t n, int64_t chunk, RangeFn fn, void* body) {
  Pool& p = pool();
  if (num_threads() == 1 || t_in_loop) return fn(body, 0, n);
  std::unique_lock lock(p.owner, std::try_to_lock);
  if (!lock || p.shut_down) return fn(body, 0, n);
  // The count is read again under the lock: set_num_threads on another thread may have changed it
  // since, and the workers and their claim words must be the ones this loop deals out to.
  const int threads = num_threads();
  if (threads == 1) return fn(body, 0, n);
  if (static_cast<int>(p.workers.size()) != threads - 1) {
    stop_workers(p);
    start_workers(p, threads - 1);
  }

  int64_t chunks = (n + chunk - 1) / chunk;
  const int64_t shares = chunks < threads ? chunks : threads;
  if (chunks > shares * kMaxChunksPerShare) {  // bigger chunks, so each share's count fits its claim word
    chunk = (n + shares * kMaxChunksPerShare - 1) / (shares * kMaxChunksPerShare);
    chunks = (n + chunk - 1) / chunk;
  }
  const Loop loop{++p.generation, fn, body, n, chunk, shares};
  p.fn.store(fn, std::memory_order_relaxed);
  p.body.store(body, std::memory_order_relaxed);
  p.n.store(n, std::memory_order_relaxed);
  p.chunk.store(chunk, std::memory_order_relaxed);
  p.shares.store(shares, std::memory_order_relaxed);
  p.finished.store(0, std::memory_order_relaxed);
  p.error = nullptr;
  // Publishes the fields above. Every worker sees the new generation in its own claim word; those
  // past `shares` have no share (a count of 0).
  for (int64_t s = 0; s < threads; ++s) {
    const int64_t in_share = s < shares ? (chunks - s + shares - 1) / shares : 0;
    p.claims[static_cast<size_t>(s)].word.store(make_claim(loop.generation, in_share));
  }
  if (p.sleepers.load() > 0) {
    p.wake.fetch_add(1);
    p.wake.notify_all();
  }

  t_in_loop = true;
  run_loop(p, loop, 0);
  t_in_loop = false;
  for (uint32_t spins = 0; p.finished.load(std::memory_order_acquire) != chunks; ++spins) {
    if (spins < 1024) cpu_relax();
    else std::this_thread::yield();  // a worker running a chunk was descheduled: let it run
  }
  if (p.error) std::rethrow_exception(std::exchange(p.error, nullptr));
}

}  // namespace detail

}  // namespace tapegrad
