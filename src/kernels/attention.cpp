// The attention kernels' facades (kernels.hpp): dispatch on the tensors' device to cpu::
// (cpu/attention.cpp) or cuda:: (src/cuda/attention.cu).
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

#undef TG_ATTENTION_CUDA

}  // namespace tapegrad::kernels
