// nd_cuda_bench: the N-d kernels' memory bandwidth on the device it finds, against a device-to-device
// copy of the same bytes measured in the same run (not a timed test). Every row: the median of 20
// runs after 3, each synchronized, in GB/s of bytes read and written, and that as a share of the copy's.
// bench/nd_torch.py measures the same ops in PyTorch.
//
//   ./build-cuda/bench/nd_cuda_bench [elements, default 64M]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "tapegrad/cuda/cuda.hpp"
#include "tapegrad/cuda/cuda_kernels.hpp"
#include "tapegrad/kernels/kernels.hpp"
#include "tapegrad/tensor/backend.hpp"

using namespace tapegrad;

namespace {

double median_ms(const std::function<void()>& f) {
  for (int i = 0; i < 3; ++i) f();
  tapegrad::synchronize(Device::cuda());
  std::vector<double> t;
  for (int i = 0; i < 20; ++i) {
    const auto start = std::chrono::steady_clock::now();
    f();
    tapegrad::synchronize(Device::cuda());
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::nth_element(t.begin(), t.begin() + 10, t.end());
  return t[10];
}

}  // namespace

int main(int argc, char** argv) {
  if (cuda::device_count() == 0) {
    std::printf("SKIP: nd_cuda_bench: %s\n", cuda::no_device_reason().c_str());
    return 0;
  }
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : int64_t{64} << 20;
  const Device dev = Device::cuda();
  const int64_t cols = 8192, rows = n / cols;
  const Shape s{rows, cols};
  Tensor a = Tensor::zeros(s, DType::f32, dev), b = Tensor::zeros(s, DType::f32, dev), out = Tensor::zeros(s, DType::f32, dev);
  Tensor row = Tensor::zeros(Shape{cols}, DType::f32, dev), col = Tensor::zeros(Shape{rows, 1}, DType::f32, dev);
  Tensor sums = Tensor::zeros(Shape{rows}, DType::f32, dev);
  kernels::fill(a, 0.5);
  kernels::fill(b, 0.25);
  const double bytes = static_cast<double>(n) * 4;
  const double copy_ms = median_ms([&] { out.copy_from(a); });
  const double copy_gbs = 2 * bytes / copy_ms / 1e6;
  std::printf("%lld f32 elements as (%lld, %lld)\n", static_cast<long long>(n),
              static_cast<long long>(rows), static_cast<long long>(cols));
  std::printf("| %-40s | %9s | %9s | %8s |\n", "op", "ms", "GB/s", "of copy");
  auto report = [&](const char* name, double ms, double moved) {
    const double gbs = moved / ms / 1e6;
    std::printf("| %-40s | %9.3f | %9.1f | %7.0f%% |\n", name, ms, gbs, 100 * gbs / copy_gbs);
  };
  report("copy (device to device)", copy_ms, 2 * bytes);
  report("add, equal shapes", median_ms([&] { kernels::binary(kernels::Binary::add, a, b, out); }), 3 * bytes);
  report("add, a row broadcast", median_ms([&] { kernels::binary(kernels::Binary::add, a, row, out); }), 2 * bytes);
  report("mul, a column broadcast", median_ms([&] { kernels::binary(kernels::Binary::mul, a, col, out); }), 2 * bytes);
  report("maximum, equal shapes (strided walk)",
         median_ms([&] { kernels::binary(kernels::Binary::maximum, a, b, out); }), 3 * bytes);
  report("exp", median_ms([&] { kernels::unary(kernels::Unary::exp, a, out); }), 2 * bytes);
  report("gelu (tanh)", median_ms([&] { kernels::unary(kernels::Unary::gelu_tanh, a, out); }), 2 * bytes);
  report("sum over the last axis", median_ms([&] { kernels::reduce(kernels::Reduce::sum, a, Shape{rows, 1}, sums); }), bytes);
  report("sum over the first axis", median_ms([&] { kernels::reduce(kernels::Reduce::sum, a, Shape{1, cols}, row); }), bytes);
  report("softmax rows", median_ms([&] { kernels::softmax_rows(a, out); }), 2 * bytes);
  report("log_softmax rows", median_ms([&] { kernels::log_softmax_rows(a, out); }), 2 * bytes);
  Tensor t = Tensor::zeros(Shape{cols, rows}, DType::f32, dev);
  report("transpose (strided copy)", median_ms([&] {
           kernels::copy_strided(a, kernels::permuted_view(s, {1, 0}), t, kernels::contiguous_view(Shape{cols, rows}));
         }), 2 * bytes);
  // the fused head's loss rows at GPT-2's sizes: one block of 4096 rows of V = 50304 bf16 logits,
  // the losses and a bf16 dz; the row kept in shared memory between the kernel's reads, or read twice
  {
    const int64_t ce_rows = 4096, vocab = 50304;
    Tensor z = Tensor::zeros(Shape{ce_rows, vocab}, DType::bf16, dev), dz = Tensor::zeros(Shape{ce_rows, vocab}, DType::bf16, dev);
    Tensor ids = Tensor::zeros(Shape{ce_rows}, DType::i32, dev), losses = Tensor::zeros(Shape{ce_rows}, DType::f32, dev);
    Tensor count = Tensor::zeros(Shape{}, DType::f32, dev);
    const double ce_bytes = 2.0 * static_cast<double>(ce_rows * vocab) * 2;  // z read once, dz written
    for (bool keep : {true, false}) {
      cuda::set_cross_entropy_kept_rows(keep);
      report(keep ? "cross_entropy_rows (4096, 50304) bf16, kept" : "cross_entropy_rows (4096, 50304) bf16, twice",
             median_ms([&] { kernels::cross_entropy_rows(z, ids, -100, losses, count, dz); }), ce_bytes);
    }
    cuda::set_cross_entropy_kept_rows(true);
  }
  // a GPT-2 MLP's first linear with a bias under autocast, (16384, 768) @ (3072, 768)^T + bias:
  // one cuBLASLt GEMM with the bias epilogue against f32 sums, add_row and cast (the time of each)
  {
    const int64_t n = 16384, k = 768, m = 3072;
    Tensor x = Tensor::zeros(Shape{n, k}, DType::bf16, dev), w = Tensor::zeros(Shape{m, k}, DType::bf16, dev);
    Tensor bias = Tensor::zeros(Shape{m}, DType::f32, dev), y = Tensor::zeros(Shape{n, m}, DType::bf16, dev);
    Tensor sums = Tensor::zeros(Shape{n, m}, DType::f32, dev);
    const double out_bytes = 2.0 * static_cast<double>(n * m);
    report("linear + bias (16384, 768) -> 3072, one GEMM",
           median_ms([&] { kernels::matmul_bias(x, w, bias, y); }), out_bytes);
    report("linear + bias, GEMM f32 + add_row + cast", median_ms([&] {
             kernels::matmul(x, false, w, true, sums);
             kernels::add_row(sums, bias, sums);
             kernels::cast(sums, y);
           }), out_bytes);
    // its backward's weight and bias gradients from dy = y: one GEMM (BGRADB) against GEMM + sum_rows
    Tensor dw = Tensor::zeros(Shape{m, k}, DType::f32, dev), db = Tensor::zeros(Shape{m}, DType::f32, dev);
    report("dW + db, one GEMM", median_ms([&] { kernels::matmul_weight_bias_grad(y, x, dw, db); }), out_bytes);
    report("dW + db, GEMM + cast + sum_rows", median_ms([&] {
             kernels::matmul(y, true, x, false, dw);
             kernels::cast(y, sums);
             kernels::sum_rows(sums, db);
           }), out_bytes);
  }
  return 0;
}
