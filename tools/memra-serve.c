/*
 * memra-serve — an OpenAI-compatible HTTP server over one checkpoint (tools/serve.h says what
 * it serves): every request being generated advances in the same batched tick.
 *
 *   memra-serve -m MODEL [--plans DIR] [--backend auto|cpu|cuda] [--host ADDR] [--port N]
 *               [--slots N] [--ctx N] [--tiers 1,2,4,...] [--model-name NAME]
 *               [--max-tokens N] [--max-queue N] [--no-graph]
 *
 * stderr: the engine and the address once listening ("memra-serve: listening on
 * http://127.0.0.1:8080", the line scripts wait for). SIGINT / SIGTERM stop it: requests in
 * flight end with 503, then the engine closes. Exit status 0 after a signal, 1 on an error,
 * 2 on bad arguments.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memra.h"
#include "serve.h"

static int parse_u(const char *s, unsigned long lo, unsigned long hi, unsigned long *out)
{
    char *end;
    errno = 0;
    const unsigned long v = strtoul(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi || s[0] == '-')
        return -1;
    *out = v;
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: memra-serve -m MODEL [options]\n"
               "  -m, --model FILE      GGUF checkpoint\n"
               "  --plans DIR           plans from memra-plan (default: planned in-process)\n"
               "  --backend NAME        auto (default: cuda when a GPU is present), cpu, cuda\n"
               "  --host ADDR           IPv4 address to bind (default 127.0.0.1)\n"
               "  --port N              TCP port (default 8080; 0: any free port)\n"
               "  --slots N             requests generated at once (default 16)\n"
               "  --ctx N               tokens per request, prompt included (default 4096)\n"
               "  --tiers LIST          batch tiers to plan (default 1,2,4,8,12,16)\n"
               "  --model-name NAME     the model id clients send (default: the file name)\n"
               "  --max-tokens N        when a request gives no max_tokens (default 256)\n"
               "  --max-queue N         requests waiting for a slot before 503 (default 256)\n"
               "  --no-graph            cuda: launch op by op instead of graph replay\n");
}

int main(int argc, char **argv)
{
    memra_engine_config c;
    memra_engine_config_init(&c);
    memra_serve_opts so;
    memra_serve_opts_init(&so);
    so.port = 8080;
    unsigned long v;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        int used = 1;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--no-graph")) {
            c.no_graph = 1, used = 0;
        } else if (!val) {
            fprintf(stderr, "memra-serve: %s needs a value (see --help)\n", a);
            return 2;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            c.model_path = val;
        } else if (!strcmp(a, "--plans")) {
            c.plan_dir = val;
        } else if (!strcmp(a, "--backend")) {
            c.backend = !strcmp(val, "auto")   ? MEMRA_BACKEND_AUTO
                        : !strcmp(val, "cpu")  ? MEMRA_BACKEND_CPU
                        : !strcmp(val, "cuda") ? MEMRA_BACKEND_CUDA
                                               : -1;
            if (c.backend < 0) {
                fprintf(stderr, "memra-serve: --backend '%s' is not auto, cpu or cuda\n", val);
                return 2;
            }
        } else if (!strcmp(a, "--host")) {
            so.host = val;
        } else if (!strcmp(a, "--port") && !parse_u(val, 0, 65535, &v)) {
            so.port = (uint16_t)v;
        } else if (!strcmp(a, "--slots") && !parse_u(val, 1, 4096, &v)) {
            c.n_slots = (uint32_t)v;
        } else if (!strcmp(a, "--ctx") && !parse_u(val, 2, 1u << 24, &v)) {
            c.n_ctx = (uint32_t)v;
        } else if (!strcmp(a, "--model-name")) {
            so.model_name = val;
        } else if (!strcmp(a, "--max-tokens") && !parse_u(val, 1, 1u << 24, &v)) {
            so.default_max_tokens = (uint32_t)v;
        } else if (!strcmp(a, "--max-queue") && !parse_u(val, 1, 1u << 20, &v)) {
            so.max_queue = (uint32_t)v;
        } else if (!strcmp(a, "--tiers")) {
            char buf[128];
            snprintf(buf, sizeof buf, "%s", val);
            c.n_tiers = 0;
            for (char *save = NULL, *t = strtok_r(buf, ",", &save); t;
                 t = strtok_r(NULL, ",", &save)) {
                if (c.n_tiers == 16 || parse_u(t, 1, 16, &v)) {
                    fprintf(stderr, "memra-serve: --tiers '%s': want up to 16 of 1..16\n", val);
                    return 2;
                }
                c.tiers[c.n_tiers++] = (uint32_t)v;
            }
        } else {
            fprintf(stderr, "memra-serve: bad option or value: %s %s (see --help)\n", a, val);
            return 2;
        }
        i += used;
    }
    if (!c.model_path) {
        fprintf(stderr, "memra-serve: need -m MODEL (see --help)\n");
        return 2;
    }
    if (!so.model_name) {
        const char *slash = strrchr(c.model_path, '/');
        so.model_name = slash ? slash + 1 : c.model_path;
    }
    /* the signals go to sigwait below, not to whichever thread runs */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    memra_engine *e = NULL;
    if (memra_engine_open(&c, &e) != MEMRA_OK) {
        fprintf(stderr, "memra-serve: %s\n", memra_last_error());
        return 1;
    }
    memra_engine_info in;
    memra_engine_get_info(e, &in);
    fprintf(stderr,
            "memra-serve: %s, %u layers, n_vocab %u on %s (%s); %u slots of %u tokens, tiers up to "
            "%u\n",
            in.arch, in.n_layer, in.n_vocab, in.backend, in.device, in.n_slots, in.n_ctx,
            in.max_rows);
    memra_server *sv = NULL;
    char msg[256];
    if (memra_serve_start(e, &so, &sv, msg, sizeof msg) != MEMRA_OK) {
        fprintf(stderr, "memra-serve: %s\n", msg);
        memra_engine_close(e);
        return 1;
    }
    fprintf(stderr, "memra-serve: model '%s' listening on http://%s:%u\n", so.model_name, so.host,
            (unsigned)memra_serve_port(sv));
    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "memra-serve: %s, stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    memra_serve_stop(sv);
    memra_engine_close(e);
    return 0;
}
