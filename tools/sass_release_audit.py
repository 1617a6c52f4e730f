#!/usr/bin/env python3
"""sass_release_audit.py - check the compiled FP8 GEMM kernels for a stage
released while one of its shared-memory loads is still in flight.

A math warp frees a pipeline stage with an mbarrier arrive (SASS
`SYNCS.ARRIVE...A1T0`). That instruction does not wait for shared-memory
loads (LDS) issued before it: ptxas places it before their first use. The
producer's next TMA into the stage can then land before such a load reads
it, and rows of a tile are promoted with the scale of a later k-block.
The kernels make every arrive depend on the scales they loaded
(release_stage in src/cuda/gemm_fp8_pipeline.cuh); this audit checks the
SASS: at each arrive, no LDS may still hold its write scoreboard (no
instruction since the LDS waited on it). 1D1D kernels of one row group (BM
128 or 192) keep each stage's scales in two slots, one per round parity,
and free a stage before reading its scales; what they need is weaker: a
load must have returned before the warp's next arrive (the slot is written
again two rounds on), so there a load may be pending at one arrive but not
at the one after. The scan is linear within straight-line code (a branch
forgets what is pending), so it can miss a case across a branch, never
invent one.

    tools/sass_release_audit.py OBJECT_OR_SASS... [--cuobjdump PATH]

Each argument is an object / cubin (disassembled with cuobjdump -sass) or a
text file of cuobjdump -sass output. Prints one line per GEMM kernel; exit 1
if any is unsafe, 77 when cuobjdump (or the nvdisasm it runs) cannot be found
(CTest: skipped).
"""
import os
import re
import shutil
import subprocess
import sys

KERNEL = r"gemm_fp8_1d[12]d_kernel"


def find_cuobjdump(given):
    if given:
        return given
    found = shutil.which("cuobjdump")
    if found:
        return found
    for root in ("/usr/local/cuda/bin",):
        if os.access(os.path.join(root, "cuobjdump"), os.X_OK):
            return os.path.join(root, "cuobjdump")
    try:  # the PyPI wheel nvidia-cuda-cuobjdump puts it under nvidia/cu13/bin
        import nvidia  # type: ignore

        for base in nvidia.__path__:
            for sub in ("cu13", "cuda_cuobjdump"):
                p = os.path.join(base, sub, "bin", "cuobjdump")
                if os.access(p, os.X_OK):
                    return p
    except ImportError:
        pass
    return None


def control_bits(word):
    """Scheduling control of an sm_90 instruction: bits 41+ of its second 64-bit word."""
    c = int(word, 16) >> 41
    return (c >> 5) & 7, (c >> 11) & 0x3F  # write scoreboard (7: none), wait mask


def kernels(text):
    """{function name: [(address, instruction, write scoreboard, wait mask)]}"""
    out, name = {}, None
    lines = text.split("\n")
    for i, line in enumerate(lines):
        m = re.search(r"Function : (\S+)", line)
        if m:
            name = m.group(1)
            out[name] = []
            continue
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?);\s+/\* 0x[0-9a-f]+ \*/", line)
        if m and name and i + 1 < len(lines):
            hi = re.search(r"/\* (0x[0-9a-f]+) \*/", lines[i + 1])
            if hi:
                out[name].append((m.group(1), m.group(2).strip()) + control_bits(hi.group(1)))
    return out


def two_scale_slots(name):
    """Whether the kernel keeps two scale slots a stage: 1D1D with BM (its first template argument) not 256."""
    m = re.search(r"gemm_fp8_1d1d_kernelILi(\d+)E", name)
    return bool(m) and m.group(1) != "256"


def unsafe_releases(insts, slack=0):
    """Arrives with an LDS pending that was issued before more than `slack` earlier releases. A release
    is the arrives after one wgmma wait (a cluster's CTAs each get one)."""
    pending, bad = {}, []  # scoreboard -> [address of the LDS holding it, releases since, this one included]
    new_release = True
    for addr, text, wr, wait in insts:
        for b in range(6):
            if wait >> b & 1:
                pending.pop(b, None)
        words = text.split()
        op = words[1] if words[0].startswith("@") else words[0]
        if op.startswith("WARPGROUP.DEPBAR"):
            new_release = True
        if re.match(r"SYNCS\.ARRIVE\S*A1T0", op):
            if new_release:
                for v in pending.values():
                    v[1] += 1
                new_release = False
            late = sorted(a for a, n in pending.values() if n > slack)
            if late:
                bad.append((addr, late))
        if op.startswith("LDS") and wr != 7:
            pending[wr] = [addr, 0]
        if op.startswith(("BRA", "EXIT", "RET", "CALL")):
            pending.clear()
    return bad


def main(argv):
    args, tool = [], None
    it = iter(argv)
    for a in it:
        if a == "--cuobjdump":
            tool = next(it, None)
        else:
            args.append(a)
    if not args:
        print(__doc__.strip().split("\n\n")[2], file=sys.stderr)
        return 2
    texts = []
    for path in args:
        if path.endswith((".o", ".cubin", ".a", ".so")):
            tool = find_cuobjdump(tool)
            if not tool:
                print("sass_release_audit: no cuobjdump (PATH, /usr/local/cuda/bin, or the pip wheel "
                      "nvidia-cuda-cuobjdump): skipped")
                return 77
            # cuobjdump runs nvdisasm, which the PyPI wheels keep beside it
            env = dict(os.environ, PATH=os.path.dirname(tool) + os.pathsep + os.environ.get("PATH", ""))
            run = subprocess.run([tool, "-sass", path], capture_output=True, text=True, env=env)
            if run.returncode != 0:
                print(f"sass_release_audit: {tool} -sass {path} failed:\n{run.stderr.strip()}")
                return 77 if "nvdisasm" in run.stderr else 1
            texts.append(run.stdout)
        else:
            with open(path) as f:
                texts.append(f.read())
    seen = unsafe = 0
    for text in texts:
        for name, insts in sorted(kernels(text).items()):
            if not re.search(KERNEL, name):
                continue
            seen += 1
            bad = unsafe_releases(insts, 1 if two_scale_slots(name) else 0)
            m = re.search("(" + KERNEL + r")I(.*?)EEEv", name)
            args = re.sub(r"L[ib](\d+)E", r"\1,", m.group(2) + "E").rstrip(",") if m else name
            short = f"{m.group(1)}<{args.replace(',', ', ')}>" if m else name
            arrives = sum(1 for i in insts if "SYNCS.ARRIVE" in i[1] and "A1T0" in i[1])
            if bad:
                unsafe += 1
                print(f"UNSAFE {short}: {len(bad)} of {arrives} stage releases with a shared load in flight "
                      f"(release at {bad[0][0]}, loads at {', '.join(bad[0][1])})")
            else:
                print(f"ok     {short}: {arrives} stage releases")
    if seen == 0:
        print("sass_release_audit: no GEMM kernel found in the input")
        return 1
    print(f"{seen} GEMM kernels, {unsafe} unsafe")
    return 1 if unsafe else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
