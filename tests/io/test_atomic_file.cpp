// read_file's refusals (not a regular file, above the caller's bound) and the atomic write's rules
// for symbolic links and for the temporary files of dead writers (src/io/atomic_file.hpp).
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <string>

#include "messages.hpp"
#include "tapegrad/io/atomic_file.hpp"
#include "temp_dir.hpp"

namespace io = tapegrad::io;
namespace fs = std::filesystem;
using tapegrad::testing::message_of;
using tapegrad::testing::TempDir;

namespace {

// A pid that names no live process: a child that has exited and been reaped.
long dead_pid() {
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) ::_exit(0);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  return static_cast<long>(child);
}

std::string temporary_of(const std::string& target, long pid) {
  return "." + target + ".tmp-" + std::to_string(pid) + "-0-000000";
}

}  // namespace

TEST_CASE("read_file refuses what is not a regular file, without blocking") {
  CHECK(message_of([] { io::read_file("/dev/zero"); }) ==
        "cannot read /dev/zero: it is not a regular file (a character device)");
  TempDir dir;
  const std::string fifo = dir.file("pipe");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);  // no writer: a blocking open would wait forever
  CHECK(message_of([&] { io::read_file(fifo); }) == "cannot read " + fifo + ": it is not a regular file (a FIFO)");
  CHECK(message_of([&] { io::read_file(dir.path); }) ==
        "cannot read " + dir.path + ": it is not a regular file (a directory)");
}

TEST_CASE("read_file refuses a file above the caller's bound, before reading it") {
  TempDir dir;
  const std::string path = dir.file("record.bin");
  io::write_file_atomic(path, std::string(1565, 'r'));
  CHECK(message_of([&] { io::read_file(path, 1564); }) ==
        "cannot read " + path + ": it is 1565 bytes, more than the 1564 its reader accepts");
  CHECK(io::read_file(path, 1565).size() == 1565);
  CHECK(io::read_file(path).size() == 1565);  // the default bound: 1 GiB
  CHECK(io::kDefaultMaxReadBytes == size_t{1} << 30);
  io::write_file_atomic(path, "");
  CHECK(io::read_file(path, 0).empty());
}

TEST_CASE("write_file_atomic writes through a symbolic link to its final target") {
  TempDir dir;
  fs::create_directory(dir.file("real"));
  const std::string target = dir.file("real/state.bin");
  io::write_file_atomic(target, "old");
  fs::create_symlink("real/state.bin", dir.file("link.bin"));  // relative: read from the link's folder
  fs::create_symlink(dir.file("link.bin"), dir.file("chain.bin"));  // absolute, to another link

  io::write_file_atomic(dir.file("link.bin"), "new");
  CHECK(fs::is_symlink(dir.file("link.bin")));
  CHECK(io::read_file(target) == "new");
  io::write_file_atomic(dir.file("chain.bin"), "newer");
  CHECK(fs::is_symlink(dir.file("chain.bin")));
  CHECK(fs::is_symlink(dir.file("link.bin")));
  CHECK(io::read_file(target) == "newer");
  CHECK(io::read_file(dir.file("chain.bin")) == "newer");
  CHECK(dir.entries() == std::set<std::string>{"chain.bin", "link.bin", "real"});  // no temporary file anywhere
  CHECK(fs::directory_iterator(dir.file("real"))->path().filename() == "state.bin");

  fs::create_symlink("real/later.bin", dir.file("dangling.bin"));  // a link to nothing yet creates its target
  io::write_file_atomic(dir.file("dangling.bin"), "created");
  CHECK(fs::is_symlink(dir.file("dangling.bin")));
  CHECK(io::read_file(dir.file("real/later.bin")) == "created");

  fs::create_symlink("loop-b", dir.file("loop-a"));
  fs::create_symlink("loop-a", dir.file("loop-b"));
  CHECK(message_of([&] { io::write_file_atomic(dir.file("loop-a"), "x"); }) ==
        "cannot write " + dir.file("loop-a") + ": more than 40 symbolic links to follow (a loop?)");
}

TEST_CASE("write_file_atomic removes its target's temporary files of dead writers, and only those") {
  TempDir dir;
  const long dead = dead_pid();
  const long self = static_cast<long>(::getpid());
  const std::set<std::string> kept = {
      temporary_of("x", self),                                // this process's: it may be mid-write
      temporary_of("other", dead),                            // another target's
      ".x.tmp-" + std::to_string(dead) + "-0",                // not of the temporary form
      ".x.tmp-" + std::to_string(dead) + "-0-000000.bak",     // not of the temporary form
      "x.tmp-" + std::to_string(dead) + "-0-000000",          // no leading dot
  };
  for (const std::string& name : kept) io::write_file_atomic(dir.file(name), "kept");
  io::write_file_atomic(dir.file(temporary_of("x", dead)), "stale");
  io::write_file_atomic(dir.file(temporary_of("x", 1)), "init's");  // pid 1 is alive (or not ours to judge)

  io::write_file_atomic(dir.file("x"), "target");
  std::set<std::string> want = kept;
  want.insert({"x", temporary_of("x", 1)});
  CHECK(dir.entries() == want);
  CHECK(io::read_file(dir.file("x")) == "target");

  // Through a symbolic link: the final target's folder is the one cleaned.
  fs::create_directory(dir.file("sub"));
  io::write_file_atomic(dir.file("sub/" + temporary_of("y", dead)), "stale");
  fs::create_symlink("sub/y", dir.file("y"));
  io::write_file_atomic(dir.file("y"), "through");
  CHECK(fs::directory_iterator(dir.file("sub"))->path().filename() == "y");
  CHECK(io::read_file(dir.file("sub/y")) == "through");
}
