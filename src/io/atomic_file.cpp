// Whole-file reads and atomic whole-file writes (see atomic_file.hpp).
//
// Rule: write to a unique temporary file in the target's folder (O_EXCL, so two writers never
// share one), fsync it, rename it over the target, then fsync the folder so the rename itself is
// on disk. Any failure before the rename removes the temporary file.
#include "tapegrad/io/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include "tapegrad/tensor/error.hpp"

namespace tapegrad::io {
namespace {

std::string reason(int err) { return std::strerror(err); }

// The folder that holds `path` ("." for a bare file name).
std::string folder_of(const std::string& path) {
  std::string folder = std::filesystem::path(path).parent_path().string();
  return folder.empty() ? "." : folder;
}

// A temporary name next to the target: ".<name>.tmp-<pid>-<counter>-<random>".
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
  std::string temp_path;
  const int fd = create_temporary(path, temp_path);
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
  if (std::rename(temp_path.c_str(), path.c_str()) != 0) {
    const int err = errno;
    fail("cannot rename " + temp_path + " over it", err);
  }
  sync_folder(path);
}

std::string read_file(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    const int err = errno;
    throw Error("cannot read " + path + ": " + reason(err));
  }
  std::string bytes;
  char buffer[1 << 16];
  size_t got = 0;
  while ((got = std::fread(buffer, 1, sizeof buffer, file)) > 0) bytes.append(buffer, got);
  const bool failed = std::ferror(file) != 0;
  const int err = errno;
  std::fclose(file);
  if (failed) throw Error("cannot read " + path + ": " + reason(err));
  return bytes;
}

bool file_exists(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0;
}

}  // namespace tapegrad::io
