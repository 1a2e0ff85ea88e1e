/*
 * l2_side.c — the side-branch L2 prefetch schedule (l2_side.h).
 */
#include "l2_side.h"

uint32_t memra_l2_side_forks(const uint8_t *kind, uint32_t n, memra_l2_fork *out, uint32_t cap)
{
    uint32_t n_forks = 0;
    int after_stream = 1; /* the sequence's start counts as the end of a stream */
    for (uint32_t i = 0; i < n; i++) {
        if (kind[i] == MEMRA_L2_SKIP)
            continue;
        if (kind[i] != MEMRA_L2_SMALL) {
            after_stream = 1;
            continue;
        }
        if (!after_stream)
            continue; /* inside a run of small launches: its fork, if any, is made */
        after_stream = 0;
        uint32_t j = i + 1;
        while (j < n && (kind[j] == MEMRA_L2_SMALL || kind[j] == MEMRA_L2_SKIP))
            j++;
        if (j < n && kind[j] == MEMRA_L2_MATVEC) {
            if (n_forks < cap)
                out[n_forks] = (memra_l2_fork){.at = i, .target = j};
            n_forks++;
        }
    }
    return n_forks;
}

uint64_t memra_l2_side_spread(const uint64_t *bytes, const uint64_t *chunk, uint32_t n_w,
                              uint64_t budget, uint64_t *take, uint32_t *count)
{
    uint64_t chunks = 0, sum = 0;
    for (uint32_t i = 0; i < n_w; i++) {
        const int ok = chunk[i] >= 16 && bytes[i] / chunk[i] <= UINT32_MAX;
        count[i] = ok ? (uint32_t)(bytes[i] / chunk[i]) : 0;
        chunks += count[i];
    }
    const uint64_t share = chunks ? (budget / chunks) & ~(uint64_t)15 : 0;
    for (uint32_t i = 0; i < n_w; i++) {
        const uint64_t most = chunk[i] & ~(uint64_t)15;
        take[i] = count[i] ? (share < most ? share : most) : 0;
        if (!take[i])
            count[i] = 0;
        sum += take[i] * count[i];
    }
    return sum;
}

uint64_t memra_l2_side_take(const uint64_t *bytes, uint32_t n_w, int paired, uint64_t budget,
                            uint64_t *take)
{
    uint64_t left = budget & ~(uint64_t)15, sum = 0;
    const uint64_t share = n_w ? (budget / n_w) & ~(uint64_t)15 : 0;
    for (uint32_t i = 0; i < n_w; i++) {
        const uint64_t want = paired ? share : left;
        take[i] = (bytes[i] < want ? bytes[i] : want) & ~(uint64_t)15;
        left -= paired ? 0 : take[i];
        sum += take[i];
    }
    return sum;
}

uint64_t memra_l2_side_ranges(const memra_l2_target *t, uint64_t budget, int spread,
                              memra_l2_range *r)
{
    uint64_t bytes[MEMRA_L2_SIDE_MAX_W] = {0}, chunk[MEMRA_L2_SIDE_MAX_W] = {0};
    uint64_t take[MEMRA_L2_SIDE_MAX_W] = {0};
    uint32_t count[MEMRA_L2_SIDE_MAX_W] = {0};
    const uint32_t n_w = t->n_w < MEMRA_L2_SIDE_MAX_W ? t->n_w : MEMRA_L2_SIDE_MAX_W;
    uint64_t before = 0; /* rows of the earlier weights (the direct path's warp grid) */
    for (uint32_t i = 0; i < n_w; i++) {
        const uint64_t rb = t->row_bytes[i], n = t->n_out[i];
        uint64_t lead = 0; /* rows before the first warp that begins inside weight i */
        if (spread && t->rpw && !t->paired)
            lead = (t->rpw - before % t->rpw) % t->rpw;
        lead = lead < n ? lead : n;
        r[i] = (memra_l2_range){.off = lead * rb};
        bytes[i] = (n - lead) * rb;
        chunk[i] = spread ? (t->rpw ? t->rpw : 1) * rb : bytes[i];
        before += n;
    }
    uint64_t sum;
    if (spread) {
        sum = memra_l2_side_spread(bytes, chunk, n_w, budget, take, count);
    } else {
        sum = memra_l2_side_take(bytes, n_w, t->paired, budget, take);
        for (uint32_t i = 0; i < n_w; i++)
            count[i] = take[i] ? 1 : 0;
    }
    for (uint32_t i = 0; i < n_w; i++) {
        r[i].bytes = count[i] ? take[i] : 0;
        r[i].stride = chunk[i];
        r[i].count = count[i];
    }
    return sum;
}
