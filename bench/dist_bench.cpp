// dist_bench: the communicator's ordered all-reduce (Note [ordered reduction] in src/dist/comm.cpp:
// an all-to-all, the pairwise sums, an all-gather) against MPI_Allreduce, f32, 1 to 64 MiB, on the
// ranks of one job; rank 0 prints the medians and their ratio (docs/distributed.md).
//
//   mpirun -np 2 build/bench/dist_bench [REPEATS]
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "tapegrad/dist/comm.hpp"
#include "tapegrad/tensor/parallel.hpp"

using namespace tapegrad;

namespace {

template <class F>
double median_ms(int repeats, F&& f) {
  std::vector<double> ms;
  for (int i = 0; i < repeats + 2; ++i) {  // two warm-ups
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = std::chrono::steady_clock::now();
    f();
    const double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (i >= 2) ms.push_back(t);
  }
  std::nth_element(ms.begin(), ms.begin() + static_cast<std::ptrdiff_t>(ms.size() / 2), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 21;
  std::unique_ptr<dist::Communicator> comm = dist::connect(Device::cpu(), true);  // MPI_Init
  comm->set_phase("the benchmark");
  if (comm->rank() == 0)
    std::printf("dist_bench: %d ranks (%s), f32, median of %d, %d threads a rank\n\n"
                "| MiB | ordered all-reduce ms | MPI_Allreduce ms | ratio | ordered GB/s (bus) |\n"
                "|---|---|---|---|---|\n",
                comm->size(), comm->backend(), repeats, num_threads());
  for (int mib = 1; mib <= 64; mib *= 2) {
    const int64_t n = int64_t{mib} << 18;
    Tensor x = Tensor::from_doubles(std::vector<double>(static_cast<size_t>(n), 1.0 + comm->rank()), Shape{n}, DType::f32);
    std::vector<float> y(static_cast<size_t>(n), 1.0f);
    const double ordered = median_ms(repeats, [&] { comm->all_reduce(x); });
    const double native = median_ms(repeats, [&] {
      MPI_Allreduce(MPI_IN_PLACE, y.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    });
    // bus bandwidth: each rank moves 2 (N - 1) / N of the bytes, the convention of nccl-tests
    const double bus = 2.0 * (comm->size() - 1) / comm->size() * static_cast<double>(n * 4) / (ordered * 1e6);
    if (comm->rank() == 0) std::printf("| %d | %.3f | %.3f | %.2f | %.2f |\n", mib, ordered, native, ordered / native, bus);
  }
  return 0;
}
