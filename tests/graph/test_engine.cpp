// Engine semantics: fan-out accumulation, the overwrite-bug mode in both places contributions
// meet, no-grad, gradient shape validation, freed tapes, clear/rewind, the event record, and what
// the engine knows about rows (row copies, row sources, row-wise gradients).
#include <doctest/doctest.h>

#include "graph/gradcheck.hpp"
#include "graph/graph.hpp"
#include "graph/tape_dump.hpp"
#include "io/json.hpp"
#include "ops/kernels.hpp"
#include "ops/ops.hpp"

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

TEST_CASE("a second backward over a freed tape is refused; retain_graph keeps it") {
  Graph g;
  Var a = g.parameter(f64({3}, Shape{1}));
  Var y = ops::sum(ops::mul(a, a));
  g.backward(y, {.retain_graph = true});
  g.backward(y);  // parameter gradients accumulate across backward calls: 6 + 6
  CHECK(grad_of(a) == std::vector<double>{12});
  CHECK(g.tape_freed());
  CHECK_THROWS_WITH_AS(g.backward(y), doctest::Contains("already freed by an earlier backward()"), Error);
  CHECK_THROWS_WITH_AS(ops::mul(a, a), doctest::Contains("call clear() before recording the next step"), Error);
  g.zero_grad();
  CHECK_FALSE(a.grad().defined());
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
  size_t nodes = g.nodes().size();
  double err = gradcheck(g, loss, 1e-6);
  CHECK(err < 1e-8);
  CHECK(g.nodes().size() == nodes);
  CHECK(before.value().numel() == 2);
  CHECK(a.value().to_doubles() == std::vector<double>{0.3, -0.7});
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

TEST_CASE("cross_entropy saves repeated rows' probabilities once, with a map, and its gradient is the dense one") {
  // logits rows 0, 2 and 3 are copies of table row 1: three distinct rows of probabilities
  const Tensor table_values =
      Tensor::from_vector(std::vector<float>{0.5f, -1.0f, 2.0f, 0.25f, -0.5f, 1.5f, 3.0f, 0.0f, -2.0f}, Shape{3, 3});
  const Tensor ids = i32({1, 0, 1, 1, 2}), targets = i32({2, 0, 1, 2, 0});
  for (const ops::Reduction reduction : {ops::Reduction::mean, ops::Reduction::sum, ops::Reduction::none}) {
    CAPTURE(static_cast<int>(reduction));
    Graph g;
    Var table = g.parameter(table_values.clone());
    Var logits = ops::gather(table, g.input(ids));
    Var losses = ops::cross_entropy(logits, g.input(targets), reduction);
    const Tensor saved_probs = g.nodes().back().saved[0], prob_rows = g.nodes().back().saved[1];
    REQUIRE(saved_probs.shape() == Shape{3, 3});
    REQUIRE(prob_rows.shape() == Shape{5});
    CHECK(prob_rows.to_doubles() == std::vector<double>{0, 1, 0, 0, 2});
    // with Reduction::none, rows weighted 1..5 (each row's dloss its weight); otherwise dloss = 1
    const Tensor weights = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5}, Shape{5});
    Var loss = reduction == ops::Reduction::none ? ops::sum(ops::mul(losses, g.input(weights))) : losses;

    // the reference: every row computed and saved, dlogits from (B, V) probabilities
    Tensor probs = Tensor::empty(Shape{5, 3}, DType::f32, Device::cpu());
    Tensor row_losses = Tensor::empty(Shape{5}, DType::f32, Device::cpu());
    kernels::cross_entropy(logits.value(), targets, probs, row_losses);
    const Tensor dloss = reduction == ops::Reduction::none ? weights : Tensor::from_vector(std::vector<float>{1}, Shape{});
    Tensor want = Tensor::empty(Shape{5, 3}, DType::f32, Device::cpu());
    kernels::cross_entropy_backward(probs, targets, dloss, reduction == ops::Reduction::mean ? 5.0 : 1.0, want);
    if (reduction == ops::Reduction::none) CHECK(losses.value().to_doubles() == row_losses.to_doubles());
    const std::vector<double> p = probs.to_doubles(), saved = saved_probs.to_doubles();
    for (size_t j = 0; j < 3; ++j) {
      CHECK(saved[j] == p[j]);           // distinct row 0 is logits row 0
      CHECK(saved[3 + j] == p[3 + j]);   // 1 is logits row 1
      CHECK(saved[6 + j] == p[12 + j]);  // 2 is logits row 4
    }
    g.backward(loss);
    CHECK(logits.grad().to_doubles() == want.to_doubles());
  }
}

