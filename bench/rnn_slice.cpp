// An LSTM's forward and backward over T steps, for T given on the command line, four ways:
//   parts  the projection of every step at once, gx = x W_ih^T + b (B, T, 4H), sliced a step at a
//          time (ops::slice: its backward adds into the part it covers, Note [regions]);
//   dense  the same with a slice whose backward makes a dense gradient of the whole of gx, zeros but
//          for its part (what ops::slice did before): T passes over gx, a backward of order T^2;
//   apart  each step's input fed apart, x_t (B, I), and projected on its own: no slice at all;
//   lstm   nn::LSTM (batch_first), which slices its precomputed projection per step as `parts`.
// The gates are split with ops::split (slices too) in every way but `dense`, which splits with its
// own slice. After one untimed run of each way, each (way, T) is run `repeats` times in a fresh
// graph; the median is printed, with the backward's time per step, which stays flat in T when the
// backward is linear in T.
//
//   rnn_slice [--batch B] [--input I] [--hidden H] [--repeats R] [--dense-max T] [--ways parts,dense,...] T...
// The dense way is skipped above --dense-max (default 1000), where it takes minutes.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tapegrad/graph/function.hpp"
#include "tapegrad/graph/region.hpp"
#include "tapegrad/kernels/kernels.hpp"
#include "tapegrad/nn/recurrent.hpp"
#include "tapegrad/ops/fused/dropout.hpp"
#include "tapegrad/ops/ops.hpp"
#include "tapegrad/tensor/parallel.hpp"

using namespace tapegrad;

