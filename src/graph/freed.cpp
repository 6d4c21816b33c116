// What a backward freed (see freed.hpp).
//
// Note [recording after backward]
// A backward frees what the nodes it ran saved, unless it retains the graph, and marks them freed.
// The tape stays open: ops recorded after it (a metric, the next micro-batch) get nodes of their
// own, as in PyTorch, and a later backward runs them. It must not run a freed node, so before any
// gradient moves it follows the loss back through the tape and refuses, naming the node, a path
// that reaches one. The walk is paid only once something was freed.
#include "tapegrad/graph/freed.hpp"

#include <string>
#include <vector>

namespace tapegrad {

void check_not_freed(const Graph& g, int32_t loss) {
  if (loss < 0) return;  // a parameter as its own loss runs no node
  std::vector<bool> reached(g.value_count(), false);
  reached[static_cast<size_t>(loss)] = true;
  for (size_t i = g.nodes().size(); i-- > 0;) {
    const Node& n = g.nodes()[i];
    if (!reached[static_cast<size_t>(n.output)]) continue;
    if (n.freed)
      throw Error("[backward] this backward reaches node " + std::to_string(i) + " (" + n.op + ", value " +
                  std::to_string(n.output) + "), which an earlier backward() ran and freed; pass {.retain_graph = true} "
                  "to that backward() to run through it again");
    for (int k = 0; k < n.inputs.size(); ++k)
      if (n.inputs[k] >= 0) reached[static_cast<size_t>(n.inputs[k])] = true;
  }
}

void free_node(Node& n) {
  n.saved = {};
  n.freed = true;
}

}  // namespace tapegrad
