// Engine semantics: fan-out accumulation, the overwrite-bug mode in both places contributions
// meet, no-grad, gradient shape validation, freed tapes, clear/rewind, the event record, saved
// versions, graph liveness, row-sparse gradients.
#include <doctest/doctest.h>

#include <cmath>
#include <span>
#include <tuple>
#include <type_traits>
#include <utility>

#include "messages.hpp"
#include "tapegrad/graph/function.hpp"
#include "tapegrad/graph/gradcheck.hpp"
#include "tapegrad/graph/graph.hpp"
#include "tapegrad/tape/tape_dump.hpp"
#include "tapegrad/io/json.hpp"
#include "tapegrad/kernels/kernels.hpp"
#include "tapegrad/ops/ops.hpp"

using namespace tapegrad;

namespace {

Tensor f64(std::vector<double> v, Shape s) { return Tensor::from_doubles(v, s, DType::f64); }
Tensor i32(std::vector<int32_t> v) { return Tensor::from_vector(v, Shape{static_cast<int64_t>(v.size())}); }
std::vector<double> grad_of(Var v) { return v.grad().to_doubles(); }

}  // namespace

TEST_CASE("a value used twice accumulates both contributions") {
  Graph g;
  Var a = g.parameter(f64({1.5, -2.0}, Shape{2}));
  Var y = ops::sum(ops::add(ops::mul(a, a), a));  // d/da (a^2 + a) = 2a + 1
  g.backward(y);
  CHECK(grad_of(a) == std::vector<double>{4.0, -3.0});
}

TEST_CASE("free_activation_grads drops each activation's gradient after its node, parameters' stay the same") {
  auto run = [](bool free, BackwardRecord* record) {
    Graph g;
    Var a = g.parameter(f64({1.5, -2.0, 0.25}, Shape{3}));
    Var h = ops::mul(a, a);                 // fans out to two consumers
    Var y = ops::sum(ops::add(ops::exp(h), ops::mul(h, a)));
    g.backward(y, {.record = record, .free_activation_grads = free});
    return std::make_tuple(grad_of(a), h.grad().defined(), y.grad().defined());
  };
  const auto [kept, kept_h, kept_y] = run(false, nullptr);
  const auto [freed, freed_h, freed_y] = run(true, nullptr);
  CHECK(freed == kept);
  CHECK(kept_h);
  CHECK(kept_y);
  CHECK_FALSE(freed_h);
  CHECK_FALSE(freed_y);
  BackwardRecord record;  // recording keeps them: the record's readers want every gradient
  const auto [recorded, recorded_h, recorded_y] = run(true, &record);
  CHECK(recorded == kept);
  CHECK(recorded_h);
}

TEST_CASE("overwrite-bug mode: the last contribution to a fanned-out value wins") {
  Graph g;
  Var a = g.parameter(f64({1.5, -2.0}, Shape{2}));
  // a feeds mul (twice) and add: contributions arrive add's first (tape is walked backward).
  Var y = ops::sum(ops::add(ops::mul(a, a), a));
  BackwardRecord record;
  g.backward(y, {.overwrite_bug = true, .record = &record});
  // add gives a: 1 (set), then mul gives a: a (overwrites 1), then a again (overwrites a).
  CHECK(grad_of(a) == std::vector<double>{1.5, -2.0});
  int overwritten = 0;
  for (const GradEvent& e : record.events)
    if (e.kind == GradEvent::Kind::overwritten) ++overwritten;
  CHECK(overwritten == 2);
}

TEST_CASE("gather: repeated ids add their rows; the overwrite-bug mode keeps the last") {
  Graph g;
  Var table = g.parameter(f64({1, 2, 3, 4, 5, 6}, Shape{3, 2}));
  auto loss = [&](Graph& gr) {
    Var rows = ops::gather(table, gr.input(i32({0, 2, 0})));  // (3, 2)
    Var w = gr.input(f64({1, 2, 3, 4, 5, 6}, Shape{3, 2}));
    return ops::sum(ops::mul(rows, w));
  };
  g.backward(loss(g));
  CHECK(grad_of(table) == std::vector<double>{1 + 5, 2 + 6, 0, 0, 3, 4});

  g.clear();
  g.zero_grad();
  BackwardRecord record;
  g.backward(loss(g), {.overwrite_bug = true, .record = &record});
  CHECK(grad_of(table) == std::vector<double>{5, 6, 0, 0, 3, 4});
  // per-row events: row 0 set, row 2 set, row 0 overwritten with (1, 2) discarded
  REQUIRE(record.events.size() >= 3);
  const GradEvent& last = record.events.back();
  CHECK(last.row == 0);
  CHECK(last.kind == GradEvent::Kind::overwritten);
  CHECK(last.discarded.to_doubles() == std::vector<double>{1, 2});
  CHECK(last.contribution.to_doubles() == std::vector<double>{5, 6});
}

