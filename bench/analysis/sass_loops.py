#!/usr/bin/env python3
"""sass_loops.py — static SASS of the engine's NVRTC cubins: for each kernel, its resources
(registers, stack, spill traffic) and every loop (a backward branch and the instructions it
jumps back over), with the instruction mix that matters for a mat-vec: global loads, cp.async,
shared loads / stores, local (spill) traffic, tensor-core and dp4a ops, float and integer ops,
shuffles, barriers. A static count, not an executed one: a loop's body includes its cold
branches (tails, fallbacks), and nothing here says how often a loop runs — use it to compare
two template versions of the same kernel (bench/sass.sh A/B), ncu for executed counts.

    python3 bench/analysis/sass_loops.py --cuobjdump PATH CACHE_DIR [KEY_GLOB ...]

CACHE_DIR is an engine kernel cache (runtime/nvrtc.c: magic[8] | u64 src_hash | u64 size |
u64 xxh64 | u32 key_len | key | cubin), e.g. what `memra-plan --precompile sm_90 --cache-dir`
wrote; KEY_GLOB (fnmatch, e.g. 'mmvq:*b=16*') selects kernels. --against CACHE2 instead
compares every kernel with the same key in CACHE2 (another template set): "same SASS" or the
instruction count and mix of each side. --min N hides loops shorter
than N instructions (default 40). `--self-test` checks the parser on a built-in listing.
"""
import argparse
import collections
import fnmatch
import glob
import os
import re
import struct
import subprocess
import sys
import tempfile

# instruction classes printed per loop, in this order: (column, opcodes)
CLASSES = [
    ("LDG", {"LDG"}),
    ("cp.async", {"LDGSTS", "UBLKCP", "UTMALDG"}),
    ("LDS", {"LDS", "LDSM"}),
    ("STS", {"STS"}),
    ("spill", {"LDL", "STL"}),
    ("IMMA", {"IMMA", "HMMA"}),
    ("IDP", {"IDP"}),
    ("fp32", {"FADD", "FMUL", "FFMA", "FSETP", "FMNMX", "FSEL"}),
    ("int", {"IMAD", "IADD3", "LOP3", "SHF", "ISETP", "LEA", "IABS", "VIADD", "IMNMX", "PRMT",
             "SEL", "SHL", "SHR", "MOV", "I2F", "F2I", "I2FP", "F2IP"}),
    ("SHFL", {"SHFL"}),
    ("bar", {"BAR", "WARPSYNC", "BSSY", "BSYNC", "SYNCS", "DEPBAR", "LDGDEPBAR"}),
    ("BRA", {"BRA"}),
]
INSN = re.compile(r"^\s+/\*([0-9a-f]{4,6})\*/\s+(.*?)\s*;")
PRED = re.compile(r"^@!?U?P[0-9T]\s+")
TARGET = re.compile(r"\bBRA\b.*?0x([0-9a-f]+)")


def read_cache(path):
    """(key, cubin bytes) of one cache file, or None if it is not one."""
    b = open(path, "rb").read()
    if len(b) < 36:
        return None
    (kl,) = struct.unpack_from("<I", b, 32)
    if 36 + kl > len(b):
        return None
    return b[36:36 + kl].decode(errors="replace"), b[36 + kl:]


def opcode(text):
    return PRED.sub("", text).split()[0].split(".")[0]


def parse(sass):
    """[(address, opcode, text)] of one disassembled kernel."""
    out = []
    for line in sass.splitlines():
        m = INSN.match(line)
        if m:
            out.append((int(m.group(1), 16), opcode(m.group(2)), m.group(2)))
    return out


def loops(ins):
    """[(start, end)] of every backward branch, innermost first within each nest."""
    res = []
    for addr, op, text in ins:
        if op == "BRA":
            m = TARGET.search(text)
            if m and int(m.group(1), 16) < addr:
                res.append((int(m.group(1), 16), addr))
    return sorted(set(res), key=lambda r: (r[1] - r[0], r[0]))


def mix(ins, lo, hi):
    c = collections.Counter(op for a, op, _ in ins if lo <= a <= hi)
    cols = {name: sum(c[o] for o in ops) for name, ops in CLASSES}
    return sum(c.values()), cols


def resources(cuobjdump, cubin):
    out = subprocess.run([cuobjdump, "-res-usage", cubin], capture_output=True, text=True).stdout
    m = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+)", out)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else (0, 0, 0)


