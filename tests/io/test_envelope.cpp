// Tests for the checkpoint envelope (src/io/envelope.*) and atomic files (src/io/atomic_file.*).
//
// Rule: the encoder is checked against golden bytes from tests/fixtures/gen_bob_golden.py (written
// from the contract, not from this code); every refusal is asserted by its full message, and the
// refused file must be byte-identical afterwards. Files live in a fresh folder under /tmp.
#include <doctest/doctest.h>
#include <unistd.h>
#include <zlib.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "tapegrad/tensor/error.hpp"
#include "tapegrad/io/atomic_file.hpp"
#include "bob_formats.hpp"
#include "tapegrad/io/envelope.hpp"
#include "temp_dir.hpp"

namespace io = tapegrad::io;
namespace fs = std::filesystem;

namespace {

using tapegrad::testing::TempDir;

// The "key value" lines of tests/fixtures/bob_golden.txt.
std::map<std::string, std::string> golden() {
  const char* root = std::getenv("TAPEGRAD_SOURCE_ROOT");
  REQUIRE_MESSAGE(root != nullptr, "TAPEGRAD_SOURCE_ROOT is not set; run the tests with meson test");
  std::ifstream in(std::string(root) + "/tests/fixtures/bob_golden.txt");
  REQUIRE_MESSAGE(in.good(), "cannot open tests/fixtures/bob_golden.txt");
  std::map<std::string, std::string> values;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.find(' ');
    values[line.substr(0, space)] = line.substr(space + 1);
  }
  return values;
}

std::string to_hex(std::string_view bytes) {
  static const char digits[] = "0123456789abcdef";
  std::string hex;
  for (const char c : bytes) {
    hex += digits[static_cast<unsigned char>(c) >> 4];
    hex += digits[static_cast<unsigned char>(c) & 15];
  }
  return hex;
}

// The planes gen_bob_golden.py fills (exact in binary32): P, M, V.
std::vector<std::vector<float>> bob_planes() {
  std::vector<std::vector<float>> planes(3, std::vector<float>(65536));
  for (int i = 0; i < 65536; ++i) {
    planes[0][i] = static_cast<float>(i - 32768) / 1024.0f;
    planes[1][i] = static_cast<float>(i % 251) / 4.0f;
    planes[2][i] = static_cast<float>(i) / 65536.0f;
  }
  return planes;
}

// bob's layout: the offsets of the fields after the four identities (65 + 65 + 54 + 11 bytes).
constexpr size_t payload_offset = 223, chunk_bytes_offset = 231, chunk_count_offset = 255;
constexpr size_t planes_offset = 259, crc_offset = 786691, bob_file_bytes = 786695;

