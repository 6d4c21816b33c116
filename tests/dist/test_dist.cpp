// src/dist: the communicator's collectives against sums computed here, for every dtype and odd
// sizes; data parallel over N ranks against one process running the same M = N A micro-batches,
// bit for bit; ZeRO-1 against plain AdamW; the parameters' hash check; placement and refusals.
//
// One binary for every world: run alone it is a world of one; under `mpirun -np N` (meson runs it
// at 2, 3 and 4 ranks) every rank runs the same tests, which call the collectives in the same order.
// TAPEGRAD_TEST_DEVICE=cuda moves the tensors to cuda:<local rank> (NCCL: scripts/gpu_check.sh),
// and TAPEGRAD_TEST_BACKEND=1 makes a world of one go through its backend (MPI or NCCL) anyway.
// A check that fails on one rank fails that rank's exit status, so mpirun's; tests never REQUIRE
// inside collectives, so the ranks never fall out of step.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>

#include "messages.hpp"
#include "needs.hpp"
#include "tapegrad/config.hpp"
#if TAPEGRAD_WITH_CUDA
#include "tapegrad/cuda/cuda.hpp"
#endif
#include "tapegrad/dist/comm.hpp"
#include "tapegrad/dist/data_parallel.hpp"
#include "tapegrad/ops/ops.hpp"
#include "tapegrad/optim/param_group.hpp"

using namespace tapegrad;
using tapegrad::testing::message_of;

namespace {

dist::Communicator* g_comm = nullptr;
dist::Communicator& comm() { return *g_comm; }
Device device() { return comm().device(); }

// Rank r's tensor: n values that differ by rank and element, in `dtype`, on the communicator's device.
Tensor input_of(int r, int64_t n, DType dtype) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const double x = std::sin(0.7 * static_cast<double>(i) + 1.3 * r) * 37.0 + r;
    v[static_cast<size_t>(i)] = dtype == DType::u8 ? static_cast<double>((i * 7 + r * 31) % 251) : x;
  }
  return Tensor::from_doubles(v, Shape{n}, dtype, device());
}

// The bytes of a tensor, on the host.
std::vector<unsigned char> bytes_of(const Tensor& t) {
  const Tensor h = t.to(Device::cpu());
  const auto* p = static_cast<const unsigned char*>(h.raw_data());
  return std::vector<unsigned char>(p, p + h.nbytes());
}

const DType kAll[] = {DType::f64, DType::f32, DType::bf16, DType::f16, DType::i32, DType::i64, DType::u8};
const DType kSums[] = {DType::f64, DType::f32, DType::bf16};

}  // namespace

TEST_CASE("broadcast, all-gather and all-to-all move every dtype's bytes, at odd sizes") {
  const int N = comm().size(), r = comm().rank();
  for (DType dtype : kAll)
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1001}}) {
      const std::string dtype_text = dtype_name(dtype);
      CAPTURE(dtype_text);
      CAPTURE(n);
      Tensor x = input_of(r, n, dtype);
      comm().broadcast(x, N - 1);
      CHECK(bytes_of(x) == bytes_of(input_of(N - 1, n, dtype)));

      const Tensor mine = input_of(r, n, dtype);
      Tensor all = Tensor::empty(Shape{N * n}, dtype, device());
      comm().all_gather(mine, all);
      for (int s = 0; s < N; ++s) CHECK(bytes_of(all.flat_view(s * n, Shape{n})) == bytes_of(input_of(s, n, dtype)));

      const Tensor out_of_r = input_of(r, N * n, dtype);  // slice s goes to rank s
      Tensor got = Tensor::empty(Shape{N * n}, dtype, device());
      comm().all_to_all(out_of_r, got);
      for (int s = 0; s < N; ++s)
        CHECK(bytes_of(got.flat_view(s * n, Shape{n})) == bytes_of(input_of(s, N * n, dtype).flat_view(r * n, Shape{n})));
    }
  comm().barrier();
}

