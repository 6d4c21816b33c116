// Tests for the bob program end to end: each test runs the built binary (BOB_BINARY) as a child
// process and checks its exit code, its message and the files it leaves.
//
// Rule: every refusal is asserted by name (the message), by exit code 2, and by the files it must
// not touch: a refused checkpoint keeps its bytes, no checkpoint or predictions appear where none
// should. Checkpoints to refuse are crafted with io::encode from an identity with one field
// changed, or by damaging a good file's bytes.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "bob_model.hpp"
#include "tapegrad/config.hpp"
#include "default_corpus.hpp"
#include "tapegrad/io/atomic_file.hpp"

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

// Runs bob with `args`, capturing its stdout and stderr.
Run run_bob(const std::vector<std::string>& args) {
  const char* binary = std::getenv("BOB_BINARY");
  REQUIRE_MESSAGE(binary != nullptr, "BOB_BINARY is not set; run the tests with meson test");
  Folder logs;
  const std::string out = logs / "out", err = logs / "err";
  std::vector<char*> argv{const_cast<char*>(binary)};
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = 0;
  REQUIRE(::posix_spawn(&pid, binary, &actions, nullptr, argv.data(), environ) == 0);
  posix_spawn_file_actions_destroy(&actions);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE_MESSAGE(WIFEXITED(status), "bob was killed by signal " << WTERMSIG(status));
  return {WEXITSTATUS(status), io::read_file(out), io::read_file(err)};
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

TEST_CASE("bob without arguments runs the main job: a fresh invocation, two resumes, the loss falling") {
  const Run run = run_bob({});
  CHECK_MESSAGE(run.status == 0, run.err);
  CHECK(contains(run.out, "--fresh"));
  CHECK(contains(run.out, "resuming "));
  CHECK(contains(run.out, "update  30  loss "));
  CHECK(contains(run.out, "the loss fell from "));
  CHECK(contains(run.out, "prompt 3, empty: token 0, validity 0"));
}
