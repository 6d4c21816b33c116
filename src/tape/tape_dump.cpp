// Tape dumps (see tape_dump.hpp for the rules and docs/tape-format.md for every field).
//
// Every tensor is written by tensor_json: shape, dtype, element count, min/max/mean/std, and the
// elements (all of them, or the first `head` with "truncated": true). Integer tensors keep integer
// elements; a non-finite float is written as the string "NaN", "Infinity" or "-Infinity" so the
// dump stays strict JSON.
#include "tapegrad/tape/tape_dump.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "tapegrad/graph/gradcheck.hpp"
#include "tapegrad/graph/region.hpp"
#include "tapegrad/io/atomic_file.hpp"
#include "tapegrad/io/text.hpp"
#include "tapegrad/ops/op_table.hpp"

namespace tapegrad {

double GradientCheckResult::worst() const {
  double w = 0.0;
  for (double e : max_error)
    if (e > w || std::isnan(e)) w = e;
  return w;
}

bool GradientCheckResult::passed() const { return worst() <= tolerance; }  // false for NaN

GradientCheckResult gradient_check_result(const std::vector<Tensor>& analytic, const std::vector<Tensor>& numeric,
                                          double epsilon, double tolerance) {
  if (analytic.size() != numeric.size())
    throw Error("[gradcheck] " + std::to_string(analytic.size()) + " analytic gradients but " +
                std::to_string(numeric.size()) + " numeric ones");
  GradientCheckResult r;
  r.epsilon = epsilon;
  r.tolerance = tolerance;
  for (size_t k = 0; k < analytic.size(); ++k) r.max_error.push_back(max_gradient_error({analytic[k]}, {numeric[k]}));
  return r;
}

namespace {

json::Value number_json(double x) {
  if (std::isnan(x)) return "NaN";
  if (std::isinf(x)) return x > 0 ? "Infinity" : "-Infinity";
  return x;
}

json::Value shape_json(const Shape& s) {
  json::Value::Array out;
  for (int64_t d : s) out.emplace_back(d);
  return out;
}

json::Value elements_json(const std::vector<double>& v, size_t n, bool integer) {
  json::Value::Array out;
  for (size_t i = 0; i < n; ++i)
    out.push_back(integer ? json::Value(static_cast<int64_t>(v[i])) : number_json(v[i]));
  return out;
}

json::Value tensor_json(const std::vector<double>& v, const Shape& shape, DType dtype, const DumpOptions& o) {
  const size_t count = v.size();
  const bool truncated = static_cast<int64_t>(count) > o.whole_limit;
  json::Value t = json::Value::Object{};
  t.set("shape", shape_json(shape));
  t.set("dtype", dtype_name(dtype));
  t.set("count", static_cast<int64_t>(count));
  if (count == 0) {
    for (const char* k : {"min", "max", "mean", "std"}) t.set(k, nullptr);
  } else {
    const double mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(count);
    double var = 0.0;
    for (double x : v) var += (x - mean) * (x - mean);
    t.set("min", number_json(*std::min_element(v.begin(), v.end())));
    t.set("max", number_json(*std::max_element(v.begin(), v.end())));
    t.set("mean", number_json(mean));
    t.set("std", number_json(std::sqrt(var / static_cast<double>(count))));  // population std
  }
  t.set("truncated", truncated);
  t.set("values", elements_json(v, truncated ? std::min(count, static_cast<size_t>(o.head)) : count,
                                is_integer(dtype)));
  return t;
}

json::Value tensor_json(const Tensor& t, const DumpOptions& o) {
  return tensor_json(t.to_doubles(), t.shape(), t.dtype(), o);
}

json::Value optional_tensor_json(const Tensor& t, const DumpOptions& o) {
  return t.defined() ? tensor_json(t, o) : json::Value();
}

// The ids of every value (parameters and tape values) in record order: values are numbered by a
// serial that grows across both lists, so sorting by it interleaves them as they were created.
std::vector<int32_t> record_order(const Graph& g) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < g.parameter_count(); ++i) ids.push_back(-static_cast<int32_t>(i) - 1);
  for (size_t i = 0; i < g.value_count(); ++i) ids.push_back(static_cast<int32_t>(i));
  std::stable_sort(ids.begin(), ids.end(),
                   [&](int32_t a, int32_t b) { return g.value(a).serial < g.value(b).serial; });
  return ids;
}

