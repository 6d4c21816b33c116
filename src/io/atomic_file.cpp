// Whole-file reads and atomic whole-file writes (see atomic_file.hpp).
//
// Rule: resolve the target through its symbolic links (following only those the kernel would
// follow), refuse a target that is not a regular file, remove its dead writers' temporary files,
// write to a unique temporary file in the target's folder (O_EXCL, so two writers never share
// one), fsync it, rename it over the target, then fsync the folder so the rename itself is on
// disk. Any failure before the rename removes the temporary file.
#include "tapegrad/io/atomic_file.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <system_error>

#include "tapegrad/tensor/error.hpp"

namespace tapegrad::io {
namespace {

std::string reason(int err) { return std::strerror(err); }

// The folder that holds `path` ("." for a bare file name).
std::string folder_of(const std::string& path) {
  std::string folder = std::filesystem::path(path).parent_path().string();
  return folder.empty() ? "." : folder;
}

// Note [links in sticky folders]
// The kernel follows a symbolic link in a sticky folder that anyone may write to (/tmp) only when
// the link belongs to the follower or to the folder's owner (fs.protected_symlinks, on by default
// on most systems): otherwise another user could plant /tmp/x/run.csv -> /root/private.txt and
// have root's program write there. write_file_atomic resolves links itself (it must rename over
// the final target, never over the link), so the kernel's check never runs: follow_allowed is that
// check, applied at every hop, whatever the sysctl says. A refused link is named with its owner.

// Whether the kernel's fs.protected_symlinks would let this process follow the link at `at`
// (`link` is its lstat). Else throws, naming `path` (what the caller asked for) and the link.
void check_follow(const std::string& path, const std::string& at, const struct stat& link) {
  const std::string folder = folder_of(at);
  struct stat dir {};
  if (::stat(folder.c_str(), &dir) != 0) return;  // the link was just read from it: gone since, the write fails later
  const bool sticky_shared = (dir.st_mode & S_ISVTX) != 0 && (dir.st_mode & S_IWOTH) != 0;
  if (!sticky_shared || link.st_uid == ::geteuid() || link.st_uid == dir.st_uid) return;
  throw Error("cannot write " + path + ": " + (at == path ? std::string("it") : at) +
              " is a symbolic link owned by uid " + std::to_string(link.st_uid) + " in the sticky world-writable folder " +
              folder + ", neither this user's (uid " + std::to_string(::geteuid()) + ") nor the folder owner's (uid " +
              std::to_string(dir.st_uid) + "): not followed, as the kernel's fs.protected_symlinks would not; " +
              "nothing was written");
}

// The file that writing `path` must replace: `path` itself, or the file its chain of symbolic
// links ends at (which may not exist yet). Relative links are read from the link's own folder.
std::string final_target(const std::string& path) {
  constexpr int max_links = 40;  // as the kernel's own limit (ELOOP)
  std::string at = path;
  for (int hop = 0; hop < max_links; ++hop) {
    struct stat info {};
    if (::lstat(at.c_str(), &info) != 0 || !S_ISLNK(info.st_mode)) return at;
    check_follow(path, at, info);
    std::error_code error;
    const std::filesystem::path link = std::filesystem::read_symlink(at, error);
    if (error) throw Error("cannot write " + path + ": cannot read the symbolic link " + at + ": " + error.message());
    at = (std::filesystem::path(at).parent_path() / link).string();  // an absolute link replaces the folder
  }
  throw Error("cannot write " + path + ": more than " + std::to_string(max_links) +
              " symbolic links to follow (a loop?)");
}

// Refuses a target that exists and is not a regular file (the rule for special files).
void check_regular(const std::string& path, const std::string& target) {
  struct stat info {};
  // absent: the write creates it (any other failure to look is the write's to report)
  if (::lstat(target.c_str(), &info) != 0 || S_ISREG(info.st_mode)) return;
  throw Error("cannot write " + path + ": " + (target == path ? std::string("it") : "its target " + target) +
              " is not a regular file (" + file_type_name(info.st_mode) +
              "); only regular files are replaced, and nothing was written");
}

// The pid in `name` if it is exactly ".<file>.tmp-<pid>-<counter>-<random>", else -1.
long temporary_pid(const std::string& name, const std::string& file) {
  const std::string prefix = "." + file + ".tmp-";
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return -1;
  long pid = -1;
  int fields = 0;
  size_t i = prefix.size();
  while (fields < 3) {
    const size_t start = i;
    long value = 0;
    for (; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i)
      if (__builtin_mul_overflow(value, 10L, &value) || __builtin_add_overflow(value, name[i] - '0', &value)) return -1;
    if (i == start || i - start > 19) return -1;
    if (fields == 0) pid = value;
    ++fields;
    if (fields < 3) {
      if (i >= name.size() || name[i] != '-') return -1;
      ++i;
    }
  }
  return i == name.size() && pid > 0 ? pid : -1;
}

// Removes the temporary files that dead writers of `target` left in its folder (the rule in
// atomic_file.hpp). Best effort: what cannot be listed or removed stays, and the write goes on.
void remove_stale_temporaries(const std::string& target) {
  const std::string file = std::filesystem::path(target).filename().string();
  const std::string folder = folder_of(target);
  const long self = static_cast<long>(::getpid());
  std::error_code error;
  for (std::filesystem::directory_iterator it(folder, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    const long pid = temporary_pid(name, file);
    if (pid <= 0 || pid == self || pid > static_cast<long>(INT32_MAX)) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to judge
    ::unlink((std::filesystem::path(folder) / name).c_str());
  }
}

// A temporary name next to the target: ".<name>.tmp-<pid>-<counter>-<random>".
// The most bytes it adds to the target's name: the dot, ".tmp-", a pid and a counter of up to 10
// digits each, two dashes and 6 random digits.
constexpr size_t kTemporarySuffixBytes = 1 + 5 + 10 + 1 + 10 + 1 + 6;
std::string temporary_name(const std::string& path) {
  static std::atomic<unsigned> counter{0};
  static thread_local std::mt19937_64 random{std::random_device{}()};
  const std::filesystem::path target(path);
  char suffix[64];
  std::snprintf(suffix, sizeof suffix, ".tmp-%ld-%u-%06u", static_cast<long>(::getpid()), counter++,
                static_cast<unsigned>(random() % 1000000));
  std::string name = ".";
  name += target.filename().string();
  name += suffix;
  return (target.parent_path() / name).string();
}

// Creates a fresh temporary file next to `path`; returns its descriptor and sets `temp_path`.
int create_temporary(const std::string& path, std::string& temp_path) {
  constexpr int attempts = 100;  // a clash needs the same pid, counter and random number
  for (int attempt = 0; attempt < attempts; ++attempt) {
    temp_path = temporary_name(path);
    const int fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) return fd;
    if (errno == EEXIST) continue;
    const int err = errno;
    std::string message =
        "cannot write " + path + ": cannot create a temporary file in " + folder_of(path) + ": " + reason(err);
    if (err == ENOENT) message += " (does the folder exist?)";
    throw Error(message);
  }
  throw Error("cannot write " + path + ": no unused temporary name after " + std::to_string(attempts) + " attempts");
}

// Writes all of `bytes` to `fd`, resuming after partial writes and interrupts. Returns errno or 0.
int write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t written = ::write(fd, bytes.data(), bytes.size());
    if (written < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    bytes.remove_prefix(static_cast<size_t>(written));
  }
  return 0;
}

// Makes the folder's entries (the rename) durable.
void sync_folder(const std::string& path) {
  const std::string folder = folder_of(path);
  const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw Error("wrote " + path + " but cannot open its folder " + folder + " to sync it: " + reason(err));
  }
  const int synced = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (synced != 0) throw Error("wrote " + path + " but cannot sync its folder " + folder + ": " + reason(err));
}

}  // namespace

