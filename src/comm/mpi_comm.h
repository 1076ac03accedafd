// MpiComm: Comm over the MPI C API (OpenMPI). Non-blocking Isend/Irecv, progress by MPI_Test
// polling (optionally a progress thread), every MPI call checked, watchdog aborts via MPI_Abort.
#pragma once

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <atomic>
#include <memory>
#include <thread>

#include "comm/comm.h"

namespace hp {

class MpiComm final : public Comm {
 public:
  // Initializes MPI and returns the world comm. Destroying it finalizes MPI — or, if it is destroyed
  // while an exception unwinds, aborts the job so the other ranks do not hang. Call once.
  static std::unique_ptr<MpiComm> init_world(int* argc, char*** argv,
                                             const CommOptions& options = {});
  // True when this process was started by mpirun/mpiexec (OpenMPI, PMIx or Hydra environment).
  static bool launched_by_mpirun();
  // Prints `message` (when not empty) on stderr and ends every rank of the job with exit code
  // `code` (usable before/without a comm).
  [[noreturn]] static void abort_job(const std::string& message, int code = 3);

  ~MpiComm() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int world_rank_of(int peer) const override;
  std::unique_ptr<Comm> split(int color, int key) override;
  [[noreturn]] void abort(const std::string& message) override;
  // Whether this comm's background progress thread runs (CommOptions::progress_thread or
  // HP_COMM_PROGRESS_THREAD=1, and MPI_THREAD_MULTIPLE granted).
  bool has_progress_thread() const { return progress_thread_.joinable(); }

 protected:
  std::shared_ptr<RequestState> start_send(const void* buf, int64_t bytes, int peer, int tag) override;
  std::shared_ptr<RequestState> start_recv(void* buf, int64_t bytes, int peer, int tag) override;
  int tag_upper_bound() const override { return tag_ub_; }
  void transport_progress() override;

 private:
  MpiComm(MPI_Comm comm, bool is_world, const CommOptions& options);
  void start_progress_thread();
  // The heartbeat thread (world only; docs/comm.md): answers every ping from a peer, pings the
  // peers this process's waits watch, and records each message in the shared PeerLiveness. Its
  // messages travel on hb_comm_, a duplicate of the world, so they never meet the caller's.
  void start_heartbeat_thread(double period_s, int misses);
  void heartbeat_loop();

  MPI_Comm comm_;
  bool is_world_;
  int rank_ = 0, size_ = 1, tag_ub_ = 32767;
  std::vector<int> world_ranks_;  // this comm's rank -> MPI_COMM_WORLD rank
  CommOptions options_;
  std::atomic<bool> stop_{false};
  std::thread progress_thread_;
  MPI_Comm hb_comm_ = MPI_COMM_NULL;
  std::thread heartbeat_thread_;
};

}  // namespace hp
