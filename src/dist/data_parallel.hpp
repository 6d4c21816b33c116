// Data parallel: N ranks train one model, each running A micro-batches a step, and every rank
// updates with the step's gradient, (1/M) times the sum of the M = N A micro-batches' gradients,
// the same bits whatever N and A are (Note [micro-batch order] in data_parallel.cpp). ZeRO-1
// (ShardedAdamW) keeps AdamW's moments cut over the ranks, with the same bits again.
//
//   dist::DataParallel dp(*comm, params, {.micro_batches = A});
//   dp.broadcast_parameters();                            // rank 0's weights everywhere, checked
//   for (each step) {
//     for (int64_t j = 0; j < A; ++j) {                    // global micro-batch dp.first_micro_batch() + j
//       g.clear(); g.zero_grad();
//       g.backward(loss_of(j), dp.backward_options(j));    // hands each final gradient to dp
//     }
//     dp.finish();                                         // every parameter's grad(): the step's gradient
//     optim::clip_grad_norm(params, 1.0); adamw.step();
//   }
//
// Rules: the parameters share one dtype (f32 or f64) and one device, the communicator's. A
// parameter that no micro-batch of the step reaches gets a zero gradient (PyTorch DDP's rule). The
// engine knows nothing of this: gradients come in through BackwardOptions::on_gradient_final and
// go out through Var::set_grad.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tapegrad/dist/comm.hpp"
#include "tapegrad/graph/graph.hpp"
#include "tapegrad/optim/adamw.hpp"
#include "tapegrad/optim/clip.hpp"

namespace tapegrad::dist {

struct DataParallelOptions {
  int64_t micro_batches = 1;             // A: the micro-batches this rank runs each step
  int64_t bucket_bytes = int64_t{25} << 20;  // gradients reduced a bucket at a time, in this order
  // Reduce each bucket as soon as its gradients are final, while the backward still runs (on the
  // communicator's stream: NCCL). Host backends reduce after the backward either way.
  bool overlap = true;
  // A world of one has nothing to exchange, so its steps make no collective call (data parallel
  // costs nothing there); exchange_alone sends its gradients through the communicator anyway, the
  // path of several ranks, for testing and measuring that path on one device.
  bool exchange_alone = false;
};

// Where each parameter's elements sit in the flat buffers the ranks exchange. Parameters go in
// reverse order (the order a backward finishes them), each at an offset that is a multiple of
// kAlign elements (a chunk of the gradient norm, Note [sum of squares order], so chunks never
// straddle two parameters); they are grouped in buckets of about bucket_bytes, each padded with
// zeros to a multiple of N kAlign elements, so that its N slices, one a rank, are whole chunks.
struct FlatLayout {
  static constexpr int64_t kAlign = 4096;
  struct Bucket {
    int64_t begin = 0, size = 0;      // elements of the flat buffer, size a multiple of N kAlign
    std::vector<size_t> params;       // indices into the parameter list, in layout order
  };
  std::vector<int64_t> offset;        // per parameter (as given)
  std::vector<Bucket> buckets;
  std::vector<size_t> bucket_of;      // per parameter
  int64_t size = 0;                   // the whole flat buffer
  FlatLayout() = default;
  FlatLayout(const std::vector<Var>& params, int ranks, int64_t bucket_bytes);
};

class DataParallel {
 public:
  DataParallel(Communicator& comm, std::vector<Var> params, DataParallelOptions options = {});

  Communicator& comm() const { return comm_; }
  const std::vector<Var>& parameters() const { return params_; }
  int64_t micro_batches() const { return A_; }                                  // A
  int64_t global_micro_batches() const { return A_ * comm_.size(); }            // M = N A
  int64_t first_micro_batch() const { return A_ * comm_.rank(); }               // this rank's, r A
  const FlatLayout& layout() const { return layout_; }
  // Whether steps go through the communicator's collectives: several ranks (or exchange_alone); a
  // world of one sums its micro-batches alone.
  bool collective() const { return collective_; }

  // Every rank's parameters take rank 0's values (a broadcast), then check_parameters_agree.
  void broadcast_parameters();
  // Compares a hash of every parameter's bytes across the ranks; a rank whose bytes differ stops
  // the job: Error "[dist] rank 1's parameters differ from rank 0's (<when>): 'h.0.attn...' first".
  void check_parameters_agree(const std::string& when);

  // For the backward of this rank's micro-batch j (0 <= j < A): `base` with on_gradient_final set,
  // so that each parameter's gradient joins the step's sum as soon as it is final (and, at j = A-1,
  // its bucket's reduction starts once the bucket is complete).
  BackwardOptions backward_options(int64_t j, BackwardOptions base = {});
  // After the last micro-batch's backward: the rest of the reduction, then every parameter's
  // gradient is the step's (a view of the reduced buffer when there are several ranks). In sharded
  // mode the parameters are left without gradients: each rank has reduced its slices alone, which
  // ShardedAdamW reads. Queues device work without waiting for it (capturable); wait() waits.
  void finish();
  // Waits on the host for the communicator's queued work, within the deadline (Timeout).
  void wait() { comm_.synchronize(); }

