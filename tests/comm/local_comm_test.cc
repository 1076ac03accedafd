// LocalWorld (ranks on threads): message ordering and matching, any-pair traffic, the
// deterministic allreduce against a sequential sum, sub-communicators, and the failure paths
// (watchdog timeout, a failing rank, unmatched or mis-sized messages).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>

#include "comm/local_comm.h"
#include "comm/pingpong.h"
#include "util/error.h"
#include "util/timer.h"

namespace hp {
namespace {

// Passes if `text` contains `part`; the message shows the whole text otherwise.
::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

// memcmp with a byte count of 0 still requires valid pointers, and an empty vector's data() may
// be null (UBSan reports it), so an empty range is compared without calling it.
bool same_bytes(const void* a, const void* b, size_t n) {
  return n == 0 || std::memcmp(a, b, n) == 0;
}

CommOptions fast_timeout(double s) {
  CommOptions o;
  o.timeout_s = s;
  return o;
}

// Values spanning many magnitudes and both signs, so the summation order changes the bits.
template <typename T>
std::vector<T> rank_data(int rank, int64_t n) {
  std::mt19937 gen(1234u + 77u * static_cast<unsigned>(rank));
  std::uniform_real_distribution<double> mant(-1.0, 1.0);
  std::uniform_int_distribution<int> expo(-12, 12);
  std::vector<T> v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<T>(std::ldexp(mant(gen), expo(gen)));
  return v;
}

template <typename T>
std::vector<T> sequential_sum(int ranks, int64_t n, bool reverse = false) {
  std::vector<T> acc = rank_data<T>(reverse ? ranks - 1 : 0, n);
  for (int k = 1; k < ranks; ++k) {
    auto x = rank_data<T>(reverse ? ranks - 1 - k : k, n);
    for (int64_t i = 0; i < n; ++i) acc[i] += x[i];
  }
  return acc;
}

TEST(LocalComm, MessagesWithOneTagArriveInPostingOrder) {
  LocalWorld world(2, fast_timeout(20));
  world.run([](Comm& c) {
    constexpr int kN = 50;
    if (c.rank() == 0) {
      std::vector<int> out(kN);
      std::vector<Request> rs;
      for (int i = 0; i < kN; ++i) {
        out[i] = 1000 + i;
        rs.push_back(c.isend(&out[i], sizeof(int), 1, 5));
      }
      c.wait_all(rs, "ordered sends");
    } else {
      std::vector<int> in(kN, -1);
      std::vector<Request> rs;
      // Half the receives posted before the sends may have arrived, half after.
      for (int i = 0; i < kN; ++i) rs.push_back(c.irecv(&in[i], sizeof(int), 0, 5));
      c.wait_all(rs, "ordered receives");
      for (int i = 0; i < kN; ++i) EXPECT_EQ(in[i], 1000 + i);
    }
  });
}

TEST(LocalComm, SendCompletesOnlyWhenTheReceiveIsPosted) {
  LocalWorld world(2, fast_timeout(20));
  world.run([](Comm& c) {
    int x = 42, y = 0;
    if (c.rank() == 0) {
      Request s = c.isend(&x, sizeof x, 1, 0);
      EXPECT_FALSE(c.test(s));  // rank 1 posts its receive only after the barrier
      c.barrier();
      c.wait(s, "send after barrier");
    } else {
      c.barrier();
      Request r = c.irecv(&y, sizeof y, 0, 0);
      c.wait(r, "receive after barrier");
      EXPECT_EQ(y, 42);
    }
  });
}

TEST(LocalComm, EveryPairTalksInAnyOrder) {
  for (int n : {1, 3, 4}) {
    LocalWorld world(n, fast_timeout(20));
    world.run([n](Comm& c) {
      const int me = c.rank();
      std::vector<int64_t> out(static_cast<size_t>(n)), in(static_cast<size_t>(n), -1);
      std::vector<Request> rs;
      // Receives posted in descending peer order, sends in ascending, tags differ per pair.
      for (int q = n - 1; q >= 0; --q) rs.push_back(c.irecv(&in[q], sizeof(int64_t), q, 10 + q));
      for (int q = 0; q < n; ++q) {
        out[q] = 100 * me + q;
        rs.push_back(c.isend(&out[q], sizeof(int64_t), q, 10 + me));
      }
      c.wait_all(rs, "all pairs");
      for (int q = 0; q < n; ++q) EXPECT_EQ(in[q], 100 * q + me) << "rank " << me << " from " << q;
    });
  }
}

TEST(LocalComm, LargeMessageArrivesIntact) {
  LocalWorld world(2, fast_timeout(20));
  world.run([](Comm& c) {
    const int64_t n = 2 << 20;  // 8 MiB of floats
    std::vector<float> buf(static_cast<size_t>(n));
    if (c.rank() == 0) {
      for (int64_t i = 0; i < n; ++i) buf[i] = static_cast<float>(i % 9973);
      Request s = c.isend(buf.data(), n * 4, 1, 3);
      c.wait(s, "big send");
    } else {
      Request r = c.irecv(buf.data(), n * 4, 0, 3);
      while (!c.test(r)) c.progress();  // completes by polling alone
      for (int64_t i = 0; i < n; i += 4099) ASSERT_EQ(buf[i], static_cast<float>(i % 9973));
    }
  });
}

template <typename T>
void check_allreduce(int ranks, int64_t n) {
  auto expect = sequential_sum<T>(ranks, n);
  LocalWorld world(ranks, fast_timeout(20));
  world.run([&](Comm& c) {
    auto v = rank_data<T>(c.rank(), n);
    c.allreduce_sum(v.data(), n);
    ASSERT_EQ(v.size(), expect.size());
    EXPECT_TRUE(same_bytes(v.data(), expect.data(), sizeof(T) * static_cast<size_t>(n)))
        << ranks << " ranks, n " << n << ", rank " << c.rank();
  });
}

TEST(LocalComm, AllreduceIsBitwiseTheSequentialSumInRankOrder) {
  for (int ranks : {1, 2, 3, 4, 5}) {
    for (int64_t n : {0, 1, 3, 7, 1000}) {
      check_allreduce<float>(ranks, n);
      check_allreduce<double>(ranks, n);
    }
  }
  // The data is order-sensitive: summing in reverse rank order changes some bits, so the check
  // above would notice an implementation that reduced in another order.
  auto fwd = sequential_sum<float>(4, 1000), rev = sequential_sum<float>(4, 1000, true);
  EXPECT_NE(0, std::memcmp(fwd.data(), rev.data(), 4000));
}

TEST(LocalComm, ManyNonblockingAllreducesOverlapAndCompleteInAnyOrder) {
  constexpr int kRanks = 3, kBuckets = 6;
  const int64_t n = 257;
  LocalWorld world(kRanks, fast_timeout(20));
  world.run([&](Comm& c) {
    std::vector<std::vector<double>> buckets;
    std::vector<Request> rs;
    for (int b = 0; b < kBuckets; ++b) {
      buckets.push_back(rank_data<double>(c.rank() + 10 * b, n));
      rs.push_back(c.iallreduce_sum(buckets.back().data(), n));
      c.progress();
    }
    // Wait newest first: every bucket must still complete (progress drives the older ones).
    for (int b = kBuckets - 1; b >= 0; --b) c.wait(rs[b], "bucket");
    for (int b = 0; b < kBuckets; ++b) {
      std::vector<double> expect = rank_data<double>(10 * b, n);
      for (int k = 1; k < kRanks; ++k) {
        auto x = rank_data<double>(k + 10 * b, n);
        for (int64_t i = 0; i < n; ++i) expect[i] += x[i];
      }
      EXPECT_TRUE(same_bytes(buckets[b].data(), expect.data(), 8 * n)) << "bucket " << b;
    }
  });
}

TEST(LocalComm, SplitGridGivesPipelineAndDataComms) {
  constexpr int kD = 2, kP = 3;
  LocalWorld world(kD * kP, fast_timeout(20));
  world.run([&](Comm& w) {
    GridComms g = split_grid(w, kD, kP);
    EXPECT_EQ(g.d, w.rank() / kP);
    EXPECT_EQ(g.p, w.rank() % kP);
    EXPECT_EQ(g.pipeline->size(), kP);
    EXPECT_EQ(g.pipeline->rank(), g.p);
    EXPECT_EQ(g.data->size(), kD);
    EXPECT_EQ(g.data->rank(), g.d);
    EXPECT_EQ(g.pipeline->world_rank_of(1), g.d * kP + 1);
    EXPECT_EQ(g.data->world_rank_of(1), kP + g.p);
    // Data comm: sum over replicas of the world rank.
    double x = w.rank();
    g.data->allreduce_sum(&x, 1);
    EXPECT_EQ(x, g.p + (kP + g.p));
    // Pipeline comm: a ring shift with the same tag on every sub-comm must not cross replicas.
    int out = w.rank(), in = -1;
    Request r = g.pipeline->irecv(&in, sizeof in, (g.p + kP - 1) % kP, 0);
    Request s = g.pipeline->isend(&out, sizeof out, (g.p + 1) % kP, 0);
    g.pipeline->wait(r, "ring recv");
    g.pipeline->wait(s, "ring send");
    EXPECT_EQ(in, g.d * kP + (g.p + kP - 1) % kP);
    w.barrier();
  });
}

TEST(LocalComm, SplitGridRejectsAWrongWorldSize) {
  LocalWorld world(4, fast_timeout(5));
  try {
    world.run([](Comm& w) { split_grid(w, 3, 2); });
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_TRUE(Contains(e.what(), "needs 6 ranks, the job has 4"));
  }
}

TEST(LocalComm, WatchdogNamesTheRankTheOpAndThePeer) {
  LocalWorld world(3, fast_timeout(0.3));
  Timer t;
  try {
    world.run([](Comm& c) {
      if (c.rank() != 2) return;
      int x = 0;
      Request r = c.irecv(&x, sizeof x, 1, 7);  // rank 1 never sends
      c.wait(r, "recv msg 7 (F mb 0) for op 3");
    });
    FAIL() << "expected a timeout";
  } catch (const Error& e) {
    EXPECT_TRUE(Contains(e.what(), "rank 2 waits for recv msg 7 (F mb 0) for op 3 from rank 1 for 0 s"));
  }
  EXPECT_LT(t.seconds(), 5.0);
}

TEST(LocalComm, WatchdogOnASubCommNamesWorldRanks) {
  LocalWorld world(4, fast_timeout(0.3));
  try {
    world.run([](Comm& w) {
      GridComms g = split_grid(w, 2, 2);
      if (w.rank() == 3) {  // d = 1, p = 1: waits on pipeline rank 0 = world rank 2
        int x = 0;
        Request r = g.pipeline->irecv(&x, sizeof x, 0, 1);
        g.pipeline->wait(r, "activations");
      }
    });
    FAIL() << "expected a timeout";
  } catch (const Error& e) {
    EXPECT_TRUE(Contains(e.what(), "rank 3 waits for activations from rank 2"));
  }
}

TEST(LocalComm, AFailingRankStopsTheOthersInsteadOfHanging) {
  LocalWorld world(3, fast_timeout(60));
  Timer t;
  try {
    world.run([](Comm& c) {
      if (c.rank() == 1) fail("deliberate failure on rank 1");
      int x = 0;
      Request r = c.irecv(&x, sizeof x, 1, 0);
      c.wait(r, "a message rank 1 never sends");
    });
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "deliberate failure on rank 1");  // the first error, not the echoes
  }
  EXPECT_LT(t.seconds(), 10.0);
}

TEST(LocalComm, UnmatchedMessageIsReportedAfterRun) {
  LocalWorld world(2, fast_timeout(5));
  int x = 1;
  try {
    world.run([&](Comm& c) {
      if (c.rank() == 0) c.isend(&x, sizeof x, 1, 9);  // never received, never waited
    });
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_TRUE(Contains(e.what(), "send from rank 0 to rank 1 tag 9"));
  }
}

TEST(LocalComm, SizeMismatchIsAnError) {
  LocalWorld world(2, fast_timeout(5));
  try {
    world.run([](Comm& c) {
      double d = 0;
      float f = 0;
      Request r = c.rank() == 0 ? c.isend(&d, sizeof d, 1, 0) : c.irecv(&f, sizeof f, 0, 0);
      c.wait(r, "mismatched");
    });
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_TRUE(Contains(e.what(), "has 8 bytes but the receive expects 4"));
  }
}

TEST(LocalComm, BadArgumentsAndTagsAreRefused) {
  LocalWorld world(2, fast_timeout(5));
  Comm& c = world.comm(0);
  int x = 0;
  EXPECT_THROW(c.isend(&x, sizeof x, 2, 0), Error);
  EXPECT_THROW(c.isend(&x, -1, 1, 0), Error);
  EXPECT_THROW(c.irecv(&x, sizeof x, 1, c.tag_limit()), Error);  // reserved for collectives
  EXPECT_THROW(c.irecv(&x, sizeof x, 1, -3), Error);
  EXPECT_EQ(message_tag(c, 12345), 12345);
  try {
    message_tag(c, c.tag_limit());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_TRUE(Contains(e.what(), "does not fit"));
  }
  EXPECT_THROW(c.set_timeout(0), Error);
}

TEST(LocalComm, TimeoutComesFromTheEnvironment) {
  const char* old = std::getenv("HP_COMM_TIMEOUT");
  std::string saved = old ? old : "";
  unsetenv("HP_COMM_TIMEOUT");
  EXPECT_EQ(comm_timeout_from_env(), kDefaultCommTimeout);
  setenv("HP_COMM_TIMEOUT", "2.5", 1);
  EXPECT_EQ(comm_timeout_from_env(), 2.5);
  EXPECT_EQ(LocalWorld(1).comm(0).timeout(), 2.5);
  EXPECT_EQ(LocalWorld(1, fast_timeout(7)).comm(0).timeout(), 7);  // explicit option wins
  for (const char* bad : {"abc", "-1", "0", "5s", "inf", "nan"}) {
    setenv("HP_COMM_TIMEOUT", bad, 1);
    EXPECT_THROW(comm_timeout_from_env(), Error) << bad;
  }
  setenv("HP_COMM_TIMEOUT", "-1", 1);  // the message names the variable, the rule and the default
  try {
    comm_timeout_from_env();
    ADD_FAILURE() << "HP_COMM_TIMEOUT=-1 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              fmt::format("HP_COMM_TIMEOUT='-1' is not a positive number of seconds; unset it for "
                          "the default {}",
                          kDefaultCommTimeout));
  }
  if (old) setenv("HP_COMM_TIMEOUT", saved.c_str(), 1);
  else unsetenv("HP_COMM_TIMEOUT");
}

