// apps/tape's reader refuses what it cannot trust, by message: a dump cut short, not JSON, not a
// tape, of an unknown version, with a field missing, of the wrong type, or contradicting another.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <functional>

#include "tapegrad/io/atomic_file.hpp"
#include "tapegrad/tensor/error.hpp"
#include "tapegrad/tape/tape_dump.hpp"
#include "tapegrad/ops/ops.hpp"
#include "messages.hpp"
#include "tape_file.hpp"

using namespace tapegrad;
namespace io = tapegrad::io;
using tapegrad::testing::message_of;

namespace {

// tiny_step's model, smaller: gather with a repeated id, matmul, bias, cross-entropy; overwrite mode.
// Values in record order: embedding, weights, bias (ids -1, -2, -3), ids, x, #5 matmul, logits,
// targets, loss (ids 0 to 5); nodes gather 0, matmul 1, add_row 2, cross_entropy 3.
json::Value sample_dump() {
  Graph g;
  Var e = g.parameter(Tensor::from_doubles({0.1, 0.2, 0.3, 0.4}, Shape{2, 2}, DType::f64), "embedding");
  Var w = g.parameter(Tensor::from_doubles({0.5, -0.5, 1.0, 0.25}, Shape{2, 2}, DType::f64), "weights");
  Var b = g.parameter(Tensor::from_doubles({0.0, 0.1}, Shape{2}, DType::f64), "bias");
  Var ids = g.input(Tensor::from_vector(std::vector<int32_t>{0, 1, 0}, Shape{3}), "ids");
  Var logits = ops::add_row(ops::matmul(ops::gather(e, ids), w), b);
  Var loss = ops::cross_entropy(logits, g.input(Tensor::from_vector(std::vector<int32_t>{1, 0, 1}, Shape{3})));
  BackwardRecord record;
  g.backward(loss, {.overwrite_bug = true, .record = &record});
  DumpOptions o;
  o.overwrite_bug = true;
  return tape_dump(g, &record, o);
}

// The reader's message for the sample dump after `edit`.
std::string refusal(const std::function<void(json::Value&)>& edit) {
  json::Value d = sample_dump();
  edit(d);
  try {
    tape::parse_tape(json::dumps(d, 1), "t.json");
  } catch (const RefusedFile& e) {
    return e.what();
  }
  return "(accepted)";
}

json::Value& value_at(json::Value& d, size_t i) { return d.find("values")->as_array()[i]; }
json::Value& event_at(json::Value& d, size_t i) { return d.find("backward")->find("events")->as_array()[i]; }

}  // namespace

TEST_CASE("the sample dump itself is accepted") {
  CHECK(refusal([](json::Value&) {}) == "(accepted)");
}

TEST_CASE("a dump cut short, or not JSON at all, is refused as such") {
  const std::string text = json::dumps(sample_dump(), 1);
  for (size_t cut : {size_t{0}, size_t{1}, text.size() / 3, text.size() / 2, text.size() - 3}) {
    CAPTURE(cut);
    CHECK_THROWS_WITH_AS(tape::parse_tape(text.substr(0, cut), "cut.json"),
                         doctest::Contains("[tape] cut.json is not a complete JSON document (cut short or damaged?): [json] malformed JSON in cut.json"),
                         RefusedFile);
  }
}

TEST_CASE("a JSON file that is not a tape dump, or of another version, is refused") {
  CHECK_THROWS_WITH_AS(tape::parse_tape("[1, 2]", "list.json"),
                       "[tape] list.json is not a tape dump: it has no \"format\": \"tapegrad-tape\" (write one with "
                       "tiny_step --dump-tape FILE or tapegrad::write_tape_dump)",
                       RefusedFile);
  CHECK(refusal([](json::Value& d) { d.set("format", "tapegrad-trace"); }).find("is not a tape dump") != std::string::npos);
  CHECK(refusal([](json::Value& d) { d.set("version", 2); }) ==
        "[tape] t.json is a tape dump of version 2; this tape reads version 1 only (docs/tape-format.md); dump it "
        "again with this tapegrad");
  CHECK(refusal([](json::Value& d) { d.set("version", "1"); }).find("is a tape dump of version \"1\"") != std::string::npos);
  CHECK(refusal([](json::Value& d) { d.as_object().erase(d.as_object().begin() + 1); }).find("of version (none)") !=
        std::string::npos);
}

