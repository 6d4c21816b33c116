// The tiny step: the model, its config, and the trace of the Python reference (docs/tiny_step.md),
// built on the graph.
//
// Parity with the reference is a property of the arithmetic order (docs/design.md; the reference's
// own order is docs/tiny_step.md, "Arithmetic"): every f64 kernel this model uses computes what the
// Python code computes, in the same order, with correctly rounded sums where the reference calls
// math.fsum; its matrix product and its cross-entropy are the app's own ops for that
// (reference_matmul.hpp, reference_loss.hpp).
#include "tiny_model.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>

#include "tapegrad/graph/gradcheck.hpp"
#include "tapegrad/tape/tape_dump.hpp"
#include "tapegrad/io/atomic_file.hpp"
#include "python_compat.hpp"
#include "reference_loss.hpp"
#include "reference_matmul.hpp"
#include "tapegrad/ops/ops.hpp"
#include "tapegrad/optim/sgd.hpp"

namespace tiny {

using tapegrad::DType;
using tapegrad::Error;
using tapegrad::Shape;
namespace ops = tapegrad::ops;
namespace py = tapegrad::py;

// ---- config

namespace {

std::vector<std::string> string_list(const json::Value& v, const char* key) {
  if (!v.is_array()) throw Error(std::string("[config] ") + key + " must be a list of strings, got " + v.type_name());
  std::vector<std::string> out;
  for (const json::Value& s : v.as_array()) {
    if (!s.is_string())
      throw Error(std::string("[config] ") + key + " must be a list of strings, found a " + s.type_name());
    out.push_back(s.as_string());
  }
  return out;
}

json::Value number(const json::Value& v, const char* key) {
  if (!v.is_number()) throw Error(std::string("[config] ") + key + " must be a number, got " + v.type_name());
  return v;
}

std::string shown(const json::Value& v) { return v.is_int() ? json::dumps(v) : py::float_repr(v.as_double()); }

void check_rate(const json::Value& lr) {
  tapegrad::optim::check_learning_rate(lr.as_double(), shown(lr).c_str());
}

std::string py_list(const std::vector<std::string>& xs) {  // as Python prints a list of str
  std::string s = "[";
  for (size_t i = 0; i < xs.size(); ++i) s += (i ? ", " : "") + py::json_string(xs[i]);
  return s + "]";
}

}  // namespace

Config load_config(const std::string& path) {
  json::Value root = json::parse(tapegrad::io::read_file(path), "config " + path);
  if (!root.is_object()) throw Error("[config] " + path + " must hold a JSON object, got " + root.type_name());
  Config c;
  for (const auto& [key, v] : root.as_object()) {
    if (key == "vocab") c.vocab = string_list(v, "vocab");
    else if (key == "inputs") c.inputs = string_list(v, "inputs");
    else if (key == "targets") c.targets = string_list(v, "targets");
    else if (key == "embed_dim") {
      if (!v.is_int() || v.as_int() < 1 || v.as_int() > 4096)
        throw Error("[config] embed_dim must be an integer from 1 to 4096, got " + json::dumps(v));
      c.embed_dim = v.as_int();
    } else if (key == "seed") {
      if (!v.is_int()) throw Error("[config] seed must be an integer, got " + json::dumps(v));
      c.seed = v;
    } else if (key == "learning_rate") c.learning_rate = number(v, "learning_rate");
    else if (key == "epsilon") c.epsilon = number(v, "epsilon");
    else if (key == "learning_rate_sweep") {
      if (!v.is_array()) throw Error("[config] learning_rate_sweep must be a list of numbers, got " + std::string(v.type_name()));
      c.learning_rate_sweep.clear();
      for (const json::Value& lr : v.as_array()) c.learning_rate_sweep.push_back(number(lr, "learning_rate_sweep"));
    } else if (key == "large_learning_rate") c.large_learning_rate = number(v, "large_learning_rate");
    else
      throw Error("[config] unknown key \"" + key + "\" in " + path +
                  " (known: vocab, inputs, targets, embed_dim, seed, learning_rate, epsilon, learning_rate_sweep, "
                  "large_learning_rate)");
  }
  validate(c);
  return c;
}

void validate(const Config& c) {
  if (c.vocab.empty()) throw Error("[config] vocab is empty: the model needs at least one token");
  if (c.vocab.size() > 100000) throw Error("[config] vocab has " + std::to_string(c.vocab.size()) + " tokens; at most 100000");
  std::map<std::string, int> index;
  for (size_t i = 0; i < c.vocab.size(); ++i) index[c.vocab[i]] = static_cast<int>(i);
  for (const auto* tokens : {&c.inputs, &c.targets}) {
    std::vector<std::string> unknown;
    for (const auto& t : *tokens)
      if (!index.count(t)) unknown.push_back(t);
    if (!unknown.empty()) throw Error("tokens not in the vocabulary: " + py_list(unknown));
  }
  if (c.inputs.empty()) throw Error("empty batch: a training step needs at least one example");
  if (c.inputs.size() != c.targets.size())
    throw Error("batch has " + std::to_string(c.inputs.size()) + " inputs but " + std::to_string(c.targets.size()) +
                " targets");
  const double eps = c.epsilon.as_double();
  if (!std::isfinite(eps) || eps == 0)
    throw Error("[config] epsilon must be a finite nonzero number, got " + shown(c.epsilon));
  check_rate(c.learning_rate);
  for (const auto& lr : c.learning_rate_sweep) check_rate(lr);
  check_rate(c.large_learning_rate);
  check_work(c);
}

void check_work(const Config& c) {
  // parameters P = 2*V*d + V; a forward pass ~ B*V*(d + 2) (the matmul, the bias, the softmax);
  // the check makes two forward passes a parameter.
  const int64_t V = static_cast<int64_t>(c.vocab.size()), d = c.embed_dim, B = static_cast<int64_t>(c.inputs.size());
  int64_t params = 0, forward = 0, work = 0;
  const bool overflow = __builtin_mul_overflow(2 * V, d, &params) || __builtin_add_overflow(params, V, &params) ||
                        __builtin_mul_overflow(B, V, &forward) || __builtin_mul_overflow(forward, d + 2, &forward) ||
                        __builtin_mul_overflow(2 * params, forward, &work);
  if (overflow || work > max_check_work)
    throw Error("[config] the gradient check asks for about " + (overflow ? std::string("more than 2^63") : std::to_string(work)) +
                " operations (2 x " + std::to_string(params) + " parameters x " + std::to_string(forward) +
                " per forward pass of " + std::to_string(B) + " examples); the limit is " + std::to_string(max_check_work) +
                ": use a smaller vocab, embed_dim or batch");
}

// ---- model

namespace {

std::vector<int32_t> encode(const std::vector<std::string>& tokens, const std::vector<std::string>& vocab) {
  std::map<std::string, int32_t> index;  // {token: i for i, token in enumerate(vocab)}: the last duplicate wins
  for (size_t i = 0; i < vocab.size(); ++i) index[vocab[i]] = static_cast<int32_t>(i);
  std::vector<int32_t> ids;
  for (const auto& t : tokens) ids.push_back(index.at(t));
  return ids;
}

py::Random make_rng(const json::Value& seed) {
  const auto& d = seed.data();
  if (std::holds_alternative<uint64_t>(d)) return py::Random(std::get<uint64_t>(d));
  return py::Random::from_int(seed.as_int());
}

}  // namespace

Model::Model(const Config& c, Device dev) : device(dev) {
  const int64_t V = static_cast<int64_t>(c.vocab.size()), d = c.embed_dim;
  // Small random starting values, rounded to two decimals: embedding first, then weights.
  py::Random rng = make_rng(c.seed);
  auto values = [&](int64_t n) {
    std::vector<double> v(static_cast<size_t>(n));
    for (double& x : v) x = py::round(rng.uniform(-0.5, 0.5), 2);
    return v;
  };
  std::vector<double> e = values(V * d);
  std::vector<double> w = values(d * V);
  embedding = g.parameter(Tensor::from_doubles(e, Shape{V, d}, DType::f64, dev), "embedding");
  weights = g.parameter(Tensor::from_doubles(w, Shape{d, V}, DType::f64, dev), "weights");
  bias = g.parameter(Tensor::zeros(Shape{V}, DType::f64, dev), "bias");
  const std::vector<int32_t> in = encode(c.inputs, c.vocab), tg = encode(c.targets, c.vocab);
  ids = Tensor::from_vector(in, Shape{static_cast<int64_t>(in.size())}, dev);
  targets = Tensor::from_vector(tg, Shape{static_cast<int64_t>(tg.size())}, dev);
}

Var Model::loss(Graph& graph, Var* x_out, Var* logits_out) const {
  Var x = ops::gather(embedding, graph.input(ids, "input_ids")).label("x");          // (B, d)
  Var logits = ops::add_row(reference_matmul(x, weights), bias).label("logits");     // (B, V)
  Var loss = reference_cross_entropy(logits, graph.input(targets, "target_ids")).label("loss");  // ()
  if (x_out) *x_out = x;
  if (logits_out) *logits_out = logits;
  return loss;
}

// ---- trace

namespace {

json::Value r6(const Tensor& t) {  // nested lists of round(x, 6), as the reference's r6
  std::vector<double> v = t.to_doubles();
  if (t.ndim() == 0) return py::round(v[0], 6);
  json::Value::Array out;
  if (t.ndim() == 1) {
    for (double x : v) out.emplace_back(py::round(x, 6));
    return out;
  }
  const int64_t rows = t.dim(0), cols = t.dim(1);
  for (int64_t i = 0; i < rows; ++i) {
    json::Value::Array row;
    for (int64_t j = 0; j < cols; ++j) row.emplace_back(py::round(v[static_cast<size_t>(i * cols + j)], 6));
    out.emplace_back(std::move(row));
  }
  return out;
}

json::Value shape_list(const Tensor& t) {
  json::Value::Array out;
  for (int64_t d : t.shape()) out.emplace_back(d);
  return out;
}

json::Value strings(const std::vector<std::string>& xs) {
  json::Value::Array out;
  for (const auto& s : xs) out.emplace_back(s);
  return out;
}

json::Value ints(const Tensor& t) {
  json::Value::Array out;
  for (double v : t.to_doubles()) out.emplace_back(static_cast<int64_t>(v));
  return out;
}

json::Value grads_dict(const std::vector<Tensor>& grads) {
  json::Value d = json::Value::Object{};
  d.set("embedding", r6(grads[0]));
  d.set("weights", r6(grads[1]));
  d.set("bias", r6(grads[2]));
  return d;
}

// Shows "gradient check: done/total cells" on stderr once the check has run for a second.
struct Progress {
  using clock = std::chrono::steady_clock;
  clock::time_point start = clock::now(), last = start;
  bool shown = false;
  void operator()(size_t done, size_t total) {
    auto now = clock::now();
    if (now - start < std::chrono::seconds(1) || (now - last < std::chrono::milliseconds(250) && done != total)) return;
    last = now;
    shown = true;
    std::fprintf(stderr, "\rgradient check: %zu/%zu cells", done, total);
    if (done == total) std::fprintf(stderr, "\n");
  }
};

std::string joined(const std::vector<std::string>& xs) {
  std::string s;
  for (const auto& x : xs) s += (s.empty() ? "" : " ") + x;
  return s;
}

// The step's tape (docs/tape-format.md): one forward and one recorded backward in the step's
// mode, with the gradient check of the gradients it gives against `numeric`. Leaves the tape
// cleared and the parameters' values as they were.
void write_step_tape(Model& m, const Config& c, const std::vector<Tensor>& numeric, const TraceOptions& options) {
  Graph& g = m.g;
  g.clear();
  g.zero_grad();
  tapegrad::BackwardRecord record;
  g.backward(m.loss(g), {.overwrite_bug = options.overwrite_bug, .record = &record});
  std::vector<Tensor> analytic;
  for (const Var& p : g.parameters()) analytic.push_back(p.grad());

  tapegrad::DumpOptions dump;
  dump.title = "tiny_step: " + joined(c.inputs) + " -> " + joined(c.targets);
  dump.overwrite_bug = options.overwrite_bug;
  dump.row_names = {{"embedding", c.vocab}, {"bias", c.vocab}, {"input_ids", c.inputs},
                    {"x", c.inputs}, {"logits", c.inputs}, {"target_ids", c.targets}};
  const double tolerance = 1e-6;  // f64 central differences agree with the engine to ~1e-10 here
  dump.gradient_check = tapegrad::gradient_check_result(analytic, numeric, c.epsilon.as_double(), tolerance);
  tapegrad::write_tape_dump(options.dump_tape, g, &record, dump);
  g.clear();
}

}  // namespace

json::Value trace(const Config& c, Device device, const TraceOptions& options) {
  validate(c);
  Model m(c, device);
  Graph& g = m.g;
  const std::vector<Var> params = g.parameters();
  std::vector<Tensor> before;
  for (const Var& p : params) before.push_back(p.value().clone());
  auto restore = [&] {
    for (size_t i = 0; i < params.size(); ++i) {
      Tensor v = params[i].value();
      v.copy_from(before[i]);
    }
  };
  auto loss_fn = [&m](Graph& graph) { return m.loss(graph); };
  auto loss_only = [&]() {
    g.clear();
    tapegrad::NoGrad no_grad(g);
    return m.loss(g).value().item();
  };
  auto grads_of = [&](bool overwrite) {
    g.clear();
    g.zero_grad();
    g.backward(m.loss(g), {.overwrite_bug = overwrite});
    std::vector<Tensor> out;
    for (const Var& p : params) out.push_back(p.grad().clone());
    return out;
  };
  // train_step: loss before, SGD on fresh gradients, loss after; the parameters are restored.
  auto train_step = [&](double lr, bool overwrite) {
    restore();
    std::vector<Tensor> grads = grads_of(overwrite);
    tapegrad::optim::SGD(lr).step(params);
    double after = loss_only();
    if (!std::isfinite(after))
      throw Error("the step with learning rate " + py::float_repr(lr) + " diverges: the loss after it is " +
                  py::float_repr(after) + " (the reference's math.fsum raises on the infinite sums here)");
    std::vector<Tensor> updated;
    for (const Var& p : params) updated.push_back(p.value().clone());
    restore();
    return std::make_pair(after, updated);
  };

  // forward: every intermediate the trace shows
  g.clear();
  Var x, logits;
  Var loss = m.loss(g, &x, &logits);
  Tensor probs, losses;
  {
    tapegrad::NoGrad no_grad(g);
    probs = ops::softmax(logits).value();
    losses = reference_cross_entropy(logits, g.input(m.targets), ops::Reduction::none).value();
  }
  const double loss_before = loss.value().item();
  for (double l : losses.to_doubles())
    if (!std::isfinite(l))
      throw Error("a loss is infinite: a target's probability underflowed to 0 (the reference fails with "
                  "'math domain error' here)");
  Tensor x_value = x.value(), logits_value = logits.value();

  const std::vector<Tensor> grads = grads_of(false);
  Progress progress;
  tapegrad::ProgressFn show = [&](size_t done, size_t total) { if (options.progress) progress(done, total); };
  const std::vector<Tensor> numeric = tapegrad::numerical_gradients(g, loss_fn, c.epsilon.as_double(), show);
  const std::vector<Tensor> overwrite = grads_of(true);
  const double lr = c.learning_rate.as_double();
  auto [loss_after, updated] = train_step(lr, options.overwrite_bug);
  auto [loss_after_bug, updated_bug] = train_step(lr, true);
  (void)updated_bug;

  const double max_error = tapegrad::max_gradient_error(grads, numeric);
  // inf or nan: a loss with a cell moved by epsilon is infinite, where the reference's math.log(0)
  // raises before floor(log10(error)) could (which would raise too).
  if (!std::isfinite(max_error))
    throw Error("the gradient check's max error is " + py::float_repr(max_error) + ": a loss with a cell moved by " +
                "epsilon " + shown(c.epsilon) + " is infinite, a target's probability underflowed to 0 (the " +
                "reference fails with 'math domain error' here)");
  if (!(max_error > 0))
    throw Error("the gradient check's max error is " + py::float_repr(max_error) +
                ": log10 is undefined (the reference fails with 'math domain error' here)");

  json::Value t = json::Value::Object{};
  t.set("vocab", strings(c.vocab));
  t.set("inputs", strings(c.inputs));
  t.set("targets", strings(c.targets));
  t.set("input_ids", ints(m.ids));
  t.set("target_ids", ints(m.targets));
  t.set("seed", c.seed);
  t.set("learning_rate", c.learning_rate);
  json::Value shapes = json::Value::Object{};
  shapes.set("input_ids", shape_list(m.ids));
  shapes.set("embedding", shape_list(m.embedding.value()));
  shapes.set("x", shape_list(x_value));
  shapes.set("weights", shape_list(m.weights.value()));
  shapes.set("logits", shape_list(logits_value));
  shapes.set("bias", shape_list(m.bias.value()));
  t.set("shapes", shapes);
  int64_t count = 0;
  for (const Tensor& b : before) count += b.numel();
  t.set("parameter_count", count);
  t.set("params_before", grads_dict(before));
  t.set("x", r6(x_value));
  t.set("logits", r6(logits_value));
  t.set("probs", r6(probs));
  t.set("losses", r6(losses));
  t.set("loss_before", py::round(loss_before, 6));
  t.set("grads", grads_dict(options.overwrite_bug ? overwrite : grads));
  json::Value check = json::Value::Object{};
  check.set("epsilon", c.epsilon);
  check.set("max_error_power_of_ten", static_cast<int64_t>(std::floor(std::log10(max_error))));
  check.set("max_error_overwrite_bug", py::round(tapegrad::max_gradient_error(overwrite, numeric), 6));
  check.set("loss_after_overwrite_bug", py::round(loss_after_bug, 6));
  t.set("gradient_check", check);
  t.set("params_after", grads_dict(updated));
  t.set("loss_after", py::round(loss_after, 6));
  json::Value::Array sweep;
  for (const json::Value& rate : c.learning_rate_sweep) {
    json::Value row = json::Value::Object{};
    row.set("learning_rate", rate);
    row.set("loss_after", py::round(train_step(rate.as_double(), options.overwrite_bug).first, 6));
    sweep.emplace_back(std::move(row));
  }
  t.set("learning_rate_sweep", std::move(sweep));
  json::Value large = json::Value::Object{};
  large.set("learning_rate", c.large_learning_rate);
  large.set("loss_after", py::round(train_step(c.large_learning_rate.as_double(), options.overwrite_bug).first, 6));
  t.set("large_learning_rate", large);
  if (!options.dump_tape.empty()) write_step_tape(m, c, numeric, options);  // last: a refused step writes nothing
  return t;
}

}  // namespace tiny
