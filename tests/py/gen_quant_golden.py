#!/usr/bin/env python3
"""gen_quant_golden.py - golden data for tests/test_quant.c, from independent references.

Oracles (none of them is memra code):
  * gguf-py (gguf.quants, pinned in scripts/requirements-test.txt): dequantization of every
    block type it has, and quantization of the types it quantizes with ggml's reference
    arithmetic (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, MXFP4, BF16; F16 is numpy's RN-even cast).
  * numpy float32: fp16 conversions, the engine q8_1 formula of spec §4.2 [engine]
    (IEEE division, roundf, butterfly-order sum, no FTZ), Q8_K (absent from gguf-py).

Blocks follow spec/gguf-and-quants.md §6.2: random bytes from a fixed seed with the scale
fields overwritten by finite values (fp16 d/dmin in ±[2^-14, 2^4] plus fp16 subnormals;
MXFP4 e in {0, 1, 2, 100..150, 254}; NVFP4 scale bytes in {0x00, 0x01, 0x07, 0x08, 0x38,
0x7E, 0x7F}), then fixed edge blocks (all-zero, all-0xFF codes, Q6_K scales -128/127,
IQ4_XS ls 0/63, K-quant scale bytes 0xC0/0x3F/0xFF, MXFP4 e = 255, NVFP4 scale bytes with
bit 7 set).

File format (tests/data/quant/*.bin, little-endian):
  "MQG1", u32 type id (or 0), u32 nA, u32 nB, A[nA bytes], B[nB bytes]
  deq_<type>.bin    A = blocks, B = f32 dequantized values
  qref_inputs.bin   A = f32 inputs of the quantizer comparison
  qref_<type>.bin   A = gguf-py-quantized blocks of qref_inputs
  q8_1.bin          A = f32 inputs, B = engine q8_1 blocks (36 B each)
  conv_*.bin        scalar conversion pairs (A = inputs, B = outputs)
  dot_<type>.bin    A = N weight dot blocks then their q8_1 blocks, B = f32 r per block,
                    from a numpy float32 re-implementation of the documented engine formulas
                    (the contract the CUDA mmvq templates reproduce bit for bit)
  rt_inputs.bin     A = f32 rows quantized by memra in the round-trip check
  rt_<type>.bin     A = memra-quantized blocks of rt_inputs, B = gguf-py's dequantization

Usage:
  python3 tests/py/gen_quant_golden.py                 # everything except rt_<type>.bin
  # rt_<type>.bin: a memra-quantized tensor must dequantize identically in gguf-py.
  MEMRA_QUANT_DUMP_DIR=/tmp/mq build-quant/test_quant  # test writes memra_<type>.q there
  python3 tests/py/gen_quant_golden.py --memra-dir /tmp/mq
"""
import argparse
import os
import struct
import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "quant")
SEED = 0x6D656D7261  # "memra"

# name -> (ggml type id, block elems, block bytes)
TYPES = {
    "q4_0": (T.Q4_0, 32, 18), "q4_1": (T.Q4_1, 32, 20), "q5_0": (T.Q5_0, 32, 22),
    "q5_1": (T.Q5_1, 32, 24), "q8_0": (T.Q8_0, 32, 34), "iq4_nl": (T.IQ4_NL, 32, 18),
    "mxfp4": (T.MXFP4, 32, 17), "nvfp4": (T.NVFP4, 64, 36), "q4_K": (T.Q4_K, 256, 144),
    "q5_K": (T.Q5_K, 256, 176), "q6_K": (T.Q6_K, 256, 210), "iq4_xs": (T.IQ4_XS, 256, 136),
    "q8_K": (T.Q8_K, 256, 292),
}
# fp16 scale fields: byte offsets inside the block
FP16_FIELDS = {
    "q4_0": [0], "q4_1": [0, 2], "q5_0": [0], "q5_1": [0, 2], "q8_0": [0], "iq4_nl": [0],
    "q4_K": [0, 2], "q5_K": [0, 2], "q6_K": [208], "iq4_xs": [0],
}


def write(name, tid, a, b):
    a = bytes(a)
    b = bytes(b)
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(b"MQG1" + struct.pack("<III", int(tid), len(a), len(b)) + a + b)