TEST_CASE("every field is checked: missing, wrong type, out of range") {
  CHECK(refusal([](json::Value& d) { d.as_object().erase(d.as_object().begin() + 3); }) ==
        "[tape] t.json: the dump has no \"mode\"");
  CHECK(refusal([](json::Value& d) { d.set("mode", "add"); }) ==
        "[tape] t.json: mode must be one of \"accumulate\", \"overwrite-bug\", got \"add\"");
  CHECK(refusal([](json::Value& d) { value_at(d, 0).set("label", 5); }) ==
        "[tape] t.json: values[0].label must be a string, got int");
  CHECK(refusal([](json::Value& d) { value_at(d, 1).set("index", 7); }) ==
        "[tape] t.json: values[1].index must be from 1 to 1, got 7");
  CHECK(refusal([](json::Value& d) { value_at(d, 0).set("kind", "weight"); }) ==
        "[tape] t.json: values[0].kind must be one of \"parameter\", \"input\", \"activation\", got \"weight\"");
  CHECK(refusal([](json::Value& d) { value_at(d, 0).find("value")->set("values", json::Value::Array{1.0, 2.0}); }) ==
        "[tape] t.json: values[0].value has 2 values for 4 elements and is not marked truncated (is the file cut "
        "short?)");
  CHECK(refusal([](json::Value& d) { value_at(d, 0).find("value")->set("count", 5); }) ==
        "[tape] t.json: values[0].value has count 5 but shape (2, 2) holds 4 elements");
  CHECK(refusal([](json::Value& d) { value_at(d, 0).find("value")->set("min", "tiny"); }) ==
        "[tape] t.json: values[0].value.min must be a number (or \"NaN\", \"Infinity\", \"-Infinity\"), got \"tiny\"");
  CHECK(refusal([](json::Value& d) { value_at(d, 0).set("rows", json::Value::Array{"a"}); }) ==
        "[tape] t.json: values[0].rows has 1 names for a value of shape (2, 2)");
  CHECK(refusal([](json::Value& d) { value_at(d, 0).set("grad", json::Value(nullptr)); }) == "(accepted)");
}

TEST_CASE("fields that contradict each other are refused") {
  CHECK(refusal([](json::Value& d) { value_at(d, 4).find("inputs")->as_array()[1] = json::Value(9); }) ==
        "[tape] t.json: values[4].inputs[1] names value 9, which is not recorded before it");
  CHECK(refusal([](json::Value& d) { value_at(d, 1).set("id", -1); }) == "[tape] t.json: values[1].id repeats id -1");
  CHECK(refusal([](json::Value& d) { value_at(d, 3).set("id", -7); }) ==
        "[tape] t.json: values[3].id is -7 for kind \"input\" (parameters have negative ids, other values not)");
  CHECK(refusal([](json::Value& d) { value_at(d, 0).set("node", 0); }) ==
        "[tape] t.json: values[0] must have both \"op\" and \"node\" or neither (one is null)");
  CHECK(refusal([](json::Value& d) { d.set("mode", "accumulate"); }) ==
        "[tape] t.json: backward.events[7].kind is \"overwritten\" but the dump's mode is \"accumulate\"");
  CHECK(refusal([](json::Value& d) { event_at(d, 0).set("to", -2); }) ==
        "[tape] t.json: backward.events[0].to is value -2 but input 0 of node 3 is value 3");
  CHECK(refusal([](json::Value& d) { event_at(d, 0).set("op", "softmax"); }) ==
        "[tape] t.json: backward.events[0].op is \"softmax\" but node 3 is cross_entropy");
  CHECK(refusal([](json::Value& d) { event_at(d, 7).set("discarded", json::Value(nullptr)); }) ==
        "[tape] t.json: backward.events[7].discarded is null but the event overwrote a gradient");
  CHECK(refusal([](json::Value& d) { event_at(d, 7).set("row", 2); }) ==
        "[tape] t.json: backward.events[7].row must be from 0 to 1, got 2");
  CHECK(refusal([](json::Value& d) { d.find("backward")->find("visits")->as_array() = {3, 0, 1, 2}; }) ==
        "[tape] t.json: backward.events[3].node is node 1, which the visit order does not reach at this point "
        "(events must follow the visits)");
}

