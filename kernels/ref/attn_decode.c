/*
 * attn_decode.c — CPU reference of attn_decode (contract and exact arithmetic:
 * kernels/attn_decode.h): emulates the CUDA kernel's flash-decoding order bit for bit —
 * per-lane fmaf partials and the xor butterfly of each score, the online softmax of every
 * (warp, sub) stream batch by batch, the sub butterfly merge, the in-order warp merge and
 * the in-order merge of the split partials — with memra_x_expf / memra_x_sigmoidf.
 * Must not: call libm transcendentals, or change an order without changing the kernel (and
 * the header) with it. The split partials are not stored: a first pass finds the row's
 * largest score (the combine's M: fmaxf is order-free up to the sign of a zero, which no
 * exp(M_s - M) sees), a second one computes and merges the splits in order.
 */
#include "attn_decode.h"

#include <math.h>
#include <string.h>

#include "memra.h"
#include "quant.h"
#include "ref/ref_common.h"

typedef struct head_scan {
    const float *q;
    const uint8_t *k, *v;
    uint64_t t_stride;
    int32_t kv_type, head_dim;
    float scale;
    memra_attn_order ord;
} head_scan;

/* Entry t of k or v as f32 (exact: fp16 widening, q8_0 code * d16). */
static void entry_f32(const head_scan *h, const uint8_t *base, int32_t t, float *dst)
{
    const uint8_t *src = base + (uint64_t)t * h->t_stride;
    if (h->kv_type == MEMRA_QT_F16) {
        for (int32_t d = 0; d < h->head_dim; d++) {
            uint16_t x;
            memcpy(&x, src + 2 * d, 2);
            dst[d] = memra_fp16_to_f32(x);
        }
    } else {
        memra_dequantize_row(MEMRA_QT_Q8_0, src, dst, h->head_dim);
    }
}

/* s_t: lane partials (fmaf in the lane's dim order), the xor butterfly, times scale. */
static float score(const head_scan *h, const float *kf)
{
    const memra_attn_order *o = &h->ord;
    const int32_t dh = h->head_dim;
    float part[32];
    for (int32_t l = 0; l < o->lpk; l++) {
        float acc = 0.0f;
        if (o->fast) {
            for (int32_t v = 0; v < o->vpl; v++)
                for (int32_t c = 0; c < 8; c++) {
                    const int32_t d = 8 * (l + o->lpk * v) + c;
                    acc = fmaf(h->q[d], kf[d], acc);
                }
        } else {
            for (int32_t d = l; d < dh; d += 32)
                acc = fmaf(h->q[d], kf[d], acc);
        }
        part[l] = acc;
    }
    for (int32_t off = o->lpk / 2; off >= 1; off >>= 1)
        for (int32_t l = 0; l < off; l++)
            part[l] = part[l] + part[l + off];
    return part[0] * h->scale;
}

/* exp(m - M) as a merge weight: 0 for an empty accumulator (m = -inf). */
static float merge_w(float m, float M) { return m == -INFINITY ? 0.0f : memra_x_expf(m - M); }

/* (ma, la, oa) <- merge((ma, la, oa), (mb, lb, ob)). */
static void merge(float *ma, float *la, float *oa, float mb, float lb, const float *ob, int32_t dh)
{
    const float M = fmaxf(*ma, mb), wa = merge_w(*ma, M), wb = merge_w(mb, M);
    *la = *la * wa + lb * wb;
    for (int32_t d = 0; d < dh; d++)
        oa[d] = oa[d] * wa + ob[d] * wb;
    *ma = M;
}

