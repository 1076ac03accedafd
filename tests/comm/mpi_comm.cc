// MpiComm under mpirun: the same semantics LocalWorld tests, over OpenMPI, plus the failure paths
// (a hung wait and a killed, stopped or failing rank must end the whole job with a message naming
// them) and the heartbeat's other half: a rank busy computing is not taken for a stopped one.
// hp_mpi_test(comm_mpi_4ranks 4 60 --gtest_brief=1)
// hp_mpi_test(comm_mpi_3ranks_progress_thread 3 60 --gtest_brief=1 --progress-thread)
// hp_mpi_test(comm_mpi_2ranks_progress_env 2 60 --gtest_brief=1 --expect-progress-thread ENV HP_COMM_PROGRESS_THREAD=1)
// hp_mpi_test(comm_mpi_watchdog 2 60 --mode=hang EXPECT_FAIL "rank 0 waits for recv of a message rank 1 never sends from rank 1 for 2 s")
// hp_mpi_test(comm_mpi_killed_rank 3 60 --mode=kill EXPECT_FAIL "rank 1 .*(signal 9|Killed)")
// hp_mpi_test(comm_mpi_failing_rank 3 60 --mode=throw EXPECT_FAIL "rank 2: error: deliberate failure")
// hp_mpi_test(comm_mpi_stopped_rank 3 60 --mode=stop EXPECT_FAIL "rank 0 waits for a message from the stopped rank from rank 1: no heartbeat for [0-9] s .stopped or hung... waited [0-9] s" ENV HP_COMM_HEARTBEAT=0.25 HP_COMM_HEARTBEAT_MISSES=4)
// hp_mpi_test(comm_mpi_busy_rank 2 60 --mode=busy ENV HP_COMM_HEARTBEAT=0.2 HP_COMM_HEARTBEAT_MISSES=3)
#include <gtest/gtest.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>

#include "comm/mpi_comm.h"
#include "util/error.h"
#include "util/timer.h"

