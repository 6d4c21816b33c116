// What apps/tape shows for tiny_step's two dumps (the correct run and the overwrite-bug run): the
// walk's steps, the stepper driven by line commands, the table, the DOT and the page's text.
// The step numbers are the teaching walk-through's (docs/teaching.md): 9 values forward, 8
// contributions backward, then the summary; step 17 is where the gradient of "red" is lost.
#include <doctest/doctest.h>

#include <filesystem>
#include <sstream>
#include <unistd.h>

#include "stepper.hpp"
#include "tiny_model.hpp"
#include "views.hpp"
#include "walk.hpp"

namespace {

// tiny_step's dump, written by trace() exactly as `tiny_step [--overwrite-bug] --dump-tape` does.
const tape::Tape& tiny_dump(bool overwrite_bug) {
  static std::optional<tape::Tape> dumps[2];
  std::optional<tape::Tape>& d = dumps[overwrite_bug];
  if (!d) {
    const std::string path = (std::filesystem::temp_directory_path() /
                              ("tape-views-" + std::to_string(getpid()) + (overwrite_bug ? "-bad" : "-good") + ".json"))
                                 .string();
    tiny::TraceOptions o;
    o.overwrite_bug = overwrite_bug;
    o.progress = false;
    o.dump_tape = path;
    tiny::trace(tiny::Config{}, tapegrad::Device::cpu(), o);
    d = tape::read_tape(path);
    std::filesystem::remove(path);
  }
  return *d;
}

std::string step_with(const tape::Tape& t, const std::string& commands) {
  std::istringstream in(commands);
  std::ostringstream out;
  CHECK(tape::step_lines(t, in, out) == 0);
  return out.str();
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("the walk: every value forward, every contribution backward, then the summary") {
  const tape::Tape& t = tiny_dump(true);
  const std::vector<tape::Step> steps = tape::walk(t);
  REQUIRE(steps.size() == 18);
  for (size_t i = 0; i < 9; ++i) CHECK(steps[i].phase == tape::Step::Phase::forward);
  for (size_t i = 9; i < 17; ++i) {
    CHECK(steps[i].phase == tape::Step::Phase::backward);
    CHECK(steps[i].event == static_cast<int>(i - 9));
  }
  CHECK(steps[16].visit == 3);  // the gather, visited last
  CHECK(steps[17].phase == tape::Step::Phase::summary);
}

TEST_CASE("the stepper at the overwrite of \"red\": the loss and the discarded value") {
  const std::string out = step_with(tiny_dump(true), "j 17\nq\n");
  CHECK(has(out, "── step 17 of 18 · backward · visit 4 of 4 (node 0), contribution 3 of 3 ─"));
  CHECK(has(out, "the backward of #4 x = gather(embedding, input_ids)\n"
                 "  incoming gradient  d x  (3, 2)\n"
                 "      red    [0.02365, 0.08215]\n"
                 "      green  [0.01851, 0.05068]\n"
                 "      red    [0.02365, 0.08215]\n"
                 "  flows to  d embedding, row 0 (red)  (input 0 of gather)\n"
                 "  contribution  [0.02365, 0.08215]\n"
                 "  LOSS  overwritten: d embedding, row 0 (red) held [0.02365, 0.08215]; that is discarded.\n"
                 "        It now holds only this contribution; adding would have kept both: [0.04729, 0.1643].\n"));
}

TEST_CASE("the stepper at the same step of the correct run: the contribution is added") {
  const std::string out = step_with(tiny_dump(false), "jump 17\n");
  CHECK(has(out, "  added  d embedding, row 0 (red) now holds [0.04729, 0.1643]: what it held plus this contribution\n"));
  CHECK_FALSE(has(out, "LOSS"));
}

TEST_CASE("the stepper's forward step shows the op, its inputs' values and its output") {
  const std::string out = step_with(tiny_dump(false), "j 5\n");
  CHECK(has(out, "── step 5 of 18 · forward ─"));
  CHECK(has(out, "#4 x = gather(embedding, input_ids)   (3, 2) f64 on cpu\n"
                 "  input 0  embedding  parameter (4, 2)\n"
                 "      red    [-0.18, -0.35]\n"
                 "      green  [0.15, -0.43]\n"
                 "      stop   [0.04, -0.13]\n"
                 "      go     [-0.44, 0.01]\n"
                 "  input 1  input_ids  input (3,)\n"
                 "      red: 0, green: 1, red: 0\n"
                 "  output  x  (3, 2)\n"
                 "      red    [-0.18, -0.35]\n"
                 "      green  [0.15, -0.43]\n"
                 "      red    [-0.18, -0.35]\n"));
}

TEST_CASE("the stepper's commands: next, back, jump, limits, unknown words, end of input") {
  const std::string out = step_with(tiny_dump(true), "b\n\nnext\nback\nj 0\njump 18\nn\nhello\nj x\n");
  CHECK(has(out, "(this is the first step)\n"));
  CHECK(has(out, "── step 2 of 18 · forward ─"));
  CHECK(has(out, "(no step 0: the steps are 1 to 18)\n"));
  CHECK(has(out, "(this is the last step, 18 of 18)\n"));
  CHECK(has(out, "(unknown command \"hello\": n next, o over an op's row contributions, b back, j N jump to step N, q quit)\n"));
  CHECK(has(out, "(unknown command \"j x\": n next, o over an op's row contributions, b back, j N jump to step N, q quit)\n"));
  // the summary names the loss, the failed check and the final gradients
  CHECK(has(out, "gradient check (central differences, epsilon 1e-05, tolerance 1e-06): FAILED, max error 0.08215\n"));
  CHECK(has(out, "  embedding  0.08215    FAILED\n"));
  CHECK(has(out, "contributions lost to overwrites: 1\n"
                 "  step 17: gather -> d embedding, row 0 (red), discarded [0.02365, 0.08215]\n"));
  // "q" stops reading: nothing after it is shown
  const std::string quit = step_with(tiny_dump(true), "q\nj 18\n");
  CHECK_FALSE(has(quit, "step 18 of 18"));
}

TEST_CASE("show: the table names the overwrite and the failed check") {
  const std::string bad = tape::show_table(tiny_dump(true));
  CHECK(has(bad, "tiny_step: red green red -> stop go stop\n"));
  CHECK(has(bad, "mode overwrite-bug, 9 values\n"));
  CHECK(has(bad, "backward: visits nodes 3 cross_entropy, 2 add_row, 1 matmul, 0 gather\n"));
  CHECK(has(bad, "embedding, row 0 (red)    0      OVERWRITTEN  [0.02365, 0.08215]"));
  CHECK(has(bad, "): FAILED, max error 0.08215\n"));
  const std::string good = tape::show_table(tiny_dump(false));
  CHECK(has(good, "embedding, row 0 (red)    0      added  [0.02365, 0.08215]"));
  CHECK(has(good, "): passed, max error 1.002e-11\n"));
}

TEST_CASE("dot: parameters, inputs and ops drawn differently; the overwrite in red") {
  const std::string dot = tape::to_dot(tiny_dump(true));
  CHECK(has(dot, "  p1 [shape=box, style=\"rounded,filled,bold\", fillcolor=\"#fde68a\", label=\"#0 embedding\\n"));
  CHECK(has(dot, "  v0 [shape=box, style=\"filled,dashed\", fillcolor=\"#e5e7eb\", label=\"#3 input_ids\\n"));
  CHECK(has(dot, "  v1 [shape=ellipse, style=filled, fillcolor=\"#dbeafe\", label=\"#4 x = gather\\n"));
  CHECK(has(dot, "  p1 -> v1 [headlabel=\"0\", color=\"#dc2626\""));
  CHECK(has(dot, "row 0 (red) OVERWRITTEN by [0.02365, 0.08215], lost [0.02365, 0.08215]"));
  CHECK(has(dot, "  p3 -> v3 [headlabel=\"1\", color=\"#ea580c\""));
}

TEST_CASE("html: one page, both dumps inside, no way for a dump's text to end the script") {
  tape::Tape bad = tiny_dump(true);
  bad.document.set("title", "</script><script>alert(1)</script>");
  bad.title = bad.document.find("title")->as_string();
  const std::string page = tape::to_html({tiny_dump(false), bad});
  CHECK(page.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK_FALSE(has(page, "<script>alert(1)"));
  CHECK(has(page, "\\u003c/script>\\u003cscript>alert(1)\\u003c/script>"));
  CHECK(has(page, "\"mode\": \"accumulate\""));
  CHECK(has(page, "\"mode\": \"overwrite-bug\""));
  CHECK_FALSE(has(page, "{{"));  // every placeholder filled
  for (const char* outside : {"http://", "https://", "src=", "@import", "url(http"}) {
    CAPTURE(outside);
    CHECK_FALSE(has(page, outside));
  }
}