void write_file_atomic(const std::string& path, std::string_view bytes) {
  const std::string target = final_target(path);
  check_regular(path, target);
  remove_stale_temporaries(target);
  std::string temp_path;
  const int fd = create_temporary(target, temp_path);
  // Removes the temporary file, then throws "cannot write <path>: <what>: <reason>".
  auto fail = [&](const std::string& what, int err) {
    ::unlink(temp_path.c_str());
    throw Error("cannot write " + path + ": " + what + ": " + reason(err));
  };
  if (const int err = write_all(fd, bytes); err != 0) {
    ::close(fd);
    fail("cannot write the temporary file " + temp_path, err);
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    fail("cannot sync the temporary file " + temp_path, err);
  }
  if (::close(fd) != 0) {
    const int err = errno;
    fail("cannot close the temporary file " + temp_path, err);
  }
  if (std::rename(temp_path.c_str(), target.c_str()) != 0) {
    const int err = errno;
    fail("cannot rename " + temp_path + " over " + (target == path ? std::string("it") : target), err);
  }
  sync_folder(target);
}

std::string write_target(const std::string& path) { return final_target(path); }

void check_output(const std::string& path) {
  const std::string target = final_target(path);
  const std::string named = target == path ? path : path + " (its target " + target + ")";
  struct stat info {};
  if (::lstat(target.c_str(), &info) == 0) {
    check_regular(path, target);
  } else if (const int err = errno; err != ENOENT) {  // a name too long, a folder that cannot be searched, ...
    throw Error("cannot write " + named + ": " + reason(err));
  }
  const std::string folder = folder_of(target);
  struct stat dir {};
  if (::stat(folder.c_str(), &dir) != 0) {
    const int err = errno;
    throw Error("cannot write " + named + ": its folder " + folder +
                (err == ENOENT ? std::string(" does not exist") : ": " + reason(err)));
  }
  if (!S_ISDIR(dir.st_mode)) throw Error("cannot write " + named + ": " + folder + " is not a folder");
  if (::faccessat(AT_FDCWD, folder.c_str(), W_OK | X_OK, AT_EACCESS) != 0) {
    const int err = errno;
    throw Error("cannot write " + named + ": its folder " + folder + " is not writable (" + reason(err) + ")");
  }
  const size_t name_bytes = std::filesystem::path(target).filename().string().size();
  errno = 0;
  const long name_max = ::pathconf(folder.c_str(), _PC_NAME_MAX);
  if (name_max > 0 && name_bytes + kTemporarySuffixBytes > static_cast<size_t>(name_max))
    throw Error("cannot write " + named + ": its name is " + std::to_string(name_bytes) + " bytes; the temporary " +
                "file beside it adds up to " + std::to_string(kTemporarySuffixBytes) + ", and " + folder +
                " takes names of at most " + std::to_string(name_max) + " bytes");
}