TEST_CASE("reductions inside one op's backward stay sums in the overwrite-bug mode") {
  Graph g;
  Var b = g.parameter(f64({0, 0}, Shape{2}));
  Var x = g.input(f64({1, 2, 3, 4, 5, 6}, Shape{3, 2}));
  g.backward(ops::sum(ops::add_row(x, b)), {.overwrite_bug = true});
  CHECK(grad_of(b) == std::vector<double>{3, 3});  // column sums over 3 rows
}

TEST_CASE("no-grad scope records nothing, and backward through it is refused") {
  Graph g;
  Var a = g.parameter(f64({1, 2}, Shape{2}));
  Var y;
  {
    NoGrad no_grad(g);
    y = ops::sum(ops::mul(a, a));
  }
  CHECK(g.nodes().empty());
  CHECK(y.value().item() == 5.0);
  CHECK_THROWS_WITH_AS(g.backward(y), doctest::Contains("does not depend on any parameter"), Error);
  CHECK(g.grad_enabled());
}

TEST_CASE("a gradient of the wrong shape is refused with the op named") {
  Graph g;
  Var a = g.parameter(f64({1, 2, 3}, Shape{3}));
  Var y = g.record("broken_op", f64({6}, Shape{}), {a}, [](BackwardContext& ctx) {
    ctx.accumulate(0, Tensor::from_doubles({1, 1}, Shape{2}, DType::f64));
  });
  CHECK_THROWS_WITH_AS(g.backward(y),
                       "[engine] the backward of broken_op gave input 0 a gradient of shape (2,) f64 on cpu, "
                       "but that input is (3,) f64 on cpu",
                       Error);
}

TEST_CASE("a non-scalar backward is refused with a hint") {
  Graph g;
  Var a = g.parameter(f64({1, 2, 3, 4}, Shape{2, 2}));
  CHECK_THROWS_WITH_AS(g.backward(ops::exp(a)),
                       "[backward] needs a scalar loss, got shape (2, 2); reduce it first, e.g. ops::mean(x) or "
                       "ops::sum(x)",
                       Error);
}

TEST_CASE("a second backward over a freed tape is refused by node; retain_graph keeps it") {
  Graph g;
  Var a = g.parameter(f64({3}, Shape{1}));
  Var y = ops::sum(ops::mul(a, a));
  g.backward(y, {.retain_graph = true});
  g.backward(y);  // parameter gradients accumulate across backward calls: 6 + 6
  CHECK(grad_of(a) == std::vector<double>{12});
  CHECK(g.tape_freed());
  CHECK_THROWS_WITH_AS(g.backward(y),
                       "[backward] this backward reaches node 1 (sum, value 1), which an earlier backward() ran and "
                       "freed; pass {.retain_graph = true} to that backward() to run through it again",
                       Error);
  CHECK(grad_of(a) == std::vector<double>{12});  // refused before any gradient moved
  g.zero_grad();
  CHECK_FALSE(a.grad().defined());
}

