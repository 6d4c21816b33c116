// The planner of kernels::matmul (matmul_plan.hpp).
#include "tapegrad/kernels/matmul_plan.hpp"

#include <algorithm>
#include <string>

namespace tapegrad::kernels {

namespace {

// Distances between consecutive matrices along each of t's batch axes, counted from the right
// (index 0 is the innermost batch axis); 0 where t has extent 1 there or no such axis.
std::array<int64_t, MatmulPlan::kMaxBatch> batch_strides(const Shape& t) {
  std::array<int64_t, MatmulPlan::kMaxBatch> s{};
  int64_t step = t[t.ndim() - 2] * t[t.ndim() - 1];
  for (int j = 0; j < t.ndim() - 2; ++j) {
    const int64_t extent = t[t.ndim() - 3 - j];
    s[static_cast<size_t>(j)] = extent == 1 ? 0 : step;
    step *= extent;  // fits: the strides of a Shape's extents do (shape.hpp)
  }
  return s;
}

int64_t batch_extent(const Shape& t, int j) { return j < t.ndim() - 2 ? t[t.ndim() - 3 - j] : 1; }

[[noreturn]] void refuse(const char* op, const Shape& a, bool ta, const Shape& b, bool tb, const Shape& out,
                         const std::string& why) {
  throw Error(std::string("[") + op + "] cannot compute a " + a.str() + (ta ? " transposed" : "") + " @ b " + b.str() +
              (tb ? " transposed" : "") + " into out " + out.str() + ": " + why);
}

}  // namespace

MatmulPlan plan_matmul(const char* op, const Shape& a, bool ta, const Shape& b, bool tb, const Shape& out) {
  auto fail = [&](const std::string& why) { refuse(op, a, ta, b, tb, out, why); };
  if (a.ndim() < 2 || b.ndim() < 2 || out.ndim() < 2) fail("the kernel takes matrices (2 dimensions or more)");

  MatmulPlan p;
  p.ta = ta;
  p.tb = tb;
  p.n = out[out.ndim() - 2];
  p.m = out[out.ndim() - 1];
  p.lda = a[a.ndim() - 1];
  p.ldb = b[b.ndim() - 1];
  const int64_t a_rows = ta ? p.lda : a[a.ndim() - 2], a_inner = ta ? a[a.ndim() - 2] : p.lda;
  const int64_t b_inner = tb ? p.ldb : b[b.ndim() - 2], b_cols = tb ? b[b.ndim() - 2] : p.ldb;
  if (a_inner != b_inner)
    fail("inner sizes " + std::to_string(a_inner) + " and " + std::to_string(b_inner) + " differ");
  if (a_rows != p.n || b_cols != p.m)
    fail("the product is " + std::to_string(a_rows) + " x " + std::to_string(b_cols) + " per matrix");
  p.k = a_inner;

  // the batch axes, outermost first, without those of size 1
  const std::array<int64_t, MatmulPlan::kMaxBatch> sa = batch_strides(a), sb = batch_strides(b), so = batch_strides(out);
  const int axes = std::max({a.ndim(), b.ndim(), out.ndim()}) - 2;
  int64_t products = 1;
  for (int j = axes - 1; j >= 0; --j) {
    const int64_t ea = batch_extent(a, j), eb = batch_extent(b, j), eo = batch_extent(out, j);
    const int64_t extent = ea != 1 ? ea : eb != 1 ? eb : eo;
    if ((ea != 1 && ea != extent) || (eb != 1 && eb != extent) || (eo != 1 && eo != extent))
      fail("batch axis " + std::to_string(-1 - j) + " has sizes " + std::to_string(ea) + ", " + std::to_string(eb) +
           " and " + std::to_string(eo) + " (each must be 1 or the same size)");
    if (extent == 1) continue;
    if (__builtin_mul_overflow(products, extent, &products)) fail("the batch holds more than 2^63 products");
    const auto at = static_cast<size_t>(j);
    auto i = static_cast<size_t>(p.batch);
    // merge with the axis outside it when all three step evenly across both
    if (p.batch > 0 && p.stride_a[i - 1] == sa[at] * extent && p.stride_b[i - 1] == sb[at] * extent &&
        p.stride_out[i - 1] == so[at] * extent) {
      --i;
      p.size[i] *= extent;
    } else {
      p.size[i] = extent;
      ++p.batch;
    }
    p.stride_a[i] = sa[at];
    p.stride_b[i] = sb[at];
    p.stride_out[i] = so[at];
  }

  // fold the innermost batch axis into the GEMM's rows or its inner size while one fits
  while (p.batch > 0 && !p.empty()) {
    const auto last = static_cast<size_t>(p.batch - 1);
    const int64_t s = p.size[last];
    if (!ta && p.stride_b[last] == 0 && p.stride_a[last] == p.n * p.lda && p.stride_out[last] == p.n * p.m &&
        p.n * s <= MatmulPlan::kMaxBlas) {
      p.n *= s;
    } else if (ta && !tb && p.stride_out[last] == 0 && p.stride_a[last] == p.k * p.lda &&
               p.stride_b[last] == p.k * p.ldb && p.k * s <= MatmulPlan::kMaxBlas) {
      p.k *= s;
    } else {
      break;
    }
    --p.batch;
  }

  if (!p.empty() && p.k > 0 && products > 0)  // else no BLAS call: zeros or nothing
    for (const int64_t size : {p.n, p.m, p.k, p.lda, p.ldb})
      if (size > MatmulPlan::kMaxBlas)
        fail("BLAS takes sizes below 2^31, and this product needs " + std::to_string(size));
  return p;
}

MatmulPlan plan_matmul(const char* op, const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& out) {
  const bool mixed = a.dtype() == DType::bf16 && b.dtype() == DType::bf16 &&
                     (out.dtype() == DType::f32 || out.dtype() == DType::bf16);
  const bool same = a.dtype() == b.dtype() && a.dtype() == out.dtype() &&
                    (a.dtype() == DType::f32 || a.dtype() == DType::f64);
  if (!mixed && !same)
    refuse(op, a.shape(), ta, b.shape(), tb, out.shape(),
           std::string("dtypes do not fit (") + dtype_name(a.dtype()) + ", " + dtype_name(b.dtype()) + ", " +
               dtype_name(out.dtype()) + "; the products take one float dtype, or bf16 operands into f32 or bf16)");
  return plan_matmul(op, a.shape(), ta, b.shape(), tb, out.shape());
}

}  // namespace tapegrad::kernels
