// Tests for the optimizers' named state (src/optim/state.*, AdamW and SGD state_tensors and
// load_state; SparseAdamW's): a save and load resumes a run bit for bit, and every refusal names the tensor and
// leaves the optimizer as it was.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "gradients.hpp"
#include "messages.hpp"
#include "tapegrad/optim/adamw.hpp"
#include "tapegrad/optim/sgd.hpp"
#include "tapegrad/optim/sparse.hpp"

using namespace tapegrad;
using testing::give_gradients;
using testing::message_of;

namespace {

bool same_bytes(const Tensor& a, const Tensor& b) {
  const Tensor x = a.to(Device::cpu()), y = b.to(Device::cpu());
  return x.dtype() == y.dtype() && x.shape() == y.shape() && std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) == 0;
}

void check_same_state(const optim::NamedTensors& a, const optim::NamedTensors& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CAPTURE(a[i].first);
    CHECK(a[i].first == b[i].first);
    CHECK(same_bytes(a[i].second, b[i].second));
  }
}

std::vector<std::string> names(const optim::NamedTensors& state) {
  std::vector<std::string> out;
  for (const auto& [name, t] : state) out.push_back(name);
  return out;
}

// A model of three parameters (an f32 matrix, an f64 matrix, an f32 vector) and its gradients at step t.
struct Model {
  Graph g;
  Var a, b, c;
  Model() {
    a = g.parameter(Tensor::from_doubles({0.5, -1.0, 2.0, 0.25, 1.5, -0.75}, Shape{2, 3}, DType::f32), "a");
    b = g.parameter(Tensor::from_doubles({1.0, 2.0, -3.0, 4.0}, Shape{2, 2}, DType::f64), "b");
    c = g.parameter(Tensor::from_doubles({0.1, -0.2, 0.3}, Shape{3}, DType::f32), "c");
  }
  void gradients(int t, bool with_c = true) {
    auto wave = [&](size_t n, double phase) {
      std::vector<double> v(n);
      for (size_t i = 0; i < n; ++i) v[i] = std::sin(phase + 0.9 * static_cast<double>(i) + 1.3 * t);
      return v;
    };
    if (with_c) give_gradients(g, {{a, wave(6, 0.0)}, {b, wave(4, 1.0)}, {c, wave(3, 2.0)}});
    else give_gradients(g, {{a, wave(6, 0.0)}, {b, wave(4, 1.0)}});
  }
  std::vector<Var> params() const { return {a, b, c}; }
  void copy_values_from(const Model& other) {  // the model's half of a checkpoint
    for (size_t k = 0; k < 3; ++k) {
      Tensor value = params()[k].value();
      value.copy_from(other.params()[k].value());
    }
  }
};

optim::AdamW make_adamw(const Model& m) {
  return optim::AdamW(optim::decay_groups(m.params(), 0.1), {.lr = 0.01, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8});
}

}  // namespace

TEST_CASE("AdamW's state saved and loaded into a fresh optimizer resumes the run bit for bit") {
  Model first, second;  // the same initial values
  optim::AdamW adamw = make_adamw(first);
  for (int t = 0; t < 3; ++t) {
    first.gradients(t, /*with_c=*/t != 1);  // c skips a step: its own count differs
    adamw.set_lr(0.01 * (t + 1));
    adamw.step();
  }
  const optim::NamedTensors saved = adamw.state_tensors();
  CHECK(names(saved) == std::vector<std::string>{
                            "adamw.step", "adamw.group.0.params", "adamw.group.0.lr", "adamw.group.0.beta1",
                            "adamw.group.0.beta2", "adamw.group.0.eps", "adamw.group.0.weight_decay",
                            "adamw.group.1.params", "adamw.group.1.lr", "adamw.group.1.beta1", "adamw.group.1.beta2",
                            "adamw.group.1.eps", "adamw.group.1.weight_decay", "adamw.step.0", "adamw.m.0",
                            "adamw.v.0", "adamw.step.1", "adamw.m.1", "adamw.v.1", "adamw.step.2", "adamw.m.2",
                            "adamw.v.2"});
  second.copy_values_from(first);  // the second model takes the first's parameters, then the state
  optim::AdamW resumed = make_adamw(second);
  resumed.load_state(saved);
  check_same_state(resumed.state_tensors(), saved);
  CHECK(resumed.lr() == 0.03);
  CHECK(resumed.step_count() == 3);
  CHECK(resumed.step_count(2) == 2);
  for (int t = 3; t < 6; ++t) {
    first.gradients(t);
    second.gradients(t);
    adamw.step();
    resumed.step();
  }
  check_same_state(resumed.state_tensors(), adamw.state_tensors());
  for (size_t k = 0; k < 3; ++k) CHECK(same_bytes(first.params()[k].value(), second.params()[k].value()));
}