bool in_vocabulary(const Value& v, const DumpOptions& o) {
  return o.vocabulary && !v.label.empty() &&
         std::find(o.vocabulary->labels.begin(), o.vocabulary->labels.end(), v.label) != o.vocabulary->labels.end();
}

// A floating value the vocabulary names: a row per token id, then unnamed rows ("") past it.
json::Value vocabulary_rows_json(const Value& v, const DumpOptions& o) {
  const std::vector<std::string>& tokens = o.vocabulary->tokens;
  const int64_t rows = v.data.ndim() == 0 ? 0 : v.data.dim(0);
  if (rows < static_cast<int64_t>(tokens.size()))
    throw Error("[tape_dump] the vocabulary's " + std::to_string(tokens.size()) + " tokens name the rows of \"" +
                v.label + "\", but its value has shape " + v.data.shape().str() + " (" + std::to_string(rows) +
                " rows); a table of tokens has a row per token (label an integer value to show its ids as tokens)");
  json::Value::Array names;
  for (int64_t r = 0; r < rows; ++r)
    names.emplace_back(r < static_cast<int64_t>(tokens.size()) ? io::valid_utf8(tokens[static_cast<size_t>(r)]) : "");
  return names;
}

json::Value row_names_json(const Value& v, const DumpOptions& o) {
  if (in_vocabulary(v, o) && is_floating(v.data.dtype())) return vocabulary_rows_json(v, o);
  auto it = o.row_names.find(v.label);
  if (v.label.empty() || it == o.row_names.end()) return nullptr;
  const int64_t rows = v.data.ndim() == 0 ? 0 : v.data.dim(0);
  if (static_cast<int64_t>(it->second.size()) != rows)
    throw Error("[tape_dump] " + std::to_string(it->second.size()) + " row names for \"" + v.label +
                "\", but its value has shape " + v.data.shape().str() + " (" + std::to_string(rows) +
                " rows); give one name per row");
  json::Value::Array names;
  for (const std::string& n : it->second) names.emplace_back(n);
  return names;
}

// Every label the vocabulary names is some value's, and none is also given row names of its own.
void check_vocabulary_labels(const Graph& g, const DumpOptions& o) {
  for (const std::string& label : o.vocabulary->labels) {
    if (o.row_names.count(label))
      throw Error("[tape_dump] \"" + label + "\" is named both by row_names and by the vocabulary; give it one");
    bool found = false;
    for (const int32_t id : record_order(g)) found = found || g.value(id).label == label;
    if (!found)
      throw Error("[tape_dump] the vocabulary names the values labelled \"" + label + "\", but no value in the tape " +
                  "carries that label (label it with Var::label, or check its spelling)");
  }
}

json::Value value_json(const Graph& g, int32_t id, size_t index, const std::vector<int32_t>& node_of,
                       const DumpOptions& o) {
  const Value& v = g.value(id);
  const int32_t node = id >= 0 ? node_of[static_cast<size_t>(id)] : -1;
  json::Value e = json::Value::Object{};
  e.set("index", static_cast<int64_t>(index));
  e.set("id", id);
  e.set("kind", value_kind_name(v.kind));
  e.set("label", v.label);
  if (v.scope != 0) e.set("scope", g.scope_name(v.scope));  // optional: absent outside every scope
  json::Value::Array inputs;
  if (node >= 0) {
    const Node& n = g.nodes()[static_cast<size_t>(node)];
    for (int k = 0; k < n.inputs.size(); ++k) inputs.emplace_back(n.inputs[k]);
    e.set("op", n.op);
    e.set("node", node);
  } else {
    e.set("op", nullptr);
    e.set("node", nullptr);
  }
  e.set("inputs", std::move(inputs));
  e.set("shape", shape_json(v.data.shape()));
  e.set("dtype", dtype_name(v.data.dtype()));
  e.set("device", v.data.device().str());
  e.set("requires_grad", v.requires_grad);
  e.set("rows", row_names_json(v, o));
  if (in_vocabulary(v, o) && !is_floating(v.data.dtype())) e.set("tokens", true);  // optional: its elements are token ids
  e.set("value", tensor_json(v.data, o));
  e.set("grad", optional_tensor_json(v.sparse_grad.defined() ? v.sparse_grad.to_dense(v.data.shape()) : v.grad, o));
  return e;
}

