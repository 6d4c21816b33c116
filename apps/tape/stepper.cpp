// `tape step` in both modes (see stepper.hpp for the rule it keeps). The terminal is put in raw
// mode (no echo, no line buffering, Ctrl-C read as a key) and restored on every way out.
#include "stepper.hpp"

#include <poll.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <istream>
#include <ostream>
#include <sstream>

#include "walk.hpp"

namespace tape {

namespace {

struct Command {
  enum Kind { next, back, jump, over, quit, unknown } kind = unknown;
  long target = 0;  // jump: the step number, 1-based
};

Command parse_command(const std::string& line) {
  std::istringstream in(line);
  std::string word;
  if (!(in >> word)) return {Command::next};
  if (word == "n" || word == "next") return {Command::next};
  if (word == "b" || word == "back") return {Command::back};
  if (word == "q" || word == "quit") return {Command::quit};
  if (word == "o" || word == "over") return {Command::over};
  if (word == "j" || word == "jump") {
    long n = 0;
    std::string rest;
    if (in >> n && !(in >> rest)) return {Command::jump, n};
  }
  return {Command::unknown};
}

// The step after the row contributions that step `at` is among: the rows one visit sends to one
// input in a row (an embedding's, one per token); the next step when `at` is no row contribution.
size_t past_rows(const Tape& t, const std::vector<Step>& steps, size_t at) {
  auto row_of = [&](size_t i) -> const Event* {
    if (i >= steps.size() || steps[i].event < 0) return nullptr;
    const Event& ev = t.events[static_cast<size_t>(steps[i].event)];
    return ev.row >= 0 ? &ev : nullptr;
  };
  const Event* first = row_of(at);
  size_t i = at + 1;
  if (first)
    for (const Event* ev; (ev = row_of(i)) && ev->node == first->node && ev->to == first->to && ev->input == first->input;) ++i;
  return i;
}

// Applies a movement; returns a note when it could not move ("" when it did).
std::string move(const Command& c, size_t& at, size_t count, const Tape& t, const std::vector<Step>& steps) {
  switch (c.kind) {
    case Command::over:
      if (at + 1 == count) return "(this is the last step, " + std::to_string(count) + " of " + std::to_string(count) + ")";
      at = std::min(past_rows(t, steps, at), count - 1);
      return "";
    case Command::next:
      if (at + 1 == count) return "(this is the last step, " + std::to_string(count) + " of " + std::to_string(count) + ")";
      ++at;
      return "";
    case Command::back:
      if (at == 0) return "(this is the first step)";
      --at;
      return "";
    case Command::jump:
      if (c.target < 1 || static_cast<size_t>(c.target) > count)
        return "(no step " + std::to_string(c.target) + ": the steps are 1 to " + std::to_string(count) + ")";
      at = static_cast<size_t>(c.target - 1);
      return "";
    case Command::quit:
    case Command::unknown:
      break;
  }
  return "";
}

constexpr const char* kHelp = "n next, o over an op's row contributions, b back, j N jump to step N, q quit";

}  // namespace

int step_lines(const Tape& t, std::istream& in, std::ostream& out) {
  const std::vector<Step> steps = walk(t);
  size_t at = 0;
  out << describe_step(t, steps, at, false);
  std::string line;
  while (std::getline(in, line)) {
    const Command c = parse_command(line);
    if (c.kind == Command::quit) break;
    if (c.kind == Command::unknown) {
      out << "(unknown command \"" << line << "\": " << kHelp << ")\n";
      continue;
    }
    const std::string note = move(c, at, steps.size(), t, steps);
    out << (note.empty() ? describe_step(t, steps, at, false) : note + "\n");
  }
  out.flush();
  return 0;
}

namespace {

// Raw keys for as long as it lives; the terminal's settings come back in the destructor.
class RawTerminal {
 public:
  RawTerminal() {
    if (tcgetattr(STDIN_FILENO, &saved_) != 0) return;
    termios raw = saved_;
    raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO | ISIG);
    raw.c_cc[VMIN] = 1;
    raw.c_cc[VTIME] = 0;
    active_ = tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw) == 0;
  }
  ~RawTerminal() {
    if (active_) tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved_);
  }
  RawTerminal(const RawTerminal&) = delete;
  RawTerminal& operator=(const RawTerminal&) = delete;

 private:
  termios saved_{};
  bool active_ = false;
};

