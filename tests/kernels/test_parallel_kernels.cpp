// Every CPU kernel that splits its loop over the intra-op threads gives the same bits with 1, 2, 3
// and 4 threads (src/tensor/parallel.hpp's rule), on inputs large enough to take the split: f32 and
// f64, repeated rows and ids, zero and nonzero AdamW rows, tails that are not whole vectors.
#include <doctest/doctest.h>

#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tapegrad/tensor/parallel.hpp"
#include "tapegrad/kernels/kernels.hpp"
#include "op_cases.hpp"

using namespace tapegrad;

namespace {

std::mt19937_64 rng(4242);

Tensor random(Shape s, DType t, double lo = -1.0, double hi = 1.0) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(static_cast<size_t>(s.numel()));
  for (double& x : v) x = u(rng);
  return Tensor::from_doubles(v, s, t);
}

Tensor random_ids(int64_t count, int64_t rows, int64_t distinct) {
  std::uniform_int_distribution<int64_t> pick(0, distinct - 1);
  std::vector<int32_t> ids(static_cast<size_t>(count));
  for (int32_t& id : ids) id = static_cast<int32_t>((pick(rng) * 7919) % rows);
  return Tensor::from_vector(ids, Shape{count});
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

// Runs `kernel` (which returns its outputs) with 1 thread, then 2, 3 and 4, and checks every output
// has the 1-thread bytes.
void check_thread_counts(const std::string& what, const std::function<std::vector<Tensor>()>& kernel) {
  const int before = num_threads();
  set_num_threads(1);
  const std::vector<Tensor> want = kernel();
  for (int threads : {2, 3, 4}) {
    set_num_threads(threads);
    const std::vector<Tensor> have = kernel();
    REQUIRE(have.size() == want.size());
    for (size_t k = 0; k < want.size(); ++k) {
      CAPTURE(what);
      CAPTURE(threads);
      CAPTURE(k);
      CHECK(same_bytes(have[k], want[k]));
    }
  }
  set_num_threads(before);
}

}  // namespace

TEST_CASE("elementwise kernels: the same bits for every thread count") {
  for (DType t : {DType::f32, DType::f64}) {
    const Shape big{300007};  // > 1 MiB in f32: the streaming kernels split too; not a multiple of 16
    const Tensor a = random(big, t), b = random(big, t, 0.5, 2.0);
    for (kernels::Unary op : {kernels::Unary::neg, kernels::Unary::exp, kernels::Unary::log, kernels::Unary::tanh,
                              kernels::Unary::relu}) {
      check_thread_counts(std::string("unary ") + kernels::unary_name(op), [&] {
        Tensor y = Tensor::empty(big, t), dx = Tensor::empty(big, t);
        kernels::unary(op, b, y);
        kernels::unary_backward(op, b, y, a, dx);
        return std::vector<Tensor>{y, dx};
      });
    }
    for (kernels::Binary op : {kernels::Binary::add, kernels::Binary::sub, kernels::Binary::mul, kernels::Binary::div}) {
      check_thread_counts(std::string("binary ") + kernels::binary_name(op), [&] {
        Tensor out = Tensor::empty(big, t);
        kernels::binary(op, a, b, out);
        return std::vector<Tensor>{out};
      });
    }
    check_thread_counts("fill, scale, sgd, zeros, clone", [&] {
      Tensor filled = Tensor::empty(big, t), scaled = Tensor::empty(big, t), p = a.clone();
      kernels::fill(filled, 0.1);
      kernels::scale(a, 1.0 / 3.0, scaled);
      kernels::sgd_step(p, b, 0.3);
      return std::vector<Tensor>{filled, scaled, p, Tensor::zeros(big, t), b.clone()};
    });
  }
}

TEST_CASE("AdamW: the same bits for every thread count, used and unused rows mixed") {
  const int64_t rows = 300, d = 256;
  const Shape shape{rows, d};
  const Tensor w = random(shape, DType::f32);
  Tensor g = random(shape, DType::f32, -1e-3, 1e-3), m = random(shape, DType::f32, -1e-3, 1e-3),
         v = random(shape, DType::f32, 0.0, 1e-6);
  for (int64_t r = 0; r < rows; ++r) {
    if (r % 3 == 0) continue;  // rows with a gradient and moments; the others all zero, like an
    std::memset(g.mutable_data<float>() + r * d, 0, d * sizeof(float));  // embedding's unused rows
    if (r % 3 == 1) {
      std::memset(m.mutable_data<float>() + r * d, 0, d * sizeof(float));
      std::memset(v.mutable_data<float>() + r * d, 0, d * sizeof(float));
    }
  }
  kernels::AdamWScalars s{0.1f, 0.9f, 0.95f, 1e-8f, 0.01f, 0.1f / 0.1f, 0.2236068f};
  check_thread_counts("adamw", [&] {
    Tensor w2 = w.clone(), m2 = m.clone(), v2 = v.clone();
    for (int step = 0; step < 3; ++step) kernels::adamw_step(w2, g, m2, v2, s);
    return std::vector<Tensor>{w2, m2, v2};
  });
}

