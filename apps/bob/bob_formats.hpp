// bob's file formats (the contract: docs/bob.md, "Input record", "Prediction" and "Checkpoint
// envelope"): the 1,564-byte input record, the 24-byte predictions, and bob's checkpoint identity
// for the general envelope (envelope.hpp).
//
// Rule: every integer is little-endian; a record that breaks the table is refused with
// tapegrad::RefusedFile("input record <path> refused: ...") naming the field and its offset.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tapegrad/io/envelope.hpp"

namespace tapegrad::io {

inline constexpr size_t bob_examples = 256;       // pairs (x_i, y_i) in a record; the batch size B
inline constexpr size_t bob_prompts = 3;          // prompts in a record
inline constexpr size_t bob_record_bytes = 1564;  // 8 magic + 8 version + 512 pairs + 1,024 targets + 12 prompts
inline constexpr uint32_t bob_empty_prompt = 0xFFFFFFFF;  // prompt_last of an empty prompt

// One training batch and the prompts to predict from.
struct BobRecord {
  std::array<uint8_t, bob_examples> x{};            // input bytes
  std::array<uint8_t, bob_examples> y{};            // targets: y[i] is the corpus byte after x[i]
  std::array<uint32_t, bob_prompts> prompt_last{};  // each prompt's last byte, or bob_empty_prompt
};

// The record's 1,564 bytes (the targets are written twice: in the pairs and as u32).
std::string encode_record(const BobRecord& record);

// The record in `bytes`, or tapegrad::RefusedFile: a size other than 1,564, another magic, an
// unknown version, a u32 target that disagrees with its pair, a prompt word above 255 that is not
// the empty-prompt marker. `path` only names the record in messages.
BobRecord decode_record(std::string_view bytes, const std::string& path);

// The record for 257 consecutive corpus bytes from `offset` (x = the first 256, y = the last 256)
// and up to 3 prompts (missing ones are empty). Throws tapegrad::Error if the corpus is too short
// or there are more than 3 prompts.
BobRecord make_record(std::string_view corpus, uint64_t offset, const std::vector<std::string>& prompts);

// bob's predictions: for each prompt (token, validity) as two u32, 8 bytes a prompt.
std::string encode_predictions(const std::array<std::pair<uint32_t, uint32_t>, bob_prompts>& predictions);

// bob's checkpoint identity, byte for byte as the contract gives it; its describe_learner shows
// the five hyperparameters as numbers ("lr=0.1 beta1=0.9 beta2=0.95 eps=1e-08 wd=0.01").
EnvelopeIdentity bob_checkpoint_identity();

}  // namespace tapegrad::io
