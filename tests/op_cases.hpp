// The op-case table: one entry per op and variant, from which every per-op check runs:
//   tests/ops      the f64 gradient check against central differences, f32 against f64;
//   tests/kernels  the same bits for 1, 2 and 3 intra-op threads, on inputs large enough to split;
//   tests/cuda     CPU against CUDA, forward and every gradient.
// The unary ops' cases come from TG_UNARY_OPS itself, so a new elementwise op is checked by all
// three without a line here; and tests/ops fails for any op in the derivatives table
// (ops/op_table.cpp) that has no case, so no op can skip them.
#pragma once

#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "tapegrad/graph/graph.hpp"
#include "tapegrad/ops/fused/embedding_cross_entropy.hpp"
#include "tapegrad/ops/fused/linear_cross_entropy.hpp"
#include "tapegrad/ops/fused/mlp.hpp"
#include "tapegrad/ops/fused/attention.hpp"
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
  const CaseInput table6{{6, 3}, {50, 900}};
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
  // broadcasting: a row, a column, a scalar, leading axes, both sides at once
  const CaseInput row3{{3}, {211}}, col2{{2, 1}, {300, 1}}, b213{{2, 1, 3}, {8, 1, 211}}, b41{{4, 1}, {40, 1}};
  const CaseInput pos23{{2, 3}, {300, 211}, 0.5, 2}, pos3{{3}, {211}, 0.5, 2};
  cases.push_back({"add", "a row broadcast", {m23, row3}, [](const V& v) { return ops::add(v[0], v[1]); }});
  cases.push_back({"sub", "both sides broadcast", {b213, b41}, [](const V& v) { return ops::sub(v[0], v[1]); }});
  cases.push_back({"mul", "a column broadcast", {m23, col2}, [](const V& v) { return ops::mul(v[0], v[1]); }});
  cases.push_back({"div", "", {m23, pos23}, [](const V& v) { return ops::div(v[0], v[1]); }});
  cases.push_back({"div", "a row broadcast on the left", {pos3, pos23}, [](const V& v) { return ops::div(v[0], v[1]); }});
  cases.push_back({"maximum", "", {m23, m23}, [](const V& v) { return ops::maximum(v[0], v[1]); }});
  cases.push_back({"minimum", "a row broadcast", {m23, row3}, [](const V& v) { return ops::minimum(v[0], v[1]); }});
  cases.push_back({"pow", "", {pos23, m23}, [](const V& v) { return ops::pow(v[0], v[1]); }});
  cases.push_back({"pow", "a scalar exponent", {pos23}, [](const V& v) { return ops::pow(v[0], 2.5); }});
  cases.push_back({"add", "scalars (x * 0.5 + 1, 1 - x, 2 / x)", {pos23},
                   [](const V& v) { return (v[0] * 0.5 + 1.0) * (1.0 - v[0]) + 2.0 / v[0]; }});
  cases.push_back({"clamp", "", {m23}, [](const V& v) { return ops::clamp(v[0], -0.5, 0.3); }});
  const CaseInput mask23{{2, 3}, {300, 211}, 0, 0, 0, 2}, mask3{{3}, {211}, 0, 0, 0, 2};
  cases.push_back({"where", "", {mask23, m23, row3},
                   [](const V& v) { return ops::where(ops::to(v[0], DType::u8), v[1], v[2]); }});
  cases.push_back({"where", "masked_fill with a broadcast mask", {m23, mask3},
                   [](const V& v) { return ops::masked_fill(v[0], ops::to(v[1], DType::u8), -3.0); }});
  // reductions along axes
  const CaseInput m234{{2, 3, 4}, {20, 30, 41}};
  cases.push_back({"sum_axes", "axis 1", {m234}, [](const V& v) { return ops::sum(v[0], {1}); }});
  cases.push_back({"sum_axes", "axes 0 and 2, keepdim", {m234}, [](const V& v) { return ops::sum(v[0], {0, -1}, true); }});
  cases.push_back({"sum_axes", "leading axis (a bias gradient)", {m234}, [](const V& v) { return ops::sum(v[0], {0}); }});
  cases.push_back({"mean_axes", "last axis", {m234}, [](const V& v) { return ops::mean(v[0], {-1}); }});
  cases.push_back({"mean_axes", "var over axes 1, 2 (composite)", {m234}, [](const V& v) { return ops::var(v[0], {1, 2}); }});
  cases.push_back({"max", "axis 1", {m234}, [](const V& v) { return ops::max(v[0], 1); }});
  cases.push_back({"max", "last axis, keepdim", {m234}, [](const V& v) { return ops::max(v[0], -1, true); }});
  // softmax family along any axis
  cases.push_back({"softmax", "axis 1 of 3", {m234}, [](const V& v) { return ops::softmax(v[0], 1); }});
  cases.push_back({"log_softmax", "", {m234}, [](const V& v) { return ops::log_softmax(v[0]); }});
  cases.push_back({"log_softmax", "axis 0", {m234}, [](const V& v) { return ops::log_softmax(v[0], 0); }});
  // rows past CUDA's warp-per-row kernel (1024): its block-per-row kernel
  cases.push_back({"log_softmax", "long rows", {{{2, 3}, {40, 1500}}}, [](const V& v) { return ops::log_softmax(v[0]); }});
  cases.push_back({"mean_axes", "logsumexp (composite)", {m234}, [](const V& v) { return ops::logsumexp(v[0], 1); }});
  // shape ops
  cases.push_back({"permute", "", {m234}, [](const V& v) { return ops::permute(v[0], {2, 0, 1}); }});
  cases.push_back({"permute", "transpose of two axes", {m234}, [](const V& v) { return ops::transpose(v[0], 0, 2); }});
  cases.push_back({"broadcast_to", "", {col2}, [](const V& v) {
                     return ops::broadcast_to(v[0], Shape{3, v[0].shape()[0], 5});
                   }});
  cases.push_back({"slice", "", {m234}, [](const V& v) { return ops::slice(v[0], 1, 1, -1); }});
  cases.push_back({"slice", "split", {m234}, [](const V& v) {
                     const int64_t n = v[0].shape()[2];
                     std::vector<Var> parts = ops::split(v[0], {1, n - 1}, 2);
                     return ops::mul(parts[1], ops::sum(parts[0], {2}, true));
                   }});
  cases.push_back({"slice", "overlapping parts, meeting a whole contribution", {m234}, [](const V& v) {
                     const int64_t n = v[0].shape()[1];
                     Var a = ops::slice(v[0], 1, 0, n - 1), b = ops::slice(v[0], 1, 1, n);  // they overlap
                     return ops::mul(a, b) + ops::slice(ops::tanh(v[0]), 1, 0, n - 1);
                   }});
  cases.push_back({"concat", "three inputs", {m234, m234, m234}, [](const V& v) {
                     return ops::concat({v[0], ops::tanh(v[1]), v[2]}, 1);
                   }});
  cases.push_back({"concat", "stack of four (one input twice)", {m23, m23, m23}, [](const V& v) {
                     return ops::stack({v[0], v[1], v[0], v[2]}, 1);
                   }});
  // indexing
  const CaseInput ids4{{4}, {300}, 0, 0, 0, 3};
  cases.push_back({"index_select", "repeated ids", {m234, ids4}, [](const V& v) { return ops::index_select(v[0], 1, v[1]); }});
  const CaseInput ids2x5{{2, 5}, {300, 7}, 0, 0, 0, 6};
  cases.push_back({"gather", "embedding of (B, T) ids", {table6, ids2x5}, [](const V& v) { return ops::embedding(v[0], v[1]); }});
  const CaseInput ids2x3x2{{2, 3, 2}, {20, 30, 9}, 0, 0, 0, 4};
  cases.push_back({"gather_axis", "last axis", {m234, ids2x3x2}, [](const V& v) { return ops::gather(v[0], 2, v[1]); }});
  cases.push_back({"where", "tril", {m234}, [](const V& v) { return ops::tril(v[0], 0); }});
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
  // N-d logits, and an ignored target: the targets' ids run over 0..5, and 5 is the ignore_index
  const CaseInput logits3{{2, 3, 5}, {6, 50, 257}, -2, 2}, targets6{{2, 3}, {6, 50}, 0, 0, 0, 6};
  cases.push_back({"cross_entropy", "(B, T, V) logits, ignore_index, mean", {logits3, targets6},
                   [](const V& v) { return ops::cross_entropy(v[0], v[1], ops::Reduction::mean, 5); }});
  cases.push_back({"cross_entropy", "(B, T, V) logits, ignore_index, none", {logits3, targets6},
                   [](const V& v) { return ops::cross_entropy(v[0], v[1], ops::Reduction::none, 5); }});
  const CaseInput ids6{{5}, {400}, 0, 0, 0, 6};
  cases.push_back({"gather", "repeated ids", {table6, ids6}, [](const V& v) { return ops::gather(v[0], v[1]); }});
  const CaseInput classes{{6, 5}, {60, 300}, -2, 2}, ids_of{{7}, {500}, 0, 0, 0, 6}, t5{{7}, {500}, 0, 0, 0, 5};
  for (const auto& [name, reduction] : {std::pair{"mean", ops::Reduction::mean}, std::pair{"sum", ops::Reduction::sum},
                                        std::pair{"none", ops::Reduction::none}}) {
    const ops::Reduction r = reduction;  // a structured binding cannot be captured in clang 14
    cases.push_back({"embedding_cross_entropy", name, {classes, ids_of, t5},
                     [r](const V& v) { return ops::embedding_cross_entropy(v[0], v[1], v[2], r); }});
  }
  // the linear cross-entropy in blocks of 4 rows: several blocks at both sizes, a last one short
  const CaseInput lce_x{{2, 3, 4}, {3, 101, 64}}, lce_w{{6, 4}, {257, 64}}, lce_t{{2, 3}, {3, 101}, 0, 0, 0, 6};
  for (const auto& [name, reduction] : {std::pair{"mean, ignore_index", ops::Reduction::mean},
                                        std::pair{"sum, ignore_index", ops::Reduction::sum},
                                        std::pair{"none, ignore_index", ops::Reduction::none}}) {
    const ops::Reduction r = reduction;  // a structured binding cannot be captured in clang 14
    cases.push_back({"linear_cross_entropy", name, {lce_x, lce_w, lce_t},
                     [r](const V& v) { return ops::linear_cross_entropy(v[0], v[1], v[2], r, 5, 4); }});
  }
  cases.push_back({"linear_cross_entropy", "one block, the weight also in the graph", {lce_x, lce_w, lce_t},
                   [](const V& v) { return ops::linear_cross_entropy(ops::tanh(v[0]), v[1] * 2.0, v[2]) + ops::sum(v[1]); }});
  cases.push_back({"matmul", "an MLP with a weight used twice", {{{6, 4}, {64, 128}}, {{4, 4}, {128, 128}}, {{4}, {128}},
                                                                 {{4}, {200}, 0, 0, 0, 6}, {{4}, {200}, 0, 0, 0, 4}},
                   [](const V& v) {
                     // the tiny configs have the table 6 wide and the weight 4; the large ones 64 and 128
                     Var h = ops::tanh(ops::add_row(ops::matmul(ops::gather(v[0], v[3]), v[1]), v[2]));
                     return ops::cross_entropy(ops::matmul(h, v[1]), v[4]);
                   }});
  // ---- images (N, C, H, W): conv2d and the pools (src/ops/conv.cpp)
  const CaseInput image{{2, 3, 5, 5}, {4, 3, 40, 40}}, odd_image{{2, 2, 6, 5}, {3, 4, 33, 31}};
  const CaseInput k3{{4, 3, 3, 3}, {8, 3, 3, 3}}, bias4{{4}, {8}}, k1{{5, 3, 1, 1}, {16, 3, 1, 1}}, bias5{{5}, {16}};
  cases.push_back({"conv2d", "stride 1, padding 0, bias", {image, k3, bias4},
                   [](const V& v) { return ops::conv2d(v[0], v[1], v[2]); }});
  cases.push_back({"conv2d", "stride 2, padding 1, bias", {image, k3, bias4},
                   [](const V& v) { return ops::conv2d(v[0], v[1], v[2], 2, 1); }});
  cases.push_back({"conv2d", "stride 1, padding 1, no bias", {image, k3},
                   [](const V& v) { return ops::conv2d(v[0], v[1], Var(), 1, 1); }});
  cases.push_back({"conv2d", "a 2x3 kernel, stride 2, padding 1, no bias, odd sizes",
                   {odd_image, {{3, 2, 2, 3}, {6, 4, 2, 3}}},
                   [](const V& v) { return ops::conv2d(v[0], v[1], Var(), 2, 1); }});
  cases.push_back({"conv2d", "1x1 kernel, bias", {image, k1, bias5}, [](const V& v) { return ops::conv2d(v[0], v[1], v[2]); }});
  cases.push_back({"conv2d", "1x1 kernel, stride 2, padding 1, bias", {image, k1, bias5},
                   [](const V& v) { return ops::conv2d(v[0], v[1], v[2], 2, 1); }});
  // no gap around 0 for the pools' inputs: values clamped to the gap would tie for a window's max
  const CaseInput pool_image{{2, 2, 6, 6}, {4, 8, 40, 40}, -1, 1, 0}, odd_pool_image{{2, 3, 7, 5}, {3, 5, 37, 41}, -1, 1, 0};
  using Pool = Var (*)(Var, int, std::optional<int>, int);
  for (const auto& [name, pool_op] : {std::pair<const char*, Pool>{"max_pool2d", ops::max_pool2d},
                                      std::pair<const char*, Pool>{"avg_pool2d", ops::avg_pool2d}}) {
    const char* op = name;
    const Pool pool = pool_op;  // a structured binding cannot be captured in clang 14
    cases.push_back({op, "kernel 2, stride 2 (the default)", {pool_image},
                     [pool](const V& v) { return pool(v[0], 2, std::nullopt, 0); }});
    cases.push_back({op, "kernel 3, stride 1: overlapping windows", {odd_pool_image},
                     [pool](const V& v) { return pool(v[0], 3, 1, 0); }});
    cases.push_back({op, "kernel 3, stride 2, padding 1: overlapping windows", {odd_pool_image},
                     [pool](const V& v) { return pool(v[0], 3, 2, 1); }});
  }
  cases.push_back({"conv2d", "a small CNN: conv, relu, max pool, conv, avg pool",
                   {{{2, 2, 8, 8}, {4, 2, 24, 24}}, {{3, 2, 3, 3}, {6, 2, 3, 3}}, {{3}, {6}}, {{2, 3, 3, 3}, {4, 6, 3, 3}}},
                   [](const V& v) {
                     Var h = ops::max_pool2d(ops::relu(ops::conv2d(v[0], v[1], v[2], 1, 1)), 2);  // (N, 3, H/2, W/2)
                     return ops::avg_pool2d(ops::conv2d(h, v[3], Var(), 1, 1), 2, 1);
                   }});
  // scaled_dot_product_attention (src/ops/fused/attention.cpp): q, k, v (B, H, T, d); causal and
  // not, Tq != Tk, an odd head size, T = 1, and one value as q, k and v
  {
    using ops::scaled_dot_product_attention;
    const char* op = "scaled_dot_product_attention";
    const CaseInput q{{2, 2, 3, 4}, {2, 3, 40, 16}}, k{{2, 2, 5, 4}, {2, 3, 50, 16}}, v{{2, 2, 5, 3}, {2, 3, 50, 8}};
    cases.push_back({op, "Tq != Tk", {q, k, v}, [](const V& x) { return scaled_dot_product_attention(x[0], x[1], x[2]); }});
    const CaseInput cq{{1, 2, 5, 4}, {2, 2, 70, 16}}, cv{{1, 2, 5, 3}, {2, 2, 70, 8}};
    cases.push_back({op, "causal", {cq, cq, cv}, [](const V& x) { return scaled_dot_product_attention(x[0], x[1], x[2], true); }});
    const CaseInput oq{{1, 1, 4, 3}, {1, 3, 37, 5}}, ok{{1, 1, 6, 3}, {1, 3, 45, 5}}, ov{{1, 1, 6, 5}, {1, 3, 45, 7}};
    cases.push_back({op, "odd head size, scale 0.7", {oq, ok, ov},
                     [](const V& x) { return scaled_dot_product_attention(x[0], x[1], x[2], false, 0.7); }});
    const CaseInput co{{1, 1, 6, 3}, {2, 1, 65, 5}};
    cases.push_back({op, "causal, odd head size", {co, co, co},
                     [](const V& x) { return scaled_dot_product_attention(x[0], x[1], x[2], true); }});
    const CaseInput one{{1, 2, 1, 4}, {3, 4, 1, 8}};
    cases.push_back({op, "T = 1, causal", {one, one, one},
                     [](const V& x) { return scaled_dot_product_attention(x[0], x[1], x[2], true); }});
    const CaseInput self{{2, 1, 4, 4}, {2, 2, 60, 16}};
    cases.push_back({op, "one value as q, k and v", {self},
                     [](const V& x) { return scaled_dot_product_attention(x[0], x[0], x[0], true); }});
  }
  // qkv_attention (src/ops/fused/attention.cpp): qkv (B, T, 3C) read in place; causal and not, a
  // head size that is no multiple of 4 (the kernels' unaligned loads), value_add broadcast and whole
  {
    const char* op = "qkv_attention";
    const CaseInput qkv{{2, 5, 24}, {2, 70, 96}};
    cases.push_back({op, "causal, 2 heads", {qkv}, [](const V& x) { return ops::qkv_attention(x[0], 2); }});
    const CaseInput odd{{1, 4, 18}, {2, 45, 45}};
    cases.push_back({op, "not causal, odd head size, scale 0.6", {odd},
                     [](const V& x) { return ops::qkv_attention(x[0], 3, false, Var(), 0.6); }});
    const CaseInput add_rows{{5, 8}, {70, 32}};
    cases.push_back({op, "value_add broadcast over the batch", {qkv, add_rows},
                     [](const V& x) { return ops::qkv_attention(x[0], 2, true, x[1]); }});
    const CaseInput add_all{{2, 5, 8}, {2, 70, 32}};
    cases.push_back({op, "value_add whole", {qkv, add_all}, [](const V& x) { return ops::qkv_attention(x[0], 2, true, x[1]); }});
  }
  // ---- matrix products of the N-d ops: batches, broadcast batch axes, 1-D sides, linear. The large
  // shapes take the CPU kernel's tiles, its batch split and its sums over broadcast axes.
  cases.push_back({"matmul", "batched", {{{2, 3, 4}, {3, 300, 120}}, {{2, 4, 2}, {3, 120, 1100}}},
                   [](const V& v) { return ops::matmul(v[0], v[1]); }});
  cases.push_back({"matmul", "broadcast batch axes", {{{2, 1, 3, 4}, {2, 1, 100, 64}}, {{3, 4, 2}, {3, 64, 90}}},
                   [](const V& v) { return ops::matmul(v[0], v[1]); }});
  cases.push_back({"matmul", "one weight for a batch", {{{2, 3, 3, 4}, {4, 8, 64, 64}}, {{4, 2}, {64, 96}}},
                   [](const V& v) { return ops::matmul(v[0], v[1]); }});
  cases.push_back({"matmul", "vector @ batched matrices", {{{4}, {300}}, {{2, 4, 3}, {5, 300, 200}}},
                   [](const V& v) { return ops::matmul(v[0], v[1]); }});
  cases.push_back({"matmul", "matrices @ vector", {{{2, 3, 4}, {4, 200, 300}}, {{4}, {300}}},
                   [](const V& v) { return ops::matmul(v[0], v[1]); }});
  cases.push_back({"matmul", "dot", {{{5}, {70000}}, {{5}, {70000}}}, [](const V& v) { return ops::matmul(v[0], v[1]); }});
  cases.push_back({"linear", "with bias", {{{2, 3, 4}, {8, 64, 128}}, {{5, 4}, {80, 128}}, {{5}, {80}}},
                   [](const V& v) { return ops::linear(v[0], v[1], v[2]); }});
  cases.push_back({"linear", "without bias", {{{3, 4}, {300, 128}}, {{5, 4}, {80, 128}}},
                   [](const V& v) { return ops::linear(v[0], v[1]); }});
  // the fused MLP: x (..., C), w_fc (H, C), w_proj (O, H), biases (H,) and (O,)
  {
    const CaseInput x{{2, 3, 4}, {4, 50, 64}}, w_fc{{12, 4}, {256, 64}, -0.5, 0.5}, w_proj{{5, 12}, {48, 256}, -0.5, 0.5};
    const CaseInput b_fc{{12}, {256}}, b_proj{{5}, {48}};
    cases.push_back({"mlp", "gelu_tanh, no biases", {x, w_fc, w_proj},
                     [](const V& v) { return ops::mlp(v[0], v[1], v[2], ops::MlpActivation::gelu_tanh); }});
    cases.push_back({"mlp", "exact gelu, both biases", {x, w_fc, w_proj, b_fc, b_proj},
                     [](const V& v) { return ops::mlp(v[0], v[1], v[2], ops::MlpActivation::gelu, v[3], v[4]); }});
    cases.push_back({"mlp", "silu, the first bias, x used after it too", {x, w_fc, w_proj, b_fc},
                     [](const V& v) {
                       Var y = ops::mlp(v[0], v[1], v[2], ops::MlpActivation::silu, v[3]);
                       return y + ops::sum(v[0]);  // x's gradient from two places
                     }});
  }
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
    // the residual add and the norm after it, both outputs in the loss
    cases.push_back({"add_layer_norm", "weight and bias", {cube, cube, w4, b4}, [](const V& v) {
                       const ops::SumAndNorm o = ops::add_layer_norm(v[0], v[1], v[2], v[3]);
                       return ops::mul(o.sum, o.normed);
                     }});
    cases.push_back({"add_rms_norm", "weight", {rows, rows, w5}, [](const V& v) {
                       const ops::SumAndNorm o = ops::add_rms_norm(v[0], v[1], v[2]);
                       return ops::mul(o.sum, o.normed);
                     }});
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
  if (op == "to") return "tests/ops, \"to casts and carries the gradient back\" (an f32 parameter's check)";
  return nullptr;
}

}  // namespace tapegrad::testing
