// The communicator's common part (comm.hpp): where this process stands, the checks every collective
// makes, the ordered sums built on the backends' transfers, deadlines, fault injection for tests,
// and the world of one.
#include "tapegrad/dist/comm.hpp"

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "tapegrad/dist/backends.hpp"
#include "tapegrad/kernels/kernels.hpp"

namespace tapegrad::dist {

// Note [ordered reduction]
// MPI_Allreduce and NCCL's ring and tree all-reduces add the ranks' values in an order that
// depends on the number of ranks (and, for some algorithms, on message sizes), so the same
// gradients summed over 2 ranks and over 4 give different bits. Here every sum is built from moves
// of bytes and one arithmetic rule: rank s receives slice s of every rank's tensor (an all-to-all:
// each rank sends and receives (N - 1)/N of the tensor, what a ring reduce-scatter moves), adds the
// N slices by a pairwise tree in rank order (sum_rows_pairwise: (r0 + r1) + (r2 + r3), ...), and,
// for an all-reduce, the sums are all-gathered (another (N - 1)/N: a ring all-gather's bytes). Each
// element's sum is then a function of the ranks' values alone. With N a power of two, the tree over
// ranks continues the tree a rank builds over its own micro-batches (data_parallel.hpp), so a step
// over N ranks of A micro-batches each adds its N A gradients exactly as one process adding N A.

// Note [deadlines]
// Every collective waits at most deadline_seconds(): TAPEGRAD_DIST_TIMEOUT (default 300 s), four
// times that in phases marked long (start-up, where ranks load data and build models at their own
// pace; checkpoints, where rank 0 writes while the others wait). A backend polls what it waits for
// (MPI requests, NCCL's stream) rather than blocking in the transport, so a rank that died or hangs
// is found by its peers: the first to wait past the deadline throws Timeout naming itself, the
// collective, the phase and the ranks it waited for; the program's handler then calls abort_job(124)
// and every rank ends. A rank that throws for another reason calls abort_job with its own code, so
// its peers never wait for it at all.

// Note [fault injection]
// Tests make a rank fail on purpose: TAPEGRAD_DIST_FAULT="rank=1,phase=step 3,action=hang" makes
// rank 1, at its first collective of phase "step 3", do the action: exit (leave without a word, as
// a crashed process), kill (SIGKILL itself), throw (a tapegrad::Error, as a failing rank does),
// hang (sleep for ever, as a stuck rank), or corrupt (flip one bit of a broadcast's result: a rank
// whose weights differ). Unset, nothing is read after start-up.

namespace {

[[noreturn]] void refuse(const std::string& what) { throw Error("[dist] " + what); }

void check_sum_dtype(const char* collective, const Tensor& x) {
  if (x.defined() && x.dtype() != DType::f64 && x.dtype() != DType::f32 && x.dtype() != DType::bf16)
    refuse(std::string(collective) + " of a " + dtype_name(x.dtype()) + " tensor: its sums take f64, f32 and bf16 "
           "(the other collectives move any dtype)");
}

// An environment variable as an integer in [lo, hi], or `fallback` when unset.
int env_int(const char* name, int lo, int hi, int fallback) {
  const char* text = std::getenv(name);
  if (!text) return fallback;
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text, &end, 10);
  if (*text == 0 || *end != 0 || errno != 0 || v < lo || v > hi)
    refuse(std::string(name) + "='" + text + "' is not an integer from " + std::to_string(lo) + " to " +
           std::to_string(hi));
  return static_cast<int>(v);
}

struct FaultSpec {
  int rank = -1;
  std::string phase;
  detail::Fault action = detail::Fault::none;
  bool done = false;
};

FaultSpec parse_fault() {
  FaultSpec f;
  const char* text = std::getenv("TAPEGRAD_DIST_FAULT");
  if (!text || !*text) return f;
  std::string spec = text;
  const std::string whole = spec;
  auto bad = [&](const std::string& why) -> void {
    refuse("TAPEGRAD_DIST_FAULT='" + whole + "': " + why +
           " (it reads rank=R,phase=P,action=exit|kill|throw|hang|corrupt)");
  };
  std::string action;
  bool have_rank = false;
  while (!spec.empty()) {
    const size_t comma = spec.find(',');
    const std::string item = spec.substr(0, comma);
    spec = comma == std::string::npos ? "" : spec.substr(comma + 1);
    const size_t eq = item.find('=');
    if (eq == std::string::npos) bad("'" + item + "' is not key=value");
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "rank") {
      char* end = nullptr;
      const long r = std::strtol(value.c_str(), &end, 10);
      if (value.empty() || *end != 0 || r < 0 || r > 1 << 20) bad("rank '" + value + "' is not a rank");
      f.rank = static_cast<int>(r);
      have_rank = true;
    } else if (key == "phase") {
      f.phase = value;
    } else if (key == "action") {
      action = value;
    } else {
      bad("unknown key '" + key + "'");
    }
  }
  const std::pair<const char*, detail::Fault> actions[] = {{"exit", detail::Fault::exit},
                                                           {"kill", detail::Fault::kill},
                                                           {"throw", detail::Fault::raise},
                                                           {"hang", detail::Fault::hang},
                                                           {"corrupt", detail::Fault::corrupt}};
  for (const auto& [name, fault] : actions)
    if (action == name) f.action = fault;
  if (!have_rank || f.phase.empty() || f.action == detail::Fault::none) bad("it needs a rank, a phase and an action");
  return f;
}