// A contribution's region (optional: absent for a whole value or a row): where its elements lie in
// the receiving value's, and as Python's indexing where it is a box ("[:, 3:4, :]").
json::Value region_json(const Shape& shape, const kernels::View& r) {
  json::Value out = json::Value::Object{};
  out.set("offset", r.offset);
  out.set("shape", shape_json(r.shape));
  json::Value::Array strides;
  for (int d = 0; d < r.shape.ndim(); ++d) strides.emplace_back(r.stride[static_cast<size_t>(d)]);
  out.set("strides", std::move(strides));
  out.set("index", region_str(shape, r));
  return out;
}

// The receiving gradient right after each event, replayed in f64 from the events themselves:
// set and overwritten replace the slot (or its row), added adds to it. What a slot held before
// this pass (a parameter's gradient from an earlier backward() without zero_grad()) is not in the
// record, so until a set or an overwrite replaces it, "after" is null.
class Replay {
 public:
  // `events`: all the record's events, so that each slot is freed after its value's last one.
  Replay(const Graph& g, const std::vector<GradEvent>& events) : g_(g) {
    for (const GradEvent& ev : events) ++events_left_[ev.to_value];
  }

  json::Value after(const GradEvent& ev, const DumpOptions& o) {
    json::Value result = replay(ev, o);
    if (--events_left_[ev.to_value] == 0) slots_.erase(ev.to_value);  // its last event: the f64 sum goes
    return result;
  }

 private:
  json::Value replay(const GradEvent& ev, const DumpOptions& o) {
    Slot& slot = slots_[ev.to_value];
    if (slot.grad.empty()) {
      const size_t n = static_cast<size_t>(g_.value(ev.to_value).data.numel());
      slot.grad.assign(n, 0.0);
      // A first event that sets a row or a region means the engine found no gradient and started
      // from zeros; any other first event lands on a gradient from before this pass.
      slot.known.assign(n, (ev.row >= 0 || ev.region) && ev.kind == GradEvent::Kind::set);
    }
    const std::vector<double> c = ev.contribution.to_doubles();
    const std::vector<size_t> at = elements_of(ev, c.size());
    bool known = true;
    std::vector<double> part(c.size());
    for (size_t j = 0; j < c.size(); ++j) {
      const size_t i = at[j];
      TG_CHECK(i < slot.grad.size(), "a recorded contribution does not fit its target");
      if (ev.kind == GradEvent::Kind::added) {
        slot.grad[i] += c[j];
      } else {
        slot.grad[i] = c[j];
        slot.known[i] = true;
      }
      known = known && slot.known[i];
      part[j] = slot.grad[i];
    }
    if (!known) return nullptr;
    return tensor_json(part, ev.contribution.shape(), ev.contribution.dtype(), o);
  }

  // Where each element of the event's contribution lands in its value's elements: all of them, a
  // row, or a region's walk (row-major over the region's shape).
  static std::vector<size_t> elements_of(const GradEvent& ev, size_t n) {
    std::vector<size_t> at(n);
    if (!ev.region) {
      const size_t begin = ev.row >= 0 ? static_cast<size_t>(ev.row) * n : 0;
      for (size_t j = 0; j < n; ++j) at[j] = begin + j;
      return at;
    }
    const kernels::View& r = *ev.region;
    for (size_t j = 0; j < n; ++j) {
      int64_t rest = static_cast<int64_t>(j), off = r.offset;
      for (int d = r.shape.ndim() - 1; d >= 0; --d) {
        off += (rest % r.shape[d]) * r.stride[static_cast<size_t>(d)];
        rest /= r.shape[d];
      }
      at[j] = static_cast<size_t>(off);
    }
    return at;
  }

