// Text made safe for the formats the programs write (see text.hpp).
#include "tapegrad/io/text.hpp"

#include <cstdint>

namespace tapegrad::io {
namespace {

constexpr std::string_view kReplacement = "\xef\xbf\xbd";  // U+FFFD

// The length of the valid UTF-8 sequence at text[i] (1 to 4), or 0 if none begins there.
size_t sequence_length(std::string_view text, size_t i) {
  const auto lead = static_cast<unsigned char>(text[i]);
  if (lead < 0x80) return 1;
  size_t n = 0;
  uint32_t cp = 0, min_cp = 0;
  if ((lead & 0xe0U) == 0xc0U) n = 2, cp = lead & 0x1fU, min_cp = 0x80;
  else if ((lead & 0xf0U) == 0xe0U) n = 3, cp = lead & 0x0fU, min_cp = 0x800;
  else if ((lead & 0xf8U) == 0xf0U) n = 4, cp = lead & 0x07U, min_cp = 0x10000;
  else return 0;  // a continuation byte, or 0xf8..0xff
  if (i + n > text.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    const auto c = static_cast<unsigned char>(text[i + k]);
    if ((c & 0xc0U) != 0x80U) return 0;
    cp = (cp << 6) | (c & 0x3fU);
  }
  if (cp < min_cp || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff) return 0;
  return n;
}

}  // namespace

std::string valid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t n = sequence_length(text, i);
    if (n == 0) {
      out += kReplacement;
      ++i;
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string xml_text(std::string_view text) {
  std::string out;
  for (const char c : valid_utf8(text)) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r') out += kReplacement;
        else out += c;
    }
  }
  return out;
}

}  // namespace tapegrad::io
