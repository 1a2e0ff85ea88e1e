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
        const int ok = chunk[i] >= 16 && chunk[i] % 16 == 0 && bytes[i] / chunk[i] <= UINT32_MAX;
        count[i] = ok ? (uint32_t)(bytes[i] / chunk[i]) : 0;
        chunks += count[i];
    }
    const uint64_t share = chunks ? (budget / chunks) & ~(uint64_t)15 : 0;
    for (uint32_t i = 0; i < n_w; i++) {
        take[i] = count[i] ? (share < chunk[i] ? share : chunk[i]) : 0;
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
