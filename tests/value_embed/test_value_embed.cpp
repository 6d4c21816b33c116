// The value-embed path on the CPU: the gather, the buffer against an fp64 reference sum and against
// the engine's dense gradient, what the node records, the pull's invariant, the sparse optimizers,
// and every error by its message. tests/value_embed/test_value_embed_cuda.cpp checks CUDA against this.
#include <doctest/doctest.h>

#include <set>

#include "tapegrad/graph/graph.hpp"
#include "tapegrad/ops/ops.hpp"
#include "tapegrad/ops/value_embed.hpp"
#include "tapegrad/kernels/value_embed_kernels.hpp"
#include "tapegrad/optim/sparse.hpp"
#include "value_embed_testing.hpp"

using namespace tapegrad;
using namespace ve_test;
using ops::ValueEmbedAccumulate;
using ops::ValueEmbedBuffer;

namespace {

// One training step of loss = sum(planes * r): the planes' gradient is exactly r.
void step(Graph& g, Var table, const Tensor& ids, int planes, const ValueEmbedBuffer& buffer, const Tensor& r,
          ValueEmbedAccumulate mode = ValueEmbedAccumulate::atomic) {
  Var y = ops::value_embed_lookup(table, g.input(ids), planes, buffer, {.accumulate = mode, .dtype = std::nullopt});
  g.backward(ops::sum(ops::mul(y, g.input(r))));
  g.clear();
}

}  // namespace

TEST_CASE("the forward gathers every plane's rows, bit for bit") {
  const int planes = 3;
  const int64_t vocab = 11, d = 5;
  for (DType table_type : {DType::bf16, DType::f32})
    for (DType id_type : {DType::i32, DType::i64}) {
      const std::string what = std::string("table ") + dtype_name(table_type) + ", ids " + dtype_name(id_type);
      INFO(what);
      Graph g;
      Tensor w = random(Shape{planes * vocab, d}, table_type);
      const std::vector<int64_t> ids{3, 0, 10, 3, 7};
      Var y = ops::value_embed_lookup(g.parameter(w), g.input(id_tensor(ids, id_type)), planes);
      REQUIRE(y.shape() == Shape{planes, 5, d});
      CHECK(y.dtype() == table_type);
      const std::vector<double> table = w.to_doubles(), out = y.value().to_doubles();
      for (int64_t p = 0; p < planes; ++p)
        for (size_t i = 0; i < ids.size(); ++i)
          for (int64_t j = 0; j < d; ++j)
            CHECK(out[static_cast<size_t>((p * 5 + static_cast<int64_t>(i)) * d + j)] ==
                  table[static_cast<size_t>((p * vocab + ids[i]) * d + j)]);
    }
}

TEST_CASE("f32 planes from a bf16 table: widened exactly, and the backward takes their f32 gradient") {
  const int planes = 2;
  const int64_t vocab = 7, d = 6;
  Graph g;
  Var w = g.parameter(random(Shape{planes * vocab, d}, DType::bf16));
  const Tensor ids = id_tensor({6, 1, 6}, DType::i32);
  ValueEmbedBuffer buffer = ValueEmbedBuffer::zeros(w.value(), planes);
  ops::ValueEmbedOptions options;
  options.dtype = DType::f32;
  Var y = ops::value_embed_lookup(w, g.input(ids), planes, buffer, options);
  CHECK(y.dtype() == DType::f32);
  Var plain = ops::value_embed_lookup(w, g.input(ids), planes);
  CHECK(y.value().to_doubles() == plain.value().to_doubles());
  const Tensor r = random(Shape{planes, 3, d}, DType::f32);
  g.backward(ops::sum(ops::mul(y, g.input(r))));
  CHECK(accuracy(buffer.sum, reference(r, {6, 1, 6}, vocab), false).worst_ratio <= 1.0);
}

