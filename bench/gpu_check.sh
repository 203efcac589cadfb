#!/usr/bin/env bash
# The GPU check: on a machine with a CUDA GPU, in under 10 minutes,
#
#   1. prints the machine: nvidia-smi -L, nvcc --version, cores, date;
#   2. builds the CUDA configuration's three programs (cmake, -DTYPEMESH_CUDA=ON,
#      sm_90, only the targets typemesh-test-gpu, typemesh-bench-gpu and
#      typemesh-bench-conversions), or with --prebuilt DIR takes them from
#      DIR (bench/gpu_prebuild.sh DIR builds them on a machine without a GPU);
#   3. runs the GPU tests (Google Test output);
#   4. runs the benchmark (with --tf32) and prints its markdown table;
#   5. runs typemesh-bench-conversions (host threads, no GPU) at 1, 4 and
#      32 MiB: eight device threads with a core each, which a 2-core
#      development machine cannot give them (docs/performance.md).
#
# When $OUT is set, the table goes to $OUT/gpu_table.md and each phase's
# full output to $OUT/gpu_check-<phase>.log. Every phase runs under a time
# limit and prints its elapsed time; the script goes on after a failed phase
# where the next one can still run, and exits non-zero if any failed.
#
# usage: bench/gpu_check.sh [--prebuilt DIR] [--build-dir DIR] [--jobs N] [--no-tf32]
# Run from anywhere; it works in the repository that holds it.
set -uo pipefail

usage() {
  echo "usage: bench/gpu_check.sh [--prebuilt DIR] [--build-dir DIR] [--jobs N] [--no-tf32]" >&2
  exit 2
}