TEST_CASE("cross_entropy's backward writes over its saved probabilities only when nothing else needs them") {
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
  Run plain;  // the tape is freed after the pass: the probabilities' buffer becomes dlogits
  REQUIRE(plain.probs().shape() == Shape{4, 3});
  CHECK(!plain.g.nodes().back().saved[1].defined());
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

namespace {

// A table's gradient from one backward of sum(gather(W, ids) * weights), in a graph of its own or
// the one given (after zero_grad), with the overwrite-bug mode when asked.
std::vector<double> rows_step(Graph& g, Var table, const std::vector<int32_t>& ids, bool bug = false) {
  g.clear();
  g.zero_grad();
  const int64_t d = table.value().dim(1);
  std::vector<float> w(ids.size() * static_cast<size_t>(d));
  for (size_t k = 0; k < w.size(); ++k) w[k] = 0.25f * static_cast<float>(k % 7) - 0.5f;  // -0.5 .. 1, some zeros
  Var rows = ops::gather(table, g.input(i32(ids)));
  Var loss = ops::sum(ops::mul(rows, g.input(Tensor::from_vector(w, rows.shape()))));
  g.backward(loss, {.overwrite_bug = bug});
  return table.grad().to_doubles();
}

std::vector<double> fresh_rows_step(const Tensor& table_values, const std::vector<int32_t>& ids, bool bug = false) {
  Graph g;
  Var table = g.parameter(table_values.clone());
  return rows_step(g, table, ids, bug);
}

}  // namespace

TEST_CASE("gather's output says which rows are copies of which (Value::row_copies)") {
  Graph g;
  Var table = g.parameter(Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, Shape{3, 2}));
  Var rows = ops::gather(table, g.input(i32({2, 0, 2, 2, 1, 0})));
  CHECK(g.value(rows.id()).row_copies.to_doubles() == std::vector<double>{0, 1, 0, 0, 4, 1});
  Var from64 = ops::gather(table, g.input(Tensor::from_vector(std::vector<int64_t>{1, 1, 0}, Shape{3})));
  CHECK(g.value(from64.id()).row_copies.to_doubles() == std::vector<double>{0, 0, 2});
  // a value no gather made has no such map; cross_entropy then finds the repeats by comparing rows
  Var logits = g.parameter(Tensor::from_vector(std::vector<float>{1, 2, 3, 1, 2, 3, 0, 0, 1}, Shape{3, 3}));
  CHECK(!g.value(logits.id()).row_copies.defined());
  ops::cross_entropy(logits, g.input(i32({0, 1, 2})));
  CHECK(g.nodes().back().saved[1].to_doubles() == std::vector<double>{0, 0, 1});
  CHECK(g.nodes().back().saved[0].shape() == Shape{2, 3});
}

TEST_CASE("cross_entropy refuses a row_copies map that does not name earlier first rows") {
  const Tensor logits = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, Shape{3, 2});
  const Tensor targets = i32({0, 1, 0});
  Tensor probs, losses = Tensor::empty(Shape{3}, DType::f32), rows;
  CHECK_THROWS_WITH_AS(kernels::cross_entropy(logits, targets, probs, losses, &rows, i32({0, 2, 2})),
                       "[cross_entropy] row_copies[1] = 2 does not name an earlier first row", Error);
  CHECK_THROWS_WITH_AS(kernels::cross_entropy(logits, targets, probs, losses, &rows, i32({0, 0, 1})),
                       "[cross_entropy] row_copies[2] = 1 does not name an earlier first row", Error);
  CHECK_THROWS_WITH_AS(kernels::cross_entropy(logits, targets, probs, losses, &rows, i32({0, 0})),
                       "[cross_entropy] row_copies must be host i32 (3,), got i32 (2,)", Error);
}

