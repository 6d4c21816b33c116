// bob's model and learner (see bob_model.hpp): initialization, the update, predictions, and the
// byte-level comparison of two checkpoints that verify-resume reports.
#include "bob_model.hpp"

#include <bit>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "tapegrad/tape/tape_dump.hpp"
#include "tapegrad/ops/fused/embedding_cross_entropy.hpp"

namespace bob {

using tapegrad::DType;
using tapegrad::Error;
using tapegrad::Shape;
using tapegrad::Var;
namespace ops = tapegrad::ops;

tapegrad::optim::AdamWConfig learner_config() {
  return {.lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.01f};
}

// ---- initialization

uint64_t fnv1a64(std::string_view bytes) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (const char c : bytes) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ull;
  }
  return hash;
}

uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::vector<float> initial_table() {
  const uint64_t key = fnv1a64("bob-seed-v1");
  std::vector<float> table(static_cast<size_t>(vocabulary * vocabulary));
  for (size_t i = 0; i < table.size(); ++i) {
    const uint64_t u = splitmix64(key + i) >> 40;                          // in [0, 2^24)
    const auto centered = static_cast<int32_t>(u) - (int32_t{1} << 23);   // in [-2^23, 2^23): exact in fp32
    table[i] = static_cast<float>(centered) * 0x1p-30f;                   // * 2^-30, exact
  }
  return table;
}

// ---- prediction

Predictions predict(const std::vector<float>& table, const io::BobRecord& record) {
  Predictions out{};
  for (size_t k = 0; k < io::bob_prompts; ++k) {
    const uint32_t last = record.prompt_last[k];
    if (last == io::bob_empty_prompt) continue;  // (0, 0)
    const float* row = table.data() + static_cast<size_t>(last) * vocabulary;
    bool finite = true;
    uint32_t best = 0;
    for (uint32_t j = 0; j < vocabulary; ++j) {
      finite = finite && std::isfinite(row[j]);
      if (row[j] > row[best]) best = j;  // strictly greater: the lowest index wins a tie
    }
    if (finite) out[k] = {best, 1};
  }
  return out;
}

// ---- the model

Model::Model(const io::BobRecord& record, Device device)
    : w_(graph_.parameter(Tensor::from_vector(initial_table(), Shape{vocabulary, vocabulary}, device), "W")),
      x_(Tensor::from_vector(std::vector<int32_t>(record.x.begin(), record.x.end()),
                             Shape{static_cast<int64_t>(io::bob_examples)}, device)),
      y_(Tensor::from_vector(std::vector<int32_t>(record.y.begin(), record.y.end()),
                             Shape{static_cast<int64_t>(io::bob_examples)}, device)),
      adamw_({w_}, learner_config()),
      graphs_(device.is_cuda()) {}

void Model::load(const io::Checkpoint& checkpoint) {
  const size_t n = static_cast<size_t>(vocabulary * vocabulary);
  if (checkpoint.planes.size() != 3 || checkpoint.planes[0].size() != n || checkpoint.planes[1].size() != n ||
      checkpoint.planes[2].size() != n)
    throw Error("[bob] a checkpoint's state must be 3 planes of " + std::to_string(n) + " values (P, M, V)");
  const Shape shape{vocabulary, vocabulary};
  Tensor w = w_.value();
  w.copy_from(Tensor::from_vector(checkpoint.planes[0], shape));
  adamw_.set_moments(0, Tensor::from_vector(checkpoint.planes[1], shape), Tensor::from_vector(checkpoint.planes[2], shape));
  adamw_.set_step_count(checkpoint.step);
}

namespace {

std::vector<float> host_values(const Tensor& t) {
  const Tensor host = t.to(Device::cpu());
  const float* p = host.data<float>();
  return std::vector<float>(p, p + host.numel());
}

}  // namespace

io::Checkpoint Model::state() const {
  return {step(), {host_values(w_.value()), host_values(adamw_.m(0)), host_values(adamw_.v(0))}};
}

Var Model::forward() {
  graph_.clear();
  // cross_entropy(gather(W, x), y), the mean over the 256 examples, as one fused node: the same
  // bits, with W's gradient row-sparse (src/ops/fused/embedding_cross_entropy.hpp)
  return ops::embedding_cross_entropy(w_, graph_.input(x_, "x"), graph_.input(y_, "y"));
}

Tensor Model::forward_backward(bool overwrite_bug, const std::string& dump_tape, PhaseTimes* times) {
  using clock = std::chrono::steady_clock;
  const auto start = times ? clock::now() : clock::time_point{};
  graph_.zero_grad();
  Var loss = forward();
  const auto forwarded = times ? clock::now() : clock::time_point{};
  tapegrad::BackwardRecord record;
  graph_.backward(loss, {.overwrite_bug = overwrite_bug, .record = dump_tape.empty() ? nullptr : &record});
  if (times) {
    times->forward_us += std::chrono::duration<double, std::micro>(forwarded - start).count();
    times->backward_us += std::chrono::duration<double, std::micro>(clock::now() - forwarded).count();
  }
  if (!dump_tape.empty()) {  // dW: rows of repeated bytes accumulate (or, in the bug mode, overwrite)
    std::vector<std::string> bytes;  // row names: 'a' for printable bytes, 0x0a otherwise
    for (int64_t b = 0; b < vocabulary; ++b) {
      char name[8];
      if (b >= 0x20 && b < 0x7f) std::snprintf(name, sizeof name, "'%c'", static_cast<int>(b));
      else std::snprintf(name, sizeof name, "0x%02x", static_cast<unsigned>(b));
      bytes.push_back(name);
    }
    tapegrad::DumpOptions dump;
    dump.title = "bob: update " + std::to_string(adamw_.step_count() + 1) + " (W before AdamW)";
    dump.overwrite_bug = overwrite_bug;
    dump.row_names = {{"W", bytes}};
    tapegrad::write_tape_dump(dump_tape, graph_, &record, dump);
  }
  return loss.value();
}

