// tapegrad: the umbrella header a model includes.
//
//   tapegrad::Graph g;
//   auto E = g.parameter(table, "embedding");
//   auto loss = ops::cross_entropy(ops::gather(E, g.input(ids)), g.input(targets));
//   g.backward(loss);
//   optim::SGD{0.5}.step(g.parameters());
#pragma once

#include "tapegrad/tensor/dtype.hpp"
#include "tapegrad/tensor/error.hpp"
#include "tapegrad/graph/gradcheck.hpp"
#include "tapegrad/graph/function.hpp"
#include "tapegrad/graph/graph.hpp"
#include "tapegrad/tensor/parallel.hpp"
#include "tapegrad/tape/tape_dump.hpp"
#include "tapegrad/tensor/tensor.hpp"
#include "tapegrad/ops/fused/attention.hpp"
#include "tapegrad/ops/fused/embedding_cross_entropy.hpp"
#include "tapegrad/ops/fused/linear_cross_entropy.hpp"
#include "tapegrad/ops/fused/mlp.hpp"
#include "tapegrad/ops/op_table.hpp"
#include "tapegrad/ops/ops.hpp"
#include "tapegrad/ops/value_embed.hpp"
#include "tapegrad/optim/adam.hpp"
#include "tapegrad/optim/adamw.hpp"
#include "tapegrad/optim/sgd.hpp"
#include "tapegrad/optim/sparse.hpp"
// optimizers' schedules and gradient transforms
#include "tapegrad/optim/clip.hpp"
#include "tapegrad/optim/schedule.hpp"
// the layer library
#include "tapegrad/nn/conv.hpp"
#include "tapegrad/nn/init.hpp"
#include "tapegrad/nn/layers.hpp"
#include "tapegrad/nn/module.hpp"
#include "tapegrad/nn/recurrent.hpp"
#include "tapegrad/nn/sequential.hpp"
#include "tapegrad/nn/state_dict.hpp"
#include "tapegrad/nn/stateless.hpp"
#include "tapegrad/dist/comm.hpp"
#include "tapegrad/dist/data_parallel.hpp"
