// The value-embed path (value_embed.hpp): the lookup's front-end and backward rule, the pull, and
// the facades of its kernel family (value_embed_kernels.hpp).
//
// Note [the value-embed node and the engine]
// The lookup records one node, inputs (weight, ids), saved = (buffer.sum, buffer.touched), scalar =
// the accumulate mode. Its backward reads the planes' gradient (P, T, D) and adds it into the buffer
// through kernels::value_embed_accumulate; it calls neither accumulate nor accumulate_rows. So:
// - weight.grad stays undefined: dense optimizers (SGD, AdamW) skip the table, and the pull with a
//   sparse optimizer (optim/sparse.hpp) updates it instead;
// - the buffer is not an engine slot: the overwrite-bug mode does not apply to it, and a
//   BackwardRecord (tape dumps) shows the node visited with no contribution to weight;
// - a second backward over a retained tape adds a second time, as a parameter's gradient would;
// - the node allocates nothing in the atomic mode: CUDA groups the ids in the buffer's workspace,
//   which rides as a third input (an input value, no gradient; a node saves only two tensors); the
//   deterministic mode on CUDA takes O(T + P*D*T/64) workspace for the sort and the chunk sums,
//   never anything of the table's size.
// The planes' gradient itself is made by the rules downstream, as for any activation.
//
// Note [value-embed arithmetic]
// c_1..c_n are the contributions to one buffer element in index order (bf16 or f32 plane gradients,
// widened exactly to fp32), b the element.
// - atomic, f16 buffer: b = f16(f32(b) + c_k) for each k. The CPU goes in index order. CUDA rounds
//   c_k to f16 first (exact for bf16 values in f16's normal range, 2^-14 <= |c| <= 65504) and adds
//   with a hardware f16x2 atomic, which rounds the exact sum once: the same as adding in fp32 and
//   rounding, since fp32 keeps 24 >= 2*11 + 2 bits (double rounding is then innocuous). In no fixed
//   order. The error of n adds is bounded by about n * 2^-11 * max|partial sum|.
//   From ValueEmbedTuning::combine_min_reductions up, CUDA combines first (Note [combining
//   duplicate ids]): each run of one id's contributions within a chunk of grouped positions is
//   summed in fp32, rounded to f16, and added by one atomic, which rounds again. A run of one
//   contribution is as before (its f16 conversion is exact); a run of L >= 2 rounds twice instead
//   of L times, so the bound above still holds, and the error is smaller where ids repeat.
// - atomic, f32 buffer: b = b + c_k in fp32; CUDA with vector f32 atomics, in no fixed order (combined
//   runs as above, one fp32 atomic per run).
// - deterministic (either buffer): sort the positions by id, stably; cut the sorted sequence into
//   chunks of kValueEmbedChunk positions; a row's run of positions is cut into parts at the chunk
//   boundaries; each part is summed in fp32 from zero in order, the parts' sums are added in order,
//   and b = round(f32(b) + total) once. The association is fixed, so every run and both devices
//   give the same bits, and the error is one rounding per row and step plus fp32 summation error.
// An f16 buffer saturates past 65504 (inf); take the f32 buffer where row sums can grow that large.
//
// Note [combining duplicate ids]
// CUDA's atomic backward, one 16-byte reduction per pack of every contribution (P*T*D/8 of them),
// was bound by the L2's rate of reductions, not by bytes. Real token streams repeat ids (Zipf-like:
// a long stream holds far fewer distinct ids than positions), so adding each id's contributions
// once needs far fewer reductions, and moves each touched buffer row once. From
// ValueEmbedTuning::combine_min_reductions up (below, grouping costs more than it saves), per batch
// of at most kValueEmbedGroupBatch positions, in the buffer's workspace (made once by
// ValueEmbedBuffer::zeros, so the backward allocates nothing and stays capturable):
// 1. count: a thread per position; count[id] += 1 by one atomic per distinct id in a warp
//    (match_any), which gives each position its rank in its id's group; touched[id] = 1.
// 2. start: each id's rank-0 position reserves count[id] places (one atomic per warp on a running
//    total), so each id's group is a contiguous range; the groups land in no fixed order.
// 3. scatter: (id, position) to start[id] + rank; count and the total are left at zero for the next
//    call. Three small launches instead of cub's radix sort, which took longer at every size timed
//    and nearly as long for short id sequences as for long ones (so mostly its launches, we think;
//    docs/value_embed.md, "Measurements behind the source comments"), and no order beyond
//    grouping, which the atomics do not need.
// 4. run kernel: the grouped positions are cut into chunks of 32; one warp (a smaller lane group
//    when D is small) per (chunk, plane, slice of 32 packs) walks its chunk with 8 loads of 16 bytes
//    in flight per lane, sums each run of one id in fp32 and issues one vector reduction per pack
//    where the run or the chunk ends. Equal chunks spread a hot id's thousands of contributions over
//    many warps; a chunk boundary inside a group costs one extra reduction.
// Out-of-range ids are recorded in step 1 and grouped under V, which step 4 skips. The result differs
// from the one-reduction-per-contribution path only by rounding (Note [value-embed arithmetic]).
// Without a workspace (a buffer assembled by hand) CUDA takes that path.