def rand_fp16(rng, n):
    """fp16 bit patterns: ±[2^-14, 2^4] (exponent fields 1..19) and about 1/8 subnormals."""
    exp = rng.integers(1, 20, n, dtype=np.uint16)
    man = rng.integers(0, 1024, n, dtype=np.uint16)
    sign = rng.integers(0, 2, n, dtype=np.uint16) << 15
    bits = sign | (exp << 10) | man
    sub = rng.random(n) < 0.125
    bits[sub] = (sign[sub] | rng.integers(1, 1024, int(sub.sum()), dtype=np.uint16))
    return bits


def set_u16(blocks, off, vals):
    blocks[:, off] = vals & 0xFF
    blocks[:, off + 1] = vals >> 8


def random_blocks(rng, name, n):
    _, _, nbytes = TYPES[name]
    b = rng.integers(0, 256, (n, nbytes), dtype=np.uint8)
    for off in FP16_FIELDS.get(name, []):
        set_u16(b, off, rand_fp16(rng, n))
    if name == "mxfp4":
        choices = np.array([0, 1, 2, 254] + list(range(100, 151)), dtype=np.uint8)
        b[:, 0] = rng.choice(choices, n)
    elif name == "nvfp4":
        choices = np.array([0x00, 0x01, 0x07, 0x08, 0x38, 0x7E, 0x7F], dtype=np.uint8)
        b[:, 0:4] = rng.choice(choices, (n, 4))
    elif name == "q8_K":
        d = (rng.standard_normal(n) * 2.0 ** rng.integers(-20, 4, n)).astype(np.float32)
        b[:, 0:4] = d.view(np.uint8).reshape(n, 4)
    return b


def edge_blocks(name):
    """Fixed edge blocks of spec §6.2 (each row one block)."""
    _, _, nbytes = TYPES[name]
    rows = [np.zeros(nbytes, np.uint8), np.full(nbytes, 0xFF, np.uint8)]
    one = np.full(nbytes, 0xFF, np.uint8)  # all codes 0xFF with sane scales
    for off in FP16_FIELDS.get(name, []):
        one[off:off + 2] = (0x00, 0x3C)  # 1.0
    if name == "mxfp4":
        one[0] = 127
        e255 = one.copy()
        e255[0] = 255  # invalid per validation; the CPU reference gives 2^127
        rows += [e255]
    if name == "nvfp4":
        one[0:4] = (0x38, 0x7E, 0x01, 0x08)
        bit7 = one.copy()
        bit7[0:4] = (0xB8, 0xFF, 0x80, 0xFE)  # bit 7 set: see memra_ue4m3_half_to_f32
        rows += [bit7]
    if name == "q8_K":
        one[0:4] = np.frombuffer(np.float32(0.25).tobytes(), np.uint8)
    rows.append(one)
    if name in ("q4_K", "q5_K"):
        for sb in (0xC0, 0x3F, 0xFF):
            r = one.copy()
            r[4:16] = sb
            r[0:4] = (0x00, 0x3C, 0x00, 0x38)  # d = 1, dmin = 0.5
            rows.append(r)
    if name == "q6_K":
        for sc in (0x80, 0x7F):
            r = np.arange(nbytes, dtype=np.uint8) * 37
            r[192:208] = sc
            r[208:210] = (0x00, 0x3C)
            rows.append(r)
    if name == "iq4_xs":
        for sh, sl in ((0x0000, 0x00), (0xFFFF, 0xFF)):  # ls = 0 and ls = 63
            r = np.arange(nbytes, dtype=np.uint8) * 29
            r[0:2] = (0x00, 0x3C)
            r[2:4] = (sh & 0xFF, sh >> 8)
            r[4:8] = sl
            rows.append(r)
    return np.stack(rows)