TEST_CASE("a shape whose element count overflows is refused by field, not read as a few elements") {
  // 4611686018427387905 * 4 wraps to 4 in 64 bits: unchecked, it would pass as 4 elements.
  const json::Value huge = json::Value::Array{json::Value(int64_t{4611686018427387905}), json::Value(4)};
  CHECK(refusal([&](json::Value& d) { value_at(d, 0).set("shape", huge); }) ==
        "[tape] t.json: values[0].shape is (4611686018427387905, 4), which has more elements than fit in 64 bits");
  CHECK(refusal([&](json::Value& d) { value_at(d, 0).find("value")->set("shape", huge); }) ==
        "[tape] t.json: values[0].value.shape is (4611686018427387905, 4), which has more elements than fit in 64 "
        "bits");
  CHECK(refusal([&](json::Value& d) { event_at(d, 0).find("contribution")->set("shape", huge); }) ==
        "[tape] t.json: backward.events[0].contribution.shape is (4611686018427387905, 4), which has more elements "
        "than fit in 64 bits");
  // An extent of 0 still needs the other extents' product to fit.
  const json::Value zero = json::Value::Array{json::Value(int64_t{4611686018427387905}), json::Value(0), json::Value(4)};
  CHECK(refusal([&](json::Value& d) { value_at(d, 0).set("shape", zero); }) ==
        "[tape] t.json: values[0].shape is (4611686018427387905, 0, 4), which has more elements than fit in 64 bits");
}

TEST_CASE("read_tape reads regular files of at most its bound (256 MiB by default)") {
  CHECK(tape::kMaxDumpBytes == size_t{256} << 20);
  char name[] = "/tmp/tapegrad-tape-XXXXXX";
  REQUIRE(::mkdtemp(name) != nullptr);
  const std::string folder = name, path = folder + "/t.json", fifo = folder + "/pipe";
  const std::string text = json::dumps(sample_dump(), 1);
  io::write_file_atomic(path, text);
  CHECK(tape::read_tape(path).values.size() == 9);
  CHECK(message_of([&] { tape::read_tape(path, text.size() - 1); }) ==
        "[tape] cannot read " + path + ": it is " + std::to_string(text.size()) + " bytes, more than the " +
            std::to_string(text.size() - 1) + " its reader accepts");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(message_of([&] { tape::read_tape(fifo); }) == "[tape] cannot read " + fifo + ": it is not a regular file (a FIFO)");
  CHECK(message_of([] { tape::read_tape("/dev/zero"); }) ==
        "[tape] cannot read /dev/zero: it is not a regular file (a character device)");
  std::filesystem::remove_all(folder);
}

TEST_CASE("the indices: entry() and producer() find values by id and node, and refuse others") {
  const tape::Tape t = tape::parse_tape(json::dumps(sample_dump(), 1), "t.json");
  CHECK(t.entry(-2).label == "weights");
  CHECK(t.entry(1).op == "gather");
  CHECK(t.producer(3).op == "cross_entropy");
  CHECK(message_of([&] { t.entry(42); }) == "[tape] t.json: no value with id 42");
  CHECK(message_of([&] { t.producer(9); }) == "[tape] t.json: no value produced by node 9");
}
