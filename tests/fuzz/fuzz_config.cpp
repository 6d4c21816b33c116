// libFuzzer target: the tiny step's config loader (apps/tiny_step: load_config, then validate) on
// any bytes, through a file as the program reads it. A refusal is a tapegrad::Error; a crash, a
// sanitizer report or any other exception is a finding.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "tapegrad/tensor/error.hpp"

#include "tiny_model.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/tapegrad-fuzz-config-" + std::to_string(::getpid()) + ".json";
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
    tiny::validate(tiny::load_config(path));
  } catch (const tapegrad::Error&) {
  }
  return 0;
}
