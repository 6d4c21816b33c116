// The NCCL backend (comm.hpp): CUDA tensors between ranks, each rank on one GPU (or, with NCCL 2.30
// and NCCL_MULTI_RANK_GPU_ENABLE=1, several ranks on one). NCCL is loaded with dlopen when the
// first job starts (Note [NCCL on demand]); its communicator is non-blocking, so that every wait,
// the start-up's included, is polled against the phase's deadline (Note [deadlines] in comm.cpp).
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <nccl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <sstream>
#include <thread>
#include <type_traits>

#include "tapegrad/cuda/cuda.hpp"
#include "tapegrad/dist/backends.hpp"

namespace tapegrad::dist::detail {
namespace {

// Note [NCCL on demand]
// libnccl is large and only a job of several GPU ranks needs it, so it is not linked: it is loaded
// by its soname (libnccl.so.2, found on LD_LIBRARY_PATH or the system's paths; TAPEGRAD_NCCL_LIBRARY
// names another file) when the first NCCL communicator is made. The header is CUDA's (2.28); a
// newer library of the same major version takes the same calls.
struct NcclApi {
  decltype(&ncclGetUniqueId) get_unique_id;
  decltype(&ncclCommInitRankConfig) init_rank_config;
  decltype(&ncclCommGetAsyncError) async_error;
  decltype(&ncclCommAbort) abort;
  decltype(&ncclCommDestroy) destroy;
  decltype(&ncclGroupStart) group_start;
  decltype(&ncclGroupEnd) group_end;
  decltype(&ncclSend) send;
  decltype(&ncclRecv) recv;
  decltype(&ncclAllGather) all_gather;
  decltype(&ncclBroadcast) broadcast;
  decltype(&ncclGetErrorString) error_string;
  decltype(&ncclGetLastError) last_error;
  decltype(&ncclGetVersion) version;
  std::string library;
};

const NcclApi& nccl() {
  static const NcclApi api = [] {
    NcclApi a;
    const char* name = std::getenv("TAPEGRAD_NCCL_LIBRARY");
    a.library = name && *name ? name : "libnccl.so.2";
    void* h = dlopen(a.library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h)
      throw DeviceError("[dist] cannot load " + a.library + " for NCCL (GPU ranks): " + dlerror() +
                        "; put its folder on LD_LIBRARY_PATH or name the file in TAPEGRAD_NCCL_LIBRARY");
    auto sym = [&](auto& slot, const char* s) {
      slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(dlsym(h, s));
      if (!slot) throw DeviceError("[dist] " + a.library + " has no " + s);
    };
    sym(a.get_unique_id, "ncclGetUniqueId");
    sym(a.init_rank_config, "ncclCommInitRankConfig");
    sym(a.async_error, "ncclCommGetAsyncError");
    sym(a.abort, "ncclCommAbort");
    sym(a.destroy, "ncclCommDestroy");
    sym(a.group_start, "ncclGroupStart");
    sym(a.group_end, "ncclGroupEnd");
    sym(a.send, "ncclSend");
    sym(a.recv, "ncclRecv");
    sym(a.all_gather, "ncclAllGather");
    sym(a.broadcast, "ncclBroadcast");
    sym(a.error_string, "ncclGetErrorString");
    sym(a.last_error, "ncclGetLastError");
    sym(a.version, "ncclGetVersion");
    return a;
  }();
  return api;
}

[[noreturn]] void refuse(const std::string& what) { throw Error("[dist] " + what); }

void cuda_check(cudaError_t rc, const char* call) {
  if (rc != cudaSuccess) throw DeviceError(std::string("[dist] ") + call + ": " + cudaGetErrorString(rc));
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Writes `text` to path through a temporary file and a rename, so that a reader sees all or none.
void write_whole(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp" + std::to_string(getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out.flush()) refuse("cannot write " + tmp + ": " + std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) refuse("cannot rename " + tmp + " to " + path + ": " + std::strerror(errno));
}

// Note [rendezvous]
// Ranks started without a launcher (TAPEGRAD_RANK, TAPEGRAD_WORLD_SIZE) meet through a file every
// rank can reach, TAPEGRAD_RENDEZVOUS: rank 0 makes NCCL's unique id and writes it there (it must
// not exist yet: an earlier job's file would hand the other ranks a stale id); the others wait for
// it within the start-up's deadline, and rank 0 removes it once every rank has joined. Beside it,
// each rank keeps <file>.rank<r> up to date with its phase (so a timeout names the ranks that are
// behind), and a rank that ends the job leaves <file>.abort, which the others' waits read.
constexpr const char* kIdHeader = "tapegrad nccl unique id\n";

struct Nccl final : Communicator {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t compute_done = nullptr, comm_done = nullptr, synced = nullptr;
  int index;
  Tensor barrier_bytes;
  std::unique_ptr<Communicator> mpi;  // under mpirun: what passed the unique id (and ends the job)
  std::string rendezvous;

  Nccl(const Placement& place, Device device, double timeout_s)
      : Communicator(place, device, timeout_s), index(device.index), rendezvous(place.rendezvous) {
    (void)cuda::stream(index);  // the device's context (and its current device) exists
    cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    for (cudaEvent_t* e : {&compute_done, &comm_done, &synced})
      cuda_check(cudaEventCreateWithFlags(e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    const NcclApi& api = nccl();
    ncclUniqueId id{};
    if (place.launcher == "mpirun") {
#if TAPEGRAD_WITH_MPI
      mpi = make_mpi(place, timeout_s);
      Tensor bytes = Tensor::zeros(Shape{static_cast<int64_t>(sizeof id)}, DType::u8);
      if (rank() == 0) {
        check(api.get_unique_id(&id), "ncclGetUniqueId");
        std::memcpy(bytes.raw_data(), &id, sizeof id);
      }
      mpi->set_phase("start-up", true);
      mpi->broadcast(bytes, 0);
      std::memcpy(&id, bytes.raw_data(), sizeof id);
#else
      refuse("GPU ranks under mpirun pass NCCL's unique id through MPI, and this tapegrad was built without it; "
             "start them with TAPEGRAD_RANK, TAPEGRAD_WORLD_SIZE and TAPEGRAD_RENDEZVOUS instead");
#endif
    } else if (size() == 1) {
      check(api.get_unique_id(&id), "ncclGetUniqueId");  // a world of one (connect's even_alone)
    } else {
      phase_changed();
      id = meet(api);
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    check(api.init_rank_config(&comm, size(), id, rank(), &config), "ncclCommInitRankConfig");
    barrier_bytes = Tensor::zeros(Shape{size()}, DType::u8, device);
    if (!rendezvous.empty()) {
      do_barrier();  // every rank has the id: the file may go
      if (rank() == 0) std::remove(rendezvous.c_str());
    }
  }

  ~Nccl() override {
    if (comm) {
      // unwinding from an error: the job is being ended, and a peer may never come; else every
      // collective has completed (synchronize), so the communicator can go quietly
      if (std::uncaught_exceptions() > 0) nccl().abort(comm);
      else nccl().destroy(comm);
    }
    for (cudaEvent_t e : {compute_done, comm_done, synced})
      if (e) cudaEventDestroy(e);
    if (stream) cudaStreamDestroy(stream);
    if (progress_fd >= 0) {
      ::close(progress_fd);
      if (std::uncaught_exceptions() == 0) std::remove((rendezvous + ".rank" + std::to_string(rank())).c_str());
    }
  }

  const char* backend() const override { return "nccl"; }

  // Note [rendezvous]: the unique id, made by rank 0 or read from the file.
  ncclUniqueId meet(const NcclApi& api) {
    ncclUniqueId id{};
    if (rank() == 0) {
      check(api.get_unique_id(&id), "ncclGetUniqueId");
      std::remove((rendezvous + ".abort").c_str());
      const int fd = ::open(rendezvous.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
      if (fd < 0)
        refuse(errno == EEXIST ? "the rendezvous file " + rendezvous + " exists: an earlier job's (remove it), or "
                                 "another job's (give each job a path of its own)"
                               : "cannot create the rendezvous file " + rendezvous + ": " + std::strerror(errno));
      ::close(fd);
      write_whole(rendezvous, kIdHeader + std::string(reinterpret_cast<const char*>(&id), sizeof id));
      return id;
    }
    using clock = std::chrono::steady_clock;
    const auto deadline = clock::now() + std::chrono::duration<double>(deadline_seconds());
    for (;;) {
      const std::string text = slurp(rendezvous);
      if (text.size() == std::strlen(kIdHeader) + sizeof id && text.rfind(kIdHeader, 0) == 0) {
        std::memcpy(&id, text.data() + std::strlen(kIdHeader), sizeof id);
        return id;
      }
      if (clock::now() > deadline)
        time_out("rendezvous", 0, "rank 0 never wrote NCCL's unique id to " + rendezvous);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  // Note [rendezvous]: this rank's progress, a fixed-size record rewritten in place ("<collectives
  // started> <phase>"), so a peer that times out can tell who is behind.
  int progress_fd = -1;
  void write_progress() {
    if (rendezvous.empty()) return;
    if (progress_fd < 0)
      progress_fd = ::open((rendezvous + ".rank" + std::to_string(rank())).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (progress_fd < 0) return;  // progress is for messages only
    char record[128];
    std::memset(record, ' ', sizeof record);
    const int n = std::snprintf(record, sizeof record, "%llu %s", static_cast<unsigned long long>(collectives()),
                                phase().c_str());
    if (n > 0 && n < static_cast<int>(sizeof record)) record[n] = ' ';
    record[sizeof record - 1] = '\n';
    (void)!::pwrite(progress_fd, record, sizeof record, 0);
  }
  void phase_changed() override { write_progress(); }
  void collective_started() override { write_progress(); }

  // The ranks that started fewer collectives than this one (from their records), or what NCCL
  // allows us to say.
  std::string behind() const {
    if (rendezvous.empty()) return "a rank is dead or stuck (NCCL does not say which)";
    std::string names;
    for (int r = 0; r < size(); ++r) {
      if (r == rank()) continue;
      const std::string record = slurp(rendezvous + ".rank" + std::to_string(r));
      unsigned long long calls = 0;
      char phase_text[128] = "";
      const int got = std::sscanf(record.c_str(), "%llu %127[^\n]", &calls, phase_text);
      std::string where = got == 2 ? phase_text : "";
      while (!where.empty() && where.back() == ' ') where.pop_back();
      if (got < 1 || calls < collectives())
        names += (names.empty() ? "" : ", ") + std::string("rank ") + std::to_string(r) + " (at " +
                 (got < 1 ? std::string("its start") : where + ", collective " + std::to_string(calls) + " of our " +
                                                           std::to_string(collectives())) + ")";
    }
    return names.empty() ? "every rank started it, but it did not complete" : names + " never reached it";
  }

  // A rank that ended the job left a note (Note [rendezvous]): end this one too, with its code.
  void check_abort_note() const {
    if (rendezvous.empty()) return;
    const std::string note = slurp(rendezvous + ".abort");
    if (note.empty()) return;
    std::fprintf(stderr, "[dist] rank %d: %s", rank(), note.c_str());
    int code = 1;
    std::sscanf(note.c_str(), "rank %*d ended the job with exit code %d", &code);
    std::fflush(stderr);
    std::_Exit(code);
  }

  // Polls NCCL's state until it leaves ncclInProgress (non-blocking calls), within the deadline.
  void check(ncclResult_t rc, const char* call) {
    const NcclApi& api = nccl();
    using clock = std::chrono::steady_clock;
    const auto deadline = clock::now() + std::chrono::duration<double>(deadline_seconds());
    while (rc == ncclInProgress && comm) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      check_abort_note();
      if (api.async_error(comm, &rc) != ncclSuccess) break;
      if (rc == ncclInProgress && clock::now() > deadline) {
        api.abort(comm);
        comm = nullptr;
        time_out(call, 0, behind());
      }
    }
    if (rc != ncclSuccess && rc != ncclInProgress)
      throw Error(std::string("[dist] rank ") + std::to_string(rank()) + ": " + call + " failed in " + phase() + ": " +
                  api.error_string(rc) + " (" + api.last_error(comm) + ")");
  }

  void do_broadcast(Tensor& x, int root) override {
    check(nccl().broadcast(x.raw_data(), x.raw_data(), x.nbytes(), ncclUint8, root, comm, stream), "ncclBroadcast");
  }

  void do_all_gather(const Tensor& in, Tensor& out) override {
    check(nccl().all_gather(in.raw_data(), out.raw_data(), in.nbytes(), ncclUint8, comm, stream), "ncclAllGather");
  }

  void do_all_to_all(const Tensor& in, Tensor& out) override {
    const NcclApi& api = nccl();
    const size_t slice = in.nbytes() / static_cast<size_t>(size());
    const char* i = static_cast<const char*>(in.raw_data());
    char* o = static_cast<char*>(out.raw_data());
    check(api.group_start(), "ncclGroupStart");
    for (int s = 0; s < size(); ++s) {
      check(api.send(i + slice * static_cast<size_t>(s), slice, ncclUint8, s, comm, stream), "ncclSend");
      check(api.recv(o + slice * static_cast<size_t>(s), slice, ncclUint8, s, comm, stream), "ncclRecv");
    }
    check(api.group_end(), "ncclGroupEnd");
  }

  void do_barrier() override {
    Tensor one = barrier_bytes.flat_view(rank(), Shape{1});
    check(nccl().all_gather(one.raw_data(), barrier_bytes.raw_data(), 1, ncclUint8, comm, stream), "ncclAllGather");
    synchronize();
  }

  void after_compute() override {
    cuda_check(cudaEventRecord(compute_done, static_cast<cudaStream_t>(cuda::stream(index))), "cudaEventRecord");
    cuda_check(cudaStreamWaitEvent(stream, compute_done, 0), "cudaStreamWaitEvent");
  }

  void after_comm() override {
    cuda_check(cudaEventRecord(comm_done, stream), "cudaEventRecord");
    cuda_check(cudaStreamWaitEvent(static_cast<cudaStream_t>(cuda::stream(index)), comm_done, 0), "cudaStreamWaitEvent");
  }

  void on_comm_stream(const std::function<void()>& work) override {
    void* compute = cuda::set_stream(index, stream);
    try {
      work();
    } catch (...) {
      cuda::set_stream(index, compute);
      throw;
    }
    cuda::set_stream(index, compute);
  }

  // The queued collectives done, polled: a peer that never comes is a Timeout, not a hang.
  void synchronize() override {
    const NcclApi& api = nccl();
    cuda_check(cudaEventRecord(synced, stream), "cudaEventRecord");
    using clock = std::chrono::steady_clock;
    const auto deadline = clock::now() + std::chrono::duration<double>(deadline_seconds());
    for (int spin = 0;; ++spin) {
      const cudaError_t q = cudaEventQuery(synced);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) cuda_check(q, "cudaEventQuery");
      ncclResult_t state = ncclSuccess;
      if (api.async_error(comm, &state) == ncclSuccess && state != ncclSuccess && state != ncclInProgress)
        check(state, "a collective");
      check_abort_note();
      if (clock::now() > deadline) {
        api.abort(comm);
        comm = nullptr;
        time_out("collectives", 0, behind());
      }
      if (spin > 64) std::this_thread::sleep_for(std::chrono::microseconds(std::min(1000, 10 * (spin - 64))));
    }
  }
};

}  // namespace

std::unique_ptr<Communicator> make_nccl(const Placement& place, Device device, double timeout_s) {
  auto comm = std::make_unique<Nccl>(place, device, timeout_s);
  if (place.launcher == "mpirun") return comm;  // make_mpi set MPI_Abort as the job's end
  const std::string note = place.rendezvous + ".abort";
  const int rank = place.rank;
  set_job_abort([note, rank](int code) {
    FILE* f = std::fopen(note.c_str(), "wx");  // the first rank to end the job writes the note
    if (f) {
      std::fprintf(f, "rank %d ended the job with exit code %d\n", rank, code);
      std::fclose(f);
    }
  });
  return comm;
}

}  // namespace tapegrad::dist::detail
