// Plain SGD: p = p - lr * grad, for any set of parameters of any shapes, on any device.
#pragma once

#include <vector>

#include "tapegrad/graph/graph.hpp"

namespace tapegrad::optim {

// Throws "learning rate must be a positive finite number, got X" (the reference's check).
void check_learning_rate(double lr, const char* shown = nullptr);

class SGD {
 public:
  explicit SGD(double lr);
  double learning_rate() const { return lr_; }
  // Updates every parameter that has a gradient, in place.
  void step(const std::vector<Var>& params) const;

 private:
  double lr_;
};

}  // namespace tapegrad::optim
