// read_file's refusals (not a regular file, above the caller's bound) and the atomic write's rules
// for symbolic links (those the kernel would not follow refused), special files (refused), and the
// temporary files of dead writers; check_output's refusals in advance; file_exists's errors
// (src/io/atomic_file.hpp).
#include <doctest/doctest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <set>
#include <string>

#include "messages.hpp"
#include "tapegrad/io/atomic_file.hpp"
#include "tapegrad/io/file_lock.hpp"
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

namespace {

// A Unix socket bound at `path` (a special file anyone may make); closed at once, the node stays.
void make_socket(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  REQUIRE(path.size() < sizeof address.sun_path);
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  REQUIRE(::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0);
  ::close(fd);
}

fs::file_type type_of(const std::string& path) { return fs::symlink_status(path).type(); }

}  // namespace

TEST_CASE("write_file_atomic and check_output refuse what is not a regular file, and leave it as it was") {
  TempDir dir;
  const std::string fifo = dir.file("pipe"), socket = dir.file("socket"), folder = dir.file("folder");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  make_socket(socket);
  fs::create_directory(folder);
  fs::create_symlink("pipe", dir.file("to-pipe"));
  for (const auto& [path, what] :
       {std::pair{fifo, "a FIFO"}, std::pair{socket, "a socket"}, std::pair{folder, "a directory"}}) {
    CAPTURE(path);
    const std::string want = "cannot write " + path + ": it is not a regular file (" + what +
                             "); only regular files are replaced, and nothing was written";
    CHECK(message_of([&] { io::write_file_atomic(path, "x"); }) == want);
    CHECK(message_of([&] { io::check_output(path); }) == want);
  }
  CHECK(message_of([&] { io::write_file_atomic(dir.file("to-pipe"), "x"); }) ==
        "cannot write " + dir.file("to-pipe") + ": its target " + dir.file("pipe") +
            " is not a regular file (a FIFO); only regular files are replaced, and nothing was written");
  CHECK(type_of(fifo) == fs::file_type::fifo);
  CHECK(type_of(socket) == fs::file_type::socket);
  CHECK(type_of(dir.file("to-pipe")) == fs::file_type::symlink);
  CHECK(fs::is_empty(folder));
  CHECK(dir.entries() == std::set<std::string>{"folder", "pipe", "socket", "to-pipe"});  // no temporary file
}

TEST_CASE("check_output names what would make the write fail, before anything is written") {
  TempDir dir;
  CHECK_NOTHROW(io::check_output(dir.file("new.bin")));
  io::write_file_atomic(dir.file("old.bin"), "old");
  CHECK_NOTHROW(io::check_output(dir.file("old.bin")));
  CHECK(message_of([&] { io::check_output(dir.file("none/x.bin")); }) ==
        "cannot write " + dir.file("none/x.bin") + ": its folder " + dir.file("none") + " does not exist");
  CHECK(message_of([&] { io::check_output(dir.file("old.bin/x.bin")); }) ==
        "cannot write " + dir.file("old.bin/x.bin") + ": Not a directory");
  const std::string long_name(240, 'n');  // fits NAME_MAX (255), but not with the temporary suffix
  CHECK(message_of([&] { io::check_output(dir.file(long_name)); }) ==
        "cannot write " + dir.file(long_name) + ": its name is 240 bytes; the temporary file beside it adds up to 34, " +
            "and " + dir.path + " takes names of at most 255 bytes");
  const std::string too_long(300, 'n');
  CHECK(message_of([&] { io::check_output(dir.file(too_long)); }) ==
        "cannot write " + dir.file(too_long) + ": File name too long");
  fs::create_symlink("loop-b", dir.file("loop-a"));
  fs::create_symlink("loop-a", dir.file("loop-b"));
  CHECK(message_of([&] { io::check_output(dir.file("loop-a")); }) ==
        "cannot write " + dir.file("loop-a") + ": more than 40 symbolic links to follow (a loop?)");
  CHECK(message_of([&] { io::check_output(dir.file("loop-a/x")); }) ==
        "cannot write " + dir.file("loop-a/x") + ": Too many levels of symbolic links");
  CHECK(dir.entries() == std::set<std::string>{"old.bin", "loop-a", "loop-b"});
}

