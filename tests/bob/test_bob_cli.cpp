// Tests for the bob program end to end: each test runs the built binary (BOB_BINARY) as a child
// process and checks its exit code, its message and the files it leaves.
//
// Rule: every refusal is asserted by name (the message), by exit code 2, and by the files it must
// not touch: a refused checkpoint keeps its bytes, no checkpoint or predictions appear where none
// should. Checkpoints to refuse are crafted with io::encode from an identity with one field
// changed, or by damaging a good file's bytes.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <thread>

#include "bob_model.hpp"
#include "tapegrad/config.hpp"
#include "default_corpus.hpp"
#include "tapegrad/io/atomic_file.hpp"
#include "tapegrad/io/file_lock.hpp"
#include "tapegrad/kernels/cpu/simd.hpp"

extern char** environ;

using namespace tapegrad;

namespace {

struct Run {
  int status = -1;
  std::string out, err;
};

// A fresh folder for one test, removed with its contents at the end.
struct Folder {
  std::string path;
  Folder() {
    std::string pattern = (std::filesystem::temp_directory_path() / "bob-test-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~Folder() { std::filesystem::remove_all(path); }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

// How a child bob runs besides its arguments.
struct ChildSetup {
  std::optional<uid_t> uid;               // as this user and its group (root's tests drop to nobody)
  std::optional<rlim_t> max_file_bytes;   // RLIMIT_FSIZE, with SIGXFSZ ignored: writes past it fail, EFBIG
};

// Starts bob with `args`, its stdout and stderr on `out_fd` and `err_fd`; returns its pid.
pid_t start_bob(const std::vector<std::string>& args, int out_fd, int err_fd, const ChildSetup& setup = {}) {
  const char* binary = std::getenv("BOB_BINARY");
  REQUIRE_MESSAGE(binary != nullptr, "BOB_BINARY is not set; run the tests with meson test");
  std::vector<char*> argv{const_cast<char*>(binary)};
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  const passwd* user = setup.uid ? ::getpwuid(*setup.uid) : nullptr;
  const gid_t gid = user ? user->pw_gid : static_cast<gid_t>(setup.uid.value_or(0));
  std::fflush(stdout);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {  // only async-signal-safe calls from here to execve
    if (::dup2(out_fd, STDOUT_FILENO) < 0 || ::dup2(err_fd, STDERR_FILENO) < 0) ::_exit(126);
    if (setup.max_file_bytes) {
      const rlimit limit{*setup.max_file_bytes, *setup.max_file_bytes};
      ::signal(SIGXFSZ, SIG_IGN);  // stays ignored across execve
      if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) ::_exit(126);
    }
    if (setup.uid && (::setgroups(0, nullptr) != 0 || ::setgid(gid) != 0 || ::setuid(*setup.uid) != 0)) ::_exit(126);
    ::execve(binary, argv.data(), environ);
    ::_exit(127);
  }
  return pid;
}

// Waits for `pid`: its exit code, or 128 + N if signal N killed it.
int wait_for(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) != pid) REQUIRE(errno == EINTR);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Runs bob with `args`, capturing its stdout and stderr through pipes (which no file size limit
// touches).
Run run_bob(const std::vector<std::string>& args, const ChildSetup& setup = {}) {
  int out[2], err[2];
  REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(err, O_CLOEXEC) == 0);
  const pid_t pid = start_bob(args, out[1], err[1], setup);
  ::close(out[1]);
  ::close(err[1]);
  Run run;
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  std::string* texts[2] = {&run.out, &run.err};
  for (int open = 2; open > 0;) {
    REQUIRE((::poll(fds, 2, -1) >= 0 || errno == EINTR));
    for (int k = 0; k < 2; ++k) {
      if (fds[k].fd < 0 || fds[k].revents == 0) continue;
      char buffer[4096];
      const ssize_t got = ::read(fds[k].fd, buffer, sizeof buffer);
      if (got > 0) texts[k]->append(buffer, static_cast<size_t>(got));
      else if (got == 0 || errno != EINTR) ::close(fds[k].fd), fds[k].fd = -1, --open;
    }
  }
  run.status = wait_for(pid);
  REQUIRE_MESSAGE(run.status < 128, "bob was killed by signal " << run.status - 128);
  REQUIRE_MESSAGE(run.status != 126, "the child could not be set up (dup2, setrlimit or setuid failed)");
  return run;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The default record with prompts "ab", "" and "the cat".
std::string write_record(const Folder& folder, const std::string& name = "in.rec") {
  const std::string path = folder / name;
  io::write_file_atomic(path, io::encode_record(io::make_record(bob::default_corpus, 0, {"ab", "", "the cat"})));
  return path;
}

std::string train(const std::string& record, const std::string& checkpoint, const char* mode) {
  const Run run = run_bob({"train", "--input", record, "--checkpoint", checkpoint, mode});
  REQUIRE_MESSAGE(run.status == 0, run.err);
  return io::read_file(checkpoint);
}

// bob refuses: exit 2 and `message` on stderr.
void check_refusal(const Run& run, const std::string& message) {
  CHECK(run.status == 2);
  CHECK_MESSAGE(contains(run.err, "bob: " + message), "stderr: " << run.err);
}

}  // namespace

TEST_CASE("fixture writes the record of 257 corpus bytes and the prompts") {
  Folder folder;
  Run run = run_bob({"fixture", "--out", folder / "default.rec"});
  REQUIRE_MESSAGE(run.status == 0, run.err);
  CHECK(io::read_file(folder / "default.rec") == io::encode_record(io::make_record(bob::default_corpus, 0, {})));

  io::write_file_atomic(folder / "corpus.txt", "0123456789" + std::string(300, 'z'));
  run = run_bob({"fixture", "--corpus", folder / "corpus.txt", "--offset", "3", "--prompt", "hi", "--prompt", "",
             "--prompt", "x", "--out", folder / "custom.rec"});
  REQUIRE_MESSAGE(run.status == 0, run.err);
  const io::BobRecord record = io::decode_record(io::read_file(folder / "custom.rec"), "custom.rec");
  CHECK(record.x[0] == '3');
  CHECK(record.y[0] == '4');
  CHECK(record.prompt_last == std::array<uint32_t, 3>{'i', io::bob_empty_prompt, 'x'});
  CHECK(contains(run.out, "prompt 2: empty"));
}

TEST_CASE("fixture refuses a short corpus and a fourth prompt, writing nothing") {
  Folder folder;
  io::write_file_atomic(folder / "short.txt", std::string(300, 'a'));
  check_refusal(run_bob({"fixture", "--corpus", folder / "short.txt", "--offset", "44", "--out", folder / "r.rec"}),
                "[make_record] the corpus is 300 bytes, but 257 consecutive bytes from offset 44 need 301");
  check_refusal(run_bob({"fixture", "--prompt", "a", "--prompt", "b", "--prompt", "c", "--prompt", "d", "--out",
                     folder / "r.rec"}),
                "[make_record] 4 prompts given; a bob record holds at most 3");
  check_refusal(run_bob({"fixture", "--corpus", folder / "missing.txt", "--out", folder / "r.rec"}),
                "cannot read " + folder / "missing.txt" + ": No such file or directory");
  CHECK_FALSE(io::file_exists(folder / "r.rec"));
}

TEST_CASE("train: 10 updates per invocation, each loss printed, the step in the checkpoint") {
  Folder folder;
  const std::string record = write_record(folder), checkpoint = folder / "bob.ckpt";
  Run run = run_bob({"train", "--input", record, "--checkpoint", checkpoint, "--fresh"});
  REQUIRE_MESSAGE(run.status == 0, run.err);
  CHECK(contains(run.out, "fresh start from bob-seed-v1 (step 0)"));
  CHECK(contains(run.out, "update   1  loss "));
  CHECK(contains(run.out, "update  10  loss "));
  CHECK_FALSE(contains(run.out, "update  11"));
  CHECK(contains(run.out, "loss before "));
  CHECK(contains(run.out, "(step 0 -> 10;"));
  CHECK(io::read(checkpoint, io::bob_checkpoint_identity()).step == 10);

  run = run_bob({"train", "--input", record, "--checkpoint", checkpoint, "--resume"});
  REQUIRE_MESSAGE(run.status == 0, run.err);
  CHECK(contains(run.out, "resuming " + checkpoint + " at step 10"));
  CHECK(contains(run.out, "update  20  loss "));
  CHECK(io::read(checkpoint, io::bob_checkpoint_identity()).step == 20);
}

TEST_CASE("fresh-process resume: a fresh invocation and two resumes equal 30 updates in one process, byte for byte") {
  Folder folder;
  const std::string record = write_record(folder), checkpoint = folder / "bob.ckpt";
  train(record, checkpoint, "--fresh");
  train(record, checkpoint, "--resume");
  const std::string resumed = train(record, checkpoint, "--resume");

  bob::Model model(io::decode_record(io::read_file(record), record), Device::cpu());
  for (int k = 0; k < 30; ++k) model.update();
  const io::Checkpoint state = model.state();
  const std::string one_process = io::encode(io::bob_checkpoint_identity(), state.step, state.planes);
  CHECK(bob::describe_difference(resumed, one_process, "three processes", "one process") == "");

  const Run verify = run_bob({"verify-resume", "--input", record, "--invocations", "3"});
  CHECK(verify.status == 0);
  CHECK_MESSAGE(contains(verify.out, "identical: 3 invocations and one process give the same checkpoint, byte for byte"),
                verify.out);
}

TEST_CASE("--fresh refuses to replace a checkpoint unless --force; --resume refuses to start without one") {
  Folder folder;
  const std::string record = write_record(folder), checkpoint = folder / "bob.ckpt";
  const std::string before = train(record, checkpoint, "--fresh");
  const std::string resumed = train(record, checkpoint, "--resume");
  check_refusal(run_bob({"train", "--input", record, "--checkpoint", checkpoint, "--fresh"}),
                "checkpoint " + checkpoint +
                    " already exists and --fresh would replace it; pass --force to start over, or --resume to "
                    "continue from it");
  CHECK(io::read_file(checkpoint) == resumed);
  const Run forced = run_bob({"train", "--input", record, "--checkpoint", checkpoint, "--fresh", "--force"});
  CHECK(forced.status == 0);
  CHECK(io::read_file(checkpoint) == before);  // a fresh start again: step 10

  check_refusal(run_bob({"train", "--input", record, "--checkpoint", folder / "none.ckpt", "--resume"}),
                "--resume needs a checkpoint, but " + folder / "none.ckpt" + " does not exist (start one with --fresh)");
  CHECK_FALSE(io::file_exists(folder / "none.ckpt"));
  check_refusal(run_bob({"train", "--input", record, "--checkpoint", checkpoint}),
                "give exactly one of --fresh (start from bob-seed-v1) and --resume (continue from the checkpoint)");
  CHECK(run_bob({"train", "--input", record, "--checkpoint", checkpoint, "--fresh", "--resume"}).status == 2);
  CHECK(run_bob({"train", "--input", record, "--checkpoint", checkpoint, "--resume", "--force"}).status == 2);
  CHECK(io::read_file(checkpoint) == before);
}

TEST_CASE("a checkpoint of any other program is refused by name, both values shown, the file unchanged") {
  Folder folder;
  const std::string record = write_record(folder);
  const io::EnvelopeIdentity bob_identity = io::bob_checkpoint_identity();
  const std::string learner_bob = "next-byte-cross-entropy-mean|adamw-decoupled|lr=0.1 beta1=0.9 beta2=0.95 eps=1e-08 wd=0.01";

  struct Case {
    const char* name;
    void (*change)(io::EnvelopeIdentity&);
    std::string why;
  };
  const std::vector<Case> cases = {
      {"schema", [](io::EnvelopeIdentity& id) { id.schema = "bob-raw-pmv-f32-v2|parameter-order:p-then-m-then-v|payload=786432"; },
       "schema identity differs: file has bob-raw-pmv-f32-v2|parameter-order:p-then-m-then-v|payload=786432, this "
       "program expects bob-raw-pmv-f32-v1|parameter-order:p-then-m-then-v|payload=786432"},
      {"learner",
       [](io::EnvelopeIdentity& id) {
         id.learner.resize(id.learner.size() - 20);
         for (const float h : {0.2f, 0.9f, 0.95f, 1e-8f, 0.01f}) io::append_f32(id.learner, h);
       },
       "learner identity differs: file has next-byte-cross-entropy-mean|adamw-decoupled|lr=0.2 beta1=0.9 beta2=0.95 "
       "eps=1e-08 wd=0.01, this program expects " + learner_bob},
      {"data", [](io::EnvelopeIdentity& id) { id.data = "raw-byte-sequence|vocabulary=256|prompts=4|record=1568"; },
       "data identity differs: file has raw-byte-sequence|vocabulary=256|prompts=4|record=1568, this program expects "
       "raw-byte-sequence|vocabulary=256|prompts=3|record=1564"},
      {"seed", [](io::EnvelopeIdentity& id) { id.seed = "bob-seed-v2"; },
       "seed identity differs: file has bob-seed-v2, this program expects bob-seed-v1"},
      {"payload", [](io::EnvelopeIdentity& id) { id.chunk_count = 2, id.payload_bytes = 2 * id.chunk_bytes; },
       "payload bytes differ: file has 524288, this program expects 786432"},
      {"chunk size", [](io::EnvelopeIdentity& id) { id.chunk_count = 2, id.chunk_bytes = id.payload_bytes / 2; },
       "chunk size differs: file has 393216, this program expects 262144"},
      {"updates per invocation", [](io::EnvelopeIdentity& id) { id.updates_per_invocation = 5; },
       "updates per invocation differ: file has 5, this program expects 10"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    io::EnvelopeIdentity identity = bob_identity;
    c.change(identity);
    std::vector<std::vector<float>> planes;
    const size_t plane_values = identity.chunk_bytes / 4;
    for (uint32_t k = 0; k < identity.chunk_count; ++k) planes.emplace_back(plane_values, 0.5f);
    const std::string checkpoint = folder / "other.ckpt", bytes = io::encode(identity, 10, planes);
    io::write_file_atomic(checkpoint, bytes);
    check_refusal(run_bob({"train", "--input", record, "--checkpoint", checkpoint, "--resume", "--predictions",
                       folder / "p.bin"}),
                  "checkpoint " + checkpoint + " refused: " + c.why);
    CHECK(io::read_file(checkpoint) == bytes);
    CHECK_FALSE(io::file_exists(folder / "p.bin"));
    const Run inspected = run_bob({"inspect", checkpoint});
    CHECK(inspected.status == 2);
    CHECK(contains(inspected.out, "verdict: checkpoint " + checkpoint + " refused: " + c.why));
  }
}

TEST_CASE("a damaged checkpoint is refused with its own message, the file unchanged") {
  Folder folder;
  const std::string record = write_record(folder), good = train(record, folder / "good.ckpt", "--fresh");
  struct Case {
    const char* name;
    std::string bytes, why;
  };
  std::string bad_magic = good, bad_format = good, bad_crc = good;
  bad_magic.replace(0, 8, "CKPTENV2");
  bad_format[8] = 2;
  bad_crc[good.size() / 2] ^= 0x10;
  const std::vector<Case> cases = {
      {"magic", bad_magic, "bad magic: the file starts with \"CKPTENV2\", a checkpoint starts with \"CKPTENV1\""},
      {"format", bad_format, "unknown envelope format 2 (this program reads format 1)"},
      {"crc", bad_crc, "bad CRC-32: stored "},
      {"truncated", good.substr(0, good.size() - 1000), "truncated in plane 3 of 3 at offset "},
      {"trailing", good + "abc", "3 trailing bytes after the CRC-32 (the envelope ends at offset 786695, the file is 786698 bytes)"},
      {"empty", "", "truncated in the magic at offset 0: it needs 8 bytes, the file has 0 left (the file is 0 bytes)"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const std::string checkpoint = folder / "damaged.ckpt";
    io::write_file_atomic(checkpoint, c.bytes);
    check_refusal(run_bob({"train", "--input", record, "--checkpoint", checkpoint, "--resume"}),
                  "checkpoint " + checkpoint + " refused: " + c.why);
    CHECK(io::read_file(checkpoint) == c.bytes);
    const Run inspected = run_bob({"inspect", checkpoint});
    CHECK(inspected.status == 2);
    CHECK(contains(inspected.out, "verdict: checkpoint " + checkpoint + " refused: " + c.why));
  }
}

TEST_CASE("each bad input record field is refused, naming the field and its offset; nothing is written") {
  Folder folder;
  const std::string good = io::read_file(write_record(folder));
  auto with_u32 = [&](size_t offset, uint32_t value) {
    std::string bytes = good;
    for (int k = 0; k < 4; ++k) bytes[offset + k] = static_cast<char>((value >> (8 * k)) & 0xff);
    return bytes;
  };
  std::string bad_magic = good, bad_version = good;
  bad_magic[0] = 'X';
  bad_version[8] = 2;
  struct Case {
    const char* name;
    std::string bytes, why;
  };
  const std::vector<Case> cases = {
      {"size", good.substr(0, 1563), "it is 1563 bytes, a bob input record is exactly 1564"},
      {"magic", bad_magic, "bad magic at offset 0: \"XOBINPUT\", expected \"BOBINPUT\""},
      {"version", bad_version, "unknown version 2 at offset 8 (this program reads version 1)"},
      {"target", with_u32(528 + 4 * 5, 0x41),
       "target 5 at offset 548 is 0x41 but pair 5 at offset 27 says 0x" + [&] {
         char hex[8];
         std::snprintf(hex, sizeof hex, "%02x", static_cast<unsigned char>(good[27]));
         return std::string(hex);
       }()},
      {"prompt", with_u32(1552 + 4, 256), "prompt 1 at offset 1556 is 0x100: above 255 and not the empty-prompt marker 0xffffffff"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const std::string record = folder / "bad.rec";
    io::write_file_atomic(record, c.bytes);
    check_refusal(run_bob({"train", "--input", record, "--checkpoint", folder / "new.ckpt", "--fresh"}),
                  "input record " + record + " refused: " + c.why);
    CHECK_FALSE(io::file_exists(folder / "new.ckpt"));
  }
}

TEST_CASE("predictions: 8 bytes a prompt; an empty prompt gives token 0, validity 0") {
  Folder folder;
  const std::string record = write_record(folder), checkpoint = folder / "bob.ckpt", predictions = folder / "p.bin";
  const Run run = run_bob({"train", "--input", record, "--checkpoint", checkpoint, "--fresh", "--predictions", predictions});
  REQUIRE_MESSAGE(run.status == 0, run.err);
  const io::Checkpoint state = io::read(checkpoint, io::bob_checkpoint_identity());
  const io::BobRecord r = io::decode_record(io::read_file(record), record);
  const bob::Predictions expected = bob::predict(state.planes[0], r);
  const std::string bytes = io::read_file(predictions);
  CHECK(bytes.size() == 24);
  CHECK(bytes == io::encode_predictions(expected));
  CHECK(bytes.substr(8, 8) == std::string(8, '\0'));  // prompt 2 is empty
  CHECK(io::load_u32(bytes, 4) == 1);                 // prompts 1 and 3 predict
  CHECK(io::load_u32(bytes, 20) == 1);
  CHECK(contains(run.out, "prompt 2, empty: token 0, validity 0"));
  CHECK(contains(run.out, "prompt 1, last byte 'b' (0x62): token "));
}

TEST_CASE("--overwrite-bug gives another checkpoint than the default") {
  Folder folder;
  const std::string record = write_record(folder);
  const std::string right = train(record, folder / "right.ckpt", "--fresh");
  const Run run = run_bob({"train", "--input", record, "--checkpoint", folder / "bug.ckpt", "--fresh", "--overwrite-bug"});
  REQUIRE_MESSAGE(run.status == 0, run.err);
  CHECK(contains(run.out, "backward in the overwrite-bug mode"));
  const std::string bug = io::read_file(folder / "bug.ckpt");
  CHECK(contains(bob::describe_difference(bug, right, "bug", "right"), "in the plane P"));
}

TEST_CASE("inspect shows the identities, the step, plane statistics and the CRC verdict") {
  Folder folder;
  const std::string checkpoint = folder / "bob.ckpt";
  train(write_record(folder), checkpoint, "--fresh");
  const Run run = run_bob({"inspect", checkpoint});
  CHECK(run.status == 0);
  CHECK(contains(run.out, "schema identity         bob-raw-pmv-f32-v1|parameter-order:p-then-m-then-v|payload=786432  (as bob expects)"));
  CHECK(contains(run.out, "lr=0.1 beta1=0.9 beta2=0.95 eps=1e-08 wd=0.01  (as bob expects)"));
  CHECK(contains(run.out, "step                    10  (updates made so far)"));
  CHECK(contains(run.out, "plane P                 65536 values: min "));
  CHECK(contains(run.out, ": ok"));
  CHECK(contains(run.out, "verdict: bob can resume from it (step 10)"));
  check_refusal(run_bob({"inspect", folder / "none.ckpt"}), "cannot read " + folder / "none.ckpt");
}

TEST_CASE("a device that is not there is refused before anything is written") {
  Folder folder;
  const std::string record = write_record(folder);
  check_refusal(run_bob({"train", "--input", record, "--checkpoint", folder / "x.ckpt", "--fresh", "--device", "tpu"}),
                "[device] unknown device 'tpu': expected cpu, cuda or cuda:N");
#if !TAPEGRAD_WITH_CUDA
  const Run run = run_bob({"train", "--input", record, "--checkpoint", folder / "x.ckpt", "--fresh", "--device", "cuda"});
  CHECK(run.status == 2);
  CHECK(contains(run.err, "without CUDA"));
#endif
  CHECK_FALSE(io::file_exists(folder / "x.ckpt"));
}

TEST_CASE("TAPEGRAD_CPU_PATH that names no path, or one this CPU lacks, is refused by name; nothing is written") {
  Folder folder;
  const std::string record = write_record(folder);
  const char* set = std::getenv("TAPEGRAD_CPU_PATH");  // the suite may run with a path forced
  const std::optional<std::string> before = set ? std::optional<std::string>(set) : std::nullopt;
  const std::string best = cpu::simd::name(cpu::simd::best());
  const std::vector<std::string> train_args = {"train", "--input", record, "--checkpoint", folder / "x.ckpt", "--fresh"};
  ::setenv("TAPEGRAD_CPU_PATH", "avx1024", 1);
  check_refusal(run_bob(train_args), "[cpu] TAPEGRAD_CPU_PATH must be scalar, avx2 or avx512, got \"avx1024\"; unset it "
                                     "to take the best path this CPU has (" + best + ")");
  for (cpu::simd::Path p : cpu::simd::all_paths) {
    if (cpu::simd::supported(p)) continue;
    ::setenv("TAPEGRAD_CPU_PATH", cpu::simd::name(p), 1);
    check_refusal(run_bob(train_args), std::string("[cpu] TAPEGRAD_CPU_PATH=") + cpu::simd::name(p) +
                                           " asks for a path this machine cannot run: " + cpu::simd::missing(p) +
                                           "; unset it to take the best one here (" + best + ")");
  }
  if (before) ::setenv("TAPEGRAD_CPU_PATH", before->c_str(), 1);
  else ::unsetenv("TAPEGRAD_CPU_PATH");
  CHECK_FALSE(io::file_exists(folder / "x.ckpt"));
}

TEST_CASE("bob without arguments runs the main job: a fresh invocation, two resumes, the loss falling") {
  const Run run = run_bob({});
  CHECK_MESSAGE(run.status == 0, run.err);
  CHECK(contains(run.out, "--fresh"));
  CHECK(contains(run.out, "resuming "));
  CHECK(contains(run.out, "update  30  loss "));
  CHECK(contains(run.out, "the loss fell from "));
  CHECK(contains(run.out, "prompt 3, empty: token 0, validity 0"));
}

// ---- locking and failures (docs/bob.md, "Locking and failures")

namespace {

// Every file in `folder` (not below it) with its bytes: "nothing changed on disk" is this map unchanged.
std::map<std::string, std::string> snapshot(const std::string& folder) {
  std::map<std::string, std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(folder))
    files[entry.path().filename().string()] = entry.is_regular_file() ? io::read_file(entry.path().string()) : "(not a file)";
  return files;
}

// The names in `folder` that start with `prefix` (".bob.ckpt.tmp-": the atomic write's temporary files).
std::vector<std::string> names_starting(const std::string& folder, const std::string& prefix) {
  std::vector<std::string> names;
  for (const auto& [name, bytes] : snapshot(folder))
    if (name.starts_with(prefix)) names.push_back(name);
  return names;
}

// Writes past `bytes` fail with EFBIG ("File too large"), as they would with ENOSPC on a full disk.
ChildSetup file_size_limit(rlim_t bytes) {
  ChildSetup setup;
  setup.max_file_bytes = bytes;
  return setup;
}

std::vector<std::string> resume_args(const std::string& record, const std::string& checkpoint) {
  return {"train", "--input", record, "--checkpoint", checkpoint, "--resume"};
}

// Under root, permissions do not stop writes: such a test runs bob as nobody instead. Returns the
// setup, or nothing (after a SKIP line saying why) when that cannot be done here.
std::optional<ChildSetup> unprivileged() {
  if (::geteuid() != 0) return ChildSetup{};
  const passwd* nobody = ::getpwnam("nobody");
  if (nobody == nullptr) {
    std::printf("SKIP read-only folder cases: running as root and there is no user nobody to run bob as\n");
    return std::nullopt;
  }
  ChildSetup setup;
  setup.uid = nobody->pw_uid;
  const Run probe = run_bob({"--help"}, setup);
  if (probe.status != 0) {
    std::printf("SKIP read-only folder cases: running as root, and bob cannot run as nobody here (exit %d)\n",
                probe.status);
    return std::nullopt;
  }
  return setup;
}

}  // namespace

TEST_CASE("io::FileLock: one holder at a time, its pid in the lock file, a dead holder's file taken over") {
  Folder folder;
  const std::string path = folder / "x.lock", pid = std::to_string(::getpid());
  {
    io::FileLock lock(path);
    CHECK(io::read_file(path) == pid + "\n");
    // flock is per open file: a second FileLock in this process conflicts as another process would
    CHECK_THROWS_WITH_AS(io::FileLock{path}, ("the lock file " + path + " is held by pid " + pid).c_str(), io::LockHeld);
    try {
      io::FileLock again(path);
    } catch (const io::LockHeld& held) {
      CHECK(held.holder_pid == ::getpid());
      CHECK(held.lock_path == path);
    }
  }
  CHECK_FALSE(io::file_exists(path));  // the holder removes it before letting go

  io::write_file_atomic(path, "999999999\n");  // left by a holder killed with its lock held
  {
    io::FileLock lock(path);
    CHECK(io::read_file(path) == pid + "\n");
  }
  CHECK_FALSE(io::file_exists(path));
  CHECK_THROWS_WITH_AS(io::FileLock{folder / "none/x.lock"},
                       ("cannot open the lock file " + folder / "none/x.lock" + ": No such file or directory").c_str(),
                       Error);

  CHECK(io::lock_path_for(folder / "a.ckpt") == folder / "a.ckpt.lock");
  io::write_file_atomic(folder / "target.ckpt", "x");
  std::filesystem::create_symlink(folder / "target.ckpt", folder / "link.ckpt");
  CHECK(io::lock_path_for(folder / "link.ckpt") ==
        std::filesystem::canonical(folder / "target.ckpt").string() + ".lock");
}

TEST_CASE("a second writer of a locked checkpoint is refused by name, exit 2, nothing written") {
  Folder folder;
  const std::string record = write_record(folder), checkpoint = folder / "bob.ckpt";
  train(record, checkpoint, "--fresh");
  {
    const std::map<std::string, std::string> before = snapshot(folder.path);
    io::FileLock held(io::lock_path_for(checkpoint));  // this process is the other writer
    const std::string in_use = "checkpoint " + checkpoint + " is in use by pid " + std::to_string(::getpid()) +
                               ": it holds the lock file " + checkpoint + ".lock; nothing was written";
    std::vector<std::string> args = resume_args(record, checkpoint);
    args.insert(args.end(), {"--predictions", folder / "p.bin"});
    check_refusal(run_bob(args), in_use);
    check_refusal(run_bob({"train", "--input", record, "--checkpoint", checkpoint, "--fresh", "--force"}), in_use);
    std::map<std::string, std::string> after = snapshot(folder.path);
    CHECK(after.erase("bob.ckpt.lock") == 1);  // ours
    CHECK(after == before);                    // the checkpoint's bytes, no predictions, no temporary file
  }
  train(record, checkpoint, "--resume");
  CHECK(io::read(checkpoint, io::bob_checkpoint_identity()).step == 20);
  CHECK_FALSE(io::file_exists(checkpoint + ".lock"));  // removed by the run that held it
}

TEST_CASE("concurrent bob train --resume on one checkpoint: each run's 10 updates land, or it is refused by name") {
  Folder folder;
  const std::string record = write_record(folder), checkpoint = folder / "bob.ckpt";
  train(record, checkpoint, "--fresh");
  constexpr int runs = 4;
  std::vector<pid_t> pids;
  for (int k = 0; k < runs; ++k) {
    const int out = ::open((folder / ("out" + std::to_string(k))).c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    const int err = ::open((folder / ("err" + std::to_string(k))).c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    pids.push_back(start_bob(resume_args(record, checkpoint), out, err));
    ::close(out);
    ::close(err);
  }
  int done = 0;
  for (int k = 0; k < runs; ++k) {
    const int status = wait_for(pids[k]);
    const std::string err = io::read_file(folder / ("err" + std::to_string(k)));
    CAPTURE(err);
    if (status == 0) ++done;
    else {
      CHECK(status == 2);
      // "by pid N", or "by another process" if it lost the race before its holder wrote the pid
      CHECK(contains(err, "bob: checkpoint " + checkpoint + " is in use by "));
      CHECK(contains(err, ": it holds the lock file " + checkpoint + ".lock; nothing was written"));
    }
  }
  CHECK(done >= 1);  // whoever took the lock first
  MESSAGE(done << " of " << runs << " concurrent runs trained, the others were refused");
  // No update lost: the checkpoint is 10 + 10 * done updates from the seed, byte for byte.
  bob::Model model(io::decode_record(io::read_file(record), record), Device::cpu());
  for (int k = 0; k < 10 * (1 + done); ++k) model.update();
  const io::Checkpoint state = model.state();
  CHECK(bob::describe_difference(io::read_file(checkpoint), io::encode(io::bob_checkpoint_identity(), state.step, state.planes),
                                 "after the concurrent runs", "in one process") == "");
  CHECK_FALSE(io::file_exists(checkpoint + ".lock"));
}

TEST_CASE("an output in a read-only or missing folder is refused before training; nothing changes") {
  Folder folder;
  const std::string writable = folder / "w", read_only = folder / "ro";
  std::filesystem::create_directories(writable);
  std::filesystem::create_directories(read_only);
  const std::string record = write_record(folder), checkpoint = writable + "/bob.ckpt";
  train(record, checkpoint, "--fresh");
  train(record, read_only + "/bob.ckpt", "--fresh");
  check_refusal(run_bob({"train", "--input", record, "--checkpoint", checkpoint, "--resume", "--predictions",
                         folder / "none/p.bin"}),
                "cannot write predictions " + folder / "none/p.bin" + ": its folder " + folder / "none" +
                    " does not exist; nothing was written");
  CHECK(io::read(checkpoint, io::bob_checkpoint_identity()).step == 10);

  const std::optional<ChildSetup> setup = unprivileged();
  if (!setup) return;
  std::filesystem::permissions(folder.path, std::filesystem::perms(0755));
  std::filesystem::permissions(writable, std::filesystem::perms(0777));
  std::filesystem::permissions(read_only, std::filesystem::perms(0555));
  const std::map<std::string, std::string> before_w = snapshot(writable), before_ro = snapshot(read_only);
  const std::string not_writable = ": its folder " + read_only + " is not writable (Permission denied); nothing was written";
  check_refusal(run_bob(resume_args(record, read_only + "/bob.ckpt"), *setup),
                "cannot write checkpoint " + read_only + "/bob.ckpt" + not_writable);
  std::vector<std::string> args = resume_args(record, checkpoint);
  args.insert(args.end(), {"--predictions", read_only + "/p.bin"});
  check_refusal(run_bob(args, *setup), "cannot write predictions " + read_only + "/p.bin" + not_writable);
  CHECK(snapshot(writable) == before_w);  // the checkpoint did not move 10 steps
  CHECK(snapshot(read_only) == before_ro);
  const Run run = run_bob(resume_args(record, checkpoint), *setup);  // the same user can train where it may write
  CHECK_MESSAGE(run.status == 0, run.err);
  std::filesystem::permissions(read_only, std::filesystem::perms(0755));
}

TEST_CASE("a full disk: /dev/full is refused as an output; a write that fails puts the earlier ones back") {
  Folder folder;
  const std::string record = write_record(folder), checkpoint = folder / "bob.ckpt", predictions = folder / "p.bin";
  train(record, checkpoint, "--fresh");
  std::map<std::string, std::string> before = snapshot(folder.path);
  std::vector<std::string> args = resume_args(record, checkpoint);
  args.insert(args.end(), {"--predictions", "/dev/full"});
  // An atomic write renames a new file over its target: over /dev/full it would replace the device
  // (as root), never meet ENOSPC. So bob refuses any target that is not a regular file.
  check_refusal(run_bob(args), "predictions /dev/full is not a regular file, and bob replaces only regular files; "
                               "nothing was written");
  struct stat info {};
  CHECK((::stat("/dev/full", &info) == 0 && S_ISCHR(info.st_mode)));
  CHECK(snapshot(folder.path) == before);

  // A write that fails on the way (here the file size limit, EFBIG, as ENOSPC would): the predictions
  // (24 bytes) are written, the checkpoint (786,695) is not, and the predictions are put back.
  args.back() = predictions;
  const ChildSetup limited = file_size_limit(4096);
  check_refusal(run_bob(args, limited), "cannot write " + checkpoint + ": cannot write the temporary file ");
  const Run failed = run_bob(args, limited);
  CHECK(contains(failed.err, ": File too large; nothing was written (" + predictions +
                                 ", written before the checkpoint, put back as it was)"));
  CHECK(snapshot(folder.path) == before);  // no predictions, the old checkpoint, no temporary file, no lock file
  io::write_file_atomic(predictions, "old predictions");
  before = snapshot(folder.path);
  CHECK(run_bob(args, limited).status == 2);
  CHECK(snapshot(folder.path) == before);  // the old predictions' bytes back

  // The predictions themselves cannot be written: nothing was.
  check_refusal(run_bob(args, file_size_limit(16)),
                "cannot write " + predictions + ": cannot write the temporary file ");
  CHECK(contains(run_bob(args, file_size_limit(16)).err, ": File too large; nothing was written\n"));
  CHECK(snapshot(folder.path) == before);
}

TEST_CASE("kill -9 at a random moment, 40 times: the checkpoint is the old or the new one, byte for byte") {
  Folder folder, reference;
  const std::string record = write_record(folder), checkpoint = folder / "bob.ckpt";
  // chain[k]: the checkpoint after k + 1 uninterrupted invocations
  std::vector<std::string> chain = {train(record, checkpoint, "--fresh")};
  auto next_in_chain = [&] {
    io::write_file_atomic(reference / "bob.ckpt", chain.back());
    chain.push_back(train(record, reference / "bob.ckpt", "--resume"));
  };
  const auto began = std::chrono::steady_clock::now();
  next_in_chain();
  const auto one_run = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - began);
  const unsigned seed = std::random_device{}();
  CAPTURE(seed);
  std::mt19937 random(seed);
  std::uniform_int_distribution<long> delay(0, one_run.count() * 3 / 2);  // before, during and after the write
  const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  size_t current = 0;
  int killed = 0;
  for (int attempt = 0; attempt < 40; ++attempt) {
    CAPTURE(attempt);
    const pid_t pid = start_bob(resume_args(record, checkpoint), null, null);
    std::this_thread::sleep_for(std::chrono::microseconds(delay(random)));
    ::kill(pid, SIGKILL);
    const int status = wait_for(pid);
    CHECK((status == 0 || status == 128 + SIGKILL));
    if (status != 0) ++killed;
    if (current + 1 == chain.size()) next_in_chain();
    const std::string now = io::read_file(checkpoint);
    if (now == chain[current + 1]) ++current;
    else CHECK_MESSAGE(now == chain[current], "the checkpoint is neither the old nor the new one");
  }
  ::close(null);
  MESSAGE(killed << " of 40 runs killed, leaving " << names_starting(folder.path, ".bob.ckpt.tmp-").size()
                 << " temporary files; the checkpoint went from step 10 to " << 10 * (current + 1));
  // The next start after all that: trains, writes the next checkpoint, leaves no lock file.
  if (current + 1 == chain.size()) next_in_chain();
  CHECK(train(record, checkpoint, "--resume") == chain[current + 1]);
  CHECK_FALSE(io::file_exists(checkpoint + ".lock"));
  // and the killed writers' temporary files are gone: the next write to the checkpoint removes those
  // of dead pids (src/io/atomic_file.hpp)
  CHECK_MESSAGE(names_starting(folder.path, ".bob.ckpt.tmp-").empty(),
                "temporary files of killed writers survive the next start");
}
