// The JSON writer's text (json_text.hpp): ports of CPython 3.11's float_repr_style 'r' and its
// ensure_ascii string encoder.
//
// Rule: decimal conversions go through exact routines only (std::to_chars for shortest digits), so
// no result depends on an intermediate binary rounding. The process keeps the default "C" locale.
#include "tapegrad/io/json_text.hpp"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>

#include "tapegrad/tensor/error.hpp"

namespace tapegrad::py {

// ---- repr(float) ------------------------------------------------------------------------------

std::string float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  // Shortest round-trip digits in scientific form: "[-]d[.ddd]e(+|-)XX", at least two exponent
  // digits, which is also Python's exponent form.
  char buf[32];
  const char* end = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific).ptr;
  const std::string_view sci(buf, static_cast<size_t>(end - buf));
  const size_t e_pos = sci.find('e');
  int exponent = 0;
  std::from_chars(sci.data() + e_pos + (sci[e_pos + 1] == '+' ? 2 : 1), sci.data() + sci.size(), exponent);
  if (exponent < -4 || exponent >= 16) return std::string(sci);

  const bool negative = sci[0] == '-';
  std::string digits;  // the significant digits d1 d2 ... without the point: x = 0.d1d2... * 10^(exponent+1)
  for (char c : sci.substr(negative ? 1 : 0, e_pos - (negative ? 1 : 0)))
    if (c != '.') digits += c;
  std::string out = negative ? "-" : "";
  if (exponent < 0) {  // 0.000ddd
    out += "0.";
    out.append(static_cast<size_t>(-exponent - 1), '0');
    out += digits;
    return out;
  }
  const size_t int_len = static_cast<size_t>(exponent) + 1;
  if (digits.size() <= int_len) {  // integral: ddd000.0
    out += digits;
    out.append(int_len - digits.size(), '0');
    out += ".0";
  } else {  // ddd.ddd
    out += digits.substr(0, int_len);
    out += '.';
    out += digits.substr(int_len);
  }
  return out;
}

// ---- round(x, ndigits) --------------------------------------------------------------------------

// ---- json.dumps of a string ---------------------------------------------------------------------

namespace {

void append_u_escape(std::string& out, uint32_t unit) {  // \uXXXX, lowercase hex
  constexpr char kHex[] = "0123456789abcdef";
  out += "\\u";
  for (int shift = 12; shift >= 0; shift -= 4) out += kHex[(unit >> shift) & 0xfU];
}

[[noreturn]] void invalid_utf8(std::string_view utf8, size_t offset) {
  char byte[8];
  std::snprintf(byte, sizeof byte, "0x%02x", static_cast<unsigned>(static_cast<unsigned char>(utf8[offset])));
  throw Error("[json_string] invalid UTF-8 at byte offset " + std::to_string(offset) + " (" + byte +
              "); JSON text must be valid UTF-8");
}

// The code point of the multi-byte sequence starting at utf8[i]; advances i past it. Strict:
// rejects stray continuation bytes, truncated sequences, overlong forms, surrogates, > U+10FFFF.
uint32_t decode_multibyte(std::string_view utf8, size_t& i) {
  const auto lead = static_cast<unsigned char>(utf8[i]);
  size_t length = 0;
  uint32_t cp = 0;
  uint32_t min_cp = 0;
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2, cp = lead & 0x1fU, min_cp = 0x80;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3, cp = lead & 0x0fU, min_cp = 0x800;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4, cp = lead & 0x07U, min_cp = 0x10000;
  } else {
    invalid_utf8(utf8, i);
  }
  for (size_t k = 1; k < length; ++k) {
    if (i + k >= utf8.size()) invalid_utf8(utf8, i);  // truncated at the end: name the lead byte
    const auto c = static_cast<unsigned char>(utf8[i + k]);
    if ((c & 0xc0U) != 0x80U) invalid_utf8(utf8, i + k);
    cp = (cp << 6) | (c & 0x3fU);
  }
  if (cp < min_cp || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff) invalid_utf8(utf8, i);
  i += length;
  return cp;
}

}  // namespace

std::string json_string(std::string_view utf8) {
  std::string out;
  out.reserve(utf8.size() + 2);
  out += '"';
  for (size_t i = 0; i < utf8.size();) {
    const auto c = static_cast<unsigned char>(utf8[i]);
    if (c >= 0x80) {
      const uint32_t cp = decode_multibyte(utf8, i);
      if (cp < 0x10000) {
        append_u_escape(out, cp);
      } else {  // UTF-16 surrogate pair
        append_u_escape(out, 0xd800U + ((cp - 0x10000U) >> 10));
        append_u_escape(out, 0xdc00U + ((cp - 0x10000U) & 0x3ffU));
      }
      continue;
    }
    ++i;
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || c == 0x7f) append_u_escape(out, c);
        else out += static_cast<char>(c);
    }
  }
  out += '"';
  return out;
}

}  // namespace tapegrad::py
