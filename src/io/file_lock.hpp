// An exclusive advisory lock on a lock file, for a read-modify-write of another file by one process at
// a time (bob's checkpoint: read, 10 updates, write).
//
// Rule: the lock lives on a separate lock file, never on the file it guards: an atomic write renames a
// new inode over the target, and a lock on the old inode would guard nothing after the first write.
// The holder writes its pid into the lock file, so a refused process can name it, and removes the
// lock file before it lets go; a holder killed before that leaves the file with its dead pid in it,
// and the kernel releases its lock (flock), so the next process simply takes it over.
#pragma once

#include <string>

#include "tapegrad/tensor/error.hpp"

namespace tapegrad::io {

// Thrown when another process (or another FileLock in this one) holds the lock.
struct LockHeld : Error {
  LockHeld(const std::string& lock_path, long holder_pid);
  std::string lock_path;
  long holder_pid;  // 0 when the holder has not written its pid yet
};

class FileLock {
 public:
  // Takes the lock at `lock_path` without waiting, creating the lock file if needed. Throws LockHeld
  // if someone holds it, tapegrad::Error naming the path and the system's reason if the lock file
  // cannot be created, locked or written.
  explicit FileLock(const std::string& lock_path);
  ~FileLock();  // removes the lock file, then releases the lock
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

// Where the lock of `target` lives: "<target>.lock" next to the file a write of `target` replaces
// (io::write_target: a symbolic link is followed as a write follows it, so two links to one file
// share its lock; one a write would refuse to follow is refused here too, by name).
std::string lock_path_for(const std::string& target);

}  // namespace tapegrad::io
