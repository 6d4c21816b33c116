// The graph and the generic reverse-mode engine (see graph.hpp for the rules it keeps).
//
// Note [overwrite-bug mode]
// A classic backprop bug writes each gradient contribution into its slot instead of adding it,
// so when contributions meet only the last one survives. Contributions meet in two places: a
// value consumed by several nodes (its slot is reached once per consumer), and rows of a gathered
// table hit by repeated indices (the gather's backward scatters one row per index). Both go
// through BackwardContext::accumulate / accumulate_rows, so the mode is one flag here and not a
// branch in any op. Sums inside one op's own backward (a matmul's inner products, a bias's
// column sums) are the op's arithmetic, not contributions meeting, and stay sums. The tiny
// step's reference reproduces the bug with `accumulate=False`; tests/graph checks both places.
//
// Note [fused ops and the door]
// A fused op (src/ops/fused) may do in its backward what the door would do across several nodes:
// sum the rows of repeated ids into one row-sparse gradient, say. That is exact (the same additions
// in the same order), but it would hide the meeting from the overwrite-bug mode and from a record. So while either is on (contributions_observed()), a fused
// backward hands its contributions over one by one, as the unfused ops would, and the engine sees
// them meet. The engine itself knows no fused op.
//
// Note [name scopes]
// A model of thousands of nodes is read by its layers: every value recorded while a Graph::Scope is
// open keeps the scope's name (nn modules open theirs in each forward), and tape dumps and their
// viewers group by it. A value holds an index into a small table of interned names, not a string.
// clear() drops the names only values of the tape held; a parameter's and an open scope's survive
// it, renumbered. Nothing in the backward reads a scope.
#include "tapegrad/graph/graph.hpp"

#include <algorithm>
#include <cstring>
#include <mutex>

#include "tapegrad/graph/anomaly.hpp"
#include "tapegrad/graph/freed.hpp"
#include "tapegrad/kernels/kernels.hpp"

