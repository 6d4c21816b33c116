// Image layers (conv.hpp): sizes checked before any parameter is made, forwards made of ops.
#include "tapegrad/nn/conv.hpp"

#include <cmath>
#include <string>

#include "tapegrad/nn/checks.hpp"
#include "tapegrad/nn/init.hpp"
#include "tapegrad/ops/ops.hpp"

namespace tapegrad::nn {

using detail::fresh;
using detail::need_positive;

namespace {

// x (N, C, H, W), or (C, H, W) as a batch of one (PyTorch's unbatched input), through f.
template <class F>
Var batched(const std::string& where, const char* channels, Var x, F&& f) {
  const Shape& s = x.shape();
  if (s.ndim() == 3) return ops::squeeze(f(ops::unsqueeze(x, 0)), 0);
  if (s.ndim() != 4)
    throw Error(where + "x must be (N, " + channels + ", H, W) or (" + channels + ", H, W), got " + s.str());
  return f(x);
}

}  // namespace

// ---- Conv2d: y = conv2d(x, W, b, stride, padding) (ops::conv2d: one GEMM over the batch)
Conv2d::Conv2d(Factory& f, int64_t in, int64_t out, KernelSize k, int s, int p, bool with_bias)
    : in_channels(in), out_channels(out), kernel_size(k), stride(s), padding(p) {
  need_positive("Conv2d", "in_channels", in);
  need_positive("Conv2d", "out_channels", out);
  need_positive("Conv2d", "kernel height", k.h);
  need_positive("Conv2d", "kernel width", k.w);
  need_positive("Conv2d", "stride", s);
  if (p < 0) throw Error("[Conv2d] padding must be at least 0, got " + std::to_string(p));
  weight = register_parameter("weight", fresh(f, "Conv2d", "weight", Shape{out, in, k.h, k.w}), f.graph);
  init::kaiming_uniform_(weight, f.generator, std::sqrt(5.0));  // U(-1/sqrt(fan_in), 1/sqrt(fan_in))
  if (with_bias) {
    bias = register_parameter("bias", fresh(f, "Conv2d", "bias", Shape{out}), f.graph);
    const double bound = 1.0 / std::sqrt(static_cast<double>(init::fans(weight.shape()).first));
    init::uniform_(bias, -bound, bound, f.generator);
  }
}

Var Conv2d::operator()(Var x) {
  const auto in_scope = scope(x.graph());
  const std::string channels = std::to_string(in_channels);
  return labelled(batched(where(), channels.c_str(), x, [&](Var x4) {
    if (x4.shape()[1] != in_channels)
      throw Error(where() + "x must be (N, " + channels + ", H, W) or (" + channels + ", H, W), got " +
                  x.shape().str());
    return ops::conv2d(x4, weight, bias, stride, padding);
  }));
}

// ---- MaxPool2d, AvgPool2d (ops::max_pool2d, ops::avg_pool2d)
Pool2d::Pool2d(const char* kind, int k, std::optional<int> s, int p) : kernel_size(k), stride(s), padding(p) {
  need_positive(kind, "kernel_size", k);
  if (s) need_positive(kind, "stride", *s);
  if (p < 0 || p > k / 2)
    throw Error(std::string("[") + kind + "] padding must be in [0, kernel_size / 2] = [0, " + std::to_string(k / 2) +
                "], got " + std::to_string(p));
}

Var MaxPool2d::operator()(Var x) {
  const auto in_scope = scope(x.graph());
  return labelled(batched(where(), "C", x, [&](Var x4) { return ops::max_pool2d(x4, kernel_size, stride, padding); }));
}

Var AvgPool2d::operator()(Var x) {
  const auto in_scope = scope(x.graph());
  return labelled(batched(where(), "C", x, [&](Var x4) { return ops::avg_pool2d(x4, kernel_size, stride, padding); }));
}

}  // namespace tapegrad::nn
