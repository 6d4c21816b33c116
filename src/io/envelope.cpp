// The checkpoint envelope, format 1: encoding and the refusing decoder (see envelope.hpp).
//
// Rule: decode checks in the order of Note [order of checks] and refuses at the first problem,
// with tapegrad::RefusedFile("checkpoint <path> refused: ..."); it only ever reads its input.
#include "tapegrad/io/envelope.hpp"

#include <zlib.h>

#include <bit>
#include <cstdio>
#include <limits>

#include "tapegrad/tensor/error.hpp"
#include "tapegrad/io/atomic_file.hpp"

namespace tapegrad::io {
namespace {

constexpr std::string_view magic = "CKPTENV1";
constexpr uint32_t format = 1;

// Caller bugs: an identity whose sizes contradict each other cannot describe any file.
void check_identity(const EnvelopeIdentity& identity, const char* op) {
  const std::string where = std::string("[") + op + "] ";
  if (identity.chunk_bytes % 4 != 0)
    throw Error(where + "chunk_bytes " + std::to_string(identity.chunk_bytes) +
                " is not a multiple of 4; planes hold fp32 values");
  const uint64_t count = identity.chunk_count;
  const bool consistent =
      count == 0 ? identity.payload_bytes == 0
                 : identity.payload_bytes % count == 0 && identity.payload_bytes / count == identity.chunk_bytes;
  if (!consistent)
    throw Error(where + "payload_bytes " + std::to_string(identity.payload_bytes) + " is not chunk_bytes " +
                std::to_string(identity.chunk_bytes) + " x chunk_count " + std::to_string(identity.chunk_count));
}

[[noreturn]] void refuse(const std::string& path, const std::string& why) {
  throw RefusedFile("checkpoint " + path + " refused: " + why);
}

// Walks the file's fields in order; refuses a field that runs past the end of the file, naming it.
class FieldReader {
 public:
  FieldReader(std::string_view bytes, const std::string& path) : bytes_(bytes), path_(path) {}

  std::string_view take(uint64_t size, const std::string& field) {
    if (size > remaining())
      refuse(path_, "truncated in the " + field + " at offset " + std::to_string(offset_) + ": it needs " +
                        std::to_string(size) + " bytes, the file has " + std::to_string(remaining()) +
                        " left (the file is " + std::to_string(bytes_.size()) + " bytes)");
    const std::string_view field_bytes = bytes_.substr(offset_, size);
    offset_ += size;
    return field_bytes;
  }
  // `count` planes of `plane_size` bytes each, as one span; a truncation names the plane it cuts.
  std::string_view planes(uint64_t plane_size, uint32_t count) {
    if (count != 0 && plane_size > remaining() / count) {  // plane_size * count > remaining(), without overflow
      const uint64_t whole = remaining() / plane_size;
      refuse(path_, "truncated in plane " + std::to_string(whole + 1) + " of " + std::to_string(count) + " at offset " +
                        std::to_string(offset_ + whole * plane_size) + ": a plane is " + std::to_string(plane_size) +
                        " bytes by the chunk bytes field, the file has " +
                        std::to_string(remaining() - whole * plane_size) + " left (the file is " +
                        std::to_string(bytes_.size()) + " bytes)");
    }
    return take(plane_size * count, "planes");
  }
  uint32_t u32(const std::string& field) { return load_u32(take(4, field), 0); }
  uint64_t u64(const std::string& field) { return load_u64(take(8, field), 0); }
  // A u32 length, then that many bytes.
  std::string_view identity(const std::string& name) {
    const uint32_t length = u32(name + " identity length");
    return take(length, name + " identity (" + std::to_string(length) + " bytes by its length field)");
  }

  size_t offset() const { return offset_; }
  size_t remaining() const { return bytes_.size() - offset_; }