namespace tapegrad {

const char* value_kind_name(ValueKind k) {
  switch (k) {
    case ValueKind::parameter: return "parameter";
    case ValueKind::input: return "input";
    case ValueKind::activation: return "activation";
  }
  return "?";
}

const char* grad_event_kind_name(GradEvent::Kind k) {
  switch (k) {
    case GradEvent::Kind::set: return "set";
    case GradEvent::Kind::added: return "added";
    case GradEvent::Kind::overwritten: return "overwritten";
  }
  return "?";
}

namespace {

// A value's row-sparse gradient made dense, in place (a no-op for a dense or absent one).
void make_dense(Value& v) {
  if (!v.sparse_grad.defined()) return;
  v.grad = v.sparse_grad.to_dense(v.data.shape());
  v.sparse_grad = RowSparse();
}

}  // namespace

Tensor RowSparse::to_dense(const Shape& shape) const {
  Tensor dense = Tensor::zeros(shape, rows.dtype(), rows.device());
  kernels::scatter_rows(dense, ids, rows, false);  // 0 + row: the bits a fresh scatter gives
  return dense;
}

// ---- graph liveness
//
// Note [graph liveness]
// A Var may outlive its Graph (a handle kept in a struct that lives longer). Its pointer then
// names freed memory, so it cannot ask the graph itself. Every graph takes a slot in a fixed table
// of generation counters while it lives; a Var carries the slot and the generation it saw. The
// destructor bumps the slot's generation, so a stale Var finds another number there and says its
// graph is gone. The table is never freed and one relaxed load checks it.
namespace {

constexpr uint32_t kGraphSlots = 1 << 16;
std::atomic<uint32_t> g_generation[kGraphSlots];
std::mutex g_slots_mutex;
std::vector<uint32_t> g_free_slots;
uint32_t g_next_slot = 0;

}  // namespace

Graph::Graph() {
  std::lock_guard<std::mutex> lock(g_slots_mutex);
  if (!g_free_slots.empty()) {
    slot_ = g_free_slots.back();
    g_free_slots.pop_back();
  } else {
    if (g_next_slot == kGraphSlots)
      throw Error("[graph] more than " + std::to_string(kGraphSlots) + " graphs alive at once");
    slot_ = g_next_slot++;
  }
  generation_ = g_generation[slot_].load(std::memory_order_relaxed);
}

Graph::~Graph() {
  std::lock_guard<std::mutex> lock(g_slots_mutex);
  g_generation[slot_].fetch_add(1, std::memory_order_relaxed);
  g_free_slots.push_back(slot_);
}

// ---- Var

Graph& Var::graph() const {
  if (!g_) throw Error("[var] this Var is empty (default-constructed)");
  if (g_generation[slot_].load(std::memory_order_relaxed) != generation_)
    throw Error("[var] value " + std::to_string(id_) + " belongs to a Graph that was destroyed; a Var must not "
                "outlive its graph");
  return *g_;
}
const Tensor& Var::value() const { return graph().checked(*this).data; }
const Tensor& Var::grad() const {
  graph().checked(*this);
  Value& v = g_->mutable_value(id_);
  make_dense(v);  // asked for dense: made so once
  return v.grad;
}
const RowSparse* Var::sparse_grad() const {
  const Value& v = graph().checked(*this);
  return v.sparse_grad.defined() ? &v.sparse_grad : nullptr;
}
Tensor Var::grad_entries_for_write() const {
  graph().checked(*this);
  Value& v = g_->mutable_value(id_);
  Tensor& entries = v.sparse_grad.defined() ? v.sparse_grad.rows : v.grad;
  if (entries.defined() && !entries.unique()) entries = entries.clone();
  entries.mark_modified();
  return entries;
}
void Var::set_grad(Tensor g) const {
  const Value& v = graph().checked(*this);
  if (g.defined() && (!(g.shape() == v.data.shape()) || g.dtype() != v.data.dtype() || !(g.device() == v.data.device())))
    throw Error("[set_grad] a gradient of shape " + g.shape().str() + " " + dtype_name(g.dtype()) + " on " +
                g.device().str() + " for '" + v.label + "', which is " + v.data.shape().str() + " " +
                dtype_name(v.data.dtype()) + " on " + v.data.device().str());
  Value& target = g_->mutable_value(id_);
  target.grad = std::move(g);
  target.sparse_grad = RowSparse();
}
bool Var::requires_grad() const { return graph().checked(*this).requires_grad; }
const std::string& Var::label() const { return graph().checked(*this).label; }
const std::string& Var::scope() const {
  const Value& v = graph().checked(*this);
  return g_->scope_name(v.scope);
}
Var& Var::label(std::string name) {
  graph().checked(*this);
  g_->mutable_value(id_).label = std::move(name);
  return *this;
}

// ---- Graph: values

const Value& Graph::checked(const Var& v) const {
  if (v.g_ != this) throw Error("[var] this Var belongs to another graph");
  bool in_range = v.id_ < 0 ? static_cast<size_t>(-v.id_ - 1) < params_.size()
                            : static_cast<size_t>(v.id_) < values_.size();
  if (!in_range || value(v.id_).serial != v.serial_)
    throw Error("[var] value " + std::to_string(v.id_) +
                " was dropped by clear() or rewind(); Vars of activations live for one step");
  return value(v.id_);
}

Var Graph::push_value(StableVector<Value>& into, int32_t id, Tensor data, ValueKind kind, bool requires_grad,
                      std::string label) {
  Value& v = into.emplace_back();
  v.data = std::move(data);
  v.kind = kind;
  v.requires_grad = requires_grad;
  v.scope = current_scope();
  v.serial = next_serial_++;
  v.label = std::move(label);
  return Var(this, id, v.serial, slot_, generation_);
}

Graph::Scope::Scope(Graph& g, const std::string& name) : g_(g) {
  uint32_t id = g.current_scope();
  if (!name.empty()) {
    const auto [it, fresh] = g.scope_ids_.try_emplace(name, static_cast<uint32_t>(g.scope_names_.size()));
    if (fresh) g.scope_names_.push_back(name);
    id = it->second;
  }
  g.scope_stack_.push_back(id);
}

Var Graph::parameter(Tensor value, std::string label) {
  if (!value.defined()) throw Error("[parameter] the tensor is undefined");
  if (!is_floating(value.dtype()))
    throw Error(std::string("[parameter] parameters must be floating point, got ") +
                dtype_name(value.dtype()));
  int32_t id = -static_cast<int32_t>(params_.size()) - 1;
  return push_value(params_, id, std::move(value), ValueKind::parameter, true, std::move(label));
}

Var Graph::input(Tensor value, std::string label, bool requires_grad) {
  if (!value.defined()) throw Error("[input] the tensor is undefined");
  if (requires_grad && !is_floating(value.dtype()))
    throw Error(std::string("[input] only a floating-point input can require a gradient, got ") +
                dtype_name(value.dtype()));
  int32_t id = static_cast<int32_t>(values_.size());
  return push_value(values_, id, std::move(value), ValueKind::input, requires_grad, std::move(label));
}

std::vector<Var> Graph::parameters() {
  std::vector<Var> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    int32_t id = -static_cast<int32_t>(i) - 1;
    out.push_back(Var(this, id, params_[i].serial, slot_, generation_));
  }
  return out;
}