TEST_CASE("all-reduce and reduce-scatter: the pairwise sum in rank order, bit for bit, near a serial sum") {
  const int N = comm().size(), r = comm().rank();
  for (DType dtype : kSums)
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1001}, int64_t{65537}}) {
      const std::string dtype_text = dtype_name(dtype);
      CAPTURE(dtype_text);
      CAPTURE(n);
      // every rank's input made here, summed by the tree on the CPU (and serially, in double)
      Tensor rows = Tensor::empty(Shape{N * n}, dtype);
      std::vector<double> serial(static_cast<size_t>(n), 0.0), magnitude(static_cast<size_t>(n), 0.0);
      for (int s = 0; s < N; ++s) {
        const Tensor in = input_of(s, n, dtype).to(Device::cpu());
        rows.flat_view(s * n, Shape{n}).copy_from(in);
        const std::vector<double> v = in.to_doubles();
        for (int64_t i = 0; i < n; ++i) {
          serial[static_cast<size_t>(i)] += v[static_cast<size_t>(i)];
          magnitude[static_cast<size_t>(i)] += std::abs(v[static_cast<size_t>(i)]);
        }
      }
      dist::sum_rows_pairwise(rows, N);
      const Tensor want = rows.flat_view(0, Shape{n});

      Tensor x = input_of(r, n, dtype);
      comm().all_reduce(x);
      CHECK(bytes_of(x) == bytes_of(want));
      // each of the N - 1 additions rounds once: within (N - 1) half-ulps of the inputs' magnitude
      const double ulp = dtype == DType::bf16 ? 0x1p-8 : dtype == DType::f32 ? 0x1p-24 : 0x1p-53;
      const std::vector<double> got = x.to_doubles();
      double worst = 0;
      for (int64_t i = 0; i < n; ++i)
        worst = std::max(worst, std::abs(got[static_cast<size_t>(i)] - serial[static_cast<size_t>(i)]) /
                                    magnitude[static_cast<size_t>(i)]);
      CHECK(worst <= (N - 1) * ulp);

      // reduce-scatter of N slices of n: this rank's slice of the ordered sum of the (N n) inputs
      Tensor whole = Tensor::empty(Shape{N * N * n}, dtype);
      for (int s = 0; s < N; ++s) whole.flat_view(s * N * n, Shape{N * n}).copy_from(input_of(s, N * n, dtype).to(Device::cpu()));
      dist::sum_rows_pairwise(whole, N);
      Tensor slice = Tensor::empty(Shape{n}, dtype, device());
      comm().reduce_scatter(input_of(r, N * n, dtype), slice);
      CHECK(bytes_of(slice) == bytes_of(whole.flat_view(r * n, Shape{n})));
    }
}

TEST_CASE("sum_rows_pairwise is the tree (r0 + r1) + (r2 + r3), then + r4") {
  Tensor x = Tensor::from_doubles({1e16, 1, -1e16, 1, 3}, Shape{5}, DType::f64);
  dist::sum_rows_pairwise(x, 5);
  CHECK(x.to_doubles()[0] == ((1e16 + 1.0) + (-1e16 + 1.0)) + 3.0);
  CHECK(dist::pairwise_mean({1e16, 1, -1e16, 1}) == ((1e16 + 1.0) + (-1e16 + 1.0)) / 4);
  CHECK(message_of([&] { dist::sum_rows_pairwise(x, 2); }) == "[dist] sum_rows_pairwise of 5 elements in 2 rows");
}

