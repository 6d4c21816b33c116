// The graph: parameters, the tape of recorded nodes, and the generic reverse-mode engine.
//
// Rules:
// - Every differentiable op appends one Node (op name, input ids, output id, what its backward
//   needs, its backward rule). The tape is a vector in execution order; backward() walks it in
//   reverse. No recursion, no topological sort: record order already is one.
// - Gradient contributions meet in exactly one place, the BackwardContext::accumulate family. It
//   adds by default and writes in the opt-in overwrite-bug mode (Note [overwrite-bug mode] in
//   graph.cpp), and it is what a BackwardRecord (tape dumps) logs. Its one door for speed,
//   gradient_to_add_into, lets a fused backward add in place only where that is the same add
//   (Note [adding into a gradient]).
// - The engine knows no op: an op is a name, a forward that computed a tensor, and a backward rule.
//   Built-in ops and users' custom ops (docs/custom-ops.md) are recorded the same way.
// - Parameters live outside the tape (negative ids) and persist across clear(); their gradients
//   accumulate across backward() calls until zero_grad(), as in PyTorch. Everything else (inputs,
//   activations, their gradients) belongs to one step and is dropped by clear().
// - A recorded value is never written by the engine. A value written in place after it was
//   recorded (Tensor::copy_from, zero_, an optimizer step) is caught by its storage's version when
//   a backward would read it (Note [saved versions] in graph.cpp).
// - A value remembers the name scope it was recorded in (Graph::Scope: "h.0.attn"), for dumps and
//   their viewers; the engine's backward never reads it (Note [name scopes] in graph.cpp).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tapegrad/graph/stable_vector.hpp"
#include "tapegrad/kernels/strided.hpp"
#include "tapegrad/tensor/tensor.hpp"

namespace tapegrad {

class Graph;
class BackwardContext;

enum class ValueKind : uint8_t { parameter, input, activation };
const char* value_kind_name(ValueKind k);

// A gradient of an (n, d) value that is +0 outside some rows: rows[j] is the gradient's row ids[j].
// The ids are distinct and in [0, n); the order is the producer's. The typed form of what an
// embedding's backward gives (PyTorch's sparse gradients of nn.Embedding(sparse=True)), which
// optimizers may read without the dense (n, d) tensor (optim/adamw.hpp).
struct RowSparse {
  Tensor ids;   // (k,) i32 or i64
  Tensor rows;  // (k, d)
  bool defined() const { return rows.defined(); }
  Tensor to_dense(const Shape& shape) const;  // the (n, d) gradient: zeros with the rows added in
};

// A handle to a value recorded in a graph. Cheap to copy; checked against stale use after clear()
// and after its graph is destroyed (both are errors that say so, never a read of freed memory).
class Var {
 public:
  Var() = default;
  Graph& graph() const;
  int32_t id() const { return id_; }
  bool defined() const { return g_ != nullptr; }
  const Tensor& value() const;
  // The gradient, dense; an undefined Tensor when no gradient reached the value. A row-sparse
  // gradient is made dense here, once (sparse_grad() is then null).
  const Tensor& grad() const;
  // The gradient when it is row-sparse and nobody has asked for it dense; else nullptr.
  const RowSparse* sparse_grad() const;
  // For changing the gradient in place (optim/clip.hpp: clipping, scaling): the tensor holding its
  // entries, the dense gradient or a row-sparse one's rows (which stays row-sparse), made this
  // value's own first (copied if another handle shares its bytes, so a handle taken earlier keeps
  // the old values). The call counts as a write (the storage's version moves, as mutable_data's
  // does). Undefined when no gradient reached the value. Write it through the kernel facades.
  Tensor grad_entries_for_write() const;
  // p.grad = g: g dense, of the value's shape, dtype and device, held as it is (not copied); an
  // undefined g drops the gradient. For code that combines gradients outside a backward (dist's
  // data parallel sums micro-batches and ranks, then hands each parameter its share).
  void set_grad(Tensor g) const;
  const Shape& shape() const { return value().shape(); }
  double item() const { return value().item(); }  // the single element as double (PyTorch's loss.item())
  DType dtype() const { return value().dtype(); }
  Device device() const { return value().device(); }
  bool requires_grad() const;
  Var& label(std::string name);  // a name shown in tape dumps and errors ("embedding", "logits")
  const std::string& label() const;
  const std::string& scope() const;  // the name scope it was recorded in ("h.0.attn"), or ""

