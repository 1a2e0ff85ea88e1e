/* qtype.c — the ggml type table (see qtype.h). Sizes from spec/gguf-and-quants.md §2. */
#include "qtype.h"

#include <stddef.h>
#include <strings.h>

static const memra_qtype_info k_types[MEMRA_QT_COUNT] = {
    [MEMRA_QT_F32] = {"f32", 1, 4},         [MEMRA_QT_F16] = {"f16", 1, 2},
    [MEMRA_QT_Q4_0] = {"q4_0", 32, 18},     [MEMRA_QT_Q4_1] = {"q4_1", 32, 20},
    [MEMRA_QT_Q5_0] = {"q5_0", 32, 22},     [MEMRA_QT_Q5_1] = {"q5_1", 32, 24},
    [MEMRA_QT_Q8_0] = {"q8_0", 32, 34},     [MEMRA_QT_Q8_1] = {"q8_1", 32, 36},
    [MEMRA_QT_Q2_K] = {"q2_K", 256, 84},    [MEMRA_QT_Q3_K] = {"q3_K", 256, 110},
    [MEMRA_QT_Q4_K] = {"q4_K", 256, 144},   [MEMRA_QT_Q5_K] = {"q5_K", 256, 176},
    [MEMRA_QT_Q6_K] = {"q6_K", 256, 210},   [MEMRA_QT_Q8_K] = {"q8_K", 256, 292},
    [MEMRA_QT_IQ2_XXS] = {"iq2_xxs", 256, 66}, [MEMRA_QT_IQ2_XS] = {"iq2_xs", 256, 74},
    [MEMRA_QT_IQ3_XXS] = {"iq3_xxs", 256, 98}, [MEMRA_QT_IQ1_S] = {"iq1_s", 256, 50},
    [MEMRA_QT_IQ4_NL] = {"iq4_nl", 32, 18}, [MEMRA_QT_IQ3_S] = {"iq3_s", 256, 110},
    [MEMRA_QT_IQ2_S] = {"iq2_s", 256, 82},  [MEMRA_QT_IQ4_XS] = {"iq4_xs", 256, 136},
    [MEMRA_QT_I8] = {"i8", 1, 1},           [MEMRA_QT_I16] = {"i16", 1, 2},
    [MEMRA_QT_I32] = {"i32", 1, 4},         [MEMRA_QT_I64] = {"i64", 1, 8},
    [MEMRA_QT_F64] = {"f64", 1, 8},         [MEMRA_QT_IQ1_M] = {"iq1_m", 256, 56},
    [MEMRA_QT_BF16] = {"bf16", 1, 2},       [MEMRA_QT_TQ1_0] = {"tq1_0", 256, 54},
    [MEMRA_QT_TQ2_0] = {"tq2_0", 256, 66},  [MEMRA_QT_MXFP4] = {"mxfp4", 32, 17},
    [MEMRA_QT_NVFP4] = {"nvfp4", 64, 36},
};

const memra_qtype_info *memra_qtype_get(uint32_t id)
{
    if (id >= MEMRA_QT_COUNT || k_types[id].block_elems == 0)
        return NULL;
    return &k_types[id];
}

int memra_qtype_from_name(const char *name)
{
    if (!name)
        return -1;
    for (int i = 0; i < MEMRA_QT_COUNT; i++)
        if (k_types[i].name && strcasecmp(k_types[i].name, name) == 0)
            return i;
    return -1;
}
