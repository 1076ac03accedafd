// helixpipe compare: placeholder until issue 2 lands.
#include "cli/commands.h"
#include "util/error.h"

namespace hp::cli {

int cmd_compare(int, char**) { fail("'compare' is not built yet (issue 2)"); }

}  // namespace hp::cli