TEST_CASE("SGD's state, momentum buffers where they exist, resumes the run bit for bit") {
  Model first, second;
  auto make = [](const Model& m) {
    return optim::SGD({{{m.a, m.b}, {}}, {{m.c}, {.weight_decay = 0.0, .momentum = 0.0}}},
                      {.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01});
  };
  optim::SGD sgd = make(first);
  for (int t = 0; t < 3; ++t) {
    first.gradients(t);
    sgd.step();
  }
  const optim::NamedTensors saved = sgd.state_tensors();
  CHECK(names(saved) == std::vector<std::string>{
                            "sgd.group.0.params", "sgd.group.0.lr", "sgd.group.0.momentum", "sgd.group.0.dampening",
                            "sgd.group.0.weight_decay", "sgd.group.0.nesterov", "sgd.group.1.params",
                            "sgd.group.1.lr", "sgd.group.1.momentum", "sgd.group.1.dampening",
                            "sgd.group.1.weight_decay", "sgd.group.1.nesterov", "sgd.step.0",
                            "sgd.momentum_buffer.0", "sgd.step.1", "sgd.momentum_buffer.1", "sgd.step.2"});
  second.copy_values_from(first);
  optim::SGD resumed = make(second);
  resumed.load_state(saved);
  check_same_state(resumed.state_tensors(), saved);
  for (int t = 3; t < 6; ++t) {
    first.gradients(t);
    second.gradients(t);
    sgd.step();
    resumed.step();
  }
  check_same_state(resumed.state_tensors(), sgd.state_tensors());
  for (size_t k = 0; k < 3; ++k) CHECK(same_bytes(first.params()[k].value(), second.params()[k].value()));
}

TEST_CASE("load_state refuses a missing, extra, doubled or mis-shaped tensor by name and changes nothing") {
  Model m;
  optim::AdamW adamw = make_adamw(m);
  m.gradients(0);
  adamw.step();
  const optim::NamedTensors good = adamw.state_tensors();
  Model other;
  optim::AdamW target = make_adamw(other);
  const optim::NamedTensors before = target.state_tensors();
  auto without = [&](const std::string& name) {
    optim::NamedTensors s;
    for (const auto& entry : good)
      if (entry.first != name) s.push_back(entry);
    return s;
  };
  auto replaced = [&](const std::string& name, Tensor t) {
    optim::NamedTensors s = good;
    for (auto& entry : s)
      if (entry.first == name) entry.second = t;
    return s;
  };
  auto refusal = [&](const optim::NamedTensors& s) { return message_of([&] { target.load_state(s); }); };

  CHECK(refusal(without("adamw.v.1")) == "[adamw] load_state: no tensor 'adamw.v.1'");
  CHECK(refusal(without("adamw.step")) == "[adamw] load_state: no tensor 'adamw.step'");
  optim::NamedTensors extra = good;
  extra.emplace_back("adamw.m.3", Tensor::zeros(Shape{3}, DType::f32));
  CHECK(refusal(extra) == "[adamw] load_state: 'adamw.m.3' is not part of this optimizer's state");
  optim::NamedTensors twice = good;
  twice.push_back(good[14]);
  CHECK(refusal(twice) == "[adamw] load_state: '" + good[14].first + "' is given twice");
  CHECK(refusal(replaced("adamw.m.0", Tensor::zeros(Shape{3, 2}, DType::f32))) ==
        "[adamw] load_state: 'adamw.m.0' is (3, 2) f32; this optimizer's is (2, 3) f32");
  CHECK(refusal(replaced("adamw.v.1", Tensor::zeros(Shape{2, 2}, DType::f32))) ==
        "[adamw] load_state: 'adamw.v.1' is (2, 2) f32; this optimizer's is (2, 2) f64");
  CHECK(refusal(replaced("adamw.step.2", optim::real_tensor(1.0))) ==
        "[adamw] load_state: 'adamw.step.2' is () f64; this optimizer's is () i64");
  CHECK(refusal(replaced("adamw.step", Tensor::from_vector(std::vector<int64_t>{-2}, Shape{}))) ==
        "[adamw] load_state: 'adamw.step' is -2; a count is >= 0");
  CHECK(refusal(replaced("adamw.group.1.params", optim::index_tensor({1, 2}))) ==
        "[adamw] load_state: 'adamw.group.1.params' is (2,) i64; this optimizer's is (1,) i64");
  CHECK(refusal(replaced("adamw.group.0.params", optim::index_tensor({1, 0}))) ==
        "[adamw] load_state: 'adamw.group.0.params' lists parameters (1, 0); this optimizer's group 0 has (0, 1)");
  CHECK(refusal(replaced("adamw.group.1.beta1", optim::real_tensor(1.5))) ==
        "[adamw] load_state: group 1: beta1 must be in [0, 1), got 1.5");
  check_same_state(target.state_tensors(), before);  // every refusal left it alone

  optim::SGD sgd({m.a}, {.lr = 0.1, .momentum = 0.5});
  optim::NamedTensors sgd_state = sgd.state_tensors();
  sgd_state.emplace_back("sgd.momentum_buffer.0", Tensor::zeros(Shape{6}, DType::f32));
  CHECK(message_of([&] { sgd.load_state(sgd_state); }) ==
        "[sgd] load_state: 'sgd.momentum_buffer.0' is (6,) f32; this optimizer's is (2, 3) f32");
  sgd_state.back().second = Tensor::zeros(Shape{2, 3}, DType::f32);
  sgd_state[5].second = optim::real_tensor(0.5);  // sgd.group.0.nesterov
  CHECK(message_of([&] { sgd.load_state(sgd_state); }) ==
        "[sgd] load_state: 'sgd.group.0.nesterov' is 0.5; it is 0 or 1");
  CHECK_FALSE(sgd.momentum_buffer(0).defined());
}