FaultSpec& fault_spec() {
  static FaultSpec spec = parse_fault();
  return spec;
}

}  // namespace

namespace detail {

Fault fault_for(int rank, const std::string& phase) {
  FaultSpec& f = fault_spec();
  if (f.done || f.action == Fault::none || f.rank != rank || f.phase != phase) return Fault::none;
  f.done = true;
  return f.action;
}

}  // namespace detail

Placement placement_from_environment() {
  Placement p;
  if (std::getenv("OMPI_COMM_WORLD_SIZE")) {
    p.launcher = "mpirun";
    p.size = env_int("OMPI_COMM_WORLD_SIZE", 1, 1 << 20, 1);
    p.rank = env_int("OMPI_COMM_WORLD_RANK", 0, p.size - 1, 0);
    p.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0, p.size - 1, 0);
    p.local_size = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1, p.size, p.size);
  } else if (std::getenv("TAPEGRAD_WORLD_SIZE") || std::getenv("TAPEGRAD_RANK")) {
    p.launcher = "env";
    if (!std::getenv("TAPEGRAD_WORLD_SIZE") || !std::getenv("TAPEGRAD_RANK"))
      refuse("a rank started without a launcher needs TAPEGRAD_RANK and TAPEGRAD_WORLD_SIZE (and "
             "TAPEGRAD_RENDEZVOUS when there are several)");
    p.size = env_int("TAPEGRAD_WORLD_SIZE", 1, 1 << 20, 1);
    p.rank = env_int("TAPEGRAD_RANK", 0, p.size - 1, 0);
    p.local_rank = env_int("TAPEGRAD_LOCAL_RANK", 0, p.size - 1, p.rank);
    p.local_size = p.size;
    if (const char* r = std::getenv("TAPEGRAD_RENDEZVOUS")) p.rendezvous = r;
    if (p.size > 1 && p.rendezvous.empty())
      refuse("TAPEGRAD_WORLD_SIZE=" + std::to_string(p.size) + " without TAPEGRAD_RENDEZVOUS: the ranks meet through "
             "a file they can all reach (a path on a shared filesystem), or start them with mpirun");
  }
  return p;
}

double timeout_from_environment() {
  const char* text = std::getenv("TAPEGRAD_DIST_TIMEOUT");
  if (!text) return 300.0;
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (*text == 0 || *end != 0 || !(v > 0) || !std::isfinite(v) || v > 1e7)
    refuse(std::string("TAPEGRAD_DIST_TIMEOUT='") + text + "' is not a number of seconds (positive, at most 1e7)");
  return v;
}

void Communicator::set_phase(std::string phase, bool long_deadline) {
  phase_ = std::move(phase);
  long_ = long_deadline;
  phase_changed();
}

std::string Communicator::describe(const char* collective, size_t bytes) const {
  std::string s = "rank " + std::to_string(rank()) + ": the " + collective + " of " + phase_;
  if (bytes > 0) {
    char b[32];
    std::snprintf(b, sizeof b, " (%.3g MiB)", static_cast<double>(bytes) / (1 << 20));
    s += b;
  }
  return s;
}

void Communicator::time_out(const char* collective, size_t bytes, const std::string& waited_for) const {
  char b[64];
  std::snprintf(b, sizeof b, "%g s", deadline_seconds());
  throw Timeout("[dist] " + describe(collective, bytes) + " did not complete within " + b + " (TAPEGRAD_DIST_TIMEOUT" +
                (long_ ? ", times 4 in this phase" : "") + "): " + waited_for);
}

