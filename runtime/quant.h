/*
 * quant.h — CPU reference of the GGUF quantized block formats, q8_1 activation
 * quantization, and the weight-block × q8_1-block dot products the mat-vec kernels compute.
 *
 * Dequantization is bit-compatible with the GGUF ecosystem (spec/gguf-and-quants.md §3):
 * a tensor written by other GGUF tools dequantizes to exactly the same floats.
 *
 * THE EXACTNESS ARITHMETIC (what the batch-isolation contract rests on; quant.c documents
 * each type's formula next to its code):
 *   - q8_1 quantization is the engine variant of spec §4.2: per 32-block, amax over |x|,
 *     d = amax / 127 (IEEE fp32 division), q = (int8) roundf(x / d) with that fp32 d
 *     (q = 0 when amax = 0), stored d = fp16_RN(d), stored s = fp16_RN(butterfly sum of x in
 *     the order xor 16, 8, 4, 2, 1, lane 0's value). No FTZ. The GPU kernel reproduces these
 *     bytes exactly.
 *   - A weight block's contribution r to a dot product is computed in two parts: integer
 *     sums (exact, so any thread split or order gives the same value), then a fixed sequence
 *     of fp32 operations on fp16/fp8-decoded scales, each rounded to nearest, no FMA
 *     (memra_vec_dot_block). GPU kernels compute r with the same operations in the same
 *     order (__fmul_rn/__fadd_rn), so r is bit-identical on CPU and GPU.
 *   - Only the summation of the per-block r values across a row may differ between the CPU
 *     (memra_vec_dot_q8_1: T = T + r in increasing block order) and a GPU kernel; within the
 *     GPU it is fixed per (row, output) and independent of the batch width.
 */
#ifndef MEMRA_QUANT_H
#define MEMRA_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "qtype.h"

/* q8_1 activation block: 32 values, 36 bytes (the C layout of spec §3.3). */
typedef struct memra_block_q8_1 {
    uint16_t d; /* fp16 scale */
    uint16_t s; /* fp16 sum of the unquantized inputs (engine variant, §4.2) */
    int8_t qs[32];
} memra_block_q8_1;

/* ---- scalar conversions (bit-exact: fp16 RN-even, NaN -> 0x7E00; bf16 RN-even) ---- */
float memra_fp16_to_f32(uint16_t h);
uint16_t memra_f32_to_fp16(float f);
float memra_bf16_to_f32(uint16_t h);
uint16_t memra_f32_to_bf16(float f);

/* Bytes for a row of n elements of type t; 0 if t is invalid or n is not a multiple of the
 * block size. */
size_t memra_quant_row_bytes(memra_qtype t, int64_t n);

/* Types this file can dequantize / quantize / dot (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K,
 * Q6_K, IQ4_XS, MXFP4, NVFP4; plus whatever quant.c documents). */
int memra_quant_can_dequantize(memra_qtype t);
int memra_quant_can_quantize(memra_qtype t);
int memra_quant_can_dot(memra_qtype t);

/* Dequantize n elements (n a multiple of the block size). NVFP4: the per-tensor `.scale`
 * companion is NOT applied here; the caller multiplies by it. Returns 0 or -1 (bad args). */
int memra_dequantize_row(memra_qtype t, const void *src, float *dst, int64_t n);
/* The fields of one block, in element order, for callers that scale them their own way (the
 * 16-bit reference of refmodel.c). Q4_K (144 bytes): the 6-bit scale sc[k] and min m[k] of
 * sub-block k (elements 32k..32k+31) and the 256 codes 0..15; Q6_K (210 bytes): the 256 codes
 * as signed values q - 32 (-32..31). */
void memra_q4_k_unpack(const void *blk, uint8_t sc[8], uint8_t m[8], int8_t codes[256]);
void memra_q6_k_unpack(const void *blk, int8_t codes[256]);
/* Reference quantizer (round-to-nearest with the standard scale search). */
int memra_quantize_row(memra_qtype t, const float *src, void *dst, int64_t n);

/* Engine q8_1 quantization of n values (n % 32 == 0) into n/32 blocks. */
void memra_quantize_q8_1(const float *x, memra_block_q8_1 *y, int64_t n);

/* Contribution r of one weight block of type t (block_elems elements at wblock) against the
 * q8_1 blocks covering the same elements (block_elems/32 of them, starting at a). */
float memra_vec_dot_block(memra_qtype t, const void *wblock, const memra_block_q8_1 *a);
/* Dot of a weight row of n elements with q8_1 activations: T = 0; T = T + r_b for b in
 * increasing order (fp32, RN). */
float memra_vec_dot_q8_1(memra_qtype t, const void *wrow, const memra_block_q8_1 *a, int64_t n);

/* ---- additions (quant.c documents each) ---- */

/* Elements one memra_vec_dot_block call consumes: the block size for block types, 32 (one
 * q8_1 block) for F32/F16/BF16; 0 when t cannot be dotted. memra_vec_dot_q8_1 needs n to be
 * a multiple of it. */
int memra_quant_dot_block_elems(memra_qtype t);
/* Weight bytes of one dot block (0 when t cannot be dotted). */
size_t memra_quant_dot_block_bytes(memra_qtype t);
/* Exact scale decoders of the FP4 formats: MXFP4 half scale H(e) = 2^(e-128) (spec §3.9);
 * NVFP4 half UE4M3 scale U(x) with bit 7 treated as 0 (U(x) = U(x & 0x7F); 0xFF gives 0,
 * where ggml's CPU decoder and gguf-py give 240). */
float memra_e8m0_half_to_f32(uint8_t e);
float memra_ue4m3_half_to_f32(uint8_t x);

#endif