TEST_CASE("the collectives refuse what they cannot take, on every rank alike, naming the collective") {
  const int N = comm().size();
  Tensor a = Tensor::zeros(Shape{3}, DType::f32, device());
  Tensor wrong = Tensor::zeros(Shape{3 * N + 1}, DType::f32, device());
  CHECK(message_of([&] { comm().all_gather(a, wrong); }) ==
        "[dist] all-gather of 3 elements a rank into " + std::to_string(3 * N + 1) + ": " + std::to_string(N) +
            " ranks need " + std::to_string(3 * N));
  Tensor f64 = Tensor::zeros(Shape{3 * N}, DType::f64, device());
  CHECK(message_of([&] { comm().all_gather(a, f64); }) == "[dist] all-gather from a f32 tensor into a f64 one");
  Tensor ids = Tensor::zeros(Shape{4}, DType::i32, device());
  CHECK(message_of([&] { comm().all_reduce(ids); }) ==
        "[dist] all-reduce of a i32 tensor: its sums take f64, f32 and bf16 (the other collectives move any dtype)");
  Tensor undefined;
  CHECK(message_of([&] { comm().broadcast(undefined); }) == "[dist] broadcast of an undefined tensor");
  CHECK(message_of([&] { comm().broadcast(a, N); }) ==
        "[dist] broadcast from rank " + std::to_string(N) + " of " + std::to_string(N));
  if (N > 1) {
    Tensor odd = Tensor::zeros(Shape{N + 1}, DType::f32, device());
    Tensor out = Tensor::zeros(Shape{N + 1}, DType::f32, device());
    CHECK(message_of([&] { comm().all_to_all(odd, out); }) ==
          "[dist] all-to-all of " + std::to_string(N + 1) + " elements: a multiple of the " + std::to_string(N) +
              " ranks is needed (one equal slice each)");
  }
  if (device().is_cuda()) {
    Tensor host = Tensor::zeros(Shape{2}, DType::f32);
    CHECK(message_of([&] { comm().broadcast(host); }) ==
          std::string("[dist] broadcast of a tensor on cpu, but this ") + comm().backend() +
              " communicator moves tensors on " + device().str());
  }
}

namespace {

// A small model for data parallel: y = x W^T + b over micro-batch m's rows (a function of m
// alone), loss the mean of (y - t)^2. W is (300, 50): several chunks of the norm, and, with small
// buckets, several buckets.
struct Tiny {
  Graph g;
  Var w, b;
  explicit Tiny(DType dtype) {
    std::vector<double> wv(300 * 50), bv(300);
    for (size_t i = 0; i < wv.size(); ++i) wv[i] = std::sin(0.37 * static_cast<double>(i)) * 0.1;
    for (size_t i = 0; i < bv.size(); ++i) bv[i] = std::cos(0.11 * static_cast<double>(i)) * 0.1;
    w = g.parameter(Tensor::from_doubles(wv, Shape{300, 50}, dtype, device()), "w");
    b = g.parameter(Tensor::from_doubles(bv, Shape{300}, dtype, device()), "b");
  }
  // the loss of micro-batches m .. m + count - 1 as one batch of 4 count rows (count 1: micro-batch m)
  Var loss(int64_t m, int64_t count = 1) {
    std::vector<double> xv, tv;
    for (int64_t k = m; k < m + count; ++k) {
      for (int i = 0; i < 4 * 50; ++i) xv.push_back(std::sin(1.7 * i + 0.9 * static_cast<double>(k)));
      for (int i = 0; i < 4 * 300; ++i) tv.push_back(std::cos(0.3 * i * static_cast<double>(k + 1)));
    }
    Var x = g.input(Tensor::from_doubles(xv, Shape{4 * count, 50}, w.dtype(), device()));
    Var t = g.input(Tensor::from_doubles(tv, Shape{4 * count, 300}, w.dtype(), device()));
    Var d = ops::sub(ops::linear(x, w, b), t);
    return ops::mean(ops::mul(d, d));
  }
  // One step of dp over its rank's micro-batches: every parameter's gradient is then the step's.
  void step_of(dist::DataParallel& dp) {
    for (int64_t j = 0; j < dp.micro_batches(); ++j) {
      g.clear();
      g.zero_grad();
      g.backward(loss(dp.first_micro_batch() + j), dp.backward_options(j));
    }
    dp.finish();
    dp.wait();
  }
};

std::vector<optim::ParamGroup> groups_of(Tiny& t) { return {{{t.w}, {.weight_decay = 0.1}}, {{t.b}, {.weight_decay = 0.0}}}; }

}  // namespace

