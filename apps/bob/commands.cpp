// bob's subcommands (see commands.hpp): fixture, train, inspect, verify-resume and the main job.
//
// Rule: train reads everything it needs and checks it (record, every output's folder, the lock,
// checkpoint, device) before the first update, and writes the checkpoint only after the last one,
// as the last of its files; a refusal (exit 2) leaves every file as it was, and a failure after a
// file was written puts it back or says exactly what stayed written (docs/bob.md, "Locking and
// failures"). Child invocations (verify-resume, the main job) are this same program, found through
// /proc/self/exe, each in its own process.
#include "commands.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>


#include "bob_model.hpp"
#include "default_corpus.hpp"
#include "tapegrad/tensor/backend.hpp"
#include "tapegrad/io/atomic_file.hpp"
#include "tapegrad/io/file_lock.hpp"
#include "tapegrad/io/outputs.hpp"

extern char** environ;

namespace bob {

using tapegrad::DeviceError;
using tapegrad::Error;
using tapegrad::RefusedFile;

namespace {

// ---- text

// The shortest decimal text that reads back as `value` ("5.5451775").
std::string shortest(float value) {
  char text[32];
  return std::string(text, std::to_chars(text, text + sizeof text, value).ptr);
}

// A byte as a reader wants to see it: 'e' (0x65), '\n' (0x0a), 0x00.
std::string byte_text(uint32_t byte) {
  char text[32];
  if (byte >= 0x20 && byte < 0x7f && byte != '\'' && byte != '\\')
    std::snprintf(text, sizeof text, "'%c' (0x%02x)", static_cast<char>(byte), byte);
  else if (byte == '\n') std::snprintf(text, sizeof text, "'\\n' (0x0a)");
  else if (byte == '\'') std::snprintf(text, sizeof text, "'\\'' (0x27)");
  else if (byte == '\\') std::snprintf(text, sizeof text, "'\\\\' (0x5c)");
  else std::snprintf(text, sizeof text, "0x%02x", byte);
  return text;
}

// Text as a C-style quoted string, for showing corpus excerpts and prompts on one line.
std::string one_line(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '\n') out += "\\n";
    else if (c == '"' || c == '\\') out += std::string("\\") + c;
    else out += io::printable_bytes(std::string_view(&c, 1));
  }
  return out + "\"";
}

// ---- files and processes

// Bounds on what bob reads: a record is 1,564 bytes (one more lets decode_record name a wrong size);
// a checkpoint is 786,695, and a foreign envelope a few times that still gets its fields named.
constexpr size_t kMaxRecordBytes = io::bob_record_bytes + 1;
constexpr size_t kMaxCheckpointBytes = 4 * 786695 + (size_t{1} << 20);
constexpr size_t kMaxCorpusBytes = size_t{64} << 20;

io::BobRecord read_record(const std::string& path) {
  return io::decode_record(io::read_file(path, kMaxRecordBytes), path);
}

// A fresh folder under $TMPDIR (or /tmp), removed with everything in it unless keep() was called.
class TemporaryFolder {
 public:
  TemporaryFolder() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base && *base ? base : "/tmp") + "/bob-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr)
      throw Error("cannot create a temporary folder " + pattern + ": " + std::strerror(errno));
    path_ = pattern;
  }
  TemporaryFolder(const TemporaryFolder&) = delete;
  TemporaryFolder& operator=(const TemporaryFolder&) = delete;
  ~TemporaryFolder() {
    std::error_code ignored;
    if (!keep_) std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  void keep() { keep_ = true; }

 private:
  std::string path_;
  bool keep_ = false;
};

// Runs this program with `args` in a child process and waits for it. Its stdout and stderr go to
// `log_path`, or to ours when it is "". Returns its exit status (128 + N if killed by signal N).
int run_self(const std::vector<std::string>& args, const std::string& log_path) {
  std::error_code error;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", error).string();
  if (error) throw Error("cannot find this program through /proc/self/exe: " + error.message());
  std::vector<char*> argv{const_cast<char*>(self.c_str())};
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (!log_path.empty()) {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  }
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = 0;
  const int spawned = ::posix_spawn(&pid, self.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) throw Error("cannot start " + self + ": " + std::strerror(spawned));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) throw Error(std::string("cannot wait for a child process: ") + std::strerror(errno));
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// ---- train's files