  // ZeRO-1 (ShardedAdamW sets it): finish() reduces each bucket to this rank's slice only (a
  // reduce-scatter), which ShardedAdamW updates from.
  void set_sharded(bool on) { sharded_ = on; }
  bool sharded() const { return sharded_; }
  // This rank's reduced slice of bucket b (its k = size / N elements), after finish().
  Tensor slice_of_bucket(size_t b) const;
  // A buffer of the layout's size, for packing parameters' values (ShardedAdamW's all-gathers).
  Tensor& scratch() { return send_; }

 private:
  void absorb(size_t p);       // takes parameter p's gradient into its pairwise stack
  Tensor fold(size_t p);       // p's stack folded: this rank's sum over its micro-batches
  void final_gradient(size_t p);  // at the last micro-batch: fold, then scale or pack for the ranks
  void reduce_ready_buckets();
  void reduce_bucket(size_t b);

  Communicator& comm_;
  std::vector<Var> params_;
  int64_t A_;
  DataParallelOptions options_;
  bool collective_;
  FlatLayout layout_;
  bool sharded_ = false;
  Tensor send_, recv_;  // flat buffers of layout_.size (with collectives only)
  // per parameter: the pairwise stack of this rank's micro-batch sums, (level, tensor) pairs
  struct Entry {
    int level;
    Tensor sum;
  };
  std::vector<std::vector<Entry>> stacks_;
  int64_t micro_ = 0;                  // the micro-batch whose backward runs now
  std::vector<bool> ready_;            // per parameter: final this step (and packed)
  std::vector<size_t> missing_;        // per bucket: parameters not yet final
  size_t next_bucket_ = 0;             // buckets before it are reduced (or queued)
};

// ZeRO-1: AdamW whose moments are cut over the ranks. Rank r keeps the moments of slice r of every
// bucket of the layout, updates those elements of the parameters from the reduced slices
// (DataParallel in sharded mode), then the ranks all-gather the updated weights. The update is
// AdamW's kernel on the same elements with the same scalars, and the gradient norm is summed from
// the same chunks (Note [sum of squares order]), so training gives the bits plain data parallel
// gives, for every number of ranks. Its state reads and writes AdamW's (state_tensors: a
// checkpoint resumes with either, at any number of ranks).
class ShardedAdamW {
 public:
  // groups and config as optim::AdamW's, over dp's parameters (each in one group).
  ShardedAdamW(DataParallel& dp, const std::vector<optim::ParamGroup>& groups, optim::AdamWConfig config);
  ~ShardedAdamW();

  // clip_grad_factor_on_device's norm and factor of the step's whole gradient, from this rank's
  // slices: each rank's chunk sums are all-gathered and summed, the bits of the unsharded norm.
  optim::ClipFactor clip_factor(double max_norm);
  // AdamW's step of this rank's slices (grad_scale as AdamW::step's), then the weights' all-gather.
  void step(const Tensor& grad_scale = Tensor());
  // AdamW::write_schedule and scheduled_step, for a captured step.
  void write_schedule(uint64_t t, size_t n);
  void scheduled_step(size_t slot, const Tensor& grad_scale = Tensor());
  void set_lr(double lr);
  const optim::AdamWConfig& group(size_t i) const;  // group i's hyperparameters, as AdamW::group's
  uint64_t step_count() const;
  void set_step_count(uint64_t t);

  // AdamW's state (optim::AdamW::state_tensors over dp's parameters and the same groups): every
  // rank calls it (the moments are all-gathered); load_state takes it back, checked by AdamW.
  optim::NamedTensors state_tensors();
  void load_state(const optim::NamedTensors& state);

 private:
  void gather_segments(const std::function<Tensor(size_t)>& of_segment,
                       const std::function<void(size_t, const Tensor&)>& take);
  void gather_weights();
  DataParallel& dp_;
  std::vector<optim::ParamGroup> groups_;
  optim::AdamWConfig config_;
  // The slices as parameters of a graph of their own: each a view of part of a model parameter,
  // its gradient a view of the reduced slice; AdamW updates them in place.
  struct Segment {
    size_t param;          // index into dp's parameters
    int64_t begin, size;   // elements of that parameter
    size_t bucket;
    int64_t slice_offset;  // where they sit in the bucket's reduced slice
  };
  std::vector<Segment> segments_;
  std::unique_ptr<Graph> graph_;
  std::vector<Var> segment_vars_;
  std::unique_ptr<optim::AdamW> adamw_;
};

// Every rank's `mine` (each rank the same count), in rank order, on every rank (host doubles).
std::vector<double> gather_doubles(Communicator& comm, const std::vector<double>& mine);
// The mean of x[0 .. n) by the pairwise tree in order (sum_rows_pairwise's), divided by n: the mean
// of the step's M micro-batch losses, the same whatever ranks computed them.
double pairwise_mean(const std::vector<double>& x);

}  // namespace tapegrad::dist
