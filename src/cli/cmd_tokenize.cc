// helixpipe tokenize: placeholder until issue 3 lands.
#include "cli/commands.h"
#include "util/error.h"

namespace hp::cli {

int cmd_tokenize(int, char**) { fail("'tokenize' is not built yet (issue 3)"); }

}  // namespace hp::cli
