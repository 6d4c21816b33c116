// The communicator's backends, for comm.cpp's connect() (not installed: users call connect()).
#pragma once

#include <memory>

#include "tapegrad/config.hpp"
#include "tapegrad/dist/comm.hpp"

namespace tapegrad::dist::detail {

// A world of one: every collective is a copy (or nothing).
std::unique_ptr<Communicator> make_single(Device device);

#if TAPEGRAD_WITH_MPI
// mpi_comm.cpp: host tensors over MPI, MPI initialised here (and finalised with the last MPI
// communicator). Under mpirun only.
std::unique_ptr<Communicator> make_mpi(const Placement& place, double timeout_s);
#endif

// What abort_job does in the job this process joined (set by the backend that joined it).
void set_job_abort(std::function<void(int)> abort);

#if TAPEGRAD_WITH_NCCL
// nccl_comm.cpp: CUDA tensors over NCCL, loaded with dlopen when first asked for.
std::unique_ptr<Communicator> make_nccl(const Placement& place, Device device, double timeout_s);
#endif

// Test hooks (Note [fault injection] in comm.cpp): what TAPEGRAD_DIST_FAULT asks of this rank at
// this phase, done before a collective; "corrupt" is done after a broadcast, on its result.
enum class Fault { none, exit, kill, raise, hang, corrupt };
Fault fault_for(int rank, const std::string& phase);

}  // namespace tapegrad::dist::detail