// Refuses, before anything is written, an output that cannot be replaced: `path` exists and is not
// a regular file (a device such as /dev/full, a folder), its folder does not exist or is not
// writable by this process, or io::check_output refuses it (a link in a sticky folder that the
// kernel would not follow, a name too long). `what` names it in the message ("checkpoint").
void check_output(const std::string& what, const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0 && !S_ISREG(info.st_mode))
    throw Error(what + " " + path + " is not a regular file, and bob replaces only regular files; nothing was written");
  std::error_code ignored;
  std::string folder = std::filesystem::weakly_canonical(path, ignored).parent_path().string();
  if (folder.empty()) folder = std::filesystem::path(path).parent_path().string();
  if (folder.empty()) folder = ".";
  if (::faccessat(AT_FDCWD, folder.c_str(), W_OK | X_OK, AT_EACCESS) != 0) {
    const int err = errno;
    throw Error("cannot write " + what + " " + path + ": its folder " + folder +
                (err == ENOENT ? " does not exist" : " is not writable (" + std::string(std::strerror(err)) + ")") +
                "; nothing was written");
  }
  try {  // the library's own checks: a link not to follow, a name too long for its folder, ...
    io::check_output(path);
  } catch (const Error& e) {
    throw Error(what + ": " + e.what());
  }
}

// Refuses an output of train that is its input or another output (the checkpoint given as
// --predictions, say), by device and inode (io::check_distinct).
void check_distinct(const std::vector<io::NamedFile>& outputs, const std::string& input) {
  try {
    io::check_distinct(outputs, {{"input record", input}});
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + "; nothing was written");
  }
}

// Takes the checkpoint's lock for the whole read-train-write, refusing by name when another process
// holds it.
std::unique_ptr<io::FileLock> lock_checkpoint(const std::string& checkpoint) {
  try {
    return std::make_unique<io::FileLock>(io::lock_path_for(checkpoint));
  } catch (const io::LockHeld& held) {
    throw Error("checkpoint " + checkpoint + " is in use by " +
                (held.holder_pid > 0 ? "pid " + std::to_string(held.holder_pid)
                                     : std::string("another process (it has not written its pid yet)")) +
                ": it holds the lock file " + held.lock_path + "; nothing was written");
  }
}

