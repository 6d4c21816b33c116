// Modules without parameters, with PyTorch's names: the activations and Flatten. Each forward is
// one op (ops.hpp) in the module's scope, so a Sequential of them reads as PyTorch's does and its
// tape shows each step under its name ("features.1").
//
//   ReLU()                    x -> max(x, 0)                     (any shape)
//   GELU(approximate)         x -> x Phi(x), or its tanh form    (any shape)
//   Tanh(), Sigmoid(), SiLU() x -> tanh(x), 1 / (1 + e^-x), x sigmoid(x)
//   Softmax(dim), LogSoftmax(dim)  along dim (PyTorch asks for dim; so does this)
//   Identity()                x -> x
//   Flatten(start_dim = 1, end_dim = -1)  (N, C, H, W) -> (N, C H W): ops::flatten, a reshape
#pragma once

#include "tapegrad/nn/module.hpp"
#include "tapegrad/ops/ops.hpp"

namespace tapegrad::nn {

class ReLU : public Module {
 public:
  const char* kind() const override { return "ReLU"; }
  Var operator()(Var x);
};

class GELU : public Module {
 public:
  explicit GELU(ops::Gelu approximate = ops::Gelu::none) : approximate(approximate) {}
  const char* kind() const override { return "GELU"; }
  Var operator()(Var x);
  ops::Gelu approximate;  // none: the exact erf form (PyTorch's default); tanh: GPT-2's
};

class Tanh : public Module {
 public:
  const char* kind() const override { return "Tanh"; }
  Var operator()(Var x);
};

class Sigmoid : public Module {
 public:
  const char* kind() const override { return "Sigmoid"; }
  Var operator()(Var x);
};

class SiLU : public Module {
 public:
  const char* kind() const override { return "SiLU"; }
  Var operator()(Var x);
};

class Softmax : public Module {
 public:
  explicit Softmax(int dim) : dim(dim) {}
  const char* kind() const override { return "Softmax"; }
  Var operator()(Var x);
  int dim;
};

class LogSoftmax : public Module {
 public:
  explicit LogSoftmax(int dim) : dim(dim) {}
  const char* kind() const override { return "LogSoftmax"; }
  Var operator()(Var x);
  int dim;
};

class Identity : public Module {
 public:
  const char* kind() const override { return "Identity"; }
  Var operator()(Var x) { return x; }
};

class Flatten : public Module {
 public:
  explicit Flatten(int start_dim = 1, int end_dim = -1) : start_dim(start_dim), end_dim(end_dim) {}
  const char* kind() const override { return "Flatten"; }
  Var operator()(Var x);
  int start_dim, end_dim;
};

}  // namespace tapegrad::nn
