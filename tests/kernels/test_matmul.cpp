// The matrix-product kernels: kernels::matmul's plan (merged and folded batch axes), its batched,
// broadcast and summed products against a plain loop for every transpose, its refusals, and
// matmul_fsum's correctly rounded sums.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "tapegrad/kernels/cpu/exact_sum.hpp"
#include "tapegrad/kernels/kernels.hpp"
#include "tapegrad/kernels/matmul_plan.hpp"
#include "messages.hpp"

using namespace tapegrad;
using testing::message_of;

namespace {

std::mt19937_64 rng(9001);

Tensor random(const Shape& s, DType t) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> v(static_cast<size_t>(s.numel()));
  for (double& x : v) x = u(rng);
  return Tensor::from_doubles(v, s, t);
}

// Row-major strides of s (elements), extents of 1 included.
std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(static_cast<size_t>(s.ndim()), 1);
  for (int i = s.ndim() - 2; i >= 0; --i) st[static_cast<size_t>(i)] = st[static_cast<size_t>(i + 1)] * s[i + 1];
  return st;
}

// kernels::matmul's contract as a plain loop in double: every product of the broadcast batch of
// a, b and out added into its out matrix.
std::vector<double> reference(const Tensor& a, bool ta, const Tensor& b, bool tb, const Shape& out) {
  const std::vector<double> A = a.to_doubles(), B = b.to_doubles();
  const int nd = std::max({a.ndim(), b.ndim(), out.ndim()});
  auto extent = [&](const Shape& s, int axis) { return axis - (nd - s.ndim()) >= 0 ? s[axis - (nd - s.ndim())] : 1; };
  std::vector<int64_t> batch;
  for (int axis = 0; axis < nd - 2; ++axis)
    batch.push_back(std::max({extent(a.shape(), axis), extent(b.shape(), axis), extent(out, axis)}));
  const std::vector<int64_t> sa = strides_of(a.shape()), sb = strides_of(b.shape()), so = strides_of(out);
  const int64_t n = out[out.ndim() - 2], m = out[out.ndim() - 1], k = ta ? a.dim(a.ndim() - 2) : a.dim(a.ndim() - 1);
  const int64_t lda = a.dim(a.ndim() - 1), ldb = b.dim(b.ndim() - 1);
  std::vector<double> O(static_cast<size_t>(out.numel()), 0.0);
  int64_t count = 1;
  for (int64_t e : batch) count *= e;
  for (int64_t flat = 0; flat < count; ++flat) {
    int64_t rest = flat, oa = 0, ob = 0, oo = 0;
    for (int axis = nd - 3; axis >= 0; --axis) {
      const int64_t at = rest % batch[static_cast<size_t>(axis)];
      rest /= batch[static_cast<size_t>(axis)];
      auto offset = [&](const Shape& s, const std::vector<int64_t>& st) {
        const int i = axis - (nd - s.ndim());
        return i >= 0 && s[i] != 1 ? at * st[static_cast<size_t>(i)] : 0;
      };
      oa += offset(a.shape(), sa);
      ob += offset(b.shape(), sb);
      oo += offset(out, so);
    }
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < m; ++j) {
        double acc = 0.0;
        for (int64_t p = 0; p < k; ++p)
          acc += A[static_cast<size_t>(oa + (ta ? p * lda + i : i * lda + p))] *
                 B[static_cast<size_t>(ob + (tb ? j * ldb + p : p * ldb + j))];
        O[static_cast<size_t>(oo + i * m + j)] += acc;
      }
  }
  return O;
}

Shape with_matrix(std::vector<int64_t> batch, int64_t rows, int64_t cols) {
  batch.push_back(rows);
  batch.push_back(cols);
  return Shape(batch.begin(), batch.end());
}

}  // namespace