Var Graph::var(int32_t id) {
  const bool in_range = id < 0 ? static_cast<size_t>(-id - 1) < params_.size() : static_cast<size_t>(id) < values_.size();
  if (!in_range) throw Error("[var] no value with id " + std::to_string(id));
  return Var(this, id, value(id).serial, slot_, generation_);
}

Var Graph::record(const char* op, Tensor out, std::span<const Var> inputs, BackwardFn backward,
                  std::array<Tensor, 2> saved, double scalar) {
  bool needs = false;
  if (grad_enabled_ && backward)
    for (const Var& in : inputs) needs = needs || checked(in).requires_grad;
  int32_t id = static_cast<int32_t>(values_.size());
  if (detect_anomaly_) check_output(*this, op, out, inputs, scope_name(current_scope()));
  Var result = push_value(values_, id, std::move(out), ValueKind::activation, needs, std::string());
  if (needs) {
    Node& n = nodes_.emplace_back();
    n.op = op;
    n.backward = backward;
    n.output = id;
    for (const Var& in : inputs) n.inputs.push(in.id_, value(in.id_).data.version());
    n.output_version = values_[static_cast<size_t>(id)].data.version();
    for (size_t k = 0; k < saved.size(); ++k)
      if (saved[k].defined()) n.saved[k] = std::move(saved[k]);
    n.scalar = scalar;
  }
  return result;
}

void Graph::zero_grad() {
  for (size_t i = 0; i < params_.size(); ++i) {
    params_[i].grad = Tensor();
    params_[i].sparse_grad = RowSparse();
  }
}

void Graph::clear() {
  values_.clear();
  nodes_.clear();
  freed_ = false;
  // Keep the scope names a parameter or an open Scope holds, renumbered (Note [name scopes]).
  std::vector<uint32_t> renumbered(scope_names_.size(), 0);
  std::vector<std::string> kept{""};
  auto keep = [&](uint32_t& id) {
    if (id != 0 && renumbered[id] == 0) {
      renumbered[id] = static_cast<uint32_t>(kept.size());
      kept.push_back(std::move(scope_names_[id]));
    }
    id = renumbered[id];
  };
  for (size_t i = 0; i < params_.size(); ++i) keep(params_[i].scope);
  for (uint32_t& id : scope_stack_) keep(id);
  scope_names_ = std::move(kept);
  scope_ids_.clear();
  for (size_t i = 1; i < scope_names_.size(); ++i) scope_ids_.emplace(scope_names_[i], static_cast<uint32_t>(i));
}

void Graph::rewind(size_t mark) {
  TG_CHECK(mark <= values_.size(), "rewind past the end of the tape");
  values_.shrink_to(mark);
  while (!nodes_.empty() && static_cast<size_t>(nodes_.back().output) >= mark) nodes_.pop_back();
}

// ---- the engine
//
// Note [saved versions]
// A backward reads its node's inputs and output as they were when the node was recorded. If one
// of them was written in place since (a parameter overwritten between forward and backward), the
// rule would compute a wrong gradient without a sign. Every storage counts its in-place writes
// (Tensor::version); the node keeps the counts it saw, and the engine compares them before it runs
// the rule, naming the op and the value, as PyTorch's "modified by an inplace operation" does.

