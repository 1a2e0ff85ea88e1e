/*
 * mmvq_params.h — the kernel parameter block of the mmvq template and the per-qtype geometry
 * the host launcher and the device code must agree on. Included by C host code
 * (runtime/nvrtc.c) and by NVRTC device code (nvrtc_templates/mmvq.cuh), so it uses only
 * fixed-size scalar types and no system header under NVRTC.
 *
 * Must not: hold anything that depends on the batch tier B (the kernel's per-row arithmetic
 * must not depend on it), or change layout without changing both sides (the struct is passed
 * by value as the kernel's only parameter).
 * Invariants: every weight row starts at w + o * row_bytes; w is 16-byte aligned; the kernel
 * reads no byte of a weight outside [w, w + n_out * row_bytes).
 */
#ifndef MEMRA_MMVQ_PARAMS_H
#define MEMRA_MMVQ_PARAMS_H

#ifdef __CUDACC_RTC__
typedef int memra_i32;
typedef unsigned long long memra_u64;
#else
#include <stdint.h>
typedef int32_t memra_i32;
typedef uint64_t memra_u64;
#endif

#define MEMRA_MMVQ_MAX_OUT 4 /* weights per merged launch (kernels/mmvq.h: MEMRA_MMVQ_MAX_W) */
#define MEMRA_MMVQ_WARPS 8   /* warps per CUDA block (256 threads): 8 / P tiles of P parts */
#define MEMRA_MMVQ_ROWS 16   /* outputs per warp tile: the M of the int8 mma */
#define MEMRA_MMVQ_MAX_B 16  /* largest tier */
#define MEMRA_MMVQ_MAX_PARTS 8 /* kernels/mmvq.h memra_mmvq_parts: 1, 2, 4 or 8 */

/* One weight of a merged launch: y[b, o] (= or +=) scale[0] * (W[o, :] . a[b, :]). */
typedef struct memra_mmvq_out_params {
    const void *w;       /* [n_out] rows of row_bytes, GGUF blocks of the template's qtype */
    const float *scale;  /* [1] per-tensor output scale (NVFP4 .scale) or NULL */
    float *y;            /* [b, n_out] */
    memra_u64 row_bytes; /* bytes of one weight row (n_in elements) */
    memra_i32 n_out;     /* outputs (weight rows) */
    memra_i32 mode;      /* 0 = store, 1 = add into y (residual) */
} memra_mmvq_out_params;

typedef struct memra_mmvq_params {
    const void *a;    /* q8_1 blocks [b, n_in/32] (36 bytes each, runtime/quant.h layout) */
    memra_i32 n_in;   /* elements per input row; a multiple of every weight's dot block */
    memra_i32 n_w;    /* weights in this launch, 1..MEMRA_MMVQ_MAX_OUT */
    memra_i32 ksplit; /* P: warps (parts) that split one tile's K: 1, 2, 4 or 8; the
                         canonical memra_mmvq_parts(n_in) unless a test forces another */
    memra_i32 rpw;    /* direct path only: output rows per warp (>= 1; warp i of the launch
                         owns rows [i rpw, (i + 1) rpw) of the weights laid end to end). Not a
                         numerical choice: every row's parts fold in the canonical order */
    /* direct path only, NULL otherwise: the fused SwiGLU epilogue (runtime/nvrtc.h
     * memra_mmvq_fuse_swiglu). The launch is {gate, up} of n_out = N rows each (N % 32 == 0,
     * store mode, no scale, rpw = MEMRA_MMVQ_SWIGLU_RPW); CUDA block c computes gate rows
     * [32 c, 32 c + 32) (warps 0..3) and the same up rows (warps 4..7), then writes q8_1
     * block c of silu(g) * u of each of the b rows to swiglu_q [b, N / 32] instead of storing
     * g and u: silu_mul_q8's bytes (kernels/silu_mul_q8.h), one launch fewer */
    void *swiglu_q;
    memra_mmvq_out_params out[MEMRA_MMVQ_MAX_OUT];
} memra_mmvq_params;

