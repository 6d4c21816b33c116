// docs/adding-an-op.md's functor, compiled as the page shows it (extract_block.py writes the block
// to adding_an_op_functor.inc): its defaults come from UnaryOp, and its backward is the derivative
// of its forward (central differences in f64 over [lo, hi]).
#include <doctest/doctest.h>

#include <cmath>
#include <string_view>

#include "tapegrad/kernels/unary_ops.hpp"

namespace tapegrad::kernels {
#include "adding_an_op_functor.inc"
}  // namespace tapegrad::kernels

using tapegrad::kernels::Softsign;

TEST_CASE("docs/adding-an-op.md: the softsign functor compiles with UnaryOp's defaults and its own") {
  CHECK(std::string_view(Softsign::name) == "softsign");
  CHECK(Softsign::lo == -3.0);
  CHECK(Softsign::hi == 3.0);
  CHECK_FALSE(Softsign::streaming);
  CHECK_FALSE(Softsign::backward_reads_y);
  CHECK(Softsign::forward(1.0) == 0.5);
  CHECK(Softsign::forward(-3.0f) == -0.75f);
}

TEST_CASE("docs/adding-an-op.md: the softsign functor's backward is its forward's derivative") {
  const double h = 1e-6;
  for (int i = 0; i <= 60; ++i) {
    const double x = Softsign::lo + (Softsign::hi - Softsign::lo) * i / 60.0;
    if (std::abs(x) < 0.05) continue;  // |x| has its kink at 0
    const double numeric = (Softsign::forward(x + h) - Softsign::forward(x - h)) / (2 * h);
    const double analytic = Softsign::backward(x, Softsign::forward(x), 1.0);
    CAPTURE(x);
    CHECK(analytic == doctest::Approx(numeric).epsilon(1e-8));
    CHECK(Softsign::backward(x, 0.0, 2.5) == doctest::Approx(2.5 * analytic).epsilon(1e-15));
  }
}
