#include "comm/pingpong.h"

#include <algorithm>
#include <vector>

#include "util/error.h"
#include "util/timer.h"

namespace hp {

namespace {

// Median round trip of `repeats` bounces of `bytes` bytes between ranks 0 and 1 (rank 0 times).
double round_trip(Comm& comm, std::vector<char>& buf, int64_t bytes, int repeats, int tag) {
  const int me = comm.rank();
  const int peer = 1 - me;
  const int warmup = 3;
  std::vector<double> t;
  for (int r = 0; r < warmup + repeats; ++r) {
    const double t0 = now_seconds();
    if (me == 0) {
      Request s = comm.isend(buf.data(), bytes, peer, tag);
      Request q = comm.irecv(buf.data() + bytes, bytes, peer, tag);
      comm.wait(s, "ping-pong send to rank 1");
      comm.wait(q, "ping-pong reply from rank 1");
    } else {
      Request q = comm.irecv(buf.data(), bytes, peer, tag);
      comm.wait(q, "ping-pong message from rank 0");
      Request s = comm.isend(buf.data(), bytes, peer, tag);
      comm.wait(s, "ping-pong reply to rank 0");
    }
    if (r >= warmup) t.push_back(now_seconds() - t0);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

LinkEstimate measure_link(Comm& comm, int64_t bytes, int repeats) {
  HP_CHECK(comm.size() >= 2, "measure_link: needs at least 2 ranks, the comm has {}", comm.size());
  HP_CHECK(bytes >= 8 && repeats >= 1,
           "measure_link: message bytes ({}) must be >= 8 and repeats ({}) >= 1", bytes, repeats);
  double out[3] = {0, 0, 0};
  if (comm.rank() <= 1) {
    std::vector<char> buf(static_cast<size_t>(2 * bytes), 1);
    const double small = round_trip(comm, buf, 8, std::max(repeats, 20), 0) / 2;
    const double big = round_trip(comm, buf, bytes, repeats, 1) / 2;
    if (comm.rank() == 0) {
      out[0] = small;
      out[1] = static_cast<double>(bytes) / std::max(big - small, 1e-9);
      out[2] = big;
    }
  }
  comm.allreduce_sum(out, 3);
  return LinkEstimate{out[0], out[1], out[2], bytes, repeats};
}

}  // namespace hp
