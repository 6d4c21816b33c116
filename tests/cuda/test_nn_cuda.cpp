// tests/cuda, the layer library: a GPT-like stack of nn layers built on cuda:0 against the same
// model on the CPU. One seed gives the same parameters on both devices (initialisers draw on the
// host), the forward and every gradient agree (f64 to 1e-12, f32 to f32's rounding), dropout draws
// the same masks, and state dicts move between the devices bit for bit.
// Tests named "[gpu] ..." need a device and SKIP without one (tests/needs.hpp).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cmath>

#include "needs.hpp"
#include "nn/nn_testing.hpp"
#include "tapegrad/cuda/cuda.hpp"
#include "tapegrad/nn/conv.hpp"
#include "tapegrad/nn/recurrent.hpp"
#include "tapegrad/nn/sequential.hpp"
#include "tapegrad/nn/stateless.hpp"

using namespace tapegrad;
using tapegrad::testing::Place;
using tapegrad::testing::TinyGPT;

namespace {

const Device kGpu = Device::cuda(0);

// max |a - b| / (1 + max |a|) over the elements: the error scaled to the tensor's size
double difference(const Tensor& cpu, const Tensor& gpu) {
  const std::vector<double> a = cpu.to_doubles(), b = gpu.to(Device::cpu()).to_doubles();
  REQUIRE(a.size() == b.size());
  double worst = 0, largest = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(a[i] - b[i]));
    largest = std::max(largest, std::abs(a[i]));
  }
  return worst / (1 + largest);
}

std::string bytes_of(const nn::StateDict& sd) {
  std::string out;
  for (const auto& [name, t] : sd) out += name + std::string(static_cast<const char*>(t.raw_data()), t.nbytes());
  return out;
}

}  // namespace

TEST_CASE("[gpu] a GPT-like stack on cuda: the CPU's parameters, forward and gradients") {
  for (const DType dtype : {DType::f64, DType::f32}) {
    const std::string dtype_text = dtype_name(dtype);
    CAPTURE(dtype_text);
    const double tol = dtype == DType::f64 ? 1e-12 : 2e-5;
    Place cpu(21, dtype), gpu(21, dtype, kGpu);
    TinyGPT a(cpu.f, 65, 16, 64, 4, 2), b(gpu.f, 65, 16, 64, 4, 2);
    CHECK(b.h[1].attn.c_attn.weight.device() == kGpu);
    CHECK(bytes_of(nn::state_dict(a)) == bytes_of(nn::state_dict(b)));  // the same draws on both

    std::vector<int32_t> ids(3 * 16), targets(3 * 16);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((7 * i + 3) % 65), targets[i] = static_cast<int32_t>((11 * i + 5) % 65);
    const Tensor ids_t = Tensor::from_vector(ids, Shape{3, 16}), targets_t = Tensor::from_vector(targets, Shape{3, 16});
    Var la = a(cpu.g.input(ids_t));
    Var lb = b(gpu.g.input(ids_t.to(kGpu)));
    CHECK(difference(la.value(), lb.value()) < tol);
    cpu.g.backward(ops::cross_entropy(la, cpu.g.input(targets_t)));
    gpu.g.backward(ops::cross_entropy(lb, gpu.g.input(targets_t.to(kGpu))));
    const auto pa = a.named_parameters(), pb = b.named_parameters();
    for (size_t k = 0; k < pa.size(); ++k) {
      CAPTURE(pa[k].first);
      CHECK(difference(pa[k].second.grad(), pb[k].second.grad()) < 10 * tol);
    }
  }
}

