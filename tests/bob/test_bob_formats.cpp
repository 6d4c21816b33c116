// Tests for bob's input record and predictions (apps/bob/bob_formats.*).
//
// Rule: encodings are checked against golden bytes from tests/fixtures/gen_bob_golden.py (written
// from the contract, not from this code); every refusal is asserted by its full message.
#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>

#include "tapegrad/tensor/error.hpp"
#include "bob_formats.hpp"

namespace io = tapegrad::io;

namespace {

// The value of `key` in tests/fixtures/bob_golden.txt, as bytes (values there are hex).
std::string golden_bytes(const std::string& key) {
  const char* root = std::getenv("TAPEGRAD_SOURCE_ROOT");
  REQUIRE_MESSAGE(root != nullptr, "TAPEGRAD_SOURCE_ROOT is not set; run the tests with meson test");
  std::ifstream in(std::string(root) + "/tests/fixtures/bob_golden.txt");
  REQUIRE_MESSAGE(in.good(), "cannot open tests/fixtures/bob_golden.txt");
  std::string line;
  while (std::getline(in, line)) {
    if (!line.starts_with(key + " ")) continue;
    const std::string hex = line.substr(key.size() + 1);
    std::string bytes;
    for (size_t i = 0; i + 1 < hex.size(); i += 2) bytes += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
    return bytes;
  }
  FAIL("no " << key << " in tests/fixtures/bob_golden.txt");
  return {};
}

// The corpus gen_bob_golden.py uses: 600 bytes that visit every byte value.
std::string golden_corpus() {
  std::string corpus;
  for (int i = 0; i < 600; ++i) corpus += static_cast<char>((i * 37 + 11) % 256);
  return corpus;
}

const std::string record_path = "inputs/bob.rec";

void check_refused(const std::string& bytes, const std::string& why) {
  const std::string message = "input record " + record_path + " refused: " + why;
  CHECK_THROWS_WITH_AS(io::decode_record(bytes, record_path), message.c_str(), tapegrad::RefusedFile);
}

std::string with_byte(std::string bytes, size_t offset, uint8_t value) {
  bytes[offset] = static_cast<char>(value);
  return bytes;
}

std::string with_u32(std::string bytes, size_t offset, uint32_t value) {
  std::string field;
  for (int k = 0; k < 4; ++k) field += static_cast<char>((value >> (8 * k)) & 0xff);
  return bytes.replace(offset, 4, field);
}

}  // namespace

TEST_CASE("make_record and encode_record match the Python golden") {
  const io::BobRecord record = io::make_record(golden_corpus(), 100, {"hi", "", "xyz"});
  const std::string bytes = io::encode_record(record);
  CHECK(bytes.size() == io::bob_record_bytes);
  CHECK(bytes == golden_bytes("bob_record"));
}

TEST_CASE("make_record takes 257 consecutive bytes and each prompt's last byte") {
  const std::string corpus = golden_corpus();
  const io::BobRecord record = io::make_record(corpus, 100, {"hi", "", "xyz"});
  for (size_t i = 0; i < io::bob_examples; ++i) {
    CAPTURE(i);
    CHECK(record.x[i] == static_cast<uint8_t>(corpus[100 + i]));
    CHECK(record.y[i] == static_cast<uint8_t>(corpus[101 + i]));
  }
  CHECK(record.prompt_last == std::array<uint32_t, 3>{'i', io::bob_empty_prompt, 'z'});

  SUBCASE("missing prompts are empty") {
    CHECK(io::make_record(corpus, 0, {}).prompt_last ==
          std::array<uint32_t, 3>{io::bob_empty_prompt, io::bob_empty_prompt, io::bob_empty_prompt});
    CHECK(io::make_record(corpus, 0, {"\xff"}).prompt_last ==
          std::array<uint32_t, 3>{255, io::bob_empty_prompt, io::bob_empty_prompt});
  }
  SUBCASE("the last 257 bytes of the corpus are enough") {
    CHECK(io::make_record(corpus, 600 - 257, {}).y[255] == static_cast<uint8_t>(corpus[599]));
  }
}

