// gpt train's files: what it checks before it builds anything, what it locks, and what it puts
// back when a run fails (docs/reliability.md, "What gpt promises").
//
// Rule: before the model is built, every output (--checkpoint, --log and its plot, --dump-tape,
// --trace) is checked as io::check_output checks it; none may be --data or another output (by
// device and inode); an existing checkpoint, log, plot or trace needs --resume (the checkpoint and
// its log) or --force; and the checkpoint and the log are locked ("<file>.lock", as bob's) until
// the run ends, so a second run on them exits 2 naming the holder's pid. A refusal writes nothing.
//
// Rule: the checkpoint is each round's last write (the log before it), so a checkpoint on disk
// always has its log beside it. A run that fails after it wrote something puts every other output
// back as the last checkpoint it wrote left them, or as they were before the run when it wrote
// none, and says which; when one cannot be put back it says so and exits 1.
#pragma once

#include <tapegrad/io/file_lock.hpp>
#include <tapegrad/io/outputs.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "train.hpp"

namespace gpt {

class Outputs {
 public:
  // The checks and the locks of the first rule; throws tapegrad::Error (exit 2) before anything is
  // written.
  explicit Outputs(const TrainOptions& o);
  // The checkpoint of `step` was written: the other outputs as they are now go with it.
  void committed(int64_t step);
  // Runs `body` (the training); on any exception puts back what the run changed since the last
  // checkpoint and rethrows with what it did added to the message.
  int run(const std::function<int()>& body);

 private:
  // Keeps every output as it is now (what a later failure puts back).
  void keep();
  std::string put_back(bool& all_put_back);

  const TrainOptions& o_;
  std::vector<std::unique_ptr<tapegrad::io::FileLock>> locks_;
  std::optional<tapegrad::io::KeptFile> checkpoint_;  // to tell whether a failed write renamed the new one
  std::vector<tapegrad::io::KeptFile> others_;         // the log, its plot, the tape dump, the trace
  int64_t committed_step_ = -1;                         // -1: no checkpoint written by this run
};

// The plot that --log FILE.csv writes beside it: FILE.svg.
std::string plot_path(const std::string& log);

}  // namespace gpt
