// The MPI backend (comm.hpp): host tensors between ranks started by mpirun. Every collective is
// point-to-point messages (MPI_Isend / MPI_Irecv) polled against the phase's deadline, so a late
// rank is found and named (Note [deadlines] in comm.cpp), never waited for in a blocking call.
// MPI's C interface only (Open MPI's deprecated C++ bindings stay out)
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <thread>
#include <vector>

#include "tapegrad/dist/backends.hpp"

namespace tapegrad::dist::detail {
namespace {

[[noreturn]] void refuse(const std::string& what) { throw Error("[dist] " + what); }

void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = "";
  int n = 0;
  MPI_Error_string(rc, text, &n);
  refuse(std::string(call) + " failed: " + text);
}

bool g_we_initialised = false;  // MPI_Init_thread was ours, so MPI_Finalize is too

// Messages of at most 1 GiB (MPI counts are ints), as many as a buffer needs.
constexpr size_t kPiece = size_t{1} << 30;

struct Mpi final : Communicator {
  MPI_Comm comm = MPI_COMM_NULL;

  Mpi(const Placement& place, double timeout_s) : Communicator(place, Device::cpu(), timeout_s) {
    // A world of one without mpirun (connect's even_alone) is MPI's singleton start.
    int initialised = 0;
    check(MPI_Initialized(&initialised), "MPI_Initialized");
    if (!initialised) {
      int provided = 0;
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
      g_we_initialised = true;
    }
    check(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup");
    check(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    int r = 0, n = 0;
    check(MPI_Comm_rank(comm, &r), "MPI_Comm_rank");
    check(MPI_Comm_size(comm, &n), "MPI_Comm_size");
    if (r != place.rank || n != place.size)
      refuse("MPI says rank " + std::to_string(r) + " of " + std::to_string(n) + ", the environment rank " +
             std::to_string(place.rank) + " of " + std::to_string(place.size));
  }

  ~Mpi() override {
    // Unwinding from an error: the handler ends the job with abort_job (MPI_Abort), which a
    // finalised MPI could no longer do.
    if (std::uncaught_exceptions() > 0) return;
    MPI_Comm_free(&comm);
    int finalised = 0;
    MPI_Finalized(&finalised);
    if (g_we_initialised && !finalised) MPI_Finalize();
  }

  const char* backend() const override { return "mpi"; }

  // A transfer in flight: its requests and, per request, the peer it waits for.
  struct Pending {
    std::vector<MPI_Request> requests;
    std::vector<int> peers;
    std::vector<bool> receives;
  };

  void post(Pending& p, bool receive, void* data, size_t bytes, int peer) {
    for (size_t at = 0; at < bytes || (bytes == 0 && at == 0); at += kPiece) {
      const int n = static_cast<int>(std::min(kPiece, bytes - at));
      MPI_Request r = MPI_REQUEST_NULL;
      char* d = static_cast<char*>(data) + at;
      check(receive ? MPI_Irecv(d, n, MPI_BYTE, peer, 0, comm, &r) : MPI_Isend(d, n, MPI_BYTE, peer, 0, comm, &r),
            receive ? "MPI_Irecv" : "MPI_Isend");
      p.requests.push_back(r);
      p.peers.push_back(peer);
      p.receives.push_back(receive);
      if (bytes == 0) break;
    }
  }

  // Polls until every request completes, or throws Timeout naming the ranks still awaited.
  void wait(Pending& p, const char* collective, size_t bytes) {
    using clock = std::chrono::steady_clock;
    const auto started = clock::now();
    const auto deadline = started + std::chrono::duration<double>(deadline_seconds());
    std::vector<int> done(p.requests.size());
    for (;;) {
      int count = 0;
      check(MPI_Testsome(static_cast<int>(p.requests.size()), p.requests.data(), &count, done.data(),
                         MPI_STATUSES_IGNORE),
            "MPI_Testsome");
      if (count == MPI_UNDEFINED) return;  // every request is complete (and null)
      if (clock::now() > deadline) {
        std::vector<int> late;
        for (size_t i = 0; i < p.requests.size(); ++i)
          if (p.requests[i] != MPI_REQUEST_NULL && p.receives[i]) late.push_back(p.peers[i]);
        if (late.empty())
          for (size_t i = 0; i < p.requests.size(); ++i)
            if (p.requests[i] != MPI_REQUEST_NULL) late.push_back(p.peers[i]);
        std::sort(late.begin(), late.end());
        late.erase(std::unique(late.begin(), late.end()), late.end());
        std::string names;
        for (int r : late) names += (names.empty() ? "" : ", ") + std::to_string(r);
        time_out(collective, bytes, std::string(late.size() == 1 ? "rank " : "ranks ") + names +
                                        " never reached it (dead, stuck, or somewhere else)");
      }
      // Poll with the core offered to others (a peer on an oversubscribed core) for the first 20 ms,
      // the time a large exchange takes, then every 200 us: a rank that waits long is waiting for
      // a peer's compute, and polls cost it nothing then.
      if (clock::now() - started < std::chrono::milliseconds(20)) std::this_thread::yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  void do_broadcast(Tensor& x, int root) override {
    Pending p;
    if (rank() == root) {
      for (int s = 0; s < size(); ++s)
        if (s != root) post(p, false, x.raw_data(), x.nbytes(), s);
    } else {
      post(p, true, x.raw_data(), x.nbytes(), root);
    }
    wait(p, "broadcast", x.nbytes());
  }

  void do_all_gather(const Tensor& in, Tensor& out) override {
    const size_t slice = in.nbytes();
    char* o = static_cast<char*>(out.raw_data());
    Pending p;
    for (int s = 0; s < size(); ++s)
      if (s != rank()) {
        post(p, true, o + slice * static_cast<size_t>(s), slice, s);
        post(p, false, in.raw_data(), slice, s);
      }
    std::memcpy(o + slice * static_cast<size_t>(rank()), in.raw_data(), slice);
    wait(p, "all-gather", slice * static_cast<size_t>(size()));
  }

  void do_all_to_all(const Tensor& in, Tensor& out) override {
    const size_t slice = in.nbytes() / static_cast<size_t>(size());
    const char* i = static_cast<const char*>(in.raw_data());
    char* o = static_cast<char*>(out.raw_data());
    Pending p;
    for (int s = 0; s < size(); ++s)
      if (s != rank()) {
        post(p, true, o + slice * static_cast<size_t>(s), slice, s);
        post(p, false, const_cast<char*>(i) + slice * static_cast<size_t>(s), slice, s);
      }
    std::memcpy(o + slice * static_cast<size_t>(rank()), i + slice * static_cast<size_t>(rank()), slice);
    wait(p, "all-to-all", in.nbytes());
  }

  // Everyone tells rank 0, which answers when all have: a late rank is named by rank 0.
  void do_barrier() override {
    Pending in;
    char token = 0;
    if (rank() == 0) {
      std::vector<char> tokens(static_cast<size_t>(size()));
      for (int s = 1; s < size(); ++s) post(in, true, &tokens[static_cast<size_t>(s)], 1, s);
      wait(in, "barrier", 0);
      Pending out;
      for (int s = 1; s < size(); ++s) post(out, false, &token, 1, s);
      wait(out, "barrier", 0);
    } else {
      post(in, false, &token, 1, 0);
      post(in, true, &token, 1, 0);
      wait(in, "barrier", 0);
    }
  }

};

}  // namespace

std::unique_ptr<Communicator> make_mpi(const Placement& place, double timeout_s) {
  auto comm = std::make_unique<Mpi>(place, timeout_s);
  set_job_abort([](int code) {
    int initialised = 0, finalised = 0;
    MPI_Initialized(&initialised);
    MPI_Finalized(&finalised);
    if (initialised && !finalised) MPI_Abort(MPI_COMM_WORLD, code);
  });
  return comm;
}

}  // namespace tapegrad::dist::detail
