// Reading a tape dump (see tape_file.hpp for the rule it keeps).
//
// Every field is read through a Field, which knows its path in the document ("values[4].shape")
// so that each refusal names exactly what is wrong and where.
#include "tape_file.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "tapegrad/tensor/error.hpp"
#include "tapegrad/tape/tape_dump.hpp"
#include "tapegrad/io/atomic_file.hpp"
#include "text.hpp"

namespace tape {

using tapegrad::RefusedFile;

const char* event_kind_name(EventKind k) {
  switch (k) {
    case EventKind::set: return "set";
    case EventKind::added: return "added";
    case EventKind::overwritten: return "overwritten";
  }
  return "?";
}

const Entry& Tape::entry(int32_t id) const {
  if (auto it = index_of_id.find(id); it != index_of_id.end()) return values[it->second];
  throw RefusedFile("[tape] " + path + ": no value with id " + std::to_string(id));
}

const Entry& Tape::producer(int32_t node) const {
  if (auto it = index_of_node.find(node); it != index_of_node.end()) return values[it->second];
  throw RefusedFile("[tape] " + path + ": no value produced by node " + std::to_string(node));
}

std::string Tape::name(const Entry& e) const {
  if (!e.label.empty()) return e.label;
  std::string s = index_tag(e.index) + " " + (e.op.empty() ? e.kind : e.op);
  if (!e.op.empty()) return s;
  if (e.reader < 0) return s + " " + shape_str(e.shape) + " " + e.dtype;
  const Entry& r = values[static_cast<size_t>(e.reader)];
  s += " to " + (r.label.empty() ? index_tag(r.index) + " " + r.op : r.label);
  return r.inputs.size() > 1 ? s + " (input " + std::to_string(e.reader_slot) + ")" : s;
}

namespace {

// One JSON value and where it sits in the file ("" for the whole dump, "values[4].shape"); every
// accessor refuses with that path.
class Field {
 public:
  Field(const json::Value& v, std::string where, const std::string& file) : v_(v), where_(std::move(where)), file_(file) {}

  [[noreturn]] void refuse(const std::string& what) const {
    throw RefusedFile("[tape] " + file_ + ": " + (where_.empty() ? "the dump" : where_) + " " + what);
  }
  const json::Value& raw() const { return v_; }
  const std::string& where() const { return where_; }
  bool is_null() const { return v_.is_null(); }

  // The field `key` when it is there (an optional field), else nothing.
  std::optional<Field> maybe(const char* key) const {
    if (!v_.is_object()) refuse(std::string("must be an object, got ") + v_.type_name());
    const json::Value* child = v_.find(key);
    if (!child) return std::nullopt;
    return Field(*child, where_.empty() ? key : where_ + "." + key, file_);
  }
  Field at(const char* key) const {
    if (!v_.is_object()) refuse(std::string("must be an object, got ") + v_.type_name());
    const json::Value* child = v_.find(key);
    if (!child) refuse(std::string("has no \"") + key + "\"");
    return Field(*child, where_.empty() ? key : where_ + "." + key, file_);
  }
  std::vector<Field> items() const {
    if (!v_.is_array()) refuse(std::string("must be a list, got ") + v_.type_name());
    std::vector<Field> out;
    const json::Value::Array& a = v_.as_array();
    for (size_t i = 0; i < a.size(); ++i) out.emplace_back(a[i], where_ + "[" + std::to_string(i) + "]", file_);
    return out;
  }
  const std::string& string() const {
    if (!v_.is_string()) refuse(std::string("must be a string, got ") + v_.type_name());
    return v_.as_string();
  }
  bool boolean() const {
    if (!v_.is_bool()) refuse(std::string("must be true or false, got ") + v_.type_name());
    return v_.as_bool();
  }
  int64_t integer(int64_t lo, int64_t hi) const {
    if (!v_.is_int()) refuse(std::string("must be an integer, got ") + v_.type_name());
    const auto& d = v_.data();
    if (std::holds_alternative<uint64_t>(d) || v_.as_int() < lo || v_.as_int() > hi)
      refuse("must be from " + std::to_string(lo) + " to " + std::to_string(hi) + ", got " + json::dumps(v_));
    return v_.as_int();
  }
  // A number, or one of the strings a dump writes for a non-finite float.
  double number() const {
    if (v_.is_number()) return v_.as_double();
    if (v_.is_string()) {
      const std::string& s = v_.as_string();
      if (s == "NaN") return std::nan("");
      if (s == "Infinity") return INFINITY;
      if (s == "-Infinity") return -INFINITY;
    }
    refuse(std::string("must be a number (or \"NaN\", \"Infinity\", \"-Infinity\"), got ") +
           (v_.is_string() ? "\"" + v_.as_string() + "\"" : std::string(v_.type_name())));
  }
  const std::string& one_of(std::initializer_list<const char*> allowed) const {
    const std::string& s = string();
    std::string list;
    for (const char* a : allowed) {
      if (s == a) return s;
      list += (list.empty() ? "" : ", ") + std::string("\"") + a + "\"";
    }
    refuse("must be one of " + list + ", got \"" + s + "\"");
  }

