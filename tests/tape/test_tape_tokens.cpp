// Tapes at real batch sizes: a dump's vocabulary (token names for a table's rows and a batch's ids),
// names made visible ("\n", " "), values no label names told apart by their first reader, a slice's
// part shown with its region, and `tape step`'s "over" command across an op's row contributions.
#include <doctest/doctest.h>

#include <sstream>

#include "messages.hpp"
#include "stepper.hpp"
#include "tapegrad/ops/ops.hpp"
#include "tapegrad/tape/tape_dump.hpp"
#include "tape_file.hpp"
#include "text.hpp"
#include "views.hpp"
#include "walk.hpp"

using namespace tapegrad;
using tapegrad::testing::message_of;

namespace {

// A token model over the vocabulary "\n", " ", "a", "b", its table padded to 5 rows. Values in
// record order: wte (-1), head (-2); #2 ids [a b a \n]; #3 x = gather(wte, ids) (4, 3); #4 slice of
// x's columns 0:2; #5 logits = matmul; #6 an unlabelled input (the targets); #7 loss.
DumpOptions token_options() {
  DumpOptions o;
  o.vocabulary = DumpOptions::Vocabulary{{"\n", " ", "a", "b"}, {"wte", "ids"}};
  return o;
}

json::Value token_dump(const DumpOptions& o = token_options()) {
  Graph g;
  std::vector<double> table(15), head(10);
  for (size_t i = 0; i < table.size(); ++i) table[i] = 0.1 * static_cast<double>(i) - 0.7;
  for (size_t i = 0; i < head.size(); ++i) head[i] = 0.2 * static_cast<double>(i % 7) - 0.5;
  Var wte = g.parameter(Tensor::from_doubles(table, Shape{5, 3}, DType::f64), "wte");
  Var w = g.parameter(Tensor::from_doubles(head, Shape{2, 5}, DType::f64), "head");
  Var ids = g.input(Tensor::from_vector(std::vector<int32_t>{2, 3, 2, 0}, Shape{4}), "ids");
  Var x = ops::gather(wte, ids).label("x");
  Var logits = ops::matmul(ops::slice(x, 1, 0, 2), w).label("logits");
  Var loss = ops::cross_entropy(logits, g.input(Tensor::from_vector(std::vector<int32_t>{3, 2, 0, 1}, Shape{4})));
  loss.label("loss");
  BackwardRecord record;
  g.backward(loss, {.record = &record});
  return tape_dump(g, &record, o);
}

tape::Tape token_tape() { return tape::parse_tape(json::dumps(token_dump(), 1), "tokens.json"); }

const json::Value& value_at(const json::Value& d, size_t i) { return d.find("values")->as_array()[i]; }

std::string reader_refusal(const std::function<void(json::Value&)>& edit) {
  json::Value d = token_dump();
  edit(d);
  try {
    tape::parse_tape(json::dumps(d, 1), "tokens.json");
  } catch (const RefusedFile& e) {
    return e.what();
  }
  return "(accepted)";
}

std::string step_with(const tape::Tape& t, const std::string& commands) {
  std::istringstream in(commands);
  std::ostringstream out;
  tape::step_lines(t, in, out);
  return out.str();
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("a vocabulary names a table's rows (its padding unnamed) and marks a value of ids") {
  const json::Value d = token_dump();
  CHECK(json::dumps(*d.find("vocabulary"), -1) == R"(["\n", " ", "a", "b"])");
  CHECK(json::dumps(*value_at(d, 0).find("rows"), -1) == R"(["\n", " ", "a", "b", ""])");
  CHECK(value_at(d, 0).find("tokens") == nullptr);
  CHECK(value_at(d, 2).find("tokens")->as_bool());
  CHECK(value_at(d, 6).find("tokens") == nullptr);  // the targets: not named by the vocabulary
}

TEST_CASE("a vocabulary that does not fit is refused by name") {
  DumpOptions o = token_options();
  o.vocabulary->labels = {"wte", "idz"};
  CHECK(message_of([&] { token_dump(o); }) ==
        "[tape_dump] the vocabulary names the values labelled \"idz\", but no value in the tape carries that label "
        "(label it with Var::label, or check its spelling)");
  o = token_options();
  o.vocabulary->tokens.resize(6, "c");
  CHECK(message_of([&] { token_dump(o); }) ==
        "[tape_dump] the vocabulary's 6 tokens name the rows of \"wte\", but its value has shape (5, 3) (5 rows); a "
        "table of tokens has a row per token (label an integer value to show its ids as tokens)");
  o = token_options();
  o.row_names = {{"wte", {"a", "b", "c", "d", "e"}}};
  CHECK(message_of([&] { token_dump(o); }) ==
        "[tape_dump] \"wte\" is named both by row_names and by the vocabulary; give it one");
}

TEST_CASE("the reader takes the vocabulary, the tokens and the regions, and refuses what contradicts them") {
  const tape::Tape t = token_tape();
  CHECK(t.vocabulary == std::vector<std::string>{"\n", " ", "a", "b"});
  CHECK(t.entry(0).tokens);
  const tape::Event* part = nullptr;
  for (const tape::Event& ev : t.events)
    if (ev.op == "slice") part = &ev;
  REQUIRE(part);
  REQUIRE(part->region.has_value());
  CHECK(part->region->index == "[:, 0:2]");
  CHECK(part->region->strides == std::vector<int64_t>{3, 1});
  CHECK(part->kind == tape::EventKind::set);

  CHECK(reader_refusal([](json::Value& d) {
          std::erase_if(d.as_object(), [](const auto& field) { return field.first == "vocabulary"; });
        }) ==
        "[tape] tokens.json: values[2].tokens is true but the dump has no \"vocabulary\" to name the tokens");
  CHECK(reader_refusal([](json::Value& d) {
          d.find("values")->as_array()[0].set("tokens", true);
        }) == "[tape] tokens.json: values[0].tokens is true for a value of dtype f64; token ids are i32 or i64");
  auto edit_region = [](const std::function<void(json::Value&, json::Value&)>& f) {
    return [f](json::Value& d) {
      for (json::Value& ev : d.find("backward")->find("events")->as_array())
        if (ev.find("region")) return f(ev, *ev.find("region"));
    };
  };
  CHECK(reader_refusal(edit_region([](json::Value&, json::Value& r) { r.set("offset", int64_t{5}); })) ==
        "[tape] tokens.json: backward.events[3].region names element 15 of (4, 3), which has 12 elements");
  CHECK(reader_refusal(edit_region([](json::Value& ev, json::Value&) { ev.set("row", int64_t{1}); })) ==
        "[tape] tokens.json: backward.events[3].region is set beside a row; an event goes to a row or to a region");
}

TEST_CASE("tape step shows tokens, visible row names, a part's region and who reads an unlabelled input") {
  const tape::Tape t = token_tape();
  const std::string out = step_with(t, "j 3\nj 7\n");
  // the ids as tokens; the table's rows by token, "\n" escaped, the padding row unnamed
  CHECK(has(out, "#2 ids: an input, (4,) i32 on cpu\n"));
  CHECK(has(out, "      [a, b, a, \\n]\n"));
  // the targets, unlabelled, by the op that reads them
  CHECK(has(out, "#6 input to loss (input 1): an input, (4,) i32 on cpu\n"
                 "  data: it gets no gradient\n"
                 "  first read by #7 loss = cross_entropy(logits, #6 input to loss (input 1)), as its input 1\n"));
  const std::string backward = step_with(t, "j 12\nj 13\nj 14\n");
  CHECK(has(backward, "  flows to  d x, [:, 0:2]  (input 0 of slice)\n"));
  CHECK(has(backward, "  flows to  d wte, row 2 (a)  (input 0 of gather)\n"));
  CHECK(has(backward, "  flows to  d wte, row 3 (b)  (input 0 of gather)\n"));
  CHECK(tape::visible("\n") == "\\n");
  CHECK(tape::visible(" the ") == "␣the␣");
  CHECK(tape::visible("  ") == "␣␣");
  CHECK(tape::visible("a b\x1b") == "a b\\x1b");
}

TEST_CASE("tape step's over command goes past an op's row contributions to the step after them") {
  const tape::Tape t = token_tape();
  const std::vector<tape::Step> steps = tape::walk(t);
  size_t first_row = 0;
  while (steps[first_row].event < 0 || t.events[static_cast<size_t>(steps[first_row].event)].row < 0) ++first_row;
  // the gather's four rows are the last contributions: over them is the summary
  const std::string out = step_with(t, "j " + std::to_string(first_row + 2) + "\no\n");
  CHECK(has(out, "── step " + std::to_string(steps.size()) + " of " + std::to_string(steps.size()) + " · summary"));
  // from a step that is no row contribution, over is next
  const std::string before = step_with(t, "j " + std::to_string(first_row) + "\nover\n");
  CHECK(has(before, "── step " + std::to_string(first_row + 1) + " of "));
}
