// helixpipe generate: placeholder until issue 3 lands.
#include "cli/commands.h"
#include "util/error.h"

namespace hp::cli {

int cmd_generate(int, char**) { fail("'generate' is not built yet (issue 3)"); }

}  // namespace hp::cli
