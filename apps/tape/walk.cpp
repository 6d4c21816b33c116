// The walk through a tape (see walk.hpp for the rule it keeps).
#include "walk.hpp"

#include "text.hpp"

namespace tape {

std::vector<Step> walk(const Tape& t) {
  std::vector<Step> steps;
  for (size_t i = 0; i < t.values.size(); ++i) steps.push_back({Step::Phase::forward, static_cast<int>(i), -1, -1});
  // Events follow the visits (tape_file checks it): each visit takes the events of its node.
  size_t next_event = 0;
  for (size_t v = 0; v < t.visits.size(); ++v) {
    const size_t first = next_event;
    while (next_event < t.events.size() && t.events[next_event].node == t.visits[v])
      steps.push_back({Step::Phase::backward, -1, static_cast<int>(v), static_cast<int>(next_event++)});
    if (next_event == first) steps.push_back({Step::Phase::backward, -1, static_cast<int>(v), -1});
  }
  steps.push_back({Step::Phase::summary, -1, -1, -1});
  return steps;
}

namespace {

struct Style {
  bool on;
  std::string bold(const std::string& s) const { return on ? "\x1b[1m" + s + "\x1b[0m" : s; }
  std::string loss(const std::string& s) const { return on ? "\x1b[1;31m" + s + "\x1b[0m" : s; }
  std::string good(const std::string& s) const { return on ? "\x1b[32m" + s + "\x1b[0m" : s; }
  std::string dim(const std::string& s) const { return on ? "\x1b[2m" + s + "\x1b[0m" : s; }
};

std::string rule(const std::string& title) {
  const size_t width = 78, used = display_width(title) + 4;
  std::string s = "── " + title + " ";
  for (size_t i = used; i < width; ++i) s += "─";
  return s;
}

std::string indent_lines(const std::vector<std::string>& lines, const std::string& indent) {
  std::string s;
  for (const std::string& l : lines) s += indent + l + "\n";
  return s;
}

// "#4 x = gather(embedding, input_ids)", "#5 matmul(x, weights)", "#0 embedding".
std::string signature(const Tape& t, const Entry& e) {
  if (e.op.empty()) return e.label.empty() ? t.name(e) : index_tag(e.index) + " " + e.label;
  std::string s = index_tag(e.index) + " " + (e.label.empty() ? "" : e.label + " = ") + e.op + "(";
  for (size_t k = 0; k < e.inputs.size(); ++k) s += (k ? ", " : "") + t.name(t.entry(e.inputs[k]));
  return s + ")";
}

std::string describe(const Entry& e) { return shape_str(e.shape) + " " + e.dtype + " on " + e.device; }

// A value's lines: its tokens when it holds token ids, else its elements by row.
std::vector<std::string> value_lines(const Tape& t, const Entry& e) {
  return e.tokens ? std::vector<std::string>{inline_value(t, e, e.value, 16)} : tensor_lines(e.value, e.rows);
}

std::string forward_step(const Tape& t, const Entry& e) {
  std::string s;
  if (e.kind == "parameter") {
    s += signature(t, e) + ": a parameter, " + describe(e) + "\n";
    s += "  trained: the backward pass will give it a gradient\n";
  } else if (e.kind == "input") {
    s += signature(t, e) + ": an input, " + describe(e) + "\n";
    s += "  data: it gets no gradient\n";
  } else if (e.op.empty()) {
    s += signature(t, e) + ": computed without a node on the tape, " + describe(e) + "\n";
    s += "  no gradient flows through it\n";
  } else {
    s += signature(t, e) + "   " + describe(e) + "\n";
    for (size_t k = 0; k < e.inputs.size(); ++k) {
      const Entry& in = t.entry(e.inputs[k]);
      s += "  input " + std::to_string(k) + "  " + t.name(in) + "  " + in.kind + " " + shape_str(in.shape) + "\n";
      s += indent_lines(value_lines(t, in), "      ");
    }
    s += "  output  " + t.name(e) + "  " + shape_str(e.shape) + "\n";
    return s + indent_lines(value_lines(t, e), "      ");
  }
  if (e.reader >= 0)
    s += "  first read by " + signature(t, t.values[static_cast<size_t>(e.reader)]) + ", as its input " +
         std::to_string(e.reader_slot) + "\n";
  return s + "  value\n" + indent_lines(value_lines(t, e), "      ");
}

// "d embedding, row 0 (red)", "d gates, [:, 3:4, :]" or "d logits".
std::string slot_name(const Tape& t, const Event& ev) {
  const Entry& to = t.entry(ev.to);
  const std::string part = part_name(to, ev);
  return "d " + t.name(to) + (part.empty() ? "" : ", " + part);
}

std::string backward_step(const Tape& t, const Step& step, const Style& st) {
  const int32_t node = t.visits[static_cast<size_t>(step.visit)];
  const Entry& out = t.producer(node);
  std::string s = "the backward of " + signature(t, out) + "\n";
  s += "  incoming gradient  d " + t.name(out) + "  " + shape_str(out.shape) + "\n";
  s += out.grad ? indent_lines(tensor_lines(*out.grad, out.rows), "      ") : "      (not in the dump)\n";
  if (step.event < 0) return s + "  it sends nothing: none of its inputs needs a gradient\n";

  const Event& ev = t.events[static_cast<size_t>(step.event)];
  const std::string slot = slot_name(t, ev);
  s += "  flows to  " + slot + "  (input " + std::to_string(ev.input) + " of " + ev.op + ")\n";
  s += "  contribution  " + inline_tensor(ev.contribution) + "\n";
  const std::string after = ev.after ? inline_tensor(*ev.after) : "";
  switch (ev.kind) {
    case EventKind::set:
      s += "  " + st.good("set") + "  " + slot + " had no gradient yet; it now holds this contribution\n";
      break;
    case EventKind::added:
      s += "  " + st.good("added") + "  " + slot +
           (ev.after ? " now holds " + after + ": what it held plus this contribution\n"
                     : " adds this contribution to the gradient it held from before this pass\n");
      break;
    case EventKind::overwritten: {
      s += "  " + st.loss("LOSS") + "  overwritten: " + slot + " held " + inline_tensor(*ev.discarded) +
           "; that is discarded.\n";
      s += "        It now holds only this contribution";
      if (auto sum = sum_of(*ev.discarded, ev.contribution))
        s += "; adding would have kept both: " + inline_tensor(with_values(ev.contribution, *sum));
      s += ".\n";
      break;
    }
  }
  return s;
}

std::string summary_step(const Tape& t, const std::vector<Step>& steps, const Style& st) {
  std::string s = "final gradients (mode: " + t.mode() + ")\n";
  for (const Entry& e : t.values) {
    if (e.kind != "parameter") continue;
    if (!e.grad) {
      s += "  d " + t.name(e) + ": none (no gradient reached it)\n";
      continue;
    }
    s += "  d " + t.name(e) + "  " + shape_str(e.shape) + "\n" + indent_lines(tensor_lines(*e.grad, e.rows), "      ");
  }
  if (t.gradient_check) {
    const GradientCheck& c = *t.gradient_check;
    s += "gradient check (central differences, epsilon " + number(c.epsilon) + ", tolerance " + number(c.tolerance) +
         "): " + (c.passed ? st.good("passed") : st.loss("FAILED")) + ", max error " + number(c.max_error) + "\n";
    Table table({"parameter", "max error", "result"});
    for (const ParameterCheck& p : c.parameters)
      table.add({p.label.empty() ? std::to_string(p.id) : p.label, number(p.max_error), p.passed ? "ok" : "FAILED"});
    s += table.str("  ");
  } else {
    s += "gradient check: not run for this dump\n";
  }
  std::string losses;
  int n = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].event < 0) continue;
    const Event& ev = t.events[static_cast<size_t>(steps[i].event)];
    if (ev.kind != EventKind::overwritten) continue;
    ++n;
    losses += "  step " + std::to_string(i + 1) + ": " + ev.op + " -> " + slot_name(t, ev) + ", discarded " +
              inline_tensor(*ev.discarded) + "\n";
  }
  if (n == 0)
    return s + "contributions lost to overwrites: none" +
           (t.overwrite_bug ? " (no two contributions met)\n" : " (accumulate mode: contributions that meet are added)\n");
  return s + st.loss("contributions lost to overwrites: " + std::to_string(n)) + "\n" + losses;
}

}  // namespace

