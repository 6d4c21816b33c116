// Test helper for tests/io: a fresh folder under /tmp, removed with everything in it at the end of
// the test.
#pragma once

#include <doctest/doctest.h>
#include <stdlib.h>

#include <filesystem>
#include <set>
#include <string>

namespace tapegrad::testing {

struct TempDir {
  std::string path;
  TempDir() {
    char name[] = "/tmp/tapegrad-ckpt-XXXXXX";
    REQUIRE(::mkdtemp(name) != nullptr);
    path = name;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return path + "/" + name; }
  std::set<std::string> entries() const {
    std::set<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(path)) names.insert(entry.path().filename().string());
    return names;
  }
};

}  // namespace tapegrad::testing