TEST_CASE("make_record refuses a short corpus and too many prompts") {
  const std::string corpus = golden_corpus();
  CHECK_THROWS_WITH_AS(io::make_record(corpus.substr(0, 300), 50, {}),
                       "[make_record] the corpus is 300 bytes, but 257 consecutive bytes from offset 50 need 307",
                       tapegrad::Error);
  CHECK_THROWS_WITH_AS(io::make_record(corpus, 344, {}),
                       "[make_record] the corpus is 600 bytes, but 257 consecutive bytes from offset 344 need 601",
                       tapegrad::Error);
  CHECK_THROWS_WITH_AS(io::make_record(corpus, 1000, {}),
                       "[make_record] the corpus is 600 bytes, but 257 consecutive bytes from offset 1000 need 1257",
                       tapegrad::Error);
  CHECK_THROWS_WITH_AS(io::make_record(corpus, 0, {"a", "b", "c", "d"}),
                       "[make_record] 4 prompts given; a bob record holds at most 3", tapegrad::Error);
}

TEST_CASE("decode_record reads back what encode_record wrote") {
  const std::string bytes = golden_bytes("bob_record");
  const io::BobRecord record = io::decode_record(bytes, record_path);
  const io::BobRecord expected = io::make_record(golden_corpus(), 100, {"hi", "", "xyz"});
  CHECK(record.x == expected.x);
  CHECK(record.y == expected.y);
  CHECK(record.prompt_last == expected.prompt_last);

  SUBCASE("a prompt word of 255 and the empty marker are accepted") {
    const std::string edges = with_u32(with_u32(bytes, 1552, 255), 1556, 0xffffffffu);
    CHECK(io::decode_record(edges, record_path).prompt_last == std::array<uint32_t, 3>{255, 0xffffffffu, 'z'});
  }
}

TEST_CASE("decode_record refuses every bad field, naming it and its offset") {
  const std::string good = golden_bytes("bob_record");

  SUBCASE("size") {
    check_refused(good.substr(0, 1563), "it is 1563 bytes, a bob input record is exactly 1564");
    check_refused(good + "x", "it is 1565 bytes, a bob input record is exactly 1564");
    check_refused("", "it is 0 bytes, a bob input record is exactly 1564");
  }
  SUBCASE("magic") {
    check_refused(with_byte(good, 7, 'X'), "bad magic at offset 0: \"BOBINPUX\", expected \"BOBINPUT\"");
    check_refused(with_byte(good, 0, 0), "bad magic at offset 0: \"\\x00OBINPUT\", expected \"BOBINPUT\"");
  }
  SUBCASE("version") {
    check_refused(with_byte(good, 8, 2), "unknown version 2 at offset 8 (this program reads version 1)");
    check_refused(with_byte(good, 15, 1),
                  "unknown version 72057594037927937 at offset 8 (this program reads version 1)");
  }
  SUBCASE("a target that disagrees with its pair") {
    const std::string bad = with_u32(with_byte(good, 51, 0x42), 596, 0x41);
    check_refused(bad, "target 17 at offset 596 is 0x41 but pair 17 at offset 51 says 0x42");
    // y[255] is corpus byte 356, 0x7f; a u32 target may disagree by more than a byte can hold
    check_refused(with_u32(good, 1548, 0x17f),
                  "target 255 at offset 1548 is 0x17f but pair 255 at offset 527 says 0x7f");
  }
  SUBCASE("a prompt word above 255 that is not the empty marker") {
    check_refused(with_u32(good, 1556, 0x100),
                  "prompt 1 at offset 1556 is 0x100: above 255 and not the empty-prompt marker 0xffffffff");
    check_refused(with_u32(good, 1560, 0xfffffffeu),
                  "prompt 2 at offset 1560 is 0xfffffffe: above 255 and not the empty-prompt marker 0xffffffff");
  }
}

TEST_CASE("encode_predictions matches the Python golden") {
  CHECK(io::encode_predictions({{{65, 1}, {0, 0}, {255, 1}}}) == golden_bytes("bob_predictions"));
}
