/*
 * silu_mul_q8.h — args of silu_mul_q8 (catalog: SILU_MUL_Q8): for each slot s in use,
 *   y_s[r] = q8_1( silu(g_s[r]) * u_s[r] )  for rows r in [0, b * m_s), each n_s wide,
 * m_s = 1 for a dense FFN, n_used for routed experts ([b, n_used, n_ff_exp], each expert's
 * row quantized on its own); slot 1 lets the shared expert ride in the same launch.
 * Arithmetic, bit-identical on CPU and GPU: t = memra_x_siluf(g) * u (kernels/exact_math.h:
 * (float)((double)g / (1.0 + memra_x_exp(-(double)g))), then one f32 RN product), then
 * memra_quantize_q8_1 of the row (per 32-block). No reduction: each value is elementwise.
 * Row r reads only row r. NaN inputs: same positions, NaN payloads may differ.
 *
 * Also here (test support, tests/gpu/test_ops_gpu.c): memra_exact_math_eval_cuda evaluates
 * one kernels/exact_math.h function on the GPU, elementwise, for the CPU-vs-GPU memcmp test.
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

/* Functions of memra_exact_math_eval_cuda: out[i] = f(x[i]) (f(x[i], y[i]) for POW,
 * memra_x_div_n(x[i], (int)y[i]) for DIV_N); the
 * float ones take (float)x[i] (x[i] must hold a float) and return the float widened. */
enum {
    MEMRA_XM_EXP,
    MEMRA_XM_LOG,
    MEMRA_XM_LOG1P,
    MEMRA_XM_POW,
    MEMRA_XM_SIN,
    MEMRA_XM_COS,
    MEMRA_XM_DIV_N,
    MEMRA_XM_EXPF,
    MEMRA_XM_SIGMOIDF,
    MEMRA_XM_SILUF,
    MEMRA_XM_SOFTPLUSF,
    MEMRA_XM_EXPF_SEQ,
    MEMRA_XM_COUNT
};
/* Device pointers x, y (read only for POW, DIV_N), out [n]; synchronous (default stream). MEMRA_OK,
 * MEMRA_ERR_INVALID_ARG (fn or n out of range), or MEMRA_ERR_CUDA. Only in CUDA builds. */
int memra_exact_math_eval_cuda(int32_t fn, const double *x, const double *y, double *out,
                               int64_t n);
#ifdef __cplusplus
}
#endif

#endif
