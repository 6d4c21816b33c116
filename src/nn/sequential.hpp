// nn::Sequential: PyTorch's nn.Sequential. Modules applied in order, each one's output the next
// one's input, named "0", "1", ... as PyTorch names them, so a state dict of
//   nn.Sequential(nn.Conv2d(1, 8, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(1352, 10))
// has the keys "0.weight", "0.bias", "4.weight", "4.bias" here as there. A step is any module whose
// forward takes one Var and returns one (an LSTM, which returns its states too, is called directly).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tapegrad/nn/module.hpp"

namespace tapegrad::nn {

class Sequential : public Module {
 public:
  const char* kind() const override { return "Sequential"; }
  // Builds M(args...) as the next step and returns it:
  //   seq.emplace_back<nn::Conv2d>(f, 1, 8, 3);  seq.emplace_back<nn::ReLU>();
  template <class M, class... Args> M& emplace_back(Args&&... args) {
    auto owned = std::make_unique<M>(std::forward<Args>(args)...);
    M& m = *owned;
    steps_.push_back({std::move(owned), [&m](Var x) -> Var { return m(x); }});
    return register_module(std::to_string(steps_.size() - 1), m);
  }
  // x through every step in order (x itself when there is none).
  Var operator()(Var x);
  size_t size() const { return steps_.size(); }
  Module& operator[](size_t i) const { return *steps_.at(i).module; }
  // Step i as the type it was built as (std::bad_cast for another).
  template <class M> M& at(size_t i) const { return dynamic_cast<M&>(*steps_.at(i).module); }

 private:
  struct Step {
    std::unique_ptr<Module> module;
    std::function<Var(Var)> forward;  // module's operator()(Var)
  };
  std::vector<Step> steps_;
};

}  // namespace tapegrad::nn
