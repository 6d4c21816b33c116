// `tape step`: walk a tape one step at a time (walk.hpp says what each step shows).
//
// Rule: the same commands work in both modes. In a terminal (stdin and stdout both ttys) single
// keys act at once: n, space or right arrow go on; o goes over the row contributions the step is
// among (an embedding's backward sends one per token) to the step after them; b or left arrow go
// back; j asks for a step number; q quits. Without a terminal, each line of standard input is one
// command ("n", "next", "o", "over", "b", "back", "j 17", "jump 17", "q", "quit"; an empty line
// means next), and every step is
// printed without colours, so a script can drive it and read what it shows.
#pragma once

#include <iosfwd>

#include "tape_file.hpp"

namespace tape {

// Line mode: reads commands from `in` until "q" or end of input; returns the exit status (0).
int step_lines(const Tape& t, std::istream& in, std::ostream& out);

// Terminal mode on the process's terminal (raw keys, screen redrawn per step); returns 0.
int step_terminal(const Tape& t);

}  // namespace tape
