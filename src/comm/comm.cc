// The transport-independent half of Comm: argument checks, wait loop with watchdog, and the
// deterministic allreduce built from point-to-point messages.
#include "comm/comm.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <thread>

#include "util/error.h"
#include "util/timer.h"

namespace hp {

namespace {

// The number in environment variable `name`, or `fallback` when it is unset or empty. A value that
// is not a whole number (when `whole`) or lies outside [lo, hi] is an error naming the variable,
// what it must be, and the default it would have had.
double env_number(const char* name, double fallback, double lo, double hi, bool whole,
                  const char* must_be) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  const double v = whole ? static_cast<double>(std::strtol(text, &end, 10)) : std::strtod(text, &end);
  HP_CHECK(errno == 0 && end != text && *end == '\0' && std::isfinite(v) && v >= lo && v <= hi,
           "{}='{}' is not {}; unset it for the default {}", name, text, must_be, fallback);
  return v;
}

}  // namespace

double comm_timeout_from_env() {
  // Strictly positive: the smallest double above 0 is the lower bound.
  return env_number("HP_COMM_TIMEOUT", kDefaultCommTimeout, std::nextafter(0.0, 1.0), HUGE_VAL,
                    false, "a positive number of seconds");
}

double comm_heartbeat_from_env() {
  return env_number("HP_COMM_HEARTBEAT", kDefaultHeartbeat, 0, HUGE_VAL, false,
                    "a number of seconds >= 0 (0 turns the heartbeat off)");
}

bool comm_progress_thread_from_env() {
  return env_number("HP_COMM_PROGRESS_THREAD", 0, 0, 1, true, "0 or 1") != 0;
}

int comm_heartbeat_misses_from_env() {
  return static_cast<int>(env_number("HP_COMM_HEARTBEAT_MISSES", kDefaultHeartbeatMisses, 2,
                                     1000000, true, "a whole number from 2 to 1000000"));
}

Comm::Comm(const CommOptions& options)
    : timeout_s_(options.timeout_s > 0 ? options.timeout_s : comm_timeout_from_env()) {}

Comm::~Comm() = default;

void Comm::set_timeout(double seconds) {
  HP_CHECK(seconds > 0, "comm timeout must be positive, got {} s", seconds);
  timeout_s_ = seconds;
}

int Comm::tag_limit() const { return tag_upper_bound() - 2 * kMaxCollectivesInFlight + 1; }

int message_tag(const Comm& comm, int message_id) {
  HP_CHECK(message_id >= 0 && message_id < comm.tag_limit(),
           "message id {} does not fit the transport's tags (0..{}); the schedule has too many "
           "messages for this MPI (MPI_TAG_UB), split the step into fewer micro-batches",
           message_id, comm.tag_limit() - 1);
  return message_id;
}

namespace {
void check_p2p(const Comm& c, const void* buf, int64_t bytes, int peer, int tag, const char* op) {
  HP_CHECK(bytes >= 0, "{}: negative size {} bytes", op, bytes);
  HP_CHECK(bytes == 0 || buf != nullptr, "{}: null buffer for {} bytes", op, bytes);
  HP_CHECK(peer >= 0 && peer < c.size(), "{}: peer {} is not a rank of this comm (size {})", op,
           peer, c.size());
  HP_CHECK(tag >= 0 && tag < c.tag_limit(), "{}: tag {} outside 0..{} (tags above are reserved "
           "for collectives)", op, tag, c.tag_limit() - 1);
}
}  // namespace

Request Comm::isend(const void* buf, int64_t bytes, int peer, int tag) {
  check_p2p(*this, buf, bytes, peer, tag, "isend");
  return Request(start_send(buf, bytes, peer, tag));
}

Request Comm::irecv(void* buf, int64_t bytes, int peer, int tag) {
  check_p2p(*this, buf, bytes, peer, tag, "irecv");
  return Request(start_recv(buf, bytes, peer, tag));
}

