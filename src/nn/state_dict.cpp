// State dicts (state_dict.hpp): the checks, the envelope files and the safetensors export.
//
// Note [state dict files]
// A state dict file is a checkpoint envelope of format 1 (src/io/envelope.hpp) with one plane.
// Its schema identity is text, one line each:
//   tapegrad state dict 1
//   NAME DTYPE [E0,E1,...] OFFSET BYTES        (one line per tensor, in the state dict's order)
// e.g. "blocks.0.attn.c_attn.weight f32 [384,128] 1024 196608". The tensors' bytes (little-endian,
// row-major) lie one after another in the plane: the first at offset 0, each next one where the one
// before it ends; the plane is their total rounded up to a multiple of 4 with zero bytes (the
// envelope's planes are fp32 words, but nothing reads them as floats here: any dtype's bits come
// back as they went). The learner, data and seed identities and the step are the caller's
// (StateDictFile); updates per invocation is 0. A reader takes the layout from the file
// (io::inspect, after the CRC) and refuses one whose lines, offsets or sizes do not add up, before
// comparing it with a model.
#include "tapegrad/nn/state_dict.hpp"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstring>
#include <unordered_map>

#include "tapegrad/io/envelope.hpp"
#include "tapegrad/io/json.hpp"

namespace tapegrad::nn {
namespace {

static_assert(std::endian::native == std::endian::little, "state dict files hold the host's little-endian bytes");

constexpr std::string_view kSchemaHeader = "tapegrad state dict 1\n";
constexpr DType kDTypes[] = {DType::f64, DType::f32, DType::bf16, DType::f16, DType::i32, DType::i64, DType::u8};

std::string shape_text(const Shape& s) {
  std::string text = "[";
  for (int i = 0; i < s.ndim(); ++i) {
    if (i) text += ',';
    text += std::to_string(s[i]);
  }
  text += ']';
  return text;
}

bool valid_name(std::string_view name) {
  if (name.empty()) return false;
  for (const char c : name)
    if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f) return false;
  return true;
}

// The tensor's bytes on the host (the same handle when it is there already).
Tensor on_host(const Tensor& t) { return t.device().is_cpu() ? t : t.to(Device::cpu()); }

// Names distinct and valid, tensors defined: what every writer needs. `where` begins messages.
void check_writable(const StateDict& tensors, const std::string& where) {
  std::unordered_map<std::string_view, int> seen;
  for (const auto& t : tensors) {
    if (!valid_name(t.first))
      throw Error(where + "'" + io::printable_bytes(t.first) +
                  "' is not a tensor name: names are not empty and hold no white space or control characters");
    if (!t.second.defined()) throw Error(where + "tensor '" + t.first + "' is empty (undefined)");
    if (seen[t.first]++) throw Error(where + "tensor '" + t.first + "' is given twice");
  }
}

// ---- checks against a model, then the copy

// What keeps `tensors` from loading into m, in the model's order, then the extras in theirs.
// `side` says where the tensors come from ("in the file").
std::vector<std::string> problems(const std::vector<std::pair<std::string, Var>>& params, const StateDict& tensors,
                                  const char* side) {
  std::vector<std::string> out;
  std::unordered_map<std::string_view, const std::pair<std::string, Tensor>*> given;
  for (const auto& t : tensors) {
    if (given.count(t.first)) out.push_back("tensor '" + t.first + "' appears twice");
    else if (!t.second.defined()) out.push_back("tensor '" + t.first + "' is empty (undefined)");
    given.emplace(t.first, &t);
  }
  std::unordered_map<std::string_view, int> wanted;
  for (const auto& [name, p] : params) {
    wanted[name] = 1;
    auto it = given.find(name);
    if (it == given.end()) {
      out.push_back("missing tensor '" + name + "'");
      continue;
    }
    const Tensor& t = it->second->second;
    if (!t.defined()) continue;
    if (!(t.shape() == p.shape()))
      out.push_back("'" + name + "' has shape " + t.shape().str() + " " + side + " but " + p.shape().str() +
                    " in the model");
    if (t.dtype() != p.dtype())
      out.push_back("'" + name + "' has dtype " + dtype_name(t.dtype()) + " " + side + " but " +
                    dtype_name(p.dtype()) + " in the model");
  }
  for (const auto& t : tensors)
    if (!wanted.count(t.first)) out.push_back("unexpected tensor '" + t.first + "'");
  return out;
}

template <class Refusal>
void check_then_copy(Module& m, const StateDict& tensors, const std::string& where, const char* side) {
  const auto params = m.named_parameters();
  const std::vector<std::string> found = problems(params, tensors, side);
  if (!found.empty()) {
    std::string message = where;
    for (size_t i = 0; i < found.size(); ++i) message += (i ? "; " : "") + found[i];
    throw Refusal(message);
  }
  std::unordered_map<std::string_view, const Tensor*> given;
  for (const auto& t : tensors) given.emplace(t.first, &t.second);
  for (const auto& [name, p] : params) {
    Tensor value = p.value();
    value.copy_from(*given.at(name));
  }
}

// ---- the envelope's schema

[[noreturn]] void refuse(const std::string& path, const std::string& why) {
  throw RefusedFile("[state_dict] " + path + ": " + why);
}

template <class Int> bool parse_int(std::string_view text, Int& out) {
  if (text.empty() || text[0] < '0' || text[0] > '9') return false;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t offset, bytes;
};

[[noreturn]] void refuse_line(const std::string& path, size_t number, std::string_view line, const std::string& why) {
  refuse(path, "the schema's line " + std::to_string(number) + " ('" + io::printable_bytes(line) + "') " + why);
}

// One schema line "NAME DTYPE [E0,...] OFFSET BYTES" (no newline), or a refusal naming it.
Entry parse_line(std::string_view line, size_t number, const std::string& path) {
  const auto bad = [&](const std::string& why) { refuse_line(path, number, line, why); };
  std::vector<std::string_view> fields;
  for (size_t at = 0;;) {
    const size_t space = line.find(' ', at);
    fields.push_back(line.substr(at, space == std::string_view::npos ? std::string_view::npos : space - at));
    if (space == std::string_view::npos) break;
    at = space + 1;
  }
  if (fields.size() != 5) bad("is not 'NAME DTYPE [EXTENTS] OFFSET BYTES'");
  Entry e{std::string(fields[0]), DType::f32, Shape{}, 0, 0};
  if (!valid_name(e.name)) bad("has no valid name");
  bool known = false;
  for (const DType d : kDTypes)
    if (fields[1] == dtype_name(d)) e.dtype = d, known = true;
  if (!known) bad("names an unknown dtype");
  const std::string_view dims = fields[2];
  if (dims.size() < 2 || dims.front() != '[' || dims.back() != ']') bad("has no [extents]");
  std::vector<int64_t> extents;
  for (std::string_view rest = dims.substr(1, dims.size() - 2); !rest.empty();) {
    const size_t comma = rest.find(',');
    int64_t extent = 0;
    if (!parse_int(rest.substr(0, comma), extent) || comma == rest.size() - 1) bad("has a malformed extent");
    extents.push_back(extent);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
  }
  if (extents.size() > static_cast<size_t>(Shape::kMaxDims)) bad("has more extents than a tensor holds");
  try {
    e.shape = Shape(extents.begin(), extents.end());
  } catch (const Error&) {
    bad("has more elements than fit in 64 bits");
  }
  if (!parse_int(fields[3], e.offset) || !parse_int(fields[4], e.bytes)) bad("has a malformed offset or size");
  uint64_t expected = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(e.shape.numel()), dtype_size(e.dtype), &expected) ||
      expected != e.bytes)
    bad("gives " + std::to_string(e.bytes) + " bytes, not the shape's");
  return e;
}

