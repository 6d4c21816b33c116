// The graph: parameters, the tape of recorded nodes, and the generic reverse-mode engine.
//
// Rules:
// - Every differentiable op appends one Node (op name, input ids, output id, what its backward
//   needs, its backward rule). The tape is a vector in execution order; backward() walks it in
//   reverse. No recursion, no topological sort: record order already is one.
// - Gradient contributions meet in exactly one place, BackwardContext::accumulate (and its
//   row-wise form for scatter-style backwards). It adds by default and writes in the opt-in
//   overwrite-bug mode (see Note [overwrite-bug mode] in engine.cpp).
// - Parameters live outside the tape (negative ids) and persist across clear(); their gradients
//   accumulate across backward() calls until zero_grad(), as in PyTorch. Everything else (inputs,
//   activations, their gradients) belongs to one step and is dropped by clear().
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "graph/stable_vector.hpp"
#include "graph/tensor.hpp"

namespace tapegrad {

class Graph;
class BackwardContext;

// A tensor of shape (n, d) handed over row by row instead of as bytes: fill(begin, rows) writes
// rows [begin, begin + r) into rows, an (r, d) tensor of `dtype` on `device`. A backward gives its
// input's gradient this way when the consumer may not need it whole (Note [row sources] in
// graph.cpp): cross_entropy's dlogits, which the gather's backward scatters block by block.
struct RowSource {
  Shape shape;
  DType dtype = DType::f32;
  Device device = Device::cpu();
  std::function<void(int64_t begin, Tensor& rows)> fill;
  bool defined() const { return static_cast<bool>(fill); }
  Tensor materialize() const;  // all n rows, as one (n, d) tensor
};

enum class ValueKind : uint8_t { parameter, input, activation };
const char* value_kind_name(ValueKind k);

// A handle to a value recorded in a graph. Cheap to copy; checked against stale use after clear().
class Var {
 public:
  Var() = default;
  Graph& graph() const;
  int32_t id() const { return id_; }
  bool defined() const { return g_ != nullptr; }
  const Tensor& value() const;
  const Tensor& grad() const;  // undefined Tensor when no gradient reached it
  // For a gradient made only of rows (a gather's backward, host ids): a flag per row of grad(), 1
  // where the row may be nonzero; every other row is +0. nullptr when not known. Optimizers may
  // skip the zero rows (Note [row-wise gradients] in graph.cpp).
  const uint8_t* grad_rows() const;
  const Shape& shape() const { return value().shape(); }
  DType dtype() const { return value().dtype(); }
  Device device() const { return value().device(); }
  bool requires_grad() const;
  Var& label(std::string name);  // a name shown in tape dumps ("embedding", "logits")
  const std::string& label() const;

 private:
  friend class Graph;
  Var(Graph* g, int32_t id, uint64_t serial) : g_(g), id_(id), serial_(serial) {}
  Graph* g_ = nullptr;
  int32_t id_ = -1;
  uint64_t serial_ = 0;
};

struct Value {
  // The value's bytes. With copies_pending, the rows that row_copies names as copies of an earlier
  // row are not written yet (Note [deferred row copies] in graph.cpp): read it through Var::value()
  // or Graph::filled(), which write them first, unless you read only first rows.
  Tensor data;
  bool copies_pending = false;
  // The gradient: dense, or (for an activation, until someone asks for the bytes) grad_source,
  // a RowSource that a row-wise consumer reads block by block (Note [row sources]).
  Tensor grad;
  RowSource grad_source;
  ValueKind kind = ValueKind::activation;
  bool requires_grad = false;
  uint64_t serial = 0;
  std::string label;
  // Optional, host (n,) i32, set by the op that made a 2-d value whose rows repeat (gather): row i
  // holds exactly the bits of row row_copies[i], the first row of its kind (row_copies[i] <= i,
  // and a first row names itself). Ops may use it instead of comparing rows (Note [repeated rows]);
  // it relies on the tape's rule that a recorded value is never written afterwards.
  Tensor row_copies;
  // Row-wise gradients (Note [row-wise gradients] in graph.cpp). grad_rows: when grad came only
  // from accumulate_rows with host ids, one flag per row of grad, 1 where the row may be nonzero
  // (every other row is +0); empty when unknown. grad_rows_of: the bytes those flags describe.
  // spare_grad, spare_rows: a parameter's last row-wise gradient, kept by zero_grad when nothing
  // else holds it, and its flags; the next row-wise gradient reuses it, zeroing just those rows.
  std::vector<uint8_t> grad_rows;
  const void* grad_rows_of = nullptr;
  Tensor spare_grad;
  std::vector<uint8_t> spare_rows;
};

using BackwardFn = void (*)(BackwardContext&);

struct Node {
  const char* op = "";
  BackwardFn backward = nullptr;
  int32_t output = -1;
  uint8_t n_inputs = 0;
  std::array<int32_t, 3> inputs{-1, -1, -1};
  std::array<Tensor, 2> saved;  // what the backward needs beyond the inputs and output values
  double scalar = 0.0;          // one attribute (a scale factor, a divisor)
};

// What the engine did, for tape dumps and teaching: the visit order and every contribution.
struct GradEvent {
  enum class Kind : uint8_t { set, added, overwritten };
  int32_t node = -1;       // the node whose backward produced it
  int32_t to_value = -1;   // the value receiving it
  int input_slot = 0;      // which input of the node
  int64_t row = -1;        // >= 0: one row of a row-wise (scatter) contribution
  Kind kind = Kind::set;
  Tensor contribution;     // what arrived (a copy)
  Tensor discarded;        // overwritten: what was thrown away (a copy)
};
const char* grad_event_kind_name(GradEvent::Kind k);

struct BackwardRecord {
  std::vector<int32_t> visits;  // node indices, in the order their backward rules ran
  std::vector<GradEvent> events;
};

struct BackwardOptions {
  bool overwrite_bug = false;       // contributions write instead of add (Note [overwrite-bug mode])
  bool retain_graph = false;        // keep saved tensors so backward() can run again over this tape
  BackwardRecord* record = nullptr; // when set, the engine logs visits and contributions here
};

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // ---- values
  Var parameter(Tensor value, std::string label = "");  // trainable: receives a gradient
  Var input(Tensor value, std::string label = "");      // data: no gradient
  std::vector<Var> parameters() const;