TEST_CASE("a row-wise gradient flags its rows, and the next one reuses its buffer with the same bits as a fresh one") {
  std::vector<float> values(6 * 4);
  for (size_t k = 0; k < values.size(); ++k) values[k] = 0.1f * static_cast<float>(k);
  const Tensor table_values = Tensor::from_vector(values, Shape{6, 4});
  for (const bool bug : {false, true}) {
    CAPTURE(bug);
    Graph g;
    Var table = g.parameter(table_values.clone());
    CHECK(rows_step(g, table, {1, 3, 1}, bug) == fresh_rows_step(table_values, {1, 3, 1}, bug));
    REQUIRE(table.grad_rows() != nullptr);
    CHECK(std::vector<uint8_t>(table.grad_rows(), table.grad_rows() + 6) == std::vector<uint8_t>{0, 1, 0, 1, 0, 0});
    const void* buffer = table.grad().raw_data();
    // rows 1 and 3 were written last time and are not now: they must read as zeros again
    CHECK(rows_step(g, table, {0, 5, 0, 2}, bug) == fresh_rows_step(table_values, {0, 5, 0, 2}, bug));
    CHECK(table.grad().raw_data() == buffer);  // the buffer was reused
    CHECK(std::vector<uint8_t>(table.grad_rows(), table.grad_rows() + 6) == std::vector<uint8_t>{1, 0, 1, 0, 0, 1});

    // a gradient someone still holds is not reused, and keeps its values
    const Tensor held = table.grad();
    const std::vector<double> held_values = held.to_doubles();
    CHECK(rows_step(g, table, {4, 4}, bug) == fresh_rows_step(table_values, {4, 4}, bug));
    CHECK(table.grad().raw_data() != held.raw_data());
    CHECK(held.to_doubles() == held_values);
  }
}

TEST_CASE("a dense contribution makes a row-wise gradient's rows unknown") {
  Graph g;
  Var table = g.parameter(Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, Shape{3, 2}));
  Var loss = ops::add(ops::sum(ops::gather(table, g.input(i32({1})))), ops::sum(table));
  g.backward(loss);
  CHECK(table.grad_rows() == nullptr);
  CHECK(table.grad().to_doubles() == std::vector<double>{1, 1, 2, 2, 1, 1});
  // and the next row-wise gradient, with no spare kept, is made fresh
  CHECK(rows_step(g, table, {2}) == std::vector<double>{0, 0, 0, 0, -0.5, -0.25});
}

TEST_CASE("gather writes only first rows; the copies are filled when anyone reads the value") {
  std::vector<float> values(5 * 3);
  for (size_t k = 0; k < values.size(); ++k) values[k] = static_cast<float>(k + 1);
  Graph g;
  Var table = g.parameter(Tensor::from_vector(values, Shape{5, 3}));
  const std::vector<int32_t> ids = {4, 1, 4, 4, 0, 1};
  std::vector<double> want;
  for (int32_t id : ids)
    for (int64_t j = 0; j < 3; ++j) want.push_back(values[static_cast<size_t>(id * 3 + j)]);

  Var rows = ops::gather(table, g.input(i32(ids)));
  const Value& recorded = g.value(rows.id());
  REQUIRE(recorded.copies_pending);
  const float* bytes = static_cast<const float*>(recorded.data.raw_data());
  for (int64_t i : {0, 1, 4})  // the first rows are written already
    for (int64_t j = 0; j < 3; ++j) CHECK(bytes[i * 3 + j] == static_cast<float>(want[static_cast<size_t>(i * 3 + j)]));
  // a tape dump reads it through the graph, which fills the copies once
  const json::Value dump = tape_dump(g, nullptr, {.whole_limit = 64});
  const json::Value& dumped = dump.find("values")->as_array().back();
  REQUIRE(dumped.find("id")->as_double() == rows.id());
  std::vector<double> dumped_values;
  for (const json::Value& x : dumped.find("value")->find("values")->as_array()) dumped_values.push_back(x.as_double());
  CHECK(dumped_values == want);
  CHECK_FALSE(recorded.copies_pending);
  CHECK(rows.value().to_doubles() == want);

  Var again = ops::gather(table, g.input(i32(ids)));  // Var::value() fills them too
  CHECK(g.value(again.id()).copies_pending);
  CHECK(again.value().to_doubles() == want);
  CHECK_FALSE(g.value(again.id()).copies_pending);
  Var distinct = ops::gather(table, g.input(i32({3, 0})));  // nothing repeats: nothing pending
  CHECK_FALSE(g.value(distinct.id()).copies_pending);
  // a bad id is still reported by the kernel, with its position
  CHECK_THROWS_WITH_AS(ops::gather(table, g.input(i32({1, 1, 7}))),
                       "[gather] index 7 at position 2 is out of range for a table of 5 rows (shape (5, 3))", Error);
}

