// Custom ops, like torch.autograd.Function: a struct with a name, a forward over tensors and a
// backward rule, applied to Vars. The op is recorded as any built-in op is (graph.hpp), so the
// engine's door, the overwrite-bug mode, tape dumps and the gradient check all work with it.
// docs/custom-ops.md walks through one; examples/custom_op builds one against the installed library.
//
//   struct Softplus {
//     static constexpr const char* name = "softplus";
//     // y = log(1 + exp(x)); keeps x for the backward (inputs are kept anyway: ctx.input(0))
//     static Tensor forward(const std::vector<Tensor>& in, Saved& saved);
//     // dx = dy * sigmoid(x)
//     static void backward(BackwardContext& ctx);
//   };
//   Var y = tapegrad::apply<Softplus>({x});
//
// Rules: forward computes its output into a tensor it allocates, on its inputs' device (an op
// without a kernel for a device throws DeviceError naming itself); it must not write its inputs.
// backward reads ctx.grad_output(), ctx.input(k), ctx.output(), ctx.saved(k) and ctx.scalar(),
// and hands each input's gradient to ctx.accumulate(k, ...) (or accumulate_rows for rows of a
// table), never to the input's bytes. At most three inputs; integer inputs (ids) take no gradient.
#pragma once

#include <array>
#include <initializer_list>
#include <string>
#include <vector>

#include "tapegrad/graph/graph.hpp"

namespace tapegrad {

// What a forward keeps for its backward: up to two tensors and one number.
struct Saved {
  std::array<Tensor, 2> tensors;
  double scalar = 0.0;
};

template <class Op>
Var apply(std::initializer_list<Var> inputs) {
  if (inputs.size() == 0 || inputs.size() > 3)
    throw Error(std::string("[") + Op::name + "] a custom op takes 1 to 3 inputs, got " + std::to_string(inputs.size()));
  Graph* g = nullptr;
  std::vector<Tensor> values;
  for (const Var& v : inputs) {
    if (!v.defined()) throw Error(std::string("[") + Op::name + "] an input Var is empty");
    if (g && &v.graph() != g) throw Error(std::string("[") + Op::name + "] inputs belong to different graphs");
    g = &v.graph();
    values.push_back(v.value());
  }
  Saved saved;
  Tensor out = Op::forward(values, saved);
  if (!out.defined()) throw Error(std::string("[") + Op::name + "] the forward returned no tensor");
  return g->record(Op::name, std::move(out), inputs, &Op::backward, std::move(saved.tensors), saved.scalar);
}

}  // namespace tapegrad
