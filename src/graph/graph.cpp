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
#include "graph/graph.hpp"

#include <algorithm>
#include <cstring>

#include "ops/kernels.hpp"

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

// ---- Var

Graph& Var::graph() const {
  if (!g_) throw Error("[var] this Var is empty (default-constructed)");
  return *g_;
}
const Tensor& Var::value() const {
  graph().checked(*this);
  return g_->filled(id_);
}
const Tensor& Var::grad() const {
  graph().checked(*this);
  return g_->dense_grad(id_);
}
const uint8_t* Var::grad_rows() const {
  const Value& v = graph().checked(*this);
  const bool current = v.grad.defined() && !v.grad_rows.empty() && v.grad_rows_of == v.grad.raw_data();
  return current ? v.grad_rows.data() : nullptr;
}
bool Var::requires_grad() const { return graph().checked(*this).requires_grad; }
const std::string& Var::label() const { return graph().checked(*this).label; }
Var& Var::label(std::string name) {
  graph().checked(*this);
  g_->value(id_).label = std::move(name);
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

// Note [deferred row copies]
// A gather with host ids writes only the first row of each kind and leaves the copies (the rows
// Value::row_copies names as repeats of an earlier row) unwritten, with copies_pending set: an op
// that knows row_copies reads only first rows (cross_entropy), and bob's 26 distinct rows of 256
// cost 26 KiB of writes instead of 256 KiB. Everything else reads the value through filled()
// (Var::value(), BackwardContext::input()/output(), tape dumps), which copies the first rows into
// place once; the bytes are then the ones a full gather writes. Only an op's front-end that reads
// row_copies may read Value::data directly.
const Tensor& Graph::filled(int32_t id) const {
  Value& v = const_cast<Graph*>(this)->value(id);
  if (v.copies_pending) {
    kernels::fill_row_copies(v.data, v.row_copies);
    v.copies_pending = false;
  }
  return v.data;
}

const Tensor& Graph::dense_grad(int32_t id) const {
  Value& v = const_cast<Graph*>(this)->value(id);
  if (v.grad_source.defined()) {
    v.grad = v.grad_source.materialize();
    v.grad_source = RowSource();
  }
  return v.grad;
}

Tensor RowSource::materialize() const {
  Tensor out = Tensor::empty(shape, dtype, device);
  if (shape.ndim() > 0 && shape[0] > 0) fill(0, out);
  return out;
}

Var Graph::push_value(StableVector<Value>& into, int32_t id, Tensor data, ValueKind kind, bool requires_grad,
                      std::string label) {
  Value& v = into.emplace_back();
  v.data = std::move(data);
  v.kind = kind;
  v.requires_grad = requires_grad;
  v.serial = next_serial_++;
  v.label = std::move(label);
  return Var(this, id, v.serial);
}

Var Graph::parameter(Tensor value, std::string label) {
  if (!value.defined()) throw Error("[parameter] needs a defined tensor");
  if (!is_floating(value.dtype()))
    throw Error(std::string("[parameter] parameters must be floating point, got ") + dtype_name(value.dtype()));
  int32_t id = -static_cast<int32_t>(params_.size()) - 1;
  return push_value(params_, id, std::move(value), ValueKind::parameter, true, std::move(label));
}

Var Graph::input(Tensor value, std::string label) {
  if (!value.defined()) throw Error("[input] needs a defined tensor");
  return push_value(values_, static_cast<int32_t>(values_.size()), std::move(value), ValueKind::input, false,
                    std::move(label));
}

std::vector<Var> Graph::parameters() const {
  std::vector<Var> out;
  out.reserve(params_.size());
  for (size_t i = 0; i < params_.size(); ++i)
    out.push_back(Var(const_cast<Graph*>(this), -static_cast<int32_t>(i) - 1, params_[i].serial));
  return out;
}

Var Graph::var(int32_t id) {
  Value& v = value(id);
  return Var(this, id, v.serial);
}

Var Graph::record(const char* op, Tensor out, std::initializer_list<Var> inputs, BackwardFn backward, Node** node) {
  bool needs = false;
  if (grad_enabled_)
    for (const Var& in : inputs) needs = needs || checked(in).requires_grad;
  int32_t id = static_cast<int32_t>(values_.size());
  Var result = push_value(values_, id, std::move(out), ValueKind::activation, needs, std::string());
  if (node) *node = nullptr;
  if (needs) {
    if (freed_) throw Error(std::string("[") + op + "] this tape was freed by backward(); call clear() before recording the next step");
    Node& n = nodes_.emplace_back();
    n.op = op;
    n.backward = backward;
    n.output = id;
    TG_CHECK(inputs.size() <= n.inputs.size(), "too many inputs for one node");
    for (const Var& in : inputs) n.inputs[n.n_inputs++] = in.id_;
    if (node) *node = &n;
  }
  return result;
}

void Graph::zero_grad() {
  for (size_t i = 0; i < params_.size(); ++i) {
    Value& p = params_[i];
    // a row-wise gradient nothing else holds: kept, with the rows it may have written
    if (p.grad.defined() && p.grad.unique() && !p.grad_rows.empty() && p.grad_rows_of == p.grad.raw_data()) {
      p.spare_grad = std::move(p.grad);
      p.spare_rows = std::move(p.grad_rows);
    }
    p.grad = Tensor();
    p.grad_rows.clear();
    p.grad_rows_of = nullptr;
  }
}

void Graph::clear() {
  values_.clear();
  nodes_.clear();
  freed_ = false;
}

void Graph::rewind(size_t mark) {
  TG_CHECK(mark <= values_.size(), "rewind past the end of the tape");
  values_.shrink_to(mark);
  while (!nodes_.empty() && static_cast<size_t>(nodes_.back().output) >= mark) nodes_.pop_back();
}

// ---- the engine

void Graph::backward(Var loss, const BackwardOptions& options) {
  const Value& l = checked(loss);
  if (l.data.numel() != 1)
    throw Error("[backward] needs a scalar loss, got shape " + l.data.shape().str() +
                "; reduce it first, e.g. ops::mean(x) or ops::sum(x)");
  if (!l.requires_grad)
    throw Error("[backward] the loss does not depend on any parameter (was it computed under NoGrad?)");
  if (freed_)
    throw Error("[backward] this tape was already freed by an earlier backward(); pass "
                "{.retain_graph = true} to the first backward() to run it twice");

  for (size_t i = 0; i < values_.size(); ++i) {
    values_[i].grad = Tensor();
    values_[i].grad_source = RowSource();
  }
  Tensor seed = Tensor::empty(l.data.shape(), l.data.dtype(), l.data.device());
  kernels::fill(seed, 1.0);
  value(loss.id_).grad = seed;

  for (size_t i = nodes_.size(); i-- > 0;) {
    const Node& n = nodes_[i];
    const Value& out = values_[static_cast<size_t>(n.output)];
    if (!out.grad.defined() && !out.grad_source.defined()) continue;  // not on the loss's path
    if (options.record) options.record->visits.push_back(static_cast<int32_t>(i));
    BackwardContext ctx(*this, n, static_cast<int32_t>(i), options);
    n.backward(ctx);
  }

  if (!options.retain_graph) {
    for (Node& n : nodes_) n.saved = {};
    freed_ = true;
  }
}

// ---- BackwardContext

const Tensor& BackwardContext::grad_output() const { return g_.dense_grad(node_->output); }
const RowSource* BackwardContext::grad_output_source() const {
  const Value& out = g_.value(node_->output);
  return out.grad_source.defined() ? &out.grad_source : nullptr;
}
const Tensor& BackwardContext::output() const { return g_.filled(node_->output); }
const Tensor& BackwardContext::input(int k) const { return g_.filled(node_->inputs[static_cast<size_t>(k)]); }
Tensor BackwardContext::take_saved(int k) {
  Tensor& slot = g_.nodes_[static_cast<size_t>(node_index_)].saved[static_cast<size_t>(k)];
  if (options_.retain_graph || !slot.unique()) return Tensor();
  return std::move(slot);
}

bool BackwardContext::needs_grad(int k) const {
  return g_.value(node_->inputs[static_cast<size_t>(k)]).requires_grad;
}

namespace {

void check_contribution(const char* op, int k, const Tensor& target, const Shape& shape, DType dtype, Device device,
                        const char* what) {
  if (!(shape == target.shape()) || dtype != target.dtype() || !(device == target.device()))
    throw Error(std::string("[engine] the backward of ") + op + " gave input " + std::to_string(k) + " " + what +
                " of shape " + shape.str() + " " + dtype_name(dtype) + " on " + device.str() + ", but that input is " +
                target.shape().str() + " " + dtype_name(target.dtype()) + " on " + target.device().str());
}

// Host ids (i32 or i64): id i, widened.
int64_t id_at(const Tensor& ids, int64_t i) {
  return ids.dtype() == DType::i32 ? int64_t{static_cast<const int32_t*>(ids.raw_data())[i]}
                                   : static_cast<const int64_t*>(ids.raw_data())[i];
}

// Whether every id names a row of a table of `rows` rows (host ids).
bool ids_in_range(const Tensor& ids, int64_t rows) {
  for (int64_t i = 0; i < ids.numel(); ++i)
    if (id_at(ids, i) < 0 || id_at(ids, i) >= rows) return false;
  return true;
}

// A slot we are about to modify in place must not share storage with a tensor someone else holds.
void make_private(Tensor& slot) {
  if (!slot.unique()) slot = slot.clone();
}

}  // namespace

void BackwardContext::accumulate(int k, const Tensor& contribution) {
  int32_t to = node_->inputs[static_cast<size_t>(k)];
  Value& target = g_.value(to);
  if (!target.requires_grad) return;
  check_contribution(node_->op, k, target.data, contribution.shape(), contribution.dtype(), contribution.device(),
                     "a gradient");
  if (target.grad_source.defined()) g_.dense_grad(to);  // a second contribution meets the first as bytes

  GradEvent ev;
  target.grad_rows.clear();  // a dense contribution: any row may be nonzero
  if (!target.grad.defined()) {
    target.grad = contribution;
    ev.kind = GradEvent::Kind::set;
  } else if (options_.overwrite_bug) {
    if (options_.record) ev.discarded = target.grad.clone();
    target.grad = contribution;
    ev.kind = GradEvent::Kind::overwritten;
  } else {
    make_private(target.grad);
    kernels::binary(kernels::Binary::add, target.grad, contribution, target.grad);
    ev.kind = GradEvent::Kind::added;
  }
  if (options_.record) {
    ev.node = node_index_;
    ev.to_value = to;
    ev.input_slot = k;
    ev.contribution = contribution.clone();
    options_.record->events.push_back(std::move(ev));
  }
}

// Note [row sources]
// A backward may hand its input's gradient over as a RowSource instead of bytes (cross_entropy's
// dlogits, whose rows it can compute from (k, V) distinct probabilities). The engine keeps it as
// the input's pending gradient when that input is an activation nothing else has reached yet and
// no record is being made; a consumer that scatters rows (the gather's backward, through
// accumulate_rows) then fills a block of rows at a time into a buffer that stays in L1 and
// scatters it before filling the next. The additions are the ones the whole tensor would get, in
// the same order, so the bits are the same; what is saved is writing and reading back the (B, V)
// gradient (for bob 256 KiB each way, about a third of an update). Anyone else who asks for the
// gradient (grad_output(), Var::grad(), a second contribution) gets it filled whole, once.
void BackwardContext::accumulate(int k, RowSource contribution) {
  int32_t to = node_->inputs[static_cast<size_t>(k)];
  Value& target = g_.value(to);
  if (!target.requires_grad) return;
  check_contribution(node_->op, k, target.data, contribution.shape, contribution.dtype, contribution.device,
                     "a gradient");
  if (target.kind == ValueKind::activation && !target.grad.defined() && !target.grad_source.defined() &&
      !options_.record) {
    target.grad_rows.clear();
    target.grad_source = std::move(contribution);
    return;
  }
  accumulate(k, contribution.materialize());
}

void BackwardContext::accumulate_rows(int k, const Tensor& ids, const RowSource& rows) {
  int32_t to = node_->inputs[static_cast<size_t>(k)];
  Value& target = g_.value(to);
  if (!target.requires_grad) return;
  const Shape& shape = rows.shape;
  const int64_t row_bytes = shape.ndim() == 2 ? shape[1] * static_cast<int64_t>(dtype_size(rows.dtype)) : 0;
  // ~16 KiB of rows: the buffer, the rows it adds into and what fills it stay in L1 (a block of
  // 16 KiB measured 2 to 3 us faster per bob backward than filling all 256 KiB, docs/bob.md)
  const int64_t block = row_bytes > 0 ? std::max<int64_t>(1, (16 << 10) / row_bytes) : 0;
  // Blocks only where they can pay: host rows and ids, more than one block, nothing recorded, and
  // ids already known good (else the whole-tensor path's checks and messages, before any write).
  if (options_.record || block == 0 || shape[0] <= block || !rows.device.is_cpu() || !ids.device().is_cpu() ||
      ids.ndim() != 1 || ids.dim(0) != shape[0] || target.data.ndim() != 2 || !(target.data.device() == rows.device) ||
      !ids_in_range(ids, target.data.dim(0))) {
    accumulate_rows(k, ids, rows.materialize());
    return;
  }
  const int64_t n = shape[0];
  const size_t id_bytes = dtype_size(ids.dtype());
  Tensor buffer = Tensor::empty(Shape{block, shape[1]}, rows.dtype, rows.device);
  Tensor block_ids = Tensor::empty(Shape{block}, ids.dtype());
  for (int64_t begin = 0; begin < n; begin += block) {
    const int64_t r = std::min(block, n - begin);
    if (r < block) {  // the last, shorter block
      buffer = Tensor::empty(Shape{r, shape[1]}, rows.dtype, rows.device);
      block_ids = Tensor::empty(Shape{r}, ids.dtype());
    }
    rows.fill(begin, buffer);
    std::memcpy(block_ids.raw_data(), static_cast<const char*>(ids.raw_data()) + static_cast<size_t>(begin) * id_bytes,
                static_cast<size_t>(r) * id_bytes);
    accumulate_rows(k, block_ids, buffer);  // the first block starts the gradient, the rest add
  }
}

void BackwardContext::accumulate_rows(int k, const Tensor& ids, const Tensor& rows) {
  int32_t to = node_->inputs[static_cast<size_t>(k)];
  Value& target = g_.value(to);
  if (!target.requires_grad) return;
  const Tensor& table = target.data;
  if (table.ndim() != 2 || rows.ndim() != 2 || ids.ndim() != 1 || rows.dim(0) != ids.dim(0) ||
      rows.dim(1) != table.dim(1) || rows.dtype() != table.dtype())
    throw Error(std::string("[engine] the backward of ") + node_->op + " gave input " + std::to_string(k) +
                " rows of shape " + rows.shape().str() + " at ids " + ids.shape().str() +
                ", which do not fit its table " + table.shape().str());

  if (options_.record) {  // per-row events, computed on the host before the slot changes
    std::vector<double> id_list = ids.to_doubles();
    std::vector<bool> written(static_cast<size_t>(table.dim(0)), target.grad.defined());
    Tensor before = target.grad.defined() ? target.grad.to(Device::cpu()) : Tensor();
    Tensor host_rows = rows.to(Device::cpu());
    int64_t d = table.dim(1);
    for (size_t i = 0; i < id_list.size(); ++i) {
      int64_t r = static_cast<int64_t>(id_list[i]);
      if (r < 0 || r >= table.dim(0)) break;  // the kernel below reports it
      GradEvent ev;
      ev.node = node_index_;
      ev.to_value = to;
      ev.input_slot = k;
      ev.row = r;
      ev.contribution = Tensor::empty(Shape{d}, rows.dtype());
      std::memcpy(ev.contribution.raw_data(),
                  static_cast<const char*>(host_rows.raw_data()) + static_cast<size_t>(i * d) * dtype_size(rows.dtype()),
                  static_cast<size_t>(d) * dtype_size(rows.dtype()));
      if (!written[static_cast<size_t>(r)]) {
        ev.kind = GradEvent::Kind::set;
      } else if (options_.overwrite_bug) {
        ev.kind = GradEvent::Kind::overwritten;
        // The row as it stands before this write: the previous contribution, or the earlier gradient.
        ev.discarded = Tensor::empty(Shape{d}, rows.dtype());
        const GradEvent* prev = nullptr;
        for (auto it = options_.record->events.rbegin(); it != options_.record->events.rend(); ++it)
          if (it->node == node_index_ && it->to_value == to && it->row == r) { prev = &*it; break; }
        if (prev) ev.discarded = prev->contribution.clone();
        else std::memcpy(ev.discarded.raw_data(),
                         static_cast<const char*>(before.raw_data()) + static_cast<size_t>(r * d) * dtype_size(rows.dtype()),
                         static_cast<size_t>(d) * dtype_size(rows.dtype()));
      } else {
        ev.kind = GradEvent::Kind::added;
      }
      written[static_cast<size_t>(r)] = true;
      options_.record->events.push_back(std::move(ev));
    }
  }

  // Note [row-wise gradients]
  // A gradient made only of rows (a gather's backward) is +0 outside the rows its ids name. With
  // host ids the engine keeps one flag per row saying which rows may be nonzero (Value::grad_rows),
  // which optimizers use to skip the rest (AdamW reads neither the gradient nor the moments of a
  // row that is zero in all three: Note [adamw zero blocks]). And zero_grad() keeps such a
  // gradient's buffer when nothing else holds it, so the next row-wise gradient zeroes only the
  // rows the last one wrote instead of the whole table, then adds into it: the bits zeros and a
  // scatter give. Both rest on the rule that a gradient's bytes are written only by the engine (a
  // transform of a gradient makes a new tensor); a gradient assigned anew loses its flags
  // (grad_rows_of), and one held elsewhere is not reused.
  const bool host = ids.device().is_cpu() && table.device().is_cpu();
  const bool first = !target.grad.defined();
  if (first && host && target.spare_grad.defined() && target.spare_grad.unique() &&
      target.spare_grad.shape() == table.shape() && target.spare_grad.dtype() == table.dtype() &&
      target.spare_rows.size() == static_cast<size_t>(table.dim(0))) {
    Tensor spare = std::move(target.spare_grad);
    const size_t row_bytes = static_cast<size_t>(table.dim(1)) * dtype_size(table.dtype());
    char* bytes = static_cast<char*>(spare.raw_data());
    for (size_t r = 0; r < target.spare_rows.size(); ++r)
      if (target.spare_rows[r]) std::memset(bytes + r * row_bytes, 0, row_bytes);
    kernels::scatter_rows(spare, ids, rows, options_.overwrite_bug);  // checks the ids first
    target.grad = std::move(spare);
  } else if (first) {  // zeros and the scatter in one pass where a device can
    target.grad = Tensor::empty(table.shape(), table.dtype(), table.device());
    kernels::scatter_rows_fresh(target.grad, ids, rows, options_.overwrite_bug);
  } else {
    make_private(target.grad);
    kernels::scatter_rows(target.grad, ids, rows, options_.overwrite_bug);
  }
  target.spare_grad = Tensor();
  target.spare_rows.clear();
  if (first && host) target.grad_rows.assign(static_cast<size_t>(table.dim(0)), 0);
  if (!host) target.grad_rows.clear();
  if (!target.grad_rows.empty()) {  // the ids are in range: the scatter checked them
    for (int64_t i = 0; i < ids.numel(); ++i) target.grad_rows[static_cast<size_t>(id_at(ids, i))] = 1;
  }
  target.grad_rows_of = target.grad.raw_data();
}

}  // namespace tapegrad