std::string schema_of(const StateDict& tensors, uint64_t& total) {
  std::string schema(kSchemaHeader);
  total = 0;
  for (const auto& t : tensors) {
    const uint64_t bytes = t.second.nbytes();
    schema += t.first + " " + dtype_name(t.second.dtype()) + " " + shape_text(t.second.shape()) + " " +
              std::to_string(total) + " " + std::to_string(bytes) + "\n";
    total += bytes;
  }
  return schema;
}

// ---- safetensors

[[noreturn]] void refuse_safetensors(const std::string& path, const std::string& why) {
  throw RefusedFile("[safetensors] " + path + ": " + why);
}

const char* safetensors_dtype(DType d) {
  switch (d) {
    case DType::f64: return "F64";
    case DType::f32: return "F32";
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
    case DType::i32: return "I32";
    case DType::i64: return "I64";
    case DType::u8: return "U8";
  }
  return "?";
}

}  // namespace

StateDict state_dict(const Module& m) {
  StateDict out;
  for (const auto& [name, p] : m.named_parameters()) out.push_back({name, on_host(p.value()).clone()});
  return out;
}

StateDict prefixed(const StateDict& tensors, const std::string& prefix) {
  StateDict out;
  for (const auto& [name, t] : tensors) out.emplace_back(prefix + name, t);
  return out;
}

