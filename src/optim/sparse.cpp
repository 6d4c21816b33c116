// Sparse SGD and AdamW over pulled rows (see sparse.hpp): argument checks, then one kernel call.
#include "tapegrad/optim/sparse.hpp"

#include "tapegrad/optim/sgd.hpp"
#include "tapegrad/kernels/value_embed_kernels.hpp"

namespace tapegrad::optim {
namespace {

// The table (N, D) bf16/f32 and the pulled rows (R,) i64 with grad (R, D) f16/f32, on one device.
void check_rows(const char* op, const Tensor& table, const ops::PulledRows& pulled) {
  const Tensor& rows = pulled.rows;
  const Tensor& grad = pulled.grad;
  if (!rows.defined() || !grad.defined())
    throw Error(std::string("[") + op + "] the pulled rows are empty; get them from ops::value_embed_pull");
  if (table.ndim() != 2 || (table.dtype() != DType::bf16 && table.dtype() != DType::f32))
    throw Error(std::string("[") + op + "] the table must be 2-D bf16 or f32, got " + table.shape().str() + " " +
                dtype_name(table.dtype()));
  if (rows.ndim() != 1 || rows.dtype() != DType::i64 || grad.ndim() != 2 || grad.dim(0) != rows.dim(0) ||
      grad.dim(1) != table.dim(1) || (grad.dtype() != DType::f16 && grad.dtype() != DType::f32))
    throw Error(std::string("[") + op + "] rows " + rows.shape().str() + " " + dtype_name(rows.dtype()) + " with grad " +
                grad.shape().str() + " " + dtype_name(grad.dtype()) + " do not fit the table " + table.shape().str() +
                ": they need (R,) i64 and (R, " + std::to_string(table.dim(1)) + ") f16 or f32");
  kernels::common_device(op, {&table, &rows, &grad});
}

}  // namespace

SparseSGD::SparseSGD(double lr) : lr_(lr) { check_learning_rate(lr); }

void SparseSGD::step(Tensor table, const ops::PulledRows& pulled) const {
  check_rows("sparse_sgd", table, pulled);
  if (pulled.count()) kernels::sparse_sgd_rows(table, pulled.rows, pulled.grad, static_cast<float>(lr_));
}

SparseAdamW::SparseAdamW(const Tensor& table, AdamWConfig config)
    : dense_(std::vector<Var>{}, config),
      m_(Tensor::zeros(table.shape(), DType::f32, table.device())),
      v_(Tensor::zeros(table.shape(), DType::f32, table.device())) {}

void SparseAdamW::step(Tensor table, const ops::PulledRows& pulled) {
  check_rows("sparse_adamw", table, pulled);
  if (!(table.shape() == m_.shape()) || !(table.device() == m_.device()))
    throw Error("[sparse_adamw] the table " + table.shape().str() + " on " + table.device().str() +
                " is not the one this optimizer's moments were made for: " + m_.shape().str() + " on " +
                m_.device().str());
  ++t_;
  if (pulled.count()) kernels::sparse_adamw_rows(table, pulled.rows, pulled.grad, m_, v_, dense_.scalars(t_));
}

NamedTensors SparseAdamW::state_tensors() const {
  return {{"sparse_adamw.step", count_tensor(t_)}, {"sparse_adamw.m", m_.clone()}, {"sparse_adamw.v", v_.clone()}};
}

void SparseAdamW::load_state(const NamedTensors& state) {
  StateReader in("sparse_adamw", state);
  const uint64_t t = in.count("sparse_adamw.step");
  const Tensor& m = in.tensor("sparse_adamw.m", m_.shape(), DType::f32);
  const Tensor& v = in.tensor("sparse_adamw.v", v_.shape(), DType::f32);
  in.finish();
  // everything checked: now the state changes (copied in place, on the moments' device)
  m_.copy_from(m);
  v_.copy_from(v);
  t_ = t;
}

}  // namespace tapegrad::optim
