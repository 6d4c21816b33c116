// Plain SGD (see sgd.hpp).
#include "tapegrad/optim/sgd.hpp"

#include <cmath>

#include "tapegrad/kernels/kernels.hpp"

namespace tapegrad::optim {

void check_learning_rate(double lr, const char* shown) {
  if (!(std::isfinite(lr) && lr > 0)) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", lr);
    throw Error(std::string("learning rate must be a positive finite number, got ") + (shown ? shown : buf));
  }
}

SGD::SGD(double lr) : lr_(lr) { check_learning_rate(lr); }

void SGD::step(const std::vector<Var>& params) const {
  for (const Var& p : params) {
    if (!p.grad().defined()) continue;
    Tensor value = p.value();
    kernels::sgd_step(value, p.grad(), lr_);
  }
}

}  // namespace tapegrad::optim