void Communicator::run(const char* collective, const Tensor* first, const Tensor* second, bool slices,
                       const std::function<void()>& work) {
  for (const Tensor* t : {first, second}) {
    if (!t) continue;
    if (!t->defined()) refuse(std::string(collective) + " of an undefined tensor");
    if (!(t->device() == device_))
      refuse(std::string(collective) + " of a tensor on " + t->device().str() + ", but this " + backend() +
             " communicator moves tensors on " + device_.str());
  }
  if (first && second && first->dtype() != second->dtype())
    refuse(std::string(collective) + " from a " + dtype_name(first->dtype()) + " tensor into a " +
           dtype_name(second->dtype()) + " one");
  if (first && slices && first->numel() % size() != 0)
    refuse(std::string(collective) + " of " + std::to_string(first->numel()) + " elements: a multiple of the " +
           std::to_string(size()) + " ranks is needed (one equal slice each)");
  switch (detail::fault_for(rank(), phase_)) {  // Note [fault injection]
    case detail::Fault::exit: std::_Exit(3);
    case detail::Fault::kill: std::raise(SIGKILL); break;
    case detail::Fault::raise:
      refuse("rank " + std::to_string(rank()) + " fails at the " + collective + " of " + phase_ +
             ", as TAPEGRAD_DIST_FAULT asks");
    case detail::Fault::hang:
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    case detail::Fault::corrupt: corrupt_next_ = true; break;
    case detail::Fault::none: break;
  }
  ++calls_;
  collective_started();
  if (joined_) after_compute();
  on_comm_stream(work);
  if (joined_) after_comm();
}

void Communicator::broadcast(Tensor& x, int root) {
  if (root < 0 || root >= size()) refuse("broadcast from rank " + std::to_string(root) + " of " + std::to_string(size()));
  run("broadcast", &x, nullptr, false, [&] { do_broadcast(x, root); });
  x.mark_modified();
  if (corrupt_next_ && x.nbytes() > 0) {  // Note [fault injection]
    corrupt_next_ = false;
    Tensor host = x.to(Device::cpu()).clone();
    static_cast<unsigned char*>(host.raw_data())[0] ^= 1;
    x.copy_from(host);
  }
}

void Communicator::all_gather(const Tensor& in, Tensor& out) {
  if (in.defined() && out.defined() && out.numel() != in.numel() * size())
    refuse("all-gather of " + std::to_string(in.numel()) + " elements a rank into " + std::to_string(out.numel()) +
           ": " + std::to_string(size()) + " ranks need " + std::to_string(in.numel() * size()));
  run("all-gather", &in, &out, false, [&] { do_all_gather(in, out); });
  out.mark_modified();
}

void Communicator::all_to_all(const Tensor& in, Tensor& out) {
  if (in.defined() && out.defined() && out.numel() != in.numel())
    refuse("all-to-all of " + std::to_string(in.numel()) + " elements into " + std::to_string(out.numel()));
  run("all-to-all", &in, &out, true, [&] { do_all_to_all(in, out); });
  out.mark_modified();
}

void Communicator::barrier() {
  run("barrier", nullptr, nullptr, false, [&] { do_barrier(); });
}

void Communicator::reduce_scatter(const Tensor& in, Tensor& out) {
  if (in.defined() && out.defined() && in.numel() % size() == 0 && out.numel() != in.numel() / size())
    refuse("reduce-scatter of " + std::to_string(in.numel()) + " elements over " + std::to_string(size()) +
           " ranks into " + std::to_string(out.numel()) + ": each rank's slice has " +
           std::to_string(in.numel() / size()));
  check_sum_dtype("reduce-scatter", in);
  Tensor rows = Tensor::empty(Shape{in.numel()}, in.dtype(), in.device());
  run("reduce-scatter", &in, &out, true, [&] {
    do_all_to_all(in, rows);
    sum_rows_pairwise(rows, size());
    Tensor o = out.reshape(Shape{out.numel()});
    o.copy_from(rows.flat_view(0, Shape{out.numel()}));
  });
  out.mark_modified();
}

void Communicator::all_reduce(Tensor& x) {
  check_sum_dtype("all-reduce", x);
  const int64_t n = x.numel(), ranks = size();
  // x itself where it cuts into N equal slices; else a copy padded with zeros, which add nothing
  const int64_t k = (n + ranks - 1) / ranks;
  const bool whole = n % ranks == 0 && x.defined();
  Tensor padded = whole ? x.reshape(Shape{n}) : Tensor::zeros(Shape{k * ranks}, x.dtype(), x.device());
  Tensor rows = Tensor::empty(Shape{k * ranks}, x.dtype(), x.device());
  run("all-reduce", &x, nullptr, false, [&] {
    if (!whole) padded.flat_view(0, Shape{n}).copy_from(x.reshape(Shape{n}));
    do_all_to_all(padded, rows);
    sum_rows_pairwise(rows, ranks);
    do_all_gather(rows.flat_view(0, Shape{k}), padded);
    if (!whole) {
      Tensor flat = x.reshape(Shape{n});
      flat.copy_from(padded.flat_view(0, Shape{n}));
    }
  });
  x.mark_modified();
}