/* rows per warp of a fused SwiGLU launch: 4 warps x 8 rows = one q8_1 block of gate rows */
#define MEMRA_MMVQ_SWIGLU_RPW 8
/* its extra shared memory: the CUDA block's 64 outputs of each of its b rows */
#define MEMRA_MMVQ_SWIGLU_SMEM(b) ((b) * 64 * 4)

/*
 * Per-qtype geometry, X(id, name, dot_elems, dot_bytes, step_blocks): a "dot block" is the
 * unit of runtime/quant.c's memra_vec_dot_block (the weight block, or 32 elements for the
 * float types); a warp stages step_blocks dot blocks of each of its 16 rows per pipeline
 * stage (256 elements for the integer types).
 */
#define MEMRA_MMVQ_TYPES(X)                                                                        \
    X(0, f32, 32, 128, 2)                                                                          \
    X(1, f16, 32, 64, 2)                                                                           \
    X(2, q4_0, 32, 18, 8)                                                                          \
    X(3, q4_1, 32, 20, 8)                                                                          \
    X(6, q5_0, 32, 22, 8)                                                                          \
    X(7, q5_1, 32, 24, 8)                                                                          \
    X(8, q8_0, 32, 34, 8)                                                                          \
    X(12, q4_K, 256, 144, 1)                                                                       \
    X(13, q5_K, 256, 176, 1)                                                                       \
    X(14, q6_K, 256, 210, 1)                                                                       \
    X(20, iq4_nl, 32, 18, 8)                                                                       \
    X(23, iq4_xs, 256, 136, 1)                                                                     \
    X(30, bf16, 32, 64, 2)                                                                         \
    X(39, mxfp4, 32, 17, 8)                                                                        \
    X(40, nvfp4, 64, 36, 4)

/* Bytes of one row's shared-memory slot per stage: the step's bytes plus room to keep the
 * global address mod 16 (cp.async moves aligned 16-byte units), rounded to an odd number of
 * 16-byte units so that the 8 rows a warp's lane groups read fall in different banks. */
#define MEMRA_MMVQ_SLOT(dot_bytes, step_blocks)                                                    \
    (((((step_blocks) * (dot_bytes) + ((dot_bytes) % 16 ? 15 : 0) + 15) / 16) | 1) * 16)

/* cp.async pipeline depth per warp for a slot size: 3 up to 160-byte slots (q4_K, iq4_xs,
 * the 32-element types but q8_0), else 2, so that at least 2 CUDA blocks (16 warps) of the
 * largest slot fit an SM's shared memory. */
#define MEMRA_MMVQ_STAGES(slot) ((slot) <= 160 ? 3 : 2)

/* CUDA blocks per SM the entry point asks the register allocator for (its __launch_bounds__
 * minimum, runtime/nvrtc.c), for tier b and n_w merged weights: 2 (128 registers) for b > 2
 * and for single-weight launches at b = 2; 3 (80 registers, 24 warps per SM) at b = 1 and
 * for merged launches at b = 2. Measured on the 9b tick (bench/results/mmvq-notes.md run
 * 19): against 3 everywhere below b = 9, 2 is 6.3 % faster at b = 3, 4.6 % at b = 4, 3.5 %
 * at b = 8 and 2.1 % at b = 2 (single weights only: merged and fused b = 2 launches are
 * slower at 2, their one-wave grids becoming 1.5 waves). The host also sizes the
 * shared-memory carveout from it for b > 4, leaving the rest of the SM's 256 KB to L1 (the
 * q8_1 rows every CUDA block re-reads). */
#define MEMRA_MMVQ_MIN_BLOCKS(b, n_w) ((b) > 2 || ((b) == 2 && (n_w) == 1) ? 2 : 3)

/* The direct path: a launch of B <= MEMRA_MMVQ_DIRECT_MAX_B rows whose weights are all of a
 * direct type (q4_K: a 16-byte header and 128 bytes of codes; q6_K: 210-byte blocks, read
 * 2-byte aligned). Each warp owns whole output rows (params.rpw of them: consecutive rows,
 * i.e. one contiguous run of weight bytes) and streams them through a ring in shared memory
 * with flat 16-byte cp.async, 16 blocks (2304 bytes of q4_K, 3360 of q6_K) per stage, each
 * block dotted against the B staged q8_1 rows; no mma (nvrtc_templates/mmvq.cuh, "the direct
 * path"). B = 1 specializations hold the direct path only; B = 2 ones also the staged path,
 * taken (params.rpw = 0) when the B staged rows would not fit shared memory (n_in >
 * MEMRA_MMVQ_DIRECT_MAX_IN(b)). B = 4 measured slower than staging (2 x the dot work per
 * byte: issue-bound; bench/results/mmvq-notes.md run 12), so the path stops at 2. */