namespace {

// B = 40 rows of V = 300 classes (rows of 1200 bytes: blocks of 13 rows, the last one row) from
// a 7-row table, so ids repeat; targets spread over the classes.
struct BlockCase {
  static constexpr int64_t b = 40, v = 300, rows = 7;
  Tensor table_values = Tensor::empty(Shape{rows, v}, DType::f32);
  std::vector<int32_t> ids, targets;
  BlockCase() {
    float* w = table_values.data<float>();
    for (int64_t k = 0; k < rows * v; ++k) w[k] = 0.01f * static_cast<float>((k * 37) % 101) - 0.5f;
    for (int64_t i = 0; i < b; ++i) {
      ids.push_back(static_cast<int32_t>((i * 5 + i / 3) % rows));
      targets.push_back(static_cast<int32_t>((i * 71) % v));
    }
  }
};

}  // namespace

TEST_CASE("cross_entropy hands dlogits to the gather as a row source: the table's gradient has the dense path's bits") {
  const BlockCase c;
  const Tensor ids = i32(c.ids), targets = i32(c.targets);
  std::vector<float> weight_values(static_cast<size_t>(c.b));
  for (size_t i = 0; i < weight_values.size(); ++i) weight_values[i] = 0.5f + 0.25f * static_cast<float>(i % 5);
  const Tensor weights = Tensor::from_vector(weight_values, Shape{c.b});
  for (const ops::Reduction reduction : {ops::Reduction::mean, ops::Reduction::sum, ops::Reduction::none}) {
    for (const bool bug : {false, true}) {
      CAPTURE(static_cast<int>(reduction));
      CAPTURE(bug);
      // the reference: every logits row gathered, dense dlogits (B, V), one scatter
      Tensor logits = Tensor::empty(Shape{c.b, c.v}, DType::f32), probs;
      Tensor row_losses = Tensor::empty(Shape{c.b}, DType::f32);
      kernels::gather_rows(c.table_values, ids, logits);
      kernels::cross_entropy(logits, targets, probs, row_losses);
      const Tensor dloss = reduction == ops::Reduction::none ? weights : Tensor::from_vector(std::vector<float>{1}, Shape{});
      Tensor dlogits = Tensor::empty(Shape{c.b, c.v}, DType::f32);
      kernels::cross_entropy_backward(probs, targets, dloss, reduction == ops::Reduction::mean ? c.b : 1.0, dlogits);
      Tensor dtable = Tensor::empty(c.table_values.shape(), DType::f32);
      kernels::scatter_rows_fresh(dtable, ids, dlogits, bug);

      for (const bool record : {false, true}) {
        CAPTURE(record);
        Graph g;
        Var table = g.parameter(c.table_values.clone());
        Var gathered = ops::gather(table, g.input(ids));
        Var losses = ops::cross_entropy(gathered, g.input(targets), reduction);
        Var loss = reduction == ops::Reduction::none ? ops::sum(ops::mul(losses, g.input(weights))) : losses;
        BackwardRecord events;
        g.backward(loss, {.overwrite_bug = bug, .record = record ? &events : nullptr});
        CHECK(table.grad().to_doubles() == dtable.to_doubles());
        // the logits' gradient stays a row source until asked for (a record makes it bytes at once)
        CHECK(g.value(gathered.id()).grad_source.defined() == !record);
        CHECK(gathered.grad().to_doubles() == dlogits.to_doubles());  // filled now, after the tape was freed
        CHECK_FALSE(g.value(gathered.id()).grad_source.defined());
        CHECK(g.value(gathered.id()).copies_pending);  // no backward read the logits whole
        CHECK(gathered.value().to_doubles() == logits.to_doubles());
      }
    }
  }
}