TEST_CASE("with no buffer, or under NoGrad, the lookup records nothing") {
  Graph g;
  Var w = g.parameter(random(Shape{8, 4}, DType::f32));
  Var ids = g.input(id_tensor({1, 2, 1}, DType::i32));
  Var plain = ops::value_embed_lookup(w, ids, 2);
  CHECK(g.nodes().empty());
  CHECK_FALSE(plain.requires_grad());

  ValueEmbedBuffer buffer = ValueEmbedBuffer::zeros(w.value(), 2);
  {
    NoGrad eval(g);
    Var y = ops::value_embed_lookup(w, ids, 2, buffer);
    CHECK(g.nodes().empty());
    CHECK(bytes(y.value()) == bytes(plain.value()));
  }
  Var trained = ops::value_embed_lookup(w, ids, 2, buffer);
  CHECK(g.nodes().size() == 1);
  CHECK(trained.requires_grad());
}

TEST_CASE("the backward fills the buffer, not the table's gradient") {
  Graph g;
  const int planes = 2;
  Var w = g.parameter(random(Shape{planes * 6, 3}, DType::f32));
  ValueEmbedBuffer buffer = ValueEmbedBuffer::zeros(w.value(), planes);
  step(g, w, id_tensor({5, 5, 0}, DType::i64), planes, buffer, random(Shape{planes, 3, 3}, DType::f32));
  CHECK_FALSE(w.grad().defined());
  const std::vector<double> touched = buffer.touched.to_doubles();
  CHECK(touched == std::vector<double>{1, 0, 0, 0, 0, 1});
}

TEST_CASE("the buffer against an fp64 reference sum, on Zipf-like ids") {
  const int planes = 4;
  const int64_t vocab = 97, t = 1500, d = 24;
  const std::vector<int64_t> ids = zipf_ids(t, vocab);  // the hottest id takes ~19% of the positions
  for (DType grad_type : {DType::bf16, DType::f32})
    for (DType buffer_type : {DType::f16, DType::f32})
      for (ValueEmbedAccumulate mode : {ValueEmbedAccumulate::atomic, ValueEmbedAccumulate::deterministic}) {
        const std::string what = std::string("gradient ") + dtype_name(grad_type) + ", buffer " +
                                 dtype_name(buffer_type) + ", " + ops::value_embed_accumulate_name(mode);
        INFO(what);
        // The backward's kernel on its own: tapegrad's compute ops are f64/f32, so a graph cannot
        // carry a bf16 plane gradient to it.
        ValueEmbedBuffer buffer = ValueEmbedBuffer::zeros(Tensor::empty(Shape{planes * vocab, d}, grad_type), planes,
                                                          buffer_type);
        const Tensor dplanes = random(Shape{planes, t, d}, grad_type);
        kernels::value_embed_accumulate(dplanes, id_tensor(ids, DType::i32), mode, buffer);
        const Accuracy a = accuracy(buffer.sum, reference(dplanes, ids, vocab), mode == ValueEmbedAccumulate::deterministic);
        CHECK(a.worst_ratio <= 1.0);
        if (buffer_type == DType::f16 && mode == ValueEmbedAccumulate::deterministic) CHECK(a.relative < 1e-3);
      }
}

TEST_CASE("an f32 buffer equals the engine's dense gradient of P plain gathers, bit for bit") {
  const int planes = 3;
  const int64_t vocab = 13, t = 40, d = 6;
  const std::vector<int64_t> ids = zipf_ids(t, vocab);
  const Tensor w = random(Shape{planes * vocab, d}, DType::f32);
  const Tensor r = random(Shape{planes, t, d}, DType::f32);

  Graph g;
  Var table = g.parameter(w);
  ValueEmbedBuffer buffer = ValueEmbedBuffer::zeros(w, planes, DType::f32);
  step(g, table, id_tensor(ids, DType::i32), planes, buffer, r);

  // The dense way: plane p is gather(table, ids + p*V), its gradient r[p]; the engine scatter-adds.
  Graph dense;
  Var dense_table = dense.parameter(w.clone());
  const std::vector<double> rv = r.to_doubles();
  Var loss;
  for (int64_t p = 0; p < planes; ++p) {
    std::vector<int64_t> shifted(ids);
    for (int64_t& id : shifted) id += p * vocab;
    const std::vector<double> rp(rv.begin() + p * t * d, rv.begin() + (p + 1) * t * d);
    Var plane = ops::gather(dense_table, dense.input(id_tensor(shifted, DType::i32)));
    Var term = ops::sum(ops::mul(plane, dense.input(Tensor::from_doubles(rp, Shape{t, d}, DType::f32))));
    loss = p == 0 ? term : ops::add(loss, term);
  }
  dense.backward(loss);
  CHECK(bytes(buffer.sum) == bytes(dense_table.grad()));
}

