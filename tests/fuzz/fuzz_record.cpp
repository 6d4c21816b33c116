// libFuzzer target: bob's input record reader (apps/bob/bob_formats) on any bytes. A refusal is a
// tapegrad::Error; a crash, a sanitizer report or any other exception is a finding. What decodes
// must encode back to the same bytes.
#include <cstddef>
#include <cstdint>
#include <string>

#include "tapegrad/tensor/error.hpp"

#include "bob_formats.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    const tapegrad::io::BobRecord r = tapegrad::io::decode_record(bytes, "fuzz.rec");
    if (tapegrad::io::encode_record(r) != bytes) __builtin_trap();
  } catch (const tapegrad::Error&) {
  }
  return 0;
}
