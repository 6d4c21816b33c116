// libFuzzer target: the JSON reader (src/io/json) on any bytes. A refusal is a tapegrad::Error;
// anything else (a crash, a sanitizer report, another exception) is a finding. What parses must
// write back and parse again to the same text.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tapegrad/tensor/error.hpp"

#include "tapegrad/io/json.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const tapegrad::json::Value v = tapegrad::json::parse(text, "fuzz input");
    const std::string once = tapegrad::json::dumps(v, 1);
    if (tapegrad::json::dumps(tapegrad::json::parse(once, "dumped"), 1) != once) __builtin_trap();
  } catch (const tapegrad::Error&) {
  }
  return 0;
}
