// bob's subcommands (docs/bob.md: "Use" shows them at work, "The contract" fixes what they must
// do, "Exit codes" included). main.cpp parses the command line into these options and maps what
// they throw to exit codes.
//
// Rule: a command that cannot do what it was asked throws tapegrad::Error (RefusedFile for a
// refused record or checkpoint, DeviceError for a device that cannot run) before it changes any
// file it was given; files are only ever replaced atomically.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace bob {

struct FixtureOptions {
  std::string corpus;                // a file of raw bytes; "" = the built-in corpus
  uint64_t offset = 0;               // where the 257 bytes start
  std::vector<std::string> prompts;  // up to 3; missing ones are empty
  std::string out;
};
// Writes the input record for 257 corpus bytes and the prompts.
void fixture(const FixtureOptions& options);

struct TrainOptions {
  std::string input, checkpoint;
  bool fresh = false, resume = false;  // exactly one
  bool force = false;                  // --fresh may replace an existing checkpoint
  bool overwrite_bug = false;          // backward in the engine's overwrite-bug mode
  std::string dump_tape;               // "" = none; else the last update's tape (apps/tape reads it)
  std::string predictions;             // "" = print them only
  std::string device = "cpu";
  bool no_graph = false;               // on CUDA, launch op by op instead of replaying one CUDA graph
};
// One invocation: 10 updates from a fresh start or from the checkpoint, the checkpoint written
// atomically, the predictions printed (and written when asked). Holds the checkpoint's lock file
// throughout and checks every output first; a write that fails after an earlier output was written
// puts that one back, or throws std::runtime_error (exit 1) naming what stays written.
void train(const TrainOptions& options);

// Shows a checkpoint's fields, plane statistics and CRC, then bob's verdict on it. Returns 0 if bob
// can resume from it, 2 if bob refuses it.
int inspect(const std::string& path);

struct VerifyOptions {
  std::string input;
  uint64_t invocations = 3;
  std::string device = "cpu";
  bool no_graph = false;  // passed to every invocation, and used for the one-process run
};
// Runs `invocations` invocations of `bob train`, each its own process, and the same number of
// updates in this process; compares the two checkpoints byte for byte. Returns 0 if identical,
// 1 (after saying where they first differ) if not.
int verify_resume(const VerifyOptions& options);

// `bob` without arguments: the record from the built-in corpus in a temporary folder, a fresh
// invocation and two resumes as separate processes, the loss falling and the predictions.
void main_job();

}  // namespace bob
