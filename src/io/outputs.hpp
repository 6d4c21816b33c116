// A program's outputs against its inputs, and what a failed program puts back.
//
// Rule (one file, two names): check_distinct compares files by device and inode (for a file that
// does not exist yet: its folder's device and inode, and its name), never by the text of their
// paths: "d.txt", "./d.txt", a hard link and a symbolic link to it are one file. A program refuses
// an output that is one of its inputs or another of its outputs before it writes anything.
//
// Rule (put back): a KeptFile holds what a file was before a program replaces it: an open
// descriptor on the old file (write_file_atomic renames a new file over the name, and the old one
// lives on while the descriptor does), or the fact that there was none. put_back() writes the old
// bytes back atomically, or removes the file that was not there. Nothing is copied until then, and
// a process killed meanwhile leaves nothing behind (the kernel closes the descriptor).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace tapegrad::io {

// Whether `a` and `b` name one file (the rule above). A path whose file or folder cannot be
// looked at names no file here (check_output says why).
bool same_file(const std::string& a, const std::string& b);

// A path as the user gave it, with the name of the flag or role that gave it ("--log", "the
// checkpoint's lock file").
struct NamedFile {
  std::string name;
  std::string path;
};

// Throws tapegrad::Error for the first output that is one file with another output or with an
// input ("--data d.txt and --log ./d.txt are one file; give each its own"); empty paths are skipped.
// Inputs may share a file (two readers of one file harm nothing).
void check_distinct(const std::vector<NamedFile>& outputs, const std::vector<NamedFile>& inputs = {});

class KeptFile {
 public:
  // Keeps what `path` names now (through its links, as write_file_atomic would write it). Throws
  // tapegrad::Error naming the path if it exists but cannot be opened.
  explicit KeptFile(const std::string& path);
  ~KeptFile();
  KeptFile(KeptFile&& other) noexcept;
  KeptFile& operator=(KeptFile&& other) noexcept;
  KeptFile(const KeptFile&) = delete;
  KeptFile& operator=(const KeptFile&) = delete;

  const std::string& path() const { return path_; }
  // Whether the path names something else now: another file, or a file where there was none (or
  // none where there was one).
  bool changed() const;
  // Makes the path what it was: the old bytes, written atomically, or no file. Throws
  // tapegrad::Error naming the path when it cannot.
  void put_back() const;

 private:
  std::string path_, target_;
  int fd_ = -1;  // the old file, or -1: there was none
  dev_t dev_ = 0;
  ino_t ino_ = 0;
};

}  // namespace tapegrad::io
