// bob's input record, predictions and checkpoint identity (see bob_formats.hpp).
//
// Rule: the tables in the contract (docs/bob.md, "The contract") are followed byte for byte;
// decode_record checks the fields in file order and refuses at the first one that breaks the table.
#include "bob_formats.hpp"

#include <charconv>
#include <cstdio>

#include "tapegrad/tensor/error.hpp"

namespace tapegrad::io {
namespace {

// ---- input record layout (offsets in bytes)
constexpr std::string_view record_magic = "BOBINPUT";
constexpr uint64_t record_version = 1;
constexpr size_t version_offset = 8;
constexpr size_t pairs_offset = 16;      // 256 x (x_i, y_i), one byte each
constexpr size_t targets_offset = 528;   // 256 x u32 y_i
constexpr size_t prompts_offset = 1552;  // 3 x u32 last byte or the empty marker
static_assert(pairs_offset + 2 * bob_examples == targets_offset);
static_assert(targets_offset + 4 * bob_examples == prompts_offset);
static_assert(prompts_offset + 4 * bob_prompts == bob_record_bytes);

// ---- checkpoint identity
constexpr std::string_view learner_prefix = "next-byte-cross-entropy-mean|adamw-decoupled|";
constexpr const char* hyperparameter_names[] = {"lr", "beta1", "beta2", "eps", "wd"};
constexpr float hyperparameters[] = {0.1f, 0.9f, 0.95f, 1e-8f, 0.01f};  // binary32, in the identity's order
constexpr size_t hyperparameter_bytes = 4 * std::size(hyperparameters);

std::string hex(uint32_t value, int digits) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%0*x", digits, value);
  return text;
}

[[noreturn]] void refuse(const std::string& path, const std::string& why) {
  throw RefusedFile("input record " + path + " refused: " + why);
}

// The shortest decimal text that reads back as `value` ("0.1", "1e-08").
std::string shortest(float value) {
  char text[32];
  const auto result = std::to_chars(text, text + sizeof text, value);
  return std::string(text, result.ptr);
}

// "<objective>|<learner>|" then the binary32 hyperparameters, shown as "lr=0.1 beta1=0.9 ...".
std::string describe_bob_learner(std::string_view identity) {
  const size_t first_bar = identity.find('|');
  const size_t second_bar = first_bar == std::string_view::npos ? first_bar : identity.find('|', first_bar + 1);
  if (second_bar == std::string_view::npos) return printable_bytes(identity);
  const std::string_view names = identity.substr(0, second_bar + 1);
  const std::string_view tail = identity.substr(second_bar + 1);
  if (tail.size() != hyperparameter_bytes)
    return printable_bytes(names) + "(a hyperparameter tail of " + std::to_string(tail.size()) + " bytes, not " +
           std::to_string(hyperparameter_bytes) + ": " + printable_bytes(tail) + ")";
  std::string text = printable_bytes(names);
  for (size_t k = 0; k < std::size(hyperparameter_names); ++k) {
    if (k > 0) text += ' ';
    text += std::string(hyperparameter_names[k]) + "=" + shortest(load_f32(tail, 4 * k));
  }
  return text;
}

}  // namespace

std::string encode_record(const BobRecord& record) {
  std::string out(record_magic);
  append_u64(out, record_version);
  for (size_t i = 0; i < bob_examples; ++i) {
    out += static_cast<char>(record.x[i]);
    out += static_cast<char>(record.y[i]);
  }
  for (const uint8_t target : record.y) append_u32(out, target);
  for (const uint32_t last : record.prompt_last) append_u32(out, last);
  return out;
}

