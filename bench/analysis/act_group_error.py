#!/usr/bin/env python3
"""act_group_error.py — how much the int8 activation quantization error of a mat-vec grows when
one scale covers G = 32, 64, 128 or 256 activations instead of 32 (the design question of
bench/results/mmvq-notes.md "Next for B >= 8"). A model of the arithmetic, not of memra's
bits: activations x (n = 4096) are drawn Gaussian, optionally with outlier channels of a
given magnitude (LLM hidden states carry a few channels ~20-100x the rest); each group of G
is quantized as memra's q8_1 does it (d = amax / 127, q = round(x / d)); the error of
w . x_q against w . x for Gaussian weight rows, relative to the rms of w . x, is reported
(median and 99th percentile over rows and draws). Weights stay exact: only the activation
side changes between the group sizes.

    python3 bench/analysis/act_group_error.py [--rows 512] [--draws 8] [--seed 1]
"""
import argparse

import numpy as np


def quantize(x, g, mult=0):
    """q8_1-style: one scale per g consecutive values, round half away from zero. mult = L > 0:
    each 32 values of a group step by d m / L, m = ceil(L amax_32 / amax_g) in 1..L (run 22)."""
    xs = x.reshape(-1, g)
    amax = np.abs(xs).max(axis=1, keepdims=True)
    d = amax / 127.0
    if mult:
        b = np.abs(xs).reshape(xs.shape[0], -1, 32).max(axis=2)
        with np.errstate(divide="ignore", invalid="ignore"):
            m = np.clip(np.ceil(mult * b / amax), 1, mult) / mult
        d = np.repeat(d * m, 32, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(d > 0, np.sign(xs) * np.floor(np.abs(xs) / d + 0.5), 0.0)
    q = np.clip(q, -127, 127)
    return (q * d).reshape(x.shape)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--rows", type=int, default=512)
    ap.add_argument("--draws", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    w = rng.standard_normal((a.rows, a.n)).astype(np.float64)
    print(f"n = {a.n}, {a.rows} weight rows x {a.draws} activation draws; relative error "
          f"|w.x_q - w.x| / rms(w.x): median / p99")
    fmts = [(32, 0), (64, 0), (128, 0), (256, 0), (256, 16), (256, 64)]
    name = lambda g, m: f"G={g}" + (f"m{m}" if m else "")
    print(f"{'activations':<26}" + "".join(f"{name(g, m):>18}" for g, m in fmts))
    cases = [("gaussian", 0, 0.0), ("4 outlier channels x20", 4, 20.0),
             ("4 outlier channels x100", 4, 100.0), ("16 outlier channels x100", 16, 100.0)]
    for case, n_out, mag in cases:
        errs = {f: [] for f in fmts}
        for _ in range(a.draws):
            x = rng.standard_normal(a.n)
            if n_out:
                ch = rng.choice(a.n, n_out, replace=False)
                x[ch] *= mag
            y = w @ x
            rms = np.sqrt(np.mean(y * y))
            for f in errs:
                errs[f].append(np.abs(w @ quantize(x, *f) - y) / rms)
        row = ""
        for f in fmts:
            e = np.concatenate(errs[f])
            row += f"{np.median(e):>9.2e} {np.quantile(e, 0.99):>8.2e}"
        print(f"{case:<26}{row}")


if __name__ == "__main__":
    main()
