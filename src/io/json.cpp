// JSON values, dumps and parse (see json.hpp).
//
// Rule: dumps writes what CPython 3.11's json encoder writes (floats via py::float_repr, strings
// via py::json_string, separators "," + newline or ", ", and ": "); parse maps simdjson's DOM
// one to one onto Value, merging repeated keys as a Python dict does.
#include "tapegrad/io/json.hpp"

#include <simdjson.h>

#include <charconv>
#include <cmath>
#include <optional>
#include <unordered_map>

#include "tapegrad/tensor/error.hpp"
#include "tapegrad/io/json_text.hpp"

namespace tapegrad::json {

// ---- Value ----------------------------------------------------------------------------------------

const char* Value::type_name() const {
  constexpr const char* kNames[] = {"null", "bool", "int", "int", "float", "string", "array", "object"};
  return kNames[data_.index()];
}

namespace {

[[noreturn]] void wrong_type(const Value& v, const char* expected) {
  throw Error(std::string("[json] expected ") + expected + ", got " + v.type_name());
}

}  // namespace

bool Value::as_bool() const {
  if (!is_bool()) wrong_type(*this, "bool");
  return std::get<bool>(data_);
}

int64_t Value::as_int() const {
  if (const auto* i = std::get_if<int64_t>(&data_)) return *i;
  if (const auto* u = std::get_if<uint64_t>(&data_))
    throw Error("[json] integer " + std::to_string(*u) + " does not fit in int64; read it with as_uint64()");
  wrong_type(*this, "int");
}

uint64_t Value::as_uint64() const {
  if (const auto* u = std::get_if<uint64_t>(&data_)) return *u;
  if (const auto* i = std::get_if<int64_t>(&data_)) {
    if (*i < 0) throw Error("[json] integer " + std::to_string(*i) + " is negative; expected an unsigned integer");
    return static_cast<uint64_t>(*i);
  }
  wrong_type(*this, "int");
}

double Value::as_double() const {
  if (const auto* d = std::get_if<double>(&data_)) return *d;
  if (const auto* i = std::get_if<int64_t>(&data_)) return static_cast<double>(*i);  // round to nearest
  if (const auto* u = std::get_if<uint64_t>(&data_)) return static_cast<double>(*u);
  wrong_type(*this, "number");
}

const std::string& Value::as_string() const {
  if (!is_string()) wrong_type(*this, "string");
  return std::get<std::string>(data_);
}

const Value::Array& Value::as_array() const {
  if (!is_array()) wrong_type(*this, "array");
  return std::get<Array>(data_);
}

Value::Array& Value::as_array() {
  if (!is_array()) wrong_type(*this, "array");
  return std::get<Array>(data_);
}

const Value::Object& Value::as_object() const {
  if (!is_object()) wrong_type(*this, "object");
  return std::get<Object>(data_);
}

Value::Object& Value::as_object() {
  if (!is_object()) wrong_type(*this, "object");
  return std::get<Object>(data_);
}

const Value* Value::find(std::string_view key) const {
  for (const auto& [k, v] : as_object())
    if (k == key) return &v;
  return nullptr;
}

Value* Value::find(std::string_view key) {
  return const_cast<Value*>(static_cast<const Value&>(*this).find(key));
}

Value& Value::set(std::string key, Value value) {
  if (Value* existing = find(key)) return *existing = std::move(value);
  return as_object().emplace_back(std::move(key), std::move(value)).second;
}

// ---- dumps ----------------------------------------------------------------------------------------

namespace {

// Python's encoder for indent=n: every item on its own line, indented n spaces per level;
// for indent=None (indent < 0 here) one line with ", " between items.
struct Writer {
  std::string& out;
  int indent;
  int level = 0;

  void operator()(std::nullptr_t) { out += "null"; }
  void operator()(bool b) { out += b ? "true" : "false"; }
  void operator()(int64_t i) { out += std::to_string(i); }
  void operator()(uint64_t u) { out += std::to_string(u); }
  void operator()(double d) {
    if (std::isnan(d)) out += "NaN";
    else if (std::isinf(d)) out += d > 0 ? "Infinity" : "-Infinity";
    else out += py::float_repr(d);
  }
  void operator()(const std::string& s) { out += py::json_string(s); }

  void operator()(const Value::Array& items) {
    if (items.empty()) {
      out += "[]";
      return;
    }
    out += '[';
    ++level;
    for (size_t i = 0; i < items.size(); ++i) {
      before_item(i);
      std::visit(*this, items[i].data());
    }
    --level;
    after_last_item();
    out += ']';
  }

  void operator()(const Value::Object& members) {
    if (members.empty()) {
      out += "{}";
      return;
    }
    out += '{';
    ++level;
    for (size_t i = 0; i < members.size(); ++i) {
      before_item(i);
      out += py::json_string(members[i].first);
      out += ": ";
      std::visit(*this, members[i].second.data());
    }
    --level;
    after_last_item();
    out += '}';
  }

