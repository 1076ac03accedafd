// Comm: the small point-to-point + deterministic-collective interface the runtime talks through.
// Two implementations: LocalComm (ranks on threads, for unit tests) and MpiComm (OpenMPI); the
// shape is chosen so that an NCCL one fits later (non-blocking p2p, requests, explicit progress).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/liveness.h"
#include "util/error.h"

namespace hp {

class Comm;

// Settings shared by every implementation.
struct CommOptions {
  // A wait longer than this aborts the whole job with a message naming the op and the peer.
  // <= 0 means "take HP_COMM_TIMEOUT from the environment, else kDefaultCommTimeout".
  double timeout_s = 0;
  // MpiComm only: a background thread that keeps MPI progressing while the caller computes.
  bool progress_thread = false;
  // MpiComm only: the heartbeat (docs/comm.md). A wait that has lasted heartbeat_s seconds pings
  // its peer every heartbeat_s seconds from a thread that runs beside the compute; a peer that
  // answers nothing for heartbeat_misses x heartbeat_s seconds is stopped or hung, and the wait
  // ends the job at once instead of at the timeout. heartbeat_s < 0: HP_COMM_HEARTBEAT, else
  // kDefaultHeartbeat; 0: no heartbeat. heartbeat_misses <= 0: HP_COMM_HEARTBEAT_MISSES, else
  // kDefaultHeartbeatMisses.
  double heartbeat_s = -1;
  int heartbeat_misses = 0;
};

constexpr double kDefaultCommTimeout = 300;
// HP_COMM_TIMEOUT in seconds (> 0) or kDefaultCommTimeout; throws hp::Error on a malformed value.
double comm_timeout_from_env();

// A stopped peer is found after about (1 + misses) x period seconds of waiting on it: 12 s.
constexpr double kDefaultHeartbeat = 2;
constexpr int kDefaultHeartbeatMisses = 5;
// HP_COMM_HEARTBEAT in seconds (>= 0; 0 turns the heartbeat off) or kDefaultHeartbeat, and
// HP_COMM_HEARTBEAT_MISSES (an integer >= 2: a live peer's answers come about one period apart)
// or kDefaultHeartbeatMisses; hp::Error when malformed.
double comm_heartbeat_from_env();
int comm_heartbeat_misses_from_env();
// HP_COMM_PROGRESS_THREAD=1 asks MpiComm::init_world for the progress thread that
// CommOptions::progress_thread (train/grad --progress-thread) asks for; unset or 0: none.
bool comm_progress_thread_from_env();

// Implementation state behind a Request. poll() advances it and returns true once it is complete.
struct RequestState {
  virtual ~RequestState() = default;
  virtual bool poll(Comm& comm) = 0;
  // The peer this request is still waiting on (for watchdog messages); -1 if none.
  virtual int pending_peer() const = 0;
};

// A handle to an in-flight send, receive or collective. Empty (inactive) once complete.
// The buffer given to isend/irecv must stay alive and untouched until the request completes.
class Request {
 public:
  Request() = default;
  explicit Request(std::shared_ptr<RequestState> state) : state_(std::move(state)) {}
  bool active() const { return state_ != nullptr; }

 private:
  friend class Comm;
  std::shared_ptr<RequestState> state_;
};

// One group of ranks. Calls on one Comm come from one thread (the rank's), except that
// implementations may run their own progress thread.
class Comm {
 public:
  explicit Comm(const CommOptions& options);
  virtual ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Rank in the world group of `peer` of this comm (for messages that must name a process).
  virtual int world_rank_of(int peer) const = 0;
  int world_rank() const { return world_rank_of(rank()); }

  // ---- point to point ----
  // Non-blocking send/receive of `bytes` bytes. Messages between one (src, dst) pair with the same
  // tag match in posting order; sizes of a matched pair must agree. Tags: 0 <= tag < tag_limit().
  Request isend(const void* buf, int64_t bytes, int peer, int tag);
  Request irecv(void* buf, int64_t bytes, int peer, int tag);
  // True (and `r` becomes inactive) if the request has completed; an inactive request is complete.
  bool test(Request& r);
  // Blocks until `r` completes, polling progress(). `what` names the op for the watchdog, e.g.
  // "recv msg 12 (F mb 3 A:2 X:2) for op 7". Past timeout(): prints
  // "rank R waits for <what> from rank Q for N s" and aborts the job. With a heartbeat
  // (liveness()), a peer silent for liveness()->limit_s() aborts it earlier:
  // "rank R waits for <what> from rank Q: no heartbeat for N s (stopped or hung?)".
  void wait(Request& r, const std::string& what);
  void wait_all(std::vector<Request>& rs, const std::string& what);
  // Lets transfers (and in-flight collectives) advance; call it between compute tiles.
  void progress();
  // User tags must be below this (the implementation's tag upper bound minus a reserved range for
  // collectives).
  int tag_limit() const;

