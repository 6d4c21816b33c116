// The derivatives table (op_table.hpp).
#include "tapegrad/ops/op_table.hpp"

#include "tapegrad/kernels/unary_ops.hpp"

namespace tapegrad::ops {

const std::vector<OpInfo>& op_table() {
  static const std::vector<OpInfo> table = [] {
    std::vector<OpInfo> t = {
        {"gather", "E (V, d), ids (B,) int -> (B, d)", "y[i] = E[ids[i]]", "dE[ids[i]] += dy[i] (row-wise accumulate)"},
        {"matmul", "(n, k) @ (k, m) -> (n, m)", "y = a @ b", "da = dy @ b^T, db = a^T @ dy"},
        {"add_row", "(n, m) + (m,) -> (n, m)", "y = x + b, b added to every row", "dx = dy, db = sum over rows of dy"},
        {"add", "same shapes", "y = a + b", "da = dy, db = dy"},
        {"sub", "same shapes", "y = a - b", "da = dy, db = -dy"},
        {"mul", "same shapes", "y = a * b", "da = dy * b, db = dy * a"},
        {"scale", "any", "y = x * s", "dx = dy * s"},
    };
#define TG_UNARY_ROW(op, F) t.push_back({kernels::F::name, "any", kernels::F::forward_text, kernels::F::backward_text});
    TG_UNARY_OPS(TG_UNARY_ROW)
#undef TG_UNARY_ROW
    const std::vector<OpInfo> rest = {
        {"softmax", "(n, m), along m", "y = exp(x - max) / sum exp(x - max), per row", "dx = y * (dy - sum_j dy*y)"},
        {"cross_entropy", "z (B, V), t (B,) int -> () mean or sum, (B,) none", "loss = -log softmax(z)[t], reduced",
         "dz = ((softmax(z) - onehot(t)) / B) * dy (mean; / 1 otherwise, times dy[i] per row for none)"},
        {"sum", "any -> ()", "y = sum of x", "dx = dy"},
        {"mean", "any -> ()", "y = sum of x / n", "dx = dy / n"},
        {"transpose", "(n, m) -> (m, n)", "y = x^T", "dx = dy^T"},
        {"reshape", "any -> s (same numel)", "y = x, reshaped", "dx = dy, reshaped back"},
        {"embedding_cross_entropy", "E (V, C), ids (B,), t (B,) int -> () or (B,)",
         "loss = cross_entropy(gather(E, ids), t)", "dE[ids[i]] += ((softmax(E[ids[i]]) - onehot(t[i])) / B) * dy"},
        {"value_embed_lookup", "W (P*V, D), ids (T,) int -> (P, T, D)", "y[p][i] = W[p*V + ids[i]]",
         "buffer[p*V + ids[i]] += dy[p][i] (W's gradient goes to the buffer)"},
        // normalisation and dropout (ops/fused/norm.cpp, ops/fused/dropout.cpp)
        {"layer_norm", "x (..., C), w (C,), b (C,) -> (..., C); w, b optional",
         "y = xhat * w + b, xhat = (x - mean) * rstd, rstd = 1 / sqrt(var + eps), per row of C",
         "g = dy * w: dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), dw = sum_rows(dy * xhat), db = sum_rows(dy)"},
        {"rms_norm", "x (..., C), w (C,) -> (..., C); w optional",
         "y = xhat * w, xhat = x * rstd, rstd = 1 / sqrt(mean(x^2) + eps), per row of C",
         "g = dy * w: dx = rstd * (g - xhat * mean(g * xhat)), dw = sum_rows(dy * xhat)"},
        {"dropout", "any", "y = x * mask / (1 - p), mask = Philox(seed, offset) >= p", "dx = dy * mask / (1 - p)"},
    };
    t.insert(t.end(), rest.begin(), rest.end());
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
