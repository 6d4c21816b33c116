// The oracle driver: runs every case of the table below through tapegrad and writes what it saw as
// JSON lines, which tests/oracle/compare.py rebuilds in PyTorch and checks value by value.
//
// For each case, dtype (f64, f32) and seed: random inputs (fixed seeds, the same values for both
// dtypes), the forward, and for a floating output loss = sum(out * R) (R random of out's shape; a
// 0-d out is the loss itself) and backward. One line per run: the case's name, dtype, seed and
// PyTorch snippet, every input (kind, dtype, shape, values), R, the output and every parameter's
// gradient (null where none reached it).
//
// Adding an op to the oracle is one line in cases() (tests/oracle/README.md).
//
// Usage: oracle_driver OUT.jsonl [NAME-SUBSTRING]   (only the cases whose name contains it)
#include <cmath>
#include <fstream>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "tapegrad/graph/graph.hpp"
#include "tapegrad/io/json.hpp"
#include "tapegrad/ops/fused/embedding_cross_entropy.hpp"
#include "tapegrad/ops/ops.hpp"

namespace {

using namespace tapegrad;
using namespace tapegrad::ops;
using V = std::vector<Var>;

// One input of a case.
struct In {
  enum class Kind { param, ids, mask } kind = Kind::param;
  Shape shape;
  double lo = -1, hi = 1;        // param: uniform in [lo, hi); ids: integers in [lo, hi)
  std::vector<double> extremes;  // param: each element is one of these with probability 1/2
  DType ids_dtype = DType::i64;
};

// A float parameter uniform in [lo, hi).
In P(Shape s, double lo = -1, double hi = 1) { return {In::Kind::param, s, lo, hi, {}, DType::i64}; }
// A float parameter in [lo, hi) whose elements are, half of them, one of `extremes`.
In X(Shape s, std::vector<double> extremes, double lo = -1, double hi = 1) {
  return {In::Kind::param, s, lo, hi, std::move(extremes), DType::i64};
}
// Integer ids in [lo, hi), an input (no gradient).
In Ids(Shape s, int64_t hi, int64_t lo = 0, DType dtype = DType::i64) {
  return {In::Kind::ids, s, static_cast<double>(lo), static_cast<double>(hi), {}, dtype};
}
// A u8 mask of 0s and 1s, an input.
In M(Shape s) { return {In::Kind::mask, s, 0, 2, {}, DType::u8}; }

struct Case {
  std::string name;  // unique; what compare.py prints
  std::vector<In> inputs;
  std::function<Var(const V&)> build;  // the graph from the inputs x[0], x[1], ...
  // The same in PyTorch, with x0, x1, ... bound (params f64/f32 requiring grad, ids int64, masks
  // bool), torch, F (torch.nn.functional), math and dtype (the run's): an expression, or statements
  // that assign `out`.
  std::string torch;
  int seeds = 3;
  // A looser (rtol, atol) for this case's runs (each dtype keeps its own where that is looser),
  // only with its reason; none so far.
  struct {
    double rtol = 0, atol = 0;
    const char* reason = nullptr;
  } loose = {};
};

#define BUILD(...) [](const V& x) -> Var { return __VA_ARGS__; }

// x (B, T, C) -> causal self-attention's (B, H, T, hd) output, written out of 2-D matmuls, slices,
// softmax and masked_fill; x is read by three projections, and each head's q, k, v are slices of them.
Var attention(const V& x, int64_t heads) {
  const int64_t B = x[0].shape()[0], T = x[0].shape()[1], C = x[0].shape()[2], hd = C / heads;
  Var x2 = reshape(x[0], Shape{B * T, C});
  auto heads_of = [&](Var w) { return permute(reshape(matmul(x2, w), Shape{B, T, heads, hd}), {0, 2, 1, 3}); };
  Var q = reshape(heads_of(x[1]), Shape{B * heads, T, hd}), k = reshape(heads_of(x[2]), Shape{B * heads, T, hd}),
      v = reshape(heads_of(x[3]), Shape{B * heads, T, hd});
  Var hidden = x[0].graph().input(causal_mask(T));
  std::vector<Var> outs;
  for (int64_t i = 0; i < B * heads; ++i) {
    auto one = [&](Var t) { return reshape(slice(t, 0, i, i + 1), Shape{T, hd}); };
    Var att = scale(matmul(one(q), transpose(one(k))), 1.0 / std::sqrt(static_cast<double>(hd)));
    att = softmax(masked_fill(att, hidden, -INFINITY), -1);
    outs.push_back(matmul(att, one(v)));
  }
  return reshape(stack(outs, 0), Shape{B, heads, T, hd});
}
const char* const kAttentionTorch =
    "B, T, C = x0.shape; H = 2; hd = C // H\n"
    "heads = lambda w: (x0.reshape(B * T, C) @ w).reshape(B, T, H, hd).permute(0, 2, 1, 3)\n"
    "q, k, v = heads(x1), heads(x2), heads(x3)\n"
    "att = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(hd))\n"
    "att = att.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float('-inf'))\n"
    "out = torch.softmax(att, -1) @ v";

// The table. Value ranges keep each op inside its documented domain (log, sqrt, rsqrt, pow's base
// and div's divisor away from 0, except in the cases at 0); uniform values give no exact ties, and
// the X inputs make ties, zeros and extremes on purpose (never in the max pools: which element of
// a tied window wins is left to each implementation).
std::vector<Case> cases() {
  const std::vector<double> big_gap{0.0, -745.0};  // exp(-745) is the smallest f64 subnormal; 0 in f32
  const std::vector<double> nan_inf{NAN, INFINITY, -INFINITY};
  std::vector<Case> c = {
      // ---- broadcasting binary ops
      {"add", {P({2, 3}), P({2, 3})}, BUILD(add(x[0], x[1])), "x0 + x1"},
      {"add: (2, 1, 3) + (4, 1)", {P({2, 1, 3}), P({4, 1})}, BUILD(add(x[0], x[1])), "x0 + x1"},
      {"sub: size-1 axes on both sides", {P({3, 1, 4}), P({1, 5, 1})}, BUILD(sub(x[0], x[1])), "x0 - x1"},
      {"mul: a column", {P({2, 3}), P({2, 1})}, BUILD(mul(x[0], x[1])), "x0 * x1"},
      {"mul: a 0-d operand", {P({}), P({2, 3})}, BUILD(mul(x[0], x[1])), "x0 * x1"},
      {"mul: one value twice", {P({2, 3})}, BUILD(mul(x[0], x[0])), "x0 * x0"},
      {"div: a row", {P({2, 3}), P({3}, 0.5, 2)}, BUILD(div(x[0], x[1])), "x0 / x1"},
      {"div: negative divisors broadcast on the left", {P({3}), P({2, 3}, -2, -0.5)}, BUILD(div(x[0], x[1])), "x0 / x1"},
      {"maximum: (2, 3, 4) and (3, 1)", {P({2, 3, 4}), P({3, 1})}, BUILD(maximum(x[0], x[1])), "torch.maximum(x0, x1)"},
      {"maximum: one value twice (every element a tie)", {P({2, 3})}, BUILD(maximum(x[0], x[0])),
       "torch.maximum(x0, x0)"},
      {"maximum: ties split the gradient", {X({2, 3}, {0.5}), X({2, 3}, {0.5})}, BUILD(maximum(x[0], x[1])),
       "torch.maximum(x0, x1)"},
      {"minimum: ties split the gradient", {X({3}, {0.5}), X({2, 3}, {0.5})}, BUILD(minimum(x[0], x[1])),
       "torch.minimum(x0, x1)"},
      {"minimum: (4,) and (2, 4)", {P({4}), P({2, 4})}, BUILD(minimum(x[0], x[1])), "torch.minimum(x0, x1)"},
      {"pow: a broadcast exponent", {P({2, 3}, 0.5, 2), P({3}, -2, 2)}, BUILD(ops::pow(x[0], x[1])), "x0 ** x1"},
      {"pow: zero bases (an infinite da where b < 1)", {X({3, 4}, {0.0}, 0.5, 2), P({3, 4}, 0.25, 1.5)},
       BUILD(ops::pow(x[0], x[1])), "x0 ** x1"},
      {"pow: a scalar exponent", {P({2, 3}, 0.5, 2)}, BUILD(ops::pow(x[0], 2.5)), "x0 ** 2.5"},
      {"pow: an integer exponent of negative bases", {P({2, 3}, -2, 2)}, BUILD(ops::pow(x[0], 3.0)), "x0 ** 3"},
      {"scalar operators", {P({2, 3}, 0.5, 2)}, BUILD((x[0] * 0.5 + 1.0) * (1.0 - x[0]) + 2.0 / x[0] - x[0] / 4.0),
       "(x0 * 0.5 + 1) * (1 - x0) + 2 / x0 - x0 / 4"},
      {"scalar operators, the other sides", {P({2, 3})}, BUILD((2.0 + x[0]) * (x[0] - 0.25) + 0.5 * -x[0]),
       "(2 + x0) * (x0 - 0.25) + 0.5 * -x0"},
      {"scale", {P({2, 3})}, BUILD(scale(x[0], -2.5)), "x0 * -2.5"},
      {"add_row", {P({4, 3}), P({3})}, BUILD(add_row(x[0], x[1])), "x0 + x1"},
      // ---- NaN and infinities, where tapegrad keeps PyTorch's rules (values and gradients)
      {"maximum: NaN and infinities on either side", {X({4, 4}, nan_inf), X({4, 4}, nan_inf)},
       BUILD(maximum(x[0], x[1])), "torch.maximum(x0, x1)"},
      {"minimum: NaN and infinities on either side", {X({4, 4}, nan_inf), X({4}, nan_inf)},
       BUILD(minimum(x[0], x[1])), "torch.minimum(x0, x1)"},
      {"relu: NaN and infinities", {X({4, 4}, nan_inf)}, BUILD(relu(x[0])), "torch.relu(x0)"},
      {"abs: NaN and infinities", {X({4, 4}, nan_inf)}, BUILD(ops::abs(x[0])), "torch.abs(x0)"},
      {"clamp: NaN and infinities", {X({4, 4}, nan_inf)}, BUILD(clamp(x[0], -0.5, 0.3)), "torch.clamp(x0, -0.5, 0.3)"},
      {"max: NaN and infinities along an axis", {X({4, 4}, nan_inf)}, BUILD(ops::max(x[0], 1)),
       "torch.max(x0, dim=1).values"},
      {"softmax: NaN and infinities", {X({4, 4}, nan_inf)}, BUILD(softmax(x[0], 1)), "torch.softmax(x0, 1)"},
      {"logsumexp: NaN and infinities", {X({4, 4}, nan_inf)}, BUILD(logsumexp(x[0], 1)), "torch.logsumexp(x0, 1)"},
      {"max_pool2d: NaN and infinities", {X({1, 2, 4, 4}, nan_inf)}, BUILD(max_pool2d(x[0], 2)), "F.max_pool2d(x0, 2)"},
      // ---- unary ops (each on its functor's sampling range)
      {"neg", {P({2, 3, 4}, -2, 2)}, BUILD(neg(x[0])), "-x0"},
      {"exp", {P({2, 3, 4}, -2, 2)}, BUILD(ops::exp(x[0])), "torch.exp(x0)"},
      {"log", {P({2, 3, 4}, 0.5, 3)}, BUILD(ops::log(x[0])), "torch.log(x0)"},
      {"log: at 0 (-inf, an infinite gradient)", {X({2, 3}, {0.0}, 0.5, 3)}, BUILD(ops::log(x[0])), "torch.log(x0)"},
      {"tanh", {P({2, 3, 4}, -2, 2)}, BUILD(ops::tanh(x[0])), "torch.tanh(x0)"},
      {"relu", {P({2, 3, 4}, -2, 2)}, BUILD(relu(x[0])), "torch.relu(x0)"},
      {"relu: at 0", {X({2, 3, 4}, {0.0}, -2, 2)}, BUILD(relu(x[0])), "torch.relu(x0)"},
      {"sigmoid", {P({2, 3, 4}, -3, 3)}, BUILD(sigmoid(x[0])), "torch.sigmoid(x0)"},
      {"sigmoid: saturated, in [-40, 40]", {P({2, 3, 4}, -40, 40)}, BUILD(sigmoid(x[0])), "torch.sigmoid(x0)"},
      {"silu", {P({2, 3, 4}, -3, 3)}, BUILD(silu(x[0])), "F.silu(x0)"},
      {"gelu_tanh", {P({2, 3, 4}, -3, 3)}, BUILD(gelu_tanh(x[0])), "F.gelu(x0, approximate='tanh')"},
      {"gelu_erf", {P({2, 3, 4}, -3, 3)}, BUILD(gelu_erf(x[0])), "F.gelu(x0)"},
      {"gelu: approximate tanh", {P({2, 3, 4}, -3, 3)}, BUILD(gelu(x[0], Gelu::tanh)), "F.gelu(x0, approximate='tanh')"},
      {"gelu: approximate none", {P({2, 3, 4}, -5, 5)}, BUILD(gelu(x[0], Gelu::none)), "F.gelu(x0, approximate='none')"},
      {"sqrt", {P({2, 3, 4}, 0.5, 3)}, BUILD(ops::sqrt(x[0])), "torch.sqrt(x0)"},
      {"sqrt: at 0 (an infinite gradient)", {X({2, 3}, {0.0}, 0.5, 3)}, BUILD(ops::sqrt(x[0])), "torch.sqrt(x0)"},
      {"rsqrt", {P({2, 3, 4}, 0.5, 3)}, BUILD(rsqrt(x[0])), "torch.rsqrt(x0)"},
      {"abs", {P({2, 3, 4}, -2, 2)}, BUILD(ops::abs(x[0])), "torch.abs(x0)"},
      {"abs: at 0", {X({2, 3, 4}, {0.0}, -2, 2)}, BUILD(ops::abs(x[0])), "torch.abs(x0)"},
      {"square", {P({2, 3, 4}, -2, 2)}, BUILD(square(x[0])), "torch.square(x0)"},
      // ---- clamp, where, masked_fill, comparisons (values only), casts
      {"clamp", {P({2, 3, 4})}, BUILD(clamp(x[0], -0.5, 0.3)), "torch.clamp(x0, -0.5, 0.3)"},
      {"clamp: at its bounds", {X({2, 3, 4}, {-0.5, 0.3})}, BUILD(clamp(x[0], -0.5, 0.3)), "torch.clamp(x0, -0.5, 0.3)"},
      {"clamp: lo > hi gives hi", {P({2, 3})}, BUILD(clamp(x[0], 0.5, -0.5)), "torch.clamp(x0, 0.5, -0.5)"},
      {"where: three shapes broadcast", {M({2, 1, 4}), P({2, 3, 4}), P({4})}, BUILD(where(x[0], x[1], x[2])),
       "torch.where(x0, x1, x2)"},
      {"where: a 0-d other side", {M({3, 4}), P({3, 4}), P({})}, BUILD(where(x[0], x[1], x[2])),
       "torch.where(x0, x1, x2)"},
      {"masked_fill: a broadcast mask", {P({2, 3, 4}), M({3, 1})}, BUILD(masked_fill(x[0], x[1], -3.0)),
       "x0.masked_fill(x1, -3.0)"},
      {"masked_fill: -inf", {P({3, 4}), M({4})}, BUILD(masked_fill(x[0], x[1], -INFINITY)),
       "x0.masked_fill(x1, float('-inf'))"},
      {"eq: ties from maximum", {P({2, 3}), P({3})}, BUILD(eq(x[0], maximum(x[0], x[1]))), "x0 == torch.maximum(x0, x1)"},
      {"ne: ties from minimum", {P({2, 3}), P({3})}, BUILD(ne(x[0], minimum(x[0], x[1]))), "x0 != torch.minimum(x0, x1)"},
      {"lt", {P({2, 1, 4}), P({3, 1})}, BUILD(lt(x[0], x[1])), "x0 < x1"},
      {"gt", {P({2, 1, 4}), P({3, 1})}, BUILD(gt(x[0], x[1])), "x0 > x1"},
      {"le: ties from clamp", {P({2, 3, 4})}, BUILD(le(x[0], clamp(x[0], -0.3, 0.3))), "x0 <= torch.clamp(x0, -0.3, 0.3)"},
      {"ge: ties from clamp", {P({2, 3, 4})}, BUILD(ge(x[0], clamp(x[0], -0.3, 0.3))), "x0 >= torch.clamp(x0, -0.3, 0.3)"},
      {"to: f32 and back to f64", {P({2, 3}), P({3})}, BUILD(to(mul(to(x[0], DType::f32), to(x[1], DType::f32)), DType::f64)),
       "(x0.float() * x1.float()).double()"},
      {"to: f64 (a no-op in the f64 runs)", {P({2, 3})}, BUILD(ops::exp(to(x[0], DType::f64))), "torch.exp(x0.double())"},
      {"to: i64 truncates toward 0 (values only)", {P({2, 3}, -3, 3)}, BUILD(to(scale(x[0], 3.0), DType::i64)),
       "(x0 * 3).to(torch.int64)"},
      // ---- reductions along axes
      {"sum_axes: axis 1", {P({2, 3, 4})}, BUILD(sum(x[0], {1})), "torch.sum(x0, dim=1)"},
      {"sum_axes: axes 0 and -1, keepdim", {P({2, 3, 4})}, BUILD(sum(x[0], {0, -1}, true)),
       "torch.sum(x0, dim=(0, -1), keepdim=True)"},
      {"sum_axes: no axes (all), keepdim", {P({2, 3, 4})}, BUILD(sum(x[0], {}, true)),
       "torch.sum(x0, dim=(0, 1, 2), keepdim=True)"},
      {"sum_axes: an empty axis gives zeros", {P({0, 3})}, BUILD(sum(x[0], {0})), "torch.sum(x0, dim=0)"},
      {"sum", {P({2, 3, 4})}, BUILD(sum(x[0])), "torch.sum(x0)"},
      {"mean_axes: last axis", {P({2, 3, 4})}, BUILD(mean(x[0], {-1})), "torch.mean(x0, dim=-1)"},
      {"mean_axes: axes 0 and 1, keepdim", {P({2, 3, 4})}, BUILD(mean(x[0], {0, 1}, true)),
       "torch.mean(x0, dim=(0, 1), keepdim=True)"},
      {"mean", {P({2, 3, 4})}, BUILD(mean(x[0])), "torch.mean(x0)"},
      {"var: axes 1 and 2", {P({2, 3, 4})}, BUILD(var(x[0], {1, 2})), "torch.var(x0, dim=(1, 2))"},
      {"var: axis 0, keepdim, correction 0", {P({2, 3, 4})}, BUILD(var(x[0], {0}, true, 0)),
       "torch.var(x0, dim=0, keepdim=True, correction=0)"},
      {"var: all axes", {P({3, 5})}, BUILD(var(x[0], {})), "torch.var(x0)"},
      {"var: one element per row, correction 1 (NaN)", {P({3, 1})}, BUILD(var(x[0], {1})), "torch.var(x0, dim=1)"},
      {"max: axis 1", {P({2, 3, 4})}, BUILD(ops::max(x[0], 1)), "torch.max(x0, dim=1).values"},
      {"max: last axis, keepdim", {P({2, 3, 4})}, BUILD(ops::max(x[0], -1, true)),
       "torch.max(x0, dim=-1, keepdim=True).values"},
      {"max: everything", {P({2, 3, 4})}, BUILD(ops::max(x[0])), "torch.max(x0)"},
      {"max: ties along an axis go to the first", {X({3, 4}, {1.0})}, BUILD(ops::max(x[0], 1)),
       "torch.max(x0, dim=1).values"},
      // torch.max(x) shares a tie's gradient evenly; tapegrad's max(x) gives it to the first largest
      // element, as torch.max(x, dim) does (ops.hpp)
      {"max: everything, ties go to the first", {X({3, 4}, {1.0})}, BUILD(ops::max(x[0])),
       "x0.flatten().max(dim=0).values"},
      {"argmax: axis 0", {P({2, 3, 4})}, BUILD(argmax(x[0], 0)), "torch.argmax(x0, dim=0)"},
      {"argmax: last axis, keepdim", {P({2, 3, 4})}, BUILD(argmax(x[0], -1, true)),
       "torch.argmax(x0, dim=-1, keepdim=True)"},
      {"argmax: ties go to the first", {X({3, 4}, {1.0})}, BUILD(argmax(x[0], 1)), "torch.argmax(x0, dim=1)"},
      // ---- softmax family along several axes
      {"softmax: axis 0", {P({2, 3, 4}, -3, 3)}, BUILD(softmax(x[0], 0)), "torch.softmax(x0, dim=0)"},
      {"softmax: axis 1", {P({2, 3, 4}, -3, 3)}, BUILD(softmax(x[0], 1)), "torch.softmax(x0, dim=1)"},
      {"softmax: last axis, logits in [-30, 30]", {P({3, 7}, -30, 30)}, BUILD(softmax(x[0])), "torch.softmax(x0, dim=-1)"},
      {"softmax: extreme logits 0 and -745", {X({3, 6}, big_gap)}, BUILD(softmax(x[0], -1)), "torch.softmax(x0, dim=-1)"},
      {"softmax: an axis of size 1", {P({3, 1})}, BUILD(softmax(x[0], -1)), "torch.softmax(x0, dim=-1)"},
      {"log_softmax: axis 0", {P({2, 3, 4}, -3, 3)}, BUILD(log_softmax(x[0], 0)), "F.log_softmax(x0, dim=0)"},
      {"log_softmax: axis 1", {P({2, 3, 4}, -3, 3)}, BUILD(log_softmax(x[0], 1)), "F.log_softmax(x0, dim=1)"},
      {"log_softmax: last axis", {P({2, 3, 4}, -3, 3)}, BUILD(log_softmax(x[0])), "F.log_softmax(x0, dim=-1)"},
      {"log_softmax: extreme logits 0 and -745, axis 0", {X({6, 3}, big_gap)}, BUILD(log_softmax(x[0], 0)),
       "F.log_softmax(x0, dim=0)"},
      {"log_softmax: rows of 50304 with extreme logits", {X({2, 50304}, big_gap, -4, 4)}, BUILD(log_softmax(x[0], -1)),
       "F.log_softmax(x0, dim=-1)", 1},
      {"softmax: some -inf logits", {X({4, 3}, {-INFINITY})}, BUILD(softmax(x[0], -1)), "torch.softmax(x0, dim=-1)"},
      {"log_softmax: some -inf logits", {X({4, 3}, {-INFINITY})}, BUILD(log_softmax(x[0], -1)),
       "F.log_softmax(x0, dim=-1)"},
      {"log_softmax: some +inf logits (rows of NaN)", {X({4, 3}, {INFINITY})}, BUILD(log_softmax(x[0], -1)),
       "F.log_softmax(x0, dim=-1)"},
      {"logsumexp: some -inf logits, rows of -inf", {X({8, 2}, {-INFINITY})}, BUILD(logsumexp(x[0], -1)),
       "torch.logsumexp(x0, dim=-1)"},
      {"logsumexp: axis 1", {P({2, 3, 4}, -3, 3)}, BUILD(logsumexp(x[0], 1)), "torch.logsumexp(x0, dim=1)"},
      {"logsumexp: axis 0, keepdim", {P({2, 3, 4}, -3, 3)}, BUILD(logsumexp(x[0], 0, true)),
       "torch.logsumexp(x0, dim=0, keepdim=True)"},
      {"logsumexp: extreme logits 0 and -745", {X({4, 5}, big_gap)}, BUILD(logsumexp(x[0], -1)),
       "torch.logsumexp(x0, dim=-1)"},
      // ---- cross_entropy
      {"cross_entropy: mean", {P({4, 5}, -2, 2), Ids({4}, 5)}, BUILD(cross_entropy(x[0], x[1])), "F.cross_entropy(x0, x1)"},
      {"cross_entropy: sum, i32 targets", {P({4, 5}, -2, 2), Ids({4}, 5, 0, DType::i32)},
       BUILD(cross_entropy(x[0], x[1], Reduction::sum)), "F.cross_entropy(x0, x1, reduction='sum')"},
      {"cross_entropy: none", {P({4, 5}, -2, 2), Ids({4}, 5)}, BUILD(cross_entropy(x[0], x[1], Reduction::none)),
       "F.cross_entropy(x0, x1, reduction='none')"},
      {"cross_entropy: (B, T, V), mean", {P({2, 3, 5}, -2, 2), Ids({2, 3}, 5)}, BUILD(cross_entropy(x[0], x[1])),
       "F.cross_entropy(x0.permute(0, 2, 1), x1)"},
      {"cross_entropy: (B, T, V), ignore_index 2, mean", {P({2, 4, 5}, -2, 2), Ids({2, 4}, 5)},
       BUILD(cross_entropy(x[0], x[1], Reduction::mean, 2)), "F.cross_entropy(x0.permute(0, 2, 1), x1, ignore_index=2)"},
      {"cross_entropy: (B, T, V), ignore_index 2, none", {P({2, 4, 5}, -2, 2), Ids({2, 4}, 5)},
       BUILD(cross_entropy(x[0], x[1], Reduction::none, 2)),
       "F.cross_entropy(x0.permute(0, 2, 1), x1, reduction='none', ignore_index=2)"},
      {"cross_entropy: (B, T, U, V), ignore_index -1, sum", {P({2, 3, 2, 4}, -2, 2), Ids({2, 3, 2}, 4, -1)},
       BUILD(cross_entropy(x[0], x[1], Reduction::sum, -1)),
       "F.cross_entropy(x0.permute(0, 3, 1, 2), x1, reduction='sum', ignore_index=-1)"},
      {"cross_entropy: extreme logits 0 and -745", {X({5, 4}, big_gap), Ids({5}, 4)}, BUILD(cross_entropy(x[0], x[1])),
       "F.cross_entropy(x0, x1)"},
      {"cross_entropy: every target ignored (the mean is NaN)", {P({3, 4}), Ids({3}, 2, 1)},
       BUILD(cross_entropy(x[0], x[1], Reduction::mean, 1)), "F.cross_entropy(x0, x1, ignore_index=1)"},
      {"cross_entropy: 50304 classes", {P({3, 50304}, -4, 4), Ids({3}, 50304)}, BUILD(cross_entropy(x[0], x[1])),
       "F.cross_entropy(x0, x1)", 1},
      // ---- the fused embedding_cross_entropy (ops/fused): cross_entropy(gather(table, ids), targets)
      {"embedding_cross_entropy: mean, repeated ids", {P({6, 5}, -2, 2), Ids({7}, 6), Ids({7}, 5)},
       BUILD(embedding_cross_entropy(x[0], x[1], x[2])), "F.cross_entropy(F.embedding(x1, x0), x2)"},
      {"embedding_cross_entropy: sum", {P({6, 5}, -2, 2), Ids({7}, 6), Ids({7}, 5)},
       BUILD(embedding_cross_entropy(x[0], x[1], x[2], Reduction::sum)),
       "F.cross_entropy(F.embedding(x1, x0), x2, reduction='sum')"},
      {"embedding_cross_entropy: none", {P({6, 5}, -2, 2), Ids({7}, 6), Ids({7}, 5)},
       BUILD(embedding_cross_entropy(x[0], x[1], x[2], Reduction::none)),
       "F.cross_entropy(F.embedding(x1, x0), x2, reduction='none')"},
      // ---- matmul
      {"matmul", {P({3, 4}), P({4, 5})}, BUILD(matmul(x[0], x[1])), "x0 @ x1"},
      {"matmul: a transposed operand", {P({4, 3}), P({4, 2})}, BUILD(matmul(transpose(x[0]), x[1])), "x0.t() @ x1"},
      {"matmul: (1, 7) @ (7, 1)", {P({1, 7}), P({7, 1})}, BUILD(matmul(x[0], x[1])), "x0 @ x1"},
      {"matmul: inner size 0", {P({2, 0}), P({0, 3})}, BUILD(matmul(x[0], x[1])), "x0 @ x1"},
      {"transpose", {P({2, 3})}, BUILD(transpose(x[0])), "x0.t()"},
      // ---- shape ops
      {"reshape: -1", {P({2, 3, 4})}, BUILD(reshape(x[0], {4, -1})), "x0.reshape(4, -1)"},
      {"reshape: to 0-d", {P({1, 1})}, BUILD(reshape(x[0], Shape{})), "x0.reshape(())"},
      {"flatten", {P({2, 3, 4})}, BUILD(flatten(x[0])), "torch.flatten(x0)"},
      {"flatten: axes 1 to 2", {P({2, 3, 4, 2})}, BUILD(flatten(x[0], 1, 2)), "torch.flatten(x0, 1, 2)"},
      {"flatten: from axis -2", {P({2, 3, 4})}, BUILD(flatten(x[0], -2)), "torch.flatten(x0, -2)"},
      {"flatten: a 0-d tensor", {P({})}, BUILD(flatten(x[0])), "torch.flatten(x0)"},
      {"permute", {P({2, 3, 4})}, BUILD(permute(x[0], {2, 0, 1})), "x0.permute(2, 0, 1)"},
      {"permute: negative axes", {P({2, 3, 4, 2})}, BUILD(permute(x[0], {-1, 1, -4, 2})), "x0.permute(-1, 1, -4, 2)"},
      {"transpose: axes 0 and 2", {P({2, 3, 4})}, BUILD(transpose(x[0], 0, 2)), "x0.transpose(0, 2)"},
      {"transpose: the last two axes", {P({2, 3, 4})}, BUILD(transpose(x[0], -1, -2)), "x0.transpose(-1, -2)"},
      {"unsqueeze: axis 1", {P({2, 3})}, BUILD(unsqueeze(x[0], 1)), "x0.unsqueeze(1)"},
      {"unsqueeze: axis -1", {P({2, 3})}, BUILD(unsqueeze(x[0], -1)), "x0.unsqueeze(-1)"},
      {"squeeze", {P({2, 1, 4})}, BUILD(squeeze(x[0], 1)), "x0.squeeze(1)"},
      {"broadcast_to: (3, 1) to (2, 3, 5)", {P({3, 1})}, BUILD(broadcast_to(x[0], Shape{2, 3, 5})),
       "x0.broadcast_to((2, 3, 5))"},
      {"broadcast_to: (4,) to (2, 3, 4)", {P({4})}, BUILD(broadcast_to(x[0], Shape{2, 3, 4})), "x0.broadcast_to((2, 3, 4))"},
      {"slice: [:, 1:-1]", {P({2, 5, 3})}, BUILD(slice(x[0], 1, 1, -1)), "x0[:, 1:-1]"},
      {"slice: [..., -3:100] (clamped)", {P({2, 3, 5})}, BUILD(slice(x[0], -1, -3, 100)), "x0[..., -3:100]"},
      {"slice: [0:1]", {P({3, 2})}, BUILD(slice(x[0], 0, 0, 1)), "x0[0:1]"},
      {"slice: empty ([2:1])", {P({3, 2})}, BUILD(slice(x[0], 0, 2, 1)), "x0[2:1]"},
      {"concat: three sizes along axis 1", {P({2, 1, 3}), P({2, 4, 3}), P({2, 2, 3})},
       BUILD(concat({x[0], ops::tanh(x[1]), x[2]}, 1)), "torch.cat([x0, torch.tanh(x1), x2], dim=1)"},
      {"concat: an empty part", {P({2, 0}), P({2, 3})}, BUILD(concat({x[0], x[1]}, 1)), "torch.cat([x0, x1], dim=1)"},
      {"concat: one input twice, last axis", {P({2, 3}), P({2, 2})}, BUILD(concat({x[0], x[1], x[0]}, -1)),
       "torch.cat([x0, x1, x0], dim=-1)"},
      {"stack: axis 0", {P({2, 3}), P({2, 3})}, BUILD(stack({x[0], x[1]}, 0)), "torch.stack([x0, x1], dim=0)"},
      {"stack: axis -1, one input twice", {P({2, 3}), P({2, 3})}, BUILD(stack({x[0], x[1], x[0]}, -1)),
       "torch.stack([x0, x1, x0], dim=-1)"},
      {"split: two parts along axis 2",
       {P({2, 3, 4})},
       [](const V& x) {
         const std::vector<Var> p = split(x[0], {1, 3}, 2);
         return mul(p[1], sum(p[0], {2}, true));
       },
       "a, b = torch.split(x0, [1, 3], dim=2)\nout = b * a.sum(2, keepdim=True)"},
      {"split: three parts along axis 0, concatenated in reverse",
       {P({4, 3})},
       [](const V& x) {
         const std::vector<Var> p = split(x[0], {2, 1, 1}, 0);
         return concat({p[2], scale(p[1], 2.0), p[0]}, 0);
       },
       "a, b, c = torch.split(x0, [2, 1, 1], dim=0)\nout = torch.cat([c, b * 2, a], dim=0)"},
      // ---- indexing
      {"embedding: (B, T) ids", {P({6, 3}), Ids({2, 5}, 6)}, BUILD(embedding(x[0], x[1])), "F.embedding(x1, x0)"},
      {"embedding: (2, 3, 2) i32 ids", {P({5, 4}), Ids({2, 3, 2}, 5, 0, DType::i32)}, BUILD(embedding(x[0], x[1])),
       "F.embedding(x1, x0)"},
      {"gather: rows of a table, repeated ids", {P({6, 3}), Ids({7}, 6)}, BUILD(gather(x[0], x[1])), "x0[x1]"},
      {"index_select: axis 1, repeated ids", {P({2, 3, 4}), Ids({5}, 3)}, BUILD(index_select(x[0], 1, x[1])),
       "torch.index_select(x0, 1, x1)"},
      {"index_select: axis -1, i32 ids", {P({3, 4}), Ids({6}, 4, 0, DType::i32)}, BUILD(index_select(x[0], -1, x[1])),
       "torch.index_select(x0, -1, x1)"},
      {"gather_axis: last axis", {P({2, 3, 4}), Ids({2, 3, 2}, 4)}, BUILD(gather(x[0], 2, x[1])), "torch.gather(x0, 2, x1)"},
      {"gather_axis: axis 0, more ids than rows", {P({2, 3, 4}), Ids({5, 3, 4}, 2)}, BUILD(gather(x[0], 0, x[1])),
       "torch.gather(x0, 0, x1)"},
      {"tril", {P({2, 3, 4})}, BUILD(tril(x[0])), "torch.tril(x0)"},
      {"tril: k = 1", {P({4, 4})}, BUILD(tril(x[0], 1)), "torch.tril(x0, 1)"},
      {"tril: k = -1, wide", {P({2, 3, 5})}, BUILD(tril(x[0], -1)), "torch.tril(x0, -1)"},
      // ---- images (N, C, H, W)
      {"conv2d: stride 1, padding 0, bias", {P({2, 3, 5, 5}), P({4, 3, 3, 3}), P({4})},
       BUILD(conv2d(x[0], x[1], x[2])), "F.conv2d(x0, x1, x2)"},
      {"conv2d: stride 2, padding 1, bias", {P({2, 3, 5, 5}), P({4, 3, 3, 3}), P({4})},
       BUILD(conv2d(x[0], x[1], x[2], 2, 1)), "F.conv2d(x0, x1, x2, stride=2, padding=1)"},
      {"conv2d: a 2x3 kernel, stride 2, padding 1, no bias, odd sizes", {P({2, 2, 6, 5}), P({3, 2, 2, 3})},
       BUILD(conv2d(x[0], x[1], Var(), 2, 1)), "F.conv2d(x0, x1, stride=2, padding=1)"},
      {"conv2d: 1x1 kernel, padding 1, bias", {P({2, 3, 4, 4}), P({5, 3, 1, 1}), P({5})},
       BUILD(conv2d(x[0], x[1], x[2], 1, 1)), "F.conv2d(x0, x1, x2, padding=1)"},
      {"max_pool2d: kernel 2", {P({2, 2, 6, 6})}, BUILD(max_pool2d(x[0], 2)), "F.max_pool2d(x0, 2)"},
      {"max_pool2d: kernel 3, stride 1", {P({2, 3, 7, 5})}, BUILD(max_pool2d(x[0], 3, 1)), "F.max_pool2d(x0, 3, stride=1)"},
      {"max_pool2d: kernel 3, stride 2, padding 1", {P({2, 3, 7, 5})}, BUILD(max_pool2d(x[0], 3, 2, 1)),
       "F.max_pool2d(x0, 3, stride=2, padding=1)"},
      {"avg_pool2d: kernel 2", {P({2, 2, 6, 6})}, BUILD(avg_pool2d(x[0], 2)), "F.avg_pool2d(x0, 2)"},
      {"avg_pool2d: kernel 3, stride 1", {P({2, 3, 7, 5})}, BUILD(avg_pool2d(x[0], 3, 1)), "F.avg_pool2d(x0, 3, stride=1)"},
      {"avg_pool2d: kernel 3, stride 2, padding 1 (counted as 0)", {P({2, 3, 7, 5})}, BUILD(avg_pool2d(x[0], 3, 2, 1)),
       "F.avg_pool2d(x0, 3, stride=2, padding=1)"},
      // ---- composite graphs with fan-out
      {"composite: an MLP with a weight used twice", {P({6, 4}), P({4, 4}), P({4}), Ids({6}, 4)},
       BUILD(cross_entropy(matmul(ops::tanh(add_row(matmul(x[0], x[1]), x[2])), x[1]), x[3])),
       "h = torch.tanh(x0 @ x1 + x2)\nout = F.cross_entropy(h @ x1, x3)"},
      {"composite: causal attention on (B, H, T, hd), x read by three projections",
       {P({2, 5, 8}), P({8, 8}), P({8, 8}), P({8, 8})}, [](const V& x) { return attention(x, 2); }, kAttentionTorch},
      {"composite: layer norm from mean, var and rsqrt, against F.layer_norm", {P({4, 6}, -2, 2), P({6}), P({6})},
       [](const V& x) {
         Var mu = mean(x[0], {-1}, true), v = var(x[0], {-1}, true, 0);
         return add(mul(mul(sub(x[0], mu), rsqrt(v + 1e-5)), x[1]), x[2]);
       },
       "F.layer_norm(x0, (x0.shape[-1],), x1, x2, eps=1e-5)"},
      {"composite: tied embedding (the table gathered and multiplied)", {P({7, 4}), Ids({2, 3}, 7), Ids({2, 3}, 7)},
       [](const V& x) {
         Var h = ops::tanh(reshape(embedding(x[0], x[1]), Shape{6, 4}));
         return cross_entropy(matmul(h, transpose(x[0])), reshape(x[2], Shape{6}));
       },
       "h = torch.tanh(F.embedding(x1, x0).reshape(6, 4))\nout = F.cross_entropy(h @ x0.t(), x2.reshape(6))"},
      {"composite: a residual GELU MLP", {P({3, 4}), P({4, 8}), P({8, 4})},
       BUILD(add(x[0], matmul(gelu(matmul(x[0], x[1]), Gelu::tanh), x[2]))),
       "x0 + F.gelu(x0 @ x1, approximate='tanh') @ x2"},
      {"composite: entropy from softmax and log_softmax of one value", {P({3, 5}, -3, 3)},
       BUILD(neg(sum(mul(softmax(x[0], 1), log_softmax(x[0], 1)), {1}))),
       "-(torch.softmax(x0, 1) * F.log_softmax(x0, 1)).sum(1)"},
      {"composite: a small CNN (conv, relu, max pool, conv, avg pool, cross-entropy)",
       {P({2, 2, 8, 8}), P({3, 2, 3, 3}), P({3}), P({4, 3, 3, 3}), Ids({2, 2, 2}, 4)},
       [](const V& x) {
         Var h = max_pool2d(relu(conv2d(x[0], x[1], x[2], 1, 1)), 2);  // (2, 3, 4, 4)
         Var z = avg_pool2d(conv2d(h, x[3], Var(), 1, 1), 2);          // (2, 4, 2, 2)
         return cross_entropy(permute(z, {0, 2, 3, 1}), x[4]);
       },
       "h = F.max_pool2d(torch.relu(F.conv2d(x0, x1, x2, padding=1)), 2)\n"
       "out = F.cross_entropy(F.avg_pool2d(F.conv2d(h, x3, padding=1), 2), x4)"},
      // ---- matrix products of the N-d ops: batches, broadcast batch axes, 1-D sides, linear
      {"matmul: batched", {P({2, 3, 4}), P({2, 4, 5})}, BUILD(matmul(x[0], x[1])), "x0 @ x1"},
      {"matmul: broadcast batch axes", {P({2, 1, 3, 4}), P({3, 4, 2})}, BUILD(matmul(x[0], x[1])), "x0 @ x1"},
      {"matmul: one weight for a batch", {P({2, 3, 5, 4}), P({4, 3})}, BUILD(matmul(x[0], x[1])), "x0 @ x1"},
      {"matmul: vector @ batched matrices", {P({4}), P({2, 4, 3})}, BUILD(matmul(x[0], x[1])), "x0 @ x1"},
      {"matmul: batched matrices @ vector", {P({2, 3, 4}), P({4})}, BUILD(matmul(x[0], x[1])), "x0 @ x1"},
      {"matmul: dot", {P({6}), P({6})}, BUILD(matmul(x[0], x[1])), "x0 @ x1"},
      {"linear: bias", {P({2, 3, 4}), P({5, 4}), P({5})}, BUILD(linear(x[0], x[1], x[2])), "F.linear(x0, x1, x2)"},
      {"linear: no bias, 1-D x", {P({4}), P({5, 4})}, BUILD(linear(x[0], x[1])), "F.linear(x0, x1)"},
      // normalisation and dropout (src/ops/fused/norm.cpp, dropout.cpp): layer_norm against
      // F.layer_norm, rms_norm against its definition (torch 1.13 has no rms_norm), and the two
      // masks every generator draws alike (p = 1, eval mode)
      {"layer_norm: weight and bias", {P({4, 6}, -2, 2), P({6}), P({6})}, BUILD(layer_norm(x[0], x[1], x[2])),
       "F.layer_norm(x0, (6,), x1, x2, eps=1e-5)"},
      {"layer_norm: 3-D, no affine, eps 1e-3", {P({2, 3, 5}, -2, 2)}, BUILD(layer_norm(x[0], Var(), Var(), 1e-3)),
       "F.layer_norm(x0, (5,), eps=1e-3)"},
      {"layer_norm: bias, no weight", {P({3, 7}), P({7})}, BUILD(layer_norm(x[0], Var(), x[1])),
       "F.layer_norm(x0, (7,), None, x1)"},
      {"rms_norm: weight", {P({4, 6}, -2, 2), P({6})}, BUILD(rms_norm(x[0], x[1], 1e-6)),
       "x0 * torch.rsqrt(x0.pow(2).mean(-1, keepdim=True) + 1e-6) * x1"},
      {"rms_norm: 3-D, no weight", {P({2, 3, 5})}, BUILD(rms_norm(x[0])),
       "x0 * torch.rsqrt(x0.pow(2).mean(-1, keepdim=True) + 1e-6)"},
      {"dropout: p = 1 drops everything", {P({3, 4})},
       [](const V& x) {
         Generator gen(1);
         return dropout(x[0], 1.0, gen);
       },
       "F.dropout(x0, 1.0)"},
      {"dropout: eval mode is the identity", {P({3, 4})},
       [](const V& x) {
         Generator gen(1);
         return mul(dropout(x[0], 0.5, gen, false), x[0]);
       },
       "F.dropout(x0, 0.5, training=False) * x0"},
  };
  return c;
}

// ---- running a case

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

Tensor random_input(const In& in, DType dtype, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> v(static_cast<size_t>(in.shape.numel()));
  if (in.kind != In::Kind::param) {
    const auto lo = static_cast<int64_t>(in.lo), n = static_cast<int64_t>(in.hi) - lo;
    for (double& e : v) e = static_cast<double>(lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(n)));
    return Tensor::from_doubles(v, in.shape, in.ids_dtype);
  }
  std::uniform_real_distribution<double> u(in.lo, in.hi);
  for (double& e : v) {
    e = u(rng);
    if (!in.extremes.empty() && rng() % 2 == 0) e = in.extremes[rng() % in.extremes.size()];
  }
  return Tensor::from_doubles(v, in.shape, dtype);
}

