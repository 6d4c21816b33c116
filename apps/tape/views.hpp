// The non-interactive views of a tape: a table (show.cpp), Graphviz DOT (dot.cpp) and a
// self-contained HTML page (page.cpp). Each takes checked tapes (tape_file.hpp) and returns text.
#pragma once

#include <string>
#include <vector>

#include "tape_file.hpp"

namespace tape {

// `tape show`: the values in record order with op, inputs, shape, value and gradient summaries,
// then the backward contributions in engine order and the gradient check.
std::string show_table(const Tape& t);

// `tape dot`: parameters, inputs and ops drawn differently; edges annotated with the gradient that
// flowed back along them; overwrites in a warning colour.
std::string to_dot(const Tape& t);

// `tape html`: one page, no network and no external files, stepping through one tape or, given
// two (a correct run and an overwrite-bug run), through both side by side.
std::string to_html(const std::vector<Tape>& tapes);

}  // namespace tape