def dequant_ref(name, blocks):
    tid, elems, _ = TYPES[name]
    if name == "q8_K":  # not in gguf-py: value = d × f(q), float32
        d = blocks[:, 0:4].copy().view(np.float32)
        q = blocks[:, 4:260].view(np.int8).astype(np.float32)
        return (d * q).astype(np.float32)
    with np.errstate(over="ignore"):  # MXFP4 e = 255 edge block overflows to Inf
        out = quants.dequantize(blocks, tid)
    assert out.dtype == np.float32 and out.shape == (blocks.shape[0], elems)
    return out


def gen_deq(rng):
    for name, (tid, _, _) in TYPES.items():
        n = 32 if TYPES[name][1] == 256 else 64
        blocks = np.concatenate([random_blocks(rng, name, n), edge_blocks(name)])
        write(f"deq_{name}.bin", tid, blocks.tobytes(), dequant_ref(name, blocks).tobytes())


def roundf(v):
    """C roundf (half away from zero) on float32, Inf/NaN passed through."""
    r = quants.np_roundf(v).astype(np.float32)
    return np.where(np.isfinite(v), r, v).astype(np.float32)


def q8_1_engine(x):
    """Engine q8_1 of spec §4.2 [engine] on float32 rows of 32."""
    x = x.reshape(-1, 32).astype(np.float32)
    out = bytearray()
    for v in x:
        amax = np.fmax.reduce(np.abs(v))
        d = np.float32(amax) / np.float32(127.0)
        with np.errstate(all="ignore"):
            r = roundf(v / d) if d != 0 else np.zeros(32, np.float32)
        r = np.where(np.isnan(r), np.float32(0), np.clip(r, -127, 127)).astype(np.int8)
        s = v.copy()
        with np.errstate(all="ignore"):
            for o in (16, 8, 4, 2, 1):
                s[:o] = s[:o] + s[o:2 * o]
        with np.errstate(all="ignore"):
            out += np.float16(d).tobytes() + np.float16(s[0]).tobytes() + r.tobytes()
    return bytes(out)


def gen_q8_1(rng):
    tiny = np.float32(2.0 ** -149)
    blocks = [
        np.zeros(32, np.float32),                                   # d = s = 0
        np.array([127, 2.5, -2.5, 0.5, -0.5, 1.5, -1.5, 126.5] + [0.25 * i for i in range(24)],
                 np.float32),                                        # d = 1: exact ties
        np.concatenate([[-100.0], rng.uniform(-99, 99, 31)]).astype(np.float32),  # -> -127
        np.full(32, 1e30, np.float32) * rng.choice([-1, 1], 32),     # fp16(d) = Inf
        rng.standard_normal(32).astype(np.float32) * np.float32(1e-40),  # subnormal inputs
        np.array([190, -3, 5, 64] + [1] * 28, np.float32) * tiny,    # subnormal d: clamp to 127
        np.array([3, -1, 2] + [0] * 29, np.float32) * tiny,           # amax/127 -> d = 0
        np.concatenate([[np.inf], rng.standard_normal(31)]).astype(np.float32),
        np.concatenate([[np.nan], rng.standard_normal(31)]).astype(np.float32),
        np.concatenate([[-np.inf, np.inf], rng.standard_normal(30)]).astype(np.float32),
        np.full(32, 65504.0 * 127.0, np.float32),                    # d at the fp16 edge
    ]
    for e in (-30, -12, -3, 0, 3, 12):
        for _ in range(8):
            blocks.append((rng.standard_normal(32) * 2.0 ** e).astype(np.float32))
    x = np.concatenate(blocks).astype(np.float32)
    write("q8_1.bin", 0, x.tobytes(), q8_1_engine(x))