// SparseAdamW's state (src/optim/sparse.hpp): its step and moments back bit for bit after some
// updates, so the next update gives the same table; every refusal by name, nothing changed.
TEST_CASE("SparseAdamW's state round-trips bit for bit and refuses a bad tensor by name") {
  const Shape table_shape{2 * 5, 3};  // 2 planes of (5, 3)
  std::vector<float> values(30);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.1f * static_cast<float>(i) - 1.0f;
  auto pulled_rows = [](int step) {
    ops::PulledRows p;
    p.rows = Tensor::from_vector(std::vector<int64_t>{1, 3 + step % 2, 6, 8}, Shape{4});
    std::vector<float> g(12);
    for (size_t i = 0; i < g.size(); ++i) g[i] = 0.01f * static_cast<float>(i + 1) * (step % 2 ? -1.0f : 1.0f);
    p.grad = Tensor::from_vector(g, Shape{4, 3});
    return p;
  };
  Tensor a = Tensor::from_vector(values, table_shape), b = a.clone();
  optim::SparseAdamW first(a, {.lr = 0.01, .weight_decay = 0.0});
  for (int s = 0; s < 3; ++s) first.step(a, pulled_rows(s));
  const optim::NamedTensors saved = first.state_tensors();
  REQUIRE(saved.size() == 3);
  CHECK(saved[0].first == "sparse_adamw.step");

  optim::SparseAdamW second(b, {.lr = 0.01, .weight_decay = 0.0});
  b.copy_from(a);
  second.load_state(saved);
  check_same_state(second.state_tensors(), saved);
  first.step(a, pulled_rows(3));
  second.step(b, pulled_rows(3));
  CHECK(same_bytes(a, b));

  optim::SparseAdamW target(Tensor::from_vector(values, table_shape), {.weight_decay = 0.0});
  const optim::NamedTensors before = target.state_tensors();
  optim::NamedTensors missing(saved.begin(), saved.begin() + 2);
  CHECK(message_of([&] { target.load_state(missing); }) == "[sparse_adamw] load_state: no tensor 'sparse_adamw.v'");
  optim::NamedTensors misshaped = saved;
  misshaped[1].second = Tensor::zeros(Shape{5, 3}, DType::f32);
  CHECK(message_of([&] { target.load_state(misshaped); }) ==
        "[sparse_adamw] load_state: 'sparse_adamw.m' is (5, 3) f32; this optimizer's is (10, 3) f32");
  optim::NamedTensors extra = saved;
  extra.emplace_back("adamw.step", optim::count_tensor(1));
  CHECK(message_of([&] { target.load_state(extra); }) ==
        "[sparse_adamw] load_state: 'adamw.step' is not part of this optimizer's state");
  check_same_state(target.state_tensors(), before);
  CHECK(target.step_count() == 0);
}