TEST_CASE("ops recorded after backward() get nodes of their own; the freed part stays refused by name") {
  Graph g;
  Var a = g.parameter(f64({3}, Shape{1}), "a");
  Var h = ops::mul(a, a);         // node 0
  Var loss = ops::sum(h);         // node 1
  g.backward(loss);
  CHECK(grad_of(a) == std::vector<double>{6});
  // as PyTorch: the loss and the parameters stay usable without clear()
  Var doubled = loss * 2.0;       // node 2, from the freed loss
  CHECK(doubled.item() == 18);
  Var next = ops::sum(ops::exp(a * 0.5));  // the next micro-batch: nodes 3 to 5
  g.backward(next);               // its own nodes run; a's gradient accumulates
  CHECK(grad_of(a)[0] == 6 + 0.5 * std::exp(1.5));
  CHECK_THROWS_WITH_AS(g.backward(doubled),  // through the loss's node, which the first backward freed
                       "[backward] this backward reaches node 1 (sum, value 1), which an earlier backward() ran and "
                       "freed; pass {.retain_graph = true} to that backward() to run through it again",
                       Error);
  CHECK_THROWS_WITH_AS(g.backward(next),
                       "[backward] this backward reaches node 5 (sum, value 5), which an earlier backward() ran and "
                       "freed; pass {.retain_graph = true} to that backward() to run through it again",
                       Error);
  Var again = ops::sum(h * 3.0);  // h's node was freed too: a path through it is refused
  CHECK_THROWS_WITH_AS(g.backward(again),
                       "[backward] this backward reaches node 0 (mul, value 0), which an earlier backward() ran and "
                       "freed; pass {.retain_graph = true} to that backward() to run through it again",
                       Error);
  g.clear();  // the next step: nothing freed
  CHECK_FALSE(g.tape_freed());
  g.backward(ops::sum(ops::mul(a, a)));
}

TEST_CASE("clear() keeps parameters and refuses stale activation handles") {
  Graph g;
  Var a = g.parameter(f64({1, 2}, Shape{2}), "a");
  Var y = ops::exp(a);
  g.clear();
  CHECK(g.nodes().empty());
  CHECK(a.value().to_doubles() == std::vector<double>{1, 2});
  CHECK(a.label() == "a");
  CHECK_THROWS_WITH_AS(y.value(), doctest::Contains("dropped by clear() or rewind()"), Error);
  Var z = ops::exp(a);  // the id y had is reused; y stays stale
  CHECK_THROWS_AS(y.value(), Error);
  CHECK(z.value().numel() == 2);
}

TEST_CASE("rewind drops what was recorded after the mark") {
  Graph g;
  Var a = g.parameter(f64({1}, Shape{1}));
  Var keep = ops::exp(a);
  size_t mark = g.mark();
  ops::exp(ops::exp(a));
  CHECK(g.nodes().size() == 3);
  g.rewind(mark);
  CHECK(g.nodes().size() == 1);
  CHECK(keep.value().numel() == 1);
}

TEST_CASE("inputs take no gradient; parameters must be floating point") {
  Graph g;
  Var x = g.input(f64({1, 2}, Shape{2}));
  Var a = g.parameter(f64({3, 4}, Shape{2}));
  g.backward(ops::sum(ops::mul(x, a)));
  CHECK_FALSE(x.grad().defined());
  CHECK(grad_of(a) == std::vector<double>{1, 2});
  CHECK_THROWS_WITH_AS(g.parameter(i32({1})), "[parameter] parameters must be floating point, got i32", Error);
}

TEST_CASE("the backward record lists visits in reverse record order") {
  Graph g;
  Var a = g.parameter(f64({0.5}, Shape{1}));
  Var y = ops::sum(ops::tanh(ops::exp(a)));
  BackwardRecord r;
  g.backward(y, {.record = &r});
  CHECK(r.visits == std::vector<int32_t>{2, 1, 0});
  CHECK(r.events.size() == 3);
  CHECK(r.events[0].kind == GradEvent::Kind::set);
}

TEST_CASE("gradcheck leaves the tape and the parameters as it found them") {
  Graph g;
  Var a = g.parameter(f64({0.3, -0.7}, Shape{2}));
  auto loss = [&](Graph&) { return ops::sum(ops::tanh(ops::mul(a, a))); };
  Var before = ops::exp(a);
  Var kept = ops::sum(before);
  size_t nodes = g.nodes().size();
  const GradcheckResult check = gradcheck(g, loss);
  CHECK(check.passed());
  CHECK(check.max_error() < 1e-8);
  CHECK(g.nodes().size() == nodes);
  CHECK(before.value().numel() == 2);
  CHECK(a.value().to_doubles() == std::vector<double>{0.3, -0.7});
  g.zero_grad();
  g.backward(kept);  // the nudges were put back: the tape recorded before runs
  CHECK(grad_of(a) == std::vector<double>{std::exp(0.3), std::exp(-0.7)});
}

