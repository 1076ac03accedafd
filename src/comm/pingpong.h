// A link estimate from a ping-pong between ranks 0 and 1 of a comm, through the same Comm calls
// (isend / irecv / wait) the pipeline runtime uses, so it includes their polling overhead.
// `helixpipe profile` under mpirun writes it into the part-cost file for the simulator, whose
// transfer model is latency + bytes / bandwidth.
#pragma once

#include <cstdint>

#include "comm/comm.h"

namespace hp {

struct LinkEstimate {
  double latency_s = 0;       // half of the median round trip of an 8-byte message
  double bandwidth_Bps = 0;   // bytes / (half round trip of a `bytes` message - latency)
  double big_one_way_s = 0;   // half of the median round trip of a `bytes` message
  int64_t bytes = 0;
  int repeats = 0;
};

// Collective over `comm` (size >= 2): ranks 0 and 1 bounce messages `repeats` times for each size
// (after a few untimed rounds), every other rank only joins the final all-reduce; every rank
// returns rank 0's figures. Throws hp::Error on a bad argument.
LinkEstimate measure_link(Comm& comm, int64_t bytes, int repeats);

}  // namespace hp
