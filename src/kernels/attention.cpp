// The attention kernels' facades (kernels.hpp): dispatch on the tensors' device to cpu::
// (cpu/attention.cpp) or cuda:: (src/cuda/attention.cu).
#include <deque>
#include <utility>

#include "tapegrad/config.hpp"
#include "tapegrad/kernels/cpu/cpu_kernels.hpp"
#include "tapegrad/kernels/kernels.hpp"
#if TAPEGRAD_WITH_CUDA
#include "tapegrad/cuda/cuda_kernels.hpp"
#endif

namespace tapegrad::kernels {

#if TAPEGRAD_WITH_CUDA
#define TG_ATTENTION_CUDA(call) return cuda::call
#else
#define TG_ATTENTION_CUDA(call) throw DeviceError("[scaled_dot_product_attention] this tapegrad was built without CUDA")
#endif

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale, Tensor& out,
                       Tensor& lse) {
  if (common_device("scaled_dot_product_attention", {&q, &k, &v, &out, &lse}).is_cuda())
    TG_ATTENTION_CUDA(attention_forward(q, k, v, causal, scale, out, lse));
  cpu::attention_forward(q, k, v, causal, scale, out, lse);
}

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                        const Tensor& lse, bool causal, double scale, Tensor& delta, Tensor& dq, Tensor& dk,
                        Tensor& dv) {
  if (common_device("scaled_dot_product_attention_backward", {&q, &k, &v, &out, &dout, &lse, &delta, &dq, &dk, &dv})
          .is_cuda())
    TG_ATTENTION_CUDA(attention_backward(q, k, v, out, dout, lse, causal, scale, delta, dq, dk, dv));
  cpu::attention_backward(q, k, v, out, dout, lse, causal, scale, delta, dq, dk, dv);
}

// Note [attention layouts]
// nanoGPT's attention projects x (B, T, C) to qkv (B, T, 3C), splits it in thirds and permutes each
// to heads (B, H, T, d); the output's heads go back to (B, T, C). Done as ops, that is six copies a
// layer forward and as many backward. The layouts let the kernels read q, k and v where the
// projection put them and write the output (and the gradients) where the next product reads them:
// a row of d elements stays contiguous, only the steps between rows, heads and batches change.
// CUDA's flash kernels (f32, heads up to 128) take any layout; every other path (the CPU, f64, big
// heads) gathers the operands into contiguous tensors, runs the contiguous kernels and scatters the
// results: the same arithmetic in the same order, so a layout never changes a bit.

View HeadRows::view(int64_t B, int64_t H, int64_t T, int64_t w) const {
  View x;
  x.shape = Shape{B, H, T, w};
  x.stride[0] = batch;
  x.stride[1] = head;
  x.stride[2] = row;
  x.stride[3] = 1;
  x.offset = offset;
  return x;
}

AttentionLayout AttentionLayout::contiguous(int64_t B, int64_t H, int64_t Tq, int64_t Tk, int64_t d, int64_t dv) {
  auto rows = [&](int64_t T, int64_t w) { return HeadRows{0, H * T * w, T * w, w}; };
  AttentionLayout at{B, H, Tq, Tk, d, dv, rows(Tq, d), rows(Tk, d), rows(Tk, dv), rows(Tq, dv), {}, {}, {}};
  at.dq = at.q;
  at.dk = at.k;
  at.dv_ = at.v;
  return at;
}

AttentionLayout AttentionLayout::packed(int64_t B, int64_t T, int64_t H, int64_t d) {
  const int64_t C = H * d;
  const HeadRows third{0, T * 3 * C, d, 3 * C};
  AttentionLayout at{B, H, T, T, d, d, third, third, third, HeadRows{0, T * C, d, C}, third, third, third};
  at.k.offset = at.dk.offset = C;
  at.v.offset = at.dv_.offset = 2 * C;
  return at;
}

bool AttentionLayout::is_contiguous() const {
  const AttentionLayout c = contiguous(B, H, Tq, Tk, d, dv);
  auto same = [](const HeadRows& a, const HeadRows& b) {
    return a.offset == b.offset && a.batch == b.batch && a.head == b.head && a.row == b.row;
  };
  return same(q, c.q) && same(k, c.k) && same(v, c.v) && same(out, c.out) && same(dq, c.dq) && same(dk, c.dk) &&
         same(dv_, c.dv_);
}

namespace {

// x's operand (B, H, T, w) at `rows`, as a contiguous tensor (a gather), and back (a scatter).
Tensor gathered(const Tensor& x, const HeadRows& rows, int64_t B, int64_t H, int64_t T, int64_t w) {
  Tensor c = Tensor::empty(Shape{B, H, T, w}, x.dtype(), x.device());
  copy_strided(x, rows.view(B, H, T, w), c, contiguous_view(c.shape()));
  return c;
}
void scatter(const Tensor& c, Tensor& x, const HeadRows& rows) {
  copy_strided(c, contiguous_view(c.shape()), x, rows.view(c.dim(0), c.dim(1), c.dim(2), c.dim(3)));
}

bool device_takes(const Tensor& q, const AttentionLayout& at) {
#if TAPEGRAD_WITH_CUDA
  return q.device().is_cuda() && cuda::attention_takes_layout(q.dtype(), at);
#else
  (void)q;
  (void)at;
  return false;
#endif
}

}  // namespace

