// Initialisers (init.hpp).
//
// Note [initialiser draws]
// A fill of n values takes ceil(n / 2) counters from the generator, starting at counter o. Philox's
// block for counter o + j under the generator's seed is four 32-bit words w0..w3, which make two
// doubles on [0, 1) with 53 random bits each, as NumPy makes them:
//   u = ((w0 >> 5) * 2^26 + (w1 >> 6)) * 2^-53,   v = ((w2 >> 5) * 2^26 + (w3 >> 6)) * 2^-53
// A uniform fill takes value 2j = lo + (hi - lo) u and value 2j + 1 from v. A normal fill takes
// the Box-Muller pair r cos(2 pi v), r sin(2 pi v) with r = sqrt(-2 log(1 - u)) (1 - u is in
// (0, 1], so the log is finite). The counters are disjoint from any other call's (the generator
// hands each call its own range), so a fill and a dropout mask never share random words. The
// values are PyTorch's distributions, not PyTorch's bits: a model that must match PyTorch's
// weights exactly loads them (state_dict.hpp).
#include "tapegrad/nn/init.hpp"

#include <cmath>
#include <cstdio>
#include <numbers>
#include <vector>

#include "tapegrad/kernels/philox.hpp"

namespace tapegrad::nn::init {
namespace {

void need_float(const char* op, const Tensor& t) {
  if (!t.defined()) throw Error(std::string("[init.") + op + "] the tensor is empty (undefined)");
  if (!is_floating(t.dtype()))
    throw Error(std::string("[init.") + op + "] fills floating-point tensors, got a " + dtype_name(t.dtype()) +
                " " + t.shape().str() + " one");
}

// `values` (t's elements, in order) written over t.
void fill(Tensor& t, const std::vector<double>& values) {
  t.copy_from(Tensor::from_doubles(values, t.shape(), t.dtype(), Device::cpu()));
}

double unit(uint32_t hi, uint32_t lo) {
  return (static_cast<double>(hi >> 5) * 67108864.0 + static_cast<double>(lo >> 6)) * 0x1p-53;
}

// n values, two per counter: pair(u, v) -> (value 2j, value 2j + 1) (Note [initialiser draws]).
template <class Pair> std::vector<double> draw(int64_t n, Generator& gen, Pair pair) {
  std::vector<double> values(static_cast<size_t>(n));
  const uint64_t count = static_cast<uint64_t>(n / 2 + n % 2);
  const uint64_t first = gen.take(count);
  for (uint64_t j = 0; j < count; ++j) {
    const kernels::PhiloxBlock b = kernels::philox_block(gen.seed(), first + j);
    const auto [a, c] = pair(unit(b.w[0], b.w[1]), unit(b.w[2], b.w[3]));
    values[2 * j] = a;
    if (2 * j + 1 < values.size()) values[2 * j + 1] = c;
  }
  return values;
}

std::string number(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", x);
  return text;
}

}  // namespace

void uniform_(Tensor t, double lo, double hi, Generator& gen) {
  need_float("uniform_", t);
  if (!(std::isfinite(lo) && std::isfinite(hi) && lo <= hi))
    throw Error("[init.uniform_] needs finite bounds lo <= hi, got " + number(lo) + " and " + number(hi));
  fill(t, draw(t.numel(), gen, [&](double u, double v) {
         return std::pair{lo + (hi - lo) * u, lo + (hi - lo) * v};
       }));
}

void normal_(Tensor t, double mean, double std, Generator& gen) {
  need_float("normal_", t);
  if (!(std::isfinite(mean) && std::isfinite(std) && std >= 0))
    throw Error("[init.normal_] needs a finite mean and a finite std >= 0, got " + number(mean) + " and " +
                number(std));
  fill(t, draw(t.numel(), gen, [&](double u, double v) {
         const double r = std::sqrt(-2.0 * std::log(1.0 - u)), theta = 2.0 * std::numbers::pi * v;
         return std::pair{mean + std * (r * std::cos(theta)), mean + std * (r * std::sin(theta))};
       }));
}

void constant_(Tensor t, double value) {
  need_float("constant_", t);
  fill(t, std::vector<double>(static_cast<size_t>(t.numel()), value));
}

void zeros_(Tensor t) { constant_(std::move(t), 0.0); }
void ones_(Tensor t) { constant_(std::move(t), 1.0); }

std::pair<int64_t, int64_t> fans(const Shape& shape) {
  if (shape.ndim() < 2)
    throw Error("[init.fans] fan in and fan out need a tensor of at least 2 dimensions, got shape " + shape.str());
  int64_t receptive = 1;
  for (int i = 2; i < shape.ndim(); ++i) receptive *= shape[i];  // a factor of numel: cannot overflow
  return {shape[1] * receptive, shape[0] * receptive};
}

void kaiming_uniform_(Tensor t, Generator& gen, double a, FanMode mode) {
  need_float("kaiming_uniform_", t);
  const auto [fan_in, fan_out] = fans(t.shape());
  const int64_t fan = mode == FanMode::fan_in ? fan_in : fan_out;
  if (fan == 0)
    throw Error("[init.kaiming_uniform_] the tensor of shape " + t.shape().str() + " has a " +
                (mode == FanMode::fan_in ? "fan in" : "fan out") + " of 0");
  const double gain = std::sqrt(2.0 / (1.0 + a * a));
  const double bound = std::sqrt(3.0) * (gain / std::sqrt(static_cast<double>(fan)));  // torch's arithmetic
  uniform_(std::move(t), -bound, bound, gen);
}

}  // namespace tapegrad::nn::init
