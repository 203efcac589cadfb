#!/usr/bin/env bash
# Builds one libFuzzer target of tests/fuzz with clang++ and runs it for a
# bounded time over its seed corpus; any crash, sanitizer report, slow input
# (over 20 s) or broken promise fails. Exits 77 (skipped) when clang++ or
# libFuzzer is missing.
#
#   tests/fuzz/run.sh TARGET BUILD_DIR [SECONDS]      TARGET: graph_reader | plan_reader | plan_cli
#
# New inputs the fuzzer finds go to BUILD_DIR/TARGET/corpus (the seed corpus
# in the source tree is only read); a failing input to BUILD_DIR/TARGET/artifacts/.
set -uo pipefail
target=$1
build=$2
seconds=${3:-45}
here=$(cd "$(dirname "$0")" && pwd)
case $target in
  graph_reader) dict=graph.dict ;;
  plan_reader) dict=plan.dict ;;
  plan_cli) dict=cli.dict ;;
  *) echo "unknown fuzz target '$target'" >&2; exit 2 ;;
esac

cxx=${TYPEMESH_FUZZ_CXX:-}
if [[ -z $cxx ]]; then
  for c in clang++ clang++-19 clang++-18 clang++-17 clang++-16 clang++-15 clang++-14; do
    if command -v "$c" >/dev/null; then cxx=$(command -v "$c"); break; fi
  done
fi
if [[ -z $cxx ]]; then
  echo "fuzz.$target skipped: no clang++ (on Debian: apt-get install clang libclang-rt-14-dev)"
  exit 77
fi
dir=$build/$target
mkdir -p "$dir/corpus" "$dir/artifacts"
probe=$dir/probe.cpp
printf '#include <cstddef>\n#include <cstdint>\nextern "C" int LLVMFuzzerTestOneInput(const std::uint8_t*, std::size_t) { return 0; }\n' > "$probe"
if ! "$cxx" -fsanitize=fuzzer,address,undefined "$probe" -o "$dir/probe" >/dev/null 2>&1; then
  echo "fuzz.$target skipped: $cxx cannot link -fsanitize=fuzzer,address,undefined (install libclang-rt-14-dev)"
  exit 77
fi

launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S "$here" -B "$dir/build" -DCMAKE_CXX_COMPILER="$cxx" "${launcher[@]}" >"$dir/configure.log" 2>&1 ||
  { cat "$dir/configure.log"; exit 1; }
cmake --build "$dir/build" --target "fuzz-$target" || exit 1

echo "fuzzing $target for $seconds s over $here/corpus/$target"
"$dir/build/fuzz-$target" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 -max_len=8192 \
  -dict="$here/$dict" -artifact_prefix="$dir/artifacts/" -print_final_stats=1 \
  "$dir/corpus" "$here/corpus/$target"
status=$?
if [[ $status -ne 0 ]]; then
  echo "fuzz.$target FAILED (status $status); the input is in $dir/artifacts/:" >&2
  ls -l "$dir/artifacts/" >&2
  echo "reproduce: $dir/build/fuzz-$target $dir/artifacts/<file>" >&2
fi
exit $status
