// Tape dumps written by tapegrad::tape_dump and read back by apps/tape's reader: every field of
// the format (docs/tape-format.md) compared against the graph and the record it came from, large
// tensors cut with statistics, non-finite values, a title of invalid UTF-8, the dumper's refusals
// by message, and the bound on what it agrees to dump.
#include <doctest/doctest.h>

#include <cmath>

#include "tapegrad/tape/tape_dump.hpp"
#include "tapegrad/ops/ops.hpp"
#include "tape_file.hpp"

using namespace tapegrad;

namespace {

Tensor f64(std::vector<double> v, Shape s) { return Tensor::from_doubles(v, s, DType::f64); }
Tensor i32(std::vector<int32_t> v) { return Tensor::from_vector(v, Shape{static_cast<int64_t>(v.size())}); }

tape::Tape round_trip(const Graph& g, const BackwardRecord* record, const DumpOptions& o) {
  return tape::parse_tape(json::dumps(tape_dump(g, record, o), 1), "memory.json");
}

std::vector<int64_t> dims(const Shape& s) { return {s.begin(), s.end()}; }

// Every field of a dumped tensor against the tensor it came from (dumped whole).
void check_whole(const tape::TensorData& d, const Tensor& t) {
  const std::vector<double> v = t.to_doubles();
  CHECK(d.shape == dims(t.shape()));
  CHECK(d.dtype == dtype_name(t.dtype()));
  CHECK(d.count == t.numel());
  CHECK_FALSE(d.truncated);
  CHECK(d.values == v);
  double mean = 0, var = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  for (double x : v) var += (x - mean) * (x - mean);
  CHECK(d.min == *std::min_element(v.begin(), v.end()));
  CHECK(d.max == *std::max_element(v.begin(), v.end()));
  CHECK(d.mean == doctest::Approx(mean).epsilon(1e-15));
  CHECK(d.std == doctest::Approx(std::sqrt(var / static_cast<double>(v.size()))).epsilon(1e-15));
}

// A table gathered with a repeated id and a value read twice: contributions meet in both places
// the engine knows (rows of a scatter, and a whole value), so every event kind appears.
struct Model {
  Graph g;
  Var table, weights, ids, x, doubled, y, loss;
  Model() {
    table = g.parameter(f64({0.1, 0.2, 0.3, 0.4, 0.5, 0.6}, Shape{3, 2}), "table");
    weights = g.parameter(f64({1.0, -1.0, 0.5, 2.0}, Shape{2, 2}), "weights");
    ids = g.input(i32({2, 0, 2}), "ids");
    x = ops::gather(table, ids).label("x");  // (3, 2)
    doubled = ops::add(x, x);                // x read twice
    y = ops::matmul(doubled, weights).label("y");
    loss = ops::mean(y).label("loss");
  }
};

}  // namespace

