// helixpipe eval: placeholder until issue 3 lands.
#include "cli/commands.h"
#include "util/error.h"

namespace hp::cli {

int cmd_eval(int, char**) { fail("'eval' is not built yet (issue 3)"); }

}  // namespace hp::cli
