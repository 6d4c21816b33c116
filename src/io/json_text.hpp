// The text the JSON writer (json.hpp) writes, the same bytes CPython 3.11's json.dumps writes:
// repr(float) and the escaped form of a string. Checked against CPython's own answers
// (tests/fixtures/gen_python_compat.py, tests/tiny_step).
#pragma once

#include <string>
#include <string_view>

namespace tapegrad::py {

// repr(x) for a float: the shortest digits that read back as x; exponent form when the decimal
// exponent is < -4 or >= 16 ("1e-05", "1e+16"), else positional with at least one digit after
// the point ("0.0001", "100.0"); "inf", "-inf", "nan".
std::string float_repr(double x);

// The JSON text of a string as json.dumps writes it (ensure_ascii=True), quotes included:
// \" \\ \n \r \t \b \f; other control characters, DEL (0x7f) and every non-ASCII code point as
// \u00XX / \uXXXX in lowercase hex, with a surrogate pair above U+FFFF; '/' is not escaped.
// Throws tapegrad::Error naming the byte offset when utf8 is not valid UTF-8.
std::string json_string(std::string_view utf8);

}  // namespace tapegrad::py