TEST_CASE("a dump read back holds every value, node, event and the gradient check") {
  Model m;
  BackwardRecord record;
  m.g.backward(m.loss, {.record = &record});
  DumpOptions o;
  o.title = "a test: gather, add, matmul, mean";
  o.row_names = {{"table", {"a", "b", "c"}}, {"ids", {"first", "second", "third"}}};
  o.gradient_check = GradientCheckResult{1e-5, 1e-6, {3e-11, 2e-11}};
  const tape::Tape t = round_trip(m.g, &record, o);

  CHECK(t.version == 1);
  CHECK(t.title == o.title);
  CHECK_FALSE(t.overwrite_bug);
  CHECK(t.mode() == "accumulate");
  CHECK(t.whole_limit == 64);
  CHECK(t.head == 8);

  // values, in record order: the parameters were created first, then ids, then the ops
  const std::vector<int32_t> order = {m.table.id(), m.weights.id(), m.ids.id(), m.x.id(), m.doubled.id(), m.y.id(), m.loss.id()};
  REQUIRE(t.values.size() == order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    CAPTURE(i);
    const tape::Entry& e = t.values[i];
    const Value& v = m.g.value(order[i]);
    CHECK(e.index == static_cast<int>(i));
    CHECK(e.id == order[i]);
    CHECK(e.kind == value_kind_name(v.kind));
    CHECK(e.label == v.label);
    CHECK(e.shape == dims(v.data.shape()));
    CHECK(e.dtype == dtype_name(v.data.dtype()));
    CHECK(e.device == "cpu");
    CHECK(e.requires_grad == v.requires_grad);
    check_whole(e.value, v.data);
    CHECK(e.grad.has_value() == v.grad.defined());
    if (e.grad) check_whole(*e.grad, v.grad);
  }
  CHECK(t.values[0].rows == std::vector<std::string>{"a", "b", "c"});
  CHECK(t.values[2].rows == std::vector<std::string>{"first", "second", "third"});
  CHECK(t.values[1].rows.empty());
  // which node made each value, from what
  for (size_t n = 0; n < m.g.nodes().size(); ++n) {
    const Node& node = m.g.nodes()[n];
    const tape::Entry& e = t.producer(static_cast<int32_t>(n));
    CHECK(e.id == node.output);
    CHECK(e.op == node.op);
    std::vector<int32_t> ids;
    for (int k = 0; k < node.inputs.size(); ++k) ids.push_back(node.inputs[k]);
    CHECK(e.inputs == ids);
  }
  CHECK(t.values[0].op.empty());
  CHECK(t.values[0].node == -1);
  CHECK(t.values[4].inputs == std::vector<int32_t>{m.x.id(), m.x.id()});

  // the backward pass as the engine ran it
  REQUIRE(t.has_backward);
  CHECK(t.visits == record.visits);
  REQUIRE(t.events.size() == record.events.size());
  for (size_t i = 0; i < t.events.size(); ++i) {
    CAPTURE(i);
    const tape::Event& e = t.events[i];
    const GradEvent& r = record.events[i];
    CHECK(e.node == r.node);
    CHECK(e.op == m.g.nodes()[static_cast<size_t>(r.node)].op);
    CHECK(e.to == r.to_value);
    CHECK(e.input == r.input_slot);
    CHECK(e.row == r.row);
    CHECK(std::string(tape::event_kind_name(e.kind)) == grad_event_kind_name(r.kind));
    check_whole(e.contribution, r.contribution);
    CHECK_FALSE(e.discarded.has_value());
    REQUIRE(e.after.has_value());
  }
  // x is read twice by add: set, then added; "after" is the running sum
  std::vector<const tape::Event*> into_x, into_table;
  for (const tape::Event& e : t.events) {
    if (e.to == m.x.id()) into_x.push_back(&e);
    if (e.to == m.table.id()) into_table.push_back(&e);
  }
  REQUIRE(into_x.size() == 2);
  CHECK(into_x[0]->kind == tape::EventKind::set);
  CHECK(into_x[1]->kind == tape::EventKind::added);
  CHECK(into_x[1]->after->values == m.x.grad().to_doubles());
  // the gather scatters one row per id: rows 2, 0, 2; the second visit to row 2 adds
  REQUIRE(into_table.size() == 3);
  CHECK(into_table[0]->row == 2);
  CHECK(into_table[1]->row == 0);
  CHECK(into_table[2]->row == 2);
  CHECK(into_table[2]->kind == tape::EventKind::added);
  const std::vector<double> dtable = m.table.grad().to_doubles();
  CHECK(into_table[2]->after->values == std::vector<double>{dtable[4], dtable[5]});

  // the gradient check, per parameter
  REQUIRE(t.gradient_check.has_value());
  CHECK(t.gradient_check->epsilon == 1e-5);
  CHECK(t.gradient_check->tolerance == 1e-6);
  CHECK(t.gradient_check->max_error == 3e-11);
  CHECK(t.gradient_check->passed);
  REQUIRE(t.gradient_check->parameters.size() == 2);
  CHECK(t.gradient_check->parameters[0].id == -1);
  CHECK(t.gradient_check->parameters[0].label == "table");
  CHECK(t.gradient_check->parameters[1].max_error == 2e-11);
  CHECK(t.gradient_check->parameters[1].passed);
}

