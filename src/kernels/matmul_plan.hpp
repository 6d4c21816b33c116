// How kernels::matmul's batched, broadcasting product becomes plain row-major GEMMs: the one
// planner both devices' matmul kernels (cpu/linalg.cpp, src/cuda/linalg.cu) run, so they cut the
// same product the same way.
//
// A plan is one GEMM, out (n, m) = op(a) (n, k) @ op(b) (k, m) with a and b's row lengths lda and
// ldb as stored (out's is m), repeated over up to four batch axes. Each batch axis has its size
// and, for a, b and out, the distance in elements between consecutive matrices along it: 0 where
// the tensor broadcasts along the axis. An axis where out's distance is 0 is summed into it: the
// products along it land in the same out matrix and add up, in index order.
#pragma once

#include <array>
#include <cstdint>

#include "tapegrad/tensor/tensor.hpp"

namespace tapegrad::kernels {

struct MatmulPlan {
  static constexpr int kMaxBatch = Shape::kMaxDims - 2;
  static constexpr int64_t kMaxBlas = 2147483647;  // BLAS and cuBLAS take int sizes

  int64_t n = 0, m = 0, k = 0;
  int64_t lda = 0, ldb = 0;
  bool ta = false, tb = false;
  int batch = 0;  // batch axes, outermost first; sizes above 1 only
  std::array<int64_t, kMaxBatch> size{}, stride_a{}, stride_b{}, stride_out{};

  // The GEMMs the batch holds (the product of the sizes); 0 when an axis is empty.
  int64_t products() const {
    int64_t p = 1;
    for (int i = 0; i < batch; ++i) p *= size[static_cast<size_t>(i)];
    return p;
  }
  bool empty() const { return n == 0 || m == 0; }
};

// The plan for kernels::matmul(a, ta, b, tb, out) of tensors of these shapes (its contract is in
// kernels.hpp). Checks every shape against the others and throws tapegrad::Error naming `op` when
// they do not fit, or when a size of a product to compute exceeds what BLAS takes. Consecutive
// batch axes that step evenly through all three tensors become one; the innermost folds into the
// GEMM's rows where a's matrices (not transposed) follow each other, b repeats and out's follow
// each other ((B, n, k) @ (k, m) is one (B*n, k) @ (k, m)), and into its inner size where out sums
// along it, a is stored transposed and b is not (the sum over i of a[i]^T @ b[i] for a (B, p, n)
// and b (B, p, m) is a^T @ b of their (B*p, n) and (B*p, m) stacks: a weight's gradient).
MatmulPlan plan_matmul(const char* op, const Shape& a, bool ta, const Shape& b, bool tb, const Shape& out);
// The same for tensors, whose dtypes must agree too (or be bf16 operands and an f32 out).
MatmulPlan plan_matmul(const char* op, const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& out);

}  // namespace tapegrad::kernels