TEST_CASE("[gpu] a CNN, an LSTM and a GRU on cuda: the CPU's parameters, forward and gradients") {
  Place cpu(37, DType::f64), gpu(37, DType::f64, kGpu);
  auto cnn = [](nn::Factory& f, nn::Sequential& s) {
    s.emplace_back<nn::Conv2d>(f, 2, 4, 3, 1, 1);
    s.emplace_back<nn::ReLU>();
    s.emplace_back<nn::MaxPool2d>(2);
    s.emplace_back<nn::AvgPool2d>(3, 1, 1);
    s.emplace_back<nn::Flatten>();
    s.emplace_back<nn::Linear>(f, 36, 5);
  };
  nn::Sequential ca, cb;
  cnn(cpu.f, ca);
  cnn(gpu.f, cb);
  nn::LSTM la(cpu.f, 3, 4, 2, true, true, 0.0, true), lb(gpu.f, 3, 4, 2, true, true, 0.0, true);
  nn::GRU ga(cpu.f, 3, 4), gb(gpu.f, 3, 4);
  CHECK(bytes_of(nn::state_dict(la)) == bytes_of(nn::state_dict(lb)));
  auto loss = [](Place& p, nn::Sequential& c, nn::LSTM& l, nn::GRU& r) {
    const Device d = p.f.device;
    Var image = p.g.input(testing::inputs({2, 2, 6, 6}, DType::f64, d));
    Var seq = p.g.input(testing::inputs({2, 5, 3}, DType::f64, d));  // (B, T, in)
    const nn::LSTMOutput o = l(seq);
    const nn::GRUOutput h = r(ops::transpose(seq, 0, 1));
    return ops::sum(ops::square(c(image))) + ops::sum(o.output) + ops::sum(o.state.c) + ops::sum(h.output * h.output);
  };
  Var a = loss(cpu, ca, la, ga), b = loss(gpu, cb, lb, gb);
  CHECK(difference(a.value(), b.value()) < 1e-12);
  cpu.g.backward(a);
  gpu.g.backward(b);
  auto check_grads = [](const nn::Module& x, const nn::Module& y) {
    const auto px = x.named_parameters(), py = y.named_parameters();
    for (size_t k = 0; k < px.size(); ++k) {
      CAPTURE(px[k].first);
      CHECK(difference(px[k].second.grad(), py[k].second.grad()) < 1e-11);
    }
  };
  check_grads(ca, cb);
  check_grads(la, lb);
  check_grads(ga, gb);
}

TEST_CASE("[gpu] integer ids add, subtract, multiply and compare on cuda as on the CPU") {
  Graph g;
  const Tensor ids = Tensor::from_vector(std::vector<int32_t>{3, 0, 2, 1, 4, 2147483647}, Shape{2, 3});
  const Tensor offsets = Tensor::from_vector(std::vector<int32_t>{0, 10, 20}, Shape{3, 1, 1});
  auto run = [&](Device d) {
    Var i = g.input(ids.to(d)), o = g.input(offsets.to(d));
    Var wide = g.input(Tensor::from_vector(std::vector<int64_t>{int64_t{1} << 40}, Shape{1}).to(d));
    return std::vector<Tensor>{(i + o).value(), (i - 1.0).value(), ops::mul(i, i).value(), (i * 3.0).value(),
                               (i + wide).value(), ops::lt(i, o).value()};
  };
  const std::vector<Tensor> on_cpu = run(Device::cpu()), on_gpu = run(kGpu);
  for (size_t k = 0; k < on_cpu.size(); ++k) {
    CAPTURE(k);
    CHECK(on_gpu[k].device() == kGpu);
    CHECK(on_gpu[k].dtype() == on_cpu[k].dtype());
    CHECK(on_gpu[k].to(Device::cpu()).to_doubles() == on_cpu[k].to_doubles());
  }
}

TEST_CASE("[gpu] dropout in a Block draws the CPU's masks on cuda; state dicts cross devices") {
  Place cpu(8, DType::f64), gpu(8, DType::f64, kGpu);
  nn::Block a(cpu.f, 16, 2, 0.25), b(gpu.f, 16, 2, 0.25);
  const Tensor x = testing::inputs({2, 5, 16}, DType::f64);
  Var ya = a(cpu.g.input(x)), yb = b(gpu.g.input(x.to(kGpu)));
  CHECK(cpu.gen.offset() == gpu.gen.offset());
  CHECK(difference(ya.value(), yb.value()) < 1e-12);

  // a state dict of the GPU model is host bytes; the CPU's loads into the GPU model and back
  testing::fill(a);
  nn::load_state_dict(b, nn::state_dict(a));
  CHECK(bytes_of(nn::state_dict(b)) == bytes_of(nn::state_dict(a)));
  CHECK(b.mlp.c_fc.weight.device() == kGpu);
}

int main(int argc, char** argv) {
  const bool device = cuda::device_count() > 0;
  return tapegrad::testing::run_tests(argc, argv, "test_nn_cuda",
                                      {{"gpu", device, "no CUDA device (" + cuda::no_device_reason() + ")"}});
}