TEST_CASE("matmul's plan: even batch axes merge, a shared weight folds into rows, a summed axis into k") {
  const DType t = DType::f32;
  // (4, 8, 64, 32) @ (32, 16): one (2048, 32) @ (32, 16)
  kernels::MatmulPlan p = kernels::plan_matmul("matmul", Tensor::empty({4, 8, 64, 32}, t), false,
                                               Tensor::empty({32, 16}, t), false, Tensor::empty({4, 8, 64, 16}, t));
  CHECK(p.batch == 0);
  CHECK(p.n == 2048);
  CHECK(p.k == 32);
  // the weight's gradient: sum over (4, 8) of x^T @ dy is one (32, 2048) @ (2048, 16)
  p = kernels::plan_matmul("matmul", Tensor::empty({4, 8, 64, 32}, t), true, Tensor::empty({4, 8, 64, 16}, t), false,
                           Tensor::empty({32, 16}, t));
  CHECK(p.batch == 0);
  CHECK(p.n == 32);
  CHECK(p.k == 2048);
  // (2, 3, 5, 4) @ (2, 3, 4, 6): the two batch axes are one of 6
  p = kernels::plan_matmul("matmul", Tensor::empty({2, 3, 5, 4}, t), false, Tensor::empty({2, 3, 4, 6}, t), false,
                           Tensor::empty({2, 3, 5, 6}, t));
  CHECK(p.batch == 1);
  CHECK(p.size[0] == 6);
  CHECK(p.stride_a[0] == 20);
  CHECK(p.stride_out[0] == 30);
  // (2, 1, 5, 4) @ (3, 4, 6): a repeats along the inner axis, b along the outer one
  p = kernels::plan_matmul("matmul", Tensor::empty({2, 1, 5, 4}, t), false, Tensor::empty({3, 4, 6}, t), false,
                           Tensor::empty({2, 3, 5, 6}, t));
  CHECK(p.batch == 2);
  CHECK(p.stride_a[0] == 20);
  CHECK(p.stride_a[1] == 0);
  CHECK(p.stride_b[0] == 0);
  CHECK(p.stride_b[1] == 24);
  CHECK(p.products() == 6);
}

TEST_CASE("matmul: batched, broadcast and summed products equal a plain loop, every transpose, f32 and f64") {
  std::uniform_int_distribution<int> pick(0, 99);
  for (int trial = 0; trial < 300; ++trial) {
    const DType t = trial % 2 ? DType::f32 : DType::f64;
    const bool ta = trial % 4 >= 2, tb = trial % 8 >= 4;
    const int axes = pick(rng) % 4;
    std::vector<int64_t> ba, bb, bo;
    for (int axis = 0; axis < axes; ++axis) {
      const int64_t e = 1 + pick(rng) % 3;
      // each tensor has the axis at its size, at 1, or (outermost axes only) not at all
      auto side = [&](std::vector<int64_t>& dims) {
        const int c = pick(rng) % 3;
        if (c == 2 && dims.empty()) return;
        dims.push_back(c == 1 ? 1 : e);
      };
      side(ba);
      side(bb);
      side(bo);
    }
    const int64_t n = pick(rng) % 7 == 0 ? 0 : 1 + pick(rng) % 40, m = 1 + pick(rng) % 40;
    const int64_t k = pick(rng) % 9 == 0 ? 0 : 1 + pick(rng) % 40;
    const Tensor a = random(with_matrix(ba, ta ? k : n, ta ? n : k), t);
    const Tensor b = random(with_matrix(bb, tb ? m : k, tb ? k : m), t);
    Tensor out = Tensor::from_doubles(std::vector<double>(static_cast<size_t>(with_matrix(bo, n, m).numel()), NAN),
                                      with_matrix(bo, n, m), t);
    CAPTURE(a.shape().str());
    CAPTURE(b.shape().str());
    CAPTURE(out.shape().str());
    CAPTURE(ta);
    CAPTURE(tb);
    kernels::matmul(a, ta, b, tb, out);
    const std::vector<double> want = reference(a, ta, b, tb, out.shape()), have = out.to_doubles();
    const double tol = t == DType::f64 ? 1e-12 : 1e-4;
    for (size_t i = 0; i < want.size(); ++i) REQUIRE(std::fabs(have[i] - want[i]) <= tol * (1.0 + std::fabs(want[i])));
    // accumulate: out += the product, onto what out held
    const Tensor before = random(out.shape(), t);
    Tensor added = before.clone();
    kernels::matmul(a, ta, b, tb, added, /*accumulate=*/true);
    const std::vector<double> base = before.to_doubles(), sum = added.to_doubles();
    for (size_t i = 0; i < want.size(); ++i)
      REQUIRE(std::fabs(sum[i] - (base[i] + want[i])) <= tol * (1.0 + std::fabs(base[i] + want[i])));
  }
}