 private:
  friend class Graph;
  Var(Graph* g, int32_t id, uint64_t serial, uint32_t slot, uint32_t generation)
      : g_(g), id_(id), slot_(slot), generation_(generation), serial_(serial) {}
  Graph* g_ = nullptr;
  int32_t id_ = -1;
  uint32_t slot_ = 0, generation_ = 0;  // which live graph g_ must still be (Note [graph liveness])
  uint64_t serial_ = 0;
};

struct Value {
  Tensor data;
  Tensor grad;            // the dense gradient, or
  RowSparse sparse_grad;  // a row-sparse one (never both)
  ValueKind kind = ValueKind::activation;
  bool requires_grad = false;
  uint32_t scope = 0;  // the name scope it was recorded in: Graph::scope_name(scope); 0 is none
  uint64_t serial = 0;
  std::string label;
};

using BackwardFn = void (*)(BackwardContext&);

// A node's inputs: value ids with the storage versions they had at record (Note [saved versions]
// in graph.cpp). Three live inline; an op over more (concat, stack) spills the rest to the heap.
class NodeInputs {
 public:
  int size() const { return n_; }
  int32_t operator[](int k) const { return k < kInline ? ids_[static_cast<size_t>(k)] : more_[static_cast<size_t>(k - kInline)].first; }
  uint32_t version(int k) const {
    return k < kInline ? versions_[static_cast<size_t>(k)] : more_[static_cast<size_t>(k - kInline)].second;
  }
  void push(int32_t id, uint32_t version) {
    if (n_ < kInline) {
      ids_[static_cast<size_t>(n_)] = id;
      versions_[static_cast<size_t>(n_)] = version;
    } else {
      more_.emplace_back(id, version);
    }
    ++n_;
  }

 private:
  static constexpr int kInline = 3;
  std::array<int32_t, kInline> ids_{-1, -1, -1};
  std::array<uint32_t, kInline> versions_{};
  int n_ = 0;
  std::vector<std::pair<int32_t, uint32_t>> more_;
};

struct Node {
  const char* op = "";
  BackwardFn backward = nullptr;
  int32_t output = -1;
  uint32_t output_version = 0;  // the output's storage version at record
  NodeInputs inputs;
  std::array<Tensor, 2> saved;  // what the backward needs beyond the inputs and output values
  double scalar = 0.0;          // one attribute (a scale factor, a divisor)
  bool freed = false;           // a backward ran it and freed `saved`: it cannot run again
};

// What the engine did, for tape dumps and teaching: the visit order and every contribution.
struct GradEvent {
  enum class Kind : uint8_t { set, added, overwritten };
  int32_t node = -1;       // the node whose backward produced it
  int32_t to_value = -1;   // the value receiving it
  int input_slot = 0;      // which input of the node
  int64_t row = -1;        // >= 0: one row of a row-wise (scatter) contribution
  std::optional<kernels::View> region;  // set: the elements a contribution to part of the value covers
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
  bool detect_anomaly = false;      // a contribution holding NaN or inf throws (anomaly.hpp); the graph's mode implies it
  bool retain_graph = false;        // keep saved tensors so backward() can run again over this tape
  BackwardRecord* record = nullptr; // when set, the engine logs visits and contributions here
  // Drop each activation's gradient as soon as its node's backward has read it (PyTorch's rule for
  // non-leaf tensors), so that a step's peak holds the activations and the gradients in flight, not
  // every gradient at once; Var::grad() of an activation is then undefined after backward().
  // Parameters keep theirs. Ignored while recording (the record reads every value's gradient).
  bool free_activation_grads = false;
  // Called once for every parameter, during the pass, as soon as its gradient is final: when the
  // lowest node reading it has run (or been skipped), so that nothing after can add to it; a
  // parameter no node reads is called at the end. The gradient may be undefined (none reached it);
  // the callback may take it (Var::grad, Var::set_grad). For overlapping work with the rest of the
  // backward (dist's gradient buckets); the engine does nothing else with it.
  std::function<void(const Var&)> on_gradient_final = nullptr;
};

class Graph {
 public:
  Graph();
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // ---- values
  Var parameter(Tensor value, std::string label = "");  // trainable: receives a gradient
  // data: no gradient, unless requires_grad (PyTorch's x.requires_grad_()): then the backward
  // gives it one (Var::grad) as it does an activation, for a gradient check or a saliency map
  Var input(Tensor value, std::string label = "", bool requires_grad = false);
  std::vector<Var> parameters();

