// dist: ranks that train one model together. A Communicator joins this process to the job's other
// ranks and moves tensors between them; data_parallel.hpp builds data-parallel training on it.
//
//   auto comm = dist::connect(device);   // under mpirun, from TAPEGRAD_RANK..., or a world of one
//   comm->set_phase("step 12");          // what messages and deadlines name
//   comm->all_reduce(x);                 // x = the sum of every rank's x, the same bits on all
//
// Rules:
// - A layer above optim and nn: the engine knows nothing of it.
// - Every rank calls the same collectives in the same order, with tensors of the same dtype and
//   size, on the communicator's device (host tensors through MPI, CUDA tensors through NCCL).
// - Sums are ordered (Note [ordered reduction] in comm.cpp): all_reduce and reduce_scatter add the
//   ranks' tensors by a pairwise tree in rank order, element by element, so their bits depend on
//   the ranks' inputs alone, never on the transport, the timing or the device.
// - No silent hang (Note [deadlines] in comm.cpp): a collective that waits longer than its deadline
//   (TAPEGRAD_DIST_TIMEOUT seconds, default 300; four times that for start-up and checkpoints)
//   throws dist::Timeout naming the rank, the collective and the phase; abort_job() then ends every
//   rank (exit code 124 for a timeout).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "tapegrad/tensor/tensor.hpp"

namespace tapegrad::dist {

// A collective that did not complete in time; what() names the rank, the collective, the phase
// and, where it can tell, the ranks it waited for.
struct Timeout : Error {
  using Error::Error;
};

// Where this process stands in the job, from the environment:
// - under Open MPI's mpirun: OMPI_COMM_WORLD_RANK, _SIZE and _LOCAL_RANK (launcher "mpirun");
// - else TAPEGRAD_RANK, TAPEGRAD_WORLD_SIZE and TAPEGRAD_LOCAL_RANK (launcher "env"), with
//   TAPEGRAD_RENDEZVOUS naming a file on a filesystem every rank sees, through which the ranks
//   meet (Note [rendezvous] in nccl_comm.cpp);
// - else a world of one (launcher "none").
// Every value is checked (an integer, rank < size, ...) and refused naming the variable.
struct Placement {
  int rank = 0, size = 1, local_rank = 0;
  int local_size = 1;  // the ranks on this host (OMPI_COMM_WORLD_LOCAL_SIZE; the world's, else)
  std::string launcher = "none";
  std::string rendezvous;
};
Placement placement_from_environment();

// TAPEGRAD_DIST_TIMEOUT: seconds, a positive finite number; 300 when unset.
double timeout_from_environment();

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return place_.rank; }
  int size() const { return place_.size; }
  int local_rank() const { return place_.local_rank; }
  const Placement& placement() const { return place_; }
  virtual const char* backend() const = 0;  // "single", "mpi" or "nccl"
  Device device() const { return device_; }  // where the tensors it moves live

  // What the job does now ("start-up", "step 12", "checkpoint at step 12"): named by every message
  // and by the fault injection of tests; `long_deadline` gives its collectives four times the
  // deadline (start-up, where ranks load data and build models; checkpoints, where rank 0 writes).
  void set_phase(std::string phase, bool long_deadline = false);
  const std::string& phase() const { return phase_; }
  double deadline_seconds() const { return long_ ? 4 * timeout_ : timeout_; }

  // ---- collectives: every rank calls each, in the same order. Sizes are element counts of
  // tensors of any shape, read and written as flat arrays in their dtype (any dtype for the ones
  // that only move bytes; f64, f32 and bf16 for the sums).
  // x = rank root's x, on every rank.
  void broadcast(Tensor& x, int root = 0);
  // in (k elements) -> out (N k): rank r's in at [r k, r k + k), on every rank.
  void all_gather(const Tensor& in, Tensor& out);
  // in (N k): slice s goes to rank s; out (N k): slice s came from rank s.
  void all_to_all(const Tensor& in, Tensor& out);
  // in (N k) -> out (k): slice `rank()` of the ordered sum of every rank's in.
  void reduce_scatter(const Tensor& in, Tensor& out);
  // x = the ordered sum of every rank's x, on every rank (reduce_scatter, then all_gather).
  void all_reduce(Tensor& x);
  void barrier();

  // ---- streams (NCCL; no-ops for host backends). A collective above is ordered with the device's
  // compute stream as an op is: it reads what the work queued before it wrote, and the work queued
  // after it sees its result (event waits on the device, no host wait, capturable in a CUDA graph).
  // Inside an Overlapped scope, collectives run on the communicator's own stream without those
  // waits, so transfers overlap the compute stream's work (data_parallel's gradient buckets); the
  // caller orders them with after_compute() (the communicator's stream waits for the compute
  // stream's work queued so far) and after_comm() (the compute stream waits for the
  // communicator's), and must keep every tensor they touch alive until after_comm().
  class Overlapped {
   public:
    explicit Overlapped(Communicator& c) : c_(c), was_(c.joined_) { c.joined_ = false; }
    ~Overlapped() { c_.joined_ = was_; }
    Overlapped(const Overlapped&) = delete;
    Overlapped& operator=(const Overlapped&) = delete;

   private:
    Communicator& c_;
    bool was_;
  };
  virtual void after_compute() {}
  virtual void after_comm() {}
  // Runs `work` (kernels on the communicator's tensors) where its collectives run: on NCCL's
  // stream, so a sum of received slices queues behind the transfer, off the compute stream.
  virtual void on_comm_stream(const std::function<void()>& work) { work(); }
  // Waits, on the host, until the collectives queued so far have completed, within the phase's
  // deadline (Timeout otherwise). NCCL's collectives are queued on a stream; MPI's complete before
  // they return.
  virtual void synchronize() {}

 protected:
  // A backend's hooks when the phase changes and when a collective starts (the NCCL backend's
  // progress file); collectives() counts those started so far.
  virtual void phase_changed() {}
  virtual void collective_started() {}
  uint64_t collectives() const { return calls_; }
  Communicator(Placement place, Device device, double timeout_s)
      : place_(std::move(place)), device_(device), timeout_(timeout_s) {}
  // The backend's transfers (checked and counted by the public collectives above, which call
  // them after the fault injection of tests): bytes only, no arithmetic.
  virtual void do_broadcast(Tensor& x, int root) = 0;
  virtual void do_all_gather(const Tensor& in, Tensor& out) = 0;
  virtual void do_all_to_all(const Tensor& in, Tensor& out) = 0;
  virtual void do_barrier() = 0;
  // "rank 1: the all-to-all of step 12 (1.5 MiB)": how messages name a collective.
  std::string describe(const char* collective, size_t bytes = 0) const;
  [[noreturn]] void time_out(const char* collective, size_t bytes, const std::string& waited_for) const;

 private:
  // The checks and test faults before a collective; then `work` on the comm stream, joined with
  // the compute stream unless Overlapped.
  void run(const char* collective, const Tensor* first, const Tensor* second, bool slices,
           const std::function<void()>& work);
  Placement place_;
  Device device_;
  double timeout_;
  std::string phase_ = "start-up";
  bool long_ = true;
  bool joined_ = true;
  bool corrupt_next_ = false;  // Note [fault injection]: the next broadcast's result
  uint64_t calls_ = 0;
};

