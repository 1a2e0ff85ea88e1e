#!/usr/bin/env python3
"""check_gguf_compat.py — cross-check memra's GGUF reader/writer with the independent Python
`gguf` package (gguf-py, scripts/requirements-test.txt).

  check_gguf_compat.py read FILE    FILE was written by memra (tests/test_gguf.c write_compat);
                                    read it with gguf.GGUFReader and check every key, value,
                                    type, tensor name, shape, type, offset and data byte.
  check_gguf_compat.py write FILE   write the same content with gguf.GGUFWriter; test_gguf.c
                                    then reads it with memra and checks it identically.

The expected content is defined twice on purpose, here and in test_gguf.c (compat_set_kvs,
k_compat_tensors, pattern_byte): keep them in sync. Exit status 0 = all checks passed; any
mismatch, a missing python module or a reader error exits nonzero with a message on stderr.
"""
import sys

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf import GGUFReader, GGUFValueType as VT, GGUFWriter

ALIGN = 64

# key -> (type, value); arrays: (ARRAY, element type, values)
KVS = {
    "general.architecture": (VT.STRING, "memra-test"),
    "test.u8": (VT.UINT8, 200),
    "test.i8": (VT.INT8, -100),
    "test.u16": (VT.UINT16, 60000),
    "test.i16": (VT.INT16, -30000),
    "test.u32": (VT.UINT32, 4000000000),
    "test.i32": (VT.INT32, -2000000000),
    "test.f32": (VT.FLOAT32, 1.5),
    "test.bool": (VT.BOOL, True),
    "test.str": (VT.STRING, "h\u00e9llo"),
    "test.u64": (VT.UINT64, (1 << 40) + 3),
    "test.i64": (VT.INT64, -((1 << 40) + 5)),
    "test.f64": (VT.FLOAT64, 0.1),
    "test.arr_i32": (VT.ARRAY, VT.INT32, [1, -2, 3, -4, 5]),
    "test.arr_f32": (VT.ARRAY, VT.FLOAT32, [0.5, -1.25, 3.0]),
    "test.arr_u8": (VT.ARRAY, VT.UINT8, [0, 1, 255]),
    "test.arr_str": (VT.ARRAY, VT.STRING, ["alpha", "", "gamma \u03b4"]),
    "general.alignment": (VT.UINT32, ALIGN),
}

# name, type, ne (ne[0] first, as stored in GGUF)
TENSORS = [
    ("tok_embd.weight", QT.F32, [8, 3]),
    ("blk.0.attn_q.weight", QT.F16, [16, 2]),
    ("blk.0.ffn_up.weight", QT.Q8_0, [64, 2]),
    ("blk.0.ffn_down.weight", QT.Q4_K, [256, 1]),
    ("output_norm.weight", QT.F32, [5]),
]

# bytes per block / elements per block (spec/gguf-and-quants.md §2)
BLOCK = {QT.F32: (1, 4), QT.F16: (1, 2), QT.Q8_0: (32, 34), QT.Q4_K: (256, 144)}


def nbytes(qt, ne):
    elems, size = BLOCK[qt]
    rows = int(np.prod(ne[1:])) if len(ne) > 1 else 1
    return ne[0] // elems * size * rows


def pattern(i, n):
    """Byte k of tensor i = (i*37 + k*11 + 5) mod 256 (test_gguf.c pattern_byte)."""
    k = np.arange(n, dtype=np.uint64)
    return ((i * 37 + k * 11 + 5) % 256).astype(np.uint8)


def fail(msg):
    sys.stderr.write("check_gguf_compat: " + msg + "\n")
    sys.exit(1)


def expect(cond, msg):
    if not cond:
        fail(msg)


def check_field(key, field, spec):
    types = list(field.types)
    expect(types[0] == spec[0], f"{key}: type {types[0]!r}, want {spec[0]!r}")
    if spec[0] == VT.ARRAY:
        expect(types[-1] == spec[1], f"{key}: element type {types[-1]!r}, want {spec[1]!r}")
        got, want = field.contents(), spec[2]
    else:
        got, want = field.contents(), spec[1]
    if spec[0] == VT.FLOAT32 or (spec[0] == VT.ARRAY and spec[1] == VT.FLOAT32):
        # values chosen exactly representable in fp32: compare exactly
        want = [float(np.float32(x)) for x in want] if isinstance(want, list) else float(np.float32(want))
    expect(got == want, f"{key}: value {got!r}, want {want!r}")


def cmd_read(path):
    r = GGUFReader(path)
    keys = [k for k in r.fields if not k.startswith("GGUF.")]
    expect(sorted(keys) == sorted(KVS), f"keys {sorted(keys)} != {sorted(KVS)}")
    for key, spec in KVS.items():
        check_field(key, r.fields[key], spec)
    expect(len(r.tensors) == len(TENSORS), f"{len(r.tensors)} tensors, want {len(TENSORS)}")
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    for i, (t, (name, qt, ne)) in enumerate(zip(r.tensors, TENSORS)):
        expect(t.name == name, f"tensor {i}: name {t.name!r}, want {name!r}")
        expect(t.tensor_type == qt, f"{name}: type {t.tensor_type!r}, want {qt!r}")
        expect(list(map(int, t.shape)) == ne, f"{name}: shape {list(t.shape)}, want {ne}")
        n = nbytes(qt, ne)
        expect(int(t.n_bytes) == n, f"{name}: {t.n_bytes} bytes, want {n}")
        expect(t.data_offset % ALIGN == 0, f"{name}: data offset {t.data_offset} not {ALIGN}-aligned")
        got = np.asarray(raw[t.data_offset:t.data_offset + n])
        expect(np.array_equal(got, pattern(i, n)), f"{name}: data differs")
        # the reader's typed view must be the same bytes
        expect(t.data.tobytes() == pattern(i, n).tobytes(), f"{name}: typed view differs")
    print(f"check_gguf_compat read: {len(KVS)} keys, {len(TENSORS)} tensors OK")


def cmd_write(path):
    w = GGUFWriter(path, arch="memra-test")  # writes general.architecture itself
    w.add_custom_alignment(ALIGN)
    for key, spec in KVS.items():
        if key in ("general.architecture", "general.alignment"):
            continue
        if spec[0] == VT.ARRAY:
            w.add_key_value(key, spec[2], VT.ARRAY, sub_type=spec[1])
        else:
            w.add_key_value(key, spec[1], spec[0])
    for i, (name, qt, ne) in enumerate(TENSORS):
        data = pattern(i, nbytes(qt, ne))
        if qt == QT.F32:
            w.add_tensor(name, data.view(np.float32).reshape(ne[::-1]))
        elif qt == QT.F16:
            w.add_tensor(name, data.view(np.float16).reshape(ne[::-1]))
        else:  # quantized: a uint8 array of the byte shape, rows = ne[1:]
            rows = ne[::-1][:-1]
            w.add_tensor(name, data.reshape(rows + [-1]), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"check_gguf_compat write: {path}")


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("read", "write"):
        fail("usage: check_gguf_compat.py read|write FILE")
    (cmd_read if sys.argv[1] == "read" else cmd_write)(sys.argv[2])


if __name__ == "__main__":
    main()
