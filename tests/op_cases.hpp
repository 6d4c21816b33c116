// The op-case table: one entry per op and variant, from which every per-op check runs:
//   tests/ops      the f64 gradient check against central differences, f32 against f64;
//   tests/kernels  the same bits for 1, 2 and 3 intra-op threads, on inputs large enough to split;
//   tests/cuda     CPU against CUDA, forward and every gradient.
// The unary ops' cases come from TG_UNARY_OPS itself, so a new elementwise op is checked by all
// three without a line here; and tests/ops fails for any op in the derivatives table
// (ops/op_table.cpp) that has no case, so no op can skip them.
#pragma once

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "tapegrad/graph/graph.hpp"
#include "tapegrad/ops/fused/embedding_cross_entropy.hpp"
#include "tapegrad/ops/op_table.hpp"
#include "tapegrad/ops/ops.hpp"

namespace tapegrad::testing {

// One input of a case: a parameter of floats in [lo, hi] (kept at least `gap` away from 0, where
// relu has its kink), or ids in [0, range) as an input value.
struct CaseInput {
  Shape small, large;  // the gradient check's shape; the thread check's (large enough to split)
  double lo = -1, hi = 1, gap = 0.05;
  int64_t ids = 0;  // > 0: i32 ids in [0, ids) instead of floats
};

struct OpCase {
  std::string op;     // the op's name in the derivatives table
  std::string label;  // "mean", "shared weight", ...
  std::vector<CaseInput> inputs;
  std::function<Var(const std::vector<Var>&)> build;
};

// Values for one input, the same for every dtype and device given the same seed.
inline Tensor case_tensor(const CaseInput& in, bool large, DType dtype, uint64_t seed, Device device = Device::cpu()) {
  const Shape shape = large ? in.large : in.small;
  std::mt19937_64 rng(seed);
  std::vector<double> v(static_cast<size_t>(shape.numel()));
  if (in.ids > 0) {
    for (double& x : v) x = static_cast<double>(rng() % static_cast<uint64_t>(in.ids));
    return Tensor::from_doubles(v, shape, DType::i32, device);
  }
  std::uniform_real_distribution<double> u(in.lo, in.hi);
  for (double& x : v) {
    x = u(rng);
    if (x > -in.gap && x < in.gap) x = x < 0 ? -in.gap : in.gap;
  }
  return Tensor::from_doubles(v, shape, dtype, device);
}

// The case's graph: parameters (and id inputs) made from case_tensor, the op's output.
struct Built {
  std::vector<Var> inputs;
  Var out;
};
inline Built build_case(Graph& g, const OpCase& c, bool large, DType dtype, uint64_t seed, Device device = Device::cpu()) {
  Built b;
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    const Tensor t = case_tensor(c.inputs[k], large, dtype, seed + 101 * k, device);
    b.inputs.push_back(c.inputs[k].ids > 0 ? g.input(t) : g.parameter(t));
  }
  b.out = c.build(b.inputs);
  return b;
}

inline std::vector<OpCase> op_cases() {
  using V = std::vector<Var>;
  const CaseInput m23{{2, 3}, {300, 211}}, m34{{3, 4}, {257, 129}}, m42{{4, 2}, {129, 140}};
  std::vector<OpCase> cases;
#define TG_UNARY_CASE(op, F)                                                                                    \
  cases.push_back({#op, "", {{{2, 3, 2}, {401, 97}, kernels::F::lo, kernels::F::hi}}, [](const V& v) { \
                     return ops::op(v[0]);                                                                      \
                   }});
  TG_UNARY_OPS(TG_UNARY_CASE)
