// Fused ops against the ops they fuse: embedding_cross_entropy == cross_entropy(gather(...)), the
// loss and the table's gradient bit for bit, in every reduction, dtype and engine mode. The fused
// op keeps the row kernels' arithmetic (bob's, docs/bob.md), so the composite it is compared with
// is gather followed by those kernels' cross-entropy (the tiny step's reference_cross_entropy);
// the library's log-softmax cross-entropy agrees with both to rounding.
#include <doctest/doctest.h>

#include <random>

#include "bits.hpp"
#include "messages.hpp"
#include "tapegrad/graph/gradcheck.hpp"
#include "tapegrad/graph/graph.hpp"
#include "tapegrad/ops/fused/embedding_cross_entropy.hpp"
#include "tapegrad/tape/tape_dump.hpp"
#include "reference_loss.hpp"

using namespace tapegrad;
using tapegrad::testing::message_of;

namespace {

struct Case {
  int64_t rows, classes, batch;
  DType dtype;
  DType id_type;
};

Tensor random_table(const Case& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> n(0.0, 2.0);
  std::vector<double> v(static_cast<size_t>(c.rows * c.classes));
  for (double& x : v) x = n(rng);
  return Tensor::from_doubles(v, Shape{c.rows, c.classes}, c.dtype);
}

// ids drawn from a few hot rows (many repeats) and the rest of the table
Tensor random_ids(const Case& c, uint64_t seed, uint64_t range) {
  std::mt19937_64 rng(seed);
  std::vector<double> v(static_cast<size_t>(c.batch));
  for (double& x : v) x = static_cast<double>(rng() % 3 == 0 ? rng() % range : rng() % std::min<uint64_t>(5, range));
  return Tensor::from_doubles(v, Shape{c.batch}, c.id_type);
}

struct Result {
  std::vector<double> loss, grad;
  BackwardRecord record;
};

Result run(const Case& c, bool fused, ops::Reduction reduction, BackwardOptions options, uint64_t seed) {
  Graph g;
  Var table = g.parameter(random_table(c, seed), "table");
  Var ids = g.input(random_ids(c, seed + 1, static_cast<uint64_t>(c.rows)));
  Var targets = g.input(random_ids(c, seed + 2, static_cast<uint64_t>(c.classes)));
  Var loss = fused ? ops::embedding_cross_entropy(table, ids, targets, reduction)
                   : tiny::reference_cross_entropy(ops::gather(table, ids), targets, reduction);
  Result r;
  r.loss = loss.value().to_doubles();
  if (reduction == ops::Reduction::none) {  // each row weighted 1, 2, 3, ...
    std::vector<double> w(static_cast<size_t>(c.batch));
    for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<double>(i + 1);
    loss = ops::sum(ops::mul(loss, g.input(Tensor::from_doubles(w, Shape{c.batch}, c.dtype))));
  }
  if (options.record) options.record = &r.record;
  g.backward(loss, options);
  r.grad = table.grad().to_doubles();
  return r;
}

void same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  size_t differ = 0;
  for (size_t i = 0; i < a.size(); ++i) differ += std::bit_cast<uint64_t>(a[i]) != std::bit_cast<uint64_t>(b[i]);
  CHECK(differ == 0);
}

}  // namespace

TEST_CASE("embedding_cross_entropy gives cross_entropy(gather) bit for bit") {
  const Case cases[] = {
      {256, 256, 256, DType::f32, DType::i32},   // bob's shape
      {7, 5, 40, DType::f32, DType::i64},        // every row repeated many times; several blocks
      {9, 3000, 13, DType::f32, DType::i32},     // rows wider than a block: one row a block
      {5000, 6, 20, DType::f32, DType::i32},     // a large table: the hashed map of ids
      {6, 4, 30, DType::f64, DType::i32},        // f64: -log p, as the tiny step's reference
  };
  for (const Case& c : cases) {
    for (const ops::Reduction reduction : {ops::Reduction::mean, ops::Reduction::sum, ops::Reduction::none}) {
      for (const bool bug : {false, true}) {
        for (const bool record : {false, true}) {
          CAPTURE(c.rows);
          CAPTURE(c.classes);
          CAPTURE(static_cast<int>(reduction));
          CAPTURE(bug);
          CAPTURE(record);
          BackwardRecord dummy;
          const BackwardOptions options{.overwrite_bug = bug, .record = record ? &dummy : nullptr};
          const Result fused = run(c, true, reduction, options, 7 + c.rows);
          const Result plain = run(c, false, reduction, options, 7 + c.rows);
          same_bits(fused.loss, plain.loss);
          same_bits(fused.grad, plain.grad);
          if (record) {  // the engine saw the same row contributions meet (the plain path also
                         // records the logits' gradient, a value the fused op never makes)
            auto row_events = [](const BackwardRecord& r) {
              std::vector<const GradEvent*> rows;
              for (const GradEvent& e : r.events)
                if (e.row >= 0) rows.push_back(&e);
              return rows;
            };
            const auto f_rows = row_events(fused.record), p_rows = row_events(plain.record);
            REQUIRE(f_rows.size() == p_rows.size());
            CHECK(f_rows.size() == static_cast<size_t>(c.batch));
            for (size_t k = 0; k < f_rows.size(); ++k) {
              const GradEvent& f = *f_rows[k];
              const GradEvent& p = *p_rows[k];
              CHECK(f.kind == p.kind);
              CHECK(f.row == p.row);
              same_bits(f.contribution.to_doubles(), p.contribution.to_doubles());
            }
          }
        }
      }
    }
  }
}

