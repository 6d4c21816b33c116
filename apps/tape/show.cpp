// `tape show`: the tape as tables (see views.hpp).
#include "text.hpp"
#include "views.hpp"

namespace tape {

std::string show_table(const Tape& t) {
  std::string s = t.title.empty() ? "" : t.title + "\n";
  s += "tape: " + t.path + " (tapegrad-tape version " + std::to_string(t.version) + "), mode " + t.mode() +
       ", " + std::to_string(t.values.size()) + " values\n\n";

  Table values({"#", "id", "kind", "label", "op", "inputs", "shape", "dtype", "value", "gradient"});
  for (const Entry& e : t.values) {
    std::string inputs;
    for (int32_t id : e.inputs) inputs += (inputs.empty() ? "" : ", ") + t.name(t.entry(id));
    values.add({std::to_string(e.index), std::to_string(e.id), e.kind, e.label, e.op.empty() ? "-" : e.op,
                inputs.empty() ? "-" : inputs, shape_str(e.shape), e.dtype, inline_tensor(e.value, 6),
                e.grad ? inline_tensor(*e.grad, 6) : "-"});
  }
  s += values.str();

  if (!t.has_backward) return s + "\nbackward: not recorded in this dump\n";
  std::string visits;
  for (int32_t node : t.visits) visits += (visits.empty() ? "" : ", ") + std::to_string(node) + " " + t.producer(node).op;
  s += "\nbackward: visits nodes " + (visits.empty() ? std::string("(none)") : visits) + "\n";
  Table events({"#", "from", "to", "input", "kind", "contribution", "discarded"});
  for (size_t i = 0; i < t.events.size(); ++i) {
    const Event& ev = t.events[i];
    const Entry& to = t.entry(ev.to);
    events.add({std::to_string(i), "node " + std::to_string(ev.node) + " " + ev.op,
                t.name(to) + (ev.row >= 0 ? ", " + row_name(to, ev.row) : std::string()), std::to_string(ev.input),
                ev.kind == EventKind::overwritten ? "OVERWRITTEN" : event_kind_name(ev.kind),
                inline_tensor(ev.contribution, 6), ev.discarded ? inline_tensor(*ev.discarded, 6) : "-"});
  }
  s += events.str("  ");

  if (!t.gradient_check) return s + "\ngradient check: not run for this dump\n";
  const GradientCheck& c = *t.gradient_check;
  s += "\ngradient check (epsilon " + number(c.epsilon) + ", tolerance " + number(c.tolerance) + "): " +
       (c.passed ? "passed" : "FAILED") + ", max error " + number(c.max_error) + "\n";
  Table check({"parameter", "max error", "result"});
  for (const ParameterCheck& p : c.parameters)
    check.add({p.label.empty() ? std::to_string(p.id) : p.label, number(p.max_error), p.passed ? "ok" : "FAILED"});
  return s + check.str("  ");
}

}  // namespace tape