namespace {

void check_versions(const Graph& g, const Node& n) {
  auto check = [&](int32_t id, uint32_t recorded, const std::string& what) {
    const Value& v = g.value(id);
    const uint32_t now = v.data.version();
    if (now == recorded) return;
    throw Error(std::string("[") + n.op + "] " + what + " (value " + std::to_string(id) +
                (v.label.empty() ? "" : ", '" + v.label + "'") + ", " + value_kind_name(v.kind) +
                ") was modified in place after it was recorded (version " + std::to_string(recorded) + ", now " +
                std::to_string(now) + "); its backward would compute a wrong gradient. Write it before the "
                "forward pass, or after backward()");
  };
  for (int k = 0; k < n.inputs.size(); ++k) check(n.inputs[k], n.inputs.version(k), "input " + std::to_string(k));
  check(n.output, n.output_version, "its output");
}

}  // namespace

void Graph::backward(Var loss, const BackwardOptions& options) {
  const Value& l = checked(loss);
  if (l.data.numel() != 1)
    throw Error("[backward] needs a scalar loss, got shape " + l.data.shape().str() +
                "; reduce it first, e.g. ops::mean(x) or ops::sum(x)");
  if (!l.requires_grad)
    throw Error("[backward] the loss does not depend on any parameter (was it computed under NoGrad?)");
  if (freed_) check_not_freed(*this, loss.id_);

  for (size_t i = 0; i < values_.size(); ++i) {
    values_[i].grad = Tensor();
    values_[i].sparse_grad = RowSparse();
  }
  Tensor seed = Tensor::empty(l.data.shape(), l.data.dtype(), l.data.device());
  kernels::fill(seed, 1.0);
  mutable_value(loss.id_).grad = seed;

  // on_gradient_final: (lowest node reading it, parameter id), the highest node first; -1 for none
  std::vector<std::pair<int64_t, int32_t>> finals;
  if (options.on_gradient_final) {
    std::vector<int64_t> lowest(params_.size(), -1);
    for (size_t i = nodes_.size(); i-- > 0;)
      for (int k = 0; k < nodes_[i].inputs.size(); ++k)
        if (nodes_[i].inputs[k] < 0) lowest[static_cast<size_t>(-nodes_[i].inputs[k] - 1)] = static_cast<int64_t>(i);
    for (size_t p = 0; p < params_.size(); ++p) finals.emplace_back(lowest[p], -static_cast<int32_t>(p) - 1);
    std::sort(finals.begin(), finals.end(), std::greater<>());
  }
  size_t fired = 0;
  auto fire_down_to = [&](int64_t node) {  // every parameter whose lowest reader is at or above node
    for (; fired < finals.size() && finals[fired].first >= node; ++fired) options.on_gradient_final(var(finals[fired].second));
  };
  for (size_t i = nodes_.size(); i-- > 0; fire_down_to(static_cast<int64_t>(i))) {
    const Node& n = nodes_[i];
    const Value& out = values_[static_cast<size_t>(n.output)];
    if (!out.grad.defined() && !out.sparse_grad.defined()) continue;  // not on the loss's path
    check_versions(*this, n);
    if (options.record) options.record->visits.push_back(static_cast<int32_t>(i));
    BackwardContext ctx(*this, n, static_cast<int32_t>(i), options);
    n.backward(ctx);
    if (!options.retain_graph) free_node(nodes_[i]);  // this pass was the last to read what it saved
    if (options.free_activation_grads && !options.record) {  // every contribution to it has arrived and been read
      Value& done = mutable_value(n.output);
      done.grad = Tensor();
      done.sparse_grad = RowSparse();
    }
  }
  fire_down_to(-1);

  freed_ = freed_ || !options.retain_graph;
}

// ---- BackwardContext: what a rule reads

const Tensor& BackwardContext::grad_output() const {
  Value& out = g_.mutable_value(node_->output);
  make_dense(out);
  return out.grad;
}
const Tensor& BackwardContext::output() const { return g_.value(node_->output).data; }
const Tensor& BackwardContext::input(int k) const { return g_.value(node_->inputs[k]).data; }
Tensor BackwardContext::take_saved(int k) {
  Tensor& slot = g_.nodes_[static_cast<size_t>(node_index_)].saved[static_cast<size_t>(k)];
  if (options_.retain_graph || !slot.unique()) return Tensor();
  return std::move(slot);
}
bool BackwardContext::needs_grad(int k) const {
  return g_.value(node_->inputs[k]).requires_grad;
}

