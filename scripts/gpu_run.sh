#!/usr/bin/env bash
# Run THERE, on the GPU machine, from the repository root with .gpu/ (made by scripts/gpu_check.sh)
# carried: prints the GPU, finds the CUDA libraries the binaries load (libcublasLt.so.13,
# libcublas.so.13; NCCL and cuDNN are reported too), runs every GPU test binary one test suite per process (a crash or a
# sticky CUDA error then costs one suite, not the run) with JSON results, the benchmarks, and, when
# compute-sanitizer is there, memcheck and racecheck on the kernel tests. Every step has a time
# limit and a failing step does not stop the next; $OUT/report.md is always written.
# Usage: OUT=/path/to/results scripts/gpu_run.sh
#   HP_GPU_STEP_TIMEOUT (s, default 300): limit per test suite; HP_GPU_BENCH_TIMEOUT (s, default
#   180): per benchmark; HP_GPU_SANITIZE=0 skips the sanitizer (about 4 minutes at most).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
gpu="$root/.gpu"
out=${OUT:-$root/gpu-out}
mkdir -p "$out"
report="$out/report.md"
step_timeout=${HP_GPU_STEP_TIMEOUT:-300}
start_time=$(date +%s)
rows="$out/.rows"      # one table row per step, appended as steps finish
details="$out/.details"
skips="$out/.skips"
: > "$rows"
: > "$details"
: > "$skips"

log() { echo "[gpu_run $(date +%H:%M:%S)] $*" | tee -a "$out/run.log"; }

write_report() {
  {
    echo "# helixpipe GPU check"
    echo
    echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'), host $(hostname), $(( $(date +%s) - start_time )) s"
    echo "- GPU: ${gpu_line:-unknown (nvidia-smi failed)}"
    [[ -f "$gpu/manifest.txt" ]] && echo "- build: $(head -2 "$gpu/manifest.txt" | tr '\n' ' ')"
    echo "- libraries: ${lib_summary:-not searched}"
    echo "- runner: ${runner_note:-not started}"
    echo
    echo "| binary | suite | result | passed | failed | skipped | seconds |"
    echo "|---|---|---|---|---|---|---|"
    cat "$rows"
    echo
    # CudaNoDevice passes only where the binaries see no GPU (with one, it skips).
    no_gpu=$(awk -F'|' '$3 ~ /CudaNoDevice/ && $5 + 0 > 0 { print "yes" }' "$rows")
    passed_total=$(awk -F'|' '$2 ~ /test_/ { n += $5 } END { print n + 0 }' "$rows")
    if [[ -n "$no_gpu" ]]; then
      echo "**Overall: NO GPU** (the test binaries found no usable CUDA device; GPU tests skipped)"
    elif grep -q '| FAIL\|| CRASH\|| TIMEOUT\|| NOT RUN' "$rows"; then
      echo "**Overall: FAIL**"
    else
      echo "**Overall: PASS** ($passed_total tests passed)"
    fi
    if [[ -s "$skips" ]]; then
      echo
      echo "Skipped: $(tr '\n' ' ' < "$skips")"
    fi
    echo
    cat "$details"
  } > "$report"
}
trap write_report EXIT

if [[ ! -d "$gpu/bin" ]]; then
  log "no $gpu/bin: run scripts/gpu_check.sh on the build machine and carry .gpu/"
  echo "| - | - | NOT RUN | | | | |" >> "$rows"
  exit 1
fi

# 1. The GPU.
log "nvidia-smi"
timeout 60 nvidia-smi > "$out/nvidia-smi.txt" 2>&1
cat "$out/nvidia-smi.txt"
gpu_line=$(timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap \
  --format=csv,noheader 2>/dev/null | head -1)

# 2. The libraries: CUDA install dirs, the system's, and Python's nvidia/* and torch wheels.
search_dirs=()
for d in /usr/local/cuda*/lib64 /usr/local/cuda*/lib /usr/local/cuda*/targets/x86_64-linux/lib \
         /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do
  [[ -d "$d" ]] && search_dirs+=("$d")
