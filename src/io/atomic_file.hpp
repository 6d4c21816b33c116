// Whole-file reads and atomic whole-file writes.
//
// Rule: a write either leaves the old file or the complete new one at `path`, never a torn file,
// whatever moment the process or the machine dies: the bytes go to a fresh temporary file in the
// same folder, are flushed to disk, and the temporary file is renamed over the target. Failures
// throw tapegrad::Error naming the path and the system's reason, and leave no temporary file.
#pragma once

#include <string>
#include <string_view>

namespace tapegrad::io {

// Replaces (or creates) `path` with exactly `bytes`, atomically and durably.
void write_file_atomic(const std::string& path, std::string_view bytes);

// The whole file, byte for byte. Throws tapegrad::Error naming the path if it cannot be read.
std::string read_file(const std::string& path);

// Whether something exists at `path` (following symbolic links).
bool file_exists(const std::string& path);

}  // namespace tapegrad::io
