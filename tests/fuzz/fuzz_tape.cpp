// libFuzzer target: the tape reader (apps/tape/tape_file) and the views built on what it accepts
// (tape show, tape dot, tape step's walk, the page). A refusal is a tapegrad::Error; a crash, a
// sanitizer report or any other exception is a finding.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "tapegrad/tensor/error.hpp"

#include "stepper.hpp"
#include "tape_file.hpp"
#include "views.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const tape::Tape t = tape::parse_tape(text, "fuzz.json");
    (void)tape::show_table(t);
    (void)tape::to_dot(t);
    (void)tape::to_html({t});
    std::istringstream keys("n\nn\nb\nj 3\nn\nq\n");
    std::ostringstream out;
    (void)tape::step_lines(t, keys, out);
  } catch (const tapegrad::Error&) {
  }
  return 0;
}