#undef TG_UNARY_CASE
  cases.push_back({"add", "", {m23, m23}, [](const V& v) { return ops::add(v[0], v[1]); }});
  cases.push_back({"sub", "", {m23, m23}, [](const V& v) { return ops::sub(v[0], v[1]); }});
  cases.push_back({"mul", "", {m23, m23}, [](const V& v) { return ops::mul(v[0], v[1]); }});
  cases.push_back({"mul", "one value twice", {m23}, [](const V& v) { return ops::mul(v[0], v[0]); }});
  cases.push_back({"scale", "", {m23}, [](const V& v) { return ops::scale(v[0], -2.5); }});
  cases.push_back({"matmul", "", {m34, {{4, 2}, {129, 140}}}, [](const V& v) { return ops::matmul(v[0], v[1]); }});
  cases.push_back({"add_row", "", {m42, {{2}, {140}}}, [](const V& v) { return ops::add_row(v[0], v[1]); }});
  cases.push_back({"transpose", "", {m23}, [](const V& v) { return ops::transpose(v[0]); }});
  cases.push_back({"reshape", "", {m23}, [](const V& v) { return ops::reshape(v[0], Shape{v[0].shape()[1], v[0].shape()[0]}); }});
  cases.push_back({"sum", "", {m23}, [](const V& v) { return ops::sum(ops::exp(v[0])); }});
  cases.push_back({"mean", "", {m23}, [](const V& v) { return ops::mean(ops::exp(v[0])); }});
  cases.push_back({"softmax", "", {{{3, 5}, {200, 333}, -2, 2}}, [](const V& v) { return ops::softmax(v[0]); }});
  const CaseInput logits{{4, 5}, {300, 257}, -2, 2}, targets5{{4}, {300}, 0, 0, 0, 5};
  cases.push_back({"cross_entropy", "mean", {logits, targets5}, [](const V& v) { return ops::cross_entropy(v[0], v[1]); }});
  cases.push_back({"cross_entropy", "sum", {logits, targets5},
                   [](const V& v) { return ops::cross_entropy(v[0], v[1], ops::Reduction::sum); }});
  cases.push_back({"cross_entropy", "none", {logits, targets5},
                   [](const V& v) { return ops::cross_entropy(v[0], v[1], ops::Reduction::none); }});
  const CaseInput table{{6, 3}, {50, 900}}, ids6{{5}, {400}, 0, 0, 0, 6};
  cases.push_back({"gather", "repeated ids", {table, ids6}, [](const V& v) { return ops::gather(v[0], v[1]); }});
  const CaseInput classes{{6, 5}, {60, 300}, -2, 2}, ids_of{{7}, {500}, 0, 0, 0, 6}, t5{{7}, {500}, 0, 0, 0, 5};
  for (const auto& [name, reduction] : {std::pair{"mean", ops::Reduction::mean}, std::pair{"sum", ops::Reduction::sum},
                                        std::pair{"none", ops::Reduction::none}}) {
    const ops::Reduction r = reduction;  // a structured binding cannot be captured in clang 14
    cases.push_back({"embedding_cross_entropy", name, {classes, ids_of, t5},
                     [r](const V& v) { return ops::embedding_cross_entropy(v[0], v[1], v[2], r); }});
  }
  cases.push_back({"matmul", "an MLP with a weight used twice", {{{6, 4}, {64, 128}}, {{4, 4}, {128, 128}}, {{4}, {128}},
                                                                 {{4}, {200}, 0, 0, 0, 6}, {{4}, {200}, 0, 0, 0, 4}},
                   [](const V& v) {
                     // the tiny configs have the table 6 wide and the weight 4; the large ones 64 and 128
                     Var h = ops::tanh(ops::add_row(ops::matmul(ops::gather(v[0], v[3]), v[1]), v[2]));
                     return ops::cross_entropy(ops::matmul(h, v[1]), v[4]);
                   }});
  // normalisation and dropout: with and without weight and bias, 3-D inputs, rows of one value
  {
    const CaseInput rows{{3, 5}, {300, 211}}, cube{{2, 3, 4}, {20, 30, 97}}, single{{4, 1}, {20000, 1}};
    const CaseInput w5{{5}, {211}, 0.5, 1.5}, b5{{5}, {211}}, w4{{4}, {97}, 0.5, 1.5}, b4{{4}, {97}}, w1{{1}, {1}}, b1{{1}, {1}};
    cases.push_back({"layer_norm", "weight and bias", {rows, w5, b5}, [](const V& v) { return ops::layer_norm(v[0], v[1], v[2]); }});
    cases.push_back({"layer_norm", "no affine", {rows}, [](const V& v) { return ops::layer_norm(v[0]); }});
    cases.push_back({"layer_norm", "weight, no bias", {cube, w4}, [](const V& v) { return ops::layer_norm(v[0], v[1], Var()); }});
    cases.push_back({"layer_norm", "bias, no weight", {cube, b4}, [](const V& v) { return ops::layer_norm(v[0], Var(), v[1], 1e-3); }});
    cases.push_back({"layer_norm", "3-D, weight and bias", {cube, w4, b4}, [](const V& v) { return ops::layer_norm(v[0], v[1], v[2]); }});
    cases.push_back({"layer_norm", "C = 1", {single, w1, b1}, [](const V& v) { return ops::layer_norm(v[0], v[1], v[2]); }});
    cases.push_back({"rms_norm", "weight", {rows, w5}, [](const V& v) { return ops::rms_norm(v[0], v[1]); }});
    cases.push_back({"rms_norm", "no weight", {cube}, [](const V& v) { return ops::rms_norm(v[0], Var(), 1e-5); }});
    cases.push_back({"rms_norm", "3-D, weight", {cube, w4}, [](const V& v) { return ops::rms_norm(v[0], v[1]); }});
    cases.push_back({"rms_norm", "C = 1", {single, w1}, [](const V& v) { return ops::rms_norm(v[0], v[1]); }});
    // a fresh generator of one seed in each build: the same mask every time the case is built
    cases.push_back({"dropout", "p = 0.3", {cube}, [](const V& v) {
                       Generator gen(20240601);
                       return ops::dropout(v[0], 0.3, gen);
                     }});
    cases.push_back({"dropout", "after layer_norm, second call of a generator", {rows, w5, b5}, [](const V& v) {
                       Generator gen(7);
                       (void)gen.take(3);
                       return ops::dropout(ops::layer_norm(v[0], v[1], v[2]), 0.5, gen);
                     }});
  }
  return cases;
}

// Ops of the derivatives table whose checks live in a suite of their own, with the reason.
inline const char* checked_elsewhere(const std::string& op) {
  if (op == "value_embed_lookup") return "tests/value_embed (its gradient goes to a buffer, not to the weight)";
  return nullptr;
}

}  // namespace tapegrad::testing