// The heartbeat's knobs (MpiComm's; docs/comm.md) read like HP_COMM_TIMEOUT. In-process ranks have
// no heartbeat: a stopped process stops all of them, and a stuck thread is the watchdog's case.
TEST(LocalComm, HeartbeatSettingsComeFromTheEnvironment) {
  struct Saved {
    const char* name;
    std::string value;
    bool set;
  };
  std::vector<Saved> saved;
  for (const char* n : {"HP_COMM_HEARTBEAT", "HP_COMM_HEARTBEAT_MISSES"}) {
    const char* v = std::getenv(n);
    saved.push_back({n, v ? v : "", v != nullptr});
    unsetenv(n);
  }
  EXPECT_EQ(comm_heartbeat_from_env(), kDefaultHeartbeat);
  EXPECT_EQ(comm_heartbeat_misses_from_env(), kDefaultHeartbeatMisses);
  // The defaults find a stopped rank within 10-20 s of waiting on it.
  EXPECT_GE((1 + kDefaultHeartbeatMisses) * kDefaultHeartbeat, 10);
  EXPECT_LE((1 + kDefaultHeartbeatMisses) * kDefaultHeartbeat, 20);
  setenv("HP_COMM_HEARTBEAT", "0.5", 1);
  setenv("HP_COMM_HEARTBEAT_MISSES", "7", 1);
  EXPECT_EQ(comm_heartbeat_from_env(), 0.5);
  EXPECT_EQ(comm_heartbeat_misses_from_env(), 7);
  setenv("HP_COMM_HEARTBEAT", "0", 1);  // off
  EXPECT_EQ(comm_heartbeat_from_env(), 0);
  for (const char* bad : {"abc", "-1", "2s", "inf"}) {
    setenv("HP_COMM_HEARTBEAT", bad, 1);
    EXPECT_THROW(comm_heartbeat_from_env(), Error) << bad;
  }
  for (const char* bad : {"0", "1", "-2", "1.5", "x", "1000001", "99999999999999999999"}) {
    setenv("HP_COMM_HEARTBEAT_MISSES", bad, 1);
    EXPECT_THROW(comm_heartbeat_misses_from_env(), Error) << bad;
  }
  EXPECT_EQ(LocalWorld(2).comm(0).liveness(), nullptr);
  {
    const char* pt = std::getenv("HP_COMM_PROGRESS_THREAD");
    const std::string pt_saved = pt ? pt : "";
    unsetenv("HP_COMM_PROGRESS_THREAD");
    EXPECT_FALSE(comm_progress_thread_from_env());
    setenv("HP_COMM_PROGRESS_THREAD", "1", 1);
    EXPECT_TRUE(comm_progress_thread_from_env());
    setenv("HP_COMM_PROGRESS_THREAD", "0", 1);
    EXPECT_FALSE(comm_progress_thread_from_env());
    for (const char* bad : {"2", "yes", "-1"}) {
      setenv("HP_COMM_PROGRESS_THREAD", bad, 1);
      EXPECT_THROW(comm_progress_thread_from_env(), Error) << bad;
    }
    if (pt) setenv("HP_COMM_PROGRESS_THREAD", pt_saved.c_str(), 1);
    else unsetenv("HP_COMM_PROGRESS_THREAD");
  }
  for (const Saved& s : saved) {
    if (s.set) setenv(s.name, s.value.c_str(), 1);
    else unsetenv(s.name);
  }
}

