#!/usr/bin/env python3
"""gen_gguf_corpus.py — write the libFuzzer seed corpus for fuzz/fuzz_gguf.c.

Small hand-built GGUF files (stdlib struct only, spec/gguf-and-quants.md §1): valid ones that
reach every reader path (all value types, string arrays, alignment, n_dims 0..4, quantized
types, several tensors) and a few malformed ones near the edges of the rules. Deterministic:
running it again gives the same bytes.

    python3 tests/py/gen_gguf_corpus.py [OUT_DIR]     (default fuzz/corpus/gguf)
"""
import os
import struct
import sys

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
SCALAR_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
              BOOL: "<B", U64: "<Q", I64: "<q", F64: "<d"}
# type id -> (block elements, block bytes) for the types used here
QT = {0: (1, 4), 1: (1, 2), 2: (32, 18), 8: (32, 34), 12: (256, 144), 30: (1, 2), 40: (64, 36)}


def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def kv(key, vtype, val, elem=None):
    out = gstr(key) + struct.pack("<I", vtype)
    if vtype == STR:
        return out + gstr(val)
    if vtype == ARR:
        out += struct.pack("<IQ", elem, len(val))
        for v in val:
            out += gstr(v) if elem == STR else struct.pack(SCALAR_FMT[elem], v)
        return out
    return out + struct.pack(SCALAR_FMT[vtype], val)


def gguf(kvs, tensors, align=32, version=3, data_fill=None):
    """tensors: (name, type, ne list); offsets are laid out contiguously, padded to align."""
    infos, off, sizes = b"", 0, []
    for name, qt, ne in tensors:
        elems, size = QT[qt]
        rows = 1
        for d in ne[1:]:
            rows *= d
        nb = (ne[0] if ne else 1) // elems * size * rows
        infos += gstr(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        infos += struct.pack("<IQ", qt, off)
        sizes.append((off, nb))
        off += (nb + align - 1) // align * align
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs)) + b"".join(kvs) + infos
    head += b"\0" * (-len(head) % align)
    data = bytearray(off)
    for i, (o, nb) in enumerate(sizes):
        for k in range(nb):
            data[o + k] = (i * 37 + k * 11 + 5) & 0xFF if data_fill is None else data_fill
    return head + bytes(data)


def seeds():
    s = {}
    s["example_1_7"] = gguf([kv("a", U32, 123)], [("t", 0, [32])])
    s["v2"] = gguf([kv("a", U32, 123)], [("t", 0, [32])], version=2)
    s["empty_24"] = gguf([], [], align=1)
    s["all_scalars"] = gguf([kv("u8", U8, 200), kv("i8", I8, -1), kv("u16", U16, 60000),
                             kv("i16", I16, -3), kv("u32", U32, 7), kv("i32", I32, -7),
                             kv("f32", F32, 1.5), kv("bool", BOOL, 1), kv("s", STR, "hi"),
                             kv("u64", U64, 1 << 40), kv("i64", I64, -(1 << 40)),
                             kv("f64", F64, 0.1)], [])
    s["arrays"] = gguf([kv("general.architecture", STR, "qwen35"),
                        kv("tokenizer.ggml.tokens", ARR, ["a", "b", "", "\u00e9"], STR),
                        kv("tokenizer.ggml.token_type", ARR, [1, 1, 3, 1], I32),
                        kv("scores", ARR, [0.5, -1.0], F32), kv("empty", ARR, [], U8)],
                       [("tok", 0, [4])])
    s["align64_multi"] = gguf([kv("general.alignment", U32, 64)],
                              [("a", 0, [8, 3]), ("b", 1, [16, 2]), ("c", 8, [64, 2]),
                               ("d", 12, [256]), ("e", 30, [5])], align=64)
    s["ndims_0_to_4"] = gguf([], [("s", 0, []), ("v", 0, [3]), ("m", 0, [2, 2]),
                                  ("c", 0, [2, 1, 2]), ("h", 0, [1, 2, 1, 2])])
    s["nvfp4_scale"] = gguf([], [("w.weight", 40, [64, 2]), ("w.scale", 0, [1])])
    bad = s["align64_multi"]
    s["bad_truncated"] = bad[:-60]  # cuts into tensor e (10 B + 54 B pad)
    s["bad_dup_key"] = gguf([kv("a", U32, 1), kv("a", U32, 2)], [])
    s["bad_nested"] = gguf([gstr("a") + struct.pack("<IIQIQB", ARR, ARR, 1, U8, 1, 5)], [])
    s["bad_align_arr"] = gguf([kv("general.alignment", ARR, [32], U32)], [("t", 0, [32])])
    ov = bytearray(gguf([], [("t0", 0, [32]), ("t1", 0, [32])]))
    struct.pack_into("<Q", ov, ov.index(b"t1") + 2 + 4 + 8 + 4, 96)  # t1 offset 96: overlaps t0
    s["bad_overlap"] = bytes(ov)
    return s


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..",
                                                             "fuzz", "corpus", "gguf")
    os.makedirs(out, exist_ok=True)
    for name, data in seeds().items():
        with open(os.path.join(out, name + ".gguf"), "wb") as f:
            f.write(data)
    print(f"wrote {len(seeds())} seeds to {out}")


if __name__ == "__main__":
    main()
