/*
 * cuda_util.c — run-time loading of the CUDA driver API and CUDA error records (see
 * cuda_util.h for why nothing links libcuda).
 *
 * Must not: print, abort, or retry a failed load (the first outcome is the process's answer).
 * Invariants: g_api is written only inside the pthread_once routine; g_load_rc/g_load_msg
 * record that routine's outcome for every later caller.
 */
#include "cuda_util.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static memra_cu_api g_api;
static int g_load_rc = MEMRA_ERR_INTERNAL;
static char g_load_msg[256];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* The symbol a cuda.h name maps to ("cuMemAlloc" -> "cuMemAlloc_v2"), as a string. */
#define MEMRA_CU_STR2(x) #x
#define MEMRA_CU_STR(x) MEMRA_CU_STR2(x)

static void load_once(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        g_load_rc = MEMRA_ERR_UNSUPPORTED;
        snprintf(g_load_msg, sizeof g_load_msg, "no CUDA driver: %s", dlerror());
        return;
    }
    /* Each entry point by the exact symbol cuda.h maps its name to, so the pointer has the
     * signature __typeof__ saw. cuGetProcAddress(name, CUDA_VERSION) is not equivalent: for
     * cuCtxGetDevice it returns the CUDA 13 cuCtxGetDevice_v2(dev, ctx), whose extra
     * argument crashed the driver when called through the 1-argument prototype. */
#define MEMRA_CU_RESOLVE(name)                                                                     \
    {                                                                                              \
        void *fp = dlsym(lib, MEMRA_CU_STR(name));                                                 \
        if (!fp) {                                                                                 \
            g_load_rc = MEMRA_ERR_UNSUPPORTED;                                                     \
            snprintf(g_load_msg, sizeof g_load_msg, "CUDA driver lacks %s (%s): too old",          \
                     MEMRA_CU_STR(name), #name);                                                   \
            return;                                                                                \
        }                                                                                          \
        memcpy(&g_api.name, &fp, sizeof fp);                                                       \
    }
    MEMRA_CU_FUNCS(MEMRA_CU_RESOLVE)
#undef MEMRA_CU_RESOLVE
    g_load_rc = MEMRA_OK;
}

int memra_cu_load(memra_err *err)
{
    pthread_once(&g_once, load_once);
    if (g_load_rc != MEMRA_OK)
        return MEMRA_FAIL(err, g_load_rc, "%s", g_load_msg);
    return MEMRA_OK;
}

const memra_cu_api *memra_cu(void) { return g_load_rc == MEMRA_OK ? &g_api : NULL; }

int memra_cu_fail(memra_err *err, CUresult r, const char *call, const char *file, int line)
{
    if (r == CUDA_SUCCESS)
        return MEMRA_OK;
    const char *name = NULL, *text = NULL;
    if (g_load_rc == MEMRA_OK) {
        g_api.cuGetErrorName(r, &name);
        g_api.cuGetErrorString(r, &text);
    }
    return memra_err_set(err, MEMRA_ERR_CUDA, file, line, "%s: %s (%s)", call,
                         name ? name : "CUDA_ERROR_?", text ? text : "unknown CUDA error");
}

int memra_cu_device_open(int ordinal, int *sm, memra_err *err)
{
    int rc = memra_cu_load(err);
    if (rc != MEMRA_OK)
        return rc;
    int count = 0, major = 0, minor = 0;
    CUdevice dev;
    CUcontext ctx;
    CUresult r = g_api.cuInit(0);
    if (r == CUDA_ERROR_NO_DEVICE || r == CUDA_ERROR_NOT_FOUND) /* driver but no GPU */
        return MEMRA_FAIL(err, MEMRA_ERR_UNSUPPORTED, "cuInit: no CUDA device");
    MEMRA_CU_TRY(err, cuInit(0));
    MEMRA_CU_TRY(err, cuDeviceGetCount(&count));
    if (ordinal < 0 || ordinal >= count)
        return MEMRA_FAIL(err, MEMRA_ERR_UNSUPPORTED, "CUDA device %d does not exist (%d found)",
                          ordinal, count);
    MEMRA_CU_TRY(err, cuDeviceGet(&dev, ordinal));
    MEMRA_CU_TRY(err, cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                           dev));
    MEMRA_CU_TRY(err, cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                           dev));
    MEMRA_CU_TRY(err, cuDevicePrimaryCtxRetain(&ctx, dev));
    r = g_api.cuCtxSetCurrent(ctx);
    if (r != CUDA_SUCCESS) {
        g_api.cuDevicePrimaryCtxRelease(dev);
        return memra_cu_fail(err, r, "cuCtxSetCurrent(ctx)", __FILE__, __LINE__);
    }
    if (sm)
        *sm = 10 * major + minor;
    return MEMRA_OK;
fail:
    return rc;
}

void memra_cu_device_close(int ordinal)
{
    CUdevice dev;
    if (g_load_rc != MEMRA_OK || g_api.cuDeviceGet(&dev, ordinal) != CUDA_SUCCESS)
        return;
    g_api.cuCtxSetCurrent(NULL);
    g_api.cuDevicePrimaryCtxRelease(dev);
}

void memra_cu_pdl_config(CUlaunchConfig *cfg, CUlaunchAttribute *attr, unsigned grid,
                         unsigned threads, unsigned smem, CUstream st)
{
    memset(attr, 0, sizeof *attr);
    attr->id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr->value.programmaticStreamSerializationAllowed = 1;
    memset(cfg, 0, sizeof *cfg);
    cfg->gridDimX = grid, cfg->gridDimY = 1, cfg->gridDimZ = 1;
    cfg->blockDimX = threads, cfg->blockDimY = 1, cfg->blockDimZ = 1;
    cfg->sharedMemBytes = smem;
    cfg->hStream = st;
    cfg->attrs = attr;
    cfg->numAttrs = 1;
}