json::Value tensor_json(const Tensor& t) {
  json::Value::Array shape, values;
  for (int64_t d : t.shape()) shape.emplace_back(d);
  const bool ints = !is_floating(t.dtype());
  for (double e : t.to_doubles()) {
    if (ints) values.emplace_back(static_cast<int64_t>(e));
    else values.emplace_back(e);
  }
  json::Value::Object j;
  j.emplace_back("dtype", dtype_name(t.dtype()));
  j.emplace_back("shape", std::move(shape));
  j.emplace_back("values", std::move(values));
  return j;
}

const char* kind_name(In::Kind k) { return k == In::Kind::param ? "param" : k == In::Kind::ids ? "ids" : "mask"; }

json::Value run(const Case& c, DType dtype, int seed) {
  json::Value::Object rec{{"case", c.name}, {"dtype", dtype_name(dtype)}, {"seed", seed}, {"torch", c.torch}};
  if (c.loose.reason)
    rec.emplace_back("tolerance", json::Value::Object{{"rtol", c.loose.rtol}, {"atol", c.loose.atol},
                                                      {"reason", c.loose.reason}});
  const uint64_t base = fnv1a(c.name) + 7919ull * static_cast<uint64_t>(seed);
  try {
    Graph g;
    V xs;
    json::Value::Array inputs;
    for (size_t k = 0; k < c.inputs.size(); ++k) {
      const In& in = c.inputs[k];
      const Tensor t = random_input(in, dtype, base + 101 * k);
      xs.push_back(in.kind == In::Kind::param ? g.parameter(t) : g.input(t));
      json::Value j = tensor_json(t);
      j.set("kind", kind_name(in.kind));
      inputs.push_back(std::move(j));
    }
    rec.emplace_back("inputs", std::move(inputs));
    Var out = c.build(xs);
    const Tensor& y = out.value();
    rec.emplace_back("out", tensor_json(y));
    json::Value::Array grads;
    if (is_floating(y.dtype()) && out.requires_grad()) {
      Var loss = out;
      if (y.ndim() > 0) {
        std::mt19937_64 rng(base + 12345);
        std::uniform_real_distribution<double> u(-1, 1);
        std::vector<double> r(static_cast<size_t>(y.numel()));
        for (double& e : r) e = u(rng);
        const Tensor R = Tensor::from_doubles(r, y.shape(), y.dtype());
        rec.emplace_back("R", tensor_json(R));
        loss = sum(mul(out, g.input(R)));
      }
      g.backward(loss);
      for (size_t k = 0; k < xs.size(); ++k)
        grads.push_back(c.inputs[k].kind == In::Kind::param && xs[k].grad().defined() ? tensor_json(xs[k].grad())
                                                                                       : json::Value());
    }
    rec.emplace_back("grads", std::move(grads));
  } catch (const std::exception& e) {
    rec.emplace_back("error", e.what());
  }
  return rec;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::cerr << "usage: oracle_driver OUT.jsonl [NAME-SUBSTRING]\n";
    return 2;
  }
  const std::string filter = argc == 3 ? argv[2] : "";
  std::ofstream out(argv[1]);
  if (!out) {
    std::cerr << "oracle_driver: cannot write " << argv[1] << "\n";
    return 1;
  }
  int runs = 0, cases_run = 0;
  std::vector<std::string> names;
  for (const Case& c : cases()) {
    for (const std::string& n : names)
      if (n == c.name) {
        std::cerr << "oracle_driver: case \"" << c.name << "\" is in the table twice\n";
        return 1;
      }
    names.push_back(c.name);
    if (!filter.empty() && c.name.find(filter) == std::string::npos) continue;
    ++cases_run;
    for (DType dtype : {DType::f64, DType::f32})
      for (int seed = 0; seed < c.seeds; ++seed, ++runs) out << json::dumps(run(c, dtype, seed), -1) << "\n";
  }
  out.close();
  if (!out) {
    std::cerr << "oracle_driver: writing " << argv[1] << " failed\n";
    return 1;
  }
  std::cout << "oracle_driver: " << cases_run << " cases, " << runs << " runs written to " << argv[1] << "\n";
  return 0;
}
