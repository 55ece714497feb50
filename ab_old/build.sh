#!/usr/bin/env bash
# Build libqwen3_5_cuda.so from native/*.cu with one nvcc call.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: ./build.sh OUTDIR [ARCH]

Builds OUTDIR/libqwen3_5_cuda.so from native/*.cu in one nvcc call:
  -O3 -std=c++17, SASS for sm_ARCH + PTX for compute_ARCH (newer GPUs JIT the PTX),
  CUDA runtime linked statically, cuBLASLt linked dynamically with an rpath to where it was found.
  ARCH 90 builds SASS for sm_90a instead (it runs on every compute capability 9.0 GPU and holds the
  Hopper-only kernels: the wgmma attention) + compute_90 PTX; ARCH 90a builds sm_90a SASS + PTX only.

ARCH     compute capability without the dot: 90 for H100/H200, 89 for Ada, 80 for A100
         (default: $CUDA_COMPUTE_CAP, else 90).

Environment:
  NVCC            nvcc to use (default: $CUDA_HOME/bin/nvcc, else nvcc on PATH)
  CUDA_HOME       CUDA toolkit root (default: the toolkit nvcc belongs to)
  CS1_CUBLAS_DIR  a folder with include/cublasLt.h and lib/libcublasLt.so* (overrides the search)
  PYTHON          python whose site-packages are searched for the nvidia-cublas wheel (default: python3)
  NVCC_EXTRA      extra nvcc flags (e.g. -lineinfo)

cuBLASLt search order: CS1_CUBLAS_DIR, $CUDA_HOME/{include,lib64}, then the nvidia-cublas PyPI wheel
(nvidia/cu13 or nvidia/cublas under the python's sys.path). Example: ./build.sh target 90
EOF
}

case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  "") usage >&2; exit 2 ;;
esac
OUTDIR=$1
ARCH=${2:-${CUDA_COMPUTE_CAP:-90}}
ARCH=${ARCH//./}
[[ "$ARCH" =~ ^[0-9]+[a-z]?$ ]] || { echo "build.sh: ARCH must look like 90 or 90a, got '$ARCH'" >&2; exit 2; }
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# ---- nvcc and the toolkit it belongs to
if [ -n "${NVCC:-}" ]; then
  nvcc_bin=$NVCC
elif [ -n "${CUDA_HOME:-}" ] && [ -x "$CUDA_HOME/bin/nvcc" ]; then
  nvcc_bin=$CUDA_HOME/bin/nvcc
elif command -v nvcc >/dev/null 2>&1; then
  nvcc_bin=$(command -v nvcc)
elif [ -x /usr/local/cuda/bin/nvcc ]; then
  nvcc_bin=/usr/local/cuda/bin/nvcc
else
  echo "build.sh: nvcc not found: install the CUDA toolkit (>= 12.4) or set NVCC / CUDA_HOME" >&2
  exit 1
fi
if [ -z "${CUDA_HOME:-}" ]; then
  # nvcc may be a wrapper script; its dry run names the real toolkit (TOP=<toolkit>/bin/..)
  top=$("$nvcc_bin" -v --dryrun -x cu /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$ TOP=//p' | head -n1 || true)
  if [ -n "$top" ] && [ -d "$top" ]; then CUDA_HOME=$(cd "$top" && pwd)
  else CUDA_HOME=$(cd "$(dirname "$(readlink -f "$nvcc_bin")")/.." && pwd); fi
fi
nvcc_version=$("$nvcc_bin" --version | sed -n 's/.*release [0-9.]*, V\([0-9.]*\).*/\1/p' | head -n1)

# ---- cuBLASLt
find_lib() {  # $1 = lib dir: prints the cuBLASLt shared object to link against
  local f
  for f in "$1/libcublasLt.so" "$1"/libcublasLt.so.[0-9]*; do
    [ -e "$f" ] && { echo "$f"; return 0; }
  done
  return 1
}
cublas_inc="" cublas_lib=""
try_dir() {  # $1 = include dir, $2 = lib dir
  local so
  [ -f "$1/cublasLt.h" ] || return 1
  so=$(find_lib "$2") || return 1
  cublas_inc=$1 cublas_lib=$so
}
found=0
if [ -n "${CS1_CUBLAS_DIR:-}" ]; then
  try_dir "$CS1_CUBLAS_DIR/include" "$CS1_CUBLAS_DIR/lib" || try_dir "$CS1_CUBLAS_DIR/include" "$CS1_CUBLAS_DIR/lib64" \
    || { echo "build.sh: CS1_CUBLAS_DIR=$CS1_CUBLAS_DIR has no include/cublasLt.h + lib/libcublasLt.so*" >&2; exit 1; }
  found=1