 private:
  std::string_view bytes_;
  const std::string& path_;
  size_t offset_ = 0;
};

// "(empty)" rather than nothing at all in a message.
std::string shown(std::string_view bytes, const std::function<std::string(std::string_view)>& describe) {
  return bytes.empty() ? "(empty)" : describe(bytes);
}

void refuse_if_identity_differs(const std::string& path, const std::string& name, std::string_view found,
                                std::string_view expected,
                                const std::function<std::string(std::string_view)>& describe) {
  if (found == expected) return;
  std::string found_text = shown(found, describe);
  std::string expected_text = shown(expected, describe);
  if (found_text == expected_text) {  // e.g. two NaNs with different payloads: show the bytes instead
    found_text = printable_bytes(found);
    expected_text = printable_bytes(expected);
  }
  refuse(path, name + " identity differs: file has " + found_text + ", this program expects " + expected_text);
}

void refuse_if_size_differs(const std::string& path, const std::string& what, uint64_t found, uint64_t expected) {
  if (found == expected) return;
  refuse(path, what + ": file has " + std::to_string(found) + ", this program expects " + std::to_string(expected));
}

}  // namespace

std::string hex32(uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", value);
  return text;
}

uint32_t crc32_of(std::string_view bytes) {
  return static_cast<uint32_t>(
      ::crc32_z(::crc32_z(0, nullptr, 0), reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
}


std::string printable_bytes(std::string_view bytes) {
  std::string text;
  for (const char c : bytes) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte == '\\') {
      text += "\\\\";
    } else if (byte >= 0x20 && byte < 0x7f) {
      text += c;
    } else {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", byte);
      text += escaped;
    }
  }
  return text;
}

std::string encode(const EnvelopeIdentity& identity, uint64_t step, const std::vector<std::vector<float>>& planes) {
  check_identity(identity, "checkpoint encode");
  if (planes.size() != identity.chunk_count)
    throw Error("[checkpoint encode] " + std::to_string(planes.size()) + " planes given, the identity says " +
                std::to_string(identity.chunk_count));
  for (size_t k = 0; k < planes.size(); ++k)
    if (planes[k].size() * 4 != identity.chunk_bytes)
      throw Error("[checkpoint encode] plane " + std::to_string(k) + " has " + std::to_string(planes[k].size()) +
                  " values, the identity says " + std::to_string(identity.chunk_bytes / 4) + " (" +
                  std::to_string(identity.chunk_bytes) + " bytes)");

  std::string out;
  out.reserve(64 + identity.schema.size() + identity.learner.size() + identity.data.size() + identity.seed.size() +
              identity.payload_bytes + 4);
  out += magic;
  append_u32(out, format);
  for (const std::string* text : {&identity.schema, &identity.learner, &identity.data, &identity.seed}) {
    if (text->size() > std::numeric_limits<uint32_t>::max())
      throw Error("[checkpoint encode] an identity of " + std::to_string(text->size()) +
                  " bytes does not fit a u32 length");
    append_u32(out, static_cast<uint32_t>(text->size()));
    out += *text;
  }
  append_u64(out, identity.payload_bytes);
  append_u64(out, identity.chunk_bytes);
  append_u64(out, identity.updates_per_invocation);
  append_u64(out, step);
  append_u32(out, identity.chunk_count);
  for (const std::vector<float>& plane : planes)
    for (const float value : plane) append_f32(out, value);
  append_u32(out, crc32_of(out));
  return out;
}

// Note [order of checks]
// decode refuses at the first problem, in this order:
//   1. structure, in file order, using the file's own fields: truncation (naming the field and
//      its offset) of every field up to the CRC; the magic and the format are compared on the
//      spot, since without them the rest cannot be parsed;
//   2. the CRC-32 of every byte before it;
//   3. trailing bytes after the CRC;
//   4. the contents, in file order, against the expected identity: schema, learner, data, seed,
//      payload bytes, chunk size, updates per invocation, chunk count.
// The CRC comes before the identities because it tells corruption from a real difference. A file
// written by a program configured otherwise has a valid CRC, so it still reaches step 4 and is
// refused by name ("learner identity differs: ... lr=0.2 ..."). A flipped bit inside an identity
// fails the CRC instead, so it is reported as corruption rather than blamed on the configuration.
// Structure must come first: without it we do not know where the CRC is. Trailing bytes come after
// the CRC so that bytes appended to an intact file are named as such, while a damaged size field
// (which misplaces the CRC) reads as corruption.
EnvelopeContents inspect(std::string_view bytes, const std::string& path_for_messages) {
  const std::string& path = path_for_messages;
  FieldReader in(bytes, path);

  const std::string_view found_magic = in.take(magic.size(), "magic");
  if (found_magic != magic)
    refuse(path, "bad magic: the file starts with \"" + printable_bytes(found_magic) +
                     "\", a checkpoint starts with \"" + std::string(magic) + "\"");
  const uint32_t found_format = in.u32("envelope format");
  if (found_format != format)
    refuse(path, "unknown envelope format " + std::to_string(found_format) + " (this program reads format " +
                     std::to_string(format) + ")");

  EnvelopeContents contents;
  EnvelopeIdentity& found = contents.identity;
  found.schema = in.identity("schema");
  found.learner = in.identity("learner");
  found.data = in.identity("data");
  found.seed = in.identity("seed");
  found.payload_bytes = in.u64("payload bytes");
  found.chunk_bytes = in.u64("chunk bytes");
  found.updates_per_invocation = in.u64("updates per invocation");
  contents.step = in.u64("step");
  found.chunk_count = in.u32("chunk count");
  contents.planes = in.planes(found.chunk_bytes, found.chunk_count);
  const size_t crc_offset = in.offset();
  const uint32_t stored_crc = in.u32("CRC-32");

  const uint32_t computed_crc = crc32_of(bytes.substr(0, crc_offset));
  if (stored_crc != computed_crc)
    refuse(path, "bad CRC-32: stored " + hex32(stored_crc) + ", computed " + hex32(computed_crc) + " over the " +
                     std::to_string(crc_offset) + " bytes before it; the file is corrupt");
  if (in.remaining() != 0)
    refuse(path, std::to_string(in.remaining()) + " trailing bytes after the CRC-32 (the envelope ends at offset " +
                     std::to_string(in.offset()) + ", the file is " + std::to_string(bytes.size()) + " bytes)");
  return contents;
}

Checkpoint decode(std::string_view bytes, const EnvelopeIdentity& expected, const std::string& path_for_messages) {
  check_identity(expected, "checkpoint decode");
  const std::string& path = path_for_messages;
  const EnvelopeContents contents = inspect(bytes, path);
  const EnvelopeIdentity& found = contents.identity;

  refuse_if_identity_differs(path, "schema", found.schema, expected.schema, printable_bytes);
  refuse_if_identity_differs(path, "learner", found.learner, expected.learner, expected.describe_learner);
  refuse_if_identity_differs(path, "data", found.data, expected.data, printable_bytes);
  refuse_if_identity_differs(path, "seed", found.seed, expected.seed, printable_bytes);
  refuse_if_size_differs(path, "payload bytes differ", found.payload_bytes, expected.payload_bytes);
  refuse_if_size_differs(path, "chunk size differs", found.chunk_bytes, expected.chunk_bytes);
  refuse_if_size_differs(path, "updates per invocation differ", found.updates_per_invocation,
                         expected.updates_per_invocation);
  refuse_if_size_differs(path, "chunk count differs", found.chunk_count, expected.chunk_count);

  Checkpoint checkpoint{contents.step, {}};
  for (uint32_t k = 0; k < found.chunk_count; ++k) {
    std::vector<float>& values = checkpoint.planes.emplace_back(found.chunk_bytes / 4);
    const size_t start = k * found.chunk_bytes;
    for (size_t i = 0; i < values.size(); ++i) values[i] = load_f32(contents.planes, start + 4 * i);
  }
  return checkpoint;
}

void write(const std::string& path, const EnvelopeIdentity& identity, uint64_t step,
           const std::vector<std::vector<float>>& planes) {
  write_file_atomic(path, encode(identity, step, planes));
}

Checkpoint read(const std::string& path, const EnvelopeIdentity& expected) {
  // The most read_file takes: 4 times the size of the envelope `expected` describes, plus 1 MiB,
  // so that a checkpoint of other sizes or identities (or with trailing bytes) is still read and
  // decode names what differs; a larger file is refused by its size.
  uint64_t size = magic.size() + 4 + 4 * 4 + 4 * 8 + 4 + 4, max_bytes = 0;
  bool overflow = false;
  for (const std::string* text : {&expected.schema, &expected.learner, &expected.data, &expected.seed})
    overflow |= __builtin_add_overflow(size, text->size(), &size);
  overflow |= __builtin_add_overflow(size, expected.payload_bytes, &size);
  overflow |= __builtin_mul_overflow(size, uint64_t{4}, &max_bytes);
  overflow |= __builtin_add_overflow(max_bytes, uint64_t{1} << 20, &max_bytes);
  return decode(read_file(path, overflow ? SIZE_MAX : static_cast<size_t>(max_bytes)), expected, path);
}

void append_u32(std::string& out, uint32_t value) {
  for (int shift = 0; shift < 32; shift += 8) out += static_cast<char>((value >> shift) & 0xff);
}

void append_u64(std::string& out, uint64_t value) {
  for (int shift = 0; shift < 64; shift += 8) out += static_cast<char>((value >> shift) & 0xff);
}

void append_f32(std::string& out, float value) { append_u32(out, std::bit_cast<uint32_t>(value)); }

uint32_t load_u32(std::string_view bytes, size_t offset) {
  uint32_t value = 0;
  for (int k = 3; k >= 0; --k) value = (value << 8) | static_cast<unsigned char>(bytes[offset + k]);
  return value;
}

uint64_t load_u64(std::string_view bytes, size_t offset) {
  uint64_t value = 0;
  for (int k = 7; k >= 0; --k) value = (value << 8) | static_cast<unsigned char>(bytes[offset + k]);
  return value;
}

float load_f32(std::string_view bytes, size_t offset) { return std::bit_cast<float>(load_u32(bytes, offset)); }

}  // namespace tapegrad::io
