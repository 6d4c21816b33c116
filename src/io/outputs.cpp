// A program's outputs against its inputs, and what a failed program puts back (see outputs.hpp).
#include "tapegrad/io/outputs.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <utility>

#include "tapegrad/io/atomic_file.hpp"
#include "tapegrad/tensor/error.hpp"

namespace tapegrad::io {
namespace {

std::string reason(int err) { return std::strerror(err); }

// A file's identity: its device and inode, or, for one that does not exist yet, its folder's and
// its name.
struct FileKey {
  dev_t dev;
  ino_t ino;
  std::string name;
  bool operator==(const FileKey&) const = default;
};

std::optional<FileKey> key_of(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0) return FileKey{info.st_dev, info.st_ino, ""};
  std::string target;
  try {
    target = write_target(path);
  } catch (const Error&) {
    return std::nullopt;
  }
  const std::filesystem::path p(target);
  const std::string folder = p.parent_path().empty() ? "." : p.parent_path().string();
  if (::stat(folder.c_str(), &info) != 0) return std::nullopt;
  return FileKey{info.st_dev, info.st_ino, p.filename().string()};
}

}  // namespace

bool same_file(const std::string& a, const std::string& b) {
  const std::optional<FileKey> ka = key_of(a), kb = key_of(b);
  return ka && kb && *ka == *kb;
}

void check_distinct(const std::vector<NamedFile>& outputs, const std::vector<NamedFile>& inputs) {
  std::vector<NamedFile> files = inputs;  // inputs first: a message names the input, then the output
  files.insert(files.end(), outputs.begin(), outputs.end());
  std::vector<std::optional<FileKey>> keys;
  for (const NamedFile& f : files) keys.push_back(f.path.empty() ? std::nullopt : key_of(f.path));
  for (size_t j = inputs.size(); j < files.size(); ++j)  // each output against everything before it
    for (size_t i = 0; i < j; ++i)
      if (keys[i] && keys[j] && *keys[i] == *keys[j])
        throw Error(files[i].name + " " + files[i].path + " and " + files[j].name + " " + files[j].path +
                    " are one file; give each its own");
}

KeptFile::KeptFile(const std::string& path) : path_(path), target_(write_target(path)) {
  const int fd = ::open(target_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return;  // none there: put_back removes what the program writes
    throw Error("cannot keep " + path_ + " to put it back on a failure: " + reason(err));
  }
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int err = errno;
    ::close(fd);
    throw Error("cannot keep " + path_ + " to put it back on a failure: " + reason(err));
  }
  fd_ = fd;
  dev_ = info.st_dev;
  ino_ = info.st_ino;
}

KeptFile::~KeptFile() {
  if (fd_ >= 0) ::close(fd_);
}

KeptFile::KeptFile(KeptFile&& other) noexcept
    : path_(std::move(other.path_)), target_(std::move(other.target_)), fd_(std::exchange(other.fd_, -1)),
      dev_(other.dev_), ino_(other.ino_) {}

KeptFile& KeptFile::operator=(KeptFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    target_ = std::move(other.target_);
    fd_ = std::exchange(other.fd_, -1);
    dev_ = other.dev_;
    ino_ = other.ino_;
  }
  return *this;
}

bool KeptFile::changed() const {
  struct stat info {};
  const bool exists = ::lstat(target_.c_str(), &info) == 0;
  if (fd_ < 0) return exists;
  return !exists || info.st_dev != dev_ || info.st_ino != ino_;
}

void KeptFile::put_back() const {
  if (!changed()) return;
  if (fd_ < 0) {
    if (::unlink(target_.c_str()) != 0 && errno != ENOENT) {
      const int err = errno;
      throw Error("cannot remove " + target_ + ": " + reason(err));
    }
    return;
  }
  std::string bytes;
  char buffer[1 << 16];
  for (off_t at = 0;;) {
    const ssize_t got = ::pread(fd_, buffer, sizeof buffer, at);
    if (got < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      throw Error("cannot read back what " + path_ + " held: " + reason(err));
    }
    if (got == 0) break;
    bytes.append(buffer, static_cast<size_t>(got));
    at += got;
  }
  write_file_atomic(target_, bytes);
}

}  // namespace tapegrad::io