TEST_CASE("embedding_cross_entropy's table gradient is row-sparse: the distinct ids' rows") {
  Graph g;
  Var table = g.parameter(Tensor::from_doubles({1, 2, 3, 4, 5, 6, 7, 8}, Shape{4, 2}, DType::f32));
  Var loss = ops::embedding_cross_entropy(table, g.input(Tensor::from_vector(std::vector<int32_t>{3, 1, 3}, Shape{3})),
                                          g.input(Tensor::from_vector(std::vector<int32_t>{0, 1, 1}, Shape{3})));
  g.backward(loss);
  const RowSparse* sparse = table.sparse_grad();
  REQUIRE(sparse != nullptr);
  CHECK(sparse->ids.to_doubles() == std::vector<double>{3, 1});  // in order of first appearance
  CHECK(sparse->rows.shape() == Shape{2, 2});
  const std::vector<double> dense = table.grad().to_doubles();
  CHECK(dense[0] == 0.0);  // rows 0 and 2: no id
  CHECK(dense[1] == 0.0);
  CHECK(dense[4] == 0.0);
  CHECK(dense[5] == 0.0);
  CHECK(dense[6] + dense[7] == doctest::Approx(0.0).epsilon(1e-6));  // a softmax gradient row sums to 0
  CHECK(dense[6] != 0.0);
}

TEST_CASE("embedding_cross_entropy's gradient passes the f64 check") {
  Graph g;
  Var table = g.parameter(random_table({5, 4, 0, DType::f64, DType::i32}, 3));
  const Tensor ids = Tensor::from_vector(std::vector<int32_t>{4, 0, 4, 2, 4, 1}, Shape{6});
  const Tensor targets = Tensor::from_vector(std::vector<int32_t>{1, 3, 0, 2, 1, 1}, Shape{6});
  auto loss = [&](Graph& gr) { return ops::embedding_cross_entropy(table, gr.input(ids), gr.input(targets)); };
  const GradcheckResult check = gradcheck(g, loss);
  CAPTURE(check.str());
  CHECK(check.max_error() < 1e-8);
}

TEST_CASE("embedding_cross_entropy's errors name the op and the shapes") {
  Graph g;
  Var table = g.parameter(Tensor::zeros(Shape{4, 3}, DType::f32), "table");
  auto ids = [&](std::vector<int32_t> v) { return g.input(Tensor::from_vector(v, Shape{static_cast<int64_t>(v.size())})); };
  CHECK(message_of([&] { ops::embedding_cross_entropy(table, ids({0, 4}), ids({0, 1})); }) ==
        "[embedding_cross_entropy] index 4 at position 1 is out of range for a table of 4 rows (shape (4, 3))");
  CHECK(message_of([&] { ops::embedding_cross_entropy(table, ids({0, 1}), ids({0, 3})); }) ==
        "[cross_entropy] target 3 at position 1 is out of range for 3 classes (logits (2, 3))");
  CHECK(message_of([&] { ops::embedding_cross_entropy(table, ids({0, 1}), ids({0})); }) ==
        "[embedding_cross_entropy] ids (2,) and targets (1,) differ in length");
  CHECK(message_of([&] { ops::embedding_cross_entropy(table, ids({}), ids({})); }) ==
        "[embedding_cross_entropy] empty batch: ids (0,)");
}
