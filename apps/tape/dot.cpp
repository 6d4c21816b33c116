// `tape dot`: Graphviz DOT of a tape (see views.hpp).
//
// Rule: one graph node per value, one edge per (input, op, slot), drawn in the forward
// direction; the backward pass shows as the edge's label (what flowed back along it) and colour:
// orange when gradient flowed, red when a contribution overwrote another.
#include <map>
#include <tuple>

#include "text.hpp"
#include "views.hpp"

namespace tape {

namespace {

constexpr const char* kParameterFill = "#fde68a";
constexpr const char* kInputFill = "#e5e7eb";
constexpr const char* kOpFill = "#dbeafe";
constexpr const char* kGradientColour = "#ea580c";
constexpr const char* kOverwriteColour = "#dc2626";
constexpr size_t kMaxEdgeLines = 6;

// A DOT string literal's contents: quotes and backslashes escaped, lines joined by "\n".
std::string quoted(const std::vector<std::string>& lines) {
  std::string s = "\"";
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) s += "\\n";
    for (char c : lines[i]) {
      if (c == '"' || c == '\\') s += '\\';
      s += c;
    }
  }
  return s + "\"";
}

std::string node_id(int32_t id) {  // p1, p2, ... for parameters (ids -1, -2, ...), v0, v1, ... for the rest
  std::string s = id < 0 ? "p" : "v";
  return s.append(std::to_string(id < 0 ? -id : id));
}

std::string node_line(const Entry& e) {
  std::string head = index_tag(e.index) + " " + e.label;  // "#4 x = gather", "#5 matmul", "#0 embedding"
  if (!e.op.empty()) head += (e.label.empty() ? "" : " = ") + e.op;
  std::vector<std::string> label = {head};
  label.push_back((e.op.empty() ? e.kind + " " : "") + shape_str(e.shape) + " " + e.dtype);
  label.push_back("value " + inline_tensor(e.value, 4));
  if (e.grad) label.push_back("grad " + inline_tensor(*e.grad, 4));
  std::string attrs;
  if (e.kind == "parameter")
    attrs = std::string("shape=box, style=\"rounded,filled,bold\", fillcolor=\"") + kParameterFill + "\"";
  else if (e.kind == "input")
    attrs = std::string("shape=box, style=\"filled,dashed\", fillcolor=\"") + kInputFill + "\"";
  else
    attrs = std::string("shape=ellipse, style=filled, fillcolor=\"") + kOpFill + "\"";
  return "  " + node_id(e.id) + " [" + attrs + ", label=" + quoted(label) + "];\n";
}

}  // namespace

std::string to_dot(const Tape& t) {
  // The events that flowed back along each edge, keyed by (input id, consuming node, slot).
  std::map<std::tuple<int32_t, int32_t, int>, std::vector<const Event*>> flowed;
  for (const Event& ev : t.events) flowed[{ev.to, ev.node, ev.input}].push_back(&ev);

  std::vector<std::string> caption = {t.title.empty() ? t.path : t.title,
                                      "mode " + t.mode() + " · yellow boxes: parameters · grey dashed boxes: inputs · "
                                      "blue ellipses: ops",
                                      "edge labels: the gradient that flowed back along them (orange), overwritten "
                                      "contributions in red"};
  std::string s = "digraph tape {\n";
  s += "  graph [rankdir=TB, fontname=\"Helvetica\", fontsize=11, labelloc=t, label=" + quoted(caption) + "];\n";
  s += "  node [fontname=\"Helvetica\", fontsize=10];\n";
  s += "  edge [fontname=\"Helvetica\", fontsize=9, arrowsize=0.7];\n";
  for (const Entry& e : t.values) s += node_line(e);

  for (const Entry& e : t.values) {
    for (size_t k = 0; k < e.inputs.size(); ++k) {
      const int32_t from = e.inputs[k];
      std::string attrs = e.inputs.size() > 1 ? "headlabel=\"" + std::to_string(k) + "\"" : "";  // the slot
      auto it = flowed.find({from, e.node, static_cast<int>(k)});
      if (it != flowed.end()) {
        const Entry& to = t.entry(from);
        std::vector<std::string> lines;
        bool lost = false;
        for (const Event* ev : it->second) {
          if (lines.size() == kMaxEdgeLines) {
            lines.push_back("… " + std::to_string(it->second.size() - kMaxEdgeLines) + " more");
            break;
          }
          const std::string where = part_name(to, *ev).empty() ? "" : part_name(to, *ev) + " ";
          if (ev->kind == EventKind::overwritten) {
            lost = true;
            lines.push_back(where + "OVERWRITTEN by " + inline_tensor(ev->contribution, 4) + ", lost " +
                            inline_tensor(*ev->discarded, 4));
          } else {
            lines.push_back(where + event_kind_name(ev->kind) + " " + inline_tensor(ev->contribution, 4));
          }
        }
        const char* colour = lost ? kOverwriteColour : kGradientColour;
        attrs += std::string(attrs.empty() ? "" : ", ") + "color=\"" + colour + "\", fontcolor=\"" + colour +
                 "\", penwidth=" + (lost ? "2.5" : "1.5") + ", label=" + quoted(lines);
      }
      s += "  " + node_id(from) + " -> " + node_id(e.id) + (attrs.empty() ? "" : " [" + attrs + "]") + ";\n";
    }
  }
  return s + "}\n";
}

}  // namespace tape
