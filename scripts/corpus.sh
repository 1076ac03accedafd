#!/usr/bin/env bash
# Writes the demo's English text to FILE unless it is there already: the Vim user manual
# (usr_*.txt) where the image has it, else the King James Bible (Debian's bible-kjv).
# Usage: scripts/corpus.sh FILE
set -euo pipefail
text=${1:?usage: scripts/corpus.sh FILE}
[ -s "$text" ] && exit 0
if compgen -G "/usr/share/vim/vim90/doc/usr_*.txt" >/dev/null; then
  cat /usr/share/vim/vim90/doc/usr_*.txt >"$text.tmp"
else
  "$(dirname "$0")/install_deps.sh" bible-kjv
  bible -f "gen1:1-rev22:21" >"$text.tmp"
fi
mv "$text.tmp" "$text"