def gen_conv(rng):
    h = rng.integers(0, 65536, 4096, dtype=np.uint32).astype(np.uint16)
    h = h[((h & 0x7C00) != 0x7C00) | ((h & 0x3FF) == 0)]  # fp16 NaNs are checked in C
    write("conv_f16_to_f32.bin", 0, h.tobytes(), h.view(np.float16).astype(np.float32).tobytes())
    # f32 -> f16: random patterns concentrated on the fp16 range, plus exact ties.
    u = rng.integers(0x30000000, 0x48000000, 3000, dtype=np.uint32)
    u[::3] &= ~np.uint32(0xFFF)      # low bits zero: many exact half-way cases
    u[1::3] |= np.uint32(0x1000)
    u = np.concatenate([u, rng.integers(0, 0x7F800001, 1000, dtype=np.uint32)])
    u |= rng.integers(0, 2, u.size, dtype=np.uint32) << np.uint32(31)
    f = u.view(np.float32)
    with np.errstate(over="ignore"):
        write("conv_f32_to_f16.bin", 0, f.tobytes(), f.astype(np.float16).tobytes())
    ub = rng.integers(0, 2**32, 4000, dtype=np.uint64).astype(np.uint32)
    ub[::4] = (ub[::4] & 0xFFFF0000) | 0x8000  # ties
    ub[1::4] = 0x7F800000 | (ub[1::4] & 0x807FFFFF) | 1  # NaNs: quieting
    fb = ub.view(np.float32).reshape(-1, 1)
    bf = quants.quantize(fb, T.BF16)
    write("conv_f32_to_bf16.bin", 0, fb.tobytes(), bf.tobytes())


def ref_inputs(rng, nblocks):
    """Rows for quantizer comparisons: normal data at varied block scales, a zero block,
    a constant block and a block with one outlier."""
    x = rng.standard_normal((nblocks, 32)).astype(np.float32)
    x *= (2.0 ** rng.integers(-8, 8, (nblocks, 1))).astype(np.float32)
    x[0] = 0
    x[1] = 0.75
    x[2, 5] = 40.0
    return x.reshape(-1)


def gen_qref(rng):
    x = ref_inputs(rng, 64)
    write("qref_inputs.bin", 0, x.tobytes(), b"")
    for name, tid in (("q8_0", T.Q8_0), ("q4_0", T.Q4_0), ("q4_1", T.Q4_1), ("q5_0", T.Q5_0),
                      ("q5_1", T.Q5_1), ("mxfp4", T.MXFP4), ("bf16", T.BF16),
                      ("f16", T.F16)):
        q = quants.quantize(x.reshape(1, -1), tid)
        write(f"qref_{name}.bin", tid, np.ascontiguousarray(q).tobytes(), b"")



# ---------------------------------------------------------------------------------------
# Engine dot formulas (runtime/quant.c section comments), written independently in numpy
# float32: integer sums in Python ints, then the documented fp32 operations in order. numpy
# float32 scalar arithmetic is IEEE round-to-nearest without FMA.
F = np.float32
KV4 = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113]
KVF = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12]


def f16(b, off):
    return F(np.frombuffer(bytes(b[off:off + 2]), np.float16)[0])


def nib32(qs):  # Q4_0-style placement: lo nibbles are elements 0..15, hi 16..31
    return [qs[j] & 15 for j in range(16)] + [qs[j] >> 4 for j in range(16)]


def tree8(c):
    return ((c[0] + c[1]) + (c[2] + c[3])) + ((c[4] + c[5]) + (c[6] + c[7]))


def q8(a, k):
    """(d_a, q list) of q8_1 block k in the byte string a."""
    blk = a[36 * k:36 * k + 36]
    return f16(blk, 0), [int(v) for v in np.frombuffer(bytes(blk[4:36]), np.int8)]


def idot(c, q):
    return sum(int(x) * int(y) for x, y in zip(c, q))


