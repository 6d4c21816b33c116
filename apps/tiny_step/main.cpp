// tiny_step: one training step of the tiny next-token model of the Python reference
// (docs/tiny_step.md), on the graph.
//
//   tiny_step                      print the trace (byte-identical to the Python reference)
//   tiny_step --write PATH         write it (atomically)
//   tiny_step --check PATH         exit 1, naming the first differing line, if PATH is out of date
//   tiny_step --config FILE.json   the reference's constants (docs/tiny_step.md, "Other constants")
//   tiny_step --overwrite-bug      run the step in the engine's overwrite-bug mode
//   tiny_step --dump-tape FILE     also write the step's tape dump (docs/tape-format.md); the
//                                  trace is printed (or written, or checked) as without it
//
// Exit codes: 0 done, 1 --check found a difference (or an internal failure), 2 bad input: a bad
// flag, a refused config, a config whose gradient check asks for too much work, out of memory, or an
// unusable device (CUDA not built, no device, out of device memory); nothing is written.
#include <cstdio>
#include <sstream>

#include "app_main.hpp"
#include "tapegrad/io/atomic_file.hpp"
#include "tapegrad/io/outputs.hpp"
#include "tiny_model.hpp"

namespace {

// The first line where two texts differ, as "line N: expected ... / found ...".
std::string first_difference(const std::string& want, const std::string& have) {
  std::istringstream a(want), b(have);
  std::string la, lb;
  for (int line = 1;; ++line) {
    bool ga = static_cast<bool>(std::getline(a, la)), gb = static_cast<bool>(std::getline(b, lb));
    if (!ga && !gb) return "the files differ only in their last newline";
    if (!ga || !gb || la != lb)
      return "line " + std::to_string(line) + ": expected " + (ga ? "'" + la + "'" : "end of file") + ", found " +
             (gb ? "'" + lb + "'" : "end of file");
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tiny_step: one training step of a tiny next-token model, built on tapegrad's graph"};
  std::string write_path, check_path, config_path, device_name = "cpu", dump_path;
  bool overwrite_bug = false;
  app.add_option("--write", write_path, "write the trace to PATH");
  app.add_option("--check", check_path, "exit 1 if PATH differs from the trace");
  app.add_option("--config", config_path, "JSON file with the reference's constants");
  app.add_option("--device", device_name, "cpu or cuda");
  app.add_flag("--overwrite-bug", overwrite_bug, "gradient contributions overwrite instead of add");
  app.add_option("--dump-tape", dump_path, "write the step's tape dump to FILE (see docs/tape-format.md)");
  return apps::run_main(app, "tiny_step", argc, argv, [&] {
    tapegrad::io::check_distinct({{"--write", write_path}, {"--dump-tape", dump_path}},
                                 {{"--config", config_path}, {"--check", check_path}});
    const tiny::Config config = config_path.empty() ? tiny::Config{} : tiny::load_config(config_path);
    tiny::TraceOptions options;
    options.overwrite_bug = overwrite_bug;
    options.dump_tape = dump_path;
    const tapegrad::Device device = tapegrad::parse_device(device_name);
    const std::string text = tapegrad::json::dumps(tiny::trace(config, device, options)) + "\n";
    tapegrad::synchronize(device);  // the end of the step: the device's kernels finished without error

    if (!check_path.empty()) {
      const std::string have = tapegrad::io::read_file(check_path);
      if (have != text) {
        std::fprintf(stderr, "tiny_step: %s is out of date: %s\n", check_path.c_str(), first_difference(text, have).c_str());
        return 1;
      }
      std::fprintf(stderr, "tiny_step: %s is up to date\n", check_path.c_str());
    } else if (!write_path.empty()) {
      tapegrad::io::write_file_atomic(write_path, text);
    } else {
      std::fwrite(text.data(), 1, text.size(), stdout);
    }
    return 0;
  });
}