// The files train writes before its checkpoint (the tape dump, the predictions), each with what was
// there before, so that a failure before the checkpoint is written can put them back.
class EarlierWrites {
 public:
  void add(const std::string& path) {
    if (path.empty()) return;
    files_.push_back({path, io::file_exists(path) ? std::optional(io::read_file(path)) : std::nullopt});
  }
  struct PutBack {
    std::string restored, left;  // "" or "; "-separated clauses for the message
  };
  // Puts back every file that differs from what was there before: its old bytes, or no file.
  PutBack put_back() const {
    PutBack result;
    for (const auto& [path, before] : files_) {
      try {
        const std::optional<std::string> now =
            io::file_exists(path) ? std::optional(io::read_file(path)) : std::nullopt;
        if (now == before) continue;
        if (before) io::write_file_atomic(path, *before);
        else if (::unlink(path.c_str()) != 0) throw Error("cannot remove " + path + ": " + std::strerror(errno));
        result.restored += (result.restored.empty() ? "" : ", ") + path;
      } catch (const Error& e) {
        result.left += "; " + path + " was written and stays so (putting it back failed: " + e.what() + ")";
      }
    }
    return result;
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> files_;
};

// ---- train's report

void print_predictions(const Predictions& predictions, const io::BobRecord& record) {
  for (size_t k = 0; k < io::bob_prompts; ++k) {
    const uint32_t last = record.prompt_last[k];
    const auto [token, validity] = predictions[k];
    std::printf("  prompt %zu, ", k + 1);
    if (last == io::bob_empty_prompt) std::printf("empty: token 0, validity 0 (nothing to predict from)\n");
    else if (validity == 0)
      std::printf("last byte %s: token 0, validity 0 (row W[%u] is not finite)\n", byte_text(last).c_str(), last);
    else std::printf("last byte %s: token %u %s\n", byte_text(last).c_str(), token, byte_text(token).c_str());
  }
}

// ---- inspect's report

// A plane's statistics, one line: "min .. max, mean, mean |x|, non-finite count".
std::string plane_statistics(std::string_view plane) {
  const size_t n = plane.size() / 4;
  double sum = 0, sum_abs = 0;
  float low = INFINITY, high = -INFINITY;
  size_t non_finite = 0;
  for (size_t i = 0; i < n; ++i) {
    const float x = io::load_f32(plane, 4 * i);
    if (!std::isfinite(x)) {
      ++non_finite;
      continue;
    }
    low = std::min(low, x);
    high = std::max(high, x);
    sum += x;
    sum_abs += std::fabs(x);
  }
  const size_t finite = n - non_finite;
  char text[256];
  if (finite == 0) std::snprintf(text, sizeof text, "%zu values, none finite", n);
  else
    std::snprintf(text, sizeof text, "%zu values: min %s, max %s, mean %.6g, mean |x| %.6g, non-finite %zu", n,
                  shortest(low).c_str(), shortest(high).c_str(), sum / static_cast<double>(finite),
                  sum_abs / static_cast<double>(finite), non_finite);
  return text;
}

// What inspect adds after a field's value: "  (as bob expects)" or "  (bob expects <expected>)".
std::string expectation(bool as_expected, const std::string& expected) {
  return as_expected ? "  (as bob expects)" : "  (bob expects " + expected + ")";
}

// One envelope field as inspect shows it: its value decoded, and bob's expectation beside it.
std::string field_text(const EnvelopeField& field, std::string_view bytes, const io::EnvelopeIdentity& bob) {
  const std::string_view value = bytes.substr(field.begin, field.end - field.begin);
  const std::string& name = field.name;
  auto identity = [&](const std::string& expected) {
    return io::printable_bytes(value) + expectation(value == expected, io::printable_bytes(expected));
  };
  auto number = [&](uint64_t expected) {
    const uint64_t found = value.size() == 4 ? io::load_u32(value, 0) : io::load_u64(value, 0);
    return std::to_string(found) + expectation(found == expected, std::to_string(expected));
  };
  if (name == "magic") return identity("CKPTENV1");
  if (name == "envelope format") return number(1);
  if (name == "schema identity") return identity(bob.schema);
  if (name == "learner identity")
    return bob.describe_learner(value) + expectation(value == bob.learner, bob.describe_learner(bob.learner));
  if (name == "data identity") return identity(bob.data);
  if (name == "seed identity") return identity(bob.seed);
  if (name == "payload bytes") return number(bob.payload_bytes);
  if (name == "chunk bytes") return number(bob.chunk_bytes);
  if (name == "updates per invocation") return number(bob.updates_per_invocation);
  if (name == "step") return std::to_string(io::load_u64(value, 0)) + "  (updates made so far)";
  if (name == "chunk count") return number(bob.chunk_count);
  if (name == "CRC-32") {
    const uint32_t stored = io::load_u32(value, 0), computed = io::crc32_of(bytes.substr(0, field.begin));
    return "stored " + io::hex32(stored) + ", computed " + io::hex32(computed) +
           (stored == computed ? ": ok" : ": BAD, the file is corrupt");
  }
  return plane_statistics(value);  // plane P, M or V
}

}  // namespace

// ---- fixture

void fixture(const FixtureOptions& options) {
  const std::string corpus =
      options.corpus.empty() ? std::string(default_corpus) : io::read_file(options.corpus, kMaxCorpusBytes);
  const std::string corpus_name = options.corpus.empty() ? std::string(default_corpus_name) : options.corpus;
  const io::BobRecord record = io::make_record(corpus, options.offset, options.prompts);
  io::write_file_atomic(options.out, io::encode_record(record));
  std::printf("wrote %s (%zu bytes): %zu bytes from offset %llu of %s, %s...\n", options.out.c_str(),
              io::bob_record_bytes, io::bob_examples + 1, static_cast<unsigned long long>(options.offset),
              corpus_name.c_str(), one_line(std::string_view(corpus).substr(options.offset, 40)).c_str());
  for (size_t k = 0; k < io::bob_prompts; ++k) {
    if (k < options.prompts.size() && !options.prompts[k].empty())
      std::printf("  prompt %zu: %s, last byte %s\n", k + 1, one_line(options.prompts[k]).c_str(),
                  byte_text(record.prompt_last[k]).c_str());
    else std::printf("  prompt %zu: empty\n", k + 1);
  }
}

