/*
 * l2_side.h — where the CUDA backend's side-branch L2 prefetch runs (memra_cuda_opts.
 * l2_side_mib), as a function of a plan's launch sequence, so that the schedule is tested on
 * any machine (tests/test_backend_cpu.c) and the backend only maps it to device pointers.
 *
 * At tier 1 the tick alternates mat-vecs, which stream weights at near the copy rate, with
 * runs of small kernels (norms, gdn_step, attention) that leave DRAM nearly idle for a few
 * microseconds each. A fork lets a one-warp-per-SM prefetch kernel, on a branch beside the
 * chain, start when a mat-vec ends and pull the first bytes of the NEXT mat-vec's weights into
 * L2 while the small kernels run; the chain itself gains no dependency (the branch joins at
 * the stage's end). A hint: no byte of any result depends on it.
 *
 * Must not: depend on the device, or choose anything that changes a result.
 */
#ifndef MEMRA_L2_SIDE_H
#define MEMRA_L2_SIDE_H

#include <stdint.h>

/* A launch's part in the schedule. */
enum {
    MEMRA_L2_SKIP = 0,   /* not launched (folded into its neighbour) */
    MEMRA_L2_MATVEC = 1, /* streams weights known at bind time: a fork's target (mmvq) */
    MEMRA_L2_HEAVY = 2,  /* streams what only the device knows (MoE experts): never beside a
                            fork, never a target */
    MEMRA_L2_SMALL = 3,  /* everything else: latency-bound, DRAM mostly idle */
};

typedef struct memra_l2_fork {
    uint32_t at;     /* the fork is made just before launch `at` (a SMALL launch) */
    uint32_t target; /* the MATVEC launch whose weights it prefetches */
} memra_l2_fork;

/* The forks of a launch sequence kind[0..n): one at the first SMALL launch of every run of
 * SMALL launches that starts the sequence or follows a MATVEC / HEAVY launch, when the next
 * launch that is not SMALL or SKIP is a MATVEC (its target). At most `cap` written to out
 * (which may be NULL when cap is 0); returns how many there are. */
uint32_t memra_l2_side_forks(const uint8_t *kind, uint32_t n, memra_l2_fork *out, uint32_t cap);

/* How many bytes of each of a target's n_w weights (bytes[i] each, in launch order) a budget
 * of `budget` bytes prefetches, into take[i]: the weights' first bytes in the order the
 * mat-vec reads them, each take a multiple of 16. paired = 0: the rows laid end to end
 * (the direct path's warp order), so the first weights first; paired = 1: every weight read
 * side by side (the fused SwiGLU's gate and up, row block c of both in CUDA block c), an
 * equal share each. Returns the sum of take. */
uint64_t memra_l2_side_take(const uint64_t *bytes, uint32_t n_w, int paired, uint64_t budget,
                            uint64_t *take);

/* The spread form's shares: weight i is bytes[i] read as chunks of chunk[i] bytes that all
 * start at once; count[i] = its whole chunks (a short last one is left out), take[i] = the first
 * bytes of each, the budget shared equally over every chunk of every weight, a multiple of 16,
 * at most the chunk rounded down to 16 (0 where the share is under 16 bytes or chunk[i] is).
 * Returns the bytes prefetched in all, sum of take[i] x count[i]. */
uint64_t memra_l2_side_spread(const uint64_t *bytes, const uint64_t *chunk, uint32_t n_w,
                              uint64_t budget, uint64_t *take, uint32_t *count);

#define MEMRA_L2_SIDE_MAX_W 4 /* weights of one target (MEMRA_MMVQ_MAX_OUT) */

/* A fork's target as its mat-vec reads it (nvrtc_templates/mmvq_params.h). */
typedef struct memra_l2_target {
    uint32_t n_w; /* weights, 1..MEMRA_L2_SIDE_MAX_W */
    uint32_t rpw; /* the direct path: rows per warp, warp j owning rows [j rpw, (j + 1) rpw)
                     of the weights laid end to end, each row read to its end before the
                     next; 0: the staged path, whose 16-row tiles read the first bytes of
                     all their rows first */
    int paired;   /* the fused SwiGLU: {gate, up} side by side, rpw-row blocks of each from
                     row 0 */
    uint64_t row_bytes[MEMRA_L2_SIDE_MAX_W];
    uint32_t n_out[MEMRA_L2_SIDE_MAX_W];
} memra_l2_target;

/* What a fork prefetches of one weight: `count` chunks of `bytes` each, chunk c starting
 * off + c x stride bytes into the weight; the device starts each at the 16-byte boundary at or
 * below it (a q6_K row starts 2-byte aligned), which stays inside the weight because weights
 * start 16-byte aligned. count 0: nothing. */
typedef struct memra_l2_range {
    uint64_t off, bytes, stride;
    uint32_t count;
} memra_l2_range;

/* The ranges r[0..t->n_w) a budget of `budget` bytes takes of target t. spread = 0: the first
 * bytes of the weights in launch order (memra_l2_side_take; paired: an equal share each).
 * spread = 1 (memra_cuda_opts.l2_side_spread): the first bytes every warp reads, the budget
 * shared equally (memra_l2_side_spread) over every warp's rows (the direct path; a weight's
 * chunks start at the first warp that begins inside it, so a warp whose rows straddle two
 * weights gets nothing) or every row (the staged path). Every chunk lies inside its weight.
 * Returns the bytes prefetched in all. A multi-wave launch's later warps get their share too. */
uint64_t memra_l2_side_ranges(const memra_l2_target *t, uint64_t budget, int spread,
                              memra_l2_range *r);

#endif