BobRecord decode_record(std::string_view bytes, const std::string& path) {
  if (bytes.size() != bob_record_bytes)
    refuse(path, "it is " + std::to_string(bytes.size()) + " bytes, a bob input record is exactly " +
                     std::to_string(bob_record_bytes));
  const std::string_view magic = bytes.substr(0, record_magic.size());
  if (magic != record_magic)
    refuse(path,
           "bad magic at offset 0: \"" + printable_bytes(magic) + "\", expected \"" + std::string(record_magic) + "\"");
  const uint64_t version = load_u64(bytes, version_offset);
  if (version != record_version)
    refuse(path, "unknown version " + std::to_string(version) + " at offset " + std::to_string(version_offset) +
                     " (this program reads version " + std::to_string(record_version) + ")");

  BobRecord record;
  for (size_t i = 0; i < bob_examples; ++i) {
    record.x[i] = static_cast<uint8_t>(bytes[pairs_offset + 2 * i]);
    record.y[i] = static_cast<uint8_t>(bytes[pairs_offset + 2 * i + 1]);
  }
  for (size_t i = 0; i < bob_examples; ++i) {
    const size_t offset = targets_offset + 4 * i;
    const uint32_t target = load_u32(bytes, offset);
    if (target != record.y[i])
      refuse(path, "target " + std::to_string(i) + " at offset " + std::to_string(offset) + " is " + hex(target, 2) +
                       " but pair " + std::to_string(i) + " at offset " + std::to_string(pairs_offset + 2 * i + 1) +
                       " says " + hex(record.y[i], 2));
  }
  for (size_t k = 0; k < bob_prompts; ++k) {
    const size_t offset = prompts_offset + 4 * k;
    const uint32_t last = load_u32(bytes, offset);
    if (last > 255 && last != bob_empty_prompt)
      refuse(path, "prompt " + std::to_string(k) + " at offset " + std::to_string(offset) + " is " + hex(last, 2) +
                       ": above 255 and not the empty-prompt marker " + hex(bob_empty_prompt, 8));
    record.prompt_last[k] = last;
  }
  return record;
}

BobRecord make_record(std::string_view corpus, uint64_t offset, const std::vector<std::string>& prompts) {
  constexpr uint64_t needed = bob_examples + 1;
  if (offset > corpus.size() || corpus.size() - offset < needed)
    throw Error("[make_record] the corpus is " + std::to_string(corpus.size()) + " bytes, but " +
                std::to_string(needed) + " consecutive bytes from offset " + std::to_string(offset) + " need " +
                std::to_string(offset + needed));
  if (prompts.size() > bob_prompts)
    throw Error("[make_record] " + std::to_string(prompts.size()) + " prompts given; a bob record holds at most " +
                std::to_string(bob_prompts));
  BobRecord record;
  for (size_t i = 0; i < bob_examples; ++i) {
    record.x[i] = static_cast<uint8_t>(corpus[offset + i]);
    record.y[i] = static_cast<uint8_t>(corpus[offset + i + 1]);
  }
  record.prompt_last.fill(bob_empty_prompt);
  for (size_t k = 0; k < prompts.size(); ++k)
    if (!prompts[k].empty()) record.prompt_last[k] = static_cast<uint8_t>(prompts[k].back());
  return record;
}

std::string encode_predictions(const std::array<std::pair<uint32_t, uint32_t>, bob_prompts>& predictions) {
  std::string out;
  for (const auto& [token, validity] : predictions) {
    append_u32(out, token);
    append_u32(out, validity);
  }
  return out;
}

EnvelopeIdentity bob_checkpoint_identity() {
  EnvelopeIdentity identity;
  identity.schema = "bob-raw-pmv-f32-v1|parameter-order:p-then-m-then-v|payload=786432";
  identity.learner = std::string(learner_prefix);
  for (const float value : hyperparameters) append_f32(identity.learner, value);
  identity.data = "raw-byte-sequence|vocabulary=256|prompts=3|record=1564";
  identity.seed = "bob-seed-v1";
  identity.chunk_bytes = 65536 * 4;  // one [256, 256] fp32 table
  identity.chunk_count = 3;          // P, M, V
  identity.payload_bytes = identity.chunk_bytes * identity.chunk_count;
  identity.updates_per_invocation = 10;
  identity.describe_learner = describe_bob_learner;
  return identity;
}

}  // namespace tapegrad::io