// ---- the door: every contribution passes here

namespace {

void check_contribution(const char* op, int k, const Tensor& target, const Tensor& c, const char* what) {
  if (!(c.shape() == target.shape()) || c.dtype() != target.dtype() || !(c.device() == target.device()))
    throw Error(std::string("[engine] the backward of ") + op + " gave input " + std::to_string(k) + " " + what +
                " of shape " + c.shape().str() + " " + dtype_name(c.dtype()) + " on " + c.device().str() +
                ", but that input is " + target.shape().str() + " " + dtype_name(target.dtype()) + " on " +
                target.device().str());
}

}  // namespace

void BackwardContext::log(int k, GradEvent::Kind kind, const Tensor& contribution, Tensor discarded, int64_t row) {
  GradEvent ev;
  ev.node = node_index_;
  ev.to_value = node_->inputs[k];
  ev.input_slot = k;
  ev.row = row;
  ev.kind = kind;
  ev.contribution = contribution.clone();
  ev.discarded = std::move(discarded);
  options_.record->events.push_back(std::move(ev));
}

void BackwardContext::accumulate(int k, const Tensor& contribution) {
  Value& target = g_.mutable_value(node_->inputs[k]);
  if (!target.requires_grad) return;
  check_contribution(node_->op, k, target.data, contribution, "a gradient");
  if (anomaly_) check_anomaly(k, contribution, "a gradient");
  make_dense(target);  // a row-sparse gradient meets a dense one as bytes
  GradEvent::Kind kind;
  Tensor discarded;
  if (!target.grad.defined()) {
    // A parameter's gradient is the user's to read and transform: its bytes are its own, never
    // shared with another slot (add(p1, p2) hands one tensor to both).
    target.grad = target.kind == ValueKind::parameter && !contribution.unique() ? contribution.clone() : contribution;
    kind = GradEvent::Kind::set;
  } else if (options_.overwrite_bug) {
    if (options_.record) discarded = target.grad.clone();
    target.grad = target.kind == ValueKind::parameter ? contribution.clone() : contribution;
    kind = GradEvent::Kind::overwritten;
  } else {
    if (!target.grad.unique()) target.grad = target.grad.clone();  // never write bytes another handle holds
    kernels::binary(kernels::Binary::add, target.grad, contribution, target.grad);
    target.grad.mark_modified();
    kind = GradEvent::Kind::added;
  }
  if (options_.record) log(k, kind, contribution, std::move(discarded));
}

// Note [adding into a gradient]
// Where a value feeds several ops (a residual stream read by a norm and by the next add), its
// gradient is the sum of their contributions, and accumulate adds each after the first in a pass
// of its own: read the sum so far and the contribution, write the new sum. A backward whose kernel
// makes its contribution element by element can fold that pass into its own: it asks for the sum
// so far (gradient_to_add_into), writes sum + contribution over it, each element rounded as
// accumulate's add would round it, and says so (added_into). The engine offers the gradient only
// when the result is the one accumulate would give and nothing else can see the write: a dense
// gradient of the value's shape and dtype, whose bytes no other handle holds, outside the
// overwrite-bug mode and records (which must see each contribution arrive). Otherwise the backward
// makes its contribution apart and calls accumulate, as any other.
Tensor BackwardContext::gradient_to_add_into(int k) {
  Value& target = g_.mutable_value(node_->inputs[k]);
  if (!target.requires_grad || contributions_observed() || !target.grad.defined() || target.sparse_grad.defined())
    return Tensor();
  const Tensor& g = target.grad;
  if (!(g.shape() == target.data.shape()) || g.dtype() != target.data.dtype() || !g.unique()) return Tensor();
  return g;
}

void BackwardContext::added_into(int k) { g_.mutable_value(node_->inputs[k]).grad.mark_modified(); }

