// bob's model and learner (docs/bob.md), assembled from tapegrad: the [256, 256] f32 table W as a
// graph parameter, the mean cross-entropy of the logits W[x] (one fused op), the generic engine,
// AdamW.
//
// Rule: no gradient is written here; the engine computes dW, and repeated input bytes accumulate
// their rows there (or overwrite them, in the engine's overwrite-bug mode). The update loop
// touches only tensors on the model's device: nothing in it reads values back to the host, so a
// device with its own kernels runs every update natively. Values cross to the host only when the
// caller asks (state(), a loss tensor's item()).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tapegrad/graph/graph.hpp"
#include "bob_formats.hpp"
#include "tapegrad/optim/adamw.hpp"

namespace bob {

using tapegrad::Device;
using tapegrad::Tensor;
namespace io = tapegrad::io;

inline constexpr int64_t vocabulary = 256;          // byte values; W is [vocabulary, vocabulary]
inline constexpr uint64_t updates_per_invocation = 10;

// The learner's binary32 hyperparameters: lr 0.1, beta1 0.9, beta2 0.95, eps 1e-8, wd 0.01.
tapegrad::optim::AdamWConfig learner_config();

// ---- deterministic initialization (identity bob-seed-v1)
uint64_t fnv1a64(std::string_view bytes);  // FNV-1a, 64 bits
uint64_t splitmix64(uint64_t x);
// W's 65,536 starting values, row-major: (float)((splitmix64(key + i) >> 40) - 2^23) * 2^-30,
// key = fnv1a64("bob-seed-v1").
std::vector<float> initial_table();

// ---- prediction: for each prompt (token, validity). A non-empty prompt whose row W[last byte] is
// all finite predicts the row's argmax (lowest index on ties) with validity 1; otherwise 0, 0.
using Predictions = std::array<std::pair<uint32_t, uint32_t>, io::bob_prompts>;
Predictions predict(const std::vector<float>& table, const io::BobRecord& record);

class Model {
 public:
  // A fresh start on `device`: W from bob-seed-v1, M = V = 0, step 0. Throws DeviceError if the
  // device is not built in or not present.
  Model(const io::BobRecord& record, Device device);

  // Resumes from a checkpoint's state (already checked against bob's identity by io::decode).
  void load(const io::Checkpoint& checkpoint);
  // The state to checkpoint: the step and the planes P, M, V, copied to the host.
  io::Checkpoint state() const;

  // One optimizer update over the full batch: forward, backward (in the overwrite-bug mode when
  // asked), AdamW. Returns the forward pass's loss, a shape () tensor on the model's device.
  // With dump_tape, the update's tape (values, every gradient contribution, W's gradient) is
  // written there before AdamW changes W (apps/tape reads it).
  // With `times`, each phase's host wall time is added to it (bench/bench_bob.cpp's split; on a
  // CUDA device that is the time to enqueue the phase, not to run it).
  struct PhaseTimes {
    double forward_us = 0, backward_us = 0, optimizer_us = 0;
  };
  Tensor update(bool overwrite_bug = false, const std::string& dump_tape = "", PhaseTimes* times = nullptr);
  // n updates, an invocation's worth. With graphs on (the default on a CUDA device) the first call
  // captures n updates as one CUDA graph and every call replays it, with AdamW's step scalars
  // written to the device before each replay (Note [bob's updates as one graph]); otherwise it is
  // update() n times. Either way the same bits. Returns each update's loss, shape () on the device;
  // in graph mode the next call rewrites these tensors, so read them before calling again.
  std::vector<Tensor> updates(size_t n, bool overwrite_bug = false);
  // Graphs for updates(): on by default on CUDA devices; the CPU has none (turning them on throws).
  void set_graphs(bool on);
  bool graphs() const { return graphs_; }
  // The captured graph's work items (kernels, copies, fills); 0 before the first graph replay.
  size_t graph_nodes() const { return captured_ ? captured_->nodes() : 0; }
  // The loss at the current W, without recording a backward.
  Tensor loss();

  uint64_t step() const { return adamw_.step_count(); }
  tapegrad::Var table() const { return w_; }  // W, with its gradient after an update
  std::pair<Tensor, Tensor> inputs() const { return {x_, y_}; }  // x, y: (256,) i32 on the model's device

 private:
  tapegrad::Var forward();  // records logits = W[x] and the mean cross-entropy; returns the loss
  // zero_grad, forward, backward (and the tape dump when asked); returns the loss. No optimizer.
  Tensor forward_backward(bool overwrite_bug, const std::string& dump_tape, PhaseTimes* times = nullptr);

  tapegrad::Graph graph_;
  tapegrad::Var w_;   // (256, 256) f32: row b holds the next-byte logits after byte b
  Tensor x_, y_;      // (256,) i32: the input bytes and their targets
  tapegrad::optim::AdamW adamw_;

  bool graphs_ = false;
  std::unique_ptr<tapegrad::CapturedGraph> captured_;  // n updates, as updates() captured them
  size_t captured_n_ = 0;
  bool captured_bug_ = false;
  std::vector<Tensor> captured_losses_;  // the losses the graph writes, one per update
};

// One field of a checkpoint envelope as a file lays it out: its name ("magic", "schema identity",
// "plane M", "CRC-32", ...) and its byte range.
struct EnvelopeField {
  std::string name;
  size_t begin, end;
};
// The fields of `bytes` in file order, following its own length fields as far as the bytes go (a
// truncated file gives the fields that fit). Never throws; checking is io::decode's job.
std::vector<EnvelopeField> envelope_fields(std::string_view bytes);

// Where two checkpoint files first differ, readably: the byte offset, the field, and inside a
// plane the element and both values ("in the plane M, element [101][32]: a has 0x3a83126f
// (0.001), b has ..."). `a_name` and `b_name` label the files. Returns "" when they are identical.
std::string describe_difference(std::string_view a, std::string_view b, const std::string& a_name,
                                const std::string& b_name);

}  // namespace bob