namespace {

// bf16 operands where no kernel takes them (the CPU, CUDA's heads over 128): f32 copies through
// the f32 path, the results rounded back to bf16 (Note [bf16 activations] in ops/autocast.hpp).
// Operands that share their bytes (q, k and v in one qkv) share one copy.
class Widened {
 public:
  const Tensor& of(const Tensor& t) {
    for (auto& [bytes, wide] : copies_)
      if (bytes == t.raw_data()) return wide;
    Tensor wide = Tensor::empty(t.shape(), DType::f32, t.device());
    cast(t, wide);
    copies_.emplace_back(t.raw_data(), std::move(wide));
    return copies_.back().second;
  }
  // An f32 result for t to be written into, shared as t's bytes are
  Tensor& result(Tensor& t) {
    for (auto& r : results_)
      if (r.first->raw_data() == t.raw_data()) return r.second;
    results_.emplace_back(&t, Tensor::empty(t.shape(), DType::f32, t.device()));
    return results_.back().second;
  }
  // the results, rounded into their bf16 tensors
  void round_back() {
    for (auto& [t, wide] : results_) cast(wide, *t);
  }

 private:
  std::deque<std::pair<const void*, Tensor>> copies_;  // a deque: the references handed out stay valid
  std::deque<std::pair<Tensor*, Tensor>> results_;
};

}  // namespace

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionLayout& at, bool causal,
                       double scale, Tensor& out, Tensor& lse, AttentionProducts products) {
  common_device("scaled_dot_product_attention", {&q, &k, &v, &out, &lse});
  if (device_takes(q, at)) TG_ATTENTION_CUDA(attention_forward(q, k, v, at, causal, scale, out, lse, products));
  if (q.dtype() == DType::bf16) {
    Widened w;
    attention_forward(w.of(q), w.of(k), w.of(v), at, causal, scale, w.result(out), lse, products);
    w.round_back();
    return;
  }
  if (at.is_contiguous()) return attention_forward(q, k, v, causal, scale, out, lse);
  Tensor o = Tensor::empty(Shape{at.B, at.H, at.Tq, at.dv}, out.dtype(), out.device());
  attention_forward(gathered(q, at.q, at.B, at.H, at.Tq, at.d), gathered(k, at.k, at.B, at.H, at.Tk, at.d),
                    gathered(v, at.v, at.B, at.H, at.Tk, at.dv), causal, scale, o, lse);
  scatter(o, out, at.out);
}

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                        const Tensor& lse, const AttentionLayout& at, bool causal, double scale, Tensor& delta,
                        Tensor& dq, Tensor& dk, Tensor& dv, AttentionProducts products) {
  common_device("scaled_dot_product_attention_backward", {&q, &k, &v, &out, &dout, &lse, &delta, &dq, &dk, &dv});
  if (device_takes(q, at))
    TG_ATTENTION_CUDA(attention_backward(q, k, v, out, dout, lse, at, causal, scale, delta, dq, dk, dv, products));
  if (q.dtype() == DType::bf16) {
    Widened w;
    attention_backward(w.of(q), w.of(k), w.of(v), w.of(out), w.of(dout), lse, at, causal, scale, delta, w.result(dq),
                       w.result(dk), w.result(dv), products);
    w.round_back();
    return;
  }
  if (at.is_contiguous()) return attention_backward(q, k, v, out, dout, lse, causal, scale, delta, dq, dk, dv);
  const int64_t B = at.B, H = at.H;
  Tensor gq = Tensor::empty(Shape{B, H, at.Tq, at.d}, dq.dtype(), dq.device());
  Tensor gk = Tensor::empty(Shape{B, H, at.Tk, at.d}, dk.dtype(), dk.device());
  Tensor gv = Tensor::empty(Shape{B, H, at.Tk, at.dv}, dv.dtype(), dv.device());
  attention_backward(gathered(q, at.q, B, H, at.Tq, at.d), gathered(k, at.k, B, H, at.Tk, at.d),
                     gathered(v, at.v, B, H, at.Tk, at.dv), gathered(out, at.out, B, H, at.Tq, at.dv),
                     gathered(dout, at.out, B, H, at.Tq, at.dv), lse, causal, scale, delta, gq, gk, gv);
  scatter(gq, dq, at.dq);
  scatter(gk, dk, at.dk);
  scatter(gv, dv, at.dv_);
}

#undef TG_ATTENTION_CUDA

}  // namespace tapegrad::kernels
