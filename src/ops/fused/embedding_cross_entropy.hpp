// A fused op: the cross-entropy of rows gathered from a table, as one node.
//
//   embedding_cross_entropy(table, ids, targets, reduction)
//     == cross_entropy(gather(table, ids), targets, reduction)
//   table (V, C) f64/f32, ids (B,) int, targets (B,) int -> () mean or sum, or (B,) none
//   dtable[ids[i]] += ((softmax(table[ids[i]]) - onehot(targets[i])) / divisor) * dloss
//
// The same values and gradients, bit for bit, as the two ops it replaces (tests/ops checks it);
// what differs is the work (Note [embedding cross-entropy] in the .cpp): on the CPU each distinct
// id's row is read and its softmax computed once, no (B, C) logits or dlogits tensor is made, and
// the table's gradient comes out row-sparse (graph.hpp's RowSparse), so an optimizer touches only
// the rows the ids named. On CUDA it runs the two ops' kernels inside one node.
#pragma once

#include "tapegrad/ops/ops.hpp"

namespace tapegrad::ops {

Var embedding_cross_entropy(Var table, Var ids, Var targets, Reduction reduction = Reduction::mean);

}  // namespace tapegrad::ops