TEST_CASE("matmul refuses shapes that do not fit, naming them") {
  const DType t = DType::f64;
  Tensor out = Tensor::empty({4, 5}, t);
  CHECK(message_of([&] { kernels::matmul(Tensor::empty({4, 3}, t), false, Tensor::empty({2, 5}, t), false, out); }) ==
        "[matmul] cannot compute a (4, 3) @ b (2, 5) into out (4, 5): inner sizes 3 and 2 differ");
  CHECK(message_of([&] { kernels::matmul(Tensor::empty({4, 3}, t), true, Tensor::empty({4, 5}, t), false, out); }) ==
        "[matmul] cannot compute a (4, 3) transposed @ b (4, 5) into out (4, 5): the product is 3 x 5 per matrix");
  Tensor batched = Tensor::empty({2, 3, 4, 5}, t);
  CHECK(message_of([&] {
          kernels::matmul(Tensor::empty({2, 4, 3}, t), false, Tensor::empty({3, 5}, t), false, batched);
        }) == "[matmul] cannot compute a (2, 4, 3) @ b (3, 5) into out (2, 3, 4, 5): batch axis -1 has sizes 2, 1 and 3 "
              "(each must be 1 or the same size)");
  CHECK(message_of([&] { kernels::matmul(Tensor::empty({3}, t), false, Tensor::empty({3, 5}, t), false, out); }) ==
        "[matmul] cannot compute a (3,) @ b (3, 5) into out (4, 5): the kernel takes matrices (2 dimensions or more)");
  CHECK(message_of([&] {
          kernels::matmul(Tensor::empty({4, 3}, DType::f32), false, Tensor::empty({3, 5}, t), false, out);
        }) == "[matmul] cannot compute a (4, 3) @ b (3, 5) into out (4, 5): dtypes do not fit (f32, f64, f64; the "
              "products take one float dtype, or bf16 operands into f32 or bf16)");
  const int64_t huge = int64_t{1} << 31;  // shapes only: no tensor that large is made
  CHECK(message_of([&] { (void)kernels::plan_matmul("matmul", Shape{1, huge}, false, Shape{huge, 1}, false, Shape{1, 1}); }) ==
        "[matmul] cannot compute a (1, 2147483648) @ b (2147483648, 1) into out (1, 1): BLAS takes sizes below 2^31, "
        "and this product needs 2147483648");
  CHECK_NOTHROW((void)kernels::plan_matmul("matmul", Shape{0, huge}, false, Shape{huge, 1}, false, Shape{0, 1}));
  CHECK(message_of([&] {
          (void)kernels::plan_matmul("matmul", Shape{int64_t{1} << 32, 1, 1, 1}, false, Shape{1, int64_t{1} << 32, 1, 1},
                                     false, Shape{1, 1});
        }) == "[matmul] cannot compute a (4294967296, 1, 1, 1) @ b (1, 4294967296, 1, 1) into out (1, 1): the batch "
              "holds more than 2^63 products");
  CHECK(message_of([&] {
          kernels::matmul_fsum(Tensor::empty({4, 3}, DType::f32), false, Tensor::empty({3, 5}, DType::f32), false, out);
        }) == "[matmul_fsum] is an f64 kernel (the reference's arithmetic), got f32");
  CHECK(message_of([&] { kernels::matmul_fsum(Tensor::empty({2, 4, 3}, t), false, Tensor::empty({3, 5}, t), false, out); }) ==
        "[matmul_fsum] takes 2-D matrices, got a (2, 4, 3), b (3, 5) and out (4, 5)");
}