 private:
  const json::Value& v_;
  std::string where_;
  const std::string& file_;
};

constexpr int64_t kMaxInt = INT64_MAX;
constexpr int64_t kMaxId = INT32_MAX;

// The extents, whose element count must fit an int64_t (as tapegrad's Shape, shape.hpp).
std::vector<int64_t> read_shape(const Field& f) {
  std::vector<int64_t> shape;
  for (const Field& d : f.items()) shape.push_back(d.integer(0, kMaxInt));
  int64_t product = 1;  // of the nonzero extents
  for (int64_t d : shape)
    if (d != 0 && __builtin_mul_overflow(product, d, &product))
      f.refuse("is " + shape_str(shape) + ", which has more elements than fit in 64 bits");
  return shape;
}

// The element count of a shape read_shape accepted (so it cannot overflow).
int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

TensorData read_tensor(const Field& f) {
  TensorData t;
  t.shape = read_shape(f.at("shape"));
  t.dtype = f.at("dtype").one_of({"f64", "f32", "bf16", "f16", "i32", "i64", "u8"});
  t.count = f.at("count").integer(0, kMaxInt);
  if (t.count != numel(t.shape))
    f.refuse("has count " + std::to_string(t.count) + " but shape " + shape_str(t.shape) + " holds " +
             std::to_string(numel(t.shape)) + " elements");
  t.truncated = f.at("truncated").boolean();
  for (const Field& x : f.at("values").items()) t.values.push_back(x.number());
  const int64_t n = static_cast<int64_t>(t.values.size());
  if (t.truncated ? n > t.count : n != t.count)
    f.refuse("has " + std::to_string(n) + " values for " + std::to_string(t.count) + " elements" +
             (t.truncated ? "" : " and is not marked truncated (is the file cut short?)"));
  double* stats[] = {&t.min, &t.max, &t.mean, &t.std};
  const char* names[] = {"min", "max", "mean", "std"};
  for (int k = 0; k < 4; ++k) {
    Field s = f.at(names[k]);
    if (t.count == 0) {
      if (!s.is_null()) s.refuse("must be null for an empty tensor");
      *stats[k] = std::nan("");
    } else {
      *stats[k] = s.number();
    }
  }
  return t;
}

std::optional<TensorData> read_optional_tensor(const Field& f) {
  if (f.is_null()) return std::nullopt;
  return read_tensor(f);
}

Entry read_entry(const Field& f, int index) {
  Entry e;
  e.index = static_cast<int>(f.at("index").integer(index, index));
  e.id = static_cast<int32_t>(f.at("id").integer(-kMaxId, kMaxId));
  e.kind = f.at("kind").one_of({"parameter", "input", "activation"});
  e.label = f.at("label").string();
  if (const std::optional<Field> scope = f.maybe("scope")) {  // optional: older dumps have none
    e.scope = scope->string();
    if (e.scope.empty()) scope->refuse("must name a scope (a value outside every scope has no \"scope\")");
  }
  Field op = f.at("op"), node = f.at("node");
  if (op.is_null() != node.is_null()) f.refuse("must have both \"op\" and \"node\" or neither (one is null)");
  if (!op.is_null()) {
    e.op = op.string();
    if (e.op.empty()) op.refuse("must name the op");
    e.node = static_cast<int32_t>(node.integer(0, kMaxId));
    if (e.kind != "activation")
      f.refuse("is of kind \"" + e.kind + "\" but names a node; only activations are produced by ops");
  }
  for (const Field& in : f.at("inputs").items()) e.inputs.push_back(static_cast<int32_t>(in.integer(-kMaxId, kMaxId)));
  if (e.node < 0 && !e.inputs.empty()) f.refuse("lists inputs but no op produced it");
  if (e.node >= 0 && e.inputs.empty()) f.refuse("names an op but no inputs");
  e.shape = read_shape(f.at("shape"));
  e.dtype = f.at("dtype").one_of({"f64", "f32", "bf16", "f16", "i32", "i64", "u8"});
  e.device = f.at("device").string();
  e.requires_grad = f.at("requires_grad").boolean();
  Field rows = f.at("rows");
  if (!rows.is_null()) {
    for (const Field& r : rows.items()) e.rows.push_back(r.string());
    const size_t want = e.shape.empty() ? 0 : static_cast<size_t>(e.shape[0]);
    if (e.shape.empty() || e.rows.size() != want)
      rows.refuse("has " + std::to_string(e.rows.size()) + " names for a value of shape " + shape_str(e.shape));
  }
  if (const std::optional<Field> tokens = f.maybe("tokens")) {  // optional: its elements are token ids
    e.tokens = tokens->boolean();
    if (e.tokens && e.dtype != "i32" && e.dtype != "i64")
      tokens->refuse("is true for a value of dtype " + e.dtype + "; token ids are i32 or i64");
  }
  e.value = read_tensor(f.at("value"));
  if (e.value.shape != e.shape || e.value.dtype != e.dtype)
    f.at("value").refuse("is " + shape_str(e.value.shape) + " " + e.value.dtype + " but the value is " +
                         shape_str(e.shape) + " " + e.dtype);
  e.grad = read_optional_tensor(f.at("grad"));
  if (e.grad && e.grad->shape != e.shape)
    f.at("grad").refuse("has shape " + shape_str(e.grad->shape) + " but the value has " + shape_str(e.shape));
  return e;
}

// Values: indices in order, ids unique, inputs recorded earlier, nodes unique; fills the indices.
void check_values(Tape& t, const std::vector<Field>& values) {
  t.index_of_id.reserve(t.values.size());
  t.index_of_node.reserve(t.values.size());
  for (size_t i = 0; i < t.values.size(); ++i) {
    const Entry& e = t.values[i];
    const Field& f = values[i];
    if (!t.index_of_id.emplace(e.id, i).second) f.at("id").refuse("repeats id " + std::to_string(e.id));
    if ((e.id < 0) != (e.kind == "parameter"))
      f.at("id").refuse("is " + std::to_string(e.id) + " for kind \"" + e.kind +
                        "\" (parameters have negative ids, other values not)");
    if (e.node >= 0 && !t.index_of_node.emplace(e.node, i).second)
      f.at("node").refuse("repeats node " + std::to_string(e.node));
    for (size_t k = 0; k < e.inputs.size(); ++k) {
      const auto input = t.index_of_id.find(e.inputs[k]);
      if (input == t.index_of_id.end() || input->second >= i)
        f.at("inputs").items()[k].refuse("names value " + std::to_string(e.inputs[k]) +
                                         ", which is not recorded before it");
    }
  }
}

// The groups of Tape::groups, made in record order: a scope's group (and every group above it,
// by the dots) the first time a value names it.
void group_values(Tape& t) {
  t.groups.assign(1, Group{});
  std::unordered_map<std::string, int> index_of{{"", 0}};
  auto group_of = [&](const std::string& scope) {
    int at = 0;
    for (size_t end = 0;; ++end) {
      end = scope.find('.', end);
      std::string prefix = scope.substr(0, end);
      auto [it, fresh] = index_of.try_emplace(prefix, static_cast<int>(t.groups.size()));
      if (fresh) {
        Group g;
        g.name = std::move(prefix);
        g.parent = at;
        g.depth = t.groups[static_cast<size_t>(at)].depth + 1;
        t.groups[static_cast<size_t>(at)].children.push_back(it->second);
        t.groups.push_back(std::move(g));
      }
      at = it->second;
      if (end == std::string::npos) break;
    }
    return at;
  };
  std::vector<int> first_reader(t.values.size(), -1);
  for (const Entry& e : t.values)
    for (size_t k = 0; k < e.inputs.size(); ++k) {
      Entry& read = t.values[t.index_of_id.at(e.inputs[k])];
      int& r = first_reader[static_cast<size_t>(read.index)];
      if (r >= 0) continue;
      r = e.index;
      read.reader = e.index;
      read.reader_slot = static_cast<int>(k);
    }
  for (Entry& e : t.values) {
    const int reader = first_reader[static_cast<size_t>(e.index)];
    const std::string& scope = !e.scope.empty() || e.node >= 0 || reader < 0 ? e.scope : t.values[static_cast<size_t>(reader)].scope;
    e.group = scope.empty() ? 0 : group_of(scope);
    t.groups[static_cast<size_t>(e.group)].entries.push_back(e.index);
    for (int g = e.group; g >= 0; g = t.groups[static_cast<size_t>(g)].parent) {
      Group& up = t.groups[static_cast<size_t>(g)];
      if (up.values++ == 0 || (up.nodes == 0 && e.node >= 0)) up.first = e.index;
      up.nodes += e.node >= 0;
    }
  }
  // Children in forward order: parameters are made before the step, in whatever order the model
  // built its layers, so a group's first op output orders it, not its first value.
  for (Group& g : t.groups)
    std::stable_sort(g.children.begin(), g.children.end(),
                     [&](int a, int b) { return t.groups[static_cast<size_t>(a)].first < t.groups[static_cast<size_t>(b)].first; });
}

// A region of the value `target`: its elements inside the value's (strides >= 0), its shape's
// element count the contribution's (checked by the caller).
Region read_region(const Field& f, const Entry& target) {
  Region r;
  r.offset = f.at("offset").integer(0, kMaxInt);
  r.shape = read_shape(f.at("shape"));
  for (const Field& s : f.at("strides").items()) r.strides.push_back(s.integer(0, kMaxInt));
  if (r.strides.size() != r.shape.size())
    f.at("strides").refuse("has " + std::to_string(r.strides.size()) + " strides for the " +
                           std::to_string(r.shape.size()) + " axes of shape " + shape_str(r.shape));
  r.index = f.at("index").string();
  if (numel(r.shape) == 0) return r;
  int64_t last = r.offset;
  for (size_t d = 0; d < r.shape.size(); ++d) {
    int64_t span = 0;
    if (__builtin_mul_overflow(r.shape[d] - 1, r.strides[d], &span) || __builtin_add_overflow(last, span, &last))
      last = kMaxInt;
  }
  if (last >= numel(target.shape))
    f.refuse("names element " + (last == kMaxInt ? std::string("past 2^63") : std::to_string(last)) + " of " +
             shape_str(target.shape) + ", which has " + std::to_string(numel(target.shape)) + " elements");
  return r;
}

Event read_event(const Field& f, const Tape& t) {
  Event ev;
  ev.node = static_cast<int32_t>(f.at("node").integer(0, kMaxId));
  const auto produced = t.index_of_node.find(ev.node);
  const Entry* producer = produced == t.index_of_node.end() ? nullptr : &t.values[produced->second];
  if (!producer) f.at("node").refuse("is node " + std::to_string(ev.node) + ", which no value in the tape came from");
  ev.op = f.at("op").string();
  if (ev.op != producer->op) f.at("op").refuse("is \"" + ev.op + "\" but node " + std::to_string(ev.node) + " is " + producer->op);
  ev.to = static_cast<int32_t>(f.at("to").integer(-kMaxId, kMaxId));
  ev.input = static_cast<int>(f.at("input").integer(0, static_cast<int64_t>(producer->inputs.size()) - 1));
  if (producer->inputs[static_cast<size_t>(ev.input)] != ev.to)
    f.at("to").refuse("is value " + std::to_string(ev.to) + " but input " + std::to_string(ev.input) + " of node " +
                      std::to_string(ev.node) + " is value " + std::to_string(producer->inputs[static_cast<size_t>(ev.input)]));
  const Entry& target = t.entry(ev.to);
  Field row = f.at("row");
  if (!row.is_null()) {
    if (target.shape.size() < 1) row.refuse("is set but the receiving value has no rows");
    ev.row = row.integer(0, target.shape[0] - 1);
  }
  if (const std::optional<Field> region = f.maybe("region")) {  // optional: dumps before regions have none
    if (ev.row >= 0) region->refuse("is set beside a row; an event goes to a row or to a region");
    ev.region = read_region(*region, target);
  }
  const std::string& kind = f.at("kind").one_of({"set", "added", "overwritten"});
  ev.kind = kind == "set" ? EventKind::set : kind == "added" ? EventKind::added : EventKind::overwritten;
  if (ev.kind == EventKind::overwritten && !t.overwrite_bug)
    f.at("kind").refuse("is \"overwritten\" but the dump's mode is \"accumulate\"");
  ev.contribution = read_tensor(f.at("contribution"));
  const std::vector<int64_t> want = ev.region ? ev.region->shape
                                    : ev.row >= 0 ? std::vector<int64_t>(target.shape.begin() + 1, target.shape.end())
                                                  : target.shape;
  if (ev.contribution.shape != want)
    f.at("contribution").refuse("has shape " + shape_str(ev.contribution.shape) + " but " +
                                (ev.region ? "its region of " : ev.row >= 0 ? "a row of " : "") + t.name(target) +
                                " has shape " + shape_str(want));
  ev.discarded = read_optional_tensor(f.at("discarded"));
  if (ev.discarded.has_value() != (ev.kind == EventKind::overwritten))
    f.at("discarded").refuse(ev.discarded ? "is set but nothing was overwritten" : "is null but the event overwrote a gradient");
  if (ev.discarded && ev.discarded->shape != want)
    f.at("discarded").refuse("has shape " + shape_str(ev.discarded->shape) + ", expected " + shape_str(want));
  ev.after = read_optional_tensor(f.at("after"));
  if (ev.after && ev.after->shape != want)
    f.at("after").refuse("has shape " + shape_str(ev.after->shape) + ", expected " + shape_str(want));
  return ev;
}

GradientCheck read_gradient_check(const Field& f, const Tape& t) {
  GradientCheck c;
  c.epsilon = f.at("epsilon").number();
  c.tolerance = f.at("tolerance").number();
  c.max_error = f.at("max_error").number();
  c.passed = f.at("passed").boolean();
  for (const Field& p : f.at("parameters").items()) {
    ParameterCheck pc;
    pc.id = static_cast<int32_t>(p.at("id").integer(-kMaxId, -1));
    if (!t.index_of_id.count(pc.id)) p.at("id").refuse("is " + std::to_string(pc.id) + ", which is not a parameter in the tape");
    pc.label = p.at("label").string();
    pc.max_error = p.at("max_error").number();
    pc.passed = p.at("passed").boolean();
    c.parameters.push_back(std::move(pc));
  }
  return c;
}

}  // namespace

Tape parse_tape(std::string_view text, const std::string& path) {
  Tape t;
  t.path = path;
  try {
    t.document = json::parse(text, path);
  } catch (const tapegrad::Error& e) {
    throw RefusedFile("[tape] " + path + " is not a complete JSON document (cut short or damaged?): " + e.what());
  }
  const json::Value& root = t.document;
  const json::Value* format = root.is_object() ? root.find("format") : nullptr;
  if (!format || !format->is_string() || format->as_string() != tapegrad::kTapeFormat)
    throw RefusedFile("[tape] " + path + " is not a tape dump: it has no \"format\": \"" + tapegrad::kTapeFormat +
                      "\" (write one with tiny_step --dump-tape FILE or tapegrad::write_tape_dump)");
  const json::Value* version = root.find("version");
  if (!version || !version->is_int() || version->as_int() != tapegrad::kTapeVersion)
    throw RefusedFile("[tape] " + path + " is a tape dump of version " + (version ? json::dumps(*version) : "(none)") +
                      "; this tape reads version " + std::to_string(tapegrad::kTapeVersion) +
                      " only (docs/tape-format.md); dump it again with this tapegrad");
  t.version = tapegrad::kTapeVersion;

  Field doc(root, "", path);
  t.title = doc.at("title").string();
  t.overwrite_bug = doc.at("mode").one_of({"accumulate", "overwrite-bug"}) == "overwrite-bug";
  t.whole_limit = doc.at("limits").at("whole").integer(0, kMaxInt);
  t.head = doc.at("limits").at("head").integer(0, kMaxInt);
  if (const std::optional<Field> vocabulary = doc.maybe("vocabulary"))  // optional: absent without one
    for (const Field& token : vocabulary->items()) t.vocabulary.push_back(token.string());
  const std::vector<Field> values = doc.at("values").items();
  for (size_t i = 0; i < values.size(); ++i) t.values.push_back(read_entry(values[i], static_cast<int>(i)));
  check_values(t, values);
  for (size_t i = 0; i < t.values.size(); ++i)
    if (t.values[i].tokens && t.vocabulary.empty())
      values[i].at("tokens").refuse("is true but the dump has no \"vocabulary\" to name the tokens");
  group_values(t);

  Field backward = doc.at("backward");
  t.has_backward = !backward.is_null();
  if (t.has_backward) {
    for (const Field& v : backward.at("visits").items()) {
      const int32_t node = static_cast<int32_t>(v.integer(0, kMaxId));
      if (!t.index_of_node.count(node)) v.refuse("is node " + std::to_string(node) + ", which no value in the tape came from");
      t.visits.push_back(node);
    }
    // Events come in visit order: each from the node being visited, or from one visited later.
    size_t visit = 0;
    for (const Field& e : backward.at("events").items()) {
      t.events.push_back(read_event(e, t));
      while (visit < t.visits.size() && t.visits[visit] != t.events.back().node) ++visit;
      if (visit == t.visits.size())
        e.at("node").refuse("is node " + std::to_string(t.events.back().node) +
                            ", which the visit order does not reach at this point (events must follow the visits)");
    }
  }
  Field check = doc.at("gradient_check");
  if (!check.is_null()) t.gradient_check = read_gradient_check(check, t);
  return t;
}

Tape read_tape(const std::string& path, size_t max_bytes) {
  std::string text;
  try {
    text = tapegrad::io::read_file(path, max_bytes);
  } catch (const tapegrad::Error& e) {
    throw RefusedFile(std::string("[tape] ") + e.what());
  }
  return parse_tape(text, path);
}

}  // namespace tape