TEST_CASE("data parallel: N ranks of A micro-batches give one process's N A, bit for bit; ZeRO-1 gives AdamW's") {
  const int N = comm().size();
  auto alone = dist::single(device());
  // AdamW's CUDA kernel is f32's alone ([adamw] no CUDA kernel for f64): f64 on the CPU
  std::vector<DType> dtypes{DType::f32};
  if (device().type == DeviceType::cpu) dtypes.push_back(DType::f64);
  else MESSAGE("f32 alone on CUDA: AdamW's CUDA kernel takes f32");
  for (DType dtype : dtypes)
    for (int64_t A : {int64_t{1}, int64_t{2}}) {
      const std::string dtype_text = dtype_name(dtype);
      CAPTURE(dtype_text);
      CAPTURE(A);
      // small buckets: b, then w; a world of one exchanges all the same (the path of several ranks)
      const dist::DataParallelOptions small_buckets{.micro_batches = A, .bucket_bytes = 1 << 10, .exchange_alone = true};
      // one process, all M micro-batches
      Tiny ref(dtype);
      dist::DataParallel one(*alone, {ref.w, ref.b}, {.micro_batches = N * A});
      optim::AdamW ref_adamw(groups_of(ref), {.lr = 0.01});
      // this rank's A, plain data parallel and ZeRO-1
      Tiny plain(dtype), sharded(dtype);
      dist::DataParallel dp(comm(), {plain.w, plain.b}, small_buckets);
      dist::DataParallel dz(comm(), {sharded.w, sharded.b}, small_buckets);
      CHECK(dp.layout().buckets.size() > 1);
      optim::AdamW adamw(groups_of(plain), {.lr = 0.01});
      std::optional<dist::ShardedAdamW> zero;
      zero.emplace(dz, groups_of(sharded), optim::AdamWConfig{.lr = 0.01});
      for (int s = 0; s < 3; ++s) {
        ref.step_of(one);
        plain.step_of(dp);
        CHECK(bytes_of(plain.w.grad()) == bytes_of(ref.w.grad()));
        CHECK(bytes_of(plain.b.grad()) == bytes_of(ref.b.grad()));
        const optim::ClipFactor clip_ref = optim::clip_grad_factor_on_device({ref.w, ref.b}, 1e-3);
        ref_adamw.step(clip_ref.factor);
        adamw.step(optim::clip_grad_factor_on_device({plain.w, plain.b}, 1e-3).factor);
        CHECK(bytes_of(plain.w.value()) == bytes_of(ref.w.value()));
        if (zero) {
          sharded.step_of(dz);
          const optim::ClipFactor clip = zero->clip_factor(1e-3);
          CHECK(bytes_of(clip.norm) == bytes_of(clip_ref.norm));  // the same chunks' sums
          zero->step(clip.factor);
          CHECK(bytes_of(sharded.w.value()) == bytes_of(ref.w.value()));
          CHECK(bytes_of(sharded.b.value()) == bytes_of(ref.b.value()));
        }
      }
      if (zero) {  // AdamW's state, gathered: the same names and bytes
        const optim::NamedTensors want = ref_adamw.state_tensors(), got = zero->state_tensors();
        REQUIRE(got.size() == want.size());
        for (size_t i = 0; i < got.size(); ++i) {
          CHECK(got[i].first == want[i].first);
          CHECK(bytes_of(got[i].second) == bytes_of(want[i].second));
        }
        // and back into a fresh ZeRO-1 optimizer, which then steps as AdamW does
        Tiny again(dtype);
        dist::DataParallel da(comm(), {again.w, again.b}, small_buckets);
        dist::ShardedAdamW loaded(da, groups_of(again), {.lr = 0.01});
        loaded.load_state(want);
        Tensor w = again.w.value(), bb = again.b.value();
        w.copy_from(ref.w.value());
        bb.copy_from(ref.b.value());
        ref.step_of(one);
        ref_adamw.step();
        again.step_of(da);
        loaded.step();
        CHECK(bytes_of(again.w.value()) == bytes_of(ref.w.value()));
      }
    }
}

TEST_CASE("one batch of M micro-batches' rows in one backward: not the same bits, within rounding") {
  // The M micro-batches of a step concatenated into one batch of 4 M rows: the same mean loss in
  // exact arithmetic, but the products sum over the batch in their own order (docs/distributed.md
  // quotes the gap this prints).
  const int64_t M = 8;
  for (DType dtype : {DType::f32, DType::f64}) {
    Tiny parts(dtype), whole(dtype);
    auto alone = dist::single(device());
    dist::DataParallel dp(*alone, {parts.w, parts.b}, {.micro_batches = M});
    parts.step_of(dp);
    whole.g.clear();
    whole.g.zero_grad();
    whole.g.backward(whole.loss(0, M));  // one batch of the M micro-batches' rows
    double worst = 0;
    for (const auto& [a, b] : {std::pair{parts.w, whole.w}, std::pair{parts.b, whole.b}}) {
      const std::vector<double> x = a.grad().to_doubles(), y = b.grad().to_doubles();
      double scale = 0;
      for (double v : y) scale = std::max(scale, std::abs(v));
      for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]) / scale);
    }
    MESSAGE(std::string(dtype_name(dtype)) << ": one backward over " << M << " micro-batches' rows against their ordered sum: "
                               << "largest gradient difference " << worst << " of the largest element");
    CHECK(worst < (dtype == DType::f32 ? 1e-5 : 1e-13));
  }
}

