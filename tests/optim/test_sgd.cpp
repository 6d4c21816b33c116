// Tests for SGD with momentum, dampening, nesterov and weight decay (src/optim/sgd.*), its kernel
// on the CPU, parameter groups and set_lr on SGD and AdamW.
//
// Rule: updates are checked against torch.optim (torch 1.13, /usr/bin/python3) values written here
// as literals; PyTorch adds with fused multiply-adds where we round every product, so f64 agrees
// to about an ulp and f32 to a few; refusals by their full message.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "gradients.hpp"
#include "messages.hpp"
#include "tapegrad/kernels/kernels.hpp"
#include "tapegrad/optim/adamw.hpp"
#include "tapegrad/optim/sgd.hpp"
#include "tapegrad/tensor/parallel.hpp"

using namespace tapegrad;
using testing::give_gradients;
using testing::message_of;

namespace {

const std::vector<double> kP0 = {0.5, -1.0, 2.0, 0.25, 1.5, -0.75};
const std::vector<std::vector<double>> kG = {{0.1, -0.2, 0.3, 0.4, -0.5, 0.6},
                                             {-0.3, 0.1, 0.2, 0.05, 0.7, -0.4},
                                             {0.2, 0.2, -0.1, -0.6, 0.3, 0.15}};

void check_near(const std::vector<double>& got, const std::vector<double>& want, double eps) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i] == doctest::Approx(want[i]).epsilon(eps));
  }
}

double tolerance(DType t) { return t == DType::f64 ? 1e-14 : 1e-6; }

struct SGDCase {
  const char* name;
  optim::SGDConfig config;
  std::vector<double> want_f64, want_f32, buf_f64;  // after three steps of torch.optim.SGD(lr=0.1, ...)
};

}  // namespace

// torch.optim.SGD([p], lr=0.1, ...) over the three gradients kG, p (2, 3) from kP0.
TEST_CASE("SGD with momentum, nesterov, dampening and weight decay matches torch.optim.SGD over 3 steps") {
  const std::vector<SGDCase> cases = {
      {"momentum",
       {.lr = 0.1, .momentum = 0.9},
       {0.5099, -0.9848, 1.8907, 0.19209999999999997, 1.4725000000000001, -0.8516},
       {0.5099000334739685, -0.9847999811172485, 1.8906999826431274, 0.19210000336170197, 1.472499966621399,
        -0.8515999913215637},
       {0.011000000000000038, 0.128, 0.32300000000000006, -0.23099999999999993, 0.5249999999999999, 0.276}},
      {"nesterov",
       {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true},
       {0.5048870619804999, -0.988454623961, 1.845940736512, 0.21131092092525, 1.4129354946615, -0.86994060739575},
       {0.504887044429779, -0.9884546399116516, 1.8459407091140747, 0.21131092309951782, 1.4129353761672974,
        -0.8699405789375305},
       {0.02464677905000004, 0.10165644189999999, 0.37536875520000007, -0.22610234697499998, 0.56643344915,
        0.253832538925}},
      {"dampening",
       {.lr = 0.1, .momentum = 0.8, .dampening = 0.3, .weight_decay = 0.05},
       {0.488489971875, -0.95610244375, 1.86517701, 0.18313455718749996, 1.479454895625, -0.8393991265625},
       {0.4884899854660034, -0.9561024904251099, 1.865177035331726, 0.1831345558166504, 1.4794548749923706,
        -0.8393991589546204},
       {0.08303778125000001, -0.024850562500000024, 0.4196299000000001, -0.11615182187499988, 0.4264635437499999,
        0.18971001562499998}},
      {"weight decay alone",
       {.lr = 0.1, .weight_decay = 0.1},
       {0.4850485, -0.9805969999999999, 1.901395, 0.25842075, 1.4051535, -0.76193025},
       {0.4850485026836395, -0.9805969595909119, 1.9013950824737549, 0.25842076539993286, 1.4051533937454224,
        -0.7619302272796631},
       {}},
  };
  for (const SGDCase& c : cases) {
    for (DType dtype : {DType::f64, DType::f32}) {
      CAPTURE(c.name);
      CAPTURE(dtype_name(dtype));
      Graph g;
      Var p = g.parameter(Tensor::from_doubles(kP0, Shape{2, 3}, dtype), "p");
      optim::SGD sgd({p}, c.config);
      for (const std::vector<double>& grad : kG) {
        give_gradients(g, {{p, grad}});
        sgd.step();
      }
      CHECK(sgd.step_count(0) == 3);
      check_near(p.value().to_doubles(), dtype == DType::f64 ? c.want_f64 : c.want_f32, tolerance(dtype));
      CHECK(sgd.momentum_buffer(0).defined() == !c.buf_f64.empty());
      if (!c.buf_f64.empty()) check_near(sgd.momentum_buffer(0).to_doubles(), c.buf_f64, dtype == DType::f64 ? 1e-13 : 1e-5);
    }
  }
}

