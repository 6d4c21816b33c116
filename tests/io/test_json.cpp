// Tests for src/io/json: dumps byte-identical to Python's json.dumps (indent=2 and indent=None),
// parse keeping what json.loads keeps, and every error by its message.
//
// Rule: expected texts come from CPython 3.11 (tests/fixtures/python_compat_golden.json, section
// "dumps", written by gen_python_compat.py) or are written out literally here.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "tapegrad/tensor/error.hpp"
#include "tapegrad/io/json.hpp"

using namespace tapegrad;
using json::Value;

namespace {

std::string read_fixture(const std::string& name) {
  const char* root = std::getenv("TAPEGRAD_SOURCE_ROOT");
  REQUIRE_MESSAGE(root != nullptr, "TAPEGRAD_SOURCE_ROOT is not set; run the tests with `meson test`");
  const std::string path = std::string(root) + "/tests/fixtures/" + name;
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

// ---- dumps ----------------------------------------------------------------------------------------

TEST_CASE("dumps is byte-identical to json.dumps for nested objects, tricky strings and floats") {
  const Value fixture = json::parse(read_fixture("python_compat_golden.json"), "python_compat_golden.json");
  const auto& cases = fixture.find("dumps")->as_array();
  CHECK(cases.size() > 5);
  for (const auto& c : cases) {
    const std::string& compact = c.as_array()[0].as_string();   // json.dumps(obj)
    const std::string& indented = c.as_array()[1].as_string();  // json.dumps(obj, indent=2)
    INFO("object ", compact);
    const Value v = json::parse(compact);
    CHECK(json::dumps(v) == indented);
    CHECK(json::dumps(v, -1) == compact);
    CHECK(json::parse(indented) == v);
  }
}

TEST_CASE("dumps writes the values json.dumps writes in its own way") {
  const double inf = std::numeric_limits<double>::infinity();
  const Value v = Value::Array{std::nan(""), inf, -inf, -0.0, 1e16, true, false, nullptr,
                              std::numeric_limits<uint64_t>::max(), std::numeric_limits<int64_t>::min()};
  CHECK(json::dumps(v, -1) ==
        "[NaN, Infinity, -Infinity, -0.0, 1e+16, true, false, null, 18446744073709551615, -9223372036854775808]");
  CHECK(json::dumps(Value::Object{{"a", Value::Array{1, 2}}, {"b", Value::Object{}}}, 4) ==
        "{\n    \"a\": [\n        1,\n        2\n    ],\n    \"b\": {}\n}");
  CHECK(json::dumps(Value::Array{Value(Value::Array{})}, 0) == "[\n[]\n]");
  CHECK(json::dumps("caf\xc3\xa9") == "\"caf\\u00e9\"");
}

// ---- Value ----------------------------------------------------------------------------------------

TEST_CASE("set replaces a key in place and appends a new one, as a Python dict does") {
  Value d = Value::Object{{"a", 1}, {"b", 2}};
  d.set("a", 3.5);
  d.set("c", "x");
  CHECK(json::dumps(d, -1) == "{\"a\": 3.5, \"b\": 2, \"c\": \"x\"}");
  CHECK(d.find("a")->as_double() == 3.5);
  CHECK(d.find("missing") == nullptr);
}

TEST_CASE("accessors hold ints of both signs beyond 2^63 and name the types they refuse") {
  const Value big = std::numeric_limits<uint64_t>::max();
  CHECK(big.is_int());
  CHECK(big.as_uint64() == std::numeric_limits<uint64_t>::max());
  CHECK(big.as_double() == 18446744073709551616.0);
  CHECK(Value(uint64_t{5}) == Value(5));
  CHECK(Value(-3).as_int() == -3);
  CHECK_THROWS_WITH_AS(big.as_int(), "[json] integer 18446744073709551615 does not fit in int64; read it with as_uint64()",
                       Error);
  CHECK_THROWS_WITH_AS(Value(-3).as_uint64(), "[json] integer -3 is negative; expected an unsigned integer", Error);
  CHECK_THROWS_WITH_AS(Value("x").as_double(), "[json] expected number, got string", Error);
  CHECK_THROWS_WITH_AS(Value(1.5).as_int(), "[json] expected int, got float", Error);
  CHECK_THROWS_WITH_AS(Value().find("k"), "[json] expected object, got null", Error);
  CHECK_THROWS_WITH_AS(Value(true).as_array(), "[json] expected array, got bool", Error);
}

// ---- parse ----------------------------------------------------------------------------------------

TEST_CASE("parse keeps the int/float distinction of json.loads") {
  CHECK(json::parse("1").is_int());
  CHECK(json::parse("1.0").is_double());
  CHECK(json::parse("1e5").is_double());
  CHECK(json::parse("1e5").as_double() == 100000.0);
  CHECK(json::parse("-0").is_int());        // json.loads("-0") == 0, an int
  const Value negative_zero = json::parse("-0.0");
  CHECK(negative_zero.is_double());
  CHECK(std::signbit(negative_zero.as_double()));
  CHECK(json::parse("18446744073709551615").as_uint64() == std::numeric_limits<uint64_t>::max());
  CHECK(json::parse("-9223372036854775808").as_int() == std::numeric_limits<int64_t>::min());
  CHECK(json::parse("0.1").as_double() == 0.1);  // correctly rounded, as float("0.1")
  CHECK(json::parse(" [true, false, null, \"\\u00e9\"] ") ==
        Value(Value::Array{true, false, nullptr, "\xc3\xa9"}));
}

TEST_CASE("parse merges repeated keys as json.loads does: last value, first place") {
  const Value d = json::parse(R"({"a": 1, "b": 2, "a": {"c": 3}})");
  CHECK(json::dumps(d, -1) == R"({"a": {"c": 3}, "b": 2})");
}

TEST_CASE("parse names the input and simdjson's error") {
  CHECK_THROWS_WITH_AS(json::parse("[1,]", "cfg.json"),
                       "[json] malformed JSON in cfg.json: TAPE_ERROR: The JSON document has an improper structure: "
                       "missing or superfluous commas, braces, missing keys, etc.",
                       Error);
  CHECK_THROWS_WITH_AS(json::parse("  "), "[json] malformed JSON in JSON: EMPTY: Empty: no JSON found", Error);
  CHECK_THROWS_WITH_AS(json::parse("[tru]", "x.json"),
                       "[json] malformed JSON in x.json: T_ATOM_ERROR: "
                       "Problem while parsing an atom starting with the letter 't'",
                       Error);
  CHECK_THROWS_WITH_AS(json::parse("\"\xff\"", "x.json"),
                       "[json] malformed JSON in x.json: UTF8_ERROR: The input is not valid UTF-8", Error);
  CHECK_THROWS_WITH_AS(json::parse("\"abc", "x.json"),
                       "[json] malformed JSON in x.json: UNCLOSED_STRING: A string is opened, but never closed.",
                       Error);
  CHECK_THROWS_WITH_AS(json::parse("[1e400]", "x.json"),
                       "[json] malformed JSON in x.json: NUMBER_ERROR: Problem while parsing a number", Error);
}

TEST_CASE("parse says when an integer does not fit in 64 bits") {
  CHECK_THROWS_WITH_AS(json::parse(R"({"n\"1": "99999999999999999999", "seed": 123456789012345678901234567890})",
                                   "cfg.json"),
                       "[json] malformed JSON in cfg.json: integer 123456789012345678901234567890 at byte 41 does not "
                       "fit in 64 bits (tapegrad reads integers as int64 or uint64; write it with a decimal point if "
                       "a float will do)",
                       Error);
  CHECK_THROWS_WITH_AS(json::parse("[-9223372036854775809]", "x.json"),
                       "[json] malformed JSON in x.json: integer -9223372036854775809 at byte 1 does not fit in 64 bits "
                       "(tapegrad reads integers as int64 or uint64; write it with a decimal point if a float will do)",
                       Error);
}