// ---- train

void train(const TrainOptions& options) {
  if (options.fresh == options.resume)
    throw Error("give exactly one of --fresh (start from bob-seed-v1) and --resume (continue from the checkpoint)");
  const tapegrad::Device device = tapegrad::parse_device(options.device);
  const io::BobRecord record = read_record(options.input);
  const io::EnvelopeIdentity identity = io::bob_checkpoint_identity();

  // Every output is checked before the first write, and the checkpoint is locked until the end.
  check_distinct({{"checkpoint", options.checkpoint}, {"predictions", options.predictions},
                  {"tape dump", options.dump_tape}},
                 options.input);
  check_output("checkpoint", options.checkpoint);
  if (!options.predictions.empty()) check_output("predictions", options.predictions);
  if (!options.dump_tape.empty()) check_output("tape dump", options.dump_tape);
  const std::unique_ptr<io::FileLock> lock = lock_checkpoint(options.checkpoint);

  std::optional<io::Checkpoint> start;
  const std::optional<std::string> checkpoint_before =
      io::file_exists(options.checkpoint) ? std::optional(io::read_file(options.checkpoint, kMaxCheckpointBytes))
                                          : std::nullopt;
  if (options.resume) {
    if (!checkpoint_before)
      throw Error("--resume needs a checkpoint, but " + options.checkpoint +
                  " does not exist (start one with --fresh)");
    start = io::decode(*checkpoint_before, identity, options.checkpoint);
  } else if (checkpoint_before && !options.force) {
    throw Error("checkpoint " + options.checkpoint + " already exists and --fresh would replace it; pass --force " +
                "to start over, or --resume to continue from it");
  }

  Model model(record, device);
  if (start) model.load(*start);
  // A tape dump reads values in the middle of an update, which a replayed graph cannot.
  if (model.graphs() && (options.no_graph || !options.dump_tape.empty())) model.set_graphs(false);
  const uint64_t first_step = model.step();
  std::printf("bob train: %s, input %s, device %s%s%s\n",
              start ? ("resuming " + options.checkpoint + " at step " + std::to_string(first_step)).c_str()
                    : "fresh start from bob-seed-v1 (step 0)",
              options.input.c_str(), device.str().c_str(),
              device.is_cpu() ? "" : model.graphs() ? ", the updates as one CUDA graph" : ", op by op",
              options.overwrite_bug ? ", backward in the overwrite-bug mode" : "");

  // The tape dump (written by the last update) and the predictions go first, the checkpoint last: a
  // failure before the checkpoint is written puts them back, so a refusal has changed nothing, and a
  // process killed between them leaves the old checkpoint with the outputs a rerun writes again.
  EarlierWrites earlier;
  earlier.add(options.dump_tape);
  earlier.add(options.predictions);
  io::Checkpoint state;
  Predictions predictions{};
  std::string checkpoint_bytes;
  try {
    const uint64_t host_fallbacks = tapegrad::host_fallback_count();
    const auto began = std::chrono::steady_clock::now();
    std::vector<Tensor> losses;
    if (options.dump_tape.empty()) {
      losses = model.updates(updates_per_invocation, options.overwrite_bug);
    } else {
      for (uint64_t k = 0; k < updates_per_invocation; ++k)
        losses.push_back(model.update(options.overwrite_bug, k + 1 == updates_per_invocation ? options.dump_tape : ""));
    }
    const Tensor loss_after = model.loss();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    if (!device.is_cpu() && tapegrad::host_fallback_count() != host_fallbacks)
      throw DeviceError("refused: " + std::to_string(tapegrad::host_fallback_count() - host_fallbacks) +
                        " host fallbacks on " + device.str() + " during the updates; bob runs natively or not at all");

    for (uint64_t k = 0; k < losses.size(); ++k)
      std::printf("  update %3llu  loss %s\n", static_cast<unsigned long long>(first_step + k + 1),
                  shortest(static_cast<float>(losses[k].item())).c_str());
    std::printf("loss before %s, after %s (step %llu -> %llu; %.3f ms, %.1f us per update)\n",
                shortest(static_cast<float>(losses.front().item())).c_str(),
                shortest(static_cast<float>(loss_after.item())).c_str(), static_cast<unsigned long long>(first_step),
                static_cast<unsigned long long>(model.step()), seconds * 1e3,
                seconds * 1e6 / static_cast<double>(updates_per_invocation));

    state = model.state();
    predictions = predict(state.planes[0], record);
    if (!options.predictions.empty()) io::write_file_atomic(options.predictions, io::encode_predictions(predictions));
    checkpoint_bytes = io::encode(identity, state.step, state.planes);
    io::write_file_atomic(options.checkpoint, checkpoint_bytes);
  } catch (const Error& e) {
    std::optional<std::string> on_disk;
    try {
      if (!checkpoint_bytes.empty()) on_disk = io::read_file(options.checkpoint, kMaxCheckpointBytes);
    } catch (const Error&) {
    }
    if (on_disk && *on_disk == checkpoint_bytes && on_disk != checkpoint_before)  // renamed, then the sync failed
      throw std::runtime_error(std::string(e.what()) + "; the checkpoint " + options.checkpoint + " (step " +
                               std::to_string(state.step) + ")" +
                               (options.predictions.empty() ? "" : " and the predictions " + options.predictions) +
                               " were written, but may not be on the disk yet");
    const EarlierWrites::PutBack back = earlier.put_back();
    const std::string restored =
        back.restored.empty() ? "" : " (" + back.restored + ", written before the checkpoint, put back as it was)";
    if (!back.left.empty())  // something stays changed: not a refusal, an internal failure (exit 1)
      throw std::runtime_error(std::string(e.what()) + "; the checkpoint " + options.checkpoint +
                               " was not written" + restored + back.left);
    const std::string message = std::string(e.what()) + "; nothing was written" + restored;
    if (dynamic_cast<const DeviceError*>(&e) != nullptr) throw DeviceError(message);
    throw Error(message);
  }
  std::printf("wrote checkpoint %s (step %llu)\n", options.checkpoint.c_str(),
              static_cast<unsigned long long>(state.step));
  std::printf("predictions:\n");
  print_predictions(predictions, record);
  if (!options.predictions.empty())
    std::printf("wrote predictions %s (%zu bytes)\n", options.predictions.c_str(), 8 * io::bob_prompts);
}