/* Stream (warp w, sub k) of split [t0, t1): its online-softmax state. */
static void stream(const head_scan *h, int32_t t0, int32_t t1, int32_t w, int32_t k, float *m,
                   float *l, float *o, float *kf)
{
    const memra_attn_order *ord = &h->ord;
    const int32_t dh = h->head_dim, U = ord->u, step = MEMRA_ATTN_WARPS * ord->kpw * U;
    *m = -INFINITY;
    *l = 0.0f;
    for (int32_t d = 0; d < dh; d++)
        o[d] = 0.0f;
    for (int32_t base = t0 + w * ord->kpw * U; base < t1; base += step) {
        float sc[4], p[4];
        int ok[4];
        float mb = -INFINITY;
        for (int32_t u = 0; u < U; u++) {
            const int32_t t = base + u * ord->kpw + k;
            ok[u] = t < t1;
            if (ok[u]) {
                entry_f32(h, h->k, t, kf);
                sc[u] = score(h, kf);
            } else {
                sc[u] = -INFINITY;
            }
            mb = fmaxf(mb, sc[u]);
        }
        const float mn = fmaxf(*m, mb), corr = merge_w(*m, mn);
        float ls = 0.0f;
        for (int32_t u = 0; u < U; u++) {
            p[u] = ok[u] ? memra_x_expf(sc[u] - mn) : 0.0f;
            ls = ls + p[u];
        }
        *l = *l * corr + ls;
        *m = mn;
        for (int32_t d = 0; d < dh; d++)
            o[d] = o[d] * corr;
        for (int32_t u = 0; u < U; u++) {
            if (ok[u]) {
                entry_f32(h, h->v, base + u * ord->kpw + k, kf);
                for (int32_t d = 0; d < dh; d++)
                    o[d] = fmaf(p[u], kf[d], o[d]);
            } else { /* the kernel adds p = 0 times a zeroed v (turns -0 into +0) */
                for (int32_t d = 0; d < dh; d++)
                    o[d] = fmaf(p[u], 0.0f, o[d]);
            }
        }
    }
}

/* Split [t0, t1): its partial (O[dh], *M, *L). */
static void split_partial(const head_scan *h, int32_t t0, int32_t t1, float *O, float *M, float *L)
{
    const int32_t dh = h->head_dim, kpw = h->ord.kpw;
    float so[MEMRA_ATTN_MAX_HEAD_DIM], sm[32], sl[32]; /* kpw * dh <= 1024 (header) */
    float wo[MEMRA_ATTN_WARPS][MEMRA_ATTN_MAX_HEAD_DIM], wm[MEMRA_ATTN_WARPS], wl[MEMRA_ATTN_WARPS];
    float kf[MEMRA_ATTN_MAX_HEAD_DIM];
    for (int32_t w = 0; w < MEMRA_ATTN_WARPS; w++) {
        for (int32_t k = 0; k < kpw; k++)
            stream(h, t0, t1, w, k, &sm[k], &sl[k], so + (size_t)k * (size_t)dh, kf);
        for (int32_t d = 1; d < kpw; d <<= 1)
            for (int32_t k = 0; k < kpw; k += 2 * d)
                merge(&sm[k], &sl[k], so + (size_t)k * (size_t)dh, sm[k + d], sl[k + d],
                      so + (size_t)(k + d) * (size_t)dh, dh);
        wm[w] = sm[0];
        wl[w] = sl[0];
        memcpy(wo[w], so, sizeof(float) * (size_t)dh);
    }
    float Mx = -INFINITY, wt[MEMRA_ATTN_WARPS];
    for (int32_t w = 0; w < MEMRA_ATTN_WARPS; w++)
        Mx = fmaxf(Mx, wm[w]);
    for (int32_t w = 0; w < MEMRA_ATTN_WARPS; w++)
        wt[w] = merge_w(wm[w], Mx);
    float Ls = 0.0f;
    for (int32_t w = 0; w < MEMRA_ATTN_WARPS; w++)
        Ls = Ls + wl[w] * wt[w];
    for (int32_t d = 0; d < dh; d++) {
        float Od = 0.0f;
        for (int32_t w = 0; w < MEMRA_ATTN_WARPS; w++)
            Od = Od + wo[w][d] * wt[w];
        O[d] = Od;
    }
    *M = Mx;
    *L = Ls;
}