TEST_CASE("check_parameters_agree stops every rank, naming the first rank and parameter that differ") {
  const int N = comm().size();
  Tiny t(DType::f32);
  dist::DataParallel dp(comm(), {t.w, t.b});
  dp.broadcast_parameters();  // agreed
  if (N == 1) return;
  if (comm().rank() == N - 1) {
    Tensor b = t.b.value();
    b.copy_from(Tensor::zeros(Shape{300}, DType::f32, device()));
  }
  CHECK(message_of([&] { dp.check_parameters_agree("in a test"); }) ==
        "[dist] rank " + std::to_string(N - 1) + "'s parameters differ from rank 0's in a test: 'b' first");
}

TEST_CASE("FlatLayout: parameters in reverse order at chunk-aligned offsets, buckets of whole slices") {
  Tiny t(DType::f32);
  const dist::FlatLayout layout({t.w, t.b}, 3, 1 << 10);
  CHECK(layout.offset[1] == 0);  // b first: a backward finishes it first; its 1200 bytes close a bucket
  REQUIRE(layout.buckets.size() == 2);
  CHECK(layout.buckets[0].size == 3 * 4096);  // padded to 3 slices of one chunk
  CHECK(layout.offset[0] == 3 * 4096);
  CHECK(layout.buckets[1].size == 6 * 4096);  // w's 15000 elements: 3 slices of 2 chunks
  CHECK(layout.size == 9 * 4096);
  CHECK((layout.bucket_of[0] == 1 && layout.bucket_of[1] == 0));
}

TEST_CASE("placement: mpirun's variables, then TAPEGRAD_RANK's, refused by name when wrong") {
  // this process's own variables are put back afterwards (under mpirun the tests run in a job)
  const char* names[] = {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                         "OMPI_COMM_WORLD_LOCAL_SIZE", "TAPEGRAD_RANK", "TAPEGRAD_WORLD_SIZE", "TAPEGRAD_LOCAL_RANK",
                         "TAPEGRAD_RENDEZVOUS", "TAPEGRAD_DIST_TIMEOUT"};
  std::map<std::string, std::string> kept;
  for (const char* n : names)
    if (const char* v = std::getenv(n)) kept[n] = v;
  for (const char* n : names) unsetenv(n);
  CHECK(dist::placement_from_environment().launcher == "none");
  CHECK(dist::placement_from_environment().size == 1);
  CHECK(dist::timeout_from_environment() == 300.0);
  setenv("TAPEGRAD_RANK", "1", 1);
  setenv("TAPEGRAD_WORLD_SIZE", "2", 1);
  CHECK(message_of([] { dist::placement_from_environment(); }) ==
        "[dist] TAPEGRAD_WORLD_SIZE=2 without TAPEGRAD_RENDEZVOUS: the ranks meet through a file they can all reach "
        "(a path on a shared filesystem), or start them with mpirun");
  setenv("TAPEGRAD_RENDEZVOUS", "/tmp/x", 1);
  const dist::Placement p = dist::placement_from_environment();
  CHECK((p.launcher == "env" && p.rank == 1 && p.size == 2 && p.local_rank == 1 && p.rendezvous == "/tmp/x"));
  setenv("TAPEGRAD_RANK", "2", 1);
  CHECK(message_of([] { dist::placement_from_environment(); }) == "[dist] TAPEGRAD_RANK='2' is not an integer from 0 to 1");
  CHECK(message_of([] { (void)dist::connect(Device::cpu()); }) == "[dist] TAPEGRAD_RANK='2' is not an integer from 0 to 1");
  setenv("TAPEGRAD_RANK", "1", 1);
  CHECK(message_of([] { (void)dist::connect(Device::cpu()); }) ==
        "[dist] a job of 2 ranks (env) on the CPU: CPU ranks meet through MPI, so start them with mpirun "
        "(TAPEGRAD_RANK and a rendezvous file serve GPU ranks, which meet through NCCL)");
  unsetenv("TAPEGRAD_WORLD_SIZE");
  CHECK(message_of([] { dist::placement_from_environment(); }) ==
        "[dist] a rank started without a launcher needs TAPEGRAD_RANK and TAPEGRAD_WORLD_SIZE (and "
        "TAPEGRAD_RENDEZVOUS when there are several)");
  unsetenv("TAPEGRAD_RANK");
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  setenv("OMPI_COMM_WORLD_RANK", "3", 1);
  const dist::Placement q = dist::placement_from_environment();
  CHECK((q.launcher == "mpirun" && q.rank == 3 && q.size == 4 && q.local_size == 4));
  setenv("TAPEGRAD_DIST_TIMEOUT", "0", 1);
  CHECK(message_of([] { dist::timeout_from_environment(); }) ==
        "[dist] TAPEGRAD_DIST_TIMEOUT='0' is not a number of seconds (positive, at most 1e7)");
  setenv("TAPEGRAD_DIST_TIMEOUT", "2.5", 1);
  CHECK(dist::timeout_from_environment() == 2.5);
  for (const char* n : names) unsetenv(n);
  for (const auto& [n, v] : kept) setenv(n.c_str(), v.c_str(), 1);
}

