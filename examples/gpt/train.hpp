// gpt's commands: train (with checkpoints, bitwise resume, a CSV log and its plot) and sample.
// main.cpp parses the command line into these options; docs/nn.md ("The GPT example") describes
// the whole program.
#pragma once

#include <cstdint>
#include <string>

#include "model.hpp"

namespace gpt {

// A named preset (nanoGPT's shakespeare_char for small) and its training defaults.
struct Preset {
  Config model;
  double lr = 1e-3, min_lr = 1e-4;
  int64_t warmup = 100, decay_steps = 5000;  // the schedule: warmup, then cosine to min_lr at decay_steps
  int64_t eval_every = 250, eval_batches = 20;
};
Preset preset(const std::string& name);  // "tiny" or "small"; else tapegrad::Error

struct TrainOptions {
  std::string config = "tiny";
  Preset preset = gpt::preset("tiny");
  std::string data;             // a text file; empty: the built-in corpus
  bool bytes = false;           // byte-level tokens (V = 256) instead of the text's characters
  bool random_tokens = false;   // uniform random ids at GPT-2's vocabulary (V = 50304), for timing
  int64_t steps = 200;          // train until this step
  std::string device = "cpu";
  DType dtype = DType::f32;
  uint64_t seed = 1337;
  std::string checkpoint;       // written at the end (and every save_every steps)
  bool resume = false;          // continue from `checkpoint`
  bool force = false;           // a fresh run may replace an existing checkpoint
  int64_t save_every = 0;
  std::string log;              // FILE.csv, and its plot beside it (FILE.svg)
  std::string dump_tape;        // the first step's tape, for apps/tape
  std::string trace;            // for the PyTorch parity test: a safetensors file (see train.cpp)
  int64_t sample_tokens = 0;    // after training, print a sample of this many tokens
  bool graph = false;           // CUDA: capture a training step as one CUDA graph and replay it
  bool cast_weights = false;    // bf16 products cast the weights each step, not AdamW's bf16 copies
  // docs/distributed.md: the ranks of a job (mpirun, or TAPEGRAD_RANK and its kin) each run
  // `accumulate` micro-batches a step
  int64_t accumulate = 1;
  bool zero = false;            // ZeRO-1: AdamW's moments cut over the ranks
  bool dist = false;            // join the communicator's backend even alone (a job of one)
  bool show_batches = false;    // print each micro-batch's windows (which rank drew what)
};
int train(const TrainOptions& o);  // 0, or throws tapegrad::Error for bad input

struct SampleOptions {
  std::string checkpoint;
  std::string prompt;
  int64_t tokens = 200;
  double temperature = 1.0;     // > 0
  int64_t top_k = 0;            // 0: every token
  uint64_t seed = 1337;
  std::string device = "cpu";
  bool no_cache = false;        // the whole window again for every token (sample.hpp), for comparison
};
int sample(const SampleOptions& o);

}  // namespace gpt