TEST_CASE("a row source meeting another contribution is made dense and added; bob-like steps reuse the buffer") {
  const BlockCase c;
  const Tensor ids = i32(c.ids), targets = i32(c.targets);
  // loss = cross_entropy(logits) + sum(logits): the sum's ones arrive first (its node is later on
  // the tape), then cross_entropy's rows, made dense to be added
  Tensor logits = Tensor::empty(Shape{c.b, c.v}, DType::f32), probs;
  Tensor row_losses = Tensor::empty(Shape{c.b}, DType::f32);
  kernels::gather_rows(c.table_values, ids, logits);
  kernels::cross_entropy(logits, targets, probs, row_losses);
  Tensor dlogits = Tensor::empty(Shape{c.b, c.v}, DType::f32);
  kernels::cross_entropy_backward(probs, targets, Tensor::from_vector(std::vector<float>{1}, Shape{}), c.b, dlogits);
  Tensor ones = Tensor::empty(dlogits.shape(), DType::f32);
  kernels::fill(ones, 1.0);
  Tensor both = Tensor::empty(dlogits.shape(), DType::f32);
  kernels::binary(kernels::Binary::add, ones, dlogits, both);
  Tensor dtable = Tensor::empty(c.table_values.shape(), DType::f32);
  kernels::scatter_rows_fresh(dtable, ids, both, false);

  Graph g;
  Var table = g.parameter(c.table_values.clone());
  for (int step = 0; step < 3; ++step) {  // the second and third reuse the first's gradient buffer
    CAPTURE(step);
    g.clear();
    g.zero_grad();
    Var gathered = ops::gather(table, g.input(ids));
    g.backward(ops::add(ops::cross_entropy(gathered, g.input(targets)), ops::sum(gathered)));
    CHECK_FALSE(g.value(gathered.id()).grad_source.defined());
    CHECK(gathered.grad().to_doubles() == both.to_doubles());
    CHECK(table.grad().to_doubles() == dtable.to_doubles());
  }
  // and with cross_entropy alone, three steps: each table gradient the dense one
  Tensor alone = Tensor::empty(c.table_values.shape(), DType::f32);
  kernels::scatter_rows_fresh(alone, ids, dlogits, false);
  const void* buffer = nullptr;
  for (int step = 0; step < 3; ++step) {
    CAPTURE(step);
    g.clear();
    g.zero_grad();
    g.backward(ops::cross_entropy(ops::gather(table, g.input(ids)), g.input(targets)));
    CHECK(table.grad().to_doubles() == alone.to_doubles());
    if (step > 0) CHECK(table.grad().raw_data() == buffer);
    buffer = table.grad().raw_data();
  }
}

TEST_CASE("a row source of the wrong shape is refused with the op named") {
  Graph g;
  Var a = g.parameter(Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, Shape{2, 2}));
  Var y = g.record("broken_rows", Tensor::from_vector(std::vector<float>{6}, Shape{}), {a}, [](BackwardContext& ctx) {
    ctx.accumulate(0, RowSource{Shape{3, 2}, DType::f32, Device::cpu(), [](int64_t, Tensor& rows) { rows.zero_(); }});
  });
  CHECK_THROWS_WITH_AS(g.backward(y),
                       "[engine] the backward of broken_rows gave input 0 a gradient of shape (3, 2) f32 on cpu, "
                       "but that input is (2, 2) f32 on cpu",
                       Error);
}