TEST_CASE("[gpu] a captured all-reduce replays: every replay sums what the ranks hold then") {
  const int N = comm().size(), r = comm().rank();
  Tensor x = Tensor::zeros(Shape{1001}, DType::f32, device());
  auto graph = capture(device(), [&] { comm().all_reduce(x); });
  for (int round = 1; round <= 3; ++round) {
    std::vector<double> v(1001);
    for (size_t i = 0; i < v.size(); ++i) v[i] = round * 100.0 + r + static_cast<double>(i);
    x.copy_from(Tensor::from_doubles(v, Shape{1001}, DType::f32));
    graph->replay();
    comm().synchronize();
    const std::vector<double> got = x.to_doubles();
    double want0 = 0;
    for (int s = 0; s < N; ++s) want0 += round * 100.0 + s;
    CHECK(got[0] == want0);
    CHECK(got[1000] == want0 + 1000.0 * N);
  }
}

int main(int argc, char** argv) {
  using namespace tapegrad::testing;
  const char* on = std::getenv("TAPEGRAD_TEST_DEVICE");
  const bool cuda_wanted = on && std::string(on) == "cuda";
  Need gpu{"gpu", false, "the [gpu] tests run with TAPEGRAD_TEST_DEVICE=cuda (scripts/gpu_check.sh)"};
  Device d = Device::cpu();
#if TAPEGRAD_WITH_CUDA
  if (cuda_wanted && cuda::device_count() > 0) {
    d = Device::cuda(dist::placement_from_environment().local_rank % cuda::device_count());
    gpu.available = true;
  } else if (cuda_wanted) {
    gpu.reason = "no CUDA device: " + cuda::no_device_reason();
  }
#endif
  if (cuda_wanted && !gpu.available) {
    std::printf("test_dist: SKIP: TAPEGRAD_TEST_DEVICE=cuda, but %s\n", gpu.reason.c_str());
    return 77;
  }
  const char* backend = std::getenv("TAPEGRAD_TEST_BACKEND");
  std::unique_ptr<dist::Communicator> c;
  try {
    c = dist::connect(d, backend && std::string(backend) == "1");
  } catch (const Error& e) {
    std::printf("test_dist: cannot join the job: %s\n", e.what());
    return 1;
  }
  g_comm = c.get();
  c->set_phase("the tests");
  std::printf("test_dist: rank %d of %d (%s) on %s\n", c->rank(), c->size(), c->backend(), d.str().c_str());
  const int rc = run_tests(argc, argv, "test_dist", {gpu});
  c->synchronize();
  return rc;
}
