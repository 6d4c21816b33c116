// Name scopes in tape dumps and the tape tool: the dump writes a value's scope only when it has one,
// the reader checks the field (and reads dumps without it), groups values by the dots of their
// scopes, and `tape show` summarises, narrows to one scope and finds values by name.
#include <doctest/doctest.h>

#include "messages.hpp"
#include "tapegrad/ops/ops.hpp"
#include "tapegrad/tape/tape_dump.hpp"
#include "tape_file.hpp"
#include "views.hpp"

using namespace tapegrad;
using tapegrad::testing::message_of;

namespace {

// Two layers inside "enc", a sum outside every scope. Values in record order:
//   #0 w1 (-1), #1 w2 (-2): parameters made outside every scope
//   #2 x: an input made in "enc"
//   #3 matmul in enc.l1, #4 tanh in enc.l1, #5 matmul in enc.l2, #6 add in enc, #7 loss: sum, no scope
json::Value scoped_dump() {
  Graph g;
  Var w1 = g.parameter(Tensor::from_doubles({0.5, -0.25, 1.0, 0.75}, Shape{2, 2}, DType::f64), "enc.l1.w");
  Var w2 = g.parameter(Tensor::from_doubles({1.5, 0.25, -1.0, 0.5}, Shape{2, 2}, DType::f64), "enc.l2.w");
  Var y;
  {
    auto enc = g.scope("enc");
    Var x = g.input(Tensor::from_doubles({1.0, 2.0}, Shape{1, 2}, DType::f64), "x");
    Var h;
    {
      auto l1 = g.scope("enc.l1");
      h = ops::tanh(ops::matmul(x, w1));
    }
    Var z;
    {
      auto l2 = g.scope("enc.l2");
      z = ops::matmul(h, w2);
    }
    y = ops::add(z, h);
  }
  Var loss = ops::sum(y).label("loss");
  BackwardRecord record;
  g.backward(loss, {.record = &record});
  DumpOptions o;
  o.title = "two layers";
  return tape_dump(g, &record, o);
}

tape::Tape scoped_tape() { return tape::parse_tape(json::dumps(scoped_dump(), 1), "s.json"); }

std::string refusal(const std::function<void(json::Value&)>& edit) {
  json::Value d = scoped_dump();
  edit(d);
  try {
    tape::parse_tape(json::dumps(d, 1), "s.json");
  } catch (const RefusedFile& e) {
    return e.what();
  }
  return "(accepted)";
}

json::Value& value_at(json::Value& d, size_t i) { return d.find("values")->as_array()[i]; }

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("the dump writes a value's scope only when it was recorded in one") {
  json::Value d = scoped_dump();
  std::vector<std::string> scopes;
  for (const json::Value& v : d.find("values")->as_array())
    scopes.push_back(v.find("scope") ? v.find("scope")->as_string() : "(none)");
  CHECK(scopes == std::vector<std::string>{"(none)", "(none)", "enc", "enc.l1", "enc.l1", "enc.l2", "enc", "(none)"});
}

TEST_CASE("the reader checks the scope field by name, and a dump without any reads as unscoped") {
  CHECK(refusal([](json::Value&) {}) == "(accepted)");
  CHECK(refusal([](json::Value& d) { value_at(d, 3).set("scope", 7); }) ==
        "[tape] s.json: values[3].scope must be a string, got int");
  CHECK(refusal([](json::Value& d) { value_at(d, 3).set("scope", ""); }) ==
        "[tape] s.json: values[3].scope must name a scope (a value outside every scope has no \"scope\")");
  json::Value d = scoped_dump();
  for (json::Value& v : d.find("values")->as_array()) v.as_object().erase(
      std::remove_if(v.as_object().begin(), v.as_object().end(), [](const auto& kv) { return kv.first == "scope"; }),
      v.as_object().end());
  const tape::Tape old = tape::parse_tape(json::dumps(d, 1), "old.json");
  CHECK_FALSE(old.has_scopes());
  REQUIRE(old.groups.size() == 1);
  CHECK(old.groups[0].entries.size() == old.values.size());
}

TEST_CASE("values are grouped by the dots of their scopes; unscoped leaves join their first reader") {
  const tape::Tape t = scoped_tape();
  REQUIRE(t.groups.size() == 4);
  std::vector<std::string> names;
  for (const tape::Group& g : t.groups) names.push_back(g.name);
  CHECK(names == std::vector<std::string>{"", "enc", "enc.l1", "enc.l2"});
  CHECK(t.groups[0].children == std::vector<int>{1});
  CHECK(t.groups[1].children == std::vector<int>{2, 3});
  CHECK(t.groups[2].parent == 1);
  CHECK(t.groups[3].depth == 2);
  CHECK(t.groups[0].entries == std::vector<int>{7});        // the loss
  CHECK(t.groups[1].entries == std::vector<int>{2, 6});     // x (scoped itself), the add
  CHECK(t.groups[2].entries == std::vector<int>{0, 3, 4});  // w1 joins the matmul that reads it
  CHECK(t.groups[3].entries == std::vector<int>{1, 5});
  CHECK(t.groups[1].values == 7);
  CHECK(t.groups[1].nodes == 4);
  CHECK(t.groups[0].nodes == 5);
  CHECK(t.groups[2].first == 3);  // the first op output, not the parameter made before the step
  CHECK(t.values[0].group == 2);
  CHECK(t.values[0].scope.empty());
}

TEST_CASE("show: the grouped summary, one scope's tables, values found by name") {
  const tape::Tape t = scoped_tape();
  auto show = [&](auto edit) {
    tape::ShowOptions o;
    edit(o);
    return tape::show_tape(t, o);
  };
  const std::string small = show([](tape::ShowOptions&) {});
  CHECK(small == tape::show_table(t));  // a small tape: every table, with a scope column
  CHECK(has(small, "  label     scope   op  "));
  CHECK(has(small, "enc.l1.w  -       -  "));  // the scope it was recorded in: none
  CHECK(has(small, "x         enc     -  "));

  const std::string groups = show([](tape::ShowOptions& o) { o.groups = true; });
  CHECK(has(groups, "mode accumulate, 8 values, 5 nodes, 7 contributions\n"));
  CHECK(has(groups, "scope       values  nodes  contributions  ops\n"
                    "(no scope)  1       1      1              sum 1\n"
                    "enc         7       4      6              matmul 2, add 1, tanh 1\n"
                    "  enc.l1    3       2      2              matmul 1, tanh 1\n"
                    "  enc.l2    2       1      2              matmul 1\n"));
  CHECK(has(groups, "--scope NAME (one group's tables)"));

  const std::string l2 = show([](tape::ShowOptions& o) { o.scope = "enc.l2"; });
  CHECK(has(l2, "scope enc.l2:\n"));
  CHECK(has(l2, "enc.l2.w"));
  CHECK_FALSE(has(l2, "enc.l1.w"));
  CHECK(has(l2, "backward: visits nodes 2 matmul\n"));

  const std::string found = show([](tape::ShowOptions& o) { o.find = "TANH"; });
  CHECK(has(found, "1 value whose label, op or scope holds \"TANH\":\n"));
  CHECK(has(found, "backward: visits nodes 1 tanh\n"));
  const std::string by_index = show([](tape::ShowOptions& o) { o.scope = "enc", o.find = "#6"; });
  CHECK(has(by_index, "1 value whose label, op or scope holds \"#6\" in that scope:\n"));

  CHECK(message_of([&] { show([](tape::ShowOptions& o) { o.scope = "enc.l3"; }); }) ==
        "[tape] s.json has no scope \"enc.l3\"; its outermost scopes are enc (tape show FILE --groups lists them all)");
}

TEST_CASE("html: the page carries each tape's groups beside its dump") {
  const std::string page = tape::to_html({scoped_tape()});
  CHECK(has(page, "\"groups\": [{\"name\": \"\", \"parent\": -1, \"depth\": 0, \"children\": [1], \"entries\": [7]"));
  CHECK(has(page, "{\"name\": \"enc.l2\", \"parent\": 1, \"depth\": 2, \"children\": [], \"entries\": [1, 5]"));
}