uint32_t crc_of(std::string_view bytes) {
  return static_cast<uint32_t>(::crc32(0, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
}

// The bytes with a field replaced (little-endian).
std::string with_u64(std::string bytes, size_t offset, uint64_t value) {
  for (int k = 0; k < 8; ++k) bytes[offset + k] = static_cast<char>((value >> (8 * k)) & 0xff);
  return bytes;
}
std::string with_u32(std::string bytes, size_t offset, uint32_t value) {
  for (int k = 0; k < 4; ++k) bytes[offset + k] = static_cast<char>((value >> (8 * k)) & 0xff);
  return bytes;
}

// The bytes with a valid CRC again, as a writer with these fields would have written them.
std::string resealed(const std::string& bytes) {
  return with_u32(bytes, bytes.size() - 4, crc_of(std::string_view(bytes).substr(0, bytes.size() - 4)));
}

std::string hex32(uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", value);
  return text;
}

// Writes `bytes` to a file, reads it as bob's checkpoint, and checks the refusal message and that
// the file is unchanged.
void check_refused(const std::string& bytes, const std::string& why,
                   const io::EnvelopeIdentity& expected = io::bob_checkpoint_identity()) {
  TempDir dir;
  const std::string path = dir.file("bob.ckpt");
  io::write_file_atomic(path, bytes);
  const std::string message = "checkpoint " + path + " refused: " + why;
  CHECK_THROWS_WITH_AS(io::read(path, expected), message.c_str(), tapegrad::RefusedFile);
  CHECK(io::read_file(path) == bytes);
  CHECK(dir.entries() == std::set<std::string>{"bob.ckpt"});
}

const std::string bob_learner_text =
    "next-byte-cross-entropy-mean|adamw-decoupled|lr=0.1 beta1=0.9 beta2=0.95 eps=1e-08 wd=0.01";

// bob's learner identity with other hyperparameters.
std::string bob_learner(float lr, float beta1, float beta2, float eps, float wd) {
  std::string learner = "next-byte-cross-entropy-mean|adamw-decoupled|";
  for (const float value : {lr, beta1, beta2, eps, wd}) io::append_f32(learner, value);
  return learner;
}

}  // namespace

TEST_CASE("bob's checkpoint identity is the contract's, byte for byte") {
  const io::EnvelopeIdentity identity = io::bob_checkpoint_identity();
  CHECK(identity.schema == "bob-raw-pmv-f32-v1|parameter-order:p-then-m-then-v|payload=786432");
  CHECK(to_hex(identity.learner) == to_hex("next-byte-cross-entropy-mean|adamw-decoupled|") +
                                        "cdcccc3d"
                                        "6666663f"
                                        "3333733f"
                                        "77cc2b32"
                                        "0ad7233c");
  CHECK(identity.data == "raw-byte-sequence|vocabulary=256|prompts=3|record=1564");
  CHECK(identity.seed == "bob-seed-v1");
  CHECK(identity.payload_bytes == 786432);
  CHECK(identity.chunk_bytes == 262144);
  CHECK(identity.updates_per_invocation == 10);
  CHECK(identity.chunk_count == 3);
  CHECK(identity.describe_learner(identity.learner) == bob_learner_text);
}

TEST_CASE("bob's learner description: numbers, or what is wrong with the tail") {
  const auto describe = io::bob_checkpoint_identity().describe_learner;
  CHECK(describe(bob_learner(0.2f, 0.9f, 0.95f, 1e-8f, 0.01f)) ==
        "next-byte-cross-entropy-mean|adamw-decoupled|lr=0.2 beta1=0.9 beta2=0.95 eps=1e-08 wd=0.01");
  CHECK(describe(bob_learner(-0.0f, INFINITY, 1.0f, 1e-45f, 3e38f)) ==
        "next-byte-cross-entropy-mean|adamw-decoupled|lr=-0 beta1=inf beta2=1 eps=1e-45 wd=3e+38");
  const std::string short_tail = bob_learner(0.1f, 0.9f, 0.95f, 1e-8f, 0.01f).substr(0, 45 + 16);
  CHECK(describe(short_tail) ==
        "next-byte-cross-entropy-mean|adamw-decoupled|(a hyperparameter tail of 16 bytes, not 20: "
        "\\xcd\\xcc\\xcc=fff?33s?w\\xcc+2)");
  CHECK(describe("no bars at all\n") == "no bars at all\\x0a");
}

TEST_CASE("printable_bytes escapes non-printable bytes and the backslash") {
  CHECK(io::printable_bytes(std::string("a\0b\xff\\ ~\x7f", 8)) == "a\\x00b\\xff\\\\ ~\\x7f");
  CHECK(io::printable_bytes("") == "");
}

TEST_CASE("encode matches the Python golden: bob's checkpoint") {
  const auto values = golden();
  const std::string bytes = io::encode(io::bob_checkpoint_identity(), 1234, bob_planes());
  CHECK(bytes.size() == std::stoull(values.at("bob_checkpoint_size")));
  CHECK(bytes.size() == bob_file_bytes);
  CHECK(to_hex(bytes.substr(0, planes_offset)) == values.at("bob_checkpoint_header"));
  CHECK(to_hex(bytes.substr(crc_offset)) == values.at("bob_checkpoint_crc"));
}

// The small general envelope of gen_bob_golden.py's tiny_checkpoint: its identity and planes.
io::EnvelopeIdentity tiny_identity() {
  return {.schema = "tiny-schema",
          .learner = std::string("tiny\0\xff|", 7),
          .data = "d",
          .seed = "",
          .payload_bytes = 16,
          .chunk_bytes = 8,
          .updates_per_invocation = 7,
          .chunk_count = 2};
}
const std::vector<std::vector<float>> tiny_planes = {{1.5f, -2.0f}, {0.25f, 65504.0f}};

TEST_CASE("encode matches the Python golden: a small general envelope") {
  const io::EnvelopeIdentity identity = tiny_identity();
  const std::vector<std::vector<float>>& planes = tiny_planes;
  const std::string bytes = io::encode(identity, (uint64_t{1} << 40) + 5, planes);
  CHECK(to_hex(bytes) == golden().at("tiny_checkpoint"));

  const io::Checkpoint back = io::decode(bytes, identity, "tiny.ckpt");
  CHECK(back.step == (uint64_t{1} << 40) + 5);
  CHECK(back.planes == planes);
}

TEST_CASE("inspect gives every field a file stores, without an expected identity") {
  const io::EnvelopeIdentity identity = tiny_identity();
  const std::vector<std::vector<float>>& planes = tiny_planes;
  const std::string bytes = io::encode(identity, 42, planes);

  const io::EnvelopeContents found = io::inspect(bytes, "tiny.ckpt");
  CHECK(found.identity.schema == identity.schema);
  CHECK(found.identity.learner == identity.learner);
  CHECK(found.identity.data == "d");
  CHECK(found.identity.seed.empty());
  CHECK(found.identity.payload_bytes == 16);
  CHECK(found.identity.chunk_bytes == 8);
  CHECK(found.identity.chunk_count == 2);
  CHECK(found.identity.updates_per_invocation == 7);
  CHECK(found.step == 42);
  REQUIRE(found.planes.size() == 16);
  CHECK(found.planes.data() == bytes.data() + bytes.size() - 4 - 16);  // a view, just before the CRC
  CHECK(io::load_f32(found.planes, 12) == 65504.0f);
  // what inspect found is what decode then expects: the file passes
  CHECK(io::decode(bytes, found.identity, "tiny.ckpt").planes == planes);

  // structure and CRC are still checked, with decode's messages
  std::string damaged = bytes;
  damaged[damaged.size() - 6] ^= 1;
  std::string crc_message;
  try {
    io::decode(damaged, identity, "tiny.ckpt");
  } catch (const tapegrad::RefusedFile& e) {
    crc_message = e.what();
  }
  CHECK(crc_message.rfind("checkpoint tiny.ckpt refused: bad CRC-32: stored ", 0) == 0);
  CHECK_THROWS_WITH_AS(io::inspect(damaged, "tiny.ckpt"), crc_message.c_str(), tapegrad::RefusedFile);
  CHECK_THROWS_WITH_AS(io::inspect(bytes.substr(0, 10), "tiny.ckpt"),
                       "checkpoint tiny.ckpt refused: truncated in the envelope format at offset 8: it needs 4 bytes, "
                       "the file has 2 left (the file is 10 bytes)",
                       tapegrad::RefusedFile);
  std::string longer = bytes;
  longer.push_back('x');
  CHECK_THROWS_WITH_AS(io::inspect(longer, "tiny.ckpt"),
                       ("checkpoint tiny.ckpt refused: 1 trailing bytes after the CRC-32 (the envelope ends at offset " +
                        std::to_string(bytes.size()) + ", the file is " + std::to_string(bytes.size() + 1) + " bytes)")
                           .c_str(),
                       tapegrad::RefusedFile);
}

TEST_CASE("write then read gives back the step and the planes bit for bit") {
  TempDir dir;
  const std::string path = dir.file("bob.ckpt");
  std::vector<std::vector<float>> planes = bob_planes();
  planes[0][0] = std::bit_cast<float>(0x7fc01234u);  // a NaN with a payload
  planes[0][1] = -0.0f;
  planes[1][2] = -INFINITY;
  planes[2][3] = std::numeric_limits<float>::denorm_min();
  const uint64_t step = (uint64_t{1} << 63) + 1;
  io::write(path, io::bob_checkpoint_identity(), step, planes);

  const io::Checkpoint back = io::read(path, io::bob_checkpoint_identity());
  CHECK(back.step == step);
  REQUIRE(back.planes.size() == 3);
  for (size_t k = 0; k < 3; ++k) {
    REQUIRE(back.planes[k].size() == 65536);
    CHECK(std::memcmp(back.planes[k].data(), planes[k].data(), 65536 * sizeof(float)) == 0);
  }
  CHECK(dir.entries() == std::set<std::string>{"bob.ckpt"});
}

TEST_CASE("a checkpoint from a program with another identity is refused by name") {
  const auto planes = bob_planes();
  io::EnvelopeIdentity other = io::bob_checkpoint_identity();

  SUBCASE("schema") {
    other.schema = "bob-raw-pmv-f32-v2|parameter-order:p-then-m-then-v|payload=786432";
    check_refused(
        io::encode(other, 10, planes),
        "schema identity differs: file has bob-raw-pmv-f32-v2|parameter-order:p-then-m-then-v|payload=786432, "
        "this program expects bob-raw-pmv-f32-v1|parameter-order:p-then-m-then-v|payload=786432");
  }
  SUBCASE("learner: hyperparameters shown as numbers") {
    other.learner = bob_learner(0.2f, 0.9f, 0.95f, 1e-8f, 0.01f);
    check_refused(io::encode(other, 10, planes),
                  "learner identity differs: file has next-byte-cross-entropy-mean|adamw-decoupled|lr=0.2 beta1=0.9 "
                  "beta2=0.95 eps=1e-08 wd=0.01, this program expects " +
                      bob_learner_text);
  }
  SUBCASE("learner: one ulp apart still reads differently") {
    other.learner = bob_learner(std::nextafter(0.1f, 1.0f), 0.9f, 0.95f, 1e-8f, 0.01f);
    check_refused(io::encode(other, 10, planes),
                  "learner identity differs: file has next-byte-cross-entropy-mean|adamw-decoupled|lr=0.10000001 "
                  "beta1=0.9 beta2=0.95 eps=1e-08 wd=0.01, this program expects " +
                      bob_learner_text);
  }
  SUBCASE("learner: descriptions that coincide fall back to the bytes") {
    io::EnvelopeIdentity expected = io::bob_checkpoint_identity();
    expected.learner = bob_learner(std::bit_cast<float>(0x7fc00000u), 0.9f, 0.95f, 1e-8f, 0.01f);
    other.learner = bob_learner(std::bit_cast<float>(0x7fc00001u), 0.9f, 0.95f, 1e-8f, 0.01f);
    check_refused(io::encode(other, 10, planes),
                  "learner identity differs: file has next-byte-cross-entropy-mean|adamw-decoupled|"
                  "\\x01\\x00\\xc0\\x7ffff?33s?w\\xcc+2\\x0a\\xd7#<, this program expects "
                  "next-byte-cross-entropy-mean|adamw-decoupled|\\x00\\x00\\xc0\\x7ffff?33s?w\\xcc+2\\x0a\\xd7#<",
                  expected);
  }
  SUBCASE("data") {
    other.data = "raw-byte-sequence|vocabulary=256|prompts=4|record=1568";
    check_refused(io::encode(other, 10, planes),
                  "data identity differs: file has raw-byte-sequence|vocabulary=256|prompts=4|record=1568, "
                  "this program expects raw-byte-sequence|vocabulary=256|prompts=3|record=1564");
  }
  SUBCASE("seed") {
    other.seed = "bob-seed-v2";
    check_refused(io::encode(other, 10, planes),
                  "seed identity differs: file has bob-seed-v2, this program expects bob-seed-v1");
  }
  SUBCASE("seed: an empty identity is shown as such") {
    other.seed = "";
    check_refused(io::encode(other, 10, planes),
                  "seed identity differs: file has (empty), this program expects bob-seed-v1");
  }
  SUBCASE("several differ: the first in file order is named") {
    other.data = "other-data";
    other.learner = "other-learner";
    check_refused(io::encode(other, 10, planes),
                  "learner identity differs: file has other-learner, this program expects " + bob_learner_text);
  }
}

TEST_CASE("a checkpoint with other sizes is refused by name") {
  const std::string good = io::encode(io::bob_checkpoint_identity(), 10, bob_planes());

  SUBCASE("payload bytes") {
    check_refused(resealed(with_u64(good, payload_offset, 786433)),
                  "payload bytes differ: file has 786433, this program expects 786432");
  }
  SUBCASE("chunk size: the same payload cut into 6 planes") {
    io::EnvelopeIdentity other = io::bob_checkpoint_identity();
    other.chunk_bytes = 131072;
    other.chunk_count = 6;
    check_refused(io::encode(other, 10, std::vector<std::vector<float>>(6, std::vector<float>(32768, 1.0f))),
                  "chunk size differs: file has 131072, this program expects 262144");
  }
  SUBCASE("updates per invocation") {
    io::EnvelopeIdentity other = io::bob_checkpoint_identity();
    other.updates_per_invocation = 20;
    check_refused(io::encode(other, 10, bob_planes()),
                  "updates per invocation differ: file has 20, this program expects 10");
  }
  SUBCASE("chunk count: 4 planes under bob's payload field") {
    io::EnvelopeIdentity other = io::bob_checkpoint_identity();
    other.chunk_count = 4;
    other.payload_bytes = 4 * other.chunk_bytes;
    const std::string four = io::encode(other, 10, std::vector<std::vector<float>>(4, std::vector<float>(65536)));
    check_refused(resealed(with_u64(four, payload_offset, 786432)),
                  "chunk count differs: file has 4, this program expects 3");
  }
}

TEST_CASE("a checkpoint with another magic or an unknown format is refused") {
  const std::string good = io::encode(io::bob_checkpoint_identity(), 10, bob_planes());
  SUBCASE("magic") {
    check_refused(std::string("PK\x03\x04zip!", 8) + good.substr(8),
                  "bad magic: the file starts with \"PK\\x03\\x04zip!\", a checkpoint starts with \"CKPTENV1\"");
  }
  SUBCASE("format") {
    check_refused(resealed(with_u32(good, 8, 2)), "unknown envelope format 2 (this program reads format 1)");
  }
}

TEST_CASE("a damaged checkpoint is refused by its CRC, before any identity is compared") {
  const std::string good = io::encode(io::bob_checkpoint_identity(), 10, bob_planes());
  const uint32_t stored = crc_of(good.substr(0, crc_offset));

  // Note [order of checks]: a flipped bit is corruption, not another configuration.
  auto check_corrupt = [&](const std::string& damaged) {
    check_refused(damaged, "bad CRC-32: stored " + hex32(stored) + ", computed " +
                               hex32(crc_of(std::string_view(damaged).substr(0, crc_offset))) +
                               " over the 786691 bytes before it; the file is corrupt");
  };
  SUBCASE("a flipped bit in a plane") {
    std::string damaged = good;
    damaged[planes_offset + 500000] ^= 0x10;
    check_corrupt(damaged);
  }
  SUBCASE("a flipped bit inside the learner's lr") {
    std::string damaged = good;
    damaged[85 + 45] ^= 0x01;
    check_corrupt(damaged);
  }
  SUBCASE("a flipped bit in the payload field") {
    std::string damaged = good;
    damaged[payload_offset] ^= 0x01;
    check_corrupt(damaged);
  }
  SUBCASE("a flipped bit in the stored CRC") {
    std::string damaged = good;
    damaged[crc_offset] ^= 0x80;
    check_refused(damaged, "bad CRC-32: stored " + hex32(stored ^ 0x80) + ", computed " + hex32(stored) +
                               " over the 786691 bytes before it; the file is corrupt");
  }
  SUBCASE("a damaged chunk bytes field misplaces the CRC: still corruption, not trailing bytes") {
    const std::string damaged = with_u64(good, chunk_bytes_offset, 262140);
    const size_t misplaced = crc_offset - 12;
    check_refused(damaged, "bad CRC-32: stored " + hex32(io::load_u32(damaged, misplaced)) + ", computed " +
                               hex32(crc_of(std::string_view(damaged).substr(0, misplaced))) +
                               " over the 786679 bytes before it;"
                               " the file is corrupt");
  }
}

TEST_CASE("a truncated checkpoint is refused naming the field, its offset and the sizes") {
  const std::string good = io::encode(io::bob_checkpoint_identity(), 10, bob_planes());
  const std::map<size_t, std::string> cases = {
      {0, "truncated in the magic at offset 0: it needs 8 bytes, the file has 0 left (the file is 0 bytes)"},
      {5, "truncated in the magic at offset 0: it needs 8 bytes, the file has 5 left (the file is 5 bytes)"},
      {10,
       "truncated in the envelope format at offset 8: it needs 4 bytes, the file has 2 left (the file is 10 bytes)"},
      {14,
       "truncated in the schema identity length at offset 12: it needs 4 bytes, the file has 2 left "
       "(the file is 14 bytes)"},
      {50,
       "truncated in the schema identity (65 bytes by its length field) at offset 16: it needs 65 bytes, "
       "the file has 34 left (the file is 50 bytes)"},
      {100,
       "truncated in the learner identity (65 bytes by its length field) at offset 85: it needs 65 bytes, "
       "the file has 15 left (the file is 100 bytes)"},
      {215,
       "truncated in the seed identity (11 bytes by its length field) at offset 212: it needs 11 bytes, "
       "the file has 3 left (the file is 215 bytes)"},
      {227,
       "truncated in the payload bytes at offset 223: it needs 8 bytes, the file has 4 left (the file is 227 bytes)"},
      {250, "truncated in the step at offset 247: it needs 8 bytes, the file has 3 left (the file is 250 bytes)"},
      {257,
       "truncated in the chunk count at offset 255: it needs 4 bytes, the file has 2 left (the file is 257 bytes)"},
      {259,
       "truncated in plane 1 of 3 at offset 259: a plane is 262144 bytes by the chunk bytes field, "
       "the file has 0 left (the file is 259 bytes)"},
      {259 + 262144 + 100,
       "truncated in plane 2 of 3 at offset 262403: a plane is 262144 bytes by the chunk bytes "
       "field, the file has 100 left (the file is 262503 bytes)"},
      {crc_offset - 1,
       "truncated in plane 3 of 3 at offset 524547: a plane is 262144 bytes by the chunk bytes field, "
       "the file has 262143 left (the file is 786690 bytes)"},
      {crc_offset,
       "truncated in the CRC-32 at offset 786691: it needs 4 bytes, the file has 0 left "
       "(the file is 786691 bytes)"},
      {crc_offset + 2,
       "truncated in the CRC-32 at offset 786691: it needs 4 bytes, the file has 2 left "
       "(the file is 786693 bytes)"},
  };
  for (const auto& [cut, why] : cases) {
    const size_t size = cut;  // a structured binding cannot be captured (CAPTURE) before C++20 in clang 14
    CAPTURE(size);
    check_refused(good.substr(0, size), why);
  }
}

TEST_CASE("a corrupt length or count cannot make the reader allocate or loop without bound") {
  const std::string good = io::encode(io::bob_checkpoint_identity(), 10, bob_planes());
  check_refused(with_u32(good, 12, 0xffffffffu),
                "truncated in the schema identity (4294967295 bytes by its length field) at offset 16: it needs "
                "4294967295 bytes, the file has 786679 left (the file is 786695 bytes)");
  // 4 billion empty planes: the CRC is read right after the header, and fails.
  const std::string empty_planes = with_u32(with_u64(good, chunk_bytes_offset, 0), chunk_count_offset, 0xffffffffu);
  check_refused(empty_planes, "bad CRC-32: stored " + hex32(io::load_u32(good, planes_offset)) + ", computed " +
                                  hex32(crc_of(empty_planes.substr(0, planes_offset))) +
                                  " over the 259 bytes before it; the file is corrupt");
  check_refused(with_u64(good, chunk_bytes_offset, uint64_t{1} << 62),
                "truncated in plane 1 of 3 at offset 259: a plane is 4611686018427387904 bytes by the chunk bytes "
                "field, the file has 786436 left (the file is 786695 bytes)");
}

TEST_CASE("trailing bytes after the CRC are refused, saying how many") {
  const std::string good = io::encode(io::bob_checkpoint_identity(), 10, bob_planes());
  check_refused(good + "abc",
                "3 trailing bytes after the CRC-32 (the envelope ends at offset 786695, the file is 786698 bytes)");
}

TEST_CASE("encode and decode refuse an identity or planes that contradict each other") {
  io::EnvelopeIdentity identity = io::bob_checkpoint_identity();
  CHECK_THROWS_WITH_AS(io::encode(identity, 0, std::vector<std::vector<float>>(2, std::vector<float>(65536))),
                       "[checkpoint encode] 2 planes given, the identity says 3", tapegrad::Error);
  std::vector<std::vector<float>> planes = bob_planes();
  planes[1].resize(10);
  CHECK_THROWS_WITH_AS(io::encode(identity, 0, planes),
                       "[checkpoint encode] plane 1 has 10 values, the identity says 65536 (262144 bytes)",
                       tapegrad::Error);
  identity.payload_bytes = 5;
  CHECK_THROWS_WITH_AS(io::encode(identity, 0, bob_planes()),
                       "[checkpoint encode] payload_bytes 5 is not chunk_bytes 262144 x chunk_count 3",
                       tapegrad::Error);
  CHECK_THROWS_WITH_AS(io::decode("", identity, "x.ckpt"),
                       "[checkpoint decode] payload_bytes 5 is not chunk_bytes 262144 x chunk_count 3",
                       tapegrad::Error);
  identity.chunk_bytes = 6;
  identity.chunk_count = 1;
  identity.payload_bytes = 6;
  CHECK_THROWS_WITH_AS(io::encode(identity, 0, {{1.0f}}),
                       "[checkpoint encode] chunk_bytes 6 is not a multiple of 4; planes hold fp32 values",
                       tapegrad::Error);
}

TEST_CASE("write_file_atomic replaces the file and leaves no temporary file behind") {
  TempDir dir;
  const std::string path = dir.file("state.bin");
  CHECK_FALSE(io::file_exists(path));
  io::write_file_atomic(path, "first version, longer than the second");
  CHECK(io::file_exists(path));
  io::write_file_atomic(path, std::string("sec\0nd", 6));
  CHECK(io::read_file(path) == std::string("sec\0nd", 6));
  io::write_file_atomic(path, "");
  CHECK(io::read_file(path).empty());
  CHECK(dir.entries() == std::set<std::string>{"state.bin"});
}

TEST_CASE("write_file_atomic with a bare file name writes into the current folder") {
  TempDir dir;
  const fs::path before = fs::current_path();
  fs::current_path(dir.path);
  io::write_file_atomic("bare.bin", "bytes");
  fs::current_path(before);
  CHECK(io::read_file(dir.file("bare.bin")) == "bytes");
  CHECK(dir.entries() == std::set<std::string>{"bare.bin"});
}

TEST_CASE("write_file_atomic into a missing folder fails clearly") {
  TempDir dir;
  const std::string path = dir.file("missing/state.bin");
  const std::string message = "cannot write " + path + ": cannot create a temporary file in " + dir.file("missing") +
                              ": No such file or directory (does the folder exist?)";
  CHECK_THROWS_WITH_AS(io::write_file_atomic(path, "x"), message.c_str(), tapegrad::Error);
  CHECK(dir.entries().empty());
}

TEST_CASE("write_file_atomic refuses a folder as its target before it makes a temporary file, and keeps it") {
  TempDir dir;
  const std::string path = dir.file("state.bin");
  fs::create_directory(path);  // a folder where the file should go (renaming over it would fail, EISDIR)
  io::write_file_atomic(path + "/inside", "kept");
  CHECK_THROWS_WITH_AS(io::write_file_atomic(path, "new"),
                       ("cannot write " + path + ": it is not a regular file (a directory); only regular files are "
                        "replaced, and nothing was written").c_str(),
                       tapegrad::Error);
  CHECK(dir.entries() == std::set<std::string>{"state.bin"});
  CHECK(io::read_file(path + "/inside") == "kept");
}

TEST_CASE("io::read refuses a file of more than 4 times the expected envelope (plus 1 MiB) by its size") {
  TempDir dir;
  const std::string path = dir.file("huge.ckpt");
  const size_t bound = 4 * size_t{786695} + (size_t{1} << 20);  // bob's checkpoint is 786,695 bytes
  io::write_file_atomic(path, std::string(bound + 1, 'x'));
  CHECK_THROWS_WITH_AS(io::read(path, io::bob_checkpoint_identity()),
                       ("cannot read " + path + ": it is 4195357 bytes, more than the 4195356 its reader accepts").c_str(),
                       tapegrad::Error);
  io::write_file_atomic(path, std::string(bound, 'x'));  // within the bound: read, then refused by its content
  CHECK_THROWS_WITH_AS(io::read(path, io::bob_checkpoint_identity()),
                       doctest::Contains(("checkpoint " + path + " refused: bad magic").c_str()), tapegrad::RefusedFile);
}

TEST_CASE("read_file names the path it cannot read") {
  TempDir dir;
  const std::string missing = dir.file("nothing.bin");
  CHECK_THROWS_WITH_AS(io::read_file(missing), ("cannot read " + missing + ": No such file or directory").c_str(),
                       tapegrad::Error);
  CHECK_THROWS_WITH_AS(io::read_file(dir.path), ("cannot read " + dir.path + ": it is not a regular file (a directory)").c_str(),
                       tapegrad::Error);
  CHECK_THROWS_WITH_AS(io::read(missing, io::bob_checkpoint_identity()),
                       ("cannot read " + missing + ": No such file or directory").c_str(), tapegrad::Error);
}