namespace {

// y = x^2 with a wrong derivative at element 1: dx = 2 x dy, plus dy at element 1
struct WrongSquare {
  static constexpr const char* name = "wrong_square";
  static Tensor forward(const std::vector<Tensor>& in, Saved&) {
    const std::vector<double> x = in[0].to_doubles();
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * x[i];
    return Tensor::from_doubles(y, in[0].shape(), DType::f64);
  }
  static void backward(BackwardContext& ctx) {
    const std::vector<double> x = ctx.input(0).to_doubles(), dy = ctx.grad_output().to_doubles();
    std::vector<double> dx(x.size());
    for (size_t i = 0; i < x.size(); ++i) dx[i] = 2 * x[i] * dy[i] + (i == 1 ? dy[i] : 0.0);
    ctx.accumulate(0, Tensor::from_doubles(dx, ctx.input(0).shape(), DType::f64));
  }
};

}  // namespace

TEST_CASE("gradcheck reports per tensor the failing elements and the worst analytic/numeric pair") {
  Graph g;
  Var w = g.parameter(f64({1, 2, 3, 4}, Shape{2, 2}), "w");
  Var b = g.parameter(f64({0.5, -1.5}, Shape{2}), "b");
  // eps 0.5 and small dyadic values: central differences of a square are exact, 2x
  auto loss = [&](Graph&) { return ops::sum(apply<WrongSquare>({w})) + ops::sum(ops::square(b)); };
  const GradcheckResult check = gradcheck(g, loss, GradcheckOptions{.eps = 0.5});
  CHECK_FALSE(check.passed());
  REQUIRE(check.tensors.size() == 2);
  CHECK(check.tensors[0].worst == 1);
  CHECK(check.tensors[0].analytic == 5);
  CHECK(check.tensors[0].numeric == 4);
  CHECK(check.max_error() == 1);
  CHECK(check.str() ==
        "gradcheck FAILED: 2 tensors, eps 0.5, atol 1e-05, rtol 0.001\n"
        "  w (2, 2): worst at [0, 1]: analytic 5 numeric 4 (|difference| 1); 1 of 4 elements outside atol + rtol "
        "|numeric|\n"
        "  b (2,): worst at [0]: analytic 1 numeric 1 (|difference| 0)\n");
}

TEST_CASE("gradcheck takes inputs that require a gradient beside parameters, and refuses f32 and the rest by name") {
  Graph g;
  Var w = g.parameter(f64({0.3, -0.7, 1.1}, Shape{3}), "w");
  Var x = g.input(f64({0.2, 0.5, -0.4}, Shape{3}), "x", true);
  auto loss = [&](Graph&) { return ops::sum(ops::tanh(ops::mul(w, x)) * x); };
  const GradcheckResult check = gradcheck(g, loss, {w, x});
  CAPTURE(check.str());
  CHECK(check.passed());
  REQUIRE(check.tensors.size() == 2);
  CHECK(check.tensors[1].name == "x");
  CHECK(check.max_error() < 1e-8);
  // x's gradient from the engine, as PyTorch's x.grad after x.requires_grad_()
  g.backward(loss(g), {.retain_graph = true});
  CHECK(x.grad().defined());

  Var plain = g.input(f64({1}, Shape{1}), "plain");
  CHECK(testing::message_of([&] { gradcheck(g, loss, {plain}); }) ==
        "[gradcheck] 'plain' (input) takes no gradient: check parameters, or inputs made with "
        "g.input(tensor, label, true)");
  Var product = ops::mul(w, x);
  CHECK(testing::message_of([&] { gradcheck(g, loss, {product}); }) ==
        "[gradcheck] 'value 6' (activation) is an op's result, which the loss function records anew: check the "
        "parameters or inputs it is computed from");
  CHECK(testing::message_of([&] { g.input(Tensor::from_vector(std::vector<int32_t>{1}, Shape{1}), "ids", true); }) ==
        "[input] only a floating-point input can require a gradient, got i32");
  Graph g32;
  Var w32 = g32.parameter(Tensor::from_doubles({0.3}, Shape{1}, DType::f32), "w");
  CHECK(testing::message_of([&] { gradcheck(g32, [&](Graph&) { return ops::sum(ops::square(w32)); }); }) ==
        "[gradcheck] 'w' (parameter) is f32: central differences need f64 (in f32 a nudge of 1e-6 is a few rounding "
        "steps, so the check would measure rounding); build the model in f64, as torch.autograd.gradcheck asks for "
        "double");
}