done
pythons=(python3 python)
[[ -n "${VIRTUAL_ENV:-}" ]] && pythons=("$VIRTUAL_ENV/bin/python" "${pythons[@]}")
for py in "${pythons[@]}" /opt/conda/bin/python /usr/local/bin/python3; do
  command -v "$py" >/dev/null 2>&1 || continue
  while read -r d; do
    [[ -d "$d" ]] || continue
    while read -r lib; do search_dirs+=("$lib"); done < <(find "$d" -maxdepth 3 -type d -name lib 2>/dev/null)
  done < <(timeout 60 "$py" -c 'import nvidia, os; print("\n".join(list(nvidia.__path__)))' 2>/dev/null)
  tdir=$(timeout 60 "$py" -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib"))' 2>/dev/null)
  [[ -n "$tdir" && -d "$tdir" ]] && search_dirs+=("$tdir")
done
find_lib() {  # prints the first directory holding $1
  local d
  for d in "${search_dirs[@]}"; do
    if [[ -e "$d/$1" ]]; then echo "$d"; return 0; fi
  done
  ldconfig -p 2>/dev/null | awk -v n="$1" '$1 == n { print $NF; exit }' | xargs -r dirname
}
lib_path=""
lib_summary=""
for lib in libcublasLt.so.13 libcublas.so.13 libcuda.so.1 libnccl.so.2 libcudnn.so.9; do
  dir=$(find_lib "$lib")
  log "$lib: ${dir:-NOT FOUND}"
  lib_summary+="$lib ${dir:-NOT FOUND}; "
  if [[ -n "$dir" && "$lib" =~ ^libcublas|^libcuda && ":$lib_path" != *":$dir:"* ]]; then
    lib_path+="$dir:"
  fi
done
export LD_LIBRARY_PATH="$gpu/lib:${lib_path}${LD_LIBRARY_PATH:-}"
log "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"

# 3. How to start the binaries: directly, or through the shipped glibc when this host's is older.
runner=()
probe="$gpu/bin/test_cuda"
if timeout 120 "$probe" --gtest_list_tests > "$out/probe.txt" 2>&1; then
  runner_note="system loader"
else
  log "direct start failed: $(head -3 "$out/probe.txt" | tr '\n' ' ')"
  glibc="$gpu/lib/glibc"
  loader=$(ls "$glibc"/ld-linux* 2>/dev/null | head -1)
  if [[ -n "$loader" ]]; then
    runner=("$loader" --library-path "$glibc:$LD_LIBRARY_PATH")
    if timeout 120 ${runner[@]+"${runner[@]}"} "$probe" --gtest_list_tests > "$out/probe.txt" 2>&1; then
      runner_note="shipped glibc ($loader)"
    else
      runner_note="neither the system loader nor the shipped glibc could start the binaries"
    fi
  fi
  log "runner: ${runner_note:-none}"
fi

# 4. Tests, one suite per process.
summarize() {  # json -> "passed failed skipped"; failures to $details, skipped names to $skips
  python3 - "$1" "$details" "$skips" <<'PY' 2>/dev/null || echo "? ? ?"
import json, sys
data = json.load(open(sys.argv[1]))
passed = failed = skipped = 0
notes = []
for suite in data.get("testsuites", []):
    for t in suite.get("testsuite", []):
        name = suite["name"] + "." + t["name"]
        if t.get("failures"):
            failed += 1
            msg = "\n".join(f.get("failure", "") for f in t["failures"])
            notes.append(f"### FAILED {name}\n```\n{msg[:4000]}\n```\n")
        elif t.get("result") == "SKIPPED":
            skipped += 1
            with open(sys.argv[3], "a") as f:
                f.write(name + "\n")
        else:
            passed += 1
with open(sys.argv[2], "a") as f:
    f.write("".join(notes))
print(passed, failed, skipped)
PY
}
for bin in "$gpu"/bin/test_*; do
  name=$(basename "$bin")
  suites=$(timeout 120 ${runner[@]+"${runner[@]}"} "$bin" --gtest_list_tests 2>/dev/null | grep -v '^ ' | grep '\.$' | sed 's/\.$//')
  if [[ -z "$suites" ]]; then
    echo "| $name | (listing) | NOT RUN | | | | |" >> "$rows"
    continue
  fi
  for suite in $suites; do
    tag="$name.${suite//\//_}"
    log "$name $suite"
    t0=$(date +%s)
    timeout "$step_timeout" ${runner[@]+"${runner[@]}"} "$bin" --gtest_filter="$suite.*" \
      --gtest_output="json:$out/$tag.json" > "$out/$tag.log" 2>&1
    rc=$?
    secs=$(( $(date +%s) - t0 ))
    read -r passed failed skipped < <(if [[ -f "$out/$tag.json" ]]; then summarize "$out/$tag.json"; else echo "- - -"; fi)
    if (( rc == 124 || rc == 137 )); then result=TIMEOUT
    elif [[ ! -f "$out/$tag.json" ]]; then result=CRASH
    elif (( rc != 0 )); then result=FAIL
    else result=PASS; fi
    if [[ "$result" != PASS ]]; then
      { echo "### $result $name $suite (exit $rc), last lines of $tag.log"; echo '```';
        tail -30 "$out/$tag.log"; echo '```'; echo; } >> "$details"
    fi
    echo "| $name | $suite | $result | $passed | $failed | $skipped | $secs |" >> "$rows"
    write_report
  done
done

# 5. Benchmarks (timings on this GPU), after every test.
for bench in "$gpu"/bin/bench_*; do
  [[ -x "$bench" ]] || continue
  name=$(basename "$bench")
  log "$name"
  t0=$(date +%s)
  timeout "${HP_GPU_BENCH_TIMEOUT:-180}" ${runner[@]+"${runner[@]}"} "$bench" > "$out/$name.txt" 2>&1
  rc=$?
  if (( rc == 0 )); then result=PASS; elif (( rc == 124 )); then result=TIMEOUT; else result=FAIL; fi
  echo "| $name | - | $result | | | | $(( $(date +%s) - t0 )) |" >> "$rows"
  { echo "### $name (exit $rc)"; echo '```'; tail -60 "$out/$name.txt"; echo '```'; echo; } >> "$details"
  write_report
done

# 6. compute-sanitizer on the kernel tests: out-of-bounds accesses and shared-memory races.
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
if [[ "${HP_GPU_SANITIZE:-1}" != 0 && -n "$sanitizer" ]]; then
  # memcheck over every kernel test; racecheck over those with shared-memory reductions. A run
  # that outlasts its limit is reported as SLOW (incomplete), not as a failure.
  declare -A filters=(
    [memcheck]='Types/CudaKernelsTest.*:CudaUpdateTest.AdamW:CudaUpdateTest.Convert*'
    [racecheck]='Types/CudaKernelsTest.RmsNorm*:Types/CudaKernelsTest.CrossEntropy*:Types/CudaKernelsTest.SumSquares*'
  )
  declare -A limits=([memcheck]=150 [racecheck]=90)
  for tool in memcheck racecheck; do
    log "compute-sanitizer --tool $tool"
    t0=$(date +%s)
    timeout "${limits[$tool]}" "$sanitizer" --tool "$tool" --error-exitcode 99 \
      ${runner[@]+"${runner[@]}"} "$gpu/bin/test_cuda" --gtest_filter="${filters[$tool]}" \
      > "$out/sanitizer.$tool.txt" 2>&1
    rc=$?
    if (( rc == 0 )); then result=PASS; elif (( rc == 124 )); then result=SLOW; else result=FAIL; fi
    echo "| compute-sanitizer | $tool | $result | | | | $(( $(date +%s) - t0 )) |" >> "$rows"
    if [[ "$result" != PASS ]]; then
      { echo "### compute-sanitizer $tool: $result (exit $rc)"; echo '```';
        grep -m 40 -E 'ERROR SUMMARY|=========|FAILED' "$out/sanitizer.$tool.txt"; echo '```'; echo; } >> "$details"
    fi
    write_report
  done
else
  log "compute-sanitizer: ${sanitizer:-not found}, HP_GPU_SANITIZE=${HP_GPU_SANITIZE:-1}: skipped"
fi
log "report: $report"