TEST_CASE("the momentum buffer starts as the first gradient, undampened, as PyTorch makes it") {
  Graph g;
  Var p = g.parameter(Tensor::from_doubles({1.0, 2.0}, Shape{2}, DType::f64));
  optim::SGD sgd({p}, {.lr = 0.5, .momentum = 0.9, .dampening = 0.5});
  CHECK_FALSE(sgd.momentum_buffer(0).defined());
  give_gradients(g, {{p, {0.25, -1.0}}});
  sgd.step();
  CHECK(sgd.momentum_buffer(0).to_doubles() == std::vector<double>{0.25, -1.0});  // buf = g, no (1 - dampening)
  CHECK(p.value().to_doubles() == std::vector<double>{1.0 - 0.5 * 0.25, 2.0 + 0.5});
  give_gradients(g, {{p, {1.0, 1.0}}});
  sgd.step();
  CHECK(sgd.momentum_buffer(0).to_doubles() == std::vector<double>{0.9 * 0.25 + 0.5 * 1.0, 0.9 * -1.0 + 0.5 * 1.0});
}

TEST_CASE("SGD without momentum or decay gives the plain update's bits; the plain form is unchanged") {
  for (DType dtype : {DType::f64, DType::f32}) {
    CAPTURE(dtype_name(dtype));
    Graph g;
    Var a = g.parameter(Tensor::from_doubles(kP0, Shape{2, 3}, dtype));
    Var b = g.parameter(Tensor::from_doubles(kP0, Shape{2, 3}, dtype));
    optim::SGD stateful({a}, {.lr = 0.37});
    const optim::SGD plain(0.37);
    for (const std::vector<double>& grad : kG) {
      give_gradients(g, {{a, grad}, {b, grad}});
      Tensor want = b.value().clone();
      kernels::sgd_step(want, b.grad(), 0.37);
      stateful.step();
      plain.step({b});
      CHECK(a.value().to_doubles() == want.to_doubles());
      CHECK(b.value().to_doubles() == want.to_doubles());
    }
    CHECK_FALSE(stateful.momentum_buffer(0).defined());
    CHECK(plain.learning_rate() == 0.37);
  }
}

TEST_CASE("the SGD kernel gives the same bits on 1 and 4 threads") {
  // 300k elements: large enough for the CPU loop to split over threads.
  const int64_t n = 300000;
  std::vector<double> p(n), grad(n), buf(n);
  for (int64_t i = 0; i < n; ++i) {
    p[i] = std::sin(0.001 * i);
    grad[i] = std::cos(0.003 * i);
    buf[i] = 0.5 * std::sin(0.007 * i);
  }
  const kernels::SGDScalars s{.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01, .nesterov = false};
  std::vector<std::vector<double>> results;
  const int before = num_threads();
  for (int threads : {1, 4}) {
    set_num_threads(threads);
    Tensor tp = Tensor::from_doubles(p, Shape{n}, DType::f32), tb = Tensor::from_doubles(buf, Shape{n}, DType::f32);
    kernels::sgd_momentum_step(tp, Tensor::from_doubles(grad, Shape{n}, DType::f32), tb, s);
    results.push_back(tp.to_doubles());
    results.push_back(tb.to_doubles());
  }
  set_num_threads(before);
  CHECK(results[0] == results[2]);
  CHECK(results[1] == results[3]);
}