  // ---- the engine
  void backward(Var loss, const BackwardOptions& options = {});
  void zero_grad();  // drop every parameter's gradient
  void clear();      // drop the tape: nodes, inputs, activations; parameters stay
  size_t mark() const { return values_.size(); }  // rewind(mark()) drops what was recorded since
  void rewind(size_t mark);

  // ---- grad mode (see NoGrad)
  bool grad_enabled() const { return grad_enabled_; }
  void set_grad_enabled(bool on) { grad_enabled_ = on; }
  // ---- anomaly mode (anomaly.hpp): every op's output and every contribution checked for NaN and inf
  bool detect_anomaly() const { return detect_anomaly_; }
  void set_detect_anomaly(bool on) { detect_anomaly_ = on; }

  // ---- for op front-ends (built-in and custom, docs/custom-ops.md): record `out` as the result
  // of `op` over `inputs`. A node is appended only when grad mode is on and some input requires a
  // gradient; it saves `saved` and `scalar` for the backward rule. `op` must outlive the graph (a
  // string literal).
  Var record(const char* op, Tensor out, std::initializer_list<Var> inputs, BackwardFn backward,
             std::array<Tensor, 2> saved = {}, double scalar = 0.0) {
    return record(op, std::move(out), std::span<const Var>(inputs.begin(), inputs.size()), backward, std::move(saved),
                  scalar);
  }
  Var record(const char* op, Tensor out, std::span<const Var> inputs, BackwardFn backward,
             std::array<Tensor, 2> saved = {}, double scalar = 0.0);

  // ---- name scopes (Note [name scopes] in graph.cpp). While a Scope is open, every value
  // recorded (parameters, inputs, op outputs and so their nodes) remembers its name:
  //   { auto s = g.scope("h.0.attn"); ... }
  // The innermost open scope names what is recorded; names do not join ("h.0" then "h.0.attn"
  // inside it gives "h.0.attn", as nn modules name themselves by their full path). An empty name
  // keeps the enclosing scope.
  class Scope {
   public:
    Scope(Graph& g, const std::string& name);
    ~Scope() { g_.scope_stack_.pop_back(); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Graph& g_;
  };
  Scope scope(const std::string& name) { return Scope(*this, name); }
  const std::string& scope_name(uint32_t id) const { return scope_names_[id]; }

  // ---- inspection (dumps, tests)
  const std::vector<Node>& nodes() const { return nodes_; }
  const Value& value(int32_t id) const { return id < 0 ? params_[static_cast<size_t>(-id - 1)] : values_[static_cast<size_t>(id)]; }
  size_t value_count() const { return values_.size(); }
  size_t parameter_count() const { return params_.size(); }
  Var var(int32_t id);  // a handle to an existing value
  bool tape_freed() const { return freed_; }  // a backward freed some node (freed.hpp)
  const Value& checked(const Var& v) const;