Tensor Model::update(bool overwrite_bug, const std::string& dump_tape, PhaseTimes* times) {
  Tensor loss = forward_backward(overwrite_bug, dump_tape, times);
  const auto start = times ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  adamw_.step();
  if (times)
    times->optimizer_us += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  return loss;
}

// Note [bob's updates as one graph]
// On a GPU an update is a handful of small kernels (gather, cross-entropy, its mean, the backward's
// seed, cross-entropy's backward, dW's zeros, the scatter, AdamW), each far shorter than launching
// it from the host and recording its tape node. So updates() records the invocation's n updates
// once, with tapegrad::capture(), and replays them as one CUDA graph: the host then does one launch
// per invocation. What changes between replays is read from the device: AdamW's step scalars (its
// write_schedule, filled before every replay for steps t+1 .. t+n). The tape, W, M, V, x and y keep
// their addresses; the update's temporaries live in the graph's pool. The step count moves on the
// host after the replay, as the n step() calls would have moved it.
std::vector<Tensor> Model::updates(size_t n, bool overwrite_bug) {
  if (!graphs_) {
    std::vector<Tensor> losses;
    for (size_t k = 0; k < n; ++k) losses.push_back(update(overwrite_bug));
    return losses;
  }
  const uint64_t t = adamw_.step_count();
  adamw_.write_schedule(t, n);
  if (!captured_ || captured_n_ != n || captured_bug_ != overwrite_bug) {
    captured_.reset();
    captured_losses_.clear();
    captured_ = tapegrad::capture(w_.value().device(), [&] {
      for (size_t k = 0; k < n; ++k) {
        captured_losses_.push_back(forward_backward(overwrite_bug, ""));
        adamw_.scheduled_step(k);
      }
    });
    captured_n_ = n;
    captured_bug_ = overwrite_bug;
  }
  captured_->replay();
  adamw_.set_step_count(t + n);
  return captured_losses_;
}

void Model::set_graphs(bool on) {
  if (on && !w_.value().device().is_cuda())
    throw Error("[bob] CUDA graphs need a CUDA device; this model is on " + w_.value().device().str());
  graphs_ = on;
  if (!on) {
    captured_.reset();
    captured_losses_.clear();
  }
}

Tensor Model::loss() {
  tapegrad::NoGrad no_grad(graph_);
  Tensor value = forward().value();
  graph_.clear();
  return value;
}

// ---- checkpoint layout and comparison

std::vector<EnvelopeField> envelope_fields(std::string_view bytes) {
  std::vector<EnvelopeField> fields;
  size_t at = 0;
  auto add = [&](const std::string& name, size_t size) {
    if (size > bytes.size() - at) return false;
    fields.push_back({name, at, at + size});
    at += size;
    return true;
  };
  if (!add("magic", 8) || !add("envelope format", 4)) return fields;
  for (const char* name : {"schema", "learner", "data", "seed"}) {
    if (!add(std::string(name) + " identity length", 4)) return fields;
    if (!add(std::string(name) + " identity", io::load_u32(bytes, at - 4))) return fields;
  }
  if (!add("payload bytes", 8) || !add("chunk bytes", 8) || !add("updates per invocation", 8) || !add("step", 8) ||
      !add("chunk count", 4))
    return fields;
  const uint64_t chunk_bytes = io::load_u64(bytes, fields[fields.size() - 4].begin);
  const uint32_t chunk_count = io::load_u32(bytes, fields.back().begin);
  const char* plane_names[] = {"P", "M", "V"};
  for (uint32_t k = 0; k < chunk_count && chunk_bytes > 0; ++k)
    if (!add(k < 3 ? std::string("plane ") + plane_names[k] : "plane " + std::to_string(k + 1), chunk_bytes))
      return fields;
  add("CRC-32", 4);
  return fields;
}

namespace {

std::string value_text(std::string_view bytes, size_t offset) {
  const uint32_t bits = io::load_u32(bytes, offset);
  char text[64];
  char number[32];
  const auto end = std::to_chars(number, number + sizeof number, std::bit_cast<float>(bits)).ptr;
  std::snprintf(text, sizeof text, "0x%08x (%.*s)", bits, static_cast<int>(end - number), number);
  return text;
}

}  // namespace

std::string describe_difference(std::string_view a, std::string_view b, const std::string& a_name,
                                const std::string& b_name) {
  if (a == b) return "";
  size_t offset = 0;
  while (offset < a.size() && offset < b.size() && a[offset] == b[offset]) ++offset;
  std::string text = "first difference at byte " + std::to_string(offset);
  if (a.size() != b.size())
    text += " (" + a_name + " is " + std::to_string(a.size()) + " bytes, " + b_name + " is " +
            std::to_string(b.size()) + ")";
  if (offset == a.size() || offset == b.size()) return text + ": one file ends there";
  for (const EnvelopeField& field : envelope_fields(a)) {
    if (offset < field.begin || offset >= field.end) continue;
    text += ", in the " + field.name;
    if (field.name.starts_with("plane ") && field.end <= b.size()) {
      const size_t element = (offset - field.begin) / 4;
      const size_t at = field.begin + 4 * element;
      text += ", element [" + std::to_string(element / vocabulary) + "][" + std::to_string(element % vocabulary) +
              "]: " + a_name + " has " + value_text(a, at) + ", " + b_name + " has " + value_text(b, at);
    }
    break;
  }
  return text;
}

}  // namespace bob
