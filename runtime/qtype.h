/*
 * qtype.h — the ggml tensor type ids GGUF files use, with block geometry.
 *
 * This table is the single source of block sizes for the GGUF reader (byte sizes of
 * tensors), the quant formats (runtime/quant.c) and the planner. Ids follow
 * spec/gguf-and-quants.md §2; removed ids (4, 5, 31-33, 36-38) have block size 0 and are
 * rejected wherever a type id is read from a file.
 */
#ifndef MEMRA_QTYPE_H
#define MEMRA_QTYPE_H

#include <stdint.h>

typedef enum memra_qtype {
    MEMRA_QT_F32 = 0,
    MEMRA_QT_F16 = 1,
    MEMRA_QT_Q4_0 = 2,
    MEMRA_QT_Q4_1 = 3,
    MEMRA_QT_Q5_0 = 6,
    MEMRA_QT_Q5_1 = 7,
    MEMRA_QT_Q8_0 = 8,
    MEMRA_QT_Q8_1 = 9,
    MEMRA_QT_Q2_K = 10,
    MEMRA_QT_Q3_K = 11,
    MEMRA_QT_Q4_K = 12,
    MEMRA_QT_Q5_K = 13,
    MEMRA_QT_Q6_K = 14,
    MEMRA_QT_Q8_K = 15,
    MEMRA_QT_IQ2_XXS = 16,
    MEMRA_QT_IQ2_XS = 17,
    MEMRA_QT_IQ3_XXS = 18,
    MEMRA_QT_IQ1_S = 19,
    MEMRA_QT_IQ4_NL = 20,
    MEMRA_QT_IQ3_S = 21,
    MEMRA_QT_IQ2_S = 22,
    MEMRA_QT_IQ4_XS = 23,
    MEMRA_QT_I8 = 24,
    MEMRA_QT_I16 = 25,
    MEMRA_QT_I32 = 26,
    MEMRA_QT_I64 = 27,
    MEMRA_QT_F64 = 28,
    MEMRA_QT_IQ1_M = 29,
    MEMRA_QT_BF16 = 30,
    MEMRA_QT_TQ1_0 = 34,
    MEMRA_QT_TQ2_0 = 35,
    MEMRA_QT_MXFP4 = 39,
    MEMRA_QT_NVFP4 = 40,
    MEMRA_QT_COUNT = 41,
} memra_qtype;

typedef struct memra_qtype_info {
    const char *name;     /* "q4_K" etc. as ggml spells it; NULL for removed ids */
    uint32_t block_elems; /* elements per block; 0 = removed id (invalid) */
    uint32_t block_bytes; /* bytes per block (Q8_1: the 36-byte C layout) */
} memra_qtype_info;

/* NULL when id is out of range or removed. */
const memra_qtype_info *memra_qtype_get(uint32_t id);
/* Case-insensitive lookup by name ("q4_k", "Q4_K", "f32"); -1 when unknown. */
int memra_qtype_from_name(const char *name);

#endif
