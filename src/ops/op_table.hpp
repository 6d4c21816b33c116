// The derivatives table: every op's name, shapes, forward and backward rule, in one list that the
// tape dumps (and so the tape page), docs/ops.md and the op-case tests read. The elementwise unary
// ops' rows come from their functors (src/kernels/unary_ops.hpp); the others are written in
// op_table.cpp beside each other, as PyTorch's derivatives.yaml keeps them (d = gradient of the
// loss).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tapegrad::ops {

struct OpInfo {
  const char* name;      // as nodes record it ("matmul")
  const char* shapes;    // "(n, k) @ (k, m) -> (n, m)"
  const char* forward;   // "y = a @ b"
  const char* backward;  // "da = dy @ b^T, db = a^T @ dy"
};

// Every op, built-in and fused, in the order of docs/ops.md.
const std::vector<OpInfo>& op_table();
// The row of the op named `name`, or nullptr (a custom op, docs/custom-ops.md).
const OpInfo* op_info(std::string_view name);
// docs/ops.md's table, as Markdown (tests/ops checks that the file holds exactly this).
std::string op_table_markdown();

}  // namespace tapegrad::ops
