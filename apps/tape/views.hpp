// The non-interactive views of a tape: a table (show.cpp), Graphviz DOT (dot.cpp) and a
// self-contained HTML page (page.cpp). Each takes checked tapes (tape_file.hpp) and returns text.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tape_file.hpp"

namespace tape {

// `tape show --all`: the values in record order with op, inputs, shape, value and gradient
// summaries (and scope, when the tape has scopes), then the backward contributions in engine order
// and the gradient check.
std::string show_table(const Tape& t);

// What `tape show` prints. By default a small tape's tables (show_table) and, for a tape of more than
// kShowWholeRows values and contributions, one line per scope: its values, nodes, contributions
// and most frequent ops. `scope` and `find` narrow the tables to one group (and the groups inside
// it) or to the values whose label, op or group's scope holds a text (case-insensitive; "#N" is
// value N); both may be given.
struct ShowOptions {
  bool all = false;                  // every table, however large the tape
  bool groups = false;               // the grouped summary, however small
  std::optional<std::string> scope;  // an unknown scope is an error naming the outermost ones
  std::optional<std::string> find;
  std::optional<int> depth;          // summary lines this many levels of scopes deep (default: as
                                     // many levels as fit kSummaryRows lines)
};
inline constexpr size_t kShowWholeRows = 400;
inline constexpr int kSummaryRows = 100;
std::string show_tape(const Tape& t, const ShowOptions& options);

// `tape dot`: parameters, inputs and ops drawn differently; edges annotated with the gradient that
// flowed back along them; overwrites in a warning colour.
std::string to_dot(const Tape& t);

// `tape html`: one page, no network and no external files, stepping through one tape or, given
// two (a correct run and an overwrite-bug run), through both side by side.
std::string to_html(const std::vector<Tape>& tapes);

}  // namespace tape