TEST_CASE("the pull: the buffer holds only the cycle's rows, and a pull leaves it all zero") {
  const int planes = 2;
  const int64_t vocab = 10, d = 4;
  Graph g;
  Var w = g.parameter(random(Shape{planes * vocab, d}, DType::f32));
  ValueEmbedBuffer buffer = ValueEmbedBuffer::zeros(w.value(), planes);
  const std::vector<int64_t> step1{7, 2, 7}, step2{2, 9};
  const Tensor r1 = random(Shape{planes, 3, d}, DType::f32), r2 = random(Shape{planes, 2, d}, DType::f32);
  step(g, w, id_tensor(step1, DType::i32), planes, buffer, r1);
  step(g, w, id_tensor(step2, DType::i32), planes, buffer, r2);

  const std::set<int64_t> tokens{2, 7, 9};
  const std::vector<double> before = buffer.sum.to_doubles(), touched = buffer.touched.to_doubles();
  for (int64_t row = 0; row < planes * vocab; ++row) {
    bool nonzero = false;
    for (int64_t j = 0; j < d; ++j) nonzero = nonzero || before[static_cast<size_t>(row * d + j)] != 0.0;
    CHECK(nonzero == (tokens.count(row % vocab) == 1));
  }
  for (int64_t token = 0; token < vocab; ++token) CHECK(touched[static_cast<size_t>(token)] == (tokens.count(token) ? 1 : 0));

  ops::PulledRows pulled = ops::value_embed_pull(buffer);
  CHECK(pulled.rows.to_doubles() == std::vector<double>{2, 7, 9, 12, 17, 19});
  CHECK(pulled.grad.dtype() == DType::f16);
  const std::vector<double> grad = pulled.grad.to_doubles();
  for (int64_t k = 0; k < pulled.count(); ++k) {
    const int64_t row = static_cast<int64_t>(pulled.rows.to_doubles()[static_cast<size_t>(k)]);
    for (int64_t j = 0; j < d; ++j)
      CHECK(grad[static_cast<size_t>(k * d + j)] == before[static_cast<size_t>(row * d + j)]);
  }
  for (double x : buffer.sum.to_doubles()) CHECK(x == 0.0);
  for (double x : buffer.touched.to_doubles()) CHECK(x == 0.0);

  // The next cycle starts from zero and sees only its own tokens.
  step(g, w, id_tensor({4}, DType::i64), planes, buffer, random(Shape{planes, 1, d}, DType::f32));
  CHECK(ops::value_embed_pull(buffer).rows.to_doubles() == std::vector<double>{4, 14});
  CHECK(ops::value_embed_pull(buffer).count() == 0);
}

