// Running a test on each CPU vector path this machine has (src/kernels/cpu/simd.hpp), in one
// process: the kernels must give the same bits on all of them.
#pragma once

#include <vector>

#include "tapegrad/kernels/cpu/simd.hpp"

namespace tapegrad::testing {

// scalar, then avx2 and avx512 where the CPU (and the build) has them.
inline std::vector<cpu::simd::Path> cpu_paths() {
  std::vector<cpu::simd::Path> out;
  for (cpu::simd::Path p : cpu::simd::all_paths)
    if (cpu::simd::supported(p)) out.push_back(p);
  return out;
}

// Makes p the active path for its lifetime, then puts the one before back.
class ForcedPath {
 public:
  explicit ForcedPath(cpu::simd::Path p) : before_(cpu::simd::active()) { cpu::simd::set_path(p); }
  ~ForcedPath() { cpu::simd::set_path(before_); }
  ForcedPath(const ForcedPath&) = delete;
  ForcedPath& operator=(const ForcedPath&) = delete;

 private:
  cpu::simd::Path before_;
};

}  // namespace tapegrad::testing
