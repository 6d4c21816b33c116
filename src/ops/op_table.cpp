// The derivatives table (op_table.hpp).
#include "tapegrad/ops/op_table.hpp"

#include "tapegrad/kernels/binary_ops.hpp"
#include "tapegrad/kernels/unary_ops.hpp"

namespace tapegrad::ops {

const std::vector<OpInfo>& op_table() {
  static const std::vector<OpInfo> table = [] {
    std::vector<OpInfo> t = {
        {"gather", "E (V, d), ids (B,) int -> (B, d)", "y[i] = E[ids[i]]", "dE[ids[i]] += dy[i] (row-wise accumulate)"},
        {"matmul", "(..., n, k) @ (..., k, m) -> (..., n, m), batch axes broadcast; a 1-D side is a row or column",
         "y = a @ b", "da = dy @ b^T, db = a^T @ dy, each summed over the batch axes it was broadcast along"},
        {"add_row", "(n, m) + (m,) -> (n, m)", "y = x + b, b added to every row", "dx = dy, db = sum over rows of dy"},
        {"scale", "any", "y = x * s", "dx = dy * s"},
    };
    // the binary ops broadcast; each partial is summed over its operand's broadcast axes
#define TG_BINARY_ROW(op, F) \
  t.push_back({kernels::F::name, "s, t -> broadcast(s, t)", kernels::F::forward_text, kernels::F::backward_text});
    TG_BINARY_OPS(TG_BINARY_ROW)
#undef TG_BINARY_ROW
#define TG_UNARY_ROW(op, F) t.push_back({kernels::F::name, "any", kernels::F::forward_text, kernels::F::backward_text});
    TG_UNARY_OPS(TG_UNARY_ROW)
#undef TG_UNARY_ROW
    const std::vector<OpInfo> rest = {
        {"clamp", "any", "y = min(max(x, lo), hi)", "dx = dy * [lo <= x <= hi]"},
        {"where", "c (u8), a, b -> broadcast", "y = c ? a : b", "da = c ? dy : 0, db = c ? 0 : dy (summed over broadcast axes)"},
        {"to", "any", "y = x in another dtype", "dx = dy in x's dtype (floating dtypes)"},
        {"softmax", "any, along an axis", "y = exp(x - max) / sum exp(x - max)", "dx = y * (dy - sum(dy * y))"},
        {"log_softmax", "any, along an axis", "y = (x - max) - log(sum exp(x - max))", "dx = dy - exp(y) * sum(dy)"},
        {"cross_entropy", "z (..., V), t (...) int -> () mean or sum, (...) none",
         "loss = -log_softmax(z)[t], 0 where t = ignore_index; mean over the others",
         "dz = (softmax(z) - onehot(t)) * dy (/ count for the mean), 0 rows where ignored"},
        {"sum", "any -> ()", "y = sum of x", "dx = dy"},
        {"mean", "any -> ()", "y = sum of x / n", "dx = dy / n"},
        {"sum_axes", "s -> s without the axes", "y = sum of x over the axes", "dx = dy broadcast back"},
        {"mean_axes", "s -> s without the axes", "y = sum of x over the axes / count", "dx = dy broadcast back / count"},
        {"max", "s -> s without the axis", "y = largest x along the axis", "dx = dy at the first largest, 0 elsewhere"},
        {"transpose", "(n, m) -> (m, n)", "y = x^T", "dx = dy^T"},
        {"reshape", "any -> s (same numel)", "y = x, reshaped", "dx = dy, reshaped back"},
        {"permute", "s -> s permuted", "y = x with its axes reordered", "dx = dy with the inverse order"},
        {"broadcast_to", "s -> t (s broadcasts to t)", "y = x repeated along broadcast axes", "dx = dy summed over them"},
        {"slice", "(.., n, ..) -> (.., e - b, ..)", "y = x[.., b:e, ..]", "dx = dy in [b, e), 0 elsewhere"},
        {"concat", "(.., n_i, ..) -> (.., sum n_i, ..)", "y = x_0, x_1, ... along the axis", "dx_i = dy's i-th piece"},
        {"index_select", "(.., n, ..), ids (k,) -> (.., k, ..)", "y = x[.., ids, ..]", "dx[.., ids[j], ..] += dy[.., j, ..]"},
        {"gather_axis", "x (.., n, ..), ids (.., k, ..) -> ids' shape", "y[.., j, ..] = x[.., ids[.., j, ..], ..]",
         "dx[.., ids[.., j, ..], ..] += dy[.., j, ..]"},
        {"embedding_cross_entropy", "E (V, C), ids (B,), t (B,) int -> () or (B,)",
         "loss = cross_entropy(gather(E, ids), t)", "dE[ids[i]] += ((softmax(E[ids[i]]) - onehot(t[i])) / B) * dy"},
        {"value_embed_lookup", "W (P*V, D), ids (T,) int -> (P, T, D)", "y[p][i] = W[p*V + ids[i]]",
         "buffer[p*V + ids[i]] += dy[p][i] (W's gradient goes to the buffer)"},
        // the fused attention (src/ops/fused/attention.cpp)
        {"scaled_dot_product_attention", "q (B, H, Tq, d), k (B, H, Tk, d), v (B, H, Tk, dv) -> (B, H, Tq, dv)",
         "y = softmax(s q k^T + causal mask) v per (B, H); s = 1/sqrt(d) by default",
         "P = exp(s q k^T - lse), dv = P^T dy, dS = P * (dy v^T - rowsum(dy * y)), dq = s dS k, dk = s dS^T q"},
        {"qkv_attention", "qkv (B, T, 3C), value_add (broadcasts to (B, T, C)) or none -> (B, T, C)",
         "q, k, v = thirds of qkv (v + value_add) as heads (B, H, T, C/H); y = the heads of causal attention, side by side",
         "d qkv = (dq, dk, dv) of scaled_dot_product_attention side by side; d value_add = dv summed to its shape"},
        // ---- linear algebra of the N-d ops
        {"linear", "x (..., in), W (out, in), b (out,) or none -> (..., out)", "y = x @ W^T + b",
         "dx = dy @ W, dW = dy^T @ x, db = sum of dy, over every leading axis"},
        // normalisation and dropout (ops/fused/norm.cpp, ops/fused/dropout.cpp)
        {"layer_norm", "x (..., C), w (C,), b (C,) -> (..., C); w, b optional",
         "y = xhat * w + b, xhat = (x - mean) * rstd, rstd = 1 / sqrt(var + eps), per row of C",
         "g = dy * w: dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), dw = sum_rows(dy * xhat), db = sum_rows(dy)"},
        {"rms_norm", "x (..., C), w (C,) -> (..., C); w optional",
         "y = xhat * w, xhat = x * rstd, rstd = 1 / sqrt(mean(x^2) + eps), per row of C",
         "g = dy * w: dx = rstd * (g - xhat * mean(g * xhat)), dw = sum_rows(dy * xhat)"},
        {"add_layer_norm", "x (..., C), r (x's shape or broadcast to it), w, b as layer_norm's -> {s, y}",
         "s = x + r, y = layer_norm(s, w, b): the add's and the norm's nodes, one pass over the rows",
         "the add's and layer_norm's rows: ds = dy's dx + the gradient of s, dx = ds, dr = ds"},
        {"add_rms_norm", "x (..., C), r (x's shape or broadcast to it), w as rms_norm's -> {s, y}",
         "s = x + r, y = rms_norm(s, w): the add's and the norm's nodes, one pass over the rows",
         "the add's and rms_norm's rows: ds = dy's dx + the gradient of s, dx = ds, dr = ds"},
        {"dropout", "any", "y = x * mask / (1 - p), mask = Philox(seed, offset) >= p", "dx = dy * mask / (1 - p)"},
        // the cross-entropy of a linear layer in blocks of rows (ops/fused/linear_cross_entropy.cpp)
        {"linear_cross_entropy", "x (..., C), W (V, C), targets (...) int -> () mean/sum or (...) none",
         "loss = cross_entropy(x @ W^T, targets), chunk_rows rows at a time",
         "dz = (softmax(x W^T) - onehot(t)) * dy / divisor per block: dx = dz W, dW = sum over blocks of dz^T x"},
        // the MLP: a linear node, then this one (ops/fused/mlp.cpp, Note [the MLP's epilogues])
        {"mlp", "pre (..., H) from its linear node, W (O, H), b (O,) or none -> (..., O); f gelu, gelu_tanh, relu or silu",
         "y = f(pre) @ W^T + b, f(pre) made by the linear's product with pre (in its epilogue)",
         "dpre = (dy @ W) * f'(pre) (f' in the product's epilogue), dW = dy^T @ f(pre), db = sum of dy"},
    };
    t.insert(t.end(), rest.begin(), rest.end());
    // ---- images (N, C, H, W): conv.cpp
    const std::vector<OpInfo> images = {
        {"conv2d", "x (N, C, H, W), w (O, C, kh, kw), b (O,) -> (N, O, Ho, Wo), Ho = (H + 2p - kh) / s + 1",
         "y[n, o] = b[o] + sum_c w[o, c] cross-correlated with x[n, c] (stride s, zero padding p)",
         "dW = dY^T @ im2col(x)^T, dx = col2im(W^T @ dY^T), db = sum of dy over N, Ho, Wo (dY = dy as (N*Ho*Wo, O) rows)"},
        {"max_pool2d", "(N, C, H, W) -> (N, C, Ho, Wo), k x k windows, stride s, padding p <= k / 2",
         "y = max of each window (padding -inf)", "dx[argmax of each window] += dy (the first max of a tie)"},
        {"avg_pool2d", "(N, C, H, W) -> (N, C, Ho, Wo), k x k windows, stride s, padding p <= k / 2",
         "y = sum of each window / k^2 (padding counts as 0)", "dx[every pixel of a window] += dy / k^2"},
    };
    t.insert(t.end(), images.begin(), images.end());
    return t;
  }();
  return table;
}

const OpInfo* op_info(std::string_view name) {
  for (const OpInfo& op : op_table())
    if (name == op.name) return &op;
  return nullptr;
}

std::string op_table_markdown() {
  std::string out = "| op | shapes | forward | backward |\n|---|---|---|---|\n";
  for (const OpInfo& op : op_table())
    out += std::string("| `") + op.name + "` | " + op.shapes + " | `" + op.forward + "` | `" + op.backward + "` |\n";
  return out;
}

}  // namespace tapegrad::ops
