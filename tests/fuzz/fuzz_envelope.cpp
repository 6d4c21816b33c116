// libFuzzer target: the checkpoint envelope's decoder (src/io/envelope) with bob's identity, and a
// generic one, on any bytes. A refusal is a tapegrad::RefusedFile (or Error); a crash, a sanitizer
// report or any other exception is a finding. What decodes must encode back to the same bytes.
#include <cstddef>
#include <cstdint>
#include <string>

#include "tapegrad/tensor/error.hpp"

#include "bob_formats.hpp"
#include "tapegrad/io/envelope.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  const tapegrad::io::EnvelopeIdentity identity = tapegrad::io::bob_checkpoint_identity();
  try {
    const tapegrad::io::Checkpoint c = tapegrad::io::decode(bytes, identity, "fuzz.ckpt");
    if (tapegrad::io::encode(identity, c.step, c.planes) != bytes) __builtin_trap();
  } catch (const tapegrad::Error&) {
  }
  return 0;
}
