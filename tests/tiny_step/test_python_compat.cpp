// Tests for apps/tiny_step/python_compat (repr, round, random.Random, json string escaping) and
// src/kernels/cpu/exact_sum (math.fsum), bit-exact against CPython 3.11's own answers.
//
// Rule: the golden values come from tests/fixtures/gen_python_compat.py, never from this code;
// doubles travel as 16-hex-digit bit patterns. The fixture is read with json::parse
// (tested in test_json.cpp) from $TAPEGRAD_SOURCE_ROOT/tests/fixtures/.
#include <doctest/doctest.h>

#include <bit>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "tapegrad/tensor/error.hpp"
#include "tapegrad/io/json.hpp"
#include "python_compat.hpp"
#include "tapegrad/kernels/cpu/exact_sum.hpp"

using namespace tapegrad;

namespace {

// One section of python_compat_golden.json; the file is read once per test executable.
const json::Value& golden(std::string_view section) {
  static const json::Value fixture = [] {
    const char* root = std::getenv("TAPEGRAD_SOURCE_ROOT");
    REQUIRE_MESSAGE(root != nullptr, "TAPEGRAD_SOURCE_ROOT is not set; run the tests with `meson test`");
    const std::string path = std::string(root) + "/tests/fixtures/python_compat_golden.json";
    std::ifstream in(path, std::ios::binary);
    REQUIRE_MESSAGE(in.good(), "cannot open " << path);
    std::ostringstream text;
    text << in.rdbuf();
    return json::parse(text.str(), path);
  }();
  const json::Value* value = fixture.find(section);
  REQUIRE_MESSAGE(value != nullptr, "fixture section missing: " << section);
  return *value;
}

double from_bits(const std::string& hex) {
  uint64_t bits = 0;
  std::from_chars(hex.data(), hex.data() + hex.size(), bits, 16);
  return std::bit_cast<double>(bits);
}

// The bit pattern as the fixture writes it, or "nan" for any NaN.
std::string bits_of(double x) {
  if (std::isnan(x)) return "nan";
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(std::bit_cast<uint64_t>(x)));
  return buf;
}

}  // namespace

// ---- repr(float) ------------------------------------------------------------------------------

TEST_CASE("float_repr matches repr(float) on tricky doubles") {
  const auto& cases = golden("repr").as_array();
  CHECK(cases.size() > 500);
  for (const auto& c : cases) {
    const auto& row = c.as_array();
    const double x = from_bits(row[0].as_string());
    INFO("bits ", row[0].as_string());
    CHECK(py::float_repr(x) == row[1].as_string());
  }
}

TEST_CASE("float_repr writes specials and the format boundaries as Python does") {
  CHECK(py::float_repr(std::numeric_limits<double>::infinity()) == "inf");
  CHECK(py::float_repr(-std::numeric_limits<double>::infinity()) == "-inf");
  CHECK(py::float_repr(std::nan("")) == "nan");
  CHECK(py::float_repr(1e-5) == "1e-05");
  CHECK(py::float_repr(123456789012345.6) == "123456789012345.6");
}

// ---- round(x, ndigits) --------------------------------------------------------------------------

TEST_CASE("round matches round(x, ndigits) bit for bit, ties and huge values included") {
  const auto& cases = golden("round").as_array();
  CHECK(cases.size() > 2000);
  for (const auto& c : cases) {
    const auto& row = c.as_array();
    const double x = from_bits(row[0].as_string());
    const auto ndigits = static_cast<int>(row[1].as_int());
    INFO("round(", py::float_repr(x), ", ", ndigits, ")");
    CHECK(bits_of(py::round(x, ndigits)) == row[2].as_string());
  }
}

TEST_CASE("round keeps inf and nan, and refuses an overflowing result") {
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(py::round(inf, 2) == inf);
  CHECK(py::round(-inf, -3) == -inf);
  CHECK(std::isnan(py::round(std::nan(""), 2)));
  CHECK(py::round(0.125, 2) == 0.12);
  CHECK(py::round(2.675, 2) == 2.67);
  CHECK(std::signbit(py::round(-0.0001, 2)));
  CHECK_THROWS_WITH_AS(py::round(1.7976931348623157e308, -308),
                       "[round] rounded value too large to represent: round(1.7976931348623157e+308, -308)",
                       Error);
}

// ---- math.fsum ----------------------------------------------------------------------------------

TEST_CASE("exact_sum matches math.fsum, contiguous and strided") {
  const auto& cases = golden("fsum").as_array();
  CHECK(cases.size() > 300);
  for (const auto& c : cases) {
    const auto& row = c.as_array();
    std::vector<double> values;
    for (const auto& v : row[0].as_array()) values.push_back(from_bits(v.as_string()));
    const std::string& expected = row[1].as_string();
    INFO("fsum of ", values.size(), " values, expected ", expected);
    CHECK(bits_of(cpu::exact_sum(values.data(), values.size())) == expected);

    constexpr size_t kStride = 3;  // the same values as a column of a (n, 3) matrix
    std::vector<double> column(values.size() * kStride, 1e300);
    for (size_t i = 0; i < values.size(); ++i) column[i * kStride] = values[i];
    CHECK(bits_of(cpu::exact_sum(column.data(), values.size(), kStride)) == expected);
  }
}

