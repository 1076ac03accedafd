// helixpipe simulate: placeholder until issue 2 lands.
#include "cli/commands.h"
#include "util/error.h"

namespace hp::cli {

int cmd_simulate(int, char**) { fail("'simulate' is not built yet (issue 2)"); }

}  // namespace hp::cli
