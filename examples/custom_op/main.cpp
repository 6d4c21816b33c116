// A custom op defined outside tapegrad, against its installed headers (docs/custom-ops.md): softplus,
// its forward and backward together, applied with tapegrad::apply. It then works like any built-in
// op: the gradient check passes, the overwrite-bug mode reaches it, and a tape dump shows it.
//
//   meson setup build && ninja -C build && ./build/custom_op [dump.json]
#include <tapegrad/tapegrad.hpp>

#include <cmath>
#include <cstdio>

using namespace tapegrad;

// softplus(x) = log(1 + exp(x)), computed as max(x, 0) + log1p(exp(-|x|)) so that neither side
// overflows;  d softplus / dx = sigmoid(x).  x (any shape) -> the same shape, f64 or f32, CPU.
struct Softplus {
  static constexpr const char* name = "softplus";

  template <class T>
  static void each(const Tensor& x, Tensor& y, T (*f)(T)) {
    const T* in = x.data<T>();
    T* out = y.mutable_data<T>();
    for (int64_t i = 0; i < x.numel(); ++i) out[i] = f(in[i]);
  }

  static Tensor forward(const std::vector<Tensor>& in, Saved&) {
    const Tensor& x = in[0];
    if (!x.device().is_cpu())  // this op brings a CPU kernel only; a CUDA one would be launched here
      throw DeviceError("[softplus] has no kernel for " + x.device().str());
    Tensor y = Tensor::empty(x.shape(), x.dtype());
    if (x.dtype() == DType::f64) each<double>(x, y, [](double v) { return std::fmax(v, 0.0) + std::log1p(std::exp(-std::fabs(v))); });
    else if (x.dtype() == DType::f32) each<float>(x, y, [](float v) { return std::fmax(v, 0.0f) + std::log1p(std::exp(-std::fabs(v))); });
    else throw Error(std::string("[softplus] needs f64 or f32, got ") + dtype_name(x.dtype()));
    return y;
  }

  // dx = dy * sigmoid(x)
  static void backward(BackwardContext& ctx) {
    const Tensor& x = ctx.input(0);
    const Tensor& dy = ctx.grad_output();
    Tensor dx = Tensor::empty(x.shape(), x.dtype());
    const std::vector<double> xv = x.to_doubles(), dyv = dy.to_doubles();
    std::vector<double> d(xv.size());
    for (size_t i = 0; i < d.size(); ++i) d[i] = dyv[i] / (1.0 + std::exp(-xv[i]));
    ctx.accumulate(0, Tensor::from_doubles(d, x.shape(), x.dtype()));
  }
};

Var softplus(Var x) { return apply<Softplus>({x}); }

int main(int argc, char** argv) {
  Graph g;
  Var w = g.parameter(Tensor::from_doubles({0.5, -1.0, 2.0, -0.25, 1.5, 0.75}, Shape{3, 2}, DType::f64), "w");
  const Tensor x_values = Tensor::from_doubles({1.0, -2.0, 0.5, 3.0, -1.0, 0.25}, Shape{2, 3}, DType::f64);
  // loss = mean(softplus(x @ w) + softplus(w^T @ w)): softplus twice, w used three times
  auto loss = [&](Graph& gr) {
    Var x = gr.input(x_values, "x");  // inputs belong to one step: recorded anew each time
    return ops::add(ops::mean(softplus(ops::matmul(x, w))), ops::mean(softplus(ops::matmul(ops::transpose(w), w))));
  };

  const GradcheckResult check = gradcheck(g, loss);
  std::printf("%s", check.str().c_str());

  BackwardRecord record;
  g.backward(loss(g), {.record = &record});
  std::vector<double> good = w.grad().to_doubles();
  if (argc > 1) {
    write_tape_dump(argv[1], g, &record, {.title = "custom_op: softplus"});
    std::printf("wrote %s (open it with: tape show %s)\n", argv[1], argv[1]);
  }

  g.clear();
  g.zero_grad();
  g.backward(loss(g), {.overwrite_bug = true});  // w's three contributions: only the last survives
  const std::vector<double> bad = w.grad().to_doubles();
  std::printf("dw[0]: %.6f accumulated, %.6f in the overwrite-bug mode\n", good[0], bad[0]);

  const bool ok = check.passed() && check.max_error() < 1e-8 && good != bad;
  std::printf("%s\n", ok ? "custom op: ok" : "custom op: FAILED");
  return ok ? 0 : 1;
}
