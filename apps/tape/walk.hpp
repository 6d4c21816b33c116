// The walk through a tape that `tape step` shows: forward value by value in record order, then
// backward contribution by contribution in the order the engine made them, then a summary.
//
// Rule: a step describes only what the dump holds; nothing is recomputed except the sum an
// overwrite threw away ("adding would have kept both"), which is said as such.
#pragma once

#include <string>
#include <vector>

#include "tape_file.hpp"

namespace tape {

struct Step {
  enum class Phase { forward, backward, summary };
  Phase phase = Phase::forward;
  int entry = -1;  // forward: the value shown (index into Tape::values)
  int visit = -1;  // backward: index into Tape::visits
  int event = -1;  // backward: index into Tape::events, -1 for a visit that sent nothing
};

std::vector<Step> walk(const Tape& t);

// What step i shows, as lines of text. `colour` adds ANSI colours for a terminal.
std::string describe_step(const Tape& t, const std::vector<Step>& steps, size_t i, bool colour);

}  // namespace tape