TEST_CASE("a reference taken from value() stays valid while later values are recorded") {
  Graph g;
  Var a = g.parameter(Tensor::from_doubles({1, 2}, Shape{2}, DType::f64));
  Var x = ops::exp(a);
  const Tensor& held = x.value();  // ops do this: take the input, then record the output
  const void* bytes = held.raw_data();
  for (int i = 0; i < 2000; ++i) ops::exp(a);  // several chunks' worth of values
  CHECK(held.raw_data() == bytes);
  CHECK(held.shape() == Shape{2});
}

TEST_CASE("cross_entropy's backward writes over its saved log-probabilities only when nothing else needs them") {
  struct Run {
    Graph g;
    Var table, logits, loss;
    Run() {
      table = g.parameter(Tensor::from_vector(
          std::vector<float>{0.5f, -1.0f, 2.0f, 0.25f, -0.5f, 1.5f, 3.0f, 0.0f, -2.0f, 1.0f, 1.0f, 0.75f}, Shape{4, 3}));
      logits = ops::gather(table, g.input(i32({1, 0, 3, 2})));  // distinct rows: (B, V) probabilities, no map
      loss = ops::cross_entropy(logits, g.input(i32({2, 0, 1, 2})));
    }
    const Tensor& probs() { return g.nodes().back().saved[0]; }
  };
  Run plain;  // the tape is freed after the pass: the log-probabilities' buffer becomes dlogits
  REQUIRE(plain.probs().shape() == Shape{4, 3});
  CHECK(plain.g.nodes().back().saved[1].shape() == Shape{});  // the mean's divisor, the rows counted
  const void* probs_bytes = plain.probs().raw_data();
  plain.g.backward(plain.loss);
  CHECK(plain.logits.grad().raw_data() == probs_bytes);
  const std::vector<double> want = grad_of(plain.table);

  Run retained;  // retain_graph: a later pass reads the probabilities again
  const std::vector<double> probs_before = retained.probs().to_doubles();
  retained.g.backward(retained.loss, {.retain_graph = true});
  CHECK(retained.probs().to_doubles() == probs_before);
  CHECK(retained.logits.grad().raw_data() != retained.probs().raw_data());
  CHECK(grad_of(retained.table) == want);

  Run shared;  // another handle shares the probabilities' bytes
  const Tensor handle = shared.probs();
  shared.g.backward(shared.loss);
  CHECK(handle.to_doubles() == probs_before);
  CHECK(grad_of(shared.table) == want);
}

// Note [adding into a gradient]: a custom op y = x whose backward adds dy into x's gradient itself
// when the engine offers it, else hands dy to accumulate; g_added says which it did.
bool g_added = false;
Var identity_adding(Var x) {
  return x.graph().record("identity_adding", x.value().clone(), {x}, [](BackwardContext& ctx) {
    Tensor into = ctx.gradient_to_add_into(0);
    g_added = into.defined();
    if (!into.defined()) return ctx.accumulate(0, ctx.grad_output());
    kernels::binary(kernels::Binary::add, into, ctx.grad_output(), into);
    ctx.added_into(0);
  });
}