enum class Key { next, back, first, last, jump, over, quit, digit, enter, erase, escape, other };

// One key press; `ch` gets the character for digits.
Key read_key(char& ch) {
  auto byte = [](char& c, int wait_ms) {
    pollfd p{STDIN_FILENO, POLLIN, 0};
    if (wait_ms >= 0 && poll(&p, 1, wait_ms) <= 0) return false;
    return read(STDIN_FILENO, &c, 1) == 1;
  };
  if (!byte(ch, -1)) return Key::quit;  // the terminal went away
  switch (ch) {
    case 'n': case ' ': return Key::next;
    case 'b': return Key::back;
    case 'j': return Key::jump;
    case 'o': return Key::over;
    case 'q': case 3: case 4: return Key::quit;  // Ctrl-C and Ctrl-D quit too (ISIG is off)
    case '\r': case '\n': return Key::enter;
    case 127: case 8: return Key::erase;
    case '\x1b': {  // an escape sequence arrives at once; a lone Esc does not
      char a = 0, b = 0;
      if (!byte(a, 30) || (a != '[' && a != 'O') || !byte(b, 30)) return Key::escape;
      if (b == 'C') return Key::next;
      if (b == 'D') return Key::back;
      if (b == 'H') return Key::first;
      if (b == 'F') return Key::last;
      if (b == '1' || b == '4') {  // Home "ESC [1~", End "ESC [4~"
        char tilde = 0;
        byte(tilde, 30);
        return b == '1' ? Key::first : Key::last;
      }
      return Key::other;
    }
    default: return ch >= '0' && ch <= '9' ? Key::digit : Key::other;
  }
}

void draw(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

// Reads a step number after "j"; 0 when cancelled with Esc or an empty line.
long read_step_number(size_t count) {
  draw("\n\x1b[1mjump to step (1 to " + std::to_string(count) + "): \x1b[0m");
  std::string digits;
  for (;;) {
    char ch = 0;
    switch (read_key(ch)) {
      case Key::digit:
        if (digits.size() < 9) {
          digits += ch;
          draw(std::string(1, ch));
        }
        break;
      case Key::erase:
        if (!digits.empty()) {
          digits.pop_back();
          draw("\b \b");
        }
        break;
      case Key::enter: return digits.empty() ? 0 : std::stol(digits);
      case Key::escape: case Key::quit: return 0;
      default: break;
    }
  }
}

}  // namespace

int step_terminal(const Tape& t) {
  const std::vector<Step> steps = walk(t);
  RawTerminal raw;
  size_t at = 0;
  std::string note;
  for (;;) {
    draw("\x1b[H\x1b[2J" + describe_step(t, steps, at, true) + "\n\x1b[2m" +
         "n/space/→ next · o over rows · b/← back · Home/End first/last · j jump · q quit\x1b[0m\n" +
         (note.empty() ? "" : note + "\n"));
    note.clear();
    char ch = 0;
    switch (read_key(ch)) {
      case Key::next: note = move({Command::next}, at, steps.size(), t, steps); break;
      case Key::over: note = move({Command::over}, at, steps.size(), t, steps); break;
      case Key::back: note = move({Command::back}, at, steps.size(), t, steps); break;
      case Key::first: at = 0; break;
      case Key::last: at = steps.size() - 1; break;
      case Key::jump: {
        const long n = read_step_number(steps.size());
        if (n != 0) note = move({Command::jump, n}, at, steps.size(), t, steps);
        break;
      }
      case Key::quit: draw("\n"); return 0;
      default: note = std::string("(") + kHelp + ")"; break;
    }
  }
}

}  // namespace tape
