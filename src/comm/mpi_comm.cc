// MpiComm over the MPI C API. Errors return codes (MPI_ERRORS_RETURN) so each failure becomes an
// hp::Error naming the call, the rank and the peer instead of OpenMPI's generic abort.
#include "comm/mpi_comm.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "util/error.h"
#include "util/timer.h"

namespace hp {
namespace {

// Messages above this are cut into pieces with the same tag (MPI counts are int; MPI keeps the
// pieces in order because they share source, tag and comm).
constexpr int64_t kMaxPiece = int64_t{1} << 30;

int world_rank_or_minus_one() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  int r = -1;
  if (init && !fin) MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

template <typename... Args>
void mpi_check(int rc, fmt::format_string<Args...> what, Args&&... args) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  fail("rank {}: {} failed: {} (MPI error {})", world_rank_or_minus_one(),
       fmt::format(what, std::forward<Args>(args)...), std::string(text, static_cast<size_t>(len)), rc);
}

struct MpiReq : RequestState {
  std::vector<MPI_Request> reqs;
  std::vector<int> piece_bytes;  // expected size of each piece (receives)
  bool is_recv = false;
  bool done = false;
  int peer = 0, tag = 0;
  int world_peer = 0;

  bool poll(Comm&) override {
    if (done) return true;
    int flag = 0;
    std::vector<MPI_Status> st(reqs.size());
    mpi_check(MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &flag, st.data()),
              "MPI_Testall on a {} with rank {} (tag {})", is_recv ? "receive" : "send", world_peer, tag);
    if (!flag) return false;
    if (is_recv) {
      for (size_t i = 0; i < st.size(); ++i) {
        int count = 0;
        mpi_check(MPI_Get_count(&st[i], MPI_BYTE, &count), "MPI_Get_count");
        HP_CHECK(count == piece_bytes[i],
                 "rank {}: message from rank {} with tag {} has {} bytes in piece {} but the receive "
                 "expects {}; the two ranks disagree on the message size", world_rank_or_minus_one(),
                 world_peer, tag, count, i, piece_bytes[i]);
      }
    }
    done = true;
    return true;
  }
  int pending_peer() const override { return done ? -1 : peer; }
};

}  // namespace

bool MpiComm::launched_by_mpirun() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(v) != nullptr) return true;
  return false;
}

