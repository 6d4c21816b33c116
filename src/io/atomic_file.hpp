// Whole-file reads and atomic whole-file writes.
//
// Rule: a write either leaves the old file or the complete new one at `path`, never a torn file,
// whatever moment the process or the machine dies: the bytes go to a fresh temporary file in the
// same folder, are flushed to disk, and the temporary file is renamed over the target. Failures
// throw tapegrad::Error naming the path and the system's reason, and leave no temporary file.
//
// Rule (symbolic links): a write goes through to the final target. When `path` is a symbolic link
// (or a chain of them), the temporary file is made in the folder of the file the last link names,
// and renamed over that file; the links stay links and read the new bytes. A link whose target
// does not exist yet creates it.
//
// Rule (stale temporary files): temporary files are named ".<name>.tmp-<pid>-<counter>-<random>".
// A writer killed before its rename leaves one behind; so before writing a target, the write
// removes that target's temporary files whose <pid> names no live process (kill(pid, 0) fails with
// ESRCH). It never removes one of this process or of another live process (it may be mid-write),
// nor any file whose name is not exactly of that form.
//
// Rule (reads): read_file reads regular files only ("cannot read P: it is not a regular file (a
// FIFO)"), never blocks on opening (O_NONBLOCK), and refuses a file of more than the caller's
// `max_bytes` before reading it ("cannot read P: it is 2000 bytes, more than the 1564 its reader
// accepts"), so /dev/zero, a FIFO or a huge file cannot hang or exhaust a reader. Each reader
// passes its own format's bound.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tapegrad::io {

// The bound read_file applies when its caller names none: 1 GiB.
inline constexpr size_t kDefaultMaxReadBytes = size_t{1} << 30;

// Replaces (or creates) `path` with exactly `bytes`, atomically and durably.
void write_file_atomic(const std::string& path, std::string_view bytes);

// The whole file, byte for byte. Throws tapegrad::Error naming the path if it cannot be read, is
// not a regular file, or holds more than `max_bytes` bytes.
std::string read_file(const std::string& path, size_t max_bytes = kDefaultMaxReadBytes);

// Whether something exists at `path` (following symbolic links).
bool file_exists(const std::string& path);

}  // namespace tapegrad::io
