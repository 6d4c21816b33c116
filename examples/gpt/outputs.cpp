// gpt train's files: checked, locked, put back (see outputs.hpp).
#include "outputs.hpp"

#include <tapegrad/io/atomic_file.hpp>

#include <exception>
#include <new>
#include <stdexcept>

namespace gpt {
namespace {

using tapegrad::Error;
namespace io = tapegrad::io;

// Takes the lock of `file` (given as `flag`), refusing by name when another process holds it.
std::unique_ptr<io::FileLock> lock(const std::string& flag, const std::string& file) {
  try {
    return std::make_unique<io::FileLock>(io::lock_path_for(file));
  } catch (const io::LockHeld& held) {
    throw Error(flag + " " + file + " is in use by " +
                (held.holder_pid > 0 ? "pid " + std::to_string(held.holder_pid)
                                     : std::string("another process (it has not written its pid yet)")) +
                ": it holds the lock file " + held.lock_path + "; nothing was written");
  }
}

}  // namespace

std::string plot_path(const std::string& log) {
  return log.ends_with(".csv") ? log.substr(0, log.size() - 4) + ".svg" : log + ".svg";
}

Outputs::Outputs(const TrainOptions& o) : o_(o) {
  const std::string plot = o.log.empty() ? "" : plot_path(o.log);
  const std::vector<io::NamedFile> outputs = {{"--checkpoint", o.checkpoint}, {"--log", o.log},
                                              {"the plot of --log", plot},     {"--dump-tape", o.dump_tape},
                                              {"--trace", o.trace}};
  for (const io::NamedFile& f : outputs)
    if (!f.path.empty()) {
      try {
        io::check_output(f.path);
      } catch (const Error& e) {
        throw Error(f.name + ": " + e.what());
      }
    }
  const std::string checkpoint_lock = o.checkpoint.empty() ? "" : io::lock_path_for(o.checkpoint);
  const std::string log_lock = o.log.empty() ? "" : io::lock_path_for(o.log);
  std::vector<io::NamedFile> written = outputs;
  written.push_back({"the lock file of --checkpoint", checkpoint_lock});
  written.push_back({"the lock file of --log", log_lock});
  io::check_distinct(written, {{"--data", o.data}});

  // From here to the run's last write, no other gpt writes these files.
  if (!o.checkpoint.empty()) locks_.push_back(lock("--checkpoint", o.checkpoint));
  if (!o.log.empty()) locks_.push_back(lock("--log", o.log));

  // An existing file is replaced only when asked: a resume continues its checkpoint and its log.
  if (!o.resume && !o.force)
    for (const io::NamedFile& f : {io::NamedFile{"--log", o.log}, io::NamedFile{"the plot of --log", plot}})
      if (!f.path.empty() && io::file_exists(f.path))
        throw Error(f.name + " " + f.path +
                    " exists: pass --resume to continue the run it logs, or --force to replace it");
  if (!o.trace.empty() && io::file_exists(o.trace))
    if (o.resume || !o.force)
      throw Error("--trace " + o.trace + " exists: " +
                  (o.resume ? "a resumed run writes a trace of its own steps and replaces none; remove it or give "
                              "another --trace"
                            : "pass --force to replace it"));
  keep();
}

void Outputs::keep() {
  if (!o_.checkpoint.empty()) checkpoint_.emplace(o_.checkpoint);
  others_.clear();
  for (const std::string& path : {o_.log, o_.log.empty() ? std::string() : plot_path(o_.log), o_.dump_tape, o_.trace})
    if (!path.empty()) others_.emplace_back(path);
}

void Outputs::committed(int64_t step) {
  committed_step_ = step;
  keep();
}

std::string Outputs::put_back(bool& all_put_back) {
  std::string restored, left;
  int count = 0;
  for (const io::KeptFile& f : others_) {
    try {
      if (!f.changed()) continue;
      f.put_back();
      restored += (restored.empty() ? "" : ", ") + f.path();
      ++count;
    } catch (const std::exception& e) {
      left += "; " + f.path() + " was written and stays so (putting it back failed: " + e.what() + ")";
    }
  }
  all_put_back = left.empty();
  if (restored.empty()) return left;
  const bool one = count == 1;
  return "; put back " + restored +
         (committed_step_ < 0 ? std::string(one ? " as it was" : " as they were") + " before this run"
                              : " as the checkpoint of step " + std::to_string(committed_step_) + " left " +
                                    (one ? "it" : "them")) +
         left;
}

int Outputs::run(const std::function<int()>& body) {
  try {
    return body();
  } catch (...) {
    // The checkpoint's write renamed the new file over the old, then failed (syncing its folder):
    // it is this run's, and the other outputs go with it.
    if (checkpoint_ && checkpoint_->changed()) {
      std::string what = "unknown exception";
      try {
        throw;
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      throw std::runtime_error(what + "; the checkpoint " + o_.checkpoint +
                               " was written, but may not be on the disk yet");
    }
    bool all_put_back = true;
    const std::string done = put_back(all_put_back);
    if (done.empty()) throw;
    std::string what = "out of memory";
    bool refusal = true;  // exit 2: bad input, a refused file, out of memory
    try {
      throw;
    } catch (const std::bad_alloc&) {
    } catch (const Error& e) {
      what = e.what();
    } catch (const std::exception& e) {
      what = e.what(), refusal = false;
    } catch (...) {
      what = "unknown exception", refusal = false;
    }
    if (refusal && all_put_back) throw Error(what + done);
    throw std::runtime_error(what + done);  // an internal failure, or something stays changed: exit 1
  }
}

}  // namespace gpt