TEST_CASE("sparse SGD and AdamW change the pulled rows only, with the dense arithmetic") {
  const int planes = 2;
  const int64_t vocab = 8, d = 5;
  const Tensor w0 = random(Shape{planes * vocab, d}, DType::f32);
  const std::vector<int64_t> ids{1, 6, 1};
  const Tensor r = random(Shape{planes, 3, d}, DType::f32);

  auto pulled_after_step = [&](Var table, Graph& g) {
    ValueEmbedBuffer buffer = ValueEmbedBuffer::zeros(table.value(), planes, DType::f32);
    step(g, table, id_tensor(ids, DType::i32), planes, buffer, r);
    return ops::value_embed_pull(buffer);
  };
  // The dense optimizers' result on the same gradient, made dense (zero at untouched rows).
  auto dense_grad = [&](const ops::PulledRows& pulled) {
    std::vector<double> gr(static_cast<size_t>(planes * vocab * d), 0.0);
    const std::vector<double> rows = pulled.rows.to_doubles(), grad = pulled.grad.to_doubles();
    for (size_t k = 0; k < rows.size(); ++k)
      for (int64_t j = 0; j < d; ++j)
        gr[static_cast<size_t>(static_cast<int64_t>(rows[k]) * d + j)] = grad[k * static_cast<size_t>(d) + static_cast<size_t>(j)];
    return Tensor::from_doubles(gr, w0.shape(), DType::f32);
  };
  const std::set<int64_t> pulled_rows{1, 6, 9, 14};

  SUBCASE("SGD") {
    Graph g;
    Var table = g.parameter(w0.clone());
    const ops::PulledRows pulled = pulled_after_step(table, g);
    optim::SparseSGD(0.5).step(table.value(), pulled);
    Tensor expected = w0.clone();
    kernels::sgd_step(expected, dense_grad(pulled), 0.5);
    const std::vector<double> have = table.value().to_doubles(), want = expected.to_doubles(), old = w0.to_doubles();
    for (size_t k = 0; k < have.size(); ++k) CHECK(have[k] == want[k]);
    for (size_t k = 0; k < have.size(); ++k)
      if (!pulled_rows.count(static_cast<int64_t>(k) / d)) CHECK(have[k] == old[k]);
  }
  SUBCASE("AdamW, first update") {
    Graph g;
    Var table = g.parameter(w0.clone());
    const ops::PulledRows pulled = pulled_after_step(table, g);
    optim::AdamWConfig config;
    config.lr = 0.1f;
    optim::SparseAdamW sparse(table.value(), config);
    sparse.step(table.value(), pulled);
    CHECK(sparse.step_count() == 1);

    Graph dense;
    Var dense_table = dense.parameter(w0.clone());
    optim::AdamW adamw({dense_table}, config);
    Tensor dw = dense_table.value();
    Tensor m = adamw.m(0), v = adamw.v(0);
    kernels::adamw_step(dw, dense_grad(pulled), m, v, adamw.scalars(1));
    const std::vector<double> have = table.value().to_doubles(), want = dw.to_doubles(), old = w0.to_doubles();
    for (size_t k = 0; k < have.size(); ++k) {
      if (pulled_rows.count(static_cast<int64_t>(k) / d)) CHECK(have[k] == want[k]);
      else CHECK(have[k] == old[k]);  // lazy: no decay, no moment update off the pulled rows
    }
  }
}