SELF_TEST = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   LDG.E.CONSTANT R2, desc[UR4][R4.64] ;
        /*0020*/              @!P0 IDP.4A.S8.S8 R3, R2, R2, RZ ;
        /*0030*/                   FADD R5, R5, -12582912 ;
        /*0040*/                   STL [R1+0x4], R5 ;
        /*0050*/                   ISETP.GE.AND P0, PT, R3, R6, PT ;
        /*0060*/               @P0 BRA 0x20 ;
        /*0070*/                   IMMA.16832.S8.S8 R8, R12.ROW, R16.COL, RZ ;
        /*0080*/                   BRA 0x10 ;
        /*0090*/                   EXIT ;
"""


def self_test():
    """The parser on a hand-written listing (CI runs it: scripts/test.sh)."""
    ins = parse(SELF_TEST)
    assert [op for _, op, _ in ins] == ["MOV", "LDG", "IDP", "FADD", "STL", "ISETP", "BRA", "IMMA",
                                        "BRA", "EXIT"], ins
    assert loops(ins) == [(0x20, 0x60), (0x10, 0x80)], loops(ins)
    n, cols = mix(ins, 0x20, 0x60)
    assert n == 5 and cols["IDP"] == 1 and cols["fp32"] == 1 and cols["spill"] == 1, cols
    assert cols["int"] == 1 and cols["BRA"] == 1 and cols["LDG"] == 0, cols
    n, cols = mix(ins, 0x10, 0x80)
    assert n == 8 and cols["LDG"] == 1 and cols["IMMA"] == 1 and cols["BRA"] == 2, cols
    print("sass_loops self-test: ok")


def kernels_of(cache, globs):
    """{key: cubin} of the cache's kernels whose keys match one of globs (all without)."""
    out = {}
    for f in sorted(glob.glob(os.path.join(cache, "*.cubin"))):
        kc = read_cache(f)
        if kc and (not globs or any(fnmatch.fnmatchcase(kc[0], g) for g in globs)):
            out[kc[0]] = kc[1]
    return out


def disassemble(cuobjdump, tmp, key, cubin):
    """(instructions, registers / stack / shared) of one cubin."""
    path = os.path.join(tmp, "k.cubin")
    open(path, "wb").write(cubin)
    sass = subprocess.run([cuobjdump, "-sass", path], capture_output=True, text=True)
    if sass.returncode:
        sys.exit(f"sass_loops: {cuobjdump} -sass failed on {key}: {sass.stderr.strip()}")
    return parse(sass.stdout), resources(cuobjdump, path)


def compare(a, kernels, tmp):
    """Every kernel against the same key of a.against: 0 when all have the same SASS."""
    other = kernels_of(a.against, None)
    differ = 0
    for key in sorted(kernels):
        if key not in other:
            print(f"{key}: not in {a.against}")
            continue
        (x, rx), (y, ry) = (disassemble(a.cuobjdump, tmp, key, c) for c in (kernels[key], other[key]))
        if [t for _, _, t in x] == [t for _, _, t in y] and rx == ry:
            print(f"{key}: same SASS ({len(x)} instructions)")
            continue
        differ += 1
        (nx, cx), (ny, cy) = mix(x, 0, 1 << 40), mix(y, 0, 1 << 40)
        print(f"{key}: DIFFERS: {nx} instructions, {rx[0]} registers here, {ny}, {ry[0]} there; "
              + ", ".join(f"{c} {cx[c]}/{cy[c]}" for c, _ in CLASSES if cx[c] != cy[c]))
    print(f"{len(kernels) - differ} of {len(kernels)} kernels with the same SASS on both sides")
    return 1 if differ else 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cuobjdump", default="cuobjdump")
    ap.add_argument("--min", type=int, default=40, help="hide loops shorter than this")
    ap.add_argument("--against", help="another cache: compare each kernel's SASS with it")
    ap.add_argument("cache")
    ap.add_argument("globs", nargs="*")
    a = ap.parse_args()
    kernels = kernels_of(a.cache, a.globs)
    if not kernels:
        sys.exit(f"sass_loops: no kernel of {a.cache} matches {a.globs or '*'}")
    hdr = "".join(f"{n:>9}" for n, _ in CLASSES)
    with tempfile.TemporaryDirectory() as tmp:
        if a.against:
            return compare(a, kernels, tmp)
        for key, cubin in sorted(kernels.items()):
            ins, (reg, stack, shared) = disassemble(a.cuobjdump, tmp, key, cubin)
            n, cols = mix(ins, 0, 1 << 40)
            print(f"{key}: {n} instructions, {reg} registers, stack {stack} B, static shared "
                  f"{shared} B, spill instructions {cols['spill']}")
            print(f"  {'loop':<17}{'instr':>7}{hdr}")
            for lo, hi in loops(ins):
                n, cols = mix(ins, lo, hi)
                if n >= a.min:
                    print(f"  {lo:#07x}-{hi:#07x}{n:>7}" + "".join(f"{cols[c]:>9}" for c, _ in CLASSES))


if __name__ == "__main__":
    sys.exit(main())