TEST_CASE("empty products: an empty inner size and an empty batch to sum over give zeros") {
  Tensor out = Tensor::from_doubles({NAN, NAN, NAN, NAN, NAN, NAN}, Shape{2, 3}, DType::f64);
  kernels::matmul(Tensor::empty({2, 0}, DType::f64), false, Tensor::empty({0, 3}, DType::f64), false, out);
  CHECK(out.to_doubles() == std::vector<double>(6, 0.0));
  Tensor summed = Tensor::from_doubles({NAN, NAN, NAN, NAN, NAN, NAN}, Shape{2, 3}, DType::f32);
  kernels::matmul(Tensor::empty({0, 4, 2}, DType::f32), true, Tensor::empty({0, 4, 3}, DType::f32), false, summed);
  CHECK(summed.to_doubles() == std::vector<double>(6, 0.0));
  // accumulating an empty sum leaves out as it was
  Tensor kept = Tensor::from_doubles({1, 2, 3, 4, 5, 6}, Shape{2, 3}, DType::f64);
  kernels::matmul(Tensor::empty({2, 0}, DType::f64), false, Tensor::empty({0, 3}, DType::f64), false, kept, true);
  CHECK(kept.to_doubles() == std::vector<double>{1, 2, 3, 4, 5, 6});
}

TEST_CASE("matmul with accumulate, bf16 operands: into f32 the f32 product added; into bf16 the widened sum rounded") {
  const Tensor a = random({5, 7}, DType::f32), b = random({7, 3}, DType::f32), c = random({5, 3}, DType::f32);
  Tensor ab = Tensor::empty({5, 7}, DType::bf16), bb = Tensor::empty({7, 3}, DType::bf16);
  kernels::cast(a, ab);
  kernels::cast(b, bb);
  Tensor wa = Tensor::empty({5, 7}, DType::f32), wb = Tensor::empty({7, 3}, DType::f32);
  kernels::cast(ab, wa);
  kernels::cast(bb, wb);
  Tensor want = c.clone(), got = c.clone();
  kernels::matmul(wa, false, wb, false, want, true);
  kernels::matmul(ab, false, bb, false, got, true);
  CHECK(got.to_doubles() == want.to_doubles());  // the same f32 call on the widened operands
  Tensor c16 = Tensor::empty({5, 3}, DType::bf16), want16 = Tensor::empty({5, 3}, DType::bf16);
  kernels::cast(c, c16);
  Tensor wide = Tensor::empty({5, 3}, DType::f32);
  kernels::cast(c16, wide);
  kernels::matmul(wa, false, wb, false, wide, true);
  kernels::cast(wide, want16);
  kernels::matmul(ab, false, bb, false, c16, true);
  CHECK(c16.to_doubles() == want16.to_doubles());
}