StateDict under(const StateDict& tensors, const std::string& prefix, bool strip) {
  StateDict out;
  for (const auto& [name, t] : tensors)
    if (name.starts_with(prefix)) out.emplace_back(strip ? name.substr(prefix.size()) : name, t);
  return out;
}

StateDict generator_state(const Generator& gen, const std::string& name) {
  auto word = [](uint64_t v) { return Tensor::from_vector(std::vector<int64_t>{static_cast<int64_t>(v)}, Shape{}); };
  return {{name + ".seed", word(gen.seed())}, {name + ".offset", word(gen.offset())}};
}

void load_generator_state(Generator& gen, const StateDict& tensors, const std::string& name) {
  uint64_t words[2] = {0, 0};
  const std::string keys[2] = {name + ".seed", name + ".offset"};
  for (int k = 0; k < 2; ++k) {
    const Tensor* found = nullptr;
    for (const auto& [n, t] : tensors)
      if (n == keys[k]) found = &t;
    if (!found) throw Error("[state_dict] missing tensor '" + keys[k] + "'");
    if (found->dtype() != DType::i64 || found->ndim() != 0)
      throw Error("[state_dict] '" + keys[k] + "' must be a () i64 tensor, got " + dtype_name(found->dtype()) + " " +
                  found->shape().str());
    words[k] = static_cast<uint64_t>(on_host(*found).data<int64_t>()[0]);
  }
  gen.manual_seed(words[0]);
  gen.take(words[1]);
}

void load_state_dict(Module& m, const StateDict& tensors) {
  check_then_copy<Error>(m, tensors, "[state_dict] ", "in the state dict");
}

void save_tensors(const std::string& path, const StateDict& tensors, const StateDictFile& info) {
  check_writable(tensors, "[state_dict] cannot save " + path + ": ");
  uint64_t total = 0;
  io::EnvelopeIdentity identity;
  identity.schema = schema_of(tensors, total);
  identity.learner = info.learner;
  identity.data = info.data;
  identity.seed = info.seed;
  identity.chunk_count = 1;
  identity.chunk_bytes = identity.payload_bytes = (total + 3) / 4 * 4;
  std::vector<std::vector<float>> plane(1, std::vector<float>(identity.chunk_bytes / 4, 0.0f));
  char* bytes = reinterpret_cast<char*>(plane[0].data());
  for (const auto& t : tensors) {
    const Tensor host = on_host(t.second);
    if (host.nbytes()) std::memcpy(bytes, host.raw_data(), host.nbytes());
    bytes += host.nbytes();
  }
  io::write(path, identity, info.step, plane);
}