TEST_CASE("errors name the op and the shapes") {
  Graph g;
  Var w = g.parameter(random(Shape{12, 4}, DType::f32));
  Var ids = g.input(id_tensor({1, 2}, DType::i32));
  ValueEmbedBuffer buffer = ValueEmbedBuffer::zeros(w.value(), 3);

  CHECK_THROWS_WITH(ops::value_embed_lookup(w, ids, 0), "[value_embed_lookup] planes must be at least 1, got 0");
  CHECK_THROWS_WITH(ops::value_embed_lookup(w, ids, 5),
                    "[value_embed_lookup] weight (12, 4) has 12 rows, which do not split into 5 planes of (V, D)");
  CHECK_THROWS_WITH(ops::value_embed_lookup(g.parameter(random(Shape{12}, DType::f32)), ids, 3),
                    "[value_embed_lookup] weight must have 2 dimensions, got shape (12,)");
  CHECK_THROWS_WITH(ops::value_embed_lookup(g.parameter(random(Shape{12, 4}, DType::f64)), ids, 3),
                    "[value_embed_lookup] weight must be bf16 or f32, got f64");
  ops::ValueEmbedOptions to_bf16;
  to_bf16.dtype = DType::bf16;
  CHECK_THROWS_WITH(ops::value_embed_lookup(w, ids, 3, {}, to_bf16),
                    "[value_embed_lookup] planes of bf16 from a f32 weight: the planes take the weight's dtype, or "
                    "f32 from a bf16 weight");
  CHECK_THROWS_WITH(ops::value_embed_lookup(w, g.input(random(Shape{2}, DType::f32)), 3),
                    "[value_embed_lookup] ids must be i32 or i64 indices, got f32");
  CHECK_THROWS_WITH(ops::value_embed_lookup(w, g.input(Tensor::zeros(Shape{2, 1}, DType::i32)), 3),
                    "[value_embed_lookup] ids must have 1 dimension, got shape (2, 1)");
  CHECK_THROWS_WITH(ops::value_embed_lookup(w, g.input(id_tensor({1, 4}, DType::i64)), 3),
                    "[value_embed_lookup] index 4 at position 1 is out of range for a table of 4 rows (shape (4, 4))");
  CHECK_THROWS_WITH(ops::value_embed_lookup(w, g.input(id_tensor({-1}, DType::i32)), 3),
                    "[value_embed_lookup] index -1 at position 0 is out of range for a table of 4 rows (shape (4, 4))");
  CHECK_THROWS_WITH(ops::value_embed_lookup(w, ids, 2, buffer),
                    "[value_embed_lookup] the buffer (sum (12, 4) f16 on cpu, touched (4,) i32 on cpu) does not fit "
                    "weight (12, 4) f32 on cpu in 2 planes: it needs sum (12, 4) f16 or f32 and touched (6,) i32, on "
                    "cpu; make it with ValueEmbedBuffer::zeros(weight, planes)");
  CHECK_THROWS_WITH(ops::value_embed_lookup(g.input(w.value()), ids, 3, buffer),
                    "[value_embed_lookup] a buffer was given but weight (12, 4) does not require a gradient (is it "
                    "an input?); make it a parameter, or pass no buffer for the plain gather");
  CHECK_THROWS_WITH(ops::value_embed_lookup(w, ids, 3, ValueEmbedBuffer{buffer.sum, Tensor(), Tensor()}),
                    "[value_embed_lookup] the buffer has a sum but no touched mask; make it with ValueEmbedBuffer::zeros");

  // The backward checks the ids again (they are read a second time); nothing is written when one is bad.
  ValueEmbedBuffer same = buffer;
  CHECK_THROWS_WITH(kernels::value_embed_accumulate(random(Shape{3, 2, 4}, DType::f32), id_tensor({0, 9}, DType::i32),
                                                    ValueEmbedAccumulate::atomic, same),
                    "[value_embed_backward] index 9 at position 1 is out of range for a table of 4 rows (shape (4, 4))");
  for (double x : buffer.sum.to_doubles()) CHECK(x == 0.0);

  CHECK_THROWS_WITH(ValueEmbedBuffer::zeros(w.value(), 5),
                    "[value_embed_buffer] a table (12, 4) does not split into 5 planes of (V, D)");
  CHECK_THROWS_WITH(ValueEmbedBuffer::zeros(w.value(), 3, DType::bf16),
                    "[value_embed_buffer] the buffer must be f16 or f32, got bf16");
  ValueEmbedBuffer empty;
  CHECK_THROWS_WITH(ops::value_embed_pull(empty), "[value_embed_pull] the buffer is empty; make it with ValueEmbedBuffer::zeros");

  ops::PulledRows pulled{Tensor::zeros(Shape{2}, DType::i64), Tensor::zeros(Shape{2, 3}, DType::f16)};
  CHECK_THROWS_WITH(optim::SparseSGD(0.1).step(w.value(), pulled),
                    "[sparse_sgd] rows (2,) i64 with grad (2, 3) f16 do not fit the table (12, 4): they need (R,) i64 "
                    "and (R, 4) f16 or f32");
  CHECK_THROWS_WITH(optim::SparseSGD(0.1).step(w.value(), ops::PulledRows{}),
                    "[sparse_sgd] the pulled rows are empty; get them from ops::value_embed_pull");
  CHECK_THROWS_WITH(optim::SparseSGD(-1.0), "learning rate must be a positive finite number, got -1");
  optim::SparseAdamW adamw(w.value(), {});
  CHECK_THROWS_WITH(adamw.step(random(Shape{6, 4}, DType::f32), ops::value_embed_pull(buffer)),
                    "[sparse_adamw] the table (6, 4) on cpu is not the one this optimizer's moments were made for: "
                    "(12, 4) on cpu");
  CHECK_THROWS_WITH(adamw.step(random(Shape{12, 4}, DType::f64), ops::value_embed_pull(buffer)),
                    "[sparse_adamw] the table must be 2-D bf16 or f32, got (12, 4) f64");
}