// ---- inspect

int inspect(const std::string& path) {
  const std::string bytes = io::read_file(path, kMaxCheckpointBytes);
  const io::EnvelopeIdentity bob = io::bob_checkpoint_identity();
  std::printf("checkpoint %s: %zu bytes\n", path.c_str(), bytes.size());

  const std::vector<EnvelopeField> fields = envelope_fields(bytes);
  for (const EnvelopeField& field : fields)
    if (!field.name.ends_with("identity length"))  // the identities show their bytes instead
      std::printf("  %-23s %s\n", field.name.c_str(), field_text(field, bytes, bob).c_str());
  if (fields.empty() || fields.back().name != "CRC-32")
    std::printf("  (the file ends at byte %zu, before the envelope does)\n", bytes.size());
  else if (fields.back().end < bytes.size())
    std::printf("  (%zu trailing bytes after the CRC-32)\n", bytes.size() - fields.back().end);

  try {
    const io::Checkpoint checkpoint = io::decode(bytes, bob, path);
    std::printf("verdict: bob can resume from it (step %llu)\n", static_cast<unsigned long long>(checkpoint.step));
    return 0;
  } catch (const RefusedFile& refused) {
    std::printf("verdict: %s\n", refused.what());
    return 2;
  }
}

// ---- verify-resume

