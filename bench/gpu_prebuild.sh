#!/usr/bin/env bash
# Builds the two programs bench/gpu_check.sh runs on a GPU machine, here
# (no GPU needed), for sm_90 (H100/H200) with nvcc:
#
#   DIR/typemesh-test-gpu            tests/gpu_test.cpp, Google Test linked statically
#   DIR/typemesh-bench-gpu           bench/gpu.cpp
#   DIR/typemesh-bench-conversions   bench/conversions.cpp, a host program (g++):
#                                    eight device threads on the GPU machine's
#                                    cores, where this machine has fewer cores
#                                    than devices
#
# and writes DIR/shared-libraries.txt: the shared libraries each program
# needs (ldd), which the GPU machine must provide. cuBLAS (libcublas,
# libcublasLt: over 500 MiB) and the C/C++ runtime stay shared; the CUDA
# runtime is nvcc's static one; OpenBLAS is linked statically where its
# static library links, else shared.
#
# usage: bench/gpu_prebuild.sh DIR [--arch SM]   (SM default 90)
# Environment: NVCC (default: nvcc on PATH, else /usr/local/cuda/bin/nvcc).
# Compiles one program at a time (each takes minutes and over 1 GiB).
set -euo pipefail

usage() {
  echo "usage: bench/gpu_prebuild.sh DIR [--arch SM]" >&2
  exit 2
}
[[ $# -ge 1 ]] || usage
out=$1
shift
arch=90
while [[ $# -gt 0 ]]; do
  case $1 in
    --arch) [[ $# -ge 2 ]] || usage; arch=$2; shift 2 ;;
    *) usage ;;
  esac
done
[[ $arch =~ ^[0-9]+$ ]] || { echo "gpu_prebuild: --arch wants a number such as 90, not '$arch'" >&2; exit 2; }

root=$(cd "$(dirname "$0")/.." && pwd)
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[[ -x $nvcc ]] || { echo "gpu_prebuild: nvcc not found (set NVCC)" >&2; exit 1; }
mkdir -p "$out"
out=$(cd "$out" && pwd)

libdir=/usr/lib/x86_64-linux-gnu
blas_include=
for d in /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/openblas /usr/include; do
  if [[ -f $d/cblas.h ]]; then blas_include=$d; break; fi
done
[[ -n $blas_include ]] || { echo "gpu_prebuild: cblas.h not found (install libopenblas-dev)" >&2; exit 1; }

flags=(-std=c++20 --extended-lambda -gencode "arch=compute_${arch},code=sm_${arch}" -O2 -DNDEBUG
       -diag-suppress 186 -I"$root/include" -I"$blas_include")

# OpenBLAS: its static archive (alone, then with the Fortran runtime it may
# need) where one links, else the shared library.
blas_archive=
for a in "$libdir/openblas-pthread/libopenblas.a" "$libdir/libopenblas.a"; do
  if [[ -f $a ]]; then blas_archive=$a; break; fi
done

link() {  # link OUTPUT OBJECT EXTRA...
  local output=$1 object=$2
  shift 2
  if [[ -n $blas_archive ]]; then
    for fortran in "" "-l:libgfortran.so.5"; do
      # shellcheck disable=SC2086
      if "$nvcc" "${flags[@]}" "$object" -o "$output" "$@" -lcublas "$blas_archive" $fortran -lpthread \
           2>>"$output.link.log"; then
        echo "gpu_prebuild: $(basename "$output"): OpenBLAS linked statically${fortran:+ (with $fortran)}"
        return 0
      fi
    done
  fi
  "$nvcc" "${flags[@]}" "$object" -o "$output" "$@" -lcublas -lopenblas -lpthread
  echo "gpu_prebuild: $(basename "$output"): OpenBLAS linked as a shared library"
}

build() {  # build NAME SOURCE EXTRA_INCLUDE LINK_EXTRA...
  local name=$1 source=$2 include=$3
  shift 3
  local start=$SECONDS
  echo "gpu_prebuild: compiling $name (sm_$arch) ..."
  nice "$nvcc" "${flags[@]}" -I"$include" -x cu -c "$source" -o "$out/$name.o"
  link "$out/$name" "$out/$name.o" "$@"
  rm -f "$out/$name.o" "$out/$name.link.log"
  # Symbols off: the programs travel to the GPU machine together.
  if command -v strip >/dev/null; then strip "$out/$name"; fi
  echo "gpu_prebuild: $name built in $((SECONDS - start)) s"
}

build typemesh-test-gpu "$root/tests/gpu_test.cpp" "$root/tests" "$libdir/libgtest_main.a" "$libdir/libgtest.a"
build typemesh-bench-gpu "$root/bench/gpu.cpp" "$root/bench"

# The conversions benchmark: host code only, built as the CMake Release build
# builds it (no -march, so it runs on any x86-64 machine); OpenBLAS as above.
start=$SECONDS
conversions=$out/typemesh-bench-conversions
echo "gpu_prebuild: compiling typemesh-bench-conversions (host) ..."
nice g++ -std=c++20 -O3 -DNDEBUG -DTHRUST_DEVICE_SYSTEM=THRUST_DEVICE_SYSTEM_CPP -I"$root/include" -I"$blas_include" \
  -c "$root/bench/conversions.cpp" -o "$conversions.o"
linked=
if [[ -n $blas_archive ]]; then
  for fortran in "" "-l:libgfortran.so.5"; do
    # shellcheck disable=SC2086
    if g++ "$conversions.o" -o "$conversions" "$blas_archive" $fortran -lpthread 2>/dev/null; then
      linked="OpenBLAS linked statically${fortran:+ (with $fortran)}"
      break
    fi
  done
fi
if [[ -z $linked ]]; then
  g++ "$conversions.o" -o "$conversions" -lopenblas -lpthread
  linked="OpenBLAS linked as a shared library"
fi
rm -f "$conversions.o"
if command -v strip >/dev/null; then strip "$conversions"; fi
echo "gpu_prebuild: typemesh-bench-conversions: $linked; built in $((SECONDS - start)) s"

{
  echo "# Shared libraries the GPU machine must provide (ldd, on the build machine)"
  for p in typemesh-test-gpu typemesh-bench-gpu typemesh-bench-conversions; do
    echo "## $p"
    ldd "$out/$p" | sed 's/ (0x[0-9a-f]*)//'
  done
} >"$out/shared-libraries.txt"
cat "$out/shared-libraries.txt"
ls -la "$out"