const char* file_type_name(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a plain file";
}

std::string read_file(const std::string& path, size_t max_bytes) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; fstat then refuses it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw Error("cannot read " + path + ": " + reason(err));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int err = errno;
    throw Error("cannot read " + path + ": " + reason(err));
  }
  if (!S_ISREG(info.st_mode))
    throw Error("cannot read " + path + ": it is not a regular file (" + file_type_name(info.st_mode) + ")");
  if (info.st_size < 0 || static_cast<uint64_t>(info.st_size) > max_bytes)
    throw Error("cannot read " + path + ": it is " + std::to_string(info.st_size) + " bytes, more than the " +
                std::to_string(max_bytes) + " its reader accepts");
  std::string bytes;
  bytes.reserve(static_cast<size_t>(info.st_size));
  char buffer[1 << 16];
  for (;;) {
    const ssize_t got = ::read(fd, buffer, sizeof buffer);
    if (got < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      throw Error("cannot read " + path + ": " + reason(err));
    }
    if (got == 0) break;
    if (static_cast<size_t>(got) > max_bytes - bytes.size())  // it grew while being read
      throw Error("cannot read " + path + ": it grew past the " + std::to_string(max_bytes) +
                  " bytes its reader accepts while being read");
    bytes.append(buffer, static_cast<size_t>(got));
  }
  return bytes;
}

bool file_exists(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0) return true;
  const int err = errno;
  if (err == ENOENT || err == ENOTDIR) return false;
  throw Error("cannot tell whether " + path + " exists: " + reason(err));
}

}  // namespace tapegrad::io