  void before_item(size_t i) {
    if (i > 0) out += indent >= 0 ? "," : ", ";
    if (indent >= 0) new_line();
  }
  void after_last_item() {
    if (indent >= 0) new_line();
  }
  void new_line() {
    out += '\n';
    out.append(static_cast<size_t>(indent) * static_cast<size_t>(level), ' ');
  }
};

}  // namespace

std::string dumps(const Value& v, int indent) {
  std::string out;
  std::visit(Writer{out, indent}, v.data());
  return out;
}

// ---- parse ----------------------------------------------------------------------------------------

namespace {

// simdjson's name for the errors a DOM parse can report (its own table has only the messages).
const char* error_name(simdjson::error_code code) {
  switch (code) {
    case simdjson::CAPACITY: return "CAPACITY";
    case simdjson::MEMALLOC: return "MEMALLOC";
    case simdjson::TAPE_ERROR: return "TAPE_ERROR";
    case simdjson::DEPTH_ERROR: return "DEPTH_ERROR";
    case simdjson::STRING_ERROR: return "STRING_ERROR";
    case simdjson::T_ATOM_ERROR: return "T_ATOM_ERROR";
    case simdjson::F_ATOM_ERROR: return "F_ATOM_ERROR";
    case simdjson::N_ATOM_ERROR: return "N_ATOM_ERROR";
    case simdjson::NUMBER_ERROR: return "NUMBER_ERROR";
    case simdjson::UTF8_ERROR: return "UTF8_ERROR";
    case simdjson::EMPTY: return "EMPTY";
    case simdjson::UNESCAPED_CHARS: return "UNESCAPED_CHARS";
    case simdjson::UNCLOSED_STRING: return "UNCLOSED_STRING";
    default: return "simdjson error";
  }
}

// The first integer literal outside strings that fits neither int64 nor uint64, with its byte
// offset: simdjson reports these only as NUMBER_ERROR, Python would read them exactly.
std::optional<std::pair<size_t, std::string_view>> find_oversized_integer(std::string_view text) {
  constexpr std::string_view kNumberChars = "0123456789.eE+-";
  for (size_t i = 0; i < text.size();) {
    if (text[i] == '"') {  // skip the string, escapes included
      for (++i; i < text.size() && text[i] != '"'; ++i)
        if (text[i] == '\\') ++i;
      ++i;
      continue;
    }
    if (text[i] != '-' && (text[i] < '0' || text[i] > '9')) {
      ++i;
      continue;
    }
    size_t end = i + 1;
    while (end < text.size() && kNumberChars.find(text[end]) != std::string_view::npos) ++end;
    const std::string_view token = text.substr(i, end - i);
    if (token.find_first_of(".eE") == std::string_view::npos) {
      int64_t as_signed = 0;
      uint64_t as_unsigned = 0;
      const auto result = token[0] == '-'
                              ? std::from_chars(token.data(), token.data() + token.size(), as_signed)
                              : std::from_chars(token.data(), token.data() + token.size(), as_unsigned);
      if (result.ec == std::errc::result_out_of_range) return std::pair{i, token};
    }
    i = end;
  }
  return std::nullopt;
}

Value from_element(simdjson::dom::element e) {
  using Type = simdjson::dom::element_type;
  switch (e.type()) {
    case Type::ARRAY: {
      const simdjson::dom::array children = e.get_array().value_unsafe();
      Value::Array items;
      items.reserve(children.size());
      for (simdjson::dom::element child : children) items.push_back(from_element(child));
      return items;
    }
    case Type::OBJECT: {
      // Repeated keys: the last value, at the first occurrence's place (a Python dict's update).
      const simdjson::dom::object fields = e.get_object().value_unsafe();
      Value::Object members;
      members.reserve(fields.size());
      std::unordered_map<std::string_view, size_t> position;  // keys live in the parser until it returns
      for (simdjson::dom::key_value_pair field : fields) {
        auto [it, is_new] = position.try_emplace(field.key, members.size());
        if (is_new) members.emplace_back(std::string(field.key), from_element(field.value));
        else members[it->second].second = from_element(field.value);
      }
      return members;
    }
    case Type::INT64: return e.get_int64().value_unsafe();
    case Type::UINT64: return e.get_uint64().value_unsafe();
    case Type::DOUBLE: return e.get_double().value_unsafe();
    case Type::STRING: return e.get_string().value_unsafe();
    case Type::BOOL: return e.get_bool().value_unsafe();
    case Type::NULL_VALUE: return nullptr;
  }
  TG_CHECK(false, "simdjson returned an unknown element type");
}

}  // namespace

Value parse(std::string_view text, std::string_view what) {
  simdjson::dom::parser parser;
  const simdjson::padded_string padded(text.data(), text.size());
  simdjson::dom::element root;
  if (const auto code = parser.parse(padded).get(root)) {
    const std::string where = "[json] malformed JSON in " + std::string(what) + ": ";
    if (code == simdjson::NUMBER_ERROR) {
      if (const auto oversized = find_oversized_integer(text))
        throw Error(where + "integer " + std::string(oversized->second) + " at byte " +
                    std::to_string(oversized->first) +
                    " does not fit in 64 bits (tapegrad reads integers as int64 or uint64; "
                    "write it with a decimal point if a float will do)");
    }
    throw Error(where + error_name(code) + ": " + simdjson::error_message(code));
  }
  return from_element(root);
}

}  // namespace tapegrad::json