#define MEMRA_MMVQ_DIRECT(qt) ((qt) == 12 || (qt) == 14)
#define MEMRA_MMVQ_DIRECT_MAX_B 2
#define MEMRA_MMVQ_FLAT_STAGES 3 /* stages in flight per warp */
/* A ring slot (one 16-block stage): 16 q4_K blocks, or with q6_K in the launch 16 of its
 * 210-byte blocks + 16 bytes for a start that is not 16-byte aligned (rows of n_in % 2048 !=
 * 0) + 16 for a 4-byte read past the end (nvrtc_templates/mmvq.cuh lds_run) */
#define MEMRA_MMVQ_FLAT_SLOT(has_q6k) ((has_q6k) ? 16 * 210 + 32 : 16 * 144)
#define MEMRA_MMVQ_FLAT_RING(has_q6k)                                                             \
    (MEMRA_MMVQ_WARPS * MEMRA_MMVQ_FLAT_STAGES * MEMRA_MMVQ_FLAT_SLOT(has_q6k))
/* one q8_1 row as codes (each 128-byte half of a 256-element block padded to 144 bytes:
 * shared-memory banks), d as fp32 [n_in / 32], the code sums [n_in / 32] (int32), staged once
 * per CUDA block; B rows one after the other (a multiple of 64 bytes each) */
#define MEMRA_MMVQ_ACT_CODES(n_in) ((n_in) / 256 * 288)
#define MEMRA_MMVQ_ACT_BYTES(n_in) (MEMRA_MMVQ_ACT_CODES(n_in) + (n_in) / 32 * 8)
/* Shared memory of a direct launch of b rows: the q8_1 rows and the warps' rings (b = 1,
 * q4_K: 55 KB, 3 CUDA blocks per SM up to n_in = 12288; with q6_K 81 KB, 2). */
#define MEMRA_MMVQ_DIRECT_SMEM(n_in, has_q6k, b)                                                  \
    ((b) * MEMRA_MMVQ_ACT_BYTES(n_in) + MEMRA_MMVQ_FLAT_RING(has_q6k))
/* At B = 1, at most this many rows per warp. One wave gives an LM head (248 320 q6_K rows,
 * 2 CUDA blocks per SM) 118 rows per warp and 210-214 us; 16 rows per warp (7.3 waves of
 * shorter streams) measured 204.9-205.7 us and 8 rows 205.6-207.4 in the PDL-chained
 * bandwidth table (bench/results/mmvq-bandwidth-2026-12-04-s12.txt and -2026-12-05-s16.txt,
 * "direct path at B=1 by rows per warp"). Only launches of more than 16 x one wave's warps
 * (~34 k rows of q6_K, ~51 k of q4_K at n_in 4096 on 132 SMs) meet the cap. B = 2 is
 * unmeasured and keeps one wave. */
#define MEMRA_MMVQ_DIRECT_MAX_RPW_B1 16
/* The largest n_in it takes at b rows (90 KB of staged rows in all + 81 KB of q6_K rings =
 * 171 KB); larger rows take the staged path (b > 1) or are refused (b = 1). */
#define MEMRA_MMVQ_DIRECT_MAX_IN(b) (65536 / (b))

/* Dynamic shared memory of one CUDA block for a weight type's slot size; the 16 extra bytes
 * let a byte-aligned word read at the very end of the last slot touch its neighbour word. */
#define MEMRA_MMVQ_SMEM(slot)                                                                      \
    (MEMRA_MMVQ_WARPS * MEMRA_MMVQ_STAGES(slot) * MEMRA_MMVQ_ROWS * (slot) + 16)

#endif