  // ---- the engine
  void backward(Var loss, const BackwardOptions& options = {});
  void zero_grad();  // drop every parameter's gradient
  void clear();      // drop the tape: nodes, inputs, activations; parameters stay
  size_t mark() const { return values_.size(); }  // rewind(mark()) drops what was recorded since
  void rewind(size_t mark);

  // ---- grad mode (see NoGrad)
  bool grad_enabled() const { return grad_enabled_; }
  void set_grad_enabled(bool on) { grad_enabled_ = on; }

  // ---- for op front-ends: record `out` as the result of `op` over `inputs`. A node is appended
  // only when grad mode is on and some input requires a gradient; the returned Var's node (if
  // any) is returned through `node` so the op can fill `saved` and `scalar`.
  Var record(const char* op, Tensor out, std::initializer_list<Var> inputs, BackwardFn backward,
             Node** node = nullptr);

  // ---- inspection (dumps, tests)
  const std::vector<Node>& nodes() const { return nodes_; }
  const Value& value(int32_t id) const { return id < 0 ? params_[static_cast<size_t>(-id - 1)] : values_[static_cast<size_t>(id)]; }
  Value& value(int32_t id) { return id < 0 ? params_[static_cast<size_t>(-id - 1)] : values_[static_cast<size_t>(id)]; }
  size_t value_count() const { return values_.size(); }
  size_t parameter_count() const { return params_.size(); }
  Var var(int32_t id);  // a handle to an existing value
  bool tape_freed() const { return freed_; }
  const Value& checked(const Var& v) const;
  // Value id's bytes with any pending row copies written (Note [deferred row copies]). Logically
  // const, as are dense_grad's: they write the bytes the value already stands for.
  const Tensor& filled(int32_t id) const;
  // Value id's gradient as one tensor, made from its row source if it has one (Note [row sources]).
  const Tensor& dense_grad(int32_t id) const;

 private:
  friend class Var;
  friend class BackwardContext;
  Var push_value(StableVector<Value>& into, int32_t id, Tensor data, ValueKind kind, bool requires_grad,
                 std::string label);

  StableVector<Value> params_;  // elements never move: see stable_vector.hpp
  StableVector<Value> values_;
  std::vector<Node> nodes_;
  uint64_t next_serial_ = 1;
  bool grad_enabled_ = true;
  bool freed_ = false;
};

// RAII: ops inside record no nodes (values are still computed and returned).
class NoGrad {
 public:
  explicit NoGrad(Graph& g) : g_(g), prev_(g.grad_enabled()) { g.set_grad_enabled(false); }
  ~NoGrad() { g_.set_grad_enabled(prev_); }
  NoGrad(const NoGrad&) = delete;
  NoGrad& operator=(const NoGrad&) = delete;

 private:
  Graph& g_;
  bool prev_;
};

// What a backward rule sees: its node's values and the incoming gradient, and the one door
// through which it hands gradients to its inputs.
class BackwardContext {
 public:
  const Node& node() const { return *node_; }
  const char* op() const { return node_->op; }
  const Tensor& grad_output() const;  // dense: made from a row source if one came
  // The incoming gradient as a row source, when it came as one and is still pending; else nullptr.
  const RowSource* grad_output_source() const;
  const Tensor& output() const;
  const Tensor& input(int k) const;  // with any pending row copies written
  const Tensor& saved(int k) const { return node_->saved[static_cast<size_t>(k)]; }
  // Saved tensor k itself, for the backward to write its result over, when this pass is the last
  // to read it (the tape is freed after it, not retained) and no other handle shares its bytes;
  // otherwise an undefined tensor. Either way saved(k) is undefined afterwards only if it was
  // taken. Saves an allocation and a pass over fresh memory (cross_entropy's dlogits).
  Tensor take_saved(int k);
  double scalar() const { return node_->scalar; }
  bool needs_grad(int k) const;

  // input k's gradient += contribution (overwrite-bug mode: = contribution). Shape-checked.
  void accumulate(int k, const Tensor& contribution);
  // input k's gradient as a row source: kept as one while nothing else reaches that input and no
  // record is being made, else made dense here and accumulated as above (Note [row sources]).
  void accumulate(int k, RowSource contribution);
  // input k's gradient rows: grad[ids[i]] += rows[i] for i in order (overwrite-bug mode: =).
  void accumulate_rows(int k, const Tensor& ids, const Tensor& rows);
  // The same with rows from a source, filled a block of rows at a time into a buffer that stays
  // in cache: the same additions in the same order, without the (B, d) tensor.
  void accumulate_rows(int k, const Tensor& ids, const RowSource& rows);

 private:
  friend class Graph;
  BackwardContext(Graph& g, const Node& n, int32_t node_index, const BackwardOptions& o)
      : g_(g), node_(&n), node_index_(node_index), options_(o) {}
  Graph& g_;
  const Node* node_;
  int32_t node_index_;
  const BackwardOptions& options_;
};

}  // namespace tapegrad
