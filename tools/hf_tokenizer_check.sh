#!/usr/bin/env bash
# Checks helixpipe's tokenizer.json with an independent reader: transformers.js
# (@huggingface/transformers on npm, the JavaScript port of transformers and tokenizers; Python's
# transformers is not packaged in Debian). Writes a model with `helixpipe init`, installs
# transformers.js (pinned; --ignore-scripts: only its tokenizer code is used, not the ONNX runtime
# its install step would download) and runs tools/hf_tokenizer_check.mjs on the folder.
# Needs node and npm (Debian's) and the npm registry. Not part of CI (it needs the network).
# usage: tools/hf_tokenizer_check.sh [HELIXPIPE_BINARY] [WORK_DIR]   (exit 0 when it matches)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
hp=${1:-$here/../build/helixpipe}
work=${2:-${TMPDIR:-/tmp}/hp_hf_tokenizer_check}
[[ -x $hp ]] || { echo "hf_tokenizer_check: $hp is not an executable; build first (scripts/build.sh)" >&2; exit 2; }
command -v npm >/dev/null || { echo "hf_tokenizer_check: needs node and npm (apt-get install nodejs npm)" >&2; exit 2; }
mkdir -p "$work"
if [[ ! -d $work/node_modules/@huggingface/transformers ]]; then
  (cd "$work" && npm init -y >/dev/null &&
   npm install @huggingface/transformers@4.3.2 --ignore-scripts --no-audit --no-fund >/dev/null)
fi
"$hp" init --model=tiny --out="$work/model" >/dev/null
cp "$here/hf_tokenizer_check.mjs" "$work/"
node "$work/hf_tokenizer_check.mjs" "$work/model"