std::string describe_step(const Tape& t, const std::vector<Step>& steps, size_t i, bool colour) {
  const Style st{colour};
  const Step& step = steps.at(i);
  std::string where = "step " + std::to_string(i + 1) + " of " + std::to_string(steps.size()) + " · ";
  switch (step.phase) {
    case Step::Phase::forward:
      return st.bold(rule(where + "forward")) + "\n" + forward_step(t, t.values[static_cast<size_t>(step.entry)]);
    case Step::Phase::backward: {
      where += "backward · visit " + std::to_string(step.visit + 1) + " of " + std::to_string(t.visits.size()) +
               " (node " + std::to_string(t.visits[static_cast<size_t>(step.visit)]) + ")";
      if (step.event >= 0) {
        int k = 0, n = 0;
        for (const Step& other : steps)
          if (other.phase == Step::Phase::backward && other.visit == step.visit) {
            ++n;
            if (other.event <= step.event) ++k;
          }
        where += ", contribution " + std::to_string(k) + " of " + std::to_string(n);
      }
      return st.bold(rule(where)) + "\n" + backward_step(t, step, st);
    }
    case Step::Phase::summary:
      return st.bold(rule(where + "summary")) + "\n" + summary_step(t, steps, st);
  }
  return "";
}

}  // namespace tape
