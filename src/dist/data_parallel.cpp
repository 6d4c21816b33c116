// Data parallel and ZeRO-1 (data_parallel.hpp): the flat layout, each rank's pairwise sum over its
// micro-batches, the buckets' ordered reductions, and AdamW over this rank's slices.
#include "tapegrad/dist/data_parallel.hpp"

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "tapegrad/kernels/kernels.hpp"

namespace tapegrad::dist {

// Note [micro-batch order]
// The step's gradient is (1/M) T(0, M), T the pairwise tree over the micro-batches' gradients
// g_0 .. g_{M-1} in global order: T(i, 1) = g_i and T(i, n) = T(i, n/2) + T(i + n/2, n/2). Rank r
// runs micro-batches r A .. r A + A - 1 and builds T(r A, A) as they finish, with a stack per
// parameter (a binary counter: push g_j at level 0; while the two top entries share a level, add
// them into one of the next), so it holds at most log2(A) + 1 sums. The ranks' T(r A, A) are then
// added by the communicator's tree in rank order (Note [ordered reduction] in comm.cpp), which,
// for N and A powers of two, is the tree T(0, M) continued: every element of the gradient is the
// same sum of the same numbers in the same order for every N and A with N A = M. Then the scale by
// 1/M (exact for M a power of two). Element by element arithmetic, so the bits hold on every device
// and for every cut of the elements into buckets and slices. For M not a power of two the sums are
// still deterministic run to run, but another N gives another tree.

namespace {

[[noreturn]] void refuse(const std::string& what) { throw Error("[dist] " + what); }

std::string name_of(size_t k, const Var& p) {
  return p.label().empty() ? "parameter " + std::to_string(k) : "'" + p.label() + "'";
}

}  // namespace

FlatLayout::FlatLayout(const std::vector<Var>& params, int ranks, int64_t bucket_bytes) {
  offset.assign(params.size(), 0);
  bucket_of.assign(params.size(), 0);
  const int64_t unit = kAlign * ranks;
  Bucket current;
  auto close = [&] {
    if (current.params.empty()) return;
    current.size = (size - current.begin + unit - 1) / unit * unit;
    size = current.begin + current.size;
    buckets.push_back(std::move(current));
    current = Bucket{size, 0, {}};
  };
  for (size_t i = params.size(); i-- > 0;) {  // the order a backward finishes them
    const Tensor& v = params[i].value();
    size = (size + kAlign - 1) / kAlign * kAlign;
    offset[i] = size;
    bucket_of[i] = buckets.size();
    current.params.push_back(i);
    size += v.numel();
    if ((size - current.begin) * static_cast<int64_t>(dtype_size(v.dtype())) >= bucket_bytes) close();
  }
  close();
}

DataParallel::DataParallel(Communicator& comm, std::vector<Var> params, DataParallelOptions options)
    : comm_(comm),
      params_(std::move(params)),
      A_(options.micro_batches),
      options_(options),
      collective_(comm.size() > 1 || options.exchange_alone) {
  if (A_ < 1) refuse("data parallel with " + std::to_string(A_) + " micro-batches a step: at least 1");
  if (params_.empty()) refuse("data parallel over no parameters");
  if (options_.bucket_bytes < 1) refuse("data parallel with buckets of " + std::to_string(options_.bucket_bytes) + " bytes");
  const DType dtype = params_[0].dtype();
  for (size_t k = 0; k < params_.size(); ++k) {
    const Var& p = params_[k];
    if (p.dtype() != DType::f32 && p.dtype() != DType::f64)
      refuse(name_of(k, p) + " is " + dtype_name(p.dtype()) + "; data parallel trains f32 and f64 parameters");
    if (p.dtype() != dtype)
      refuse(name_of(k, p) + " is " + dtype_name(p.dtype()) + " and " + name_of(0, params_[0]) + " " + dtype_name(dtype) +
             "; data parallel takes parameters of one dtype");
    if (!(p.device() == comm_.device()))
      refuse(name_of(k, p) + " is on " + p.device().str() + ", but the " + comm_.backend() + " communicator moves " +
             "tensors on " + comm_.device().str());
  }
  layout_ = FlatLayout(params_, comm_.size(), options_.bucket_bytes);
  if (collective_) {
    send_ = Tensor::zeros(Shape{layout_.size}, dtype, comm_.device());
    recv_ = Tensor::zeros(Shape{layout_.size}, dtype, comm_.device());
  }
  stacks_.resize(params_.size());
  ready_.assign(params_.size(), false);
  missing_.resize(layout_.buckets.size());
  for (size_t b = 0; b < layout_.buckets.size(); ++b) missing_[b] = layout_.buckets[b].params.size();
}

void DataParallel::broadcast_parameters() {
  for (Var& p : params_) {
    Tensor v = p.value();
    comm_.broadcast(v, 0);
  }
  check_parameters_agree("after the broadcast from rank 0");
}

void DataParallel::check_parameters_agree(const std::string& when) {
  const int64_t n = static_cast<int64_t>(params_.size());
  std::vector<double> mine;  // the hashes' bits, 8 bytes each, through the doubles' all-gather
  for (const Var& p : params_) {
    const uint64_t h = hash_bytes(p.value());
    double d;
    std::memcpy(&d, &h, sizeof d);
    mine.push_back(d);
  }
  const std::vector<double> all = gather_doubles(comm_, mine);
  for (int r = 1; r < comm_.size(); ++r)
    for (int64_t k = 0; k < n; ++k)
      if (std::memcmp(&all[static_cast<size_t>(r * n + k)], &all[static_cast<size_t>(k)], sizeof(double)) != 0)
        refuse("rank " + std::to_string(r) + "'s parameters differ from rank 0's " + when + ": " +
               name_of(static_cast<size_t>(k), params_[static_cast<size_t>(k)]) + " first");
}

BackwardOptions DataParallel::backward_options(int64_t j, BackwardOptions base) {
  if (j != micro_ || j >= A_)
    refuse("backward of micro-batch " + std::to_string(j) + " where micro-batch " + std::to_string(micro_) +
           " of " + std::to_string(A_) + " was expected (finish() ends a step)");
  std::unordered_map<int32_t, size_t> index;
  for (size_t p = 0; p < params_.size(); ++p) index.emplace(params_[p].id(), p);
  const bool last = j == A_ - 1;
  base.on_gradient_final = [this, last, index = std::move(index)](const Var& v) {
    auto it = index.find(v.id());
    if (it == index.end() || &v.graph() != &params_[it->second].graph()) return;  // not one of ours
    if (!last) return absorb(it->second);
    final_gradient(it->second);
    // Overlap on a device stream; a host backend waits in its transfers, so it reduces after the
    // backward (finish), not between the backward's ops.
    if (options_.overlap && collective_ && comm_.device().is_cuda()) reduce_ready_buckets();
  };
  ++micro_;
  return base;
}

// The parameter keeps its gradient (a tape dump of the micro-batch shows it): the stack shares it,
// and only ever adds into an older entry, one the next zero_grad() has left to the stack alone
// (the engine copies a gradient another handle shares before it adds into it).
void DataParallel::absorb(size_t p) {
  Var& v = params_[p];
  Tensor g = v.grad();
  if (!g.defined()) g = Tensor::zeros(v.shape(), v.dtype(), v.device());  // not reached: a zero gradient
  std::vector<Entry>& stack = stacks_[p];
  stack.push_back({0, std::move(g)});
  while (stack.size() >= 2 && stack[stack.size() - 1].level == stack[stack.size() - 2].level) {
    Entry top = std::move(stack.back());
    stack.pop_back();
    Entry& below = stack.back();
    if (!below.sum.unique()) below.sum = below.sum.clone();  // still the parameter's (no zero_grad between)
    kernels::binary(kernels::Binary::add, below.sum, top.sum, below.sum);  // earlier + later
    below.sum.mark_modified();
    ++below.level;
  }
}

Tensor DataParallel::fold(size_t p) {
  std::vector<Entry>& stack = stacks_[p];
  Tensor sum = std::move(stack.front().sum);
  if (stack.size() > 1 && !sum.unique()) sum = sum.clone();
  for (size_t i = 1; i < stack.size(); ++i) kernels::binary(kernels::Binary::add, sum, stack[i].sum, sum);
  stack.clear();
  return sum;
}

void DataParallel::final_gradient(size_t p) {
  if (ready_[p]) return;
  absorb(p);
  Tensor sum = fold(p);
  if (!collective_) {
    if (A_ > 1) {  // sum is the stack's own here (fold added into it)
      kernels::scale(sum, 1.0 / static_cast<double>(A_), sum);
      sum.mark_modified();
    }
    params_[p].set_grad(std::move(sum));
  } else {
    send_.flat_view(layout_.offset[p], sum.shape()).copy_from(sum);  // on the compute stream
  }
  ready_[p] = true;
  --missing_[layout_.bucket_of[p]];
}

void DataParallel::reduce_ready_buckets() {
  while (next_bucket_ < layout_.buckets.size() && missing_[next_bucket_] == 0) reduce_bucket(next_bucket_++);
}

// Bucket b's ordered sum (Note [ordered reduction]): slice s of every rank's packed gradients to
// rank s (all-to-all), rank r's N received slices added by the pairwise tree, scaled by 1/M; then
// the sums all-gathered (plain) or kept as this rank's slice (sharded).
void DataParallel::reduce_bucket(size_t b) {
  const FlatLayout::Bucket& bucket = layout_.buckets[b];
  const int64_t N = comm_.size(), k = bucket.size / N;
  Tensor packed = send_.flat_view(bucket.begin, Shape{bucket.size});
  Tensor rows = recv_.flat_view(bucket.begin, Shape{bucket.size});
  Communicator::Overlapped overlapped(comm_);
  comm_.after_compute();  // the packs, queued on the compute stream, before the transfer
  comm_.all_to_all(packed, rows);
  const double scale = 1.0 / static_cast<double>(N * A_);
  comm_.on_comm_stream([&] {
    sum_rows_pairwise(rows, N);
    Tensor mine = rows.flat_view(0, Shape{k});
    kernels::scale(mine, scale, mine);
  });
  if (!sharded_) comm_.all_gather(rows.flat_view(0, Shape{k}), packed);
}

void DataParallel::finish() {
  if (micro_ != A_)
    refuse("finish() after " + std::to_string(micro_) + " of the step's " + std::to_string(A_) + " micro-batches");
  for (size_t p = 0; p < params_.size(); ++p) final_gradient(p);  // those no backward handed over
  if (collective_) {
    reduce_ready_buckets();
    comm_.after_comm();  // the compute stream's next work (clipping, the update) waits for the sums
    for (size_t p = 0; p < params_.size(); ++p)
      params_[p].set_grad(sharded_ ? Tensor() : send_.flat_view(layout_.offset[p], params_[p].shape()));
  }
  micro_ = 0;
  next_bucket_ = 0;
  ready_.assign(params_.size(), false);
  for (size_t b = 0; b < layout_.buckets.size(); ++b) missing_[b] = layout_.buckets[b].params.size();
}

Tensor DataParallel::slice_of_bucket(size_t b) const {
  const FlatLayout::Bucket& bucket = layout_.buckets.at(b);
  const int64_t k = bucket.size / comm_.size();
  if (!collective_) refuse("slice_of_bucket without collectives: the gradients are the parameters' own");
  return recv_.flat_view(bucket.begin, Shape{k});
}

std::vector<double> gather_doubles(Communicator& comm, const std::vector<double>& mine) {
  const int64_t k = static_cast<int64_t>(mine.size());
  Tensor in = Tensor::from_vector(mine, Shape{k}, comm.device());
  Tensor out = Tensor::empty(Shape{k * comm.size()}, DType::f64, comm.device());
  comm.all_gather(in, out);
  comm.synchronize();  // a device's read-back would wait for a lost peer without a deadline
  const Tensor host = out.to(Device::cpu());
  const double* d = static_cast<const double*>(host.raw_data());
  return std::vector<double>(d, d + k * comm.size());
}

double pairwise_mean(const std::vector<double>& x) {
  if (x.empty()) refuse("the mean of no values");
  std::vector<double> t = x;
  for (size_t stride = 1; stride < t.size(); stride *= 2)
    for (size_t i = 0; i + stride < t.size(); i += 2 * stride) t[i] = t[i] + t[i + stride];
  return t[0] / static_cast<double>(t.size());
}

// ---- ZeRO-1

ShardedAdamW::ShardedAdamW(DataParallel& dp, const std::vector<optim::ParamGroup>& groups, optim::AdamWConfig config)
    : dp_(dp), groups_(groups), config_(config) {
  Communicator& comm = dp.comm();
  if (!dp.collective())
    refuse("ZeRO-1 in a world of one: use optim::AdamW (the same update; or exchange_alone, to test the sharded path)");
  const std::vector<Var>& params = dp.parameters();
  std::unordered_map<int32_t, size_t> index;
  for (size_t p = 0; p < params.size(); ++p) index.emplace(params[p].id(), p);
  std::vector<size_t> group_of(params.size(), groups.size());
  for (size_t i = 0; i < groups.size(); ++i)
    for (const Var& v : groups[i].params) {
      auto it = index.find(v.id());
      if (it == index.end()) refuse("ZeRO-1's group " + std::to_string(i) + " holds a parameter data parallel does not");
      group_of[it->second] = i;
    }
  for (size_t p = 0; p < params.size(); ++p)
    if (group_of[p] == groups.size()) refuse(name_of(p, params[p]) + " is in no group of ZeRO-1's AdamW");
  // this rank's slice of each bucket, cut where it meets the parameters
  const FlatLayout& layout = dp.layout();
  const int64_t N = comm.size(), r = comm.rank();
  for (size_t b = 0; b < layout.buckets.size(); ++b) {
    const FlatLayout::Bucket& bucket = layout.buckets[b];
    const int64_t k = bucket.size / N, lo = bucket.begin + r * k, hi = lo + k;
    for (size_t p : bucket.params) {
      const int64_t begin = std::max(lo, layout.offset[p]), end = std::min(hi, layout.offset[p] + params[p].value().numel());
      if (begin < end) segments_.push_back({p, begin - layout.offset[p], end - begin, b, begin - lo});
    }
  }
  // AdamW numbers its parameters group by group: the segments in that order, so that segment i
  // is AdamW's parameter i
  std::stable_sort(segments_.begin(), segments_.end(),
                   [&](const Segment& a, const Segment& b) { return group_of[a.param] < group_of[b.param]; });
  graph_ = std::make_unique<Graph>();
  std::vector<optim::ParamGroup> mine(groups.size());
  for (size_t i = 0; i < groups.size(); ++i) mine[i].options = groups[i].options;
  for (const Segment& s : segments_) {
    const Var& p = params[s.param];
    Var v = graph_->parameter(p.value().flat_view(s.begin, Shape{s.size}),
                              p.label() + "[" + std::to_string(s.begin) + ":" + std::to_string(s.begin + s.size) + "]");
    segment_vars_.push_back(v);
    mine[group_of[s.param]].params.push_back(v);
  }
  adamw_ = std::make_unique<optim::AdamW>(mine, config);
  dp.set_sharded(true);
}

ShardedAdamW::~ShardedAdamW() { dp_.set_sharded(false); }

optim::ClipFactor ShardedAdamW::clip_factor(double max_norm) {
  Communicator& comm = dp_.comm();
  std::vector<Tensor> slices;
  std::vector<const Tensor*> read;
  int64_t chunks = 0;
  for (size_t b = 0; b < dp_.layout().buckets.size(); ++b) {
    slices.push_back(dp_.slice_of_bucket(b));
    chunks += kernels::sum_squares_chunk_count(slices.back().numel());
  }
  for (const Tensor& s : slices) read.push_back(&s);
  const Device device = comm.device();
  Tensor sums = Tensor::empty(Shape{chunks}, DType::f64, device);
  kernels::sum_squares_chunks(read, sums);
  Tensor all = Tensor::empty(Shape{chunks * comm.size()}, DType::f64, device);
  comm.all_gather(sums, all);
  Tensor sumsq = Tensor::empty(Shape{}, DType::f64, device);
  kernels::sum_all(all, sumsq);
  optim::ClipFactor out{Tensor::empty(Shape{}, DType::f64, device), Tensor::empty(Shape{}, DType::f64, device)};
  kernels::clip_factor(sumsq, max_norm, out.norm, out.factor);
  return out;
}

void ShardedAdamW::step(const Tensor& grad_scale) {
  for (size_t i = 0; i < segments_.size(); ++i)
    segment_vars_[i].set_grad(dp_.slice_of_bucket(segments_[i].bucket).flat_view(segments_[i].slice_offset, Shape{segments_[i].size}));
  adamw_->step(grad_scale);
  gather_weights();
}

void ShardedAdamW::write_schedule(uint64_t t, size_t n) { adamw_->write_schedule(t, n); }

void ShardedAdamW::scheduled_step(size_t slot, const Tensor& grad_scale) {
  for (size_t i = 0; i < segments_.size(); ++i)
    segment_vars_[i].set_grad(dp_.slice_of_bucket(segments_[i].bucket).flat_view(segments_[i].slice_offset, Shape{segments_[i].size}));
  adamw_->scheduled_step(slot, grad_scale);
  gather_weights();
}

void ShardedAdamW::set_lr(double lr) { adamw_->set_lr(lr); }
const optim::AdamWConfig& ShardedAdamW::group(size_t i) const { return adamw_->group(i); }
uint64_t ShardedAdamW::step_count() const { return adamw_->step_count(); }
void ShardedAdamW::set_step_count(uint64_t t) { adamw_->set_step_count(t); }

// For every bucket: this rank's segments of some per-segment tensor (of_segment) into its slot of
// the scratch buffer, an in-place all-gather, then each parameter's elements of the gathered
// bucket handed to `take`.
void ShardedAdamW::gather_segments(const std::function<Tensor(size_t)>& of_segment,
                                   const std::function<void(size_t, const Tensor&)>& take) {
  Communicator& comm = dp_.comm();
  const FlatLayout& layout = dp_.layout();
  Tensor& flat = dp_.scratch();
  const int64_t N = comm.size(), r = comm.rank();
  for (size_t b = 0; b < layout.buckets.size(); ++b) {
    const FlatLayout::Bucket& bucket = layout.buckets[b];
    const int64_t k = bucket.size / N;
    Tensor slot = flat.flat_view(bucket.begin + r * k, Shape{k});
    for (size_t i = 0; i < segments_.size(); ++i)
      if (segments_[i].bucket == b)
        slot.flat_view(segments_[i].slice_offset, Shape{segments_[i].size}).copy_from(of_segment(i));
    Tensor whole = flat.flat_view(bucket.begin, Shape{bucket.size});
    comm.all_gather(slot, whole);
    for (size_t p : bucket.params) take(p, flat.flat_view(layout.offset[p], dp_.parameters()[p].shape()));
  }
}

// The weights: every rank's updated slices, copied into every parameter.
void ShardedAdamW::gather_weights() {
  gather_segments([&](size_t i) { return segment_vars_[i].value(); },
                  [&](size_t p, const Tensor& gathered) {
                    Tensor v = dp_.parameters()[p].value();
                    v.copy_from(gathered);
                  });
}

optim::NamedTensors ShardedAdamW::state_tensors() {
  Communicator& comm = dp_.comm();
  const std::vector<Var>& params = dp_.parameters();
  // m, then v: every rank's slices gathered into whole tensors, one a parameter
  auto gather = [&](bool second) {
    std::vector<Tensor> whole(params.size());
    gather_segments([&](size_t i) { return second ? adamw_->v(i) : adamw_->m(i); },
                    [&](size_t p, const Tensor& gathered) { whole[p] = gathered.clone(); });
    return whole;
  };
  const std::vector<Tensor> m = gather(false), v = gather(true);
  comm.synchronize();  // the gathered moments are read back to be written: within the deadline
  optim::AdamW full(groups_, config_);
  for (size_t i = 0; i < full.group_count(); ++i) full.group(i) = adamw_->group(i);
  full.set_step_count(adamw_->step_count());
  std::unordered_map<int32_t, size_t> index;
  for (size_t p = 0; p < params.size(); ++p) index.emplace(params[p].id(), p);
  for (size_t k = 0; k < full.parameters().size(); ++k) {
    const size_t p = index.at(full.parameters()[k].id());
    full.set_moments(k, m[p], v[p]);
  }
  return full.state_tensors();
}

void ShardedAdamW::load_state(const optim::NamedTensors& state) {
  optim::AdamW full(groups_, config_);
  full.load_state(state);  // checked there, by name
  std::unordered_map<int32_t, size_t> index;  // model parameter -> full's index
  for (size_t k = 0; k < full.parameters().size(); ++k) index.emplace(full.parameters()[k].id(), k);
  adamw_->set_step_count(full.step_count());
  for (size_t i = 0; i < full.group_count(); ++i) adamw_->group(i) = full.group(i);
  for (size_t i = 0; i < segments_.size(); ++i) {
    const Segment& s = segments_[i];
    const size_t k = index.at(dp_.parameters()[s.param].id());
    adamw_->set_moments(i, full.m(k).flat_view(s.begin, Shape{s.size}), full.v(k).flat_view(s.begin, Shape{s.size}));
    adamw_->set_step_count(i, full.step_count(k));
  }
}

}  // namespace tapegrad::dist