StateDict load_tensors(const std::string& path, StateDictFile* info, size_t max_bytes) {
  const std::string file = io::read_file(path, max_bytes);
  const io::EnvelopeContents contents = io::inspect(file, path);
  const io::EnvelopeIdentity& id = contents.identity;
  std::string_view schema = id.schema;
  if (schema.substr(0, kSchemaHeader.size()) != kSchemaHeader)
    refuse(path, "not a state dict: its schema identity begins '" +
                     io::printable_bytes(schema.substr(0, std::min<size_t>(schema.size(), 40))) + "', not '" +
                     io::printable_bytes(kSchemaHeader) + "'");
  schema.remove_prefix(kSchemaHeader.size());
  std::vector<Entry> entries;
  std::unordered_map<std::string_view, int> seen;
  uint64_t total = 0;
  for (size_t number = 2; !schema.empty(); ++number) {
    const size_t end = schema.find('\n');
    if (end == std::string_view::npos) refuse(path, "the schema's last line has no newline");
    Entry e = parse_line(schema.substr(0, end), number, path);
    schema.remove_prefix(end + 1);
    if (e.offset != total)
      refuse(path, "tensor '" + e.name + "' starts at byte " + std::to_string(e.offset) + ", not where the one " +
                       "before it ends (" + std::to_string(total) + ")");
    if (__builtin_add_overflow(total, e.bytes, &total)) refuse(path, "the tensors' sizes overflow 64 bits");
    entries.push_back(std::move(e));
  }
  for (const Entry& e : entries)
    if (seen[e.name]++) refuse(path, "tensor '" + e.name + "' appears twice");
  if (id.chunk_count != 1 || id.chunk_bytes != (total + 3) / 4 * 4 || total > id.chunk_bytes)
    refuse(path, "the schema's " + std::to_string(total) + " bytes of tensors do not fill its " +
                     std::to_string(id.chunk_count) + " plane(s) of " + std::to_string(id.chunk_bytes) + " bytes");
  const std::string_view plane = contents.planes;
  for (size_t i = total; i < plane.size(); ++i)
    if (plane[i] != 0) refuse(path, "the padding after the tensors' bytes is not zero");

  StateDict out;
  for (const Entry& e : entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype, Device::cpu());
    if (e.bytes) std::memcpy(t.raw_data(), plane.data() + e.offset, e.bytes);
    out.push_back({e.name, std::move(t)});
  }
  if (info) *info = StateDictFile{id.learner, id.data, id.seed, contents.step};
  return out;
}

void save_state_dict(const std::string& path, const Module& m, const StateDictFile& info) {
  StateDict tensors;  // handles, not copies: the bytes are read once, into the plane
  for (const auto& [name, p] : m.named_parameters()) tensors.push_back({name, p.value()});
  save_tensors(path, tensors, info);
}

StateDictFile load_state_dict(const std::string& path, Module& m) {
  // The most the reader takes: 4 times what a file of this model's tensors holds, plus 1 MiB (as
  // io::read does), so a file of another model is still read and its differences named.
  uint64_t expected = kSchemaHeader.size(), bound = 0;
  bool overflow = false;
  for (const auto& [name, p] : m.named_parameters()) {
    overflow |= __builtin_add_overflow(expected, name.size() + 128, &expected);
    overflow |= __builtin_add_overflow(expected, p.value().nbytes(), &expected);
  }
  overflow |= __builtin_mul_overflow(expected, uint64_t{4}, &bound);
  overflow |= __builtin_add_overflow(bound, uint64_t{1} << 20, &bound);
  StateDictFile info;
  const StateDict tensors = load_tensors(path, &info, overflow ? SIZE_MAX : static_cast<size_t>(bound));
  check_then_copy<RefusedFile>(m, tensors, "[state_dict] " + path + ": ", "in the file");
  return info;
}

void export_safetensors(const std::string& path, const StateDict& tensors) {
  check_writable(tensors, "[safetensors] cannot save " + path + ": ");
  json::Value::Object header;
  uint64_t total = 0;
  for (const auto& t : tensors) {
    json::Value::Array shape;
    for (const int64_t extent : t.second.shape()) shape.emplace_back(extent);
    const uint64_t end = total + t.second.nbytes();
    header.emplace_back(t.first, json::Value(json::Value::Object{{"dtype", safetensors_dtype(t.second.dtype())},
                                                                {"shape", std::move(shape)},
                                                                {"data_offsets", json::Value::Array{total, end}}}));
    total = end;
  }
  std::string text = json::dumps(json::Value(std::move(header)), -1);
  text.append((8 - text.size() % 8) % 8, ' ');  // the bytes that follow start 8-aligned
  std::string out;
  out.reserve(8 + text.size() + total);
  io::append_u64(out, text.size());
  out += text;
  for (const auto& t : tensors) {
    const Tensor host = on_host(t.second);
    out.append(static_cast<const char*>(host.raw_data()), host.nbytes());
  }
  io::write_file_atomic(path, out);
}

