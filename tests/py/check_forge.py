#!/usr/bin/env python3
"""check_forge.py — independent check of a checkpoint written by memra-forge, with gguf-py.

Test tooling only. Everything expected here is rebuilt from spec/qwen35.md and from the
forge's documented contract, not taken from tests/forge.c:
  * metadata: every key §1 names, with the preset's values;
  * tensors: the §2 set with exact names, shapes {ne0, ne1, ne2}, order (llama-quantize's
    loader order: globals, then blocks, by name inside each) and types (Q4_K_M recipe of
    llama.cpp's llama-quant.cpp, or one type; NVFP4 ".scale" companions);
  * tokenizer: token count = token_embd rows, every merge "a b" has a, b and ab as tokens;
  * values: a reimplementation of the forge's counter-based generator (splitmix64 keyed by
    seed and FNV-1a of the name, Irwin-Hall normals, the init table of forge.c) must
    reproduce F32 tensors bit for bit and quantized ones within the format's error.

usage: check_forge.py (--preset tiny | --shape k=v,...) --type q4_k_m FILE [--rows N]
Exit 0 when every check passes; 1 (with the failing checks listed) otherwise; any missing
module (gguf, numpy) is an error too.
"""
import argparse
import math
import sys

import numpy as np
from gguf import GGUFReader, GGMLQuantizationType as QT
from gguf.quants import dequantize

# ---- presets (spec/qwen35.md §5; tiny shapes from docs/readme-forge.md) ----
P = dict
PRESETS = {
    "tiny": P(arch="qwen35", L=8, D=256, Hq=4, Hkv=2, dh=64, R=16, F=512, Hk=2, Hv=4, dk=64,
              K=4, E=0, k=0, Fe=0, Fs=0, V=None, ctx=32768),
    "tiny-moe": P(arch="qwen35moe", L=8, D=256, Hq=4, Hkv=2, dh=64, R=16, F=0, Hk=2, Hv=4,
                  dk=64, K=4, E=8, k=2, Fe=256, Fs=256, V=None, ctx=32768),
    "0.8b": P(arch="qwen35", L=24, D=1024, Hq=8, Hkv=2, dh=256, R=64, F=3584, Hk=16, Hv=16,
              dk=128, K=4, E=0, k=0, Fe=0, Fs=0, V=248320, ctx=262144),
    "2b": P(arch="qwen35", L=24, D=2048, Hq=8, Hkv=2, dh=256, R=64, F=6144, Hk=16, Hv=16,
            dk=128, K=4, E=0, k=0, Fe=0, Fs=0, V=248320, ctx=262144),
    "4b": P(arch="qwen35", L=32, D=2560, Hq=16, Hkv=4, dh=256, R=64, F=9216, Hk=16, Hv=32,
            dk=128, K=4, E=0, k=0, Fe=0, Fs=0, V=248320, ctx=262144),
    "9b": P(arch="qwen35", L=32, D=4096, Hq=16, Hkv=4, dh=256, R=64, F=12288, Hk=16, Hv=32,
            dk=128, K=4, E=0, k=0, Fe=0, Fs=0, V=248320, ctx=262144),
    "27b": P(arch="qwen35", L=64, D=5120, Hq=24, Hkv=4, dh=256, R=64, F=17408, Hk=16, Hv=48,
             dk=128, K=4, E=0, k=0, Fe=0, Fs=0, V=248320, ctx=262144),
    "35b-a3b": P(arch="qwen35moe", L=40, D=2048, Hq=16, Hkv=2, dh=256, R=64, F=0, Hk=16,
                 Hv=32, dk=128, K=4, E=256, k=8, Fe=512, Fs=512, V=248320, ctx=262144),
}

# llama_ftype numbers (llama.h) the forge writes to general.file_type.
FTYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 7, "q4_k_m": 15, "q4_k": 14, "q5_k": 16,
          "q6_k": 18, "iq4_xs": 30, "bf16": 32, "mxfp4": 38, "nvfp4": 39}
QTYPES = {"f32": QT.F32, "f16": QT.F16, "bf16": QT.BF16, "q8_0": QT.Q8_0, "q4_0": QT.Q4_0,
          "q4_k": QT.Q4_K, "q5_k": QT.Q5_K, "q6_k": QT.Q6_K, "iq4_xs": QT.IQ4_XS,
          "mxfp4": QT.MXFP4, "nvfp4": QT.NVFP4}

failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
    return cond


# ---- metadata access ----
def field(r, key):
    return r.fields.get(key)


def scalar(r, key):
    f = field(r, key)
    if f is None:
        return None
    return f.parts[f.data[0]][0].item()


def string(r, key):
    f = field(r, key)
    return None if f is None else bytes(f.parts[f.data[0]]).decode("utf-8")


def array(r, key):
    f = field(r, key)
    return None if f is None else [f.parts[i] for i in f.data]


def check_metadata(r, s, wtype):
    a = s["arch"]
    check(string(r, "general.architecture") == a, f"general.architecture != {a}")
    check(scalar(r, "general.file_type") == FTYPES[wtype], "general.file_type")
    want = {
        "context_length": s["ctx"], "embedding_length": s["D"], "block_count": s["L"],
        "attention.head_count": s["Hq"], "attention.head_count_kv": s["Hkv"],
        "attention.key_length": s["dh"], "attention.value_length": s["dh"],
        "rope.dimension_count": s["R"], "ssm.conv_kernel": s["K"],
        "ssm.inner_size": s["Hv"] * s["dk"], "ssm.state_size": s["dk"],
        "ssm.time_step_rank": s["Hv"], "ssm.group_count": s["Hk"],
        "full_attention_interval": 4,
    }
    if s["E"]:
        want.update({"expert_count": s["E"], "expert_used_count": s["k"],
                     "expert_feed_forward_length": s["Fe"],
                     "expert_shared_feed_forward_length": s["Fs"]})
        check(field(r, f"{a}.feed_forward_length") is None, "MoE file has feed_forward_length")
    else:
        want["feed_forward_length"] = s["F"]
    for k, v in want.items():
        got = scalar(r, f"{a}.{k}")
        check(got == v, f"{a}.{k} = {got}, want {v}")
    check(scalar(r, f"{a}.rope.freq_base") == np.float32(1e7), "rope.freq_base != 1e7")
    check(scalar(r, f"{a}.attention.layer_norm_rms_epsilon") == np.float32(1e-6), "rms eps")
    sec = [int(x[0]) for x in array(r, f"{a}.rope.dimension_sections") or []]
    pairs = s["R"] // 2  # Qwen3.5: 32 pairs -> mrope_section [11, 11, 10] + [0]
    want_sec = [pairs // 3 + (1 if i < pairs % 3 else 0) for i in range(3)] + [0]
    check(sec == want_sec, f"rope.dimension_sections {sec}, want {want_sec}")
    check(string(r, "tokenizer.ggml.model") == "gpt2", "tokenizer.ggml.model")
    check(string(r, "tokenizer.ggml.pre") == "qwen35", "tokenizer.ggml.pre")
    for k in ("bos_token_id", "eos_token_id", "padding_token_id"):
        check(scalar(r, f"tokenizer.ggml.{k}") is not None, f"tokenizer.ggml.{k} missing")
    check(scalar(r, "tokenizer.ggml.add_bos_token") is False, "add_bos_token should be false")
    check(string(r, "tokenizer.chat_template") is not None, "no chat template")


# ---- the expected tensor set (spec §2) ----
def expected(s, V):
    D, L = s["D"], s["L"]
    dh, Hq, Hkv = s["dh"], s["Hq"], s["Hkv"]
    Ck, Cv = s["Hk"] * s["dk"], s["Hv"] * s["dk"]
    Cc = 2 * Ck + Cv
    out = [(-1, "token_embd.weight", (D, V), "embd"), (-1, "output_norm.weight", (D,), "f32"),
           (-1, "output.weight", (D, V), "out")]
    for l in range(L):
        b = f"blk.{l}."
        t = [("attn_norm.weight", (D,), "f32"), ("post_attention_norm.weight", (D,), "f32")]
        if (l + 1) % 4 == 0:
            t += [("attn_q.weight", (D, 2 * Hq * dh), "mat"), ("attn_k.weight", (D, Hkv * dh), "mat"),
                  ("attn_v.weight", (D, Hkv * dh), "wv"), ("attn_output.weight", (Hq * dh, D), "mat"),
                  ("attn_q_norm.weight", (dh,), "f32"), ("attn_k_norm.weight", (dh,), "f32")]
        else:
            t += [("attn_qkv.weight", (D, Cc), "wv"), ("attn_gate.weight", (D, Cv), "mat"),
                  ("ssm_conv1d.weight", (s["K"], Cc), "f32"), ("ssm_dt.bias", (s["Hv"],), "f32"),
                  ("ssm_a", (s["Hv"],), "f32"), ("ssm_beta.weight", (D, s["Hv"]), "mat"),
                  ("ssm_alpha.weight", (D, s["Hv"]), "mat"), ("ssm_norm.weight", (s["dk"],), "f32"),
                  ("ssm_out.weight", (Cv, D), "mat")]
        if s["E"]:
            E, Fe, Fs = s["E"], s["Fe"], s["Fs"]
            t += [("ffn_gate_inp.weight", (D, E), "f32"), ("ffn_gate_exps.weight", (D, Fe, E), "mat"),
                  ("ffn_up_exps.weight", (D, Fe, E), "mat"), ("ffn_down_exps.weight", (Fe, D, E), "down"),
                  ("ffn_gate_inp_shexp.weight", (D,), "f32"), ("ffn_gate_shexp.weight", (D, Fs), "mat"),
                  ("ffn_up_shexp.weight", (D, Fs), "mat"), ("ffn_down_shexp.weight", (Fs, D), "down")]
        else:
            t += [("ffn_gate.weight", (D, s["F"]), "mat"), ("ffn_up.weight", (D, s["F"]), "mat"),
                  ("ffn_down.weight", (s["F"], D), "down")]
        out += [(l, b + n, sh, k) for n, sh, k in t]
    return sorted(out, key=lambda x: (x[0], x[1].encode()))


def more_bits(i, n):  # llama-quant.cpp use_more_bits, with C's truncating division/modulo
    d = i - n // 8
    return i < n // 8 or i >= 7 * n // 8 or math.fmod(d, 3) == 2


def want_type(kind, layer, L, wtype):
    if kind == "f32":
        return QT.F32
    if wtype == "q4_k_m":
        if kind == "out":
            return QT.Q6_K
        if kind in ("wv", "down"):
            return QT.Q6_K if more_bits(layer, L) else QT.Q4_K
        return QT.Q4_K
    if wtype == "nvfp4" and kind in ("embd", "out"):
        return QT.Q8_0
    return QTYPES[wtype]


def check_tensors(r, s, wtype, V):
    exp = expected(s, V)
    got = list(r.tensors)
    names = [t.name for t in got]
    k = 0
    for layer, name, shape, kind in exp:
        if not check(k < len(got), f"file ends before {name}"):
            return
        t = got[k]
        check(t.name == name, f"tensor {k}: {t.name}, want {name}")
        check(tuple(int(x) for x in t.shape) == shape, f"{name}: shape {list(t.shape)}, want {shape}")
        wt = want_type(kind, layer, s["L"], wtype)
        check(t.tensor_type == wt, f"{name}: {t.tensor_type.name}, want {wt.name}")
        k += 1
        if t.tensor_type == QT.NVFP4:
            c = got[k] if k < len(got) else None
            sname = name.removesuffix(".weight") + ".scale"  # llama.cpp: tn(<tensor>, "scale")
            ok = c is not None and c.name == sname
            if check(ok, f"no {sname} after {name}"):
                check(c.tensor_type == QT.F32, f"{c.name} not F32")
                check(tuple(int(x) for x in c.shape) == ((shape[2],) if len(shape) == 3 else (1,)),
                      f"{c.name} shape {list(c.shape)}")
                k += 1
    check(k == len(got), f"{len(got) - k} unexpected tensors, e.g. {names[k:k + 3]}")


def check_vocab(r, V):
    toks = [bytes(t).decode("utf-8") for t in array(r, "tokenizer.ggml.tokens")]
    types = [int(t[0]) for t in array(r, "tokenizer.ggml.token_type")]
    check(len(toks) == V and len(types) == V, f"{len(toks)} tokens, {len(types)} types, V {V}")
    tset = set(toks)
    merges = [bytes(m).decode("utf-8") for m in (array(r, "tokenizer.ggml.merges") or [])]
    check(len(merges) > 0, "no merges")
    bad = [m for m in merges if len(m.split(" ")) != 2 or not all(x in tset for x in m.split(" "))
           or m.replace(" ", "") not in tset]
    check(not bad, f"{len(bad)} merges name missing tokens, e.g. {bad[:3]}")
    eos = scalar(r, "tokenizer.ggml.eos_token_id")
    check(eos is not None and 0 <= eos < V and types[eos] == 3, "eos is not a control token")


# ---- the generator, reimplemented (forge.c "Counter-based generator", "THE INIT TABLE") ----
M64 = (1 << 64) - 1
GAMMA = np.uint64(0x9E3779B97F4A7C15)


def mix64(z):
    z = np.asarray(z, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def name_key(seed, name):
    h = 1469598103934665603
    for c in name.encode():
        h = ((h ^ c) * 1099511628211) & M64
    return mix64(mix64(np.uint64(seed ^ 0x6D656D7261666F72)) ^ np.uint64(h))


def draws(key, first, n):
    i = np.arange(first + 1, first + n + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        return mix64(key + i * GAMMA)


def normals(r):  # Irwin-Hall, float32 in the forge's operation order
    s = np.zeros(r.shape, np.float32)
    for k in range(4):
        u = ((r >> np.uint64(16 * k)) & np.uint64(0xFFFF)).astype(np.float32)
        s = s + (u + np.float32(0.5)) * np.float32(1.0 / 65536.0)
    return (s - np.float32(2.0)) * np.float32(1.7320508075688772)


def uniforms(r):
    return ((r >> np.uint64(40)).astype(np.float64) + 0.5) * (1.0 / 16777216.0)


f32 = lambda x: float(np.float32(x))
# role -> (dist, a, b, fan, resid), the init table of forge.c.
NORM = ("one_plus", f32(0.05), 0, None, False)
MAT = ("normal", 1.0, 0, "in", False)
RES = ("normal", 1.0, 0, "in", True)
INIT = {"token_embd.weight": ("normal", f32(0.5), 0, None, False), "output.weight": ("normal", 3.0, 0, "in", False),
        "ssm_conv1d.weight": ("uniform", 1.0, 0, "conv", False),
        "ssm_dt.bias": ("dt", f32(1e-3), f32(0.1), None, False), "ssm_a": ("ssm_a", 1.0, 16.0, None, False)}
for n in ("output_norm", "attn_norm", "post_attention_norm", "attn_q_norm", "attn_k_norm", "ssm_norm"):
    INIT[n + ".weight"] = NORM
for n in ("attn_output", "ssm_out", "ffn_down", "ffn_down_exps", "ffn_down_shexp"):
    INIT[n + ".weight"] = RES


def init_rule(name):
    base = name.split(".", 2)[2] if name.startswith("blk.") else name
    return INIT.get(base, MAT)


def generate(name, shape, seed, L, K, rows):
    """First `rows` rows of tensor `name` as the forge generates them (float32)."""
    dist, a, b, fan, resid = init_rule(name)
    ne0 = shape[0]
    per_expert_rows = shape[1] if len(shape) > 1 else 1
    std = a
    if fan == "in":
        std /= math.sqrt(ne0)
    elif fan == "conv":
        std /= math.sqrt(K)
    if resid:
        std /= math.sqrt(2.0 * L)
    std32 = np.float32(std)
    r = draws(name_key(seed, name), 0, rows * ne0)
    if dist == "normal":
        if len(shape) == 3:
            e = np.arange(rows * ne0) // ne0 // per_expert_rows
            g = 1.0 + 0.5 * (np.fmod((e + 1) * 0.6180339887498949, 1.0) - 0.5)
            std_e = (np.float64(std32) * g).astype(np.float32)
            return std_e * normals(r)
        return std32 * normals(r)
    if dist == "one_plus":
        return np.float32(1.0) + std32 * normals(r)
    if dist == "uniform":
        return std32 * (2.0 * uniforms(r) - 1.0).astype(np.float32)
    la, lb = math.log(a), math.log(b)
    x = np.exp(la + uniforms(r) * (lb - la))
    if dist == "ssm_a":
        return (-x).astype(np.float32)
    return (x + np.log(-np.expm1(-x))).astype(np.float32)  # softplus^-1(dt)


# Relative RMS error bounds for dequantized vs generated rows: 1.5x the worst measured on
# tiny-moe seed 9 (attn_qkv, ffn_down_exps, attn_output; 64 rows each): q8_0 0.0051,
# q6_k 0.017, q5_k 0.035, q4_k 0.069, q4_0 0.082, iq4_xs 0.075, mxfp4 0.116, nvfp4 0.097,
# f16 0.0002, bf16 0.0017.
REL_RMS = {QT.Q8_0: 0.008, QT.Q6_K: 0.026, QT.Q5_K: 0.053, QT.Q4_K: 0.104, QT.Q4_0: 0.123,
           QT.IQ4_XS: 0.113, QT.MXFP4: 0.174, QT.NVFP4: 0.146, QT.F16: 3e-4, QT.BF16: 2.6e-3}


def check_values(r, s, seed, max_rows):
    tens = {t.name: t for t in r.tensors}
    n_checked = 0
    for t in r.tensors:
        name = t.name
        if name.endswith(".scale"):
            continue
        shape = tuple(int(x) for x in t.shape)
        rows_total = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        rows = min(rows_total, max_rows)
        if len(shape) == 3:  # also the first rows of the last expert
            rows = rows_total if rows_total <= 2 * max_rows else rows
        want = generate(name, shape, seed, s["L"], s["K"], rows)
        raw = np.asarray(t.data)
        if t.tensor_type == QT.F32:
            got = raw.reshape(-1)[: rows * shape[0]].astype(np.float32)
            if init_rule(name)[0] in ("ssm_a", "dt"):  # libm exp/log may differ in the last bit
                ok = np.allclose(got, want, rtol=2e-7, atol=0)
            else:
                ok = np.array_equal(got.view(np.uint32), want.view(np.uint32))
            check(ok, f"{name}: F32 values differ from the generator")
        else:
            got = dequantize(raw.reshape(rows_total, -1)[:rows], t.tensor_type).reshape(-1)
            if t.tensor_type == QT.NVFP4:
                sc = np.asarray(tens[name.removesuffix(".weight") + ".scale"].data, dtype=np.float32).reshape(-1)
                e = np.arange(rows * shape[0]) // shape[0] // shape[1]
                got = got * sc[np.minimum(e, len(sc) - 1)]
            err = np.sqrt(np.mean((got - want) ** 2)) / max(np.sqrt(np.mean(want ** 2)), 1e-30)
            check(err <= REL_RMS.get(t.tensor_type, 0.2),
                  f"{name} ({t.tensor_type.name}): relative RMS error {err:.4f}")
        n_checked += 1
    return n_checked


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", choices=sorted(PRESETS))
    ap.add_argument("--shape", help="explicit shape instead of a preset: "
                    "arch=qwen35moe,L=4,D=256,Hq=4,Hkv=2,dh=64,R=16,F=0,Hk=2,Hv=4,dk=64,K=4,"
                    "E=4,k=2,Fe=256,Fs=256,ctx=4096")
    ap.add_argument("--type", default="q4_k_m", choices=sorted(FTYPES))
    ap.add_argument("--rows", type=int, default=64, help="rows per tensor whose values are checked")
    ap.add_argument("--no-values", action="store_true", help="skip the generator check")
    ap.add_argument("file")
    a = ap.parse_args()
    if (a.preset is None) == (a.shape is None):
        ap.error("give exactly one of --preset and --shape")
    if a.preset:
        s = PRESETS[a.preset]
    else:
        kv = dict(x.split("=", 1) for x in a.shape.split(","))
        s = {k: (v if k == "arch" else int(v)) for k, v in kv.items()}
        s["V"] = None
        missing = set(PRESETS["tiny"]) - set(s)
        if missing:
            ap.error(f"--shape lacks {sorted(missing)}")
    r = GGUFReader(a.file)
    embd = next((t for t in r.tensors if t.name == "token_embd.weight"), None)
    if embd is None:
        print("check_forge: no token_embd.weight", file=sys.stderr)
        return 1
    V = int(embd.shape[1])
    if s["V"] is not None:
        check(V == s["V"], f"V = {V}, want {s['V']}")
    seed = scalar(r, "memra.forge.seed")
    check_metadata(r, s, a.type)
    check_tensors(r, s, a.type, V)
    check_vocab(r, V)
    n_val = 0 if a.no_values or seed is None else check_values(r, s, int(seed), a.rows)
    if failures:
        for f in failures[:40]:
            print("check_forge: FAIL " + f, file=sys.stderr)
        print(f"check_forge: {len(failures)} failures in {a.file}", file=sys.stderr)
        return 1
    print(f"check_forge: {a.file}: {len(r.tensors)} tensors, {len(r.fields)} keys, V {V}, "
          f"values of {n_val} tensors match the generator: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