namespace hp {
namespace {

Comm* g_world = nullptr;

// memcmp with a byte count of 0 still requires valid pointers, and an empty vector's data() may
// be null (UBSan reports it), so an empty range is compared without calling it.
bool same_bytes(const void* a, const void* b, size_t n) {
  return n == 0 || std::memcmp(a, b, n) == 0;
}

template <typename T>
std::vector<T> rank_data(int rank, int64_t n) {
  std::mt19937 gen(99u + 31u * static_cast<unsigned>(rank));
  std::uniform_real_distribution<double> mant(-1.0, 1.0);
  std::uniform_int_distribution<int> expo(-12, 12);
  std::vector<T> v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<T>(std::ldexp(mant(gen), expo(gen)));
  return v;
}

TEST(MpiComm, OrderingAndEveryPair) {
  Comm& c = *g_world;
  const int n = c.size(), me = c.rank();
  constexpr int kPerPair = 20;
  std::vector<int64_t> out(static_cast<size_t>(n * kPerPair)), in(out.size(), -1);
  std::vector<Request> rs;
  for (int q = n - 1; q >= 0; --q)
    for (int i = 0; i < kPerPair; ++i)
      rs.push_back(c.irecv(&in[q * kPerPair + i], sizeof(int64_t), q, 4));
  for (int q = 0; q < n; ++q)
    for (int i = 0; i < kPerPair; ++i) {
      out[q * kPerPair + i] = 10000 * me + 100 * q + i;
      rs.push_back(c.isend(&out[q * kPerPair + i], sizeof(int64_t), q, 4));
    }
  c.wait_all(rs, "pairwise messages");
  for (int q = 0; q < n; ++q)
    for (int i = 0; i < kPerPair; ++i) EXPECT_EQ(in[q * kPerPair + i], 10000 * q + 100 * me + i);
}

TEST(MpiComm, AllreduceIsBitwiseTheSequentialSum) {
  Comm& c = *g_world;
  for (int64_t n : {0, 1, 5, 4099}) {
    auto v = rank_data<float>(c.rank(), n);
    c.allreduce_sum(v.data(), n);
    auto expect = rank_data<float>(0, n);
    for (int k = 1; k < c.size(); ++k) {
      auto x = rank_data<float>(k, n);
      for (int64_t i = 0; i < n; ++i) expect[i] += x[i];
    }
    EXPECT_TRUE(same_bytes(v.data(), expect.data(), 4 * static_cast<size_t>(n))) << "n " << n;
    auto d = rank_data<double>(c.rank(), n);
    c.allreduce_sum(d.data(), n);
    // Every rank holds the same bits: compare against rank 0's copy.
    std::vector<double> zero(d.size(), 0.0);
    if (c.rank() == 0) zero = d;
    c.allreduce_sum(zero.data(), n);  // exact: adds zeros to rank 0's values
    EXPECT_TRUE(same_bytes(d.data(), zero.data(), 8 * static_cast<size_t>(n))) << "n " << n;
  }
}

TEST(MpiComm, NonblockingAllreducesProgressWhileComputing) {
  Comm& c = *g_world;
  constexpr int kBuckets = 4;
  const int64_t n = 100000;
  std::vector<std::vector<float>> b;
  std::vector<Request> rs;
  for (int k = 0; k < kBuckets; ++k) {
    b.push_back(std::vector<float>(static_cast<size_t>(n), static_cast<float>(c.rank() + k)));
    rs.push_back(c.iallreduce_sum(b.back().data(), n));
  }
  // "Compute" while polling, as the executor does between ops.
  volatile double sink = 0;
  for (int step = 0; step < 200; ++step) {
    for (int i = 0; i < 1000; ++i) sink = sink + i * 1e-9;
    c.progress();
  }
  for (int k = kBuckets - 1; k >= 0; --k) c.wait(rs[k], "bucket allreduce");
  const int P = c.size();
  for (int k = 0; k < kBuckets; ++k) {
    float expect = 0;
    for (int r = 0; r < P; ++r) expect += static_cast<float>(r + k);
    EXPECT_EQ(b[k][0], expect);
    EXPECT_EQ(b[k][n - 1], expect);
  }
}

TEST(MpiComm, LargeMessageCompletesWhenTheReceiverOnlyPolls) {
  Comm& c = *g_world;
  if (c.size() < 2) GTEST_SKIP();
  const int64_t n = 16 << 20;  // 64 MiB: far above the eager limit, so rendezvous
  std::vector<float> buf;
  if (c.rank() == 0) {
    buf.assign(static_cast<size_t>(n), 0.f);
    for (int64_t i = 0; i < n; i += 1024) buf[i] = static_cast<float>(i / 1024);
    Request s = c.isend(buf.data(), n * 4, 1, 2);
    c.wait(s, "large send");
  } else if (c.rank() == 1) {
    buf.assign(static_cast<size_t>(n), -1.f);
    Request r = c.irecv(buf.data(), n * 4, 0, 2);
    while (!c.test(r)) c.progress();
    for (int64_t i = 0; i < n; i += 1024 * 997) ASSERT_EQ(buf[i], static_cast<float>(i / 1024));
  }
  c.barrier();
}

TEST(MpiComm, SplitGrid) {
  Comm& w = *g_world;
  const int P = w.size() % 2 == 0 ? 2 : 1, D = w.size() / P;
  GridComms g = split_grid(w, D, P);
  EXPECT_EQ(g.pipeline->size(), P);
  EXPECT_EQ(g.data->size(), D);
  EXPECT_EQ(g.pipeline->rank(), w.rank() % P);
  EXPECT_EQ(g.data->world_rank_of(g.data->rank()), w.rank());
  double x = w.rank();
  g.data->allreduce_sum(&x, 1);
  double expect = 0;
  for (int d = 0; d < D; ++d) expect += d * P + g.p;
  EXPECT_EQ(x, expect);
  int out = w.rank(), in = -1;
  Request r = g.pipeline->irecv(&in, sizeof in, (g.p + P - 1) % P, 0);
  Request s = g.pipeline->isend(&out, sizeof out, (g.p + 1) % P, 0);
  g.pipeline->wait(r, "ring recv");
  g.pipeline->wait(s, "ring send");
  EXPECT_EQ(in, g.d * P + (g.p + P - 1) % P);
  w.barrier();
}

TEST(MpiComm, MpiTagBoundIsRespected) {
  Comm& c = *g_world;
  EXPECT_GT(c.tag_limit(), 30000);  // MPI guarantees MPI_TAG_UB >= 32767
  EXPECT_THROW(message_tag(c, c.tag_limit()), Error);
  EXPECT_EQ(message_tag(c, c.tag_limit() - 1), c.tag_limit() - 1);
}

// ---- deliberately failing jobs (run with --mode=...) ----
int run_failure_mode(Comm& c, const std::string& mode) {
  if (mode == "hang") {
    // Rank 0 waits for a message nobody sends; its watchdog (2 s) must end the job.
    int x = 0;
    if (c.rank() == 0) {
      c.set_timeout(2);
      Request r = c.irecv(&x, sizeof x, 1, 0);
      c.wait(r, "recv of a message rank 1 never sends");
    } else {
      Request r = c.irecv(&x, sizeof x, 0, 0);
      c.wait(r, "a message rank 0 never sends");  // default timeout: rank 0 fires first
    }
  } else if (mode == "kill") {
    c.barrier();
    if (c.rank() == 1) std::raise(SIGKILL);
    int x = 0;
    Request r = c.irecv(&x, sizeof x, 1, 0);
    c.wait(r, "a message from the killed rank");
  } else if (mode == "throw") {
    c.barrier();
    if (c.rank() == 2) fail("deliberate failure");
    int x = 0;
    Request r = c.irecv(&x, sizeof x, 2, 0);
    c.wait(r, "a message from the failing rank");
  } else if (mode == "stop") {
    // Rank 1 is stopped (SIGSTOP: every thread of it, the heartbeat's too). Rank 0 waits on it
    // through the pipeline-like sub-comm {0, 1}, so the message must name world ranks; rank 2
    // waits on rank 0, which is alive, and must not be the one that reports.
    HP_CHECK(c.liveness() != nullptr, "the heartbeat is off; set HP_COMM_HEARTBEAT");
    auto pair = c.split(c.rank() < 2 ? 0 : 1, c.rank());
    c.barrier();
    if (c.rank() == 1) std::raise(SIGSTOP);
    int x = 0;
    if (c.rank() == 0) {
      Request r = pair->irecv(&x, sizeof x, 1, 0);
      pair->wait(r, "a message from the stopped rank");
    } else {
      Request r = c.irecv(&x, sizeof x, 0, 0);
      c.wait(r, "a message rank 0 never sends");
    }
  } else if (mode == "busy") {
    // Rank 1 computes for 3 s without entering MPI while rank 0 waits on it: far longer than the
    // heartbeat's limit (0.2 s x 3 misses), yet its heartbeat thread answers, so the wait goes on.
    const PeerLiveness* live = c.liveness();
    HP_CHECK(live != nullptr, "the heartbeat is off; set HP_COMM_HEARTBEAT");
    HP_CHECK(live->limit_s() < 1, "the heartbeat limit is {} s; this test needs < 1 s",
             live->limit_s());
    c.barrier();
    int x = 0;
    const double start = now_seconds();
    if (c.rank() == 1) {
      volatile double sink = 0;
      while (now_seconds() - start < 3) {
        for (int i = 0; i < 100000; ++i) sink = sink + 1e-9 * i;
      }
      x = 42;
      Request s = c.isend(&x, sizeof x, 0, 0);
      c.wait(s, "the busy rank's message");
    } else if (c.rank() == 0) {
      Request r = c.irecv(&x, sizeof x, 1, 0);
      c.wait(r, "a message from a rank busy computing");
      HP_CHECK(x == 42, "got {} from rank 1, expected 42", x);
      HP_CHECK(now_seconds() - start > 2.5, "the wait ended after {} s; rank 1 computes 3 s",
               now_seconds() - start);
      // Rank 1 answered pings while it computed: its last answer came during the wait.
      HP_CHECK(live->last_seen(1) > start + 1, "no heartbeat answer from rank 1 during the wait");
    }
    c.barrier();
    if (c.rank() == 0) std::printf("busy rank: the wait lasted the 3 s of compute, no heartbeat trip\n");
  } else {
    fail("unknown --mode={}", mode);
  }
  return 0;
}

}  // namespace
}  // namespace hp

int main(int argc, char** argv) {
  hp::CommOptions options;
  std::string mode;
  bool expect_progress_thread = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--progress-thread") options.progress_thread = expect_progress_thread = true;
    if (a == "--expect-progress-thread") expect_progress_thread = true;
    if (a.rfind("--mode=", 0) == 0) mode = a.substr(7);
  }
  options.timeout_s = 30;  // a broken test ends in 30 s with a message, well inside ctest's limit
  auto world = hp::MpiComm::init_world(&argc, &argv, options);
  int rc = 0;
  try {
    HP_CHECK(world->has_progress_thread() == expect_progress_thread,
             "the progress thread is {}, expected {}", world->has_progress_thread() ? "on" : "off",
             expect_progress_thread ? "on" : "off");
    if (!mode.empty()) {
      rc = hp::run_failure_mode(*world, mode);
    } else {
      ::testing::InitGoogleTest(&argc, argv);
      hp::g_world = world.get();
      int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
      double any = failed;
      world->allreduce_sum(&any, 1);  // every rank exits with the same verdict
      rc = any > 0 ? 1 : 0;
    }
  } catch (const std::exception& e) {
    world->abort(std::string("rank ") + std::to_string(world->rank()) + ": error: " + e.what());
  }
  return rc;
}
