// What a backward freed: the nodes it ran, their saved tensors dropped (Node::freed), unless it
// retained the graph. The tape stays open after it (Note [recording after backward] in freed.cpp).
#pragma once

#include <cstdint>

#include "tapegrad/graph/graph.hpp"

namespace tapegrad {

// Refuses, naming the node, a backward from `loss` whose path back through g's tape reaches a node
// an earlier backward freed; called by Graph::backward before any gradient moves.
void check_not_freed(const Graph& g, int32_t loss);

// Drops what a node saved and marks it freed: the backward that ran it was the last to read it.
void free_node(Node& n);

}  // namespace tapegrad