TEST_CASE("file_exists: false for nothing there, an error naming the path for what cannot be told") {
  TempDir dir;
  io::write_file_atomic(dir.file("a"), "a");
  CHECK(io::file_exists(dir.file("a")));
  CHECK_FALSE(io::file_exists(dir.file("b")));
  CHECK_FALSE(io::file_exists(dir.file("a/b")));  // a component is not a folder
  fs::create_symlink("loop-b", dir.file("loop-a"));
  fs::create_symlink("loop-a", dir.file("loop-b"));
  CHECK(message_of([&] { io::file_exists(dir.file("loop-a")); }) ==
        "cannot tell whether " + dir.file("loop-a") + " exists: Too many levels of symbolic links");
  const std::string too_long = dir.file(std::string(300, 'n'));
  CHECK(message_of([&] { io::file_exists(too_long); }) == "cannot tell whether " + too_long + " exists: File name too long");
}

// Note [links in sticky folders] in atomic_file.cpp. Planting a link owned by another user takes
// root (lchown); as another user the case is skipped, saying so.
TEST_CASE("a link in a sticky world-writable folder is followed only as the kernel would follow it") {
  if (::geteuid() != 0) {
    MESSAGE("skipped: making a link owned by another user needs root");
    return;
  }
  constexpr uid_t nobody = 65534;
  TempDir dir;
  const std::string precious = dir.file("precious.txt"), shared = dir.file("shared");
  io::write_file_atomic(precious, "precious");
  fs::create_directory(shared);
  REQUIRE(::chmod(shared.c_str(), 01777) == 0);  // as /tmp: sticky, anyone may write
  const std::string planted = shared + "/run.csv";
  fs::create_symlink(precious, planted);
  REQUIRE(::lchown(planted.c_str(), nobody, nobody) == 0);

  const std::string refused = "cannot write " + planted +
                              ": it is a symbolic link owned by uid 65534 in the sticky world-writable folder " +
                              shared + ", neither this user's (uid 0) nor the folder owner's (uid 0): not followed, as " +
                              "the kernel's fs.protected_symlinks would not; nothing was written";
  CHECK(message_of([&] { io::write_file_atomic(planted, "replaced"); }) == refused);
  CHECK(message_of([&] { io::check_output(planted); }) == refused);
  CHECK(message_of([&] { io::lock_path_for(planted); }) == refused);
  fs::create_symlink(planted, dir.file("via.csv"));  // reached through a link of our own: still refused
  CHECK(message_of([&] { io::write_file_atomic(dir.file("via.csv"), "replaced"); }) ==
        "cannot write " + dir.file("via.csv") + ": " + planted + refused.substr(refused.find(" is a symbolic")));
  CHECK(io::read_file(precious) == "precious");
  CHECK(fs::is_symlink(planted));

  // The kernel would follow it: the folder's owner owns the link, ...
  REQUIRE(::chown(shared.c_str(), nobody, nobody) == 0);
  io::write_file_atomic(planted, "by the folder's owner");
  CHECK(io::read_file(precious) == "by the folder's owner");
  // ... the folder is not sticky, ...
  REQUIRE(::chown(shared.c_str(), 0, 0) == 0);
  REQUIRE(::chmod(shared.c_str(), 0777) == 0);
  io::write_file_atomic(planted, "not sticky");
  CHECK(io::read_file(precious) == "not sticky");
  // ... or the link is this user's.
  REQUIRE(::chmod(shared.c_str(), 01777) == 0);
  REQUIRE(::lchown(planted.c_str(), 0, 0) == 0);
  io::write_file_atomic(planted, "ours");
  CHECK(io::read_file(precious) == "ours");
  CHECK(fs::is_symlink(planted));
}