  struct Slot {
    std::vector<double> grad;
    std::vector<bool> known;  // false: still holds an unrecorded gradient from before this pass
  };
  const Graph& g_;
  std::map<int32_t, Slot> slots_;
  std::map<int32_t, size_t> events_left_;
};

json::Value backward_json(const Graph& g, const BackwardRecord& record, const DumpOptions& o) {
  const size_t n_nodes = g.nodes().size();
  auto check_node = [&](int32_t i) {
    if (i < 0 || static_cast<size_t>(i) >= n_nodes)
      throw Error("[tape_dump] the backward record names node " + std::to_string(i) + " but the tape has " +
                  std::to_string(n_nodes) + " nodes; dump after backward() and before clear()");
  };
  json::Value::Array visits;
  for (int32_t i : record.visits) {
    check_node(i);
    visits.emplace_back(i);
  }
  Replay replay(g, record.events);
  json::Value::Array events;
  for (const GradEvent& ev : record.events) {
    check_node(ev.node);
    const Node& n = g.nodes()[static_cast<size_t>(ev.node)];
    if (ev.input_slot < 0 || ev.input_slot >= n.inputs.size() || n.inputs[ev.input_slot] != ev.to_value)
      throw Error("[tape_dump] the backward record does not match this tape: node " + std::to_string(ev.node) +
                  " (" + n.op + ") has no input " + std::to_string(ev.to_value) + " in slot " +
                  std::to_string(ev.input_slot) + "; dump the graph the record was made on");
    if (ev.kind == GradEvent::Kind::overwritten && !o.overwrite_bug)
      throw Error("[tape_dump] the backward record holds overwritten contributions, so it ran in the "
                  "overwrite-bug mode; set DumpOptions::overwrite_bug");
    json::Value e = json::Value::Object{};
    e.set("node", ev.node);
    e.set("op", n.op);
    e.set("to", ev.to_value);
    e.set("input", ev.input_slot);
    e.set("row", ev.row >= 0 ? json::Value(ev.row) : json::Value());
    if (ev.region) e.set("region", region_json(g.value(ev.to_value).data.shape(), *ev.region));
    e.set("kind", grad_event_kind_name(ev.kind));
    e.set("contribution", tensor_json(ev.contribution, o));
    e.set("discarded", optional_tensor_json(ev.discarded, o));
    e.set("after", replay.after(ev, o));
    events.push_back(std::move(e));
  }
  json::Value b = json::Value::Object{};
  b.set("visits", std::move(visits));
  b.set("events", std::move(events));
  return b;
}

json::Value gradient_check_json(const Graph& g, const GradientCheckResult& r) {
  if (r.max_error.size() != g.parameter_count())
    throw Error("[tape_dump] the gradient check has " + std::to_string(r.max_error.size()) +
                " per-parameter errors but the graph has " + std::to_string(g.parameter_count()) + " parameters");
  json::Value c = json::Value::Object{};
  c.set("epsilon", number_json(r.epsilon));
  c.set("tolerance", number_json(r.tolerance));
  c.set("max_error", number_json(r.worst()));
  c.set("passed", r.passed());
  json::Value::Array params;
  for (size_t k = 0; k < r.max_error.size(); ++k) {
    const int32_t id = -static_cast<int32_t>(k) - 1;
    json::Value p = json::Value::Object{};
    p.set("id", id);
    p.set("label", g.value(id).label);
    p.set("max_error", number_json(r.max_error[k]));
    p.set("passed", r.max_error[k] <= r.tolerance);
    params.push_back(std::move(p));
  }
  c.set("parameters", std::move(params));
  return c;
}

}  // namespace

