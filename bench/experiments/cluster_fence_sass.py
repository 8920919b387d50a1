"""What a cluster-scope release compiles to on sm_90 (eleventh session, 2026-12-06; no GPU).

Compiles the kernels of cluster_fence_sass.cu (a shared store, one form of cluster
synchronisation, a distributed-shared-memory load) with the NVRTC fathom pins and prints the
fences, barriers and cache operations of each one's SASS. With NVRTC 13.0 every cluster-scope
release (`barrier.cluster.arrive` with or without `.release`, `fence.acq_rel.cluster`,
`mbarrier.arrive.release.cluster`) is `MEMBAR.ALL.GPU; ERRBAR; CGAERRBAR`, and the waits add
`CCTL.IVALL`; `.relaxed` drops the fence, `fence.cta` gives `MEMBAR.ALL.CTA`.

    export FATHOM_NVRTC=$(scripts/install-nvrtc.sh)
    pip download --no-deps -d /tmp/nvd nvidia-cuda-nvdisasm==13.2.78
    (cd /tmp/nvd && unzip -o -q *.whl -d x)
    LD_LIBRARY_PATH=$(dirname $FATHOM_NVRTC) python3 bench/experiments/cluster_fence_sass.py \\
        /tmp/nvd/x/nvidia/cu13/bin/nvdisasm
"""

import ctypes
import os
import pathlib
import re
import subprocess
import sys
import tempfile

SOURCE = pathlib.Path(__file__).with_suffix(".cu")


def cubin(src: str) -> bytes:
    nvrtc = ctypes.CDLL(os.environ["FATHOM_NVRTC"])
    prog = ctypes.c_void_p()
    if nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"fence.cu", 0, None, None):
        sys.exit("nvrtcCreateProgram failed")
    options = (ctypes.c_char_p * 2)(b"--gpu-architecture=sm_90", b"-std=c++17")
    status = nvrtc.nvrtcCompileProgram(prog, 2, options)
    size = ctypes.c_size_t()
    if status:
        nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        nvrtc.nvrtcGetProgramLog(prog, log)
        sys.exit(log.value.decode())
    nvrtc.nvrtcGetCUBINSize(prog, ctypes.byref(size))
    out = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetCUBIN(prog, out)
    return out.raw


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin(SOURCE.read_text()))
        f.flush()
        disasm = [sys.argv[1], "-c", f.name]
        sass = subprocess.run(disasm, check=True, capture_output=True, text=True).stdout
    wanted = re.compile(r"MEMBAR|ERRBAR|UCGABAR|CCTL|SYNCS|\bLD\.")
    for line in sass.splitlines():
        name = re.match(r"\.text\.(k_\w+):", line.strip())
        if name:
            print(name.group(1))
        elif wanted.search(line):
            print("   ", re.sub(r"^\s*/\*[0-9a-f]+\*/\s*", "", line).strip())


if __name__ == "__main__":
    main()