void MpiComm::abort_job(const std::string& message, int code) {
  if (!message.empty()) std::fprintf(stderr, "helixpipe: %s\n", message.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

std::unique_ptr<MpiComm> MpiComm::init_world(int* argc, char*** argv, const CommOptions& options) {
  int init = 0;
  MPI_Initialized(&init);
  HP_CHECK(!init, "MpiComm::init_world called twice (MPI is already initialized)");
  // A job that ends on an error says why in its own words (docs/cli.md); Open MPI's banner about
  // MPI_Abort would only repeat it. HP_MPI_VERBOSE=1 keeps the banner (as does setting the MCA
  // parameter yourself).
  const char* verbose = std::getenv("HP_MPI_VERBOSE");
  if (verbose == nullptr || std::string(verbose) != "1")
    setenv("OMPI_MCA_orte_execute_quiet", "1", /*overwrite=*/0);
  // The heartbeat's settings are read before MPI starts: its thread needs MPI_THREAD_MULTIPLE.
  double heartbeat = options.heartbeat_s >= 0 ? options.heartbeat_s : comm_heartbeat_from_env();
  const int misses = options.heartbeat_misses > 0 ? options.heartbeat_misses
                                                   : comm_heartbeat_misses_from_env();
  CommOptions o = options;
  o.progress_thread = o.progress_thread || comm_progress_thread_from_env();
  const bool threads = o.progress_thread || heartbeat > 0;
  int want = threads ? MPI_THREAD_MULTIPLE : MPI_THREAD_FUNNELED;
  int got = 0;
  int rc = MPI_Init_thread(argc, argv, want, &got);
  HP_CHECK(rc == MPI_SUCCESS, "MPI_Init_thread failed (MPI error {}); is this an MPI launch?", rc);
  mpi_check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  if (o.progress_thread && got < MPI_THREAD_MULTIPLE) {
    std::fprintf(stderr, "helixpipe: this MPI lacks MPI_THREAD_MULTIPLE; running without a "
                         "progress thread (progress comes from polling)\n");
    o.progress_thread = false;
  }
  if (heartbeat > 0 && got < MPI_THREAD_MULTIPLE) {
    if (world_rank_or_minus_one() == 0)
      std::fprintf(stderr, "helixpipe: this MPI lacks MPI_THREAD_MULTIPLE; running without a "
                           "heartbeat (a stopped rank is found by the comm timeout only)\n");
    heartbeat = 0;
  }
  auto world = std::unique_ptr<MpiComm>(new MpiComm(MPI_COMM_WORLD, true, o));
  if (o.progress_thread) world->start_progress_thread();
  if (heartbeat > 0 && world->size() > 1) world->start_heartbeat_thread(heartbeat, misses);
  return world;
}

MpiComm::MpiComm(MPI_Comm comm, bool is_world, const CommOptions& options)
    : Comm(options), comm_(comm), is_world_(is_world), options_(options) {
  mpi_check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  mpi_check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  int* ub = nullptr;
  int found = 0;
  mpi_check(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &found), "MPI_Comm_get_attr(MPI_TAG_UB)");
  HP_CHECK(found && ub != nullptr && *ub >= 32767, "MPI reports no usable MPI_TAG_UB");
  tag_ub_ = *ub;
  // Translate our ranks to world ranks once, for messages that must name a process.
  MPI_Group mine, world;
  mpi_check(MPI_Comm_group(comm_, &mine), "MPI_Comm_group");
  mpi_check(MPI_Comm_group(MPI_COMM_WORLD, &world), "MPI_Comm_group(world)");
  std::vector<int> ranks(static_cast<size_t>(size_));
  for (int i = 0; i < size_; ++i) ranks[static_cast<size_t>(i)] = i;
  world_ranks_.resize(ranks.size());
  mpi_check(MPI_Group_translate_ranks(mine, size_, ranks.data(), world, world_ranks_.data()),
            "MPI_Group_translate_ranks");
  MPI_Group_free(&mine);
  MPI_Group_free(&world);
}

MpiComm::~MpiComm() {
  stop_ = true;
  if (progress_thread_.joinable()) progress_thread_.join();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
  if (!is_world_) {
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Comm_free(&comm_);
    return;
  }
  if (std::uncaught_exceptions() > 0) {
    // Finalizing now would hang the ranks still waiting on this one.
    abort_job(fmt::format("rank {} is exiting on an uncaught error; aborting the job", rank_));
  }
  MPI_Finalize();
}

int MpiComm::world_rank_of(int peer) const { return world_ranks_.at(static_cast<size_t>(peer)); }

std::unique_ptr<Comm> MpiComm::split(int color, int key) {
  HP_CHECK(color >= 0, "split: color must be >= 0, got {}", color);
  MPI_Comm sub = MPI_COMM_NULL;
  mpi_check(MPI_Comm_split(comm_, color, key, &sub), "MPI_Comm_split(color {}, key {})", color, key);
  mpi_check(MPI_Comm_set_errhandler(sub, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  CommOptions o = options_;
  o.timeout_s = timeout();
  o.progress_thread = false;  // the world's thread drives MPI's (global) progress engine
  auto c = std::unique_ptr<MpiComm>(new MpiComm(sub, false, o));
  c->set_liveness(shared_liveness());  // the world's heartbeat watches every process
  return c;
}

void MpiComm::abort(const std::string& message) { abort_job(message); }

std::shared_ptr<RequestState> MpiComm::start_send(const void* buf, int64_t bytes, int peer, int tag) {
  auto req = std::make_shared<MpiReq>();
  req->peer = peer;
  req->tag = tag;
  req->world_peer = world_rank_of(peer);
  const char* p = static_cast<const char*>(buf);
  for (int64_t off = 0; off < bytes || (bytes == 0 && off == 0); off += kMaxPiece) {
    int n = static_cast<int>(std::min(kMaxPiece, bytes - off));
    MPI_Request r = MPI_REQUEST_NULL;
    mpi_check(MPI_Isend(p + off, n, MPI_BYTE, peer, tag, comm_, &r),
              "MPI_Isend of {} bytes to rank {} (tag {})", n, req->world_peer, tag);
    req->reqs.push_back(r);
    if (bytes == 0) break;
  }
  return req;
}

std::shared_ptr<RequestState> MpiComm::start_recv(void* buf, int64_t bytes, int peer, int tag) {
  auto req = std::make_shared<MpiReq>();
  req->is_recv = true;
  req->peer = peer;
  req->tag = tag;
  req->world_peer = world_rank_of(peer);
  char* p = static_cast<char*>(buf);
  for (int64_t off = 0; off < bytes || (bytes == 0 && off == 0); off += kMaxPiece) {
    int n = static_cast<int>(std::min(kMaxPiece, bytes - off));
    MPI_Request r = MPI_REQUEST_NULL;
    mpi_check(MPI_Irecv(p + off, n, MPI_BYTE, peer, tag, comm_, &r),
              "MPI_Irecv of {} bytes from rank {} (tag {})", n, req->world_peer, tag);
    req->reqs.push_back(r);
    req->piece_bytes.push_back(n);
    if (bytes == 0) break;
  }
  return req;
}

void MpiComm::transport_progress() {
  // Any MPI call that can complete communication enters OpenMPI's progress engine.
  int flag = 0;
  mpi_check(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm_, &flag, MPI_STATUS_IGNORE), "MPI_Iprobe");
}

void MpiComm::start_progress_thread() {
  progress_thread_ = std::thread([this] {
    while (!stop_.load(std::memory_order_relaxed)) {
      int flag = 0;
      MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm_, &flag, MPI_STATUS_IGNORE);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  });
}

void MpiComm::start_heartbeat_thread(double period_s, int misses) {
  mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &hb_comm_), "MPI_Comm_dup (heartbeat)");
  mpi_check(MPI_Comm_set_errhandler(hb_comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  set_liveness(std::make_shared<PeerLiveness>(size_, period_s, misses));
  heartbeat_thread_ = std::thread([this] { heartbeat_loop(); });
}

void MpiComm::heartbeat_loop() {
  // Runs beside the caller's compute, so a rank busy in a long op still answers: only a process
  // that is stopped (SIGSTOP, a debugger), hung in the kernel or cut off goes silent. Errors of
  // its MPI calls are ignored: the waits, not this thread, report failures.
  PeerLiveness& live = *shared_liveness();
  constexpr int kPing = 1, kAnswer = 2;
  constexpr size_t kMaxInFlight = 256;  // sends to stopped peers may never complete
  static const int payload = 0;
  const double tick = std::clamp(live.period_s() / 8, 0.001, 0.05);
  int inbox = 0;
  MPI_Request recv = MPI_REQUEST_NULL;
  MPI_Irecv(&inbox, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, hb_comm_, &recv);
  std::vector<MPI_Request> sends;
  std::vector<double> last_ping(static_cast<size_t>(size_), -1e300);
  auto send = [&](int peer, int tag) {
    if (sends.size() >= kMaxInFlight) return;
    MPI_Request r = MPI_REQUEST_NULL;
    if (MPI_Isend(&payload, 1, MPI_INT, peer, tag, hb_comm_, &r) == MPI_SUCCESS)
      sends.push_back(r);
  };
  while (!stop_.load(std::memory_order_relaxed)) {
    while (recv != MPI_REQUEST_NULL) {  // every message that has arrived
      int flag = 0;
      MPI_Status st;
      if (MPI_Test(&recv, &flag, &st) != MPI_SUCCESS || !flag) break;
      live.saw(st.MPI_SOURCE);
      if (st.MPI_TAG == kPing) send(st.MPI_SOURCE, kAnswer);
      recv = MPI_REQUEST_NULL;
      MPI_Irecv(&inbox, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, hb_comm_, &recv);
    }
    std::erase_if(sends, [](MPI_Request& r) {
      int done = 0;
      return MPI_Test(&r, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || done;
    });
    const double now = now_seconds();
    for (int p = 0; p < size_; ++p) {
      double& last = last_ping[static_cast<size_t>(p)];
      if (p == rank_ || !live.watched(p) || now - last < live.period_s()) continue;
      send(p, kPing);
      last = now;
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(tick));
  }
  if (recv != MPI_REQUEST_NULL) {
    MPI_Cancel(&recv);
    MPI_Wait(&recv, MPI_STATUS_IGNORE);
  }
  // Answers still in flight complete on their own (they are a few bytes, sent eagerly).
  for (MPI_Request& r : sends) MPI_Request_free(&r);
}

}  // namespace hp
