/*
 * embed.cu — CUDA embed (contract: kernels/embed.h): x[b, :] = dequant(table row tokens[b]).
 *
 * One thread per output element decodes its element straight from the GGUF block with the
 * fp32 operations of runtime/quant.c, in the same order (--fmad=false), so every value is
 * bit-identical to memra_dequantize_row. Fields are read byte by byte because GGUF blocks
 * are only byte-aligned (an MXFP4 block is 17 bytes).
 * Must not: read outside the table (a token outside [0, n_vocab) gives a zero row).
 * Invariants: element (b, e) depends only on tokens[b] and the table.
 */
#include "cuda_common.cuh"
#include "cuda_ops.h"

namespace {

__device__ __forceinline__ u32 rd16(const u8 *p) { return (u32)p[0] | ((u32)p[1] << 8); }
__device__ __forceinline__ u32 rd32(const u8 *p) { return rd16(p) | (rd16(p + 2) << 16); }
__device__ __forceinline__ float rdf16(const u8 *p) { return dev_fp16_to_f32(rd16(p)); }

__constant__ signed char k_kv4[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                      1,    13,   25,  38,  53,  69,  89,  113};
__constant__ signed char k_kvf[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* Nibble j of a 32-element Q4_0-style qs[16]: lo(qs[j]) for j < 16, else hi(qs[j - 16]). */
__device__ __forceinline__ int nib32(const u8 *qs, int j)
{
    return j < 16 ? (qs[j] & 15) : (qs[j - 16] >> 4);
}

/* Q4_K / Q5_K 6-bit scale and min of sub-block k (quant.c kq_unpack_scales). */
__device__ __forceinline__ void kq_scale(const u8 *S, int k, int &sc, int &m)
{
    if (k < 4) {
        sc = S[k] & 63;
        m = S[k + 4] & 63;
    } else {
        sc = (S[k + 4] & 15) | ((S[k - 4] >> 6) << 4);
        m = (S[k + 4] >> 4) | ((S[k] >> 6) << 4);
    }
}

/* Element j of the 256-element Q4_K (q5 = false) or Q5_K block blk. */
__device__ float deq_kq(const u8 *blk, int j, bool q5)
{
    const int k = j / 32, l = j % 32;
    int sc, m;
    kq_scale(blk + 4, k, sc, m);
    const u8 *qs = blk + (q5 ? 48 : 16);
    int n = (k & 1) ? (qs[32 * (k / 2) + l] >> 4) : (qs[32 * (k / 2) + l] & 15);
    if (q5)
        n |= ((blk[16 + l] >> k) & 1) << 4;
    const float D = rdf16(blk) * (float)sc, M = rdf16(blk + 2) * (float)m;
    return D * (float)n - M;
}

/* Element r of a Q6_K block (quant.c unpack_q6_k / deq_q6_k). */
__device__ float deq_q6_k(const u8 *blk, int r)
{
    const int h = r / 128, k = (r % 128) / 32, l = r % 32;
    const u8 *ql = blk + 64 * h, *qh = blk + 128 + 32 * h;
    const int lo = (k & 1) ? ql[l + 32] : ql[l];
    const int c = ((k < 2 ? (lo & 15) : (lo >> 4)) | (((qh[l] >> (2 * k)) & 3) << 4)) - 32;
    const float D = rdf16(blk + 208) * (float)(signed char)blk[192 + r / 16];
    return D * (float)c;
}

/* Element j of the block at blk of type qt (block sizes: runtime/qtype.c). */
__device__ float deq_elem(int qt, const u8 *blk, int j)
{
    switch (qt) {
    case QT_F32:
        return __uint_as_float(rd32(blk + 4 * j));
    case QT_F16:
        return rdf16(blk + 2 * j);
    case QT_BF16:
        return bf16_to_f32((u16)rd16(blk + 2 * j));
    case QT_Q8_0:
        return (float)(signed char)blk[2 + j] * rdf16(blk);
    case QT_Q4_0:
        return (float)(nib32(blk + 2, j) - 8) * rdf16(blk);
    case QT_Q5_0: {
        const int n = nib32(blk + 6, j) | (((rd32(blk + 2) >> j) & 1) << 4);
        return (float)(n - 16) * rdf16(blk);
    }
    case QT_IQ4_NL:
        return rdf16(blk) * (float)k_kv4[nib32(blk + 2, j)];
    case QT_Q4_1:
        return rdf16(blk) * (float)nib32(blk + 4, j) + rdf16(blk + 2);
    case QT_Q5_1: {
        const int n = nib32(blk + 8, j) | (((rd32(blk + 4) >> j) & 1) << 4);
        return rdf16(blk) * (float)n + rdf16(blk + 2);
    }
    case QT_MXFP4:
        return (float)k_kvf[nib32(blk + 1, j)] * e8m0_half_to_f32(blk[0]);
    case QT_NVFP4: {
        const int s = j / 16, jj = j % 16;
        const u8 *q = blk + 4 + 8 * s;
        const int n = jj < 8 ? (q[jj] & 15) : (q[jj - 8] >> 4);
        return (float)k_kvf[n] * ue4m3_half_to_f32(blk[s]);
    }
    case QT_Q4_K:
        return deq_kq(blk, j, false);
    case QT_Q5_K:
        return deq_kq(blk, j, true);
    case QT_Q6_K:
        return deq_q6_k(blk, j);
    case QT_IQ4_XS: {
        const int b = j / 32;
        const int ls = ((blk[4 + b / 2] >> (4 * (b % 2))) & 15) | (((rd16(blk + 2) >> (2 * b)) & 3) << 4);
        const float dl = rdf16(blk) * (float)(ls - 32);
        return dl * (float)k_kv4[nib32(blk + 8 + 16 * b, j % 32)];
    }
    case 15: /* Q8_K */
        return __uint_as_float(rd32(blk)) * (float)(signed char)blk[4 + j];
    default:
        return 0.0f; /* unreachable: the entry accepts only the types above */
    }
}

struct embed_geom {
    int qt, be, bb; /* qtype, elements and bytes per block */
};

__global__ void __launch_bounds__(256) embed_kernel(memra_embed_args a, embed_geom g)
{
    const int b = blockIdx.y, e = blockIdx.x * blockDim.x + threadIdx.x;
    pdl_wait_release();
    if (e < a.n_embd) {
        const int t = a.tokens[b];
        float v = 0.0f;
        if (t >= 0 && t < a.n_vocab) {
            const u8 *row = (const u8 *)a.table + (u64)t * a.row_bytes;
            v = deq_elem(g.qt, row + (u64)(e / g.be) * (u64)g.bb, e % g.be);
        }
        a.x[(size_t)b * (size_t)a.n_embd + (size_t)e] = v;
    }
}

/* Block geometry of the dequantizable types (runtime/qtype.c); false for the others. */
bool embed_geometry(int qt, embed_geom *g)
{
    static const struct { int qt, be, bb; } k[] = {
        {QT_F32, 1, 4},        {QT_F16, 1, 2},       {QT_BF16, 1, 2},    {QT_Q8_0, 32, 34},
        {QT_Q4_0, 32, 18},     {QT_Q5_0, 32, 22},    {QT_IQ4_NL, 32, 18}, {QT_Q4_1, 32, 20},
        {QT_Q5_1, 32, 24},     {QT_MXFP4, 32, 17},   {QT_NVFP4, 64, 36}, {QT_Q4_K, 256, 144},
        {QT_Q5_K, 256, 176},   {QT_Q6_K, 256, 210},  {QT_IQ4_XS, 256, 136}, {15, 256, 292},
    };
    for (const auto &r : k)
        if (r.qt == qt) {
            *g = {r.qt, r.be, r.bb};
            return true;
        }
    return false;
}

} /* namespace */

extern "C" int memra_embed_cuda(const memra_embed_args *a, cudaStream_t s)
{
    if (!a)
        return cuda_ops_invalid("embed: null args");
    const char *why = memra_embed_check(a);
    if (why)
        return cuda_ops_invalid(why);
    embed_geom g;
    if (!embed_geometry(a->qtype, &g))
        return cuda_ops_invalid("embed: table type cannot be dequantized on the GPU");
    if (a->n_embd % g.be != 0 || a->row_bytes < (uint64_t)(a->n_embd / g.be) * (uint64_t)g.bb)
        return cuda_ops_invalid("embed: n_embd is not whole blocks or row_bytes is too small");
    return cuda_ops_result(cuda_ops_launch(embed_kernel, dim3(cdiv_u(a->n_embd, 256), a->b),
                                           dim3(256), 0, s, 1, *a, g));
}
