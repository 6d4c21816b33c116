// Test helpers shared by suites that check error messages whole: the message a call throws, and
// this host's memory as an allocation's refusal prints it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

#include <sys/sysinfo.h>

#include "tapegrad/tensor/error.hpp"

namespace tapegrad::testing {

// The what() of the tapegrad::Error that f throws, or "(no error)".
inline std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// This host's memory and swap as Tensor's OutOfMemory prints it ("22.9 GiB").
inline std::string host_memory() {
  struct sysinfo info {};
  if (sysinfo(&info) != 0) return "(sysinfo failed)";
  double bytes = static_cast<double>((static_cast<uint64_t>(info.totalram) + info.totalswap) * info.mem_unit);
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  for (; bytes >= 1024 && u < 6; ++u) bytes /= 1024;
  char text[32];
  std::snprintf(text, sizeof text, "%.1f %s", bytes, units[u]);
  return text;
}

}  // namespace tapegrad::testing
