// Anomaly mode (src/graph/anomaly.hpp): the first op whose output holds NaN or inf, forward or
// backward, is named with its value's label and scope; off, nothing is checked.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "messages.hpp"
#include "tapegrad/graph/anomaly.hpp"
#include "tapegrad/graph/graph.hpp"
#include "tapegrad/kernels/strided.hpp"
#include "tapegrad/ops/ops.hpp"

using namespace tapegrad;
using testing::message_of;

namespace {

Tensor f64(std::vector<double> v, Shape s) { return Tensor::from_doubles(v, s, DType::f64); }

}  // namespace

TEST_CASE("anomaly mode names the first op whose output is NaN, with its scope and its inputs") {
  Graph g;
  g.set_detect_anomaly(true);
  Var x = g.parameter(f64({1.0, -1.0, 2.0}, Shape{3}), "x");
  Var h = ops::exp(x).label("h");  // finite
  auto s = g.scope("head");
  // log(x) of a negative element is the first NaN; the sum after it would only carry it on
  CHECK(message_of([&] { ops::sum(ops::log(x) + h); }) ==
        "[anomaly] log made NaN or inf in scope \"head\": its output (3,) holds 1 NaN and 0 inf among its 3 "
        "elements, the first at element 1. Its inputs: input 0 'x' (parameter -1) finite");
  CHECK(g.value_count() == 1);  // nothing of the refused op was recorded
}

TEST_CASE("anomaly mode says when an input brought the NaN in") {
  Graph g;
  g.set_detect_anomaly(true);
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  Var x = g.input(f64({nan, 1.0, inf}, Shape{3}));
  Var w = g.parameter(f64({1, 2, 3}, Shape{3}), "w");
  CHECK(message_of([&] { ops::mul(w, x); }) ==
        "[anomaly] mul made NaN or inf: its output (3,) holds 1 NaN and 1 inf among its 3 elements, the first at "
        "element 0. Its inputs: input 0 'w' (parameter -1) finite; input 1 value 0 (input) already held 1 NaN and "
        "1 inf");
}

TEST_CASE("anomaly mode names the first contribution whose gradient is not finite in the backward") {
  // sqrt(0) is 0, finite; its derivative 1 / (2 sqrt(x)) is inf there
  Graph g;
  Var x = g.parameter(f64({4.0, 0.0}, Shape{2}), "x");
  Var r;
  {
    auto s = g.scope("norm");
    r = ops::sqrt(x).label("r");
  }
  Var loss = ops::sum(r * 3.0);
  CHECK(message_of([&] { g.backward(loss, {.detect_anomaly = true, .retain_graph = true}); }) ==
        "[anomaly] the backward of sqrt (node 0, 'r' (activation 0) in scope \"norm\") gave input 0 'x' (parameter "
        "-1) a gradient (2,) holding 0 NaN and 1 inf among its 2 elements, the first at element 1; the gradient it "
        "received was finite");
  g.zero_grad();
  g.set_detect_anomaly(true);  // the graph's mode checks the backward too
  CHECK(message_of([&] { g.backward(loss, {.retain_graph = true}); }).starts_with("[anomaly] the backward of sqrt"));
}

TEST_CASE("anomaly mode is off by default: NaN passes unchecked") {
  Graph g;
  CHECK_FALSE(g.detect_anomaly());
  Var x = g.parameter(f64({-1.0}, Shape{1}), "x");
  Var loss = ops::sum(ops::log(x));
  g.backward(loss);
  CHECK(std::isnan(loss.item()));
  CHECK(x.grad().to_doubles() == std::vector<double>{-1.0});
}

TEST_CASE("non_finite counts NaN and inf in every floating dtype, and none in integers") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (DType t : {DType::f64, DType::f32, DType::bf16}) {
    const NonFinite f = non_finite(Tensor::from_doubles({1, inf, nan, -inf}, Shape{4}, t));
    CHECK(f.nan == 1);
    CHECK(f.inf == 2);
    CHECK(f.first == 1);
  }
  CHECK_FALSE(non_finite(Tensor::from_vector(std::vector<int32_t>{1, 2}, Shape{2})).any());
}

TEST_CASE("anomaly mode checks a part handed to the door for parts") {
  // a custom op whose backward gives column 1 of its input a NaN part (the region door, region.hpp)
  Graph g;
  g.set_detect_anomaly(true);
  Var x = g.parameter(f64({1, 2, 3, 4, 5, 6}, Shape{2, 3}), "x");
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Var y = g.record("nan_part", f64({0}, Shape{}), {x}, [](BackwardContext& ctx) {
    ctx.accumulate(0, ctx.saved(0), kernels::sliced_view(Shape{2, 3}, 1, 1, 2));
  }, {f64({nan, 0.5}, Shape{2, 1})});
  CHECK(message_of([&] { g.backward(y); }) ==
        "[anomaly] the backward of nan_part (node 0, value 0 (activation)) gave input 0 'x' (parameter -1) a part "
        "(2, 1) holding 1 NaN and 0 inf among its 2 elements, the first at element 0; the gradient it received was "
        "finite");
  CHECK_FALSE(x.grad().defined());  // refused before the part landed
}
