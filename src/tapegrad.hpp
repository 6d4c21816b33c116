// tapegrad: the umbrella header a model includes.
//
//   tapegrad::Graph g;
//   auto E = g.parameter(table, "embedding");
//   auto loss = ops::cross_entropy(ops::gather(E, g.input(ids)), g.input(targets));
//   g.backward(loss);
//   optim::SGD{0.5}.step(g.parameters());
#pragma once

#include "graph/dtype.hpp"
#include "graph/error.hpp"
#include "graph/gradcheck.hpp"
#include "graph/graph.hpp"
#include "graph/parallel.hpp"
#include "graph/tape_dump.hpp"
#include "graph/tensor.hpp"
#include "ops/ops.hpp"
#include "optim/adamw.hpp"
#include "optim/sgd.hpp"
