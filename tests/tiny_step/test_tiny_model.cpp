// The tiny model's arithmetic: its matrix product is matmul_fsum's (the reference's fsum of
// rounded products), forward and backward, not the library's BLAS matmul
// (apps/tiny_step/reference_matmul.hpp).
#include <doctest/doctest.h>

#include <cstring>
#include <string>

#include "tapegrad/kernels/kernels.hpp"
#include "tapegrad/ops/ops.hpp"
#include "tiny_model.hpp"

using namespace tapegrad;

namespace {

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

}  // namespace

TEST_CASE("the tiny model multiplies with matmul_fsum, forward and backward, recorded as matmul") {
  tiny::Config c;
  c.vocab = {"a", "b", "c", "d", "e", "f", "g"};
  c.inputs = {"a", "c", "c", "g", "b"};
  c.targets = {"b", "d", "a", "a", "f"};
  c.embed_dim = 24;  // long enough sums that BLAS's order would show in the last bits
  tiny::Model m(c);
  Var x, logits;
  Var loss = m.loss(m.g, &x, &logits);
  REQUIRE(m.g.nodes().size() == 4);
  CHECK(std::string(m.g.nodes()[1].op) == "matmul");

  const int64_t B = x.shape()[0], V = m.weights.shape()[1];
  Tensor want = Tensor::empty(Shape{B, V}, DType::f64);
  kernels::matmul_fsum(x.value(), false, m.weights.value(), false, want);
  kernels::add_row(want, m.bias.value(), want);
  CHECK(same_bytes(logits.value(), want));

  m.g.backward(loss);
  Tensor probs = Tensor::empty(Shape{B, V}, DType::f64), losses = Tensor::empty(Shape{B}, DType::f64);
  kernels::cross_entropy(logits.value(), m.targets, probs, losses);
  Tensor dlogits = Tensor::empty(Shape{B, V}, DType::f64);
  kernels::cross_entropy_backward(probs, m.targets, Tensor::scalar(1.0, DType::f64), static_cast<double>(B), dlogits);
  Tensor dw = Tensor::empty(m.weights.shape(), DType::f64);
  kernels::matmul_fsum(x.value(), true, dlogits, false, dw);
  CHECK(same_bytes(m.weights.grad(), dw));
}
