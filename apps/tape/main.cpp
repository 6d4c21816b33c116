// tape: read a tape dump (docs/tape-format.md) and show backpropagation step by step.
//
//   tape show FILE                      the tape as tables: values, contributions, gradient check;
//                                       a large tape (a GPT's) as one line per scope (layer)
//     [--scope NAME] [--find TEXT]      one scope's tables; the values whose label, op or scope holds TEXT
//     [--depth N]                       the summary's scopes N levels deep
//     [--all | --groups]                every table, or the grouped summary, whatever the size
//   tape step FILE                      walk it: forward value by value, backward contribution by
//                                       contribution (keys in a terminal, commands on stdin otherwise)
//   tape dot FILE [-o OUT.dot]          Graphviz DOT (render with: dot -Tsvg OUT.dot > OUT.svg)
//   tape html FILE [FILE2] -o PAGE.html one self-contained page; with two dumps (a correct run and
//                                       an overwrite-bug run) side by side
//   tape ops                            every op's shapes, forward and backward rule (docs/ops.md)
//
// Exit codes: 0 done, 2 bad input (an unreadable, malformed, truncated or unknown-version dump, or
// bad arguments; out of memory); 1 an internal failure; nothing is written when the input is refused.
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "app_main.hpp"
#include "tapegrad/io/atomic_file.hpp"
#include "tapegrad/io/outputs.hpp"
#include "tapegrad/ops/op_table.hpp"
#include "stepper.hpp"
#include "views.hpp"

namespace {

void print(const std::string& text) { std::fwrite(text.data(), 1, text.size(), stdout); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tape: read a tapegrad tape dump and show backpropagation step by step"};
  app.require_subcommand(1);
  std::vector<std::string> files;
  std::string out_path;
  tape::ShowOptions show_options;

  CLI::App* show = app.add_subcommand("show", "the tape as tables; a large one (more than " +
                                                  std::to_string(tape::kShowWholeRows) +
                                                  " values and contributions) as one line per scope");
  show->add_option("FILE", files, "the tape dump")->required()->expected(1);
  show->add_option("--scope", show_options.scope,
                   "only this scope (a layer, \"h.0.attn\") and the scopes inside it: its summary and tables");
  show->add_option("--find", show_options.find,
                   "only the values whose label, op or scope holds this text (case-insensitive), or \"#N\"");
  show->add_option("--depth", show_options.depth, "the summary's scopes this many levels deep (default: as many "
                                                "levels as fit " + std::to_string(tape::kSummaryRows) + " lines)")
      ->check(CLI::Range(1, 1000));
  CLI::Option* all = show->add_flag("--all", show_options.all, "every table, however large the tape");
  show->add_flag("--groups", show_options.groups, "one line per scope, however small the tape")->excludes(all);
  CLI::App* step = app.add_subcommand("step", "step through forward and backward (n, b, j N, q)");
  step->add_option("FILE", files, "the tape dump")->required()->expected(1);
  CLI::App* dot = app.add_subcommand("dot", "Graphviz DOT of the graph and its gradients");
  dot->add_option("FILE", files, "the tape dump")->required()->expected(1);
  dot->add_option("-o,--output", out_path, "write the DOT here instead of standard output");
  CLI::App* html = app.add_subcommand("html", "one self-contained page; give a correct and an overwrite-bug dump "
                                              "to see them side by side");
  html->add_option("FILE", files, "one or two tape dumps")->required()->expected(1, 2);
  html->add_option("-o,--output", out_path, "the page to write")->required();
  CLI::App* ops_table = app.add_subcommand("ops", "the derivatives table: every op's shapes, forward and backward rule");

  return apps::run_main(app, "tape", argc, argv, [&] {
    if (*ops_table) {
      print(tapegrad::ops::op_table_markdown());
      return 0;
    }
    std::vector<tapegrad::io::NamedFile> inputs;
    for (const std::string& f : files) inputs.push_back({"FILE", f});
    tapegrad::io::check_distinct({{"-o", out_path}}, inputs);  // the page never replaces a dump it shows
    std::vector<tape::Tape> tapes;
    for (const std::string& f : files) tapes.push_back(tape::read_tape(f));
    if (*show) {
      print(tape::show_tape(tapes[0], show_options));
    } else if (*step) {
      if (isatty(STDIN_FILENO) && isatty(STDOUT_FILENO)) return tape::step_terminal(tapes[0]);
      return tape::step_lines(tapes[0], std::cin, std::cout);
    } else if (*dot) {
      const std::string text = tape::to_dot(tapes[0]);
      if (out_path.empty()) print(text);
      else tapegrad::io::write_file_atomic(out_path, text);
    } else {
      tapegrad::io::write_file_atomic(out_path, tape::to_html(tapes));
      std::fprintf(stderr, "tape: wrote %s; open it in a browser (it needs no network)\n", out_path.c_str());
    }
    return 0;
  });
}