 private:
  friend class Var;
  friend class BackwardContext;
  Value& mutable_value(int32_t id) { return id < 0 ? params_[static_cast<size_t>(-id - 1)] : values_[static_cast<size_t>(id)]; }
  Var push_value(StableVector<Value>& into, int32_t id, Tensor data, ValueKind kind, bool requires_grad,
                 std::string label);

  uint32_t current_scope() const { return scope_stack_.empty() ? 0 : scope_stack_.back(); }

  StableVector<Value> params_;  // elements never move: see stable_vector.hpp
  StableVector<Value> values_;
  std::vector<Node> nodes_;
  std::vector<std::string> scope_names_{""};  // interned: a value holds an index (0: no scope)
  std::unordered_map<std::string, uint32_t> scope_ids_;
  std::vector<uint32_t> scope_stack_;  // the open Scopes, innermost last
  uint64_t next_serial_ = 1;
  uint32_t slot_ = 0, generation_ = 0;  // this graph's place in the table of live graphs
  bool grad_enabled_ = true;
  bool detect_anomaly_ = false;
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
  const Tensor& grad_output() const;  // dense
  const Tensor& output() const;
  const Tensor& input(int k) const;
  const Tensor& saved(int k) const { return node_->saved[static_cast<size_t>(k)]; }
  // Saved tensor k itself, for the backward to write its result over, when this pass is the last
  // to read it (the tape is freed after it, not retained) and no other handle shares its bytes;
  // otherwise an undefined tensor. Saves an allocation and a pass over fresh memory.
  Tensor take_saved(int k);
  double scalar() const { return node_->scalar; }
  bool needs_grad(int k) const;
  // Whether the engine must see every contribution on its own: in the overwrite-bug mode and while
  // a record is made. A fused backward that would otherwise sum contributions meeting at one place
  // (rows of repeated ids) hands them over one by one then, through accumulate_rows, so the mode
  // and the record see them meet (Note [fused ops and the door] in graph.cpp).
  bool contributions_observed() const { return options_.overwrite_bug || options_.record != nullptr; }

  // input k's gradient += contribution (overwrite-bug mode: = contribution). Shape-checked.
  void accumulate(int k, const Tensor& contribution);
  // Input k's gradient so far, for a fused backward to add its contribution into as it writes it
  // (one pass where accumulate would take a second), when there is one it may write: dense, of
  // input k's shape and dtype, its bytes held by no other handle, and no contribution observed;
  // else an undefined tensor, and the backward calls accumulate. Having added into it, the
  // backward calls added_into(k) (Note [adding into a gradient] in graph.cpp).
  Tensor gradient_to_add_into(int k);
  void added_into(int k);
  // input k's gradient += a row-sparse contribution (distinct ids). Kept row-sparse when it is the
  // first; made dense to meet any other.
  void accumulate(int k, RowSparse contribution);
  // input k's gradient rows: grad[ids[i]] += rows[i] for i in order (overwrite-bug mode: =).
  void accumulate_rows(int k, const Tensor& ids, const Tensor& rows);
  // input k's gradient seen through `region` (a view of its elements, each named at most once) +=
  // contribution (of region's shape); the rest of the gradient gets nothing, so a part costs the
  // part, not the whole input (overwrite-bug mode: the region = contribution). Note [regions].
  void accumulate(int k, const Tensor& contribution, const kernels::View& region);

 private:
  friend class Graph;
  BackwardContext(Graph& g, const Node& n, int32_t node_index, const BackwardOptions& o)
      : g_(g), node_(&n), node_index_(node_index), options_(o), anomaly_(o.detect_anomaly || g.detect_anomaly()) {}
  void log(int k, GradEvent::Kind kind, const Tensor& contribution, Tensor discarded, int64_t row = -1);
  void check_anomaly(int k, const Tensor& contribution, const char* what) const;  // anomaly.cpp
  Graph& g_;
  const Node* node_;
  int32_t node_index_;
  const BackwardOptions& options_;
  bool anomaly_;  // check each contribution for NaN and inf (the options' or the graph's anomaly mode)
};

}  // namespace tapegrad