def dot_ref(name, w, a):
    w = [int(v) for v in w]  # plain ints: no uint8 wrap-around in the integer parts
    if name in ("f32", "f16", "bf16"):
        vals = {"f32": lambda: np.frombuffer(bytes(w), np.float32),
                "f16": lambda: np.frombuffer(bytes(w), np.float16).astype(np.float32),
                "bf16": lambda: (np.frombuffer(bytes(w), np.uint16).astype(np.uint32) << 16)
                .view(np.float32)}[name]()
        da, q = q8(a, 0)
        p = F(0)
        for j in range(32):
            p = p + vals[j] * F(q[j])
        return da * p
    if name in ("q8_0", "q4_0", "q5_0", "iq4_nl", "mxfp4"):
        da, q = q8(a, 0)
        if name == "q8_0":
            c = list(np.frombuffer(bytes(w[2:34]), np.int8))
        elif name == "q4_0":
            c = [n - 8 for n in nib32(w[2:18])]
        elif name == "q5_0":
            qh = int.from_bytes(bytes(w[2:6]), "little")
            c = [n + 16 * ((qh >> j) & 1) - 16 for j, n in enumerate(nib32(w[6:22]))]
        elif name == "iq4_nl":
            c = [KV4[n] for n in nib32(w[2:18])]
        else:
            c = [KVF[n] for n in nib32(w[1:17])]
            h = quants.MXFP4.e8m0_to_fp32_half(np.array([w[0]], np.uint8))[0]
            return (F(h) * da) * F(idot(c, q))
        return (f16(w, 0) * da) * F(idot(c, q))
    if name in ("q4_1", "q5_1"):
        da, q = q8(a, 0)
        if name == "q4_1":
            n = nib32(w[4:20])
        else:
            qh = int.from_bytes(bytes(w[4:8]), "little")
            n = [v + 16 * ((qh >> j) & 1) for j, v in enumerate(nib32(w[8:24]))]
        return (f16(w, 0) * da) * F(idot(n, q)) + (f16(w, 2) * da) * F(sum(q))
    if name == "nvfp4":
        c = []
        for s in range(4):
            qs = w[4 + 8 * s:12 + 8 * s]
            codes = [KVF[b & 15] for b in qs] + [KVF[b >> 4] for b in qs]
            da, q = q8(a, s // 2)
            # [engine] bit 7 of the scale byte is treated as 0 (differs from gguf-py at 0xFF)
            u = F(quants.NVFP4.ue4m3_to_fp32(np.array([w[s] & 0x7F], np.uint8))[0])
            c.append(u * F(idot(codes, q[16 * (s % 2):16 * (s % 2) + 16])))
        return q8(a, 0)[0] * (c[0] + c[1]) + q8(a, 1)[0] * (c[2] + c[3])
    if name in ("q4_K", "q5_K"):
        sc, m = quants.Q4_K.get_scale_min(np.frombuffer(bytes(w[4:16]), np.uint8).reshape(1, 12))
        qs = w[16:144] if name == "q4_K" else w[48:176]
        A, B = [], []
        for k in range(8):
            row = qs[32 * (k // 2):32 * (k // 2) + 32]
            n = [(b & 15) if k % 2 == 0 else (b >> 4) for b in row]
            if name == "q5_K":
                n = [v + 16 * ((w[16 + l] >> k) & 1) for l, v in enumerate(n)]
            da, q = q8(a, k)
            A.append(da * F(int(sc[0, k]) * idot(n, q)))
            B.append(da * F(int(m[0, k]) * sum(q)))
        return f16(w, 0) * tree8(A) - f16(w, 2) * tree8(B)
    if name == "q6_K":
        c = []
        for e in range(256):
            h, r = divmod(e, 128)
            k, l = divmod(r, 32)
            b = w[64 * h + l + 32 * (k & 1)]
            low = (b & 15) if k < 2 else (b >> 4)
            c.append((low | (((w[128 + 32 * h + l] >> (2 * k)) & 3) << 4)) - 32)
        sc = [int(v) for v in np.frombuffer(bytes(w[192:208]), np.int8)]
        A = []
        for k in range(8):
            da, q = q8(a, k)
            X = sc[2 * k] * idot(c[32 * k:32 * k + 16], q[:16]) + \
                sc[2 * k + 1] * idot(c[32 * k + 16:32 * k + 32], q[16:])
            A.append(da * F(X))
        return f16(w, 208) * tree8(A)
    if name == "iq4_xs":
        sh = int.from_bytes(bytes(w[2:4]), "little")
        A = []
        for b in range(8):
            ls = ((w[4 + b // 2] >> (4 * (b % 2))) & 15) | (((sh >> (2 * b)) & 3) << 4)
            da, q = q8(a, b)
            A.append(da * F((ls - 32) * idot([KV4[n] for n in nib32(w[8 + 16 * b:24 + 16 * b])], q)))
        return f16(w, 0) * tree8(A)
    raise ValueError(name)


DOT_TYPES = {  # name -> (type id, elements per dot block, bytes per dot block)
    "f32": (T.F32, 32, 128), "f16": (T.F16, 32, 64), "bf16": (T.BF16, 32, 64),
    "q8_0": (T.Q8_0, 32, 34), "q4_0": (T.Q4_0, 32, 18), "q4_1": (T.Q4_1, 32, 20),
    "q5_0": (T.Q5_0, 32, 22), "q5_1": (T.Q5_1, 32, 24), "iq4_nl": (T.IQ4_NL, 32, 18),
    "mxfp4": (T.MXFP4, 32, 17), "nvfp4": (T.NVFP4, 64, 36), "q4_K": (T.Q4_K, 256, 144),
    "q5_K": (T.Q5_K, 256, 176), "q6_K": (T.Q6_K, 256, 210), "iq4_xs": (T.IQ4_XS, 256, 136),
}


def random_q8_1(rng, n):
    """q8_1 blocks with random codes (including -128) and fp16 d in ±[2^-14, 2^4]."""
    out = bytearray()
    for d in rand_fp16(rng, n):
        out += int(d & 0x7FFF).to_bytes(2, "little") + b"\0\0"
        out += rng.integers(-128, 128, 32).astype(np.int8).tobytes()
    return bytes(out)


def gen_dot(rng):
    for name, (tid, elems, nbytes) in DOT_TYPES.items():
        n = 24 if elems == 256 else 48
        if name == "f32":
            w = (rng.standard_normal((n, 32)) * 2.0 ** rng.integers(-10, 10, (n, 1))).astype(np.float32)
            w = w.view(np.uint8).reshape(n, nbytes)
        elif name in ("f16", "bf16"):
            w = rng.integers(0, 256, (n, nbytes), dtype=np.uint8)
            hi = w[:, 1::2]  # keep exponents finite: clear the top exponent bit
            hi &= 0xBF
        else:
            w = np.concatenate([random_blocks(rng, name, n - 4), edge_blocks(name)[:4]])
            n = w.shape[0]
            if name == "mxfp4":  # keep H(e)·d_a finite (e = 0, 1 still test subnormal H·d_a)
                w[:, 0] = np.minimum(w[:, 0], 150)
        a = random_q8_1(rng, n * elems // 32)
        per = 36 * elems // 32
        r = np.array([dot_ref(name, w[i], a[i * per:(i + 1) * per]) for i in range(n)], np.float32)
        write(f"dot_{name}.bin", tid, w.tobytes() + a, r.tobytes())


RT_TYPES = ["f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl", "mxfp4", "nvfp4",
            "q4_K", "q5_K", "q6_K", "iq4_xs"]
RT_TYPE_IDS = {"f16": T.F16, "bf16": T.BF16}


def gen_rt_inputs(rng):
    x = rng.standard_normal((2, 512)).astype(np.float32)
    x[1] *= np.float32(0.02)
    x[1, 17] = 0.9  # an outlier, as real weight rows have
    write("rt_inputs.bin", 0, x.tobytes(), b"")


def gen_rt(memra_dir):
    for name in RT_TYPES:
        tid = RT_TYPE_IDS.get(name) or TYPES[name][0]
        raw = np.fromfile(os.path.join(memra_dir, f"memra_{name}.q"), dtype=np.uint8)
        if name in RT_TYPE_IDS:
            dt = np.float16 if name == "f16" else None
            y = raw.view(dt).astype(np.float32) if dt else quants.dequantize(raw, tid)
        else:
            y = quants.dequantize(raw.reshape(-1, TYPES[name][2]), tid)
        write(f"rt_{name}.bin", tid, raw.tobytes(), np.ascontiguousarray(y, np.float32).tobytes())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--memra-dir", help="write rt_<type>.bin from memra_<type>.q files here")
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    if args.memra_dir:
        gen_rt(args.memra_dir)
        return 0
    rng = np.random.default_rng(SEED)
    gen_deq(rng)
    gen_q8_1(rng)
    gen_conv(rng)
    gen_qref(rng)
    gen_rt_inputs(rng)
    gen_dot(rng)
    return 0


if __name__ == "__main__":
    sys.exit(main())