TEST_CASE("SGD's hyperparameters and parameters are refused by name") {
  Graph g;
  Var w = g.parameter(Tensor::zeros(Shape{2}, DType::f32), "w");
  CHECK(message_of([&] { optim::SGD({w}, {.lr = 0}); }) == "[sgd] lr must be a positive finite number, got 0");
  CHECK(message_of([&] { optim::SGD({w}, {.lr = 0.1, .momentum = -1}); }) ==
        "[sgd] momentum must be a finite number >= 0, got -1");
  CHECK(message_of([&] { optim::SGD({w}, {.lr = 0.1, .weight_decay = -0.5}); }) ==
        "[sgd] weight_decay must be a finite number >= 0, got -0.5");
  CHECK(message_of([&] { optim::SGD({w}, {.lr = 0.1, .nesterov = true}); }) ==
        "[sgd] nesterov momentum needs momentum > 0 and dampening 0, got momentum 0 and dampening 0");
  CHECK(message_of([&] { optim::SGD({w}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true}); }) ==
        "[sgd] nesterov momentum needs momentum > 0 and dampening 0, got momentum 0.9 and dampening 0.1");
  Var half = g.parameter(Tensor::zeros(Shape{2}, DType::bf16), "table");
  CHECK(message_of([&] { optim::SGD({w, half}, {.lr = 0.1}); }) ==
        "[sgd] parameter 1 ('table') is bf16; SGD updates f32 and f64 parameters");
  CHECK(message_of([&] { optim::SGD({{{w}, {.beta1 = 0.5}}}, {.lr = 0.1}); }) ==
        "[sgd] group 0 sets beta1, which SGD does not have (AdamW does)");
  optim::SGD momentum({w}, {.lr = 0.1, .momentum = 0.9});
  CHECK(message_of([&] { momentum.step({w}); }) ==
        "[sgd] step(params) is the plain update; this SGD has momentum or weight decay, whose state step() keeps "
        "for its own parameters");
  CHECK(message_of([&] { momentum.set_lr(-1); }) == "[sgd] lr must be a finite number >= 0, got -1");
  momentum.group(0).lr = std::nan("");
  CHECK(message_of([&] { momentum.step(); }) == "[sgd] lr must be a finite number >= 0, got nan");
}

// ---- parameter groups and set_lr

TEST_CASE("decay_groups puts matrices in group 0 with the decay and vectors in group 1 without") {
  Graph g;
  Var w = g.parameter(Tensor::zeros(Shape{3, 4}, DType::f32), "w");
  Var bias = g.parameter(Tensor::zeros(Shape{4}, DType::f32), "bias");
  Var conv = g.parameter(Tensor::zeros(Shape{2, 1, 3, 3}, DType::f32), "conv");
  Var gain = g.parameter(Tensor::zeros(Shape{}, DType::f32), "gain");
  const std::vector<optim::ParamGroup> groups = optim::decay_groups({w, bias, conv, gain}, 0.1);
  REQUIRE(groups.size() == 2);
  REQUIRE(groups[0].params.size() == 2);
  CHECK(groups[0].params[0].label() == "w");
  CHECK(groups[0].params[1].label() == "conv");
  CHECK(*groups[0].options.weight_decay == 0.1);
  REQUIRE(groups[1].params.size() == 2);
  CHECK(groups[1].params[0].label() == "bias");
  CHECK(groups[1].params[1].label() == "gain");
  CHECK(*groups[1].options.weight_decay == 0.0);
  optim::AdamW adamw(groups, {.lr = 1e-3});
  CHECK(adamw.group_count() == 2);
  CHECK(adamw.group_parameters(0) == std::vector<size_t>{0, 1});
  CHECK(adamw.group_parameters(1) == std::vector<size_t>{2, 3});
  CHECK(adamw.parameters()[1].label() == "conv");
  CHECK(adamw.group(0).weight_decay == 0.1);
  CHECK(adamw.group(1).weight_decay == 0.0);
  CHECK(adamw.group(1).lr == 1e-3);  // unset options take the config's
}

// torch.optim.AdamW([{'params': [W], 'weight_decay': 0.1}, {'params': [b], 'weight_decay': 0.0}],
// lr=0.01, betas=(0.9, 0.95), eps=1e-8), five steps, every group's lr set to 0.003 before the fourth.
TEST_CASE("AdamW with two groups and the lr changed mid-run matches torch.optim.AdamW") {
  const std::vector<std::vector<double>> gw = {{0.1, -0.2, 0.3, 0.4, -0.5, 0.6},
                                               {-0.3, 0.1, 0.2, 0.05, 0.7, -0.4},
                                               {0.2, 0.2, -0.1, -0.6, 0.3, 0.15},
                                               {0.0, -0.4, 0.25, 0.1, 0.1, -0.2},
                                               {0.3, 0.05, -0.35, 0.2, -0.1, 0.45}};
  const std::vector<std::vector<double>> gb = {
      {0.5, -0.25, 0.125}, {-0.1, 0.2, 0.3}, {0.05, -0.05, 0.6}, {0.3, 0.1, -0.2}, {-0.4, 0.25, 0.1}};
  for (DType dtype : {DType::f64, DType::f32}) {
    CAPTURE(dtype_name(dtype));
    Graph g;
    Var w = g.parameter(Tensor::from_doubles(kP0, Shape{2, 3}, dtype), "W");
    Var b = g.parameter(Tensor::from_doubles({0.1, -0.2, 0.3}, Shape{3}, dtype), "b");
    optim::AdamW adamw({{{w}, {.weight_decay = 0.1}}, {{b}, {.weight_decay = 0.0}}},
                       {.lr = 0.01, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8});
    for (size_t t = 0; t < 5; ++t) {
      if (t == 3) adamw.set_lr(0.003);
      give_gradients(g, {{w, gw[t]}, {b, gb[t]}});
      adamw.step();
    }
    CHECK(adamw.lr() == 0.003);
    CHECK(adamw.lr(1) == 0.003);
    const bool f64 = dtype == DType::f64;
    check_near(w.value().to_doubles(),
               f64 ? std::vector<double>{0.49183333430133025, -0.9848347423704757, 1.9650043501819852,
                                         0.23352764330263845, 1.4968616632017024, -0.7621986072853646}
                   : std::vector<double>{0.491833359003067, -0.9848347902297974, 1.9650044441223145,
                                         0.23352763056755066, 1.4968616962432861, -0.7621985673904419},
               f64 ? 1e-14 : 2e-6);
    check_near(b.value().to_doubles(),
               f64 ? std::vector<double>{0.07790292649520514, -0.1892460435454341, 0.26844891202892135}
                   : std::vector<double>{0.07790293544530869, -0.1892460435628891, 0.26844894886016846},
               f64 ? 1e-14 : 2e-6);
  }
}

