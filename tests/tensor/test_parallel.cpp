// The intra-op thread pool (src/tensor/parallel.hpp): every range runs once, small loops and nested
// loops stay on the caller, exceptions come back to the caller, loops from several threads at once,
// the thread count's API and its environment variable with their error messages.
#include <doctest/doctest.h>

#include <sched.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tapegrad/tensor/error.hpp"
#include "tapegrad/tensor/parallel.hpp"
#include "messages.hpp"

using namespace tapegrad;

namespace {

// Restores the thread count a test changed.
struct ThreadCount {
  explicit ThreadCount(int n) : before(num_threads()) { set_num_threads(n); }
  ~ThreadCount() { set_num_threads(before); }
  int before;
};

// Sets (or, with nullptr, unsets) an environment variable for one scope.
struct Env {
  Env(const char* name, const char* value) : name(name) {
    if (const char* old = std::getenv(name)) had = true, before = old;
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~Env() {
    if (had) setenv(name, before.c_str(), 1);
    else unsetenv(name);
  }
  const char* name;
  bool had = false;
  std::string before;
};

using testing::message_of;

}  // namespace

TEST_CASE("parallel_for runs every index exactly once, in ranges of the chunk") {
  for (int threads : {1, 2, 3, 8}) {
    ThreadCount count(threads);
    for (int64_t n : {0, 1, 15, 16, 17, 1000, 65536 + 7}) {
      for (int64_t chunk : {1, 16, 100, 4096}) {
        CAPTURE(threads);
        CAPTURE(n);
        CAPTURE(chunk);
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::atomic<bool> aligned{true};
        parallel_for(n, chunk, [&](int64_t begin, int64_t end) {
          if (begin % chunk != 0 || !(end - begin <= chunk || (begin == 0 && end == n))) aligned = false;
          for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
        });
        bool once = true;
        for (auto& h : hits) once = once && h.load() == 1;
        CHECK(once);
        CHECK(aligned.load());
      }
    }
  }
}

TEST_CASE("a loop of one chunk, and a loop inside a loop, run whole on their caller") {
  ThreadCount count(4);
  const std::thread::id caller = std::this_thread::get_id();
  std::thread::id ran_on;
  parallel_for(100, 100, [&](int64_t begin, int64_t end) {
    CHECK(begin == 0);
    CHECK(end == 100);
    ran_on = std::this_thread::get_id();
  });
  CHECK(ran_on == caller);

  std::atomic<int> inner_calls{0}, outer_ranges{0};
  parallel_for(64, 1, [&](int64_t, int64_t) {
    ++outer_ranges;
    const std::thread::id outer = std::this_thread::get_id();
    parallel_for(1000, 10, [&](int64_t begin, int64_t end) {
      CHECK(std::this_thread::get_id() == outer);  // nested: no hand-off
      CHECK(begin == 0);
      CHECK(end == 1000);
      ++inner_calls;
    });
  });
  CHECK(outer_ranges == 64);
  CHECK(inner_calls == 64);
}

TEST_CASE("an exception from a range reaches the caller after every range ran; the lowest one wins") {
  ThreadCount count(3);
  std::atomic<int> ran{0};
  try {
    parallel_for(40, 1, [&](int64_t begin, int64_t) {
      ++ran;
      if (begin == 7 || begin == 30) throw std::runtime_error("range " + std::to_string(begin));
    });
    FAIL("no exception");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()) == "range 7");
  }
  CHECK(ran == 40);
  // the pool is usable afterwards
  std::atomic<int64_t> sum{0};
  parallel_for(1000, 10, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) sum += i;
  });
  CHECK(sum == 999 * 1000 / 2);
}

TEST_CASE("loops from several threads at once each run every index once") {
  ThreadCount count(2);
  std::vector<std::thread> users;
  std::atomic<bool> all_once{true};
  for (int u = 0; u < 4; ++u)
    users.emplace_back([&] {
      for (int rep = 0; rep < 200; ++rep) {
        std::vector<int> hits(5000);
        parallel_for(5000, 64, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) ++hits[static_cast<size_t>(i)];
        });
        for (int h : hits) all_once = all_once && h == 1;
      }
    });
  for (std::thread& t : users) t.join();
  CHECK(all_once.load());
}

