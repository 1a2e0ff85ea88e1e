/*
 * fuzz_plan.c — libFuzzer target for the plan loader: every input is handed to
 * memra_plan_parse() (as a plan, against the tiny model and its manifest) and to
 * memra_plan_manifest_parse(). Nothing may crash, leak or read out of bounds; a refused
 * input is fine.
 *
 * The model is forged at start-up (the "tiny" preset, default options: the same bytes as
 * the golden plans' model), so the seed corpus tests/data/plans/tiny/ passes the hash checks
 * and mutations reach the deep rules (launches, liveness, shapes).
 *
 * Build and run (clang):
 *   CC=clang cmake -S . -B build-fuzz -DMEMRA_FUZZ=ON && cmake --build build-fuzz -j2 --target fuzz_plan
 *   mkdir -p fuzz/corpus-plan && cp tests/data/plans/tiny/plan-b1-s0.json ... fuzz/corpus-plan/
 *   nice -n 10 build-fuzz/fuzz_plan -max_total_time=600 -max_len=32768 \
 *       -dict=fuzz/plan.dict fuzz/corpus-plan
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "forge.h"
#include "gguf.h"
#include "plan.h"

static memra_gguf *g_model;
static memra_plan_manifest *g_manifest;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    char path[256];
    memra_forge_opts o;
    memra_err e;
    memra_err_clear(&e);
    memra_forge_opts_init(&o);
    snprintf(path, sizeof path, "/tmp/memra-fuzz-plan-%ld.gguf", (long)getpid());
    if (memra_forge_write(&o, path, &e) != MEMRA_OK || memra_gguf_open(path, &g_model, &e) != MEMRA_OK) {
        fprintf(stderr, "fuzz_plan: cannot forge the tiny model: %s\n", e.msg);
        exit(1);
    }
    unlink(path); /* the mapping stays valid */
    /* The manifest of the golden plans, if the corpus has one: otherwise plans are checked
     * without the manifest cross-check. */
    memra_plan_manifest_load(MEMRA_SOURCE_DIR "/tests/data/plans/tiny", &g_manifest, NULL);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    memra_plan *p = NULL;
    memra_plan_manifest *m = NULL;
    memra_plan_parse((const char *)data, size, g_manifest, g_model, &p, NULL);
    memra_plan_free(p);
    memra_plan_manifest_parse((const char *)data, size, &m, NULL);
    memra_plan_manifest_free(m);
    return 0;
}
