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
// does not exist yet creates it. A link is followed only where the kernel's fs.protected_symlinks
// would follow it (Note [links in sticky folders] in atomic_file.cpp): one in a sticky folder that
// anyone may write to (/tmp) must belong to this process's user or to the folder's owner; any
// other is refused by name ("... is a symbolic link owned by uid 65534 in the sticky world-
// writable folder /tmp/x ...: not followed"), and nothing is written. A loop is refused.
//
// Rule (special files): a write replaces regular files only. A target that exists and is not a
// regular file (a FIFO, a device such as /dev/null, a socket, a folder) is refused, "cannot write
// P: it is not a regular file (a FIFO); only regular files are replaced", and nothing is written:
// renaming over it would replace the node itself (as root, /dev/null would become a regular
// file), and writing into it could block forever and is not atomic. A program that wants its
// output on a pipe writes to standard output.
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

#include <sys/types.h>

#include <cstddef>
#include <string>
#include <string_view>

namespace tapegrad::io {

// The bound read_file applies when its caller names none: 1 GiB.
inline constexpr size_t kDefaultMaxReadBytes = size_t{1} << 30;

// Replaces (or creates) `path` with exactly `bytes`, atomically and durably.
void write_file_atomic(const std::string& path, std::string_view bytes);

// The file a write of `path` replaces: `path` itself, or the file its chain of symbolic links ends at
// (which may not exist yet), after the rule for links above. Throws tapegrad::Error naming `path`
// for a loop, a link not to follow, or a link that cannot be read.
std::string write_target(const std::string& path);

// Refuses now, before a program does its work, a `path` that write_file_atomic would refuse or could
// not write for a reason known in advance: a link not to follow or a loop, a special file, a folder
// that does not exist or that this process cannot write and search, a name too long for its folder
// (with the temporary file's suffix). Throws tapegrad::Error "cannot write P: ..." naming the path;
// nothing is created. (What cannot be known in advance, a full disk, is still found by the write.)
void check_output(const std::string& path);

// The whole file, byte for byte. Throws tapegrad::Error naming the path if it cannot be read, is
// not a regular file, or holds more than `max_bytes` bytes.
std::string read_file(const std::string& path, size_t max_bytes = kDefaultMaxReadBytes);

// Whether something exists at `path` (following symbolic links): false when nothing does (no such
// file, or a component of the path is not a folder). Any other failure to tell (a link loop, a
// name too long, a folder that cannot be searched) throws tapegrad::Error naming the path: it is
// not "absent".
bool file_exists(const std::string& path);

// What kind of file `mode` (stat's st_mode) names, for messages: "a FIFO", "a character device",
// "a directory", "a socket", ...
const char* file_type_name(mode_t mode);

}  // namespace tapegrad::io
