#!/usr/bin/env bash
# Packs the GPU tests and programs for a GPU machine without Rust, small enough to carry
# (the device tool carries at most 64 MiB; the unpacked binaries are ~90 MiB):
#   ../shared/tools/gpu-pack (release build of every test binary and program into .gpu/),
#   then keeps only the GPU tests (gpu_*) and the programs that launch kernels, and compresses
#   them into .gpu/pack.tar.xz (~11 MiB).
# On the GPU machine, from the repository root:
#   tar xJf .gpu/pack.tar.xz && bash .gpu/run.sh [FILTER]      # every GPU test
#   .gpu/bin/autotune | step-bench | kernel-bench | fathom-soak  # the programs
#   bash scripts/sanitize.sh                                     # compute-sanitizer
# Usage: scripts/pack-gpu.sh [-p PACKAGE]...   (arguments go to gpu-pack)
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
pack_tool=${GPU_PACK:-../shared/tools/gpu-pack}
[ -x "$pack_tool" ] || { echo "pack-gpu: $pack_tool not found (set GPU_PACK)"; exit 2; }
"$pack_tool" "$@" > .gpu-pack.log 2>&1 || { tail -20 .gpu-pack.log; exit 1; }
rm -f .gpu-pack.log
find .gpu/tests -type f ! -name 'gpu_*' -delete
for bin in .gpu/bin/*; do
  case "$(basename "$bin")" in
    autotune|step-bench|kernel-bench|fathom-soak|fathom-jit-report) ;;
    *) rm -f "$bin" ;;
  esac
done
staging=$(mktemp -d)
mv .gpu "$staging/.gpu"
mkdir .gpu
tar cf - -C "$staging" .gpu | xz -T0 -6 > .gpu/pack.tar.xz
rm -rf "$staging"
echo "pack-gpu: .gpu/pack.tar.xz is $(du -h .gpu/pack.tar.xz | cut -f1); carry [\".gpu\"], then: tar xJf .gpu/pack.tar.xz"