TEST_CASE("matmul_bias and its gradients: the bias added to the f32 sums and rounded once; dy's column sums; errors") {
  auto bf16 = [](const Tensor& t) {
    Tensor out = Tensor::empty(t.shape(), DType::bf16);
    kernels::cast(t, out);
    return out;
  };
  const Tensor x = bf16(random({5, 7}, DType::f32)), w = bf16(random({3, 7}, DType::f32));
  for (DType bias_type : {DType::f32, DType::bf16}) {
    const Tensor bias = bias_type == DType::f32 ? random({3}, DType::f32) : bf16(random({3}, DType::f32));
    Tensor got = Tensor::empty({5, 3}, DType::bf16), sums = Tensor::empty({5, 3}, DType::f32);
    kernels::matmul_bias(x, w, bias, got);
    kernels::matmul(x, false, w, true, sums);
    std::vector<double> want = sums.to_doubles();
    const std::vector<double> b = bias.to_doubles();
    for (size_t i = 0; i < want.size(); ++i) want[i] = static_cast<float>(want[i]) + static_cast<float>(b[i % 3]);
    const Tensor rounded = bf16(Tensor::from_doubles(want, Shape{5, 3}, DType::f32));
    CHECK(got.to_doubles() == rounded.to_doubles());
  }
  Tensor out = Tensor::empty({5, 3}, DType::bf16);
  CHECK(testing::message_of([&] { kernels::matmul_bias(x, w, random({4}, DType::f32), out); }) ==
        "[linear] x (5, 7) @ w (3, 7)^T + bias (4,) does not make out (5, 3)");
  CHECK(testing::message_of([&] { kernels::matmul_bias(x, w, random({3}, DType::f64), out); }) ==
        "[linear] the bias epilogue takes bf16 x, w and out and an f32 or bf16 bias, got bf16, bf16, bf16 and f64");
  // the gradients: dW = dy^T x and db = dy's column sums, as matmul and sum_rows over dy widened give them
  const Tensor dy = bf16(random({5, 3}, DType::f32));
  Tensor dw = Tensor::empty({3, 7}, DType::f32), db = Tensor::empty({3}, DType::f32);
  Tensor want_dw = Tensor::empty({3, 7}, DType::f32), want_db = Tensor::empty({3}, DType::f32);
  Tensor wide = Tensor::empty({5, 3}, DType::f32);
  kernels::matmul_weight_bias_grad(dy, x, dw, db);
  kernels::matmul(dy, true, x, false, want_dw);
  kernels::cast(dy, wide);
  kernels::sum_rows(wide, want_db);
  CHECK(dw.to_doubles() == want_dw.to_doubles());
  CHECK(db.to_doubles() == want_db.to_doubles());
  CHECK(testing::message_of([&] { kernels::matmul_weight_bias_grad(dy, x, dw, want_dw); }) ==
        "[linear] dy (5, 3) and x (5, 7) do not make the weight's gradient (3, 7) and the bias's (3, 7)");
  Tensor dw16 = Tensor::empty({3, 7}, DType::bf16);
  CHECK(testing::message_of([&] { kernels::matmul_weight_bias_grad(dy, x, dw16, db); }) ==
        "[linear] the bias-gradient epilogue takes bf16 dy and x and f32 gradients, got bf16, bf16, bf16 and f32");
}

TEST_CASE("matmul_fsum: each cell the correctly rounded sum of its rounded products, where BLAS's order is not") {
  // row (1e16, 1, -1e16) . (1, 1, 1): the exact sum is 1; adding in order loses the 1
  const Tensor a = Tensor::from_doubles({1e16, 1, -1e16, 0.1, 0.2, 0.3}, Shape{2, 3}, DType::f64);
  const Tensor b = Tensor::from_doubles({1, 1, 1, 1, 1, -2}, Shape{3, 2}, DType::f64);
  Tensor out = Tensor::empty({2, 2}, DType::f64);
  kernels::matmul_fsum(a, false, b, false, out);
  const std::vector<double> o = out.to_doubles();
  CHECK(o[0] == 1.0);
  CHECK(o[1] == cpu::exact_sum(std::vector<double>{1e16 * 1, 1 * 1, -1e16 * -2}.data(), 3));
  CHECK(o[2] == cpu::exact_sum(std::vector<double>{0.1, 0.2, 0.3}.data(), 3));
  // transposed operands read the same cells: a^T stored (3, 2), b^T stored (2, 3)
  const Tensor at = Tensor::from_doubles({1e16, 0.1, 1, 0.2, -1e16, 0.3}, Shape{3, 2}, DType::f64);
  const Tensor bt = Tensor::from_doubles({1, 1, 1, 1, 1, -2}, Shape{2, 3}, DType::f64);
  Tensor out_t = Tensor::empty({2, 2}, DType::f64);
  kernels::matmul_fsum(at, true, bt, true, out_t);
  CHECK(out_t.to_doubles() == o);
}
