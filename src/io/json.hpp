// JSON values, Python's json.dumps and a simdjson-backed parse: what the apps print and read.
//
// Rule: dumps(v, 2) is byte-identical to Python's json.dumps(v, indent=2) and parse() keeps
// what json.loads keeps: int vs float ("1" is an int, "1.0" and "1e5" are floats), object key
// order, and for a repeated key the last value at the first key's place. Errors throw
// tapegrad::Error naming the input.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace tapegrad::json {

class Value {
 public:
  using Array = std::vector<Value>;
  using Object = std::vector<std::pair<std::string, Value>>;  // insertion order, keys unique
  using Data = std::variant<std::nullptr_t, bool, int64_t, uint64_t, double, std::string, Array, Object>;

  Value() = default;  // null
  Value(std::nullptr_t) {}
  Value(bool b) : data_(b) {}
  // Any integer type; unsigned values above INT64_MAX are kept as uint64.
  template <std::integral T>
    requires(!std::same_as<T, bool>)
  Value(T i) {
    if constexpr (std::is_signed_v<T>) data_ = static_cast<int64_t>(i);
    else if (static_cast<uint64_t>(i) > static_cast<uint64_t>(INT64_MAX)) data_ = static_cast<uint64_t>(i);
    else data_ = static_cast<int64_t>(i);
  }
  Value(double d) : data_(d) {}
  Value(const char* s) : data_(std::string(s)) {}
  Value(std::string s) : data_(std::move(s)) {}
  Value(std::string_view s) : data_(std::string(s)) {}
  Value(Array a) : data_(std::move(a)) {}
  Value(Object o) : data_(std::move(o)) {}

  bool is_null() const { return std::holds_alternative<std::nullptr_t>(data_); }
  bool is_bool() const { return std::holds_alternative<bool>(data_); }
  bool is_int() const { return std::holds_alternative<int64_t>(data_) || std::holds_alternative<uint64_t>(data_); }
  bool is_double() const { return std::holds_alternative<double>(data_); }
  bool is_number() const { return is_int() || is_double(); }
  bool is_string() const { return std::holds_alternative<std::string>(data_); }
  bool is_array() const { return std::holds_alternative<Array>(data_); }
  bool is_object() const { return std::holds_alternative<Object>(data_); }
  // "null", "bool", "int", "float", "string", "array" or "object": for error messages.
  const char* type_name() const;

  // Accessors throw tapegrad::Error naming both types when the value holds another type.
  bool as_bool() const;
  int64_t as_int() const;      // throws for a uint64 above INT64_MAX
  uint64_t as_uint64() const;  // throws for a negative int
  double as_double() const;    // any number; ints convert as Python's float(i) does
  const std::string& as_string() const;
  const Array& as_array() const;
  Array& as_array();
  const Object& as_object() const;
  Object& as_object();

  // The value stored under key in an object, or nullptr (throws if this is not an object).
  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  // d[key] = value: replaces an existing key in place, else appends it; returns the stored value.
  Value& set(std::string key, Value value);

  // The alternative held (uint64 only above INT64_MAX), for std::visit.
  const Data& data() const { return data_; }

  bool operator==(const Value& other) const = default;

 private:
  Data data_;
};

// json.dumps(v, indent=indent) for indent >= 0: one item per line, nested items indented by
// `indent` more spaces, "[]" and "{}" when empty, no trailing newline. indent < 0 gives
// json.dumps(v) (indent=None): one line with ", " and ": ". Floats print as repr(float), except
// NaN, Infinity and -Infinity as Python writes them.
std::string dumps(const Value& v, int indent = 2);

// json.loads(text), via simdjson's DOM. `what` names the input in errors ("cfg.json"):
// "[json] malformed JSON in cfg.json: TAPE_ERROR: <simdjson's explanation>". Integers must fit
// in int64 or uint64 (Python keeps them exact at any size) and NaN/Infinity are refused.
Value parse(std::string_view text, std::string_view what = "JSON");

}  // namespace tapegrad::json