StateDict import_safetensors(const std::string& path, size_t max_bytes) {
  const std::string file = io::read_file(path, max_bytes);
  const auto refuse_file = [&](const std::string& why) { refuse_safetensors(path, why); };
  if (file.size() < 8) refuse_file("the file is " + std::to_string(file.size()) + " bytes, shorter than a header");
  const uint64_t n = io::load_u64(file, 0);
  if (n > file.size() - 8)
    refuse_file("the header claims " + std::to_string(n) + " bytes, the file has " +
                       std::to_string(file.size() - 8) + " after its size");
  const std::string_view data = std::string_view(file).substr(8 + n);
  struct Range {
    uint64_t begin, end;
    size_t index;
  };
  std::vector<Range> ranges;
  StateDict out;
  try {
    const json::Value header = json::parse(std::string_view(file).substr(8, n), path);
    if (!header.is_object()) refuse_file("the header is not a JSON object");
    for (const auto& item : header.as_object()) {
      const std::string& name = item.first;  // not a structured binding: clang 14 cannot capture one
      const json::Value& entry = item.second;
      if (name == "__metadata__") continue;
      const auto field = [&](const char* key) -> const json::Value& {
        const json::Value* v = entry.is_object() ? entry.find(key) : nullptr;
        if (!v) refuse_safetensors(path, "tensor '" + name + "' has no " + key);
        return *v;
      };
      DType dtype = DType::f32;
      bool known = false;
      for (const DType d : kDTypes)
        if (field("dtype").as_string() == safetensors_dtype(d)) dtype = d, known = true;
      if (!known) refuse_file("tensor '" + name + "' has dtype " + field("dtype").as_string() + ", which tapegrad lacks");
      std::vector<int64_t> extents;
      for (const json::Value& e : field("shape").as_array()) extents.push_back(e.as_int());
      if (extents.size() > static_cast<size_t>(Shape::kMaxDims) ||
          std::any_of(extents.begin(), extents.end(), [](int64_t e) { return e < 0; }))
        refuse_file("tensor '" + name + "' has a shape tapegrad cannot hold");
      const Shape shape(extents.begin(), extents.end());
      const json::Value::Array& offsets = field("data_offsets").as_array();
      if (offsets.size() != 2) refuse_file("tensor '" + name + "' has no [begin, end] data_offsets");
      const uint64_t begin = offsets[0].as_uint64(), end = offsets[1].as_uint64();
      uint64_t bytes = 0;
      const bool too_big = __builtin_mul_overflow(static_cast<uint64_t>(shape.numel()), dtype_size(dtype), &bytes);
      if (too_big || end < begin || end > data.size() || end - begin != bytes)
        refuse_file("tensor '" + name + "' of shape " + shape.str() + " has bytes [" + std::to_string(begin) +
                           ", " + std::to_string(end) + ") in a buffer of " + std::to_string(data.size()));
      Tensor t = Tensor::empty(shape, dtype, Device::cpu());
      if (bytes) std::memcpy(t.raw_data(), data.data() + begin, bytes);
      ranges.push_back({begin, end, out.size()});
      out.push_back({name, std::move(t)});
    }
  } catch (const RefusedFile&) {
    throw;
  } catch (const Error& e) {
    refuse_file(std::string("malformed header: ") + e.what());
  }
  std::stable_sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  uint64_t at = 0;
  for (const Range& r : ranges) {
    if (r.begin != at) refuse_file("tensor '" + out[r.index].first + "' does not start where the one before it ends");
    at = r.end;
  }
  if (at != data.size()) refuse_file(std::to_string(data.size() - at) + " bytes follow the last tensor");
  return out;
}

}  // namespace tapegrad::nn