bool Comm::test(Request& r) {
  if (!r.state_) return true;
  if (!r.state_->poll(*this)) return false;
  r.state_.reset();
  return true;
}

void Comm::progress() {
  transport_progress();
  // Advance in-flight collectives (a phase change posts the next messages) and forget finished ones.
  std::erase_if(collectives_, [&](const std::shared_ptr<RequestState>& s) { return s->poll(*this); });
}

namespace {
// The peer a long wait watches through the heartbeat: registered with PeerLiveness (so its
// heartbeat thread pings it) from the moment the wait has lasted one period, released on return.
struct Watch {
  PeerLiveness* live;
  int peer = -1;       // world rank watched, -1: none
  double since = 0;    // when watching it began
  ~Watch() { set(-1, 0); }
  void set(int p, double now) {
    if (p == peer) return;
    if (peer >= 0) live->unwatch(peer);
    peer = p;
    since = now;
    if (peer >= 0) live->watch(peer);
  }
};
}  // namespace

void Comm::wait(Request& r, const std::string& what) {
  if (test(r)) return;
  Timer timer;
  const double start = now_seconds();
  Watch watch{liveness_.get()};
  for (int round = 0;; ++round) {
    uint64_t seen = activity();
    progress();
    if (test(r)) return;
    double waited = timer.seconds();
    if (waited > timeout_s_) watchdog_fire(r, what, waited);
    if (watch.live && waited >= watch.live->period_s()) {
      // Silence is counted from the later of the peer's last answer and the moment this wait
      // began watching it (an answer from before the wait proves nothing about now).
      const int local = r.state_ ? r.state_->pending_peer() : -1;
      const int peer = local >= 0 ? world_rank_of(local) : -1;
      const double now = start + waited;
      watch.set(peer == world_rank() ? -1 : peer, now);
      if (watch.peer >= 0) {
        const double silent = now - std::max(watch.since, watch.live->last_seen(watch.peer));
        if (silent > watch.live->limit_s()) heartbeat_fire(watch.peer, what, silent, waited);
      }
    }
    idle(seen, std::min(timeout_s_ - waited, 0.05) + 1e-4, round);
  }
}

void Comm::wait_all(std::vector<Request>& rs, const std::string& what) {
  for (size_t i = 0; i < rs.size(); ++i) {
    if (rs[i].active()) wait(rs[i], rs.size() == 1 ? what : fmt::format("{} [{} of {}]", what, i + 1, rs.size()));
  }
}

void Comm::idle(uint64_t, double max_s, int round) {
  // Spin politely first (a message is often microseconds away), then back off to 200 us sleeps
  // so oversubscribed ranks leave the cores to the ones computing.
  if (round < 64) {
    std::this_thread::yield();
    return;
  }
  double sleep_s = std::min({max_s, 1e-6 * (1 << std::min(round - 64, 8)), 2e-4});
  std::this_thread::sleep_for(std::chrono::duration<double>(sleep_s));
}

void Comm::watchdog_fire(const Request& r, const std::string& what, double waited) {
  int peer = r.state_ ? r.state_->pending_peer() : -1;
  std::string from = peer >= 0 ? fmt::format("rank {}", world_rank_of(peer)) : "its peers";
  abort(fmt::format("rank {} waits for {} from {} for {:.0f} s (comm timeout {} s, "
                    "see HP_COMM_TIMEOUT); aborting the job",
                    world_rank(), what, from, waited, timeout_s_));
  std::abort();  // not reached: abort() does not return (a virtual call hides that from GCC)
}

void Comm::heartbeat_fire(int world_peer, const std::string& what, double silent, double waited) {
  abort(fmt::format("rank {} waits for {} from rank {}: no heartbeat for {:.0f} s (stopped or "
                    "hung?); waited {:.0f} s, heartbeat every {} s, {} missed allowed (see "
                    "HP_COMM_HEARTBEAT, HP_COMM_HEARTBEAT_MISSES); aborting the job",
                    world_rank(), what, world_peer, silent, waited, liveness_->period_s(),
                    liveness_->misses()));
  std::abort();  // not reached, as in watchdog_fire
}