  // ---- collectives (every rank of the comm calls them in the same order) ----
  // Elementwise sum whose result is bitwise identical on every rank and equal to the sequential
  // sum ((x_0 + x_1) + x_2) + ... over ranks in rank order, independent of the transport.
  void allreduce_sum(float* data, int64_t n);
  void allreduce_sum(double* data, int64_t n);
  // Non-blocking form: `data` holds the sum when the request completes (test/wait/progress advance
  // it). Several may be in flight (at most kMaxCollectivesInFlight).
  Request iallreduce_sum(float* data, int64_t n);
  Request iallreduce_sum(double* data, int64_t n);
  void barrier();
  // Ranks with equal `color` form a new comm, ordered by (key, old rank).
  virtual std::unique_ptr<Comm> split(int color, int key) = 0;

  // Ends the whole job with `message` printed (MPI: MPI_Abort; local: every rank's waits fail and
  // LocalWorld::run rethrows the first error).
  [[noreturn]] virtual void abort(const std::string& message) = 0;
  void set_timeout(double seconds);
  double timeout() const { return timeout_s_; }
  // The peers' heartbeat as this process sees it; null when there is none (LocalComm, or MpiComm
  // with the heartbeat off).
  const PeerLiveness* liveness() const { return liveness_.get(); }

  static constexpr int kMaxCollectivesInFlight = 512;

 protected:
  // Transport primitives; the public calls check arguments, then use these. Collectives use them
  // with tags in [tag_limit(), tag_upper_bound()].
  virtual std::shared_ptr<RequestState> start_send(const void* buf, int64_t bytes, int peer,
                                                   int tag) = 0;
  virtual std::shared_ptr<RequestState> start_recv(void* buf, int64_t bytes, int peer, int tag) = 0;
  // Largest tag the transport accepts (MPI_TAG_UB).
  virtual int tag_upper_bound() const = 0;
  // Transport-level progress (MPI: enter the progress engine). Default: nothing.
  virtual void transport_progress() {}
  // A counter that changes whenever some request may have completed; idle() sleeps until it moves
  // past `seen` or `max_s` passes. Defaults: 0 and a short back-off sleep.
  virtual uint64_t activity() const { return 0; }
  virtual void idle(uint64_t seen, double max_s, int round);
  // Shares the world's liveness with this comm (MpiComm: the world and its splits).
  void set_liveness(std::shared_ptr<PeerLiveness> l) { liveness_ = std::move(l); }
  const std::shared_ptr<PeerLiveness>& shared_liveness() const { return liveness_; }

 private:
  template <typename T> friend struct AllreduceState;
  template <typename T>
  Request start_allreduce(T* data, int64_t n);
  int next_collective_tag();  // first of the two tags for a new collective
  [[noreturn]] void watchdog_fire(const Request& r, const std::string& what, double waited);
  [[noreturn]] void heartbeat_fire(int world_peer, const std::string& what, double silent,
                                   double waited);

  double timeout_s_;
  std::shared_ptr<PeerLiveness> liveness_;
  uint64_t collective_seq_ = 0;
  // Collectives in flight, advanced by progress() so they move on while the caller computes.
  std::vector<std::shared_ptr<RequestState>> collectives_;
  bool in_progress_ = false;
};

// Pipeline, data-parallel and tensor-parallel sub-communicators of a D x P x T world:
// world rank = (d * P + p) * T + t, tensor-parallel innermost (as Megatron-LM orders ranks), so a
// tensor-parallel group is T neighbouring ranks, on one node when T divides the ranks per node.
// With T = 1 this is world rank = d * P + p.
struct GridComms {
  int d = 0, p = 0, t = 0;
  std::unique_ptr<Comm> pipeline;  // the P ranks of replica d, tensor rank t; rank p
  std::unique_ptr<Comm> data;      // the D ranks holding stage p, tensor rank t; rank d
  std::unique_ptr<Comm> tensor;    // the T ranks sharing stage p of replica d; rank t
};
// Collective over `world` (size must be D * P * T).
GridComms split_grid(Comm& world, int data_parallel, int pipeline, int tensor_parallel = 1);

// The tag for a schedule message id; throws hp::Error if it does not fit the transport's tags.
int message_tag(const Comm& comm, int message_id);

// A failure that every rank of a comm agreed on (run_then_agree): the lowest rank that failed
// and its message, the same on every rank. `reporter` is true on that rank only, so a launcher
// prints the message once.
class AgreedFailure : public Error {
 public:
  AgreedFailure(int failed_rank, int failed_ranks, bool reporter, const std::string& message)
      : Error(message), failed_rank_(failed_rank), failed_ranks_(failed_ranks), reporter_(reporter) {}
  int failed_rank() const { return failed_rank_; }    // the lowest failing rank of the comm
  int failed_ranks() const { return failed_ranks_; }  // how many ranks failed
  bool reporter() const { return reporter_; }

 private:
  int failed_rank_, failed_ranks_;
  bool reporter_;
};

// Runs `local` (work that sends nothing to other ranks: checking flags, reading files) on this
// rank, then every rank of `comm` learns whether any rank's `local` threw. If none did, returns
// normally. Otherwise every rank throws the same AgreedFailure, holding the message of the lowest
// failing rank (at most kAgreedMessageBytes of it). Collective: every rank must call it.
void run_then_agree(Comm& comm, const std::function<void()>& local);
inline constexpr int kAgreedMessageBytes = 2048;

}  // namespace hp
