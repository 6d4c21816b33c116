// Tape dumps: a graph after its backward pass, written as JSON for people who want to see
// backpropagation happen (docs/tape-format.md, format "tapegrad-tape", version 1).
//
// Rules:
// - A dump says what the engine did, not what it should have done: values in record order, the
//   visit order and every gradient contribution exactly as BackwardRecord holds them (per row for
//   scatter-style backwards, with what an overwrite discarded), and each value's gradient as it
//   stood when the backward pass ended.
// - Dump after backward() and before clear(): the dump reads the tape the record refers to.
// - A value recorded inside a name scope (Graph::Scope) carries it ("scope": "h.0.attn"), so the
//   viewers can group thousands of nodes by layer; a value outside every scope has no such field.
// - Everything goes through the host (Tensor::to_doubles), whatever device the graph runs on.
// - The title is free text (a program may put a user's path in it): invalid UTF-8 in it is written
//   as U+FFFD (io::valid_utf8), never refused.
// - A dump is for tapes a person can read, and costs memory in proportion to the tape: a backward
//   recorded for it keeps every value's gradient and a copy of every contribution, and the dump
//   replays each receiving gradient in f64. check_dump_size refuses, before that backward, a tape
//   of more than kMaxDumpNumbers numbers (Note [what a dump costs] in tape_dump.cpp).
// - A tensor of up to `whole_limit` elements is written whole; a larger one as statistics and its
//   first `head` elements, marked "truncated": true with its element count.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tapegrad/graph/graph.hpp"
#include "tapegrad/io/json.hpp"

namespace tapegrad {

inline constexpr const char* kTapeFormat = "tapegrad-tape";
inline constexpr int kTapeVersion = 1;

// The result of a central-difference gradient check, per parameter (see gradcheck.hpp).
struct GradientCheckResult {
  double epsilon = 0.0;
  double tolerance = 0.0;           // passed when every parameter's max error is at most this
  std::vector<double> max_error;    // max |analytic - numeric| per parameter, in parameters() order

  double worst() const;
  bool passed() const;
};

// Compares analytic and numeric gradients (one tensor per parameter, as numerical_gradients gives).
GradientCheckResult gradient_check_result(const std::vector<Tensor>& analytic, const std::vector<Tensor>& numeric,
                                          double epsilon, double tolerance);

struct DumpOptions {
  std::string title;            // one line naming the run ("tiny_step: red green red -> stop go stop")
  bool overwrite_bug = false;   // the mode the recorded backward ran in (BackwardOptions::overwrite_bug)
  int64_t whole_limit = 64;     // tensors with at most this many elements are dumped whole
  int64_t head = 8;             // of a larger tensor, how many leading elements are kept
  // Names for the rows (for a 1-D value: the elements) of every value carrying the label, e.g.
  // {"embedding", vocab}: a reader then says "row 0 (red)" where it would say "row 0".
  std::map<std::string, std::vector<std::string>> row_names;
  // A model of tokens: `tokens[i]` names token id i ("\n", " ", "e" for characters), and every value
  // whose label is in `labels` is named by it: a floating value's rows (an embedding's table, an
  // output head's weight: a row per token, rows past the vocabulary, a padded table's, unnamed), an
  // integer value's elements (the batch's ids and targets, which readers show as their tokens).
  struct Vocabulary {
    std::vector<std::string> tokens;
    std::vector<std::string> labels;  // {"wte.weight", "lm_head.weight", "ids", "targets"}
  };
  std::optional<Vocabulary> vocabulary;
  std::optional<GradientCheckResult> gradient_check;  // written when a check was run
};

// The dump as a JSON value. `record` may be null (no backward was recorded): the dump then has
// "backward": null and still every value's gradient. Throws tapegrad::Error when the record does
// not belong to this tape or contradicts options.overwrite_bug, or when row names do not fit.
json::Value tape_dump(const Graph& g, const BackwardRecord* record, const DumpOptions& options = {});

// The most numbers (elements of values, parameters included) a tape may hold to be dumped: 2^25.
inline constexpr int64_t kMaxDumpNumbers = int64_t{1} << 25;

// The numbers g's tape holds: the elements of every value on it and of every parameter.
int64_t tape_numbers(const Graph& g);

// Refuses (tapegrad::Error, naming `path`, the tape's numbers and the bound) to dump a tape of more
// than kMaxDumpNumbers numbers. Call it after the forward, before the backward it records.
void check_dump_size(const Graph& g, const std::string& path);

// json::dumps(tape_dump(...), 1) + "\n", written atomically to `path`.
void write_tape_dump(const std::string& path, const Graph& g, const BackwardRecord* record,
                     const DumpOptions& options = {});

}  // namespace tapegrad