void BackwardContext::accumulate(int k, RowSparse contribution) {
  Value& target = g_.mutable_value(node_->inputs[k]);
  if (!target.requires_grad) return;
  const Tensor& t = target.data;
  const Tensor& rows = contribution.rows;
  const Tensor& ids = contribution.ids;
  if (t.ndim() != 2 || rows.ndim() != 2 || ids.ndim() != 1 || rows.dim(0) != ids.dim(0) || rows.dim(1) != t.dim(1) ||
      rows.dtype() != t.dtype() || !(rows.device() == t.device()) || !is_integer(ids.dtype()))
    throw Error(std::string("[engine] the backward of ") + node_->op + " gave input " + std::to_string(k) +
                " row-sparse rows " + rows.shape().str() + " " + dtype_name(rows.dtype()) + " at ids " +
                ids.shape().str() + " " + dtype_name(ids.dtype()) + ", which do not fit that input, " +
                t.shape().str() + " " + dtype_name(t.dtype()) + " on " + t.device().str());
  if (anomaly_) check_anomaly(k, rows, "row-sparse rows");
  if (!target.grad.defined() && !target.sparse_grad.defined() && !options_.record) {
    target.sparse_grad = std::move(contribution);
    return;
  }
  accumulate(k, contribution.to_dense(t.shape()));
}

void BackwardContext::accumulate_rows(int k, const Tensor& ids, const Tensor& rows) {
  Value& target = g_.mutable_value(node_->inputs[k]);
  if (!target.requires_grad) return;
  const Tensor& table = target.data;
  if (table.ndim() != 2 || rows.ndim() != 2 || ids.ndim() != 1 || rows.dim(0) != ids.dim(0) ||
      rows.dim(1) != table.dim(1) || rows.dtype() != table.dtype())
    throw Error(std::string("[engine] the backward of ") + node_->op + " gave input " + std::to_string(k) +
                " rows of shape " + rows.shape().str() + " at ids " + ids.shape().str() +
                ", which do not fit its table " + table.shape().str());
  if (anomaly_) check_anomaly(k, rows, "rows");
  make_dense(target);

  if (options_.record) {  // per-row events, computed on the host before the slot changes
    const std::vector<double> id_list = ids.to_doubles();
    std::vector<bool> written(static_cast<size_t>(table.dim(0)), target.grad.defined());
    const Tensor before = target.grad.defined() ? target.grad.to(Device::cpu()) : Tensor();
    const Tensor host_rows = rows.to(Device::cpu());
    const int64_t d = table.dim(1);
    const size_t row_bytes = static_cast<size_t>(d) * dtype_size(rows.dtype());
    std::vector<Tensor> last(written.size());  // the last contribution to each row in this call
    auto row_of = [&](const Tensor& t, int64_t r) {
      Tensor out = Tensor::empty(Shape{d}, rows.dtype());
      std::memcpy(out.raw_data(), static_cast<const char*>(t.raw_data()) + static_cast<size_t>(r) * row_bytes, row_bytes);
      return out;
    };
    for (size_t i = 0; i < id_list.size(); ++i) {
      const int64_t r = static_cast<int64_t>(id_list[i]);
      if (r < 0 || r >= table.dim(0)) break;  // the kernel below reports it
      const Tensor c = row_of(host_rows, static_cast<int64_t>(i));
      GradEvent::Kind kind = GradEvent::Kind::added;
      Tensor discarded;
      if (!written[static_cast<size_t>(r)]) {
        kind = GradEvent::Kind::set;
      } else if (options_.overwrite_bug) {
        kind = GradEvent::Kind::overwritten;  // what stood there: this call's last row, or the earlier gradient
        discarded = last[static_cast<size_t>(r)].defined() ? last[static_cast<size_t>(r)] : row_of(before, r);
      }
      written[static_cast<size_t>(r)] = true;
      last[static_cast<size_t>(r)] = c;
      log(k, kind, c, std::move(discarded), r);
    }
  }

  if (!target.grad.defined()) {  // zeros and the scatter in one pass where a device can
    target.grad = Tensor::empty(table.shape(), table.dtype(), table.device());
    kernels::scatter_rows_fresh(target.grad, ids, rows, options_.overwrite_bug);
  } else {
    if (!target.grad.unique()) target.grad = target.grad.clone();
    kernels::scatter_rows(target.grad, ids, rows, options_.overwrite_bug);
    target.grad.mark_modified();
  }
}

}  // namespace tapegrad
