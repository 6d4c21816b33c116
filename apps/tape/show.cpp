// `tape show`: the tape as tables, or grouped by scope when it is large (see views.hpp).
#include <algorithm>
#include <cctype>
#include <map>
#include <optional>

#include "tapegrad/tensor/error.hpp"
#include "text.hpp"
#include "views.hpp"

namespace tape {

namespace {

std::string head_line(const Tape& t) {
  return (t.title.empty() ? "" : t.title + "\n") + "tape: " + t.path + " (tapegrad-tape version " +
         std::to_string(t.version) + "), mode " + t.mode() + ", " + std::to_string(t.values.size()) + " values";
}

bool has_lost(const Tape& t) {
  return std::any_of(t.events.begin(), t.events.end(), [](const Event& e) { return e.kind == EventKind::overwritten; });
}

// The value, contribution and gradient-check tables of the values `chosen` marks (by index), with
// the contributions their nodes made.
std::string tables(const Tape& t, const std::vector<bool>& chosen) {
  const bool scoped = t.has_scopes();
  std::vector<std::string> header = {"#", "id", "kind", "label", "op", "inputs", "shape", "dtype", "value", "gradient"};
  if (scoped) header.insert(header.begin() + 4, "scope");
  Table values(header);
  for (const Entry& e : t.values) {
    if (!chosen[static_cast<size_t>(e.index)]) continue;
    std::string inputs;
    for (int32_t id : e.inputs) inputs += (inputs.empty() ? "" : ", ") + t.name(t.entry(id));
    std::vector<std::string> row = {std::to_string(e.index), std::to_string(e.id), e.kind, e.label,
                                    e.op.empty() ? "-" : e.op, inputs.empty() ? "-" : inputs, shape_str(e.shape),
                                    e.dtype, inline_value(t, e, e.value, 6), e.grad ? inline_tensor(*e.grad, 6) : "-"};
    if (scoped) row.insert(row.begin() + 4, e.scope.empty() ? "-" : e.scope);
    values.add(std::move(row));
  }
  std::string s = values.str();

  if (!t.has_backward) return s + "\nbackward: not recorded in this dump\n";
  auto from_chosen = [&](int32_t node) { return chosen[static_cast<size_t>(t.producer(node).index)]; };
  std::string visits;
  for (int32_t node : t.visits)
    if (from_chosen(node)) visits += (visits.empty() ? "" : ", ") + std::to_string(node) + " " + t.producer(node).op;
  s += "\nbackward: visits nodes " + (visits.empty() ? std::string("(none)") : visits) + "\n";
  Table events({"#", "from", "to", "input", "kind", "contribution", "discarded"});
  for (size_t i = 0; i < t.events.size(); ++i) {
    const Event& ev = t.events[i];
    if (!from_chosen(ev.node)) continue;
    const Entry& to = t.entry(ev.to);
    events.add({std::to_string(i), "node " + std::to_string(ev.node) + " " + ev.op,
                t.name(to) + (part_name(to, ev).empty() ? "" : ", " + part_name(to, ev)), std::to_string(ev.input),
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
    if (chosen[static_cast<size_t>(t.entry(p.id).index)])
      check.add({p.label.empty() ? std::to_string(p.id) : p.label, number(p.max_error), p.passed ? "ok" : "FAILED"});
  return s + check.str("  ");
}

// What each group holds, counted over it and every group below it (the root: over its own values).
struct GroupCounts {
  int events = 0, lost = 0;
  std::map<std::string, int> ops;
};

std::vector<GroupCounts> count_groups(const Tape& t) {
  std::vector<GroupCounts> own(t.groups.size());
  for (const Entry& e : t.values)
    if (!e.op.empty()) ++own[static_cast<size_t>(e.group)].ops[e.op];
  for (const Event& ev : t.events) {
    GroupCounts& c = own[static_cast<size_t>(t.producer(ev.node).group)];
    ++c.events;
    c.lost += ev.kind == EventKind::overwritten;
  }
  std::vector<GroupCounts> total = own;
  for (size_t g = t.groups.size(); g-- > 1;) {  // a child comes after its parent: add it up, leaves first
    const size_t parent = static_cast<size_t>(t.groups[g].parent);
    if (parent == 0) continue;                  // the root's row counts its own values only
    total[parent].events += total[g].events;
    total[parent].lost += total[g].lost;
    for (const auto& [op, n] : total[g].ops) total[parent].ops[op] += n;
  }
  return total;
}

// "linear 4, reshape 4, transpose 4, …": the most frequent first, at most six.
std::string ops_histogram(const std::map<std::string, int>& ops) {
  std::vector<std::pair<std::string, int>> sorted(ops.begin(), ops.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string s;
  for (size_t i = 0; i < sorted.size() && i < 6; ++i)
    s += (i ? ", " : "") + sorted[i].first + " " + std::to_string(sorted[i].second);
  return sorted.size() > 6 ? s + ", …" : s;
}

// How many levels below `top` the summary shows: `asked`, else as many as fit kSummaryRows lines.
int summary_depth(const Tape& t, int top, std::optional<int> asked) {
  if (asked) return *asked;
  std::vector<int> per_level;  // groups at each level below top
  auto count = [&](auto& self, int g, int level) -> void {
    if (level > 0) {
      if (per_level.size() < static_cast<size_t>(level)) per_level.push_back(0);
      ++per_level[static_cast<size_t>(level - 1)];
    }
    for (int c : t.groups[static_cast<size_t>(g)].children) self(self, c, level + 1);
  };
  count(count, top, 0);
  int depth = 1, rows = per_level.empty() ? 0 : per_level[0];
  while (depth < static_cast<int>(per_level.size()) && rows + per_level[static_cast<size_t>(depth)] <= kSummaryRows)
    rows += per_level[static_cast<size_t>(depth++)];
  return depth;
}

int deepest_below(const Tape& t, int top) {
  int d = 0;
  for (int c : t.groups[static_cast<size_t>(top)].children) d = std::max(d, 1 + deepest_below(t, c));
  return d;
}

// One line per group of the subtree at `top` down to `depth` levels below it, indented by depth,
// then a line naming what was left out.
std::string group_table(const Tape& t, int top, int depth) {
  const std::vector<GroupCounts> counts = count_groups(t);
  const bool bug = has_lost(t);
  std::vector<std::string> header = {"scope", "values", "nodes", "contributions", "ops"};
  if (bug) header.insert(header.end() - 1, "overwritten");
  Table table(header);
  auto row = [&](int g, const std::string& name, int values, int nodes) {
    const GroupCounts& c = counts[static_cast<size_t>(g)];
    std::vector<std::string> r = {name, std::to_string(values), std::to_string(nodes), std::to_string(c.events),
                                  ops_histogram(c.ops)};
    if (bug) r.insert(r.end() - 1, c.lost ? std::to_string(c.lost) + " OVERWRITTEN" : "-");
    table.add(std::move(r));
  };
  if (top == 0) {
    const Group& root = t.groups[0];
    const int own_nodes = static_cast<int>(std::count_if(root.entries.begin(), root.entries.end(),
                                                         [&](int i) { return t.values[static_cast<size_t>(i)].node >= 0; }));
    if (!root.entries.empty()) row(0, "(no scope)", static_cast<int>(root.entries.size()), own_nodes);
  }
  const int base = t.groups[static_cast<size_t>(top)].depth;
  auto walk = [&](auto& self, int g) -> void {
    const Group& group = t.groups[static_cast<size_t>(g)];
    if (g != 0) row(g, std::string(static_cast<size_t>(2 * std::max(0, group.depth - std::max(base, 1))), ' ') + group.name,
                    group.values, group.nodes);
    if (group.depth - base < depth)
      for (int c : group.children) self(self, c);
  };
  walk(walk, top);
  const int deepest = deepest_below(t, top);
  return table.str() + (deepest > depth ? "(scopes more than " + std::to_string(depth) + " level" +
                                              (depth == 1 ? "" : "s") + " down are not listed: --depth " +
                                              std::to_string(deepest) + " lists them all)\n"
                                        : std::string());
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

int find_group(const Tape& t, const std::string& name) {
  for (size_t g = 0; g < t.groups.size(); ++g)
    if (t.groups[g].name == name) return static_cast<int>(g);
  std::string top;
  for (int c : t.groups[0].children) top += (top.empty() ? "" : ", ") + t.groups[static_cast<size_t>(c)].name;
  throw tapegrad::Error("[tape] " + t.path + " has no scope \"" + name + "\"" +
                        (top.empty() ? "; it was recorded outside every scope" : "; its outermost scopes are " + top) +
                        " (tape show FILE --groups lists them all)");
}

}  // namespace

std::string show_table(const Tape& t) {
  return head_line(t) + "\n\n" + tables(t, std::vector<bool>(t.values.size(), true));
}

std::string show_tape(const Tape& t, const ShowOptions& o) {
  const bool filtered = o.scope || o.find;
  const bool large = t.values.size() + t.events.size() > kShowWholeRows;
  if (!filtered && (o.all || (!o.groups && !large))) return show_table(t);

  std::string s = head_line(t) + ", " + std::to_string(t.groups[0].nodes) + " nodes, " +
                  std::to_string(t.events.size()) + " contributions\n";
  if (!filtered) {
    s += t.has_scopes() ? "grouped by scope (nodes, contributions and ops count each scope with those inside it):\n\n"
                        : "no value was recorded in a scope, so there is one group:\n\n";
    s += group_table(t, 0, summary_depth(t, 0, o.depth));
    s += "\nmore: tape show " + t.path + " --scope NAME (one group's tables), --find TEXT (values by label, op or "
         "scope), --depth N (N levels of scopes), --all (every table)\n";
    if (t.gradient_check)
      s += "gradient check: " + std::string(t.gradient_check->passed ? "passed" : "FAILED") + ", max error " +
           number(t.gradient_check->max_error) + "\n";
    return s;
  }

  std::vector<bool> chosen(t.values.size(), true);
  if (o.scope) {
    const int top = find_group(t, *o.scope);
    std::vector<bool> inside(t.groups.size(), false);
    for (size_t g = 0; g < t.groups.size(); ++g)
      inside[g] = static_cast<int>(g) == top || (t.groups[g].parent >= 0 && inside[static_cast<size_t>(t.groups[g].parent)]);
    for (const Entry& e : t.values) chosen[static_cast<size_t>(e.index)] = inside[static_cast<size_t>(e.group)];
    s += "scope " + (o.scope->empty() ? std::string("(all)") : *o.scope) + ":\n\n" +
         group_table(t, top, summary_depth(t, top, o.depth)) + "\n";
  }
  if (o.find) {
    const std::string want = lower(*o.find);
    int found = 0;
    for (const Entry& e : t.values) {
      const bool match = lower(e.label).find(want) != std::string::npos || lower(e.op).find(want) != std::string::npos ||
                         lower(t.groups[static_cast<size_t>(e.group)].name).find(want) != std::string::npos || index_tag(e.index) == want;
      chosen[static_cast<size_t>(e.index)] = chosen[static_cast<size_t>(e.index)] && match;
      found += chosen[static_cast<size_t>(e.index)];
    }
    s += std::to_string(found) + " value" + (found == 1 ? "" : "s") + " whose label, op or scope holds \"" + *o.find +
         "\"" + (o.scope ? " in that scope" : "") + ":\n\n";
  }
  return s + tables(t, chosen);
}

}  // namespace tape