// Joins the job this process belongs to (placement_from_environment): through MPI for host
// tensors, through NCCL for CUDA devices (its unique id passed through MPI under mpirun, else
// through the rendezvous file), or a world of one. A job of several ranks on a backend this build
// lacks is refused by name ("this tapegrad was built without MPI ..."). With even_alone, a process
// that is alone still gets the backend (a world of one that moves its bytes through MPI or NCCL:
// for measuring what they cost, and for testing them on one device).
std::unique_ptr<Communicator> connect(Device device, bool even_alone = false);

// Whether this process has joined a job of several ranks (connect()), whose ranks abort_job ends.
bool in_job();
// Ends every rank of the job with exit code `code` (124 for a Timeout, by convention): MPI_Abort
// under mpirun; launcher-free NCCL ranks leave a note beside the rendezvous file that the other
// ranks' waits read. Prints nothing (the caller has said why); outside a job it just exits. Works
// after the communicator is gone (from a program's last error handler).
[[noreturn]] void abort_job(int code);

// A world of one on `device`, whatever the environment says (tests, and single-process runs).
std::unique_ptr<Communicator> single(Device device = Device::cpu());

// The ordered sum of the rows of x (R, k), into row 0, by a pairwise tree in row order: at stride
// s = 1, 2, 4, ...: row i += row i + s for every i that is a multiple of 2s with i + s < R (Note
// [ordered reduction]). Kernels on x's device; rows 1.. are left as scratch.
void sum_rows_pairwise(Tensor& x, int64_t rows);

// An FNV-1a hash of a tensor's bytes (copied to the host), for comparing ranks' weights.
uint64_t hash_bytes(const Tensor& x, uint64_t seed = 0xcbf29ce484222325ull);

}  // namespace tapegrad::dist