TEST_CASE("matrix kernels: the same bits for every thread count") {
  for (DType t : {DType::f32, DType::f64}) {
    const Tensor a = random(Shape{70, 48}, t), b = random(Shape{48, 90}, t), bt = random(Shape{90, 48}, t);
    const Tensor big = random(Shape{700, 400}, t), bias = random(Shape{400}, t);
    check_thread_counts("matmul, add_row, sum_rows", [&] {
      Tensor ab = Tensor::empty(Shape{70, 90}, t), abt = Tensor::empty(Shape{70, 90}, t),
             atb = Tensor::empty(Shape{48, 48}, t), sum = Tensor::empty(Shape{400}, t),
             added = Tensor::empty(Shape{700, 400}, t);
      kernels::matmul(a, false, b, false, ab);
      kernels::matmul(a, false, bt, true, abt);
      kernels::matmul(a, true, a, false, atb);
      kernels::add_row(big, bias, added);
      kernels::sum_rows(big, sum);
      return std::vector<Tensor>{ab, abt, atb, added, sum};
    });
  }
}

TEST_CASE("row kernels: the same bits for every thread count, repeated rows and ids included") {
  for (DType t : {DType::f32, DType::f64}) {
    const int64_t vocab = 300, d = 261, batch = 1100;  // > 1 MiB of rows in f32; 261 leaves a tail
    Tensor table = random(Shape{vocab, d}, t, -4.0, 4.0);
    if (t == DType::f32) table.mutable_data<float>()[5 * d + 7] = -100.0f;  // tiny exponentials in some rows
    const Tensor ids = random_ids(batch, vocab, 40);  // 40 distinct rows, each repeated
    const Tensor targets = random_ids(batch, d, d);
    const Tensor rows = random(Shape{batch, d}, t);
    const Tensor dloss = random(Shape{}, t, 0.5, 1.5), per_row = random(Shape{batch}, t);
    check_thread_counts("gather, cross-entropy and their backwards", [&] {
      Tensor logits = Tensor::empty(Shape{batch, d}, t), probs = Tensor::empty(Shape{batch, d}, t);
      Tensor losses = Tensor::empty(Shape{batch}, t);
      kernels::gather_rows(table, ids, logits);
      kernels::cross_entropy(logits, targets, probs, losses);
      Tensor dz = Tensor::empty(Shape{batch, d}, t), dz_rows = Tensor::empty(Shape{batch, d}, t);
      kernels::cross_entropy_backward(probs, targets, dloss, static_cast<double>(batch), dz);
      kernels::cross_entropy_backward(probs, targets, per_row, 3.0, dz_rows);
      Tensor in_place = probs.clone();  // dlogits over the probabilities gives the same bits
      kernels::cross_entropy_backward(in_place, targets, dloss, static_cast<double>(batch), in_place);
      CHECK(same_bytes(in_place, dz));
      Tensor added = table.clone(), written = table.clone();
      Tensor fresh = Tensor::empty(Shape{vocab, d}, t), fresh_written = Tensor::empty(Shape{vocab, d}, t);
      kernels::scatter_rows(added, ids, rows, false);
      kernels::scatter_rows(written, ids, rows, true);
      kernels::scatter_rows_fresh(fresh, ids, rows, false);
      kernels::scatter_rows_fresh(fresh_written, ids, rows, true);
      Tensor softmax = Tensor::empty(Shape{batch, d}, t), dsoftmax = Tensor::empty(Shape{batch, d}, t);
      kernels::softmax_rows(logits, softmax);
      kernels::softmax_rows_backward(softmax, rows, dsoftmax);
      return std::vector<Tensor>{logits, probs, losses, dz, dz_rows, added, written, fresh, fresh_written, softmax,
                                 dsoftmax};
    });
  }
}

TEST_CASE("scatter_rows_fresh gives the bits of zeros and then scatter_rows, -0 rows included") {
  for (int threads : {1, 2}) {
    const int before = num_threads();
    set_num_threads(threads);
    for (DType t : {DType::f32, DType::f64}) {
      const int64_t vocab = 600, d = 300, batch = 1000;
      const Tensor ids = random_ids(batch, vocab, 50);
      Tensor rows = random(Shape{batch, d}, t);
      if (t == DType::f32) {
        float* r = rows.mutable_data<float>();
        for (int64_t j = 0; j < d; ++j) r[j] = -0.0f;  // a row of -0: zeros then add gives +0
        r[d + 3] = std::numeric_limits<float>::quiet_NaN();
      }
      for (bool overwrite : {false, true}) {
        CAPTURE(threads);
        CAPTURE(overwrite);
        Tensor want = Tensor::zeros(Shape{vocab, d}, t);
        kernels::scatter_rows(want, ids, rows, overwrite);
        Tensor have = Tensor::empty(Shape{vocab, d}, t);
        kernels::fill(have, 7.0);  // whatever the fresh memory held
        kernels::scatter_rows_fresh(have, ids, rows, overwrite);
        CHECK(same_bytes(have, want));
      }
    }
    set_num_threads(before);
  }
}

// Every case of the op-case table (tests/op_cases.hpp), forward and backward through the engine, on
// inputs large enough to take the split.
TEST_CASE("every case of the op-case table: the same bits for every thread count, forward and backward") {
  for (const testing::OpCase& c : testing::op_cases()) {
    for (const DType dtype : {DType::f32, DType::f64}) {
      check_thread_counts(c.op + " " + c.label + " " + dtype_name(dtype), [&] {
        Graph g;
        const testing::Built b = testing::build_case(g, c, true, dtype, 5);
        Var loss = b.out.shape().ndim() == 0 ? b.out : ops::sum(ops::mul(b.out, b.out));
        g.backward(loss);
        std::vector<Tensor> out{b.out.value().clone()};
        for (const Var& in : b.inputs)
          if (in.requires_grad()) out.push_back(in.grad().clone());
        return out;
      });
    }
  }
}
