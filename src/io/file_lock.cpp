// An exclusive advisory lock on a lock file (see file_lock.hpp).
//
// Rule: flock on an O_CLOEXEC descriptor (one per open file description: a child process does not
// inherit it, and a second FileLock in the same process conflicts like another process would). The
// holder unlinks the lock file while it still holds the lock, so a process that opened the old file
// and got its lock afterwards holds the lock of a name that no longer exists; it sees that (the path
// names another inode, or none) and starts again.
#include "tapegrad/io/file_lock.hpp"

#include "tapegrad/io/atomic_file.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace tapegrad::io {
namespace {

std::string reason(int err) { return std::strerror(err); }

std::string held_message(const std::string& lock_path, long pid) {
  return "the lock file " + lock_path + " is held by " +
         (pid > 0 ? "pid " + std::to_string(pid) : std::string("a process that has not written its pid yet"));
}

// The pid written in the lock file open at `fd`, or 0 if none is written (yet).
long holder_pid(int fd) {
  char text[32] = {};
  // The holder truncates the file and then writes its pid: wait a little for it, never long.
  for (int attempt = 0; attempt < 100; ++attempt) {
    const ssize_t got = ::pread(fd, text, sizeof text - 1, 0);
    if (got > 0 && text[got - 1] == '\n') return std::strtol(text, nullptr, 10);
    ::usleep(1000);
  }
  return 0;
}

// Whether `path` still names the file open at `fd`.
bool names(const std::string& path, int fd) {
  struct stat by_path {}, by_fd {};
  return ::stat(path.c_str(), &by_path) == 0 && ::fstat(fd, &by_fd) == 0 && by_path.st_dev == by_fd.st_dev &&
         by_path.st_ino == by_fd.st_ino;
}

}  // namespace

LockHeld::LockHeld(const std::string& path, long pid) : Error(held_message(path, pid)), lock_path(path), holder_pid(pid) {}

FileLock::FileLock(const std::string& lock_path) : path_(lock_path) {
  for (;;) {
    const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
      const int err = errno;
      throw Error("cannot open the lock file " + path_ + ": " + reason(err));
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      if (err == EWOULDBLOCK) {
        const long pid = holder_pid(fd);
        ::close(fd);
        throw LockHeld(path_, pid);
      }
      ::close(fd);
      throw Error("cannot lock the lock file " + path_ + ": " + reason(err));
    }
    if (!names(path_, fd)) {  // its last holder removed it between our open and our flock
      ::close(fd);
      continue;
    }
    fd_ = fd;
    break;
  }
  const std::string pid = std::to_string(static_cast<long>(::getpid())) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    const int err = errno;
    ::unlink(path_.c_str());
    ::close(fd_);
    throw Error("cannot write this process's pid into the lock file " + path_ + ": " + reason(err));
  }
}

FileLock::~FileLock() {
  ::unlink(path_.c_str());  // while still holding it: see the rule at the top
  ::close(fd_);
}

std::string lock_path_for(const std::string& target) { return write_target(target) + ".lock"; }

}  // namespace tapegrad::io