namespace {

// A slice along axis 1 whose backward is dense: zeros of the whole input but for its part.
struct DenseSlice {
  static constexpr const char* name = "dense_slice";
  static Tensor forward(const std::vector<Tensor>& in, Saved& saved) {  // saved.scalar: the step
    return copy_region(in[0], kernels::sliced_view(in[0].shape(), 1, static_cast<int64_t>(saved.scalar),
                                                   static_cast<int64_t>(saved.scalar) + 1));
  }
  static void backward(BackwardContext& ctx) {
    const Tensor& dy = ctx.grad_output();
    const int64_t t = static_cast<int64_t>(ctx.scalar());
    Tensor dx = Tensor::zeros(ctx.input(0).shape(), dy.dtype(), dy.device());
    kernels::copy_strided(dy, kernels::contiguous_view(dy.shape()), dx, kernels::sliced_view(dx.shape(), 1, t, t + 1));
    ctx.accumulate(0, dx);
  }
};

Var dense_slice(Var x, int64_t t) {
  Saved saved;
  saved.scalar = static_cast<double>(t);
  Tensor out = DenseSlice::forward({x.value()}, saved);
  return x.graph().record(DenseSlice::name, std::move(out), {x}, &DenseSlice::backward, {}, saved.scalar);
}

Tensor filled(Shape shape, double scale, double phase) {
  std::vector<double> v(static_cast<size_t>(shape.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * std::sin(0.61 * static_cast<double>(i) + phase);
  return Tensor::from_doubles(v, shape, DType::f32);
}

struct Sizes {
  int64_t B = 16, I = 32, H = 64;
};

struct Times {
  double forward_ms = 0, backward_ms = 0;
};

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

// One forward and backward of `way` over T steps in a fresh graph.
Times run(const std::string& way, const Sizes& s, int64_t T) {
  const int64_t B = s.B, I = s.I, H = s.H;
  Graph g;
  const Tensor x = filled(Shape{B, T, I}, 1.0, 0.3);
  Var loss;
  const auto start = std::chrono::steady_clock::now();
  if (way == "lstm") {
    Generator gen(7);
    nn::Factory f{g, gen, DType::f32, Device::cpu()};
    nn::LSTM lstm(f, I, H, 1, true, true);
    loss = ops::sum(lstm(g.input(x)).output);
  } else {
    Var w_ih = g.parameter(filled(Shape{4 * H, I}, 0.1, 0.1)), b_ih = g.parameter(filled(Shape{4 * H}, 0.1, 0.2));
    Var w_hh = g.parameter(filled(Shape{4 * H, H}, 0.1, 0.4)), b_hh = g.parameter(filled(Shape{4 * H}, 0.1, 0.5));
    Var gx = way == "apart" ? Var() : ops::linear(g.input(x), w_ih, b_ih);  // (B, T, 4H)
    Var h = g.input(Tensor::zeros(Shape{B, H}, DType::f32)), c = h;
    std::vector<Var> hs;
    for (int64_t t = 0; t < T; ++t) {
      Var step;
      if (way == "apart") {
        const Tensor x_t = copy_region(x, kernels::sliced_view(x.shape(), 1, t, t + 1));  // (B, 1, I)
        step = ops::linear(g.input(x_t.reshape(Shape{B, I})), w_ih, b_ih);
      } else {
        step = ops::reshape(way == "dense" ? dense_slice(gx, t) : ops::slice(gx, 1, t, t + 1), {B, 4 * H});
      }
      step = step + ops::linear(h, w_hh, b_hh);
      std::vector<Var> q(4);
      for (int k = 0; k < 4; ++k) q[static_cast<size_t>(k)] = ops::slice(step, 1, k * H, (k + 1) * H);
      c = ops::sigmoid(q[1]) * c + ops::sigmoid(q[0]) * ops::tanh(q[2]);
      h = ops::sigmoid(q[3]) * ops::tanh(c);
      hs.push_back(h);
    }
    loss = ops::sum(ops::stack(hs, 1));
  }
  Times times;
  times.forward_ms = ms_since(start);
  const auto backward = std::chrono::steady_clock::now();
  g.backward(loss);
  times.backward_ms = ms_since(backward);
  return times;
}

long number(const char* flag, const char* text, long lo, long hi) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (*text == '\0' || *end != '\0' || v < lo || v > hi) {
    std::fprintf(stderr, "rnn_slice: %s must be a whole number from %ld to %ld, got \"%s\"\n", flag, lo, hi, text);
    std::exit(2);
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  Sizes s;
  int repeats = 3;
  long dense_max = 1000;
  std::vector<std::string> ways = {"parts", "dense", "apart", "lstm"};
  std::vector<int64_t> steps;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--batch" && has_value) s.B = number("--batch", argv[++i], 1, 4096);
    else if (a == "--input" && has_value) s.I = number("--input", argv[++i], 1, 65536);
    else if (a == "--hidden" && has_value) s.H = number("--hidden", argv[++i], 1, 65536);
    else if (a == "--repeats" && has_value) repeats = static_cast<int>(number("--repeats", argv[++i], 1, 1000));
    else if (a == "--dense-max" && has_value) dense_max = number("--dense-max", argv[++i], 0, 1000000);
    else if (a == "--ways" && has_value) {
      ways.clear();
      std::string list = argv[++i];
      for (size_t at = 0; at <= list.size();) {
        const size_t comma = std::min(list.find(',', at), list.size());
        const std::string w = list.substr(at, comma - at);
        if (w != "parts" && w != "dense" && w != "apart" && w != "lstm") {
          std::fprintf(stderr, "rnn_slice: --ways takes parts, dense, apart and lstm, got \"%s\"\n", w.c_str());
          return 2;
        }
        ways.push_back(w);
        at = comma + 1;
      }
    } else if (a.rfind("--", 0) == 0) {
      std::fprintf(stderr, "usage: rnn_slice [--batch B] [--input I] [--hidden H] [--repeats R] [--dense-max T] "
                           "[--ways parts,dense,apart,lstm] T...\n");
      return 2;
    } else {
      steps.push_back(number("T", argv[i], 1, 1000000));
    }
  }
  if (steps.empty()) steps = {64, 1000, 5000};
  std::printf("LSTM, f32 on the CPU: batch %lld, input %lld, hidden %lld; median of %d; %d threads\n",
              static_cast<long long>(s.B), static_cast<long long>(s.I), static_cast<long long>(s.H), repeats,
              num_threads());
  for (const std::string& way : ways) run(way, s, 64);  // warm: the allocator's caches, the pool's threads
  std::printf("%-6s %7s %12s %12s %18s\n", "way", "T", "forward ms", "backward ms", "backward us/step");
  for (const std::string& way : ways)
    for (int64_t T : steps) {
      if (way == "dense" && T > dense_max) {
        std::printf("%-6s %7lld %12s %12s %18s\n", way.c_str(), static_cast<long long>(T), "-", "-",
                    "(skipped: --dense-max)");
        continue;
      }
      std::vector<Times> runs;
      for (int r = 0; r < repeats; ++r) runs.push_back(run(way, s, T));
      auto median = [&](double Times::*field) {
        std::vector<double> v;
        for (const Times& t : runs) v.push_back(t.*field);
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
      };
      const double backward = median(&Times::backward_ms);
      std::printf("%-6s %7lld %12.1f %12.1f %18.1f\n", way.c_str(), static_cast<long long>(T), median(&Times::forward_ms),
                  backward, 1000.0 * backward / static_cast<double>(T));
      std::fflush(stdout);
    }
  return 0;
}