int Comm::next_collective_tag() {
  std::erase_if(collectives_, [&](const std::shared_ptr<RequestState>& s) { return s->poll(*this); });
  HP_CHECK(static_cast<int>(collectives_.size()) < kMaxCollectivesInFlight,
           "{} collectives in flight on rank {}; complete some before starting more",
           collectives_.size(), rank());
  int slot = static_cast<int>(collective_seq_++ % kMaxCollectivesInFlight);
  return tag_limit() + 2 * slot;
}

// ---- deterministic allreduce -------------------------------------------------------------------
// Direct reduce-scatter then allgather: rank j owns chunk j of the vector, receives that chunk
// from every other rank, sums the P contributions in rank order (left to right), and sends the
// result back to everyone. Each element is summed by exactly one rank in a fixed order, so every
// rank ends with the same bits, equal to the sequential sum. Traffic per rank: 2 n (P-1)/P.
template <typename T>
struct AllreduceState : RequestState {
  Comm& comm;
  T* data;
  int64_t n;
  int tag0;
  int size, me;
  int phase = 0;  // 1: reduce-scatter in flight, 2: allgather in flight, 3: done
  std::vector<T> scratch;  // (P-1) contributions to my chunk
  std::vector<std::shared_ptr<RequestState>> reqs;
  std::vector<int> peers;  // peer of each entry of reqs

  AllreduceState(Comm& c, T* d, int64_t count, int tag)
      : comm(c), data(d), n(count), tag0(tag), size(c.size()), me(c.rank()) {}

  int64_t begin(int j) const { return n * j / size; }
  int64_t len(int j) const { return begin(j + 1) - begin(j); }
  int slot(int j) const { return j < me ? j : j - 1; }

  void add(std::shared_ptr<RequestState> s, int peer) {
    reqs.push_back(std::move(s));
    peers.push_back(peer);
  }

  void start() {
    if (size == 1) {
      phase = 3;
      return;
    }
    phase = 1;
    scratch.resize(static_cast<size_t>(len(me) * (size - 1)));
    const int64_t bytes_mine = len(me) * static_cast<int64_t>(sizeof(T));
    for (int j = 0; j < size; ++j) {
      if (j == me) continue;
      add(comm.start_recv(scratch.data() + slot(j) * len(me), bytes_mine, j, tag0), j);
    }
    for (int j = 0; j < size; ++j) {
      if (j == me) continue;
      add(comm.start_send(data + begin(j), len(j) * static_cast<int64_t>(sizeof(T)), j, tag0), j);
    }
  }

  void reduce_mine() {
    const int64_t b = begin(me), m = len(me);
    std::vector<const T*> src(static_cast<size_t>(size));
    for (int k = 0; k < size; ++k) src[k] = k == me ? data + b : scratch.data() + slot(k) * m;
    for (int64_t i = 0; i < m; ++i) {
      T acc = src[0][i];
      for (int k = 1; k < size; ++k) acc += src[k][i];
      data[b + i] = acc;
    }
  }

  bool poll(Comm&) override {
    if (phase == 3) return true;
    for (size_t i = 0; i < reqs.size();) {
      if (reqs[i]->poll(comm)) {
        reqs.erase(reqs.begin() + static_cast<long>(i));
        peers.erase(peers.begin() + static_cast<long>(i));
      } else {
        ++i;
      }
    }
    if (!reqs.empty()) return false;
    if (phase == 1) {
      // Every send of phase 1 has completed, so chunks j != me may now be overwritten.
      reduce_mine();
      scratch = {};
      phase = 2;
      const int64_t bytes_mine = len(me) * static_cast<int64_t>(sizeof(T));
      for (int j = 0; j < size; ++j) {
        if (j == me) continue;
        add(comm.start_recv(data + begin(j), len(j) * static_cast<int64_t>(sizeof(T)), j, tag0 + 1), j);
      }
      for (int j = 0; j < size; ++j) {
        if (j == me) continue;
        add(comm.start_send(data + begin(me), bytes_mine, j, tag0 + 1), j);
      }
      return poll(comm);
    }
    phase = 3;
    return true;
  }