TEST_CASE("exact_sum returns nan or inf where math.fsum raises") {
  const double inf = std::numeric_limits<double>::infinity();
  const double opposite_infinities[] = {inf, 1.0, -inf};  // fsum: ValueError -inf + inf
  CHECK(std::isnan(cpu::exact_sum(opposite_infinities, 3)));
  const double overflow[] = {1e308, 1e308, -1.0};  // fsum: OverflowError
  CHECK(cpu::exact_sum(overflow, 3) == inf);
  const double negative_overflow[] = {-1e308, -1e308};
  CHECK(cpu::exact_sum(negative_overflow, 2) == -inf);
  CHECK(cpu::exact_sum(overflow, 0) == 0.0);  // the empty sum
}

// ---- random.Random ------------------------------------------------------------------------------

TEST_CASE("Random reproduces random.Random(seed).random() and uniform(-0.5, 0.5)") {
  const auto& streams = golden("random").as_object();
  CHECK(streams.size() == 10);
  for (const auto& [seed_key, expected] : streams) {
    const std::string& seed_text = seed_key;  // a structured binding cannot be captured in clang 14
    INFO("seed ", seed_text);
    auto make = [&seed_text] {
      if (seed_text[0] == '-') return py::Random::from_int(std::stoll(seed_text));
      return py::Random(std::stoull(seed_text));
    };
    py::Random for_random = make();
    py::Random for_uniform = make();
    for (const auto& bits : expected.find("random")->as_array())
      CHECK(bits_of(for_random.random()) == bits.as_string());
    for (const auto& bits : expected.find("uniform")->as_array())
      CHECK(bits_of(for_uniform.uniform(-0.5, 0.5)) == bits.as_string());
  }
}

TEST_CASE("Random(7) and round(x, 2) give the tiny step's starting parameters") {
  // The reference (docs/tiny_step.md, "Model"): value = round(rng.uniform(-0.5, 0.5), 2); embedding
  // (4, 2) then weights (2, 4).
  const double expected[] = {-0.18, -0.35, 0.15, -0.43, 0.04, -0.13, -0.44, 0.01,
                             -0.46, -0.07, -0.43, -0.41, -0.08, 0.33, -0.38, -0.28};
  py::Random rng(7);
  for (double e : expected) CHECK(py::round(rng.uniform(-0.5, 0.5), 2) == e);
}

TEST_CASE("Random::from_int seeds with the magnitude, as CPython does") {
  py::Random negative = py::Random::from_int(-7);
  py::Random positive(7);
  for (int i = 0; i < 5; ++i) CHECK(negative.genrand_uint32() == positive.genrand_uint32());
}

// ---- json.dumps of a string ---------------------------------------------------------------------

TEST_CASE("json_string escapes as json.dumps does with ensure_ascii") {
  const auto& cases = golden("json_string").as_array();
  CHECK(cases.size() > 10);
  for (const auto& c : cases) {
    const auto& row = c.as_array();
    INFO("expected ", row[1].as_string());
    CHECK(py::json_string(row[0].as_string()) == row[1].as_string());
  }
}

TEST_CASE("json_string refuses invalid UTF-8 and names the byte") {
  CHECK_THROWS_WITH_AS(py::json_string("\xff"),
                       "[json_string] invalid UTF-8 at byte offset 0 (0xff); JSON text must be valid UTF-8",
                       Error);
  CHECK_THROWS_WITH_AS(py::json_string("ab\xc3"),  // truncated two-byte sequence
                       "[json_string] invalid UTF-8 at byte offset 2 (0xc3); JSON text must be valid UTF-8",
                       Error);
  CHECK_THROWS_WITH_AS(py::json_string("a\xe2\x28\xa1"),  // second byte is not a continuation
                       "[json_string] invalid UTF-8 at byte offset 2 (0x28); JSON text must be valid UTF-8",
                       Error);
  CHECK_THROWS_WITH_AS(py::json_string("\xe0\x80\xaf"),  // overlong '/'
                       "[json_string] invalid UTF-8 at byte offset 0 (0xe0); JSON text must be valid UTF-8",
                       Error);
  CHECK_THROWS_WITH_AS(py::json_string("x\xed\xa0\x80"),  // an encoded surrogate U+D800
                       "[json_string] invalid UTF-8 at byte offset 1 (0xed); JSON text must be valid UTF-8",
                       Error);
  CHECK_THROWS_WITH_AS(py::json_string("\xf4\x90\x80\x80"),  // above U+10FFFF
                       "[json_string] invalid UTF-8 at byte offset 0 (0xf4); JSON text must be valid UTF-8",
                       Error);
  CHECK_THROWS_WITH_AS(py::json_string("\x80"),  // a stray continuation byte
                       "[json_string] invalid UTF-8 at byte offset 0 (0x80); JSON text must be valid UTF-8",
                       Error);
}