TEST_CASE("set_num_threads changes the count, refuses what is not 1 to 1024") {
  ThreadCount count(1);
  CHECK(num_threads() == 1);
  set_num_threads(5);
  CHECK(num_threads() == 5);
  CHECK(message_of([] { set_num_threads(0); }) ==
        "[threads] set_num_threads(0): the thread count must be from 1 to 1024");
  CHECK(message_of([] { set_num_threads(1025); }) ==
        "[threads] set_num_threads(1025): the thread count must be from 1 to 1024");
  CHECK(num_threads() == 5);
}

TEST_CASE("unset, the default is the physical cores among the CPUs this process may run on") {
  Env env("TAPEGRAD_NUM_THREADS", nullptr);
  cpu_set_t set;
  REQUIRE(sched_getaffinity(0, sizeof set, &set) == 0);
  // the (package, core) pairs of those CPUs, read as lscpu reads them; SMT siblings share one
  std::set<std::pair<std::string, std::string>> cores;
  int cpus = 0;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &set)) continue;
    ++cpus;
    const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(c) + "/topology/";
    std::ifstream package(dir + "physical_package_id"), core(dir + "core_id");
    std::string p, k;
    if (!(package >> p) || !(core >> k)) return;  // no topology files here: every CPU counts (not checked)
    cores.emplace(p, k);
  }
  CHECK(default_num_threads() == static_cast<int>(cores.size()));
  CHECK(default_num_threads() <= cpus);
}

TEST_CASE("TAPEGRAD_NUM_THREADS sets the default; a bad value names the variable") {
  {
    Env env("TAPEGRAD_NUM_THREADS", "3");
    CHECK(default_num_threads() == 3);
  }
  {
    Env env("TAPEGRAD_NUM_THREADS", nullptr);
    CHECK(default_num_threads() >= 1);  // the physical cores this process may run on
  }
  {
    Env env("TAPEGRAD_NUM_THREADS", "");
    CHECK(default_num_threads() >= 1);
  }
  for (const char* bad : {"0", "-2", "two", "4 ", "1025", "99999999999999999999"}) {
    CAPTURE(bad);
    Env env("TAPEGRAD_NUM_THREADS", bad);
    const std::string message = message_of([] { default_num_threads(); });
    CHECK(message.find(std::string("[threads] TAPEGRAD_NUM_THREADS must be a whole number from 1 to 1024, got \"") +
                       bad + "\"; unset it to use every physical core") == 0);
  }
}

// The race a ThreadSanitizer run found: a loop read the thread count before taking the pool, so a
// set_num_threads on another thread in between made it deal chunks to claim words that did not
// exist (a heap overflow under AddressSanitizer). Loops on two threads, a third changing the
// count under them, bodies that throw: every range still runs exactly once, and errors come back.
TEST_CASE("stress: concurrent loops, set_num_threads racing them, bodies that throw") {
  ThreadCount restore(num_threads());
  std::atomic<bool> stop{false};
  std::atomic<int64_t> wrong{0}, loops{0}, thrown{0};
  auto caller = [&](int seed) {
    for (int round = 0; round < 300; ++round) {
      const int64_t n = 5000 + (round * 37 + seed) % 20000;
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      const bool throwing = round % 7 == 3;
      try {
        parallel_for(n, 64, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)].fetch_add(1, std::memory_order_relaxed);
          if (throwing && begin == 0) throw std::runtime_error("body");
        });
        if (throwing) wrong.fetch_add(1);  // the error did not come back
      } catch (const std::runtime_error&) {
        thrown.fetch_add(1);
      }
      for (const std::atomic<int>& h : hits) wrong.fetch_add(h.load() != 1);
      loops.fetch_add(1);
    }
  };
  std::thread changer([&] {
    for (int k = 0; !stop.load(); ++k) set_num_threads(1 + k % 4);
  });
  std::thread a(caller, 1), b(caller, 2);
  a.join();
  b.join();
  stop.store(true);
  changer.join();
  CHECK(wrong.load() == 0);
  CHECK(loops.load() == 600);
  CHECK(thrown.load() == 2 * (300 / 7 + (300 % 7 > 3)));
}