TEST_CASE("a backward may add into a gradient in place: only where accumulate would give the same, unseen") {
  // h = a * a feeds identity_adding (recorded first, so its backward runs last) and h * 3:
  // d/da sum(h + 3 h) = 8 a
  auto run = [](BackwardOptions options, bool hold_other) {
    Graph g;
    Var a = g.parameter(f64({1.5, -2.0, 0.25}, Shape{3}));
    Var h = ops::mul(a, a);
    g_added = false;
    Var y = identity_adding(h);
    Var other = hold_other ? ops::add(h, g.input(f64({0, 0, 0}, Shape{3}))) : h * 3.0;
    g.backward(ops::add(ops::sum(y), ops::sum(other)), options);
    return std::make_pair(grad_of(a), g_added);
  };
  const auto [plain, plain_added] = run({}, false);
  CHECK(plain == std::vector<double>{12.0, -16.0, 2.0});
  CHECK(plain_added);  // h's gradient (3 dy, made by mul's backward) is h's alone
  BackwardRecord record;
  const auto [recorded, recorded_added] = run({.record = &record}, false);
  CHECK(recorded == plain);
  CHECK_FALSE(recorded_added);  // a record sees each contribution arrive
  const auto [overwritten, overwritten_added] = run({.overwrite_bug = true}, false);
  // identity's dy written over 3 dy, then a * a's two contributions, the second over the first: a
  CHECK(overwritten == std::vector<double>{1.5, -2.0, 0.25});
  CHECK_FALSE(overwritten_added);
  // add's backward hands h the very tensor it got, which its output's gradient still holds
  const auto [shared, shared_added] = run({}, true);
  CHECK(shared == std::vector<double>{6.0, -8.0, 1.0});
  CHECK_FALSE(shared_added);
  const auto [freed, freed_added] = run({.free_activation_grads = true}, true);  // dropped: h's alone again
  CHECK(freed == shared);
  CHECK(freed_added);
}

// ---- wrong answers the old engine's fast paths gave (each checked against PyTorch)

TEST_CASE("a table's gradient edited in place does not leak into the next step (PyTorch: [0 0 | 1 1 | 0 0 | 0 0])") {
  Graph g;
  Var table = g.parameter(f64({1, 2, 3, 4, 5, 6, 7, 8}, Shape{4, 2}));
  auto step = [&](std::vector<int32_t> ids) {
    g.clear();
    g.zero_grad();
    g.backward(ops::sum(ops::gather(table, g.input(i32(ids)))));
  };
  step({0, 2, 3});
  Tensor grad = table.grad();
  for (double& x : std::span(grad.mutable_data<double>(), 8)) x += 0.5;  // what a clipping or scaling user does
  step({1});
  CHECK(grad_of(table) == std::vector<double>{0, 0, 1, 1, 0, 0, 0, 0});
}

TEST_CASE("two parameters' gradients never share bytes (add hands one tensor to both)") {
  Graph g;
  Var p1 = g.parameter(f64({1, 2}, Shape{2})), p2 = g.parameter(f64({3, 4}, Shape{2}));
  g.backward(ops::sum(ops::add(p1, p2)));
  CHECK(p1.grad().raw_data() != p2.grad().raw_data());
  Tensor g1 = p1.grad();
  g1.mutable_data<double>()[0] = 10;
  CHECK(grad_of(p2) == std::vector<double>{1, 1});
}

TEST_CASE("a parameter written in place between forward and backward is refused by name") {
  Graph g;
  Var w = g.parameter(f64({3}, Shape{1}), "w");
  Var y = ops::sum(ops::mul(w, w));  // dy/dw = 2w = 6 at the forward's w
  Tensor value = w.value();
  value.copy_from(f64({6}, Shape{1}));  // a silently wrong 12 if the backward read it
  CHECK_THROWS_WITH_AS(g.backward(y),
                       "[mul] input 0 (value -1, 'w', parameter) was modified in place after it was recorded "
                       "(version 0, now 1); its backward would compute a wrong gradient. Write it before the "
                       "forward pass, or after backward()",
                       Error);
  g.clear();  // a fresh forward reads the new value
  g.backward(ops::sum(ops::mul(w, w)));
  CHECK(grad_of(w) == std::vector<double>{12});
}

// data<T>() reads (const T*, through any handle); a write goes through mutable_data<T>(), which
// moves the version, so the engine catches it as it catches copy_from (issue 37: a write through
// data<T>() once gave dw = 200 where 6 is right, without a word).
static_assert(std::is_same_v<decltype(std::declval<Tensor&>().data<double>()), const double*>);
static_assert(std::is_same_v<decltype(std::declval<const Tensor&>().data<float>()), const float*>);
static_assert(std::is_same_v<decltype(std::declval<Tensor&>().mutable_data<double>()), double*>);