void memra_attn_head(const float *q, const uint8_t *k, const uint8_t *v, uint64_t t_stride,
                     int32_t kv_type, int32_t len, int32_t head_dim, int32_t group,
                     int32_t max_split, float scale, float *o)
{
    const head_scan h = {.q = q, .k = k, .v = v, .t_stride = t_stride, .kv_type = kv_type,
                         .head_dim = head_dim, .scale = scale,
                         .ord = memra_attn_order_of(head_dim, group)};
    float kf[MEMRA_ATTN_MAX_HEAD_DIM], Os[MEMRA_ATTN_MAX_HEAD_DIM];
    float M = -INFINITY; /* the combine's max over the splits' maxima = the largest score */
    for (int32_t t = 0; t < len; t++) {
        entry_f32(&h, k, t, kf);
        M = fmaxf(M, score(&h, kf));
    }
    const int32_t nsplit = memra_attn_nsplit(len, max_split), per = memra_attn_split_keys(len, nsplit);
    float L = 0.0f;
    for (int32_t d = 0; d < head_dim; d++)
        o[d] = 0.0f;
    for (int32_t s = 0; s < nsplit; s++) {
        const int32_t t0 = s * per, t1 = t0 + per < len ? t0 + per : len;
        float Ms, Ls;
        split_partial(&h, t0, t1, Os, &Ms, &Ls);
        if (Ls == 0.0f) /* empty split */
            continue;
        const float w = memra_x_expf(Ms - M);
        L = L + Ls * w;
        for (int32_t d = 0; d < head_dim; d++)
            o[d] = o[d] + Os[d] * w;
    }
    const float inv = 1.0f / L;
    for (int32_t d = 0; d < head_dim; d++)
        o[d] = o[d] * inv;
}

typedef struct decode_row {
    const memra_attn_decode_args *a;
    int32_t b;
    int valid; /* positions[b] in [0, n_ctx) */
} decode_row;

/* o[head_dim] = gated attention output of q head i (kref_head_fn). */
static void head(void *ctx, int32_t i, float *o)
{
    const decode_row *r = ctx;
    const memra_attn_decode_args *a = r->a;
    const int32_t dh = a->head_dim, b = r->b;
    if (!r->valid) {
        memset(o, 0, sizeof(float) * (size_t)dh);
        return;
    }
    const int32_t group = a->n_head / a->n_head_kv, j = i / group;
    const uint64_t hb = memra_kv_head_bytes(a->kv_type, dh);
    const float *q = a->q + (size_t)b * (size_t)(a->n_head * dh) + (size_t)(i * dh);
    const float *g = a->qg + (size_t)b * (size_t)(2 * a->n_head * dh) + (size_t)(2 * i * dh + dh);
    memra_attn_head(q, (const uint8_t *)(uintptr_t)a->k_cache[b] + (uint64_t)j * hb,
                    (const uint8_t *)(uintptr_t)a->v_cache[b] + (uint64_t)j * hb,
                    (uint64_t)a->n_head_kv * hb, a->kv_type, a->positions[b] + 1, dh, group,
                    a->max_split, a->scale, o);
    for (int32_t c = 0; c < dh; c++)
        o[c] = o[c] * memra_x_sigmoidf(g[c]);
}

int memra_attn_decode_ref(const memra_attn_decode_args *a)
{
    if (memra_attn_decode_check(a))
        return MEMRA_ERR_INVALID_ARG;
    const int32_t width = a->n_head * a->head_dim;
    float buf[MEMRA_ATTN_MAX_HEAD_DIM];
    for (int32_t b = 0; b < a->b; b++) {
        decode_row r = {.a = a, .b = b,
                        .valid = a->positions[b] >= 0 && a->positions[b] < a->n_ctx};
        kref_emit_heads_q8_1(head, &r, a->n_head, a->head_dim, buf,
                             (memra_block_q8_1 *)a->y_q + (size_t)b * (size_t)(width / 32),
                             a->o ? a->o + (size_t)b * (size_t)width : NULL);
    }
    return MEMRA_OK;
}