TEST_CASE("overwrite-bug mode: the dump says what each overwrite discarded") {
  Model m;
  BackwardRecord record;
  m.g.backward(m.loss, {.overwrite_bug = true, .record = &record});
  DumpOptions o;
  o.overwrite_bug = true;
  const tape::Tape t = round_trip(m.g, &record, o);
  CHECK(t.mode() == "overwrite-bug");
  int overwrites = 0;
  for (size_t i = 0; i < t.events.size(); ++i) {
    const tape::Event& e = t.events[i];
    if (e.kind != tape::EventKind::overwritten) {
      CHECK_FALSE(e.discarded.has_value());
      continue;
    }
    ++overwrites;
    REQUIRE(e.discarded.has_value());
    CHECK(e.discarded->values == record.events[i].discarded.to_doubles());
    CHECK(e.after->values == e.contribution.values);  // it holds only the last contribution
  }
  CHECK(overwrites == 2);  // x (read twice by add) and row 2 of the table (id 2 repeated)
  CHECK_FALSE(t.gradient_check.has_value());
}

TEST_CASE("large tensors are cut: statistics, the first elements and the count") {
  Graph g;
  std::vector<double> v(100);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i) - 30.0;
  Var p = g.parameter(f64(v, Shape{10, 10}), "big");
  BackwardRecord record;
  g.backward(ops::sum(p), {.record = &record});
  DumpOptions o;
  o.whole_limit = 64;
  o.head = 5;
  const tape::Tape t = round_trip(g, &record, o);
  const tape::TensorData& d = t.values[0].value;
  CHECK(d.truncated);
  CHECK(d.count == 100);
  CHECK(d.shape == std::vector<int64_t>{10, 10});
  CHECK(d.values == std::vector<double>{-30, -29, -28, -27, -26});
  CHECK(d.min == -30);
  CHECK(d.max == 69);
  CHECK(d.mean == 19.5);
  CHECK(d.std == doctest::Approx(std::sqrt((100.0 * 100.0 - 1.0) / 12.0)));
  CHECK(t.values[0].grad->truncated);
  CHECK(t.events[0].contribution.truncated);
  CHECK(t.events[0].after->truncated);
}

TEST_CASE("non-finite values are written as strings and read back as numbers") {
  Graph g;
  g.parameter(f64({NAN, INFINITY, -INFINITY, 1.0}, Shape{4}), "odd");
  const json::Value d = tape_dump(g, nullptr);
  const std::string text = json::dumps(d, 1);
  CHECK(text.find("\"NaN\"") != std::string::npos);
  CHECK(text.find("\"-Infinity\"") != std::string::npos);
  const tape::Tape t = tape::parse_tape(text, "odd.json");
  const std::vector<double>& v = t.values[0].value.values;
  CHECK(std::isnan(v[0]));
  CHECK(v[1] == INFINITY);
  CHECK(v[2] == -INFINITY);
  CHECK(std::isnan(t.values[0].value.mean));
  CHECK_FALSE(t.has_backward);
  CHECK_FALSE(t.values[0].grad.has_value());
}

TEST_CASE("a parameter's gradient from an earlier pass makes 'after' unknown, not wrong") {
  Graph g;
  Var p = g.parameter(f64({1.0, 2.0}, Shape{2}), "p");
  g.backward(ops::sum(p));  // no zero_grad(): the next pass adds to this gradient
  g.clear();
  BackwardRecord record;
  g.backward(ops::sum(p), {.record = &record});
  const tape::Tape t = round_trip(g, &record, {});
  REQUIRE(t.events.size() == 1);
  CHECK(t.events[0].kind == tape::EventKind::added);
  CHECK_FALSE(t.events[0].after.has_value());
  CHECK(t.values[0].grad->values == std::vector<double>{2.0, 2.0});
}