#include "tapegrad/ops/value_embed.hpp"

#include "tapegrad/ops/common.hpp"

namespace tapegrad {


// ---- the op

namespace ops {

using namespace detail;

namespace {

constexpr const char* kOp = "value_embed_lookup";
constexpr int64_t kMaxIndex = (int64_t{1} << 31) - 1;  // ids, positions and vocabularies fit in i32 on CUDA

std::string tensor_str(const Tensor& t) {  // "(40, 8) f16 on cpu"
  return t.shape().str() + " " + dtype_name(t.dtype()) + " on " + t.device().str();
}

// The buffer must belong to this table: sum (P*V, D) f16/f32 and touched (V,) i32 on its device.
void check_buffer(const char* op, const ValueEmbedBuffer& b, const Tensor& w, int planes) {
  if (!b.touched.defined())
    throw Error(std::string("[") + op + "] the buffer has a sum but no touched mask; make it with ValueEmbedBuffer::zeros");
  const int64_t vocab = w.dim(0) / planes;
  const bool sum_ok = b.sum.ndim() == 2 && b.sum.dim(0) == w.dim(0) && b.sum.dim(1) == w.dim(1) &&
                      (b.sum.dtype() == DType::f16 || b.sum.dtype() == DType::f32) && b.sum.device() == w.device();
  const bool touched_ok = b.touched.ndim() == 1 && b.touched.dim(0) == vocab && b.touched.dtype() == DType::i32 &&
                          b.touched.device() == w.device();
  if (!sum_ok || !touched_ok)
    throw Error(std::string("[") + op + "] the buffer (sum " + tensor_str(b.sum) + ", touched " + tensor_str(b.touched) +
                ") does not fit weight " + tensor_str(w) + " in " + std::to_string(planes) + " planes: it needs sum " +
                w.shape().str() + " f16 or f32 and touched (" + std::to_string(vocab) + ",) i32, on " +
                w.device().str() + "; make it with ValueEmbedBuffer::zeros(weight, planes)");
}

}  // namespace

// weight (P*V, D), ids (T,) -> (P, T, D): out[p][i] = weight[p*V + ids[i]].
// Backward (with a buffer): buffer.sum[p*V + ids[i]] += dout[p][i]; weight gets no gradient.
Var value_embed_lookup(Var weight, Var ids, int planes, const ValueEmbedBuffer& buffer,
                       const ValueEmbedOptions& options) {
  Graph& g = graph_of(kOp, {weight, ids});
  const Tensor& w = weight.value();
  const Tensor& i = ids.value();
  if (planes < 1) throw Error("[value_embed_lookup] planes must be at least 1, got " + std::to_string(planes));
  need_ndim(kOp, "weight", w, 2);
  need_ndim(kOp, "ids", i, 1);
  need_index(kOp, "ids", i);
  if (w.dtype() != DType::bf16 && w.dtype() != DType::f32)
    throw Error(std::string("[value_embed_lookup] weight must be bf16 or f32, got ") + dtype_name(w.dtype()));
  if (w.dim(0) % planes != 0)
    throw Error("[value_embed_lookup] weight " + w.shape().str() + " has " + std::to_string(w.dim(0)) +
                " rows, which do not split into " + std::to_string(planes) + " planes of (V, D)");
  kernels::common_device(kOp, {&w, &i});
  const int64_t vocab = w.dim(0) / planes, t = i.dim(0), d = w.dim(1);
  if (vocab > kMaxIndex || t > kMaxIndex)
    throw Error("[value_embed_lookup] weight " + w.shape().str() + " with ids " + i.shape().str() +
                ": the vocabulary and the number of ids must each be below 2^31");
  const DType out_type = options.dtype.value_or(w.dtype());
  if (out_type != w.dtype() && !(w.dtype() == DType::bf16 && out_type == DType::f32))
    throw Error(std::string("[value_embed_lookup] planes of ") + dtype_name(out_type) + " from a " + dtype_name(w.dtype()) +
                " weight: the planes take the weight's dtype, or f32 from a bf16 weight");
  const bool training = buffer.defined() && g.grad_enabled();
  if (buffer.defined()) check_buffer(kOp, buffer, w, planes);
  if (training && !weight.requires_grad())
    throw Error("[value_embed_lookup] a buffer was given but weight " + w.shape().str() +
                " does not require a gradient (is it an input?); make it a parameter, or pass no buffer for the plain gather");

  Tensor out = Tensor::empty(Shape{planes, t, d}, out_type, w.device());
  kernels::value_embed_gather(w, i, out);
  if (!training) {  // the plain gather: a value with no node
    NoGrad plain(g);
    return g.record(kOp, std::move(out), {weight, ids}, nullptr);
  }
  const BackwardFn backward = [](BackwardContext& ctx) {
    // Note [the value-embed node and the engine]: the planes' gradient goes into the buffer only.
    ValueEmbedBuffer buffer{ctx.saved(0), ctx.saved(1), ctx.node().inputs.size() > 2 ? ctx.input(2) : Tensor()};
    kernels::value_embed_accumulate(ctx.grad_output(), ctx.input(1),
                                    static_cast<ValueEmbedAccumulate>(static_cast<int>(ctx.scalar())), buffer);
  };
  const double mode = static_cast<double>(static_cast<int>(options.accumulate));
  if (buffer.workspace.defined())  // the workspace rides as a third input: a node saves two tensors
    return g.record(kOp, std::move(out), {weight, ids, g.input(buffer.workspace, "value_embed workspace")}, backward,
                    {buffer.sum, buffer.touched}, mode);
  return g.record(kOp, std::move(out), {weight, ids}, backward, {buffer.sum, buffer.touched}, mode);
}

PulledRows value_embed_pull(ValueEmbedBuffer& buffer) {
  if (!buffer.defined()) throw Error("[value_embed_pull] the buffer is empty; make it with ValueEmbedBuffer::zeros");
  const Tensor& sum = buffer.sum;
  if (!buffer.touched.defined() || buffer.touched.ndim() != 1 || buffer.touched.dim(0) == 0 || sum.ndim() != 2 ||
      sum.dim(0) % buffer.touched.dim(0) != 0)
    throw Error("[value_embed_pull] the buffer's sum " + tensor_str(sum) + " and touched " + tensor_str(buffer.touched) +
                " do not belong together; make it with ValueEmbedBuffer::zeros");
  const Device device = sum.device();
  const int64_t vocab = buffer.touched.dim(0), planes = buffer.planes();
  Tensor selected = Tensor::empty(Shape{vocab}, DType::i32, device);
  const int64_t count = kernels::value_embed_select_touched(buffer.touched, selected);
  PulledRows out{Tensor::empty(Shape{planes * count}, DType::i64, device),
                 Tensor::empty(Shape{planes * count, sum.dim(1)}, sum.dtype(), device)};
  if (count) kernels::value_embed_take_rows(buffer.sum, buffer.touched, selected, count, out.rows, out.grad);
  return out;
}

}  // namespace ops
}  // namespace tapegrad
