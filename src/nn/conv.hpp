// Image layers, PyTorch's of the same names over ops::conv2d, max_pool2d and avg_pool2d:
//
//   Conv2d(in, out, kernel, stride, padding, bias)  x (N, in, H, W) -> (N, out, Ho, Wo),
//                        Ho = (H + 2 padding - kh) / stride + 1      weight (out, in, kh, kw), bias (out,)
//   MaxPool2d(kernel, stride, padding)  x (N, C, H, W) -> (N, C, Ho, Wo), the max of each window
//   AvgPool2d(kernel, stride, padding)  the same, the mean of each window (padding counted as 0)
//
// An unbatched x (C, H, W) gives (C', Ho, Wo), as in PyTorch. One stride and one padding for both
// axes (a kernel may be kh x kw); no dilation, groups, ceil_mode or padding modes (docs/nn.md).
// Default initialisation (torch.nn.Conv2d's): weight kaiming_uniform_(a = sqrt(5)), which is
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = in kh kw, and bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
#pragma once

#include <optional>

#include "tapegrad/nn/module.hpp"

namespace tapegrad::nn {

// A kernel's extents: 3 is 3 x 3, {3, 5} is 3 high and 5 wide (PyTorch's int or tuple).
struct KernelSize {
  KernelSize(int64_t k) : h(k), w(k) {}  // NOLINT: an int converts, as in PyTorch
  KernelSize(int64_t kh, int64_t kw) : h(kh), w(kw) {}
  int64_t h, w;
};

class Conv2d : public Module {
 public:
  Conv2d(Factory& f, int64_t in_channels, int64_t out_channels, KernelSize kernel_size, int stride = 1, int padding = 0,
         bool bias = true);
  const char* kind() const override { return "Conv2d"; }
  Var operator()(Var x);
  Var weight, bias;  // bias undefined when built without one
  int64_t in_channels, out_channels;
  KernelSize kernel_size;
  int stride, padding;
};

// What the pools share (PyTorch's _MaxPoolNd and _AvgPoolNd): the window. The stride defaults to
// the kernel size; the padding is at most half the kernel (a window always holds a pixel of x).
class Pool2d : public Module {
 public:
  int kernel_size;
  std::optional<int> stride;
  int padding;

 protected:
  Pool2d(const char* kind, int kernel_size, std::optional<int> stride, int padding);
};

class MaxPool2d : public Pool2d {  // padding is -inf
 public:
  explicit MaxPool2d(int kernel_size, std::optional<int> stride = std::nullopt, int padding = 0)
      : Pool2d("MaxPool2d", kernel_size, stride, padding) {}
  const char* kind() const override { return "MaxPool2d"; }
  Var operator()(Var x);
};

class AvgPool2d : public Pool2d {  // padding is 0 and counted (count_include_pad)
 public:
  explicit AvgPool2d(int kernel_size, std::optional<int> stride = std::nullopt, int padding = 0)
      : Pool2d("AvgPool2d", kernel_size, stride, padding) {}
  const char* kind() const override { return "AvgPool2d"; }
  Var operator()(Var x);
};

}  // namespace tapegrad::nn