TEST_CASE("a parameter written through mutable_data between forward and backward is refused by name") {
  Graph g;
  Var w = g.parameter(f64({3}, Shape{1}), "w");
  Var y = ops::sum(ops::mul(w, w));  // dy/dw = 2w = 6 at the forward's w
  Tensor value = w.value();
  value.mutable_data<double>()[0] = 100;  // a silently wrong 200 if the backward read it
  CHECK_THROWS_WITH_AS(g.backward(y),
                       "[mul] input 0 (value -1, 'w', parameter) was modified in place after it was recorded "
                       "(version 0, now 1); its backward would compute a wrong gradient. Write it before the "
                       "forward pass, or after backward()",
                       Error);
}

TEST_CASE("the gradient of a parameter no gradient reached is undefined: its accessors say so, numel() is 0") {
  Graph g;
  Var used = g.parameter(f64({2}, Shape{1}), "used"), unused = g.parameter(f64({5}, Shape{1}), "unused");
  g.backward(ops::sum(ops::mul(used, used)));
  CHECK(grad_of(used) == std::vector<double>{4});
  // a loop over every parameter's gradient, as a logger of gradient norms writes it
  const Tensor& none = unused.grad();
  CHECK_FALSE(none.defined());
  CHECK(none.numel() == 0);
  CHECK(none.nbytes() == 0);
  const std::string hint =
      " of an undefined tensor: it holds no value (a default-constructed Tensor, or the gradient of a value no "
      "gradient reached, such as a parameter the loss did not use or one after zero_grad()); check defined() first";
  CHECK(testing::message_of([&] { (void)unused.grad().item(); }) == "[tensor] item()" + hint);
  CHECK(testing::message_of([&] { (void)unused.grad().to_doubles(); }) == "[tensor] to_doubles()" + hint);
  g.zero_grad();
  CHECK(testing::message_of([&] { (void)used.grad().data<double>(); }) == "[tensor] data" + hint);
  CHECK(testing::message_of([&] { (void)used.grad().shape(); }) == "[tensor] shape()" + hint);
}

TEST_CASE("a Var that outlives its Graph is an error, not a read of freed memory") {
  Var kept;
  {
    Graph g;
    kept = g.parameter(f64({1}, Shape{1}), "w");
    CHECK(kept.value().item() == 1.0);
  }
  Graph other;  // likely at the same address
  CHECK_THROWS_WITH_AS(kept.value(), "[var] value -1 belongs to a Graph that was destroyed; a Var must not outlive its graph",
                       Error);
  CHECK_THROWS_AS(kept.grad(), Error);
}

// ---- row-sparse gradients

TEST_CASE("a row-sparse contribution stays row-sparse until asked for dense, and meets others as bytes") {
  Graph g;
  Var table = g.parameter(f64({1, 2, 3, 4, 5, 6}, Shape{3, 2}), "table");
  auto sparse_op = [](Var t) {
    return t.graph().record("row_op", Tensor::scalar(0.0, DType::f64), {t}, [](BackwardContext& ctx) {
      ctx.accumulate(0, RowSparse{i32({2, 0}), f64({1, -1, 0.5, 0.25}, Shape{2, 2})});
    });
  };
  g.backward(sparse_op(table));
  REQUIRE(table.sparse_grad() != nullptr);
  CHECK(table.sparse_grad()->ids.to_doubles() == std::vector<double>{2, 0});
  CHECK(grad_of(table) == std::vector<double>{0.5, 0.25, 0, 0, 1, -1});  // made dense once
  CHECK(table.sparse_grad() == nullptr);

  g.clear();
  g.zero_grad();
  g.backward(ops::add(sparse_op(table), ops::sum(table)));  // a dense contribution meets it
  CHECK(grad_of(table) == std::vector<double>{1.5, 1.25, 1, 1, 2, 0});

  g.clear();
  CHECK_THROWS_WITH_AS(
      g.backward(table.graph().record("bad_rows", Tensor::scalar(0.0, DType::f64), {table}, [](BackwardContext& ctx) {
        ctx.accumulate(0, RowSparse{i32({0}), f64({1, 2, 3}, Shape{1, 3})});
      })),
      "[engine] the backward of bad_rows gave input 0 row-sparse rows (1, 3) f64 at ids (1,) i32, which do not fit "
      "that input, (3, 2) f64 on cpu",
      Error);
}

