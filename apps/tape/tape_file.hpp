// Reading a tape dump (docs/tape-format.md) into checked structs for apps/tape.
//
// Rule: nothing half-read gets through. parse_tape checks the format name, the version and every
// field the tool uses (type, range, and that ids, node indices and shapes agree with each other)
// before it returns, and throws tapegrad::RefusedFile naming the file and the field otherwise:
//   "[tape] bad.json: values[4].inputs[1] names value 7, which is not recorded before it".
// Fields it does not know are ignored (version 1 may grow optional fields; see the format doc).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tapegrad/io/json.hpp"

namespace tape {

namespace json = tapegrad::json;

// A dumped tensor: whole, or statistics and its first elements ("truncated").
struct TensorData {
  std::vector<int64_t> shape;
  std::string dtype;
  int64_t count = 0;
  bool truncated = false;
  std::vector<double> values;  // all `count` elements, or the first ones when truncated
  double min = 0, max = 0, mean = 0, std = 0;  // NaN when count is 0
};

// One value in record order: a parameter, an input, or an op's output.
struct Entry {
  int index = 0;
  int32_t id = 0;        // the graph's id: parameters are negative
  std::string kind;      // "parameter", "input" or "activation"
  std::string label;     // may be empty
  std::string scope;     // the name scope it was recorded in ("h.0.attn"), or empty
  int group = 0;         // its place in Tape::groups (parse_tape fills it)
  std::string op;        // empty when no node produced it
  int32_t node = -1;     // the node that produced it, -1 when none
  std::vector<int32_t> inputs;  // the ids the op read, in slot order
  int reader = -1, reader_slot = -1;  // the first value whose op reads it (index into Tape::values), and the slot
  std::vector<int64_t> shape;
  std::string dtype, device;
  bool requires_grad = false;
  std::vector<std::string> rows;  // row names ("" for a row without one), or empty
  bool tokens = false;            // its elements are token ids of Tape::vocabulary
  TensorData value;
  std::optional<TensorData> grad;  // as it stood when the backward pass ended
};

enum class EventKind { set, added, overwritten };
const char* event_kind_name(EventKind k);

// The part of a value a contribution covers (docs/tape-format.md, "region"): element j of the
// contribution, row-major over `shape`, is element offset + sum_d j_d * strides[d] of the value.
struct Region {
  int64_t offset = 0;
  std::vector<int64_t> shape, strides;
  std::string index;  // as a person reads it: "[:, 3:4, :]"
};

// One gradient contribution, in the order the engine made it.
struct Event {
  int32_t node = -1;    // whose backward sent it
  std::string op;
  int32_t to = 0;       // the receiving value's id
  int input = 0;        // which input slot of the node
  int64_t row = -1;     // >= 0: it went to this row only
  std::optional<Region> region;  // set: it went to this part only
  EventKind kind = EventKind::set;
  TensorData contribution;
  std::optional<TensorData> discarded;  // overwritten: what the slot held before
  std::optional<TensorData> after;      // the slot (or row) right after; absent when unknown
};

struct ParameterCheck {
  int32_t id = 0;
  std::string label;
  double max_error = 0;
  bool passed = false;
};

struct GradientCheck {
  double epsilon = 0, tolerance = 0, max_error = 0;
  bool passed = false;
  std::vector<ParameterCheck> parameters;
};

// A layer of the tape: a name scope and the values recorded in it (docs/tape-format.md, "Scopes"
// name layers with dots"). Groups form a tree by the dots: "h.0.attn" sits in "h.0", in "h".
struct Group {
  std::string name;           // "h.0.attn"; "" for the root: what was recorded outside every scope
  int parent = -1;            // its place in Tape::groups; -1 for the root
  int depth = 0;              // 0 for the root, 1 for "h", 2 for "h.0", …
  std::vector<int> children;  // by `first`: in forward order
  std::vector<int> entries;   // its own values (indices into Tape::values), in record order
  int first = 0;              // the index of the first op output in it or below it (of the first value when none)
  int values = 0, nodes = 0;  // counted over it and every group below it
};

struct Tape {
  std::string path;  // as given, for messages
  int version = 0;
  std::string title;
  bool overwrite_bug = false;
  int64_t whole_limit = 0, head = 0;
  std::vector<std::string> vocabulary;  // token names, when the dump has them
  std::vector<Entry> values;
  bool has_backward = false;
  std::vector<int32_t> visits;  // node indices, in the order their backward ran
  std::vector<Event> events;
  std::optional<GradientCheck> gradient_check;
  // The values grouped by scope: groups[0] is the root, a parent comes before its children. A value
  // sits in the group of its scope; a parameter or an input without one sits in its first reader's.
  std::vector<Group> groups;
  bool has_scopes() const { return groups.size() > 1; }
  json::Value document;  // the dump as parsed, for pages that embed it
  // Where each id and each node's output sit in `values` (parse_tape fills both), so that lookups
  // are constant time: a long chain's checks and views stay linear in its length.
  std::unordered_map<int32_t, size_t> index_of_id, index_of_node;

  const Entry& entry(int32_t id) const;          // by graph id; the id must exist
  const Entry& producer(int32_t node) const;     // the value a node produced; the node must exist
  // Its label, or "#5 matmul"; a value no op made and no label names also by its first reader and
  // that reader's input slot, so that two of them are told apart: "#1 input to wte (input 1)", or
  // by its shape and dtype when no op on the tape reads it: "#2 input (64,) i64".
  std::string name(const Entry& e) const;
  std::string mode() const { return overwrite_bug ? "overwrite-bug" : "accumulate"; }
};

// The largest dump read_tape reads: 256 MiB (parsing takes several times a dump's size in memory).
inline constexpr size_t kMaxDumpBytes = size_t{256} << 20;

// Checks and converts a dump's text; `path` names it in errors.
Tape parse_tape(std::string_view text, const std::string& path);
// Reads and checks the file at `path`: a regular file of at most `max_bytes`.
Tape read_tape(const std::string& path, size_t max_bytes = kMaxDumpBytes);

}  // namespace tape