int verify_resume(const VerifyOptions& options) {
  if (options.invocations == 0) throw Error("--invocations must be at least 1");
  const tapegrad::Device device = tapegrad::parse_device(options.device);
  const io::BobRecord record = read_record(options.input);
  const uint64_t updates = options.invocations * updates_per_invocation;
  std::printf("bob verify-resume: %llu invocations of `bob train`, each its own process, against %llu updates in "
              "one process (device %s)\n",
              static_cast<unsigned long long>(options.invocations), static_cast<unsigned long long>(updates),
              device.str().c_str());

  Model model(record, device);
  if (model.graphs() && options.no_graph) model.set_graphs(false);
  for (uint64_t k = 0; k < options.invocations; ++k) model.updates(updates_per_invocation);
  const io::Checkpoint state = model.state();
  const std::string one_process = io::encode(io::bob_checkpoint_identity(), state.step, state.planes);
  std::printf("  one process: %llu updates, loss now %s\n", static_cast<unsigned long long>(updates),
              shortest(static_cast<float>(model.loss().item())).c_str());

  TemporaryFolder folder;
  const std::string checkpoint = folder / "resumed.ckpt", log = folder / "invocation.log";
  for (uint64_t k = 1; k <= options.invocations; ++k) {
    std::vector<std::string> args = {"train", "--input", options.input, "--checkpoint", checkpoint,
                                     k == 1 ? "--fresh" : "--resume", "--device", options.device};
    if (options.no_graph) args.push_back("--no-graph");
    const int status = run_self(args, log);
    if (status != 0) {
      std::printf("  invocation %llu exited with %d; its output:\n%s", static_cast<unsigned long long>(k), status,
                  io::read_file(log).c_str());
      return 1;
    }
    std::printf("  invocation %llu/%llu (%s): its own process, step %llu\n", static_cast<unsigned long long>(k),
                static_cast<unsigned long long>(options.invocations), k == 1 ? "--fresh" : "--resume",
                static_cast<unsigned long long>(io::read(checkpoint, io::bob_checkpoint_identity()).step));
    std::fflush(stdout);
  }

  const std::string resumed = io::read_file(checkpoint, kMaxCheckpointBytes);
  const std::string difference = describe_difference(resumed, one_process, "the resumed checkpoint", "one process");
  if (!difference.empty()) {
    folder.keep();
    std::printf("DIFFERENT: %s\n  (the resumed checkpoint is kept in %s)\n", difference.c_str(), checkpoint.c_str());
    return 1;
  }
  std::printf("identical: %llu invocations and one process give the same checkpoint, byte for byte "
              "(%zu bytes, CRC-32 %s)\n",
              static_cast<unsigned long long>(options.invocations), resumed.size(),
              io::hex32(io::crc32_of(std::string_view(resumed).substr(0, resumed.size() - 4))).c_str());
  return 0;
}

// ---- the main job

void main_job() {
  TemporaryFolder folder;
  const std::string input = folder / "input.rec", checkpoint = folder / "bob.ckpt";
  std::printf("bob: the main job, on the built-in corpus, in %s\n\n$ bob fixture --out %s --prompt ... (3 prompts)\n",
              folder.path().c_str(), input.c_str());
  FixtureOptions fixture_options;
  fixture_options.out = input;
  fixture_options.prompts = {"Down the Rabbit", "she had peeped into th", ""};
  fixture(fixture_options);

  for (const char* mode : {"--fresh", "--resume", "--resume"}) {
    const std::vector<std::string> args{"train", "--input", input, "--checkpoint", checkpoint, mode};
    std::printf("\n$ bob");
    for (const std::string& arg : args) std::printf(" %s", arg.c_str());
    std::printf("\n");
    const int status = run_self(args, "");
    if (status != 0) throw Error("the invocation `bob train ... " + std::string(mode) + "` exited with " +
                                 std::to_string(status));
  }

  const io::BobRecord record = read_record(input);
  Model fresh(record, tapegrad::Device::cpu());
  Model trained(record, tapegrad::Device::cpu());
  trained.load(io::read(checkpoint, io::bob_checkpoint_identity()));
  std::printf("\nthe loss fell from %s (step 0) to %s (step %llu) over 3 invocations, each its own process\n",
              shortest(static_cast<float>(fresh.loss().item())).c_str(),
              shortest(static_cast<float>(trained.loss().item())).c_str(),
              static_cast<unsigned long long>(trained.step()));
  std::printf("(`bob verify-resume --input REC` checks that resuming changes no bit; the temporary folder is "
              "removed now)\n");
}

}  // namespace bob