TEST_CASE("the dumper refuses a record it cannot describe, by message") {
  Model m;
  BackwardRecord record;
  m.g.backward(m.loss, {.overwrite_bug = true, .record = &record});
  CHECK_THROWS_WITH_AS(tape_dump(m.g, &record, {}),
                       "[tape_dump] the backward record holds overwritten contributions, so it ran in the "
                       "overwrite-bug mode; set DumpOptions::overwrite_bug",
                       Error);
  DumpOptions names;
  names.overwrite_bug = true;
  names.row_names = {{"table", {"a", "b"}}};
  CHECK_THROWS_WITH_AS(tape_dump(m.g, &record, names),
                       "[tape_dump] 2 row names for \"table\", but its value has shape (3, 2) (3 rows); give one "
                       "name per row",
                       Error);
  DumpOptions check;
  check.overwrite_bug = true;
  check.gradient_check = GradientCheckResult{1e-5, 1e-6, {0.0}};
  CHECK_THROWS_WITH_AS(tape_dump(m.g, &record, check),
                       "[tape_dump] the gradient check has 1 per-parameter errors but the graph has 2 parameters",
                       Error);
  m.g.clear();
  DumpOptions bug;
  bug.overwrite_bug = true;
  CHECK_THROWS_WITH_AS(tape_dump(m.g, &record, bug),
                       "[tape_dump] the backward record names node 3 but the tape has 0 nodes; dump after "
                       "backward() and before clear()",
                       Error);
}

TEST_CASE("a title of invalid UTF-8 (a user's path) is written with U+FFFD, not refused") {
  Model m;
  BackwardRecord record;
  m.g.backward(m.loss, {.record = &record});
  DumpOptions o;
  o.title = "gpt tiny: bad\xff.txt";
  CHECK(round_trip(m.g, &record, o).title == "gpt tiny: bad\xef\xbf\xbd.txt");
}

TEST_CASE("check_dump_size counts every number of the tape and refuses above kMaxDumpNumbers") {
  Model m;
  CHECK(tape_numbers(m.g) == 6 + 4 + 3 + 6 + 6 + 6 + 1);  // table, weights, ids, x, doubled, y, loss
  CHECK_NOTHROW(check_dump_size(m.g, "t.json"));
  Graph g;
  g.input(Tensor::zeros(Shape{kMaxDumpNumbers}, DType::u8), "at the bound");
  CHECK_NOTHROW(check_dump_size(g, "t.json"));
  g.input(Tensor::zeros(Shape{1}, DType::u8), "one more");
  CHECK_THROWS_WITH_AS(check_dump_size(g, "t.json"),
                       "cannot dump the tape to t.json: it holds 33554433 numbers, more than the 33554432 a dump "
                       "takes (recording its backward keeps every gradient and contribution beside the step's own "
                       "memory: several times the tape's bytes); dump a smaller model",
                       Error);
}

TEST_CASE("gradient_check_result compares per parameter and fails on NaN") {
  const std::vector<Tensor> analytic = {f64({1.0, 2.0}, Shape{2}), f64({3.0}, Shape{1})};
  const GradientCheckResult ok = gradient_check_result(analytic, {f64({1.0, 2.0}, Shape{2}), f64({3.5}, Shape{1})}, 1e-5, 0.1);
  CHECK(ok.max_error == std::vector<double>{0.0, 0.5});
  CHECK(ok.worst() == 0.5);
  CHECK_FALSE(ok.passed());
  const GradientCheckResult nan = gradient_check_result(analytic, {f64({NAN, 2.0}, Shape{2}), f64({3.0}, Shape{1})}, 1e-5, 0.1);
  CHECK(std::isnan(nan.worst()));
  CHECK_FALSE(nan.passed());
}
