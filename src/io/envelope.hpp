// The checkpoint envelope, format 1 (the contract: docs/bob.md, "Checkpoint envelope"): a
// general container for fixed-size fp32 planes plus the step count, tagged with the identities of
// the program that wrote it. bob is one use (see bob_formats.hpp); any trainer can be another.
//
// Layout, all integers little-endian:
//   "CKPTENV1" | u32 format = 1 | 4 x (u32 length, bytes): schema, learner, data, seed identities |
//   u64 payload bytes | u64 chunk bytes (one plane) | u64 updates per invocation | u64 step |
//   u32 chunk count | the planes, fp32 row-major, one after another | u32 CRC-32 of all bytes above
//
// Rule: a checkpoint written by any other program (another identity or size) or damaged in any way
// is refused with tapegrad::RefusedFile, whose message starts "checkpoint <path> refused: " and
// names what differs, showing both values readably. Reading never writes: a refused file is left
// exactly as it was.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace tapegrad::io {

// The CRC-32 (zlib's polynomial) of `bytes`, and a u32 as "0x%08x": what checkpoint messages show.
uint32_t crc32_of(std::string_view bytes);
std::string hex32(uint32_t value);

// `bytes` with printable ASCII kept and every other byte (and the backslash) escaped: "ab\x00\\".
std::string printable_bytes(std::string_view bytes);

// What a checkpoint claims to be. The writer stores every field; a reader refuses a file whose
// fields differ from the ones it expects.
struct EnvelopeIdentity {
  std::string schema;                   // what the planes are and in which order
  std::string learner;                  // objective, optimizer and its hyperparameters (may hold binary bytes)
  std::string data;                     // what the training data looks like
  std::string seed;                     // how the parameters were initialized
  uint64_t payload_bytes = 0;           // all planes together: chunk_bytes * chunk_count
  uint64_t chunk_bytes = 0;             // one plane, a multiple of 4 (fp32 values)
  uint64_t updates_per_invocation = 0;  // optimizer updates one run makes
  uint32_t chunk_count = 0;             // number of planes
  // Renders a learner identity for messages (e.g. binary hyperparameters as numbers).
  std::function<std::string(std::string_view)> describe_learner = printable_bytes;
};

// The state a checkpoint carries: the updates made so far and the planes (chunk_count of them,
// each chunk_bytes / 4 values).
struct Checkpoint {
  uint64_t step = 0;
  std::vector<std::vector<float>> planes;
};

// The envelope's bytes. Throws tapegrad::Error if the planes do not match the identity's sizes.
std::string encode(const EnvelopeIdentity& identity, uint64_t step, const std::vector<std::vector<float>>& planes);

// The checkpoint in `bytes`, or tapegrad::RefusedFile if it is damaged or is not what `expected`
// describes. `path_for_messages` only names the file in messages.
Checkpoint decode(std::string_view bytes, const EnvelopeIdentity& expected, const std::string& path_for_messages);

// What a file holds, read without knowing what to expect: a reader that learns its layout from the
// file (a state dict's schema names its tensors, src/nn/state_dict.hpp) checks the identity itself.
struct EnvelopeContents {
  EnvelopeIdentity identity;  // every field as the file stores it
  uint64_t step = 0;
  std::string_view planes;    // the planes' bytes, one after another: a view into the bytes inspected
};

// Steps 1 to 3 of Note [order of checks] (structure, CRC-32, trailing bytes), refusing as decode
// does; nothing is compared with an expected identity. decode is inspect, then that comparison.
EnvelopeContents inspect(std::string_view bytes, const std::string& path_for_messages);

// encode, then write_file_atomic: `path` holds either its old content or the whole new checkpoint.
void write(const std::string& path, const EnvelopeIdentity& identity, uint64_t step,
           const std::vector<std::vector<float>>& planes);

// read_file, then decode. Throws tapegrad::Error if the file cannot be read, is not a regular
// file, or is more than 4 times (plus 1 MiB) the size of the envelope `expected` describes.
Checkpoint read(const std::string& path, const EnvelopeIdentity& expected);

// ---- little-endian fields, byte by byte (independent of the host's byte order); shared with
// bob_formats.cpp. The loads expect `offset + size` to be within `bytes`.
void append_u32(std::string& out, uint32_t value);
void append_u64(std::string& out, uint64_t value);
void append_f32(std::string& out, float value);
uint32_t load_u32(std::string_view bytes, size_t offset);
uint64_t load_u64(std::string_view bytes, size_t offset);
float load_f32(std::string_view bytes, size_t offset);

}  // namespace tapegrad::io
