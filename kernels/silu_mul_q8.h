/*
 * silu_mul_q8.h — args of silu_mul_q8 (catalog: SILU_MUL_Q8): for each slot s in use,
 *   y_s[r] = q8_1( silu(g_s[r]) * u_s[r] )  for rows r in [0, b * m_s), each n_s wide,
 * m_s = 1 for a dense FFN, n_used for routed experts ([b, n_used, n_ff_exp], each expert's
 * row quantized on its own); slot 1 lets the shared expert ride in the same launch.
 * Arithmetic (f32, RN, no FMA): t = (g * (1 / (1 + expf(-g)))) * u, then
 * memra_quantize_q8_1 of the row. Row r reads only row r.
 */
#ifndef MEMRA_KERNEL_SILU_MUL_Q8_H
#define MEMRA_KERNEL_SILU_MUL_Q8_H

#include <stdint.h>

#define MEMRA_SILU_MUL_MAX_SLOTS 2

typedef struct memra_silu_mul_q8_slot {
    const float *g; /* [b, m, n] gate (silu applied) */
    const float *u; /* [b, m, n] up */
    void *y_q;      /* q8_1 blocks [b, m, n/32] */
    int32_t n;
    int32_t m;      /* rows per tick row */
} memra_silu_mul_q8_slot;

typedef struct memra_silu_mul_q8_args {
    int32_t b;
    int32_t n_slots; /* 1..MEMRA_SILU_MUL_MAX_SLOTS */
    memra_silu_mul_q8_slot slot[MEMRA_SILU_MUL_MAX_SLOTS];
} memra_silu_mul_q8_args;

static inline const char *memra_silu_mul_q8_check(const memra_silu_mul_q8_args *a)
{
    if (a->b <= 0 || a->n_slots < 1 || a->n_slots > MEMRA_SILU_MUL_MAX_SLOTS)
        return "b or slot count out of range";
    for (int i = 0; i < a->n_slots; i++) {
        const memra_silu_mul_q8_slot *s = &a->slot[i];
        if (!s->g || !s->u || !s->y_q)
            return "null pointer";
        if (s->n <= 0 || s->n % 32 != 0 || s->m <= 0)
            return "n must be a positive multiple of 32 and m positive";
    }
    return 0;
}

#ifdef __cplusplus
extern "C" {
#endif
/* CPU reference: MEMRA_OK, or MEMRA_ERR_INVALID_ARG when the check fails. */
int memra_silu_mul_q8_ref(const memra_silu_mul_q8_args *a);
#ifdef __cplusplus
}
#endif

#endif