json::Value tape_dump(const Graph& g, const BackwardRecord* record, const DumpOptions& options) {
  if (options.whole_limit < 0 || options.head < 0)
    throw Error("[tape_dump] whole_limit and head must be >= 0, got " + std::to_string(options.whole_limit) +
                " and " + std::to_string(options.head));
  // Which node produced each tape value (-1: an input, or a value recorded without a node).
  std::vector<int32_t> node_of(g.value_count(), -1);
  for (size_t i = 0; i < g.nodes().size(); ++i) node_of[static_cast<size_t>(g.nodes()[i].output)] = static_cast<int32_t>(i);

  json::Value d = json::Value::Object{};
  d.set("format", kTapeFormat);
  d.set("version", kTapeVersion);
  d.set("title", io::valid_utf8(options.title));
  d.set("mode", options.overwrite_bug ? "overwrite-bug" : "accumulate");
  json::Value limits = json::Value::Object{};
  limits.set("whole", options.whole_limit);
  limits.set("head", options.head);
  d.set("limits", std::move(limits));
  if (options.vocabulary) {
    json::Value::Array tokens;
    for (const std::string& token : options.vocabulary->tokens) tokens.emplace_back(io::valid_utf8(token));
    d.set("vocabulary", std::move(tokens));  // optional: absent without one
    check_vocabulary_labels(g, options);
  }
  json::Value::Array values;
  const std::vector<int32_t> order = record_order(g);
  for (size_t i = 0; i < order.size(); ++i) values.push_back(value_json(g, order[i], i, node_of, options));
  d.set("values", std::move(values));
  json::Value ops = json::Value::Object{};  // the rows of the derivatives table for the ops present
  for (const Node& n : g.nodes()) {
    const ops::OpInfo* info = ops::op_info(n.op);
    if (!info || ops.find(n.op)) continue;
    json::Value row = json::Value::Object{};
    row.set("forward", info->forward);
    row.set("backward", info->backward);
    ops.set(n.op, std::move(row));
  }
  d.set("ops", std::move(ops));
  d.set("backward", record ? backward_json(g, *record, options) : json::Value());
  d.set("gradient_check", options.gradient_check ? gradient_check_json(g, *options.gradient_check) : json::Value());
  return d;
}

// Note [what a dump costs]
// A step's memory holds its values (and, as each node's backward runs, the gradients in flight).
// A step recorded for a dump holds more, for every number of the tape: its gradient, kept to the
// end (free_activation_grads is off while recording), a copy of each contribution to it
// (BackwardRecord), and, while the dump is made, the running sum of its contributions in f64
// (Replay, each freed after its value's last event) and a double of it at a time (to_doubles).
// So a dump costs several bytes a number beside the step's own (docs/reliability.md has a measured
// figure): kMaxDumpNumbers (2^25; examples/gpt's tiny config's tape holds about a sixth of it)
// keeps that to hundreds of megabytes, and a larger tape is refused, saying so, before the recorded
// backward runs. A dump's file stays small whatever the tape (a large tensor is written as
// statistics and its first elements), so the bound is the memory's, not the file's.

int64_t tape_numbers(const Graph& g) {
  int64_t n = 0;
  for (size_t i = 0; i < g.parameter_count(); ++i) n += g.value(-static_cast<int32_t>(i) - 1).data.numel();
  for (size_t i = 0; i < g.value_count(); ++i) n += g.value(static_cast<int32_t>(i)).data.numel();
  return n;
}

void check_dump_size(const Graph& g, const std::string& path) {
  const int64_t n = tape_numbers(g);
  if (n <= kMaxDumpNumbers) return;
  throw Error("cannot dump the tape to " + path + ": it holds " + std::to_string(n) + " numbers, more than the " +
              std::to_string(kMaxDumpNumbers) + " a dump takes (recording its backward keeps every gradient and " +
              "contribution beside the step's own memory: several times the tape's bytes); dump a smaller model");
}

void write_tape_dump(const std::string& path, const Graph& g, const BackwardRecord* record, const DumpOptions& options) {
  io::write_file_atomic(path, json::dumps(tape_dump(g, record, options), 1) + "\n");
}

}  // namespace tapegrad