namespace {
std::function<void(int)> g_job_abort;  // set by the backend of a job of several ranks
}  // namespace

void detail::set_job_abort(std::function<void(int)> abort) { g_job_abort = std::move(abort); }

bool in_job() { return g_job_abort != nullptr; }

// Note [rank 0 ends the job]
// An input every rank refuses (a resume of another M, sparse value embeddings on ranks) makes every
// rank call abort_job at once, and two MPI_Aborts racing in Open MPI can end a rank on a signal
// (exit 139 where the job should exit 2). So a rank other than 0 gives rank 0 a second to end the
// job first: the job ends with rank 0's code and message where rank 0 fails too, and a second
// later with the failing rank's own where it fails alone.
void abort_job(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (g_job_abort) {
    if (placement_from_environment().rank != 0) std::this_thread::sleep_for(std::chrono::seconds(1));
    g_job_abort(code);
  }
  std::_Exit(code);
}

void sum_rows_pairwise(Tensor& x, int64_t rows) {
  if (rows < 1 || x.numel() % rows != 0)
    refuse("sum_rows_pairwise of " + std::to_string(x.numel()) + " elements in " + std::to_string(rows) + " rows");
  const int64_t k = x.numel() / rows;
  for (int64_t stride = 1; stride < rows; stride *= 2)
    for (int64_t i = 0; i + stride < rows; i += 2 * stride) {
      Tensor a = x.flat_view(i * k, Shape{k});
      kernels::binary(kernels::Binary::add, a, x.flat_view((i + stride) * k, Shape{k}), a);
    }
  x.mark_modified();
}

uint64_t hash_bytes(const Tensor& x, uint64_t h) {
  const Tensor host = x.to(Device::cpu());
  const auto* p = static_cast<const unsigned char*>(host.raw_data());
  for (size_t i = 0; i < host.nbytes(); ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

namespace detail {
namespace {

// A world of one: an all-gather or all-to-all of one slice is a copy; the rest move nothing.
struct Single final : Communicator {
  explicit Single(Device device) : Communicator(Placement{}, device, timeout_from_environment()) {}
  const char* backend() const override { return "single"; }
  void do_broadcast(Tensor&, int) override {}
  void do_all_gather(const Tensor& in, Tensor& out) override { out.reshape(in.shape()).copy_from(in); }
  void do_all_to_all(const Tensor& in, Tensor& out) override { out.reshape(in.shape()).copy_from(in); }
  void do_barrier() override {}
};

}  // namespace

std::unique_ptr<Communicator> make_single(Device device) { return std::make_unique<Single>(device); }

}  // namespace detail

std::unique_ptr<Communicator> single(Device device) { return detail::make_single(device); }

std::unique_ptr<Communicator> connect(Device device, bool even_alone) {
  const Placement place = placement_from_environment();
  const double timeout = timeout_from_environment();
  (void)fault_spec();  // a malformed TAPEGRAD_DIST_FAULT is refused at start
  if (place.size == 1 && !even_alone) return detail::make_single(device);
  const std::string job = std::to_string(place.size) + " ranks (" + place.launcher + ")";
  if (device.is_cuda()) {
#if TAPEGRAD_WITH_NCCL
    return detail::make_nccl(place, device, timeout);
#else
    refuse("a job of " + job + " on " + device.str() + " needs NCCL, and this tapegrad was built without it "
           "(it is built with CUDA when nccl.h is found)");
#endif
  }
  if (place.launcher != "mpirun" && place.size > 1)
    refuse("a job of " + job + " on the CPU: CPU ranks meet through MPI, so start them with mpirun "
           "(TAPEGRAD_RANK and a rendezvous file serve GPU ranks, which meet through NCCL)");
#if TAPEGRAD_WITH_MPI
  return detail::make_mpi(place, timeout);
#else
  (void)timeout;
  refuse("a job of " + job + " needs MPI, and this tapegrad was built without it (meson -Ddist=enabled with "
         "Open MPI's libopenmpi-dev installed)");
#endif
}

}  // namespace tapegrad::dist