TEST(LocalComm, PeerLivenessCountsSilenceFromTheLastAnswer) {
  PeerLiveness live(3, 0.5, 4);
  EXPECT_EQ(live.limit_s(), 2.0);
  EXPECT_LT(live.last_seen(1), -1e100);  // never heard from
  const double before = now_seconds();
  live.saw(1);
  EXPECT_GE(live.last_seen(1), before);
  live.saw(7);  // not a rank: ignored
  EXPECT_FALSE(live.watched(2));
  live.watch(2);
  live.watch(2);
  live.unwatch(2);
  EXPECT_TRUE(live.watched(2));
  live.unwatch(2);
  EXPECT_FALSE(live.watched(2));
  EXPECT_THROW(PeerLiveness(2, 0, 3), Error);
  EXPECT_THROW(PeerLiveness(2, 1, 1), Error);
}

// run_then_agree: every rank fails its local check, each with its own message. The rank that
// finishes the agreement first ends the world while the others may still be inside the second
// all-reduce; their freed buffers must not be written (CI's ASan run caught one written; before
// the fix under the lock in LocalComm::post, 3 runs in 5 of this test under ASan reported it).
// Repeated so the sanitizer builds meet the race window many times.
TEST(LocalComm, RunThenAgreeOnEveryRankFailingEndsWithTheLowestRanksMessage) {
  for (int round = 0; round < 1000; ++round) {
    SCOPED_TRACE(round);
    LocalWorld world(3, fast_timeout(30));
    try {
      world.run([](Comm& c) {
        run_then_agree(c, [&] { throw Error(fmt::format("rank {} says no", c.rank())); });
      });
      ADD_FAILURE() << "no rank threw";
    } catch (const AgreedFailure& e) {
      EXPECT_STREQ(e.what(), "rank 0 says no");
      EXPECT_EQ(e.failed_rank(), 0);
      EXPECT_EQ(e.failed_ranks(), 3);
    }
  }
  // Only rank 2 fails: every rank agrees on its message, and no rank returns normally.
  LocalWorld world(3, fast_timeout(30));
  std::vector<int> returned(3, 0);
  EXPECT_THROW(world.run([&](Comm& c) {
    run_then_agree(c, [&] {
      if (c.rank() == 2) throw Error("only rank 2");
    });
    returned[static_cast<size_t>(c.rank())] = 1;
  }),
               AgreedFailure);
  EXPECT_EQ(returned, std::vector<int>(3, 0));
}

