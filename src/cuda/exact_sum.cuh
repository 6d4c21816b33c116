// ExactSum: the correctly rounded sum of doubles (= math.fsum) as a streaming accumulator for
// device code, one per thread. A port of src/kernels/cpu/exact_sum.hpp, whose Note [fsum partials]
// explains the algorithm; __host__ __device__, so tests/cuda checks it against the CPU version
// on the host, and the two give the same bits for the same terms in any order.
//
// Rule: the partials live in a fixed array (a kernel cannot grow a heap buffer). 64 is far more
// than sums of real data need (the CPU version keeps 32 on its stack); a sum that needs more sets
// out_of_partials, and the kernel records that as an error instead of returning a wrong sum.
#pragma once

#include <cmath>

#include "tapegrad/kernels/cr_math.hpp"  // TG_HD

namespace tapegrad::cuda {

struct ExactSum {
  static constexpr int kPartials = 64;
  double partials[kPartials];
  int count = 0;
  double special_sum = 0.0;  // sum of the inf and nan inputs (and of overflowed totals)
  bool out_of_partials = false;

  // Two-sum x with each partial in turn, keeping the non-zero rounding errors as the new partials.
  TG_HD void add(double input) {
    double v = input;
    int kept = 0;
    for (int j = 0; j < count; ++j) {
      double y = partials[j];
      if (std::fabs(v) < std::fabs(y)) {
        const double t = v;
        v = y;
        y = t;
      }
      const double hi = v + y;
      const double lo = y - (hi - v);
      if (lo != 0.0) partials[kept++] = lo;
      v = hi;
    }
    count = kept;
    if (v == 0.0) return;
    if (!std::isfinite(v)) {  // an inf/nan input, or the total overflowed
      special_sum += std::isfinite(input) ? v : input;
      count = 0;
      return;
    }
    if (count == kPartials) {
      out_of_partials = true;
      return;
    }
    partials[count++] = v;
  }

  // The partials summed from the top down while exact, then rounded half-even across them.
  TG_HD double result() const {
    if (special_sum != 0.0) return special_sum;
    if (count == 0) return 0.0;
    int n = count;
    double hi = partials[--n];
    double lo = 0.0;
    while (n > 0) {
      const double v = hi;
      const double y = partials[--n];
      hi = v + y;
      lo = y - (hi - v);
      if (lo != 0.0) break;
    }
    if (n > 0 && ((lo < 0.0 && partials[n - 1] < 0.0) || (lo > 0.0 && partials[n - 1] > 0.0))) {
      const double y = lo * 2.0;
      const double v = hi + y;
      if (y == v - hi) hi = v;
    }
    return hi;
  }
};

}  // namespace tapegrad::cuda
