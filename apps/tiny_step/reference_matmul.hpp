// The tiny step's matrix product: the Python reference's own arithmetic (docs/tiny_step.md,
// "Arithmetic"), kept in the app because it is a property of this path, not of the library's
// matmul. Each cell is the fsum of its products, each product rounded on its own
// (kernels::matmul_fsum, on the CPU and CUDA alike), forward and backward, so the trace matches the
// reference and CUDA's matches the CPU's, byte for byte; the library's ops::matmul is BLAS's
// arithmetic instead (fused multiply-adds, its own order: docs/design.md, "Arithmetic the kernels
// promise"). Recorded as the node "matmul", with the library's derivative (da = dy @ b^T,
// db = a^T @ dy), so tape dumps, the tape page and docs/teaching.md show it as that op.
#pragma once

#include "tapegrad/graph/graph.hpp"

namespace tiny {

// a (n, k) @ b (k, m) -> (n, m), f64
tapegrad::Var reference_matmul(tapegrad::Var a, tapegrad::Var b);

}  // namespace tiny
