// CUDA graphs: tapegrad::capture() on a CUDA device (tensor/backend.hpp). A body's kernels, copies
// and fills are recorded from the device's stream into one graph, which replay() launches at once.
//
// Note [graph capture]
// A training step issues a few dozen small kernels; launched one by one, each costs the host a
// launch call and the device a gap, which for small tensors is most of the step. Recording them
// once and replaying them with cudaGraphLaunch leaves only the kernels. What that asks of a body:
// - Host code runs once. capture() calls body() with the stream in capture mode: the tape is
//   recorded, kernel arguments are computed and kernels are queued, but nothing runs. Whatever
//   must differ between replays is read by kernels from device memory (AdamW's step scalars).
// - No waiting. A copy to the host, item() or synchronize() needs the device's results, which do
//   not exist yet; finish_and_check() refuses them during a capture with a message saying so.
// - Stable addresses. Replays reuse the captured pointers, so the allocator serves the capture from
//   a pool reserved for the graph (Note [graph pools] in memory.cu).
// - Errors. Kernels that may record an error (an index out of range) still do, when replayed; a
//   replay marks the context so that the next synchronization reads the error slot.
// The capture mode is relaxed, so the pool's cudaMalloc calls are allowed while capturing; all
// tapegrad work of the device is on the captured stream, so none of it escapes the graph.
#include "tapegrad/cuda/common.cuh"

namespace tapegrad::cuda {

namespace {

class CudaGraph final : public CapturedGraph {
 public:
  CudaGraph(DeviceContext& ctx, std::unique_ptr<GraphPool> pool) : ctx_(ctx), pool_(std::move(pool)) {}
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  ~CudaGraph() override {
    // Replays still queued use the graph and its blocks: let them finish first. No throwing here.
    (void)cudaSetDevice(ctx_.index);
    (void)cudaStreamSynchronize(ctx_.stream);
    if (exec_) (void)cudaGraphExecDestroy(exec_);
    (void)cudaGetLastError();
    ctx_.allocator.retire_pool(pool_.get());
  }

  void replay() override {
    context(ctx_.index);  // makes the device current for this thread
    TG_CUDA_CHECK(cudaGraphLaunch(exec_, ctx_.stream));
    if (errors_possible_) ctx_.errors_possible = true;
  }

  size_t nodes() const override { return nodes_; }
  GraphPool* pool() const { return pool_.get(); }

  cudaGraphExec_t exec_ = nullptr;
  size_t nodes_ = 0;
  bool errors_possible_ = false;  // a captured launch may record a kernel error

 private:
  DeviceContext& ctx_;
  std::unique_ptr<GraphPool> pool_;
};

// Ends a capture that failed, leaving the stream usable; never throws.
void abandon_capture(DeviceContext& ctx) noexcept {
  cudaGraph_t graph = nullptr;
  (void)cudaStreamEndCapture(ctx.stream, &graph);
  if (graph) (void)cudaGraphDestroy(graph);
  (void)cudaGetLastError();
}

}  // namespace

std::unique_ptr<CapturedGraph> capture_graph(DeviceContext& ctx, const std::function<void()>& body) {
  if (ctx.capturing)
    throw Error("[capture] cuda:" + std::to_string(ctx.index) + " is already capturing; captures do not nest");
  auto graph = std::make_unique<CudaGraph>(ctx, std::make_unique<GraphPool>());
  GraphPool* pool = graph->pool();
  const bool errors_before = ctx.errors_possible;
  ctx.errors_possible = false;
  TG_CUDA_CHECK(cudaStreamBeginCapture(ctx.stream, cudaStreamCaptureModeRelaxed));
  ctx.capturing = true;
  ctx.allocator.begin_pool(pool);
  cudaGraph_t recorded = nullptr;
  try {
    body();
    ctx.capturing = false;
    ctx.allocator.end_pool();
    TG_CUDA_CHECK(cudaStreamEndCapture(ctx.stream, &recorded));
  } catch (...) {
    if (ctx.capturing) {
      ctx.capturing = false;
      ctx.allocator.end_pool();
      abandon_capture(ctx);
    }
    ctx.errors_possible = errors_before;
    throw;  // the graph's destructor retires the pool
  }
  graph->errors_possible_ = ctx.errors_possible;
  ctx.errors_possible = errors_before;
  try {
    TG_CUDA_CHECK(cudaGraphGetNodes(recorded, nullptr, &graph->nodes_));
    TG_CUDA_CHECK(cudaGraphInstantiate(&graph->exec_, recorded, 0));
  } catch (...) {
    (void)cudaGraphDestroy(recorded);
    throw;
  }
  TG_CUDA_CHECK(cudaGraphDestroy(recorded));
  return graph;
}

}  // namespace tapegrad::cuda
