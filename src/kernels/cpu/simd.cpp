// The choice of the CPU's vector path (Note [cpu paths] in simd.hpp) and the scalar path's
// kernels, which leave every element to the callers' reference loops.
#include "tapegrad/kernels/cpu/simd.hpp"

#include <atomic>
#include <bit>
#include <cstdlib>
#include <string_view>
#include <vector>

namespace tapegrad::cpu::simd {

#if defined(__x86_64__)
namespace detail {
extern const Kernels avx2_kernels, avx512_kernels;  // simd_avx2.cpp, simd_avx512.cpp
}
#endif

namespace {

// Every function leaves every element to its caller's loop, but the two that do the whole row.
const Kernels scalar_kernels = {
    Path::scalar,
    1,
    [](float*, const float*, float*, float*, int64_t, const kernels::AdamWScalars&) -> int64_t { return 0; },
    [](float*, int64_t, float) -> int64_t { return 0; },
    [](const float* a, const float* b, int64_t n) {
      for (int64_t j = 0; j < n; ++j)
        if (std::bit_cast<uint32_t>(a[j]) != 0 || std::bit_cast<uint32_t>(b[j]) != 0) return false;
      return true;
    },
    [](const float*, float*, int64_t, float, bool, float) -> int64_t { return 0; },
    [](float*, const float*, int64_t) -> int64_t { return 0; },
    [](float*, const float*, int64_t) -> int64_t { return 0; },
    [](const float*, int64_t, float*) { return false; },
    [](const float*, float, float*, int64_t, float (*)(float)) -> int64_t { return 0; },
    [](const float*, int64_t, double*) { return false; },
    [](const float* y, int64_t m) {  // left to right
      double s = 0.0;
      for (int64_t j = 0; j < m; ++j) s += y[j];
      return s;
    },
    [](float*, int64_t, double) -> int64_t { return 0; },
    [](kernels::Unary, const float*, float*, int64_t) { return false; },
    [](kernels::Unary, const float*, const float*, float*, int64_t) { return false; },
    [](const float* a, const float* b, int64_t m) {  // left to right
      double s = 0.0;
      for (int64_t j = 0; j < m; ++j) s += a[j] * b[j];
      return s;
    },
    [](const float*, float*, int64_t) { return false; },
};

// What the CPU has, once. The vector paths need x86-64; an AddressSanitizer build checks the
// reference loops alone, as it did before there was more than one vector path.
bool cpu_has(Path p) {
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  return p == Path::scalar || (p == Path::avx2 && avx2) || (p == Path::avx512 && avx512);
#else
  return p == Path::scalar;
#endif
}

std::atomic<int> chosen{-1};  // the active path, or -1 before the first use

Path from_environment() {
  const char* text = std::getenv("TAPEGRAD_CPU_PATH");
  if (!text || !*text) return best();
  for (Path p : all_paths) {
    if (std::string_view(text) != name(p)) continue;
    if (!supported(p))
      throw Error(std::string("[cpu] TAPEGRAD_CPU_PATH=") + text + " asks for a path this machine cannot run: " +
                  missing(p) + "; unset it to take the best one here (" + name(best()) + ")");
    return p;
  }
  throw Error(std::string("[cpu] TAPEGRAD_CPU_PATH must be scalar, avx2 or avx512, got \"") + text +
              "\"; unset it to take the best path this CPU has (" + name(best()) + ")");
}

}  // namespace

const char* name(Path p) {
  switch (p) {
    case Path::scalar: return "scalar";
    case Path::avx2: return "avx2";
    case Path::avx512: return "avx512";
  }
  return "?";
}

bool supported(Path p) { return cpu_has(p); }

std::string missing(Path p) {
  if (supported(p)) return "";
#if !defined(__x86_64__)
  return std::string("the ") + name(p) + " path needs an x86-64 CPU";
#elif defined(__SANITIZE_ADDRESS__)
  return "an AddressSanitizer build runs the scalar path only";
#else
  return p == Path::avx2 ? "this CPU lacks AVX2 or FMA" : "this CPU lacks AVX-512F";
#endif
}

Path best() { return supported(Path::avx512) ? Path::avx512 : supported(Path::avx2) ? Path::avx2 : Path::scalar; }

Path active() {
  int p = chosen.load(std::memory_order_relaxed);
  if (p < 0) {
    int expected = -1;
    p = static_cast<int>(from_environment());
    if (!chosen.compare_exchange_strong(expected, p)) p = expected;
  }
  return static_cast<Path>(p);
}

void set_path(Path p) {
  if (!supported(p))
    throw Error(std::string("[cpu] set_path(") + name(p) + "): " + missing(p) + "; the best path here is " +
                name(best()));
  chosen.store(static_cast<int>(p), std::memory_order_relaxed);
}

const Kernels& kernels_of(Path p) {
#if defined(__x86_64__)
  if (p == Path::avx2) return detail::avx2_kernels;
  if (p == Path::avx512) return detail::avx512_kernels;
#endif
  (void)p;
  return scalar_kernels;
}

bool reproduces(const Kernels& k, float (*scalar_exp)(float)) {
  if (k.path == Path::scalar) return false;
  constexpr size_t count = 4096, spread = count - 16;  // a multiple of every path's lanes: exp_row does them all
  std::vector<float> x(count), have(count);
  const uint32_t from = std::bit_cast<uint32_t>(-0.0f), to = std::bit_cast<uint32_t>(-104.0f);
  for (size_t i = 0; i < spread; ++i) x[i] = std::bit_cast<float>(static_cast<uint32_t>(from + uint64_t{to - from} * i / spread));
  for (size_t i = spread; i < count; ++i) x[i] = static_cast<float>(i - spread) * 0.37f;
  if (k.exp_row(x.data(), 0.0f, have.data(), static_cast<int64_t>(count), scalar_exp) != static_cast<int64_t>(count))
    return false;
  for (size_t i = 0; i < count; ++i)
    if (std::bit_cast<uint32_t>(scalar_exp(x[i])) != std::bit_cast<uint32_t>(have[i])) return false;
  return true;
}

}  // namespace tapegrad::cpu::simd