TEST_CASE("a group's hyperparameters are read at every step: group(i).lr changes one group only") {
  Graph g;
  Var a = g.parameter(Tensor::from_doubles({1.0}, Shape{1}, DType::f64));
  Var b = g.parameter(Tensor::from_doubles({1.0}, Shape{1}, DType::f64));
  optim::SGD sgd({{{a}, {}}, {{b}, {.lr = 0.5}}}, {.lr = 0.25});
  give_gradients(g, {{a, {1.0}}, {b, {1.0}}});
  sgd.step();
  CHECK(a.value().item() == 0.75);
  CHECK(b.value().item() == 0.5);
  sgd.group(1).lr = 0.125;
  give_gradients(g, {{a, {1.0}}, {b, {1.0}}});
  sgd.step();
  CHECK(a.value().item() == 0.5);
  CHECK(b.value().item() == 0.375);
  sgd.set_lr(0.0);  // a schedule's end: allowed at a step, and a no-op update
  give_gradients(g, {{a, {1.0}}, {b, {1.0}}});
  sgd.step();
  CHECK(a.value().item() == 0.5);
  CHECK(b.value().item() == 0.375);
}

TEST_CASE("groups are refused by name: a parameter twice, options the optimizer lacks, bad values") {
  Graph g;
  Var w = g.parameter(Tensor::zeros(Shape{2, 2}, DType::f32), "w");
  Var b = g.parameter(Tensor::zeros(Shape{2}, DType::f32), "b");
  const optim::AdamWConfig config{.lr = 0.1};
  CHECK(message_of([&] { optim::AdamW({{{w, b}, {}}, {{w}, {}}}, config); }) ==
        "[adamw] parameter 2 ('w') is in groups 0 and 1; a parameter belongs to one group, once");
  CHECK(message_of([&] { optim::AdamW({{{w, b, w}, {}}}, config); }) ==
        "[adamw] parameter 2 ('w') is twice in group 0; a parameter belongs to one group, once");
  CHECK(message_of([&] { optim::AdamW({{{w}, {.momentum = 0.9}}}, config); }) ==
        "[adamw] group 0 sets momentum, which AdamW does not have (SGD does)");
  CHECK(message_of([&] { optim::AdamW({{{w}, {}}, {{b}, {.weight_decay = -1}}}, config); }) ==
        "[adamw] group 1: weight_decay must be a finite number >= 0, got -1");
  CHECK(message_of([&] { optim::AdamW(std::vector<optim::ParamGroup>{}, config); }) ==
        "[adamw] needs at least one parameter group");
  optim::AdamW adamw({{{w}, {}}, {{b}, {}}}, config);
  CHECK(message_of([&] { adamw.set_lr(std::nan("")); }) == "[adamw] lr must be a finite number >= 0, got nan");
  adamw.group(1).beta2 = 1.0;
  give_gradients(g, {{w, {1, 1, 1, 1}}, {b, {1, 1}}});
  CHECK(message_of([&] { adamw.step(); }) == "[adamw] group 1: beta2 must be in [0, 1), got 1");
  CHECK(w.value().to_doubles() == std::vector<double>{0, 0, 0, 0});  // refused before anything moved
  CHECK(adamw.step_count() == 0);
}
