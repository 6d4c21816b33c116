// The value-embed kernel family's facades (value_embed_kernels.hpp): dispatch on the tensors'
// device to cpu:: (cpu/value_embed.cpp) or cuda:: (src/cuda/value_embed.cu); and the buffer.
#include "tapegrad/kernels/value_embed_kernels.hpp"

#include "tapegrad/config.hpp"
#include "tapegrad/kernels/cpu/cpu_kernels.hpp"
#if TAPEGRAD_WITH_CUDA
#include "tapegrad/cuda/value_embed.hpp"
#endif

namespace tapegrad {

// ---- the kernel family's facades

namespace kernels {

#if TAPEGRAD_WITH_CUDA
#define TG_VALUE_EMBED_CUDA(call) return cuda::call
#else
#define TG_VALUE_EMBED_CUDA(call) throw DeviceError("[value_embed] this tapegrad was built without CUDA")
#endif

void value_embed_gather(const Tensor& weight, const Tensor& ids, Tensor& planes) {
  if (common_device("value_embed_gather", {&weight, &ids, &planes}).is_cuda())
    TG_VALUE_EMBED_CUDA(value_embed_gather(weight, ids, planes));
  cpu::value_embed_gather(weight, ids, planes);
}

int64_t value_embed_workspace_elements(Device device, int64_t vocab) {
  if (device.is_cuda()) TG_VALUE_EMBED_CUDA(value_embed_workspace_elements(device, vocab));
  return cpu::value_embed_workspace_elements(device, vocab);
}

void value_embed_accumulate(const Tensor& dplanes, const Tensor& ids, ValueEmbedAccumulate mode,
                            ValueEmbedBuffer& buffer) {
  const Device device = common_device("value_embed_accumulate", {&dplanes, &ids, &buffer.sum, &buffer.touched});
  if (buffer.workspace.defined()) common_device("value_embed_accumulate", {&dplanes, &buffer.workspace});
  if (device.is_cuda()) TG_VALUE_EMBED_CUDA(value_embed_accumulate(dplanes, ids, mode, buffer));
  cpu::value_embed_accumulate(dplanes, ids, mode, buffer);
}

int64_t value_embed_select_touched(const Tensor& touched, Tensor& selected) {
  if (common_device("value_embed_select_touched", {&touched, &selected}).is_cuda())
    TG_VALUE_EMBED_CUDA(value_embed_select_touched(touched, selected));
  return cpu::value_embed_select_touched(touched, selected);
}

void value_embed_take_rows(Tensor& sum, Tensor& touched, const Tensor& selected, int64_t count, Tensor& rows,
                           Tensor& grad) {
  if (common_device("value_embed_take_rows", {&sum, &touched, &selected, &rows, &grad}).is_cuda())
    TG_VALUE_EMBED_CUDA(value_embed_take_rows(sum, touched, selected, count, rows, grad));
  cpu::value_embed_take_rows(sum, touched, selected, count, rows, grad);
}

void sparse_sgd_rows(Tensor& table, const Tensor& rows, const Tensor& grad, float lr) {
  if (common_device("sparse_sgd", {&table, &rows, &grad}).is_cuda())
    TG_VALUE_EMBED_CUDA(sparse_sgd_rows(table, rows, grad, lr));
  cpu::sparse_sgd_rows(table, rows, grad, lr);
}

void sparse_adamw_rows(Tensor& table, const Tensor& rows, const Tensor& grad, Tensor& m, Tensor& v,
                       const AdamWScalars& s) {
  if (common_device("sparse_adamw", {&table, &rows, &grad, &m, &v}).is_cuda())
    TG_VALUE_EMBED_CUDA(sparse_adamw_rows(table, rows, grad, m, v, s));
  cpu::sparse_adamw_rows(table, rows, grad, m, v, s);
}

#undef TG_VALUE_EMBED_CUDA

}  // namespace kernels

namespace kernels {

const char* value_embed_accumulate_name(ValueEmbedAccumulate a) {
  switch (a) {
    case ValueEmbedAccumulate::atomic: return "atomic";
    case ValueEmbedAccumulate::deterministic: return "deterministic";
  }
  return "?";
}

ValueEmbedBuffer ValueEmbedBuffer::zeros(const Tensor& table, int planes, DType dtype) {
  if (table.ndim() != 2 || planes < 1 || table.dim(0) % planes != 0)
    throw Error("[value_embed_buffer] a table " + table.shape().str() + " does not split into " + std::to_string(planes) +
                " planes of (V, D)");
  if (dtype != DType::f16 && dtype != DType::f32)
    throw Error(std::string("[value_embed_buffer] the buffer must be f16 or f32, got ") + dtype_name(dtype));
  const int64_t workspace = kernels::value_embed_workspace_elements(table.device(), table.dim(0) / planes);
  return {Tensor::zeros(table.shape(), dtype, table.device()),
          Tensor::zeros(Shape{table.dim(0) / planes}, DType::i32, table.device()),
          workspace ? Tensor::zeros(Shape{workspace}, DType::i32, table.device()) : Tensor()};
}

}  // namespace kernels
}  // namespace tapegrad