TEST_CASE("name scopes: values remember the innermost open scope; clear() keeps only the names still held") {
  Graph g;
  Var w = g.parameter(f64({2.0}, Shape{1}), "w");
  Var x, y, z, loose;
  {
    auto outer = g.scope("enc");
    Var p = g.parameter(f64({3.0}, Shape{1}), "enc.p");  // a parameter made inside a scope keeps it
    x = ops::mul(w, p);
    {
      auto inner = g.scope("enc.layer");  // names do not join: the innermost names what follows
      y = ops::exp(x);
      auto same = g.scope("");            // an empty name keeps the enclosing scope
      z = ops::add(y, x);
    }
    CHECK(p.scope() == "enc");
    CHECK(ops::sum(z).scope() == "enc");  // the inner scopes are closed again
  }
  loose = ops::sum(z);
  CHECK(w.scope() == "");
  CHECK(x.scope() == "enc");
  CHECK(y.scope() == "enc.layer");
  CHECK(z.scope() == "enc.layer");
  CHECK(loose.scope() == "");
  g.backward(loose);  // the backward ignores scopes: d/dw (e^(wp) + wp) = p e^(wp) + p
  CHECK(grad_of(w)[0] == doctest::Approx(3.0 * std::exp(6.0) + 3.0));

  // clear() drops "enc.layer" (held by tape values only) and keeps "enc" (a parameter's), and the
  // name of a scope still open: one table, renumbered, so later values still find their names.
  auto open = g.scope("step");
  g.clear();
  Var p = g.parameters()[1];
  CHECK(p.scope() == "enc");
  Var q = ops::mul(w, p);
  CHECK(q.scope() == "step");
  CHECK(g.value(p.id()).scope == 1);  // the table is now "", "enc", "step"
  CHECK(g.value(q.id()).scope == 2);
  {
    auto again = g.scope("enc.layer");  // interned anew, after the names that survived
    Var e = ops::exp(q);
    CHECK(e.scope() == "enc.layer");
    CHECK(g.value(e.id()).scope == 3);
  }
  CHECK(ops::exp(q).scope() == "step");
}

TEST_CASE("on_gradient_final calls each parameter once its lowest reader has run, with its whole gradient") {
  // w is read by the first op and the last (as a tied embedding is), b by the middle one alone, u
  // by nothing: b is final first, then w (after the first op), then u at the end.
  Graph g;
  Var w = g.parameter(f64({1.0, 2.0}, Shape{2}), "w");
  Var b = g.parameter(f64({0.5, -0.5}, Shape{2}), "b");
  g.parameter(f64({3.0}, Shape{1}), "u");  // read by no node
  Var h = ops::mul(w, w);              // node 0 reads w
  Var k = ops::add(h, b);              // node 1 reads b
  Var loss = ops::sum(ops::mul(k, w));  // node 2 reads w; d/dw = 3w^2 + b, d/db = w
  std::vector<std::string> order;
  std::vector<std::vector<double>> seen;
  g.backward(loss, {.on_gradient_final = [&](const Var& p) {
                      order.push_back(p.label());
                      seen.push_back(p.grad().defined() ? p.grad().to_doubles() : std::vector<double>{});
                    }});
  CHECK(order == std::vector<std::string>{"b", "w", "u"});
  CHECK(seen[0] == std::vector<double>{1.0, 2.0});
  CHECK(seen[1] == std::vector<double>{3.5, 11.5});  // both contributions in: final
  CHECK(seen[2].empty());                               // u got none
}

TEST_CASE("set_grad gives a parameter a gradient to read and step with, or drops it; a wrong one is refused") {
  Graph g;
  Var w = g.parameter(f64({1.0, 2.0}, Shape{2}), "w");
  w.set_grad(f64({0.25, -1.0}, Shape{2}));
  CHECK(grad_of(w) == std::vector<double>{0.25, -1.0});
  w.set_grad(Tensor());
  CHECK_FALSE(w.grad().defined());
  CHECK(testing::message_of([&] { w.set_grad(Tensor::zeros(Shape{3}, DType::f64)); }) ==
        "[set_grad] a gradient of shape (3,) f64 on cpu for 'w', which is (2,) f64 on cpu");
  CHECK(testing::message_of([&] { w.set_grad(Tensor::zeros(Shape{2}, DType::f32)); }) ==
        "[set_grad] a gradient of shape (2,) f32 on cpu for 'w', which is (2,) f64 on cpu");
}
