// Collects every pipeline stage's measured timeline on rank 0 of the pipeline comm (for the SVG /
// Chrome-trace files of `train --timeline` and `bench --timeline` under mpirun).
#pragma once

#include "comm/comm.h"
#include "schedule/timeline.h"

namespace hp {

// Collective over `pipe`: every rank's events are appended to rank 0's `tl` (they keep their own
// stage numbers and times; ranks on one host share the steady clock). Other ranks' `tl` is left
// as it was. Waits carry watchdog descriptions naming the stage.
void gather_timeline(Comm& pipe, Timeline& tl);

}  // namespace hp
