// Reading tests/fixtures/bob/adamw_golden.txt (written by tests/fixtures/gen_bob_adamw.py from
// docs/bob.md's contract alone): "key value ..." lines whose floats are the 8 hex digits of their
// bits.
#pragma once

#include <doctest/doctest.h>

#include <bit>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace bob_golden {

// The words after `key` on the first line that starts with it ("adamw_w 3" is a key too).
inline std::vector<std::string> words(const std::string& key) {
  const char* root = std::getenv("TAPEGRAD_SOURCE_ROOT");
  REQUIRE_MESSAGE(root != nullptr, "TAPEGRAD_SOURCE_ROOT is not set; run the tests with meson test");
  const std::string path = std::string(root) + "/tests/fixtures/bob/adamw_golden.txt";
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.starts_with(key + " ")) continue;
    std::istringstream rest(line.substr(key.size() + 1));
    std::vector<std::string> out;
    for (std::string word; rest >> word;) out.push_back(word);
    return out;
  }
  FAIL("no " << key << " in " << path);
  return {};
}

inline uint64_t hex(const std::string& word) { return std::stoull(word, nullptr, 16); }

// The floats after `key`, from their bits.
inline std::vector<float> floats(const std::string& key) {
  std::vector<float> out;
  for (const std::string& word : words(key)) out.push_back(std::bit_cast<float>(static_cast<uint32_t>(hex(word))));
  return out;
}

}  // namespace bob_golden
