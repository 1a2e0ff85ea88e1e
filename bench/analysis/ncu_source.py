#!/usr/bin/env python3
"""ncu_source.py — where a kernel's warps stall, per SASS instruction: a digest of Nsight
Compute's source page (`ncu -i REPORT --page source --csv --print-source sass`, what
bench/device-ncu.sh NCU_SOURCE=1 writes as source.csv). For each kernel block of the CSV:
the PC-sampling total, the samples by instruction class (the classes of sass_loops.py) and
by opcode and by stall reason (the page's stall_* columns, when it has them), and the
instructions with the most samples, with their SASS. The CSV's header
names the columns; this reads the first one whose name has "Sampling" and "All" in it (the
all-samples count), else any "Sampling" column, and "Source" for the SASS text, so that a
changed layout fails loudly (the header is printed) instead of misreading. Read against a
real page: ncu 2025.3 on the H200 (bench/results/ncu-source-2026-12-05.txt).

    python3 bench/analysis/ncu_source.py source.csv [--top 25]
    python3 bench/analysis/ncu_source.py --self-test
"""
import argparse
import collections
import csv
import io
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sass_loops import CLASSES, opcode  # noqa: E402


def num(cell):
    try:
        return float(cell.replace(",", "")) if cell not in ("", "n/a", "N/A") else 0.0
    except ValueError:
        return 0.0


def blocks(rows):
    """[(header, data rows)] — a header is a row with a 'Source' cell and a sampling column."""
    out = []
    for r in rows:
        if "Source" in r and any("Sampling" in c for c in r):
            out.append((r, []))
        elif out and len(r) == len(out[-1][0]):
            out[-1][1].append(r)
    return out


def sample_column(hdr):
    for c in hdr:
        if "Sampling" in c and "All" in c:
            return hdr.index(c)
    return next(i for i, c in enumerate(hdr) if "Sampling" in c)


def digest(text, top=25, file=sys.stdout):
    bl = blocks(list(csv.reader(io.StringIO(text))))
    if not bl:
        head = text.splitlines()[:5]
        raise SystemExit("ncu_source: no source table (a header with Source and a Sampling "
                         "column) in the CSV; its first lines:\n" + "\n".join(head))
    cls = {op: name for name, ops in CLASSES for op in ops}
    res = []
    for k, (hdr, data) in enumerate(bl):
        src, smp = hdr.index("Source"), sample_column(hdr)
        addr = hdr.index("Address") if "Address" in hdr else None
        tot = sum(num(r[smp]) for r in data)
        by_cls, by_op = collections.Counter(), collections.Counter()
        for r in data:
            op = opcode(r[src]) if r[src].strip() else "?"
            by_op[op] += num(r[smp])
            by_cls[cls.get(op, "other")] += num(r[smp])
        pct = (lambda v: 100.0 * v / tot) if tot else (lambda v: 0.0)
        print(f"kernel block {k}: {len(data)} instructions, {tot:.0f} samples "
              f"(column '{hdr[smp]}')", file=file)
        print("  by class: " + ", ".join(f"{c} {pct(v):.1f}%" for c, v in by_cls.most_common()),
              file=file)
        print("  by opcode: " + ", ".join(f"{o} {pct(v):.1f}%" for o, v in by_op.most_common(12)),
              file=file)
        why = [(c[len("stall_"):], i) for i, c in enumerate(hdr)
               if c.startswith("stall_") and "Not Issued" not in c]
        by_why = collections.Counter({w: sum(num(r[i]) for r in data) for w, i in why})
        wtot = sum(by_why.values())
        if wtot:
            print("  by stall reason: " + ", ".join(f"{w} {100.0 * v / wtot:.1f}%"
                                                    for w, v in by_why.most_common(10) if v),
                  file=file)
        for r in sorted(data, key=lambda r: -num(r[smp]))[:top]:
            a = r[addr] if addr is not None else ""
            print(f"  {pct(num(r[smp])):5.1f}%  {a:>8}  {r[src].strip()}", file=file)
        res.append((tot, by_cls, by_why))
    return res


SELF_TEST = '''"Kernel Name","memra_mmvq",
"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)","Instructions Executed","stall_long_sb","stall_wait","stall_wait (Not Issued)"
"0x7f00","IMAD R1, R2, R3, RZ","10","8","100","0","10","9"
"0x7f10","LDG.E.CONSTANT R4, desc[UR4][R6.64]","5","5","100","5","0","0"
"0x7f20","@P0 IMMA.16832.S8.S8 R8, R12.ROW, R16.COL, RZ","25","20","50","20","5","5"
"0x7f30","FADD R5, R5, -12582912","60","30","800","0","60","30"
'''


def self_test():
    out = io.StringIO()
    (tot, by_cls, by_why), = digest(SELF_TEST, top=2, file=out)
    assert tot == 100 and by_cls["fp32"] == 60 and by_cls["IMMA"] == 25, (tot, by_cls)
    assert by_cls["int"] == 10 and by_cls["LDG"] == 5, by_cls
    assert by_why == {"long_sb": 25, "wait": 75}, by_why  # the Not Issued column left out
    lines = out.getvalue().splitlines()
    assert lines[3] == "  by stall reason: wait 75.0%, long_sb 25.0%", lines
    assert "60.0%" in lines[4] and "FADD" in lines[4] and "IMMA" in lines[5], lines
    print("ncu_source self-test: ok")


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    digest(open(a.csv, errors="replace").read(), a.top)


if __name__ == "__main__":
    main()
