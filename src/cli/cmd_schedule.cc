// helixpipe schedule: placeholder until issue 2 lands.
#include "cli/commands.h"
#include "util/error.h"

namespace hp::cli {

int cmd_schedule(int, char**) { fail("'schedule' is not built yet (issue 2)"); }

}  // namespace hp::cli