  int pending_peer() const override { return peers.empty() ? -1 : peers.front(); }
};

template <typename T>
Request Comm::start_allreduce(T* data, int64_t n) {
  HP_CHECK(n >= 0, "allreduce of a negative count {}", n);
  HP_CHECK(n == 0 || data != nullptr, "allreduce: null buffer for {} elements", n);
  auto state = std::make_shared<AllreduceState<T>>(*this, data, n, next_collective_tag());
  state->start();
  if (state->poll(*this)) return Request();
  collectives_.push_back(state);
  return Request(state);
}

Request Comm::iallreduce_sum(float* data, int64_t n) { return start_allreduce(data, n); }
Request Comm::iallreduce_sum(double* data, int64_t n) { return start_allreduce(data, n); }

void Comm::allreduce_sum(float* data, int64_t n) {
  Request r = start_allreduce(data, n);
  wait(r, fmt::format("allreduce of {} floats", n));
}

void Comm::allreduce_sum(double* data, int64_t n) {
  Request r = start_allreduce(data, n);
  wait(r, fmt::format("allreduce of {} doubles", n));
}

void Comm::barrier() {
  double token = 0;
  Request r = start_allreduce(&token, 1);
  wait(r, "barrier");
}

GridComms split_grid(Comm& world, int data_parallel, int pipeline, int tensor_parallel) {
  const int64_t want = static_cast<int64_t>(data_parallel) * pipeline * tensor_parallel;
  HP_CHECK(data_parallel >= 1 && pipeline >= 1 && tensor_parallel >= 1 && world.size() == want,
           "a {} x {} x {} grid (data-parallel x pipeline x tensor-parallel) needs {} ranks, the "
           "job has {}; launch with mpirun -np {}",
           data_parallel, pipeline, tensor_parallel, want, world.size(), want);
  GridComms g;
  const int T = tensor_parallel, P = pipeline;
  g.t = world.rank() % T;
  g.p = world.rank() / T % P;
  g.d = world.rank() / (T * P);
  g.pipeline = world.split(g.d * T + g.t, g.p);
  g.data = world.split(g.p * T + g.t, g.d);
  g.tensor = world.split(g.d * P + g.p, g.t);
  return g;
}

void run_then_agree(Comm& comm, const std::function<void()>& local) {
  std::string message;
  bool failed = false;
  try {
    local();
  } catch (const std::exception& e) {
    failed = true;
    message = e.what();
  }
  // Round 1: which ranks failed. Round 2: the lowest one's message, one byte per double (a sum
  // where only that rank adds anything, so it arrives exactly).
  const int n = comm.size();
  std::vector<double> flags(static_cast<size_t>(n), 0.0);
  if (failed) flags[static_cast<size_t>(comm.rank())] = 1.0;
  comm.allreduce_sum(flags.data(), n);
  int first = -1, count = 0;
  for (int r = 0; r < n; ++r) {
    if (flags[static_cast<size_t>(r)] == 0.0) continue;
    if (first < 0) first = r;
    ++count;
  }
  if (first < 0) return;
  std::vector<double> text(kAgreedMessageBytes, 0.0);
  if (comm.rank() == first) {
    for (size_t i = 0; i < message.size() && i < text.size(); ++i)
      text[i] = static_cast<unsigned char>(message[i]);
  }
  comm.allreduce_sum(text.data(), kAgreedMessageBytes);
  std::string agreed;
  for (double c : text) {
    if (c == 0.0) break;
    agreed.push_back(static_cast<char>(static_cast<unsigned char>(c)));
  }
  throw AgreedFailure(first, count, comm.rank() == first, agreed);
}

}  // namespace hp