fi
if [ $found = 0 ]; then
  for libdir in "$CUDA_HOME/lib64" "$CUDA_HOME/lib" "$CUDA_HOME/targets/x86_64-linux/lib"; do
    if try_dir "$CUDA_HOME/include" "$libdir" || try_dir "$CUDA_HOME/targets/x86_64-linux/include" "$libdir"; then
      found=1; break
    fi
  done
fi
if [ $found = 0 ]; then
  py=${PYTHON:-python3}
  if command -v "$py" >/dev/null 2>&1; then
    while IFS= read -r base; do
      for sub in nvidia/cu13 nvidia/cublas nvidia/cu12; do
        if try_dir "$base/$sub/include" "$base/$sub/lib"; then found=1; break 2; fi
      done
    done < <("$py" -c 'import site, sys
seen = []
for p in sys.path + site.getsitepackages() + [site.getusersitepackages()]:
    if p and p not in seen:
        seen.append(p); print(p)' 2>/dev/null || true)
  fi
fi
if [ $found = 0 ]; then
  cat >&2 <<EOF
build.sh: cuBLASLt not found (need include/cublasLt.h and libcublasLt.so).
  Looked in CUDA_HOME=$CUDA_HOME and in the site-packages of ${PYTHON:-python3}.
  Fix: install the PyPI wheel that ships it for CUDA 13:   ${PYTHON:-python3} -m pip install nvidia-cublas
  (or set CS1_CUBLAS_DIR to a folder with include/cublasLt.h and lib/libcublasLt.so*).
EOF
  exit 1
fi
cublas_dir=$(cd "$(dirname "$cublas_lib")" && pwd)

# ---- build info
# the device copy of a checkout may lack git history: CS1_GIT_DESCRIBE names the commit there
git_describe=${CS1_GIT_DESCRIBE:-$(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)}
mkdir -p "$OUTDIR"
out="$OUTDIR/libqwen3_5_cuda.so"
tmp="$OUTDIR/.libqwen3_5_cuda.so.$$"
trap 'rm -f "$tmp"' EXIT

sources=("$ROOT"/native/*.cu)
# Target 90 also builds the sm_90a-only kernels (wgmma): SASS for sm_90a (every compute capability 9.0 GPU runs it)
# plus compute_90 PTX for newer GPUs to JIT, where those kernels are stubs the dispatchers never pick.
case "$ARCH" in
  90) gencode=(-gencode "arch=compute_90a,code=sm_90a" -gencode "arch=compute_90,code=compute_90"
               -DCS1_SM90A_KERNELS) ;;
  90a) gencode=(-gencode "arch=compute_90a,code=[sm_90a,compute_90a]" -DCS1_SM90A_KERNELS) ;;
  *) gencode=(-gencode "arch=compute_$ARCH,code=[sm_$ARCH,compute_$ARCH]") ;;
esac
echo "build.sh: nvcc $nvcc_version ($nvcc_bin), ${gencode[*]}, cuBLASLt $cublas_lib" >&2
# shellcheck disable=SC2086
"$nvcc_bin" -O3 -std=c++17 \
  "${gencode[@]}" \
  -shared -Xcompiler -fPIC -Xcompiler -Wall,-Wextra -cudart static \
  -I"$ROOT/native" -I"$cublas_inc" \
  -DCS1_BUILD_ARCH="\"sm_$ARCH\"" -DCS1_BUILD_NVCC="\"$nvcc_version\"" -DCS1_BUILD_GIT="\"$git_describe\"" \
  ${NVCC_EXTRA:-} \
  "${sources[@]}" \
  -o "$tmp" \
  -Xlinker "$cublas_lib" -Xlinker -rpath -Xlinker "$cublas_dir"
mv -f "$tmp" "$out"
trap - EXIT
echo "$out"
