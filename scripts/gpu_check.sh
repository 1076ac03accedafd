#!/usr/bin/env bash
# Run HERE (any machine with nvcc, no GPU needed): builds the CUDA tests and benchmarks (HP_CUDA=ON)
# and collects into .gpu/ what the GPU machine needs to run them: the binaries (debug info
# stripped) and the small shared libraries they load that a GPU machine may lack (libstdc++, fmt,
# ...; glibc's libraries apart, in .gpu/lib/glibc, for hosts with an older glibc). Not collected:
# libcuda, cuBLAS(Lt), cuDNN, NCCL: large, and present wherever CUDA is. Then, THERE, from the
# repository root with .gpu/ carried: scripts/gpu_run.sh (results in $OUT).
# Usage: scripts/gpu_check.sh            (build dir: build/ if it has HP_CUDA=ON, else build-gpu/)
#        HP_GPU_BUILD=dir scripts/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

build=${HP_GPU_BUILD:-}
if [[ -z "$build" ]]; then
  if [[ -f build/CMakeCache.txt ]] && grep -q '^HP_CUDA:BOOL=ON' build/CMakeCache.txt; then
    build=build
  else
    build=build-gpu
  fi
fi
launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-/work} CCACHE_DIR=${CCACHE_DIR:-/work/.ccache}
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
if [[ ! -f "$build/build.ninja" ]]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHP_CUDA=ON "${launcher[@]}"
fi
grep -q '^HP_CUDA:BOOL=ON' "$build/CMakeCache.txt" || {
  echo "gpu_check: $build is configured with HP_CUDA=OFF; use another HP_GPU_BUILD dir" >&2
  exit 1
}
# Every GPU test and benchmark this tree defines (the attention's own come with cuda-attn).
targets=()
for t in test_cuda test_cuda_attn bench_cuda bench_attention_cuda; do
  if ninja -C "$build" -t query "$t" >/dev/null 2>&1; then targets+=("$t"); fi
done
nice cmake --build "$build" -j "${HP_JOBS:-2}" --target "${targets[@]}"

rm -rf .gpu
mkdir -p .gpu/bin .gpu/lib/glibc
for t in "${targets[@]}"; do
  src=$(find "$build" -type f -name "$t" -perm -u+x | head -1)
  [[ -n "$src" ]] || { echo "gpu_check: built $t not found under $build" >&2; exit 1; }
  strip --strip-debug -o ".gpu/bin/$t" "$src"
done

# Shared libraries: everything ldd resolves, minus the CUDA stack the GPU machine has.
glibc_re='^(libc\.so|libm\.so|libdl\.so|librt\.so|libpthread\.so|ld-linux|libresolv\.so|libutil\.so)'
skip_re='^(linux-vdso|libcuda\.so|libcublas|libcudnn|libnccl|libcudart|libnvidia|libnvrtc|libnvJitLink)'
for bin in .gpu/bin/*; do
  while read -r line; do
    path=""
    if [[ "$line" =~ ^([^[:space:]]+)\ =\>\ (/[^[:space:]]+) ]]; then
      name=${BASH_REMATCH[1]}
      path=${BASH_REMATCH[2]}
    elif [[ "$line" =~ ^(/[^[:space:]]+ld-linux[^[:space:]]*) ]]; then
      path=${BASH_REMATCH[1]}
      name=$(basename "$path")
    fi
    [[ -n "$path" ]] || continue
    if [[ "$name" =~ $skip_re ]]; then continue; fi
    if [[ "$name" =~ $glibc_re ]]; then
      cp -L "$path" ".gpu/lib/glibc/$name"
    else
      cp -L "$path" ".gpu/lib/$name"
    fi
  done < <(ldd "$bin")
done

{
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "built: $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname) in $build"
  echo "nvcc: $(nvcc --version 2>/dev/null | tail -1)"
  echo "architectures: $(grep '^CMAKE_CUDA_ARCHITECTURES' "$build/CMakeCache.txt" | cut -d= -f2)"
  echo "needs on the GPU machine: libcublasLt.so.13, libcublas.so.13, a CUDA 13 driver (libcuda.so.1)"
} > .gpu/manifest.txt
(cd .gpu && find . -type f -printf '%s\t%p\n' | sort -k2) >> .gpu/manifest.txt

total=$(du -sb .gpu | cut -f1)
echo "gpu_check: .gpu/ holds $(find .gpu -type f | wc -l) files, $((total / 1048576)) MiB:"
find .gpu -type f -printf '  %8s  %p\n' | sort -k2
if (( total > 60 * 1048576 )); then
  echo "gpu_check: .gpu/ is over 60 MiB; it must stay small enough to carry" >&2
  exit 1
fi
echo "gpu_check: on the GPU machine, from $root's copy there: OUT=<dir> scripts/gpu_run.sh"