TEST(LocalComm, PingPongGivesEveryRankRankZerosLinkFigures) {
  LocalWorld world(3, fast_timeout(30));
  std::vector<LinkEstimate> got(3);
  world.run([&](Comm& c) { got[static_cast<size_t>(c.rank())] = measure_link(c, 1 << 20, 5); });
  for (const LinkEstimate& e : got) {
    EXPECT_GT(e.latency_s, 0);
    EXPECT_GT(e.bandwidth_Bps, 0);
    // Two medians of a loaded machine need not be ordered; the bandwidth is their stated formula.
    EXPECT_GT(e.big_one_way_s, 0);
    EXPECT_DOUBLE_EQ(e.bandwidth_Bps,
                     static_cast<double>(1 << 20) / std::max(e.big_one_way_s - e.latency_s, 1e-9));
    EXPECT_EQ(e.bytes, 1 << 20);
    EXPECT_EQ(e.latency_s, got[0].latency_s);  // the all-reduce hands out rank 0's figures
    EXPECT_EQ(e.bandwidth_Bps, got[0].bandwidth_Bps);
  }
  LocalWorld one(1, fast_timeout(5));
  EXPECT_THROW(one.run([](Comm& c) { measure_link(c, 1024, 1); }), Error);
}

}  // namespace
}  // namespace hp