prebuilt=
build_dir=build-gpu
jobs=16
tf32=--tf32
while [[ $# -gt 0 ]]; do
  case $1 in
    --prebuilt) [[ $# -ge 2 ]] || usage; prebuilt=$2; shift 2 ;;
    --build-dir) [[ $# -ge 2 ]] || usage; build_dir=$2; shift 2 ;;
    --jobs) [[ $# -ge 2 && $2 =~ ^[0-9]+$ ]] || usage; jobs=$2; shift 2 ;;
    --no-tf32) tf32=; shift ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) usage ;;
  esac
done

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
out=${OUT:-}
if [[ -n $out ]]; then mkdir -p "$out" || { echo "gpu_check: cannot make \$OUT=$out" >&2; exit 1; }; fi
# The phases' logs: in $OUT when set, else in a directory of their own.
logs=${out:-$(mktemp -d)}

# Time limits per phase (seconds), each also cut to what is left of the
# whole script's 570 s, so that it ends within 10 minutes whatever happens.
limit_configure=60
limit_build=300
limit_tests=120
limit_bench=200
limit_conversions=90
total_limit=570

script_start=$SECONDS
failed=()
summary=()

# phase NAME LIMIT COMMAND...: runs COMMAND under `timeout`, shows its output
# (and keeps it in $OUT/gpu_check-NAME.log), prints the elapsed time.
phase() {
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS log=$logs/gpu_check-$name.log status
  local left=$((script_start + total_limit - SECONDS))
  if [[ $left -lt 10 ]]; then
    echo "=== $name: not run, ${left} s left of the script's ${total_limit} s"
    failed+=("$name (no time left)")
    return 1
  fi
  [[ $left -lt $limit ]] && limit=$left
  echo
  echo "=== $name (limit ${limit} s) ==="
  # A shell function runs in a child bash, so that `timeout` can limit it.
  if declare -F "$1" >/dev/null; then set -- bash -c "$(declare -f "$1"); $*"; fi
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
  local took=$((SECONDS - start))
  if [[ $status -eq 124 || $status -eq 137 ]]; then
    echo "=== $name: TIMED OUT after ${took} s (limit ${limit} s)"
    failed+=("$name (timed out)")
  elif [[ $status -ne 0 ]]; then
    echo "=== $name: FAILED with status $status after ${took} s"
    failed+=("$name (status $status)")
  else
    echo "=== $name: ok, ${took} s"
  fi
  summary+=("$(printf '%-10s %4d s  status %d' "$name" "$took" "$status")")
  return "$status"
}

machine() {
  date -u '+%Y-%m-%d %H:%M:%S UTC'
  echo "host: $(uname -srm), $(nproc) cores"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi -L
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader || true
  else
    echo "nvidia-smi: not found"
  fi
  if command -v nvcc >/dev/null; then nvcc --version
  elif [[ -x /usr/local/cuda/bin/nvcc ]]; then /usr/local/cuda/bin/nvcc --version
  else echo "nvcc: not found"
  fi
  command -v cmake >/dev/null && cmake --version | head -n 1 || echo "cmake: not found"
  return 0
}
phase machine 30 machine

# Read by the phases' functions, which run in child shells.
export test_bin='' bench_bin='' conversions_bin='' build_dir
if [[ -n $prebuilt ]]; then
  if [[ -d $prebuilt ]]; then prebuilt=$(cd "$prebuilt" && pwd); fi
  test_bin=$prebuilt/typemesh-test-gpu
  bench_bin=$prebuilt/typemesh-bench-gpu
  conversions_bin=$prebuilt/typemesh-bench-conversions
  check_prebuilt() {
    local ok=0
    for p in "$test_bin" "$bench_bin" "$conversions_bin"; do
      if [[ ! -x $p ]]; then echo "missing: $p (build it with bench/gpu_prebuild.sh DIR)"; ok=1; continue; fi
      echo "$p"
      if ldd "$p" | grep 'not found'; then
        echo "  shared libraries missing above; add the CUDA toolkit's lib64 to LD_LIBRARY_PATH"
        ok=1
      fi
    done
    return $ok
  }
  # The toolkit's libraries (cuBLAS) where the loader does not already look.
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [[ -d $d ]] && export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d
  done
  phase prebuilt 30 check_prebuilt
else
  configure() {
    local nvcc_flag=()
    if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
      nvcc_flag=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
    fi
    cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DTYPEMESH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
      "${nvcc_flag[@]}"
  }
  if phase configure "$limit_configure" configure; then
    phase build "$limit_build" cmake --build "$build_dir" --target typemesh-test-gpu typemesh-bench-gpu \
      typemesh-bench-conversions -j "$jobs"
  fi
  test_bin=$(find "$build_dir" -name typemesh-test-gpu -type f -perm -u+x 2>/dev/null | head -n 1)
  bench_bin=$(find "$build_dir" -name typemesh-bench-gpu -type f -perm -u+x 2>/dev/null | head -n 1)
  conversions_bin=$(find "$build_dir" -name typemesh-bench-conversions -type f -perm -u+x 2>/dev/null | head -n 1)
fi

if [[ -n $test_bin && -x $test_bin ]]; then
  phase tests "$limit_tests" "$test_bin" --gtest_color=no
else
  echo "=== tests: not run (no typemesh-test-gpu)"
  failed+=("tests (no program)")
fi

if [[ -n $bench_bin && -x $bench_bin ]]; then
  table_args=()
  [[ -n $out ]] && table_args=(--table "$out/gpu_table.md")
  # shellcheck disable=SC2086
  phase bench "$limit_bench" "$bench_bin" $tf32 "${table_args[@]}"
else
  echo "=== bench: not run (no typemesh-bench-gpu)"
  failed+=("bench (no program)")
fi

# The conversions on host threads, each of the eight devices with a core of
# its own; the load beside each size.
conversions() {
  local size
  for size in 1M 4M 32M; do
    echo "--- tensor $size, load $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"
    "$conversions_bin" --tensor-bytes "$size" --min-time-ms 200 || return 1
  done
}
if [[ -n $conversions_bin && -x $conversions_bin ]]; then
  phase conversions "$limit_conversions" conversions
else
  echo "=== conversions: not run (no typemesh-bench-conversions)"
  failed+=("conversions (no program)")
fi

echo
echo "=== summary: $((SECONDS - script_start)) s in all"
printf '%s\n' "${summary[@]}"
[[ -n $out && -f $out/gpu_table.md ]] && echo "table: $out/gpu_table.md"
# Without a GPU both programs skip and pass: that checked nothing.
if grep -q "no CUDA GPU: skipped" "$logs/gpu_check-bench.log" 2>/dev/null; then
  failed+=("no GPU seen (the tests skipped, the benchmark made no table)")
fi
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "failed: ${failed[*]}"
  exit 1
fi
echo "all phases passed"
