// Text from outside (a path, a title, a label) made safe for the formats the programs write.
//
// Rule: invalid UTF-8 is never passed on and never refused: each byte that does not begin a valid
// sequence (strict: no overlong forms, no surrogates, nothing above U+10FFFF) becomes U+FFFD, the
// replacement character, as a browser shows it; valid text is unchanged, byte for byte.
#pragma once

#include <string>
#include <string_view>

namespace tapegrad::io {

// `text` with every invalid UTF-8 byte replaced by U+FFFD (the rule above).
std::string valid_utf8(std::string_view text);

// `text` as XML (SVG, HTML) character data or attribute value: valid UTF-8 (as valid_utf8), with
// & < > " ' written as entities, and the control characters XML 1.0 forbids (all below 0x20 but
// tab, newline and carriage return) as U+FFFD. "<script>" reads as text, never as markup.
std::string xml_text(std::string_view text);

}  // namespace tapegrad::io
