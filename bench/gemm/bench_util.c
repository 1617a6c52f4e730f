/*
 * bench_util.c - see bench_util.h.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "bench_util.h"

#include <cublasLt.h>
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void bench_die(const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    fflush(stdout);
    fprintf(stderr, "FATAL: ");
    vfprintf(stderr, fmt, args);
    fprintf(stderr, "\n");
    va_end(args);
    exit(2);
}

/* ------------------------------------------------------------------------ */

static int compare_doubles(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int cuda_failed(cudaError_t err, const char *what, bench_timing *t) {
    if (err == cudaSuccess) return 0;
    snprintf(t->reason, sizeof t->reason, "%s: %s (%s)", what, cudaGetErrorName(err),
             cudaGetErrorString(err));
    t->ok = 0;
    return 1;
}

bench_timing bench_time(bench_call_fn fn, void *arg, int sets, int warmup, int reps,
                        cudaStream_t stream) {
    bench_timing t;
    memset(&t, 0, sizeof t);
    t.reps = reps;
    if (sets < 1) sets = 1;
    if (reps < 1) reps = 1;
    for (int i = 0; i < warmup; ++i)
        if (fn(arg, i % sets, t.reason, sizeof t.reason) != 0) {
            cudaStreamSynchronize(stream); /* leave nothing running behind a failure */
            return t;
        }
    if (cuda_failed(cudaStreamSynchronize(stream), "warm-up", &t)) return t;

    cudaEvent_t *events = calloc((size_t)reps + 1, sizeof *events);
    double *ms = calloc((size_t)reps, sizeof *ms);
    if (!events || !ms) bench_die("out of host memory");
    int created = 0, failed = 0;
    for (; created <= reps; ++created)
        if (cuda_failed(cudaEventCreate(&events[created]), "cudaEventCreate", &t)) {
            failed = 1;
            break;
        }
    if (!failed) failed = cuda_failed(cudaEventRecord(events[0], stream), "cudaEventRecord", &t);
    for (int i = 0; i < reps && !failed; ++i) {
        if (fn(arg, (warmup + i) % sets, t.reason, sizeof t.reason) != 0) {
            failed = 1;
            break;
        }
        failed = cuda_failed(cudaEventRecord(events[i + 1], stream), "cudaEventRecord", &t);
    }
    /* Always drain the stream, so a failure leaves nothing running. */
    const cudaError_t sync_err = cudaStreamSynchronize(stream);
    if (!failed) failed = cuda_failed(sync_err, "the timed calls", &t);
    if (!failed) failed = cuda_failed(cudaGetLastError(), "the timed calls", &t);
    for (int i = 0; i < reps && !failed; ++i) {
        float elapsed = 0.0f;
        failed = cuda_failed(cudaEventElapsedTime(&elapsed, events[i], events[i + 1]),
                             "cudaEventElapsedTime", &t);
        ms[i] = elapsed;
    }
    if (!failed) {
        qsort(ms, (size_t)reps, sizeof *ms, compare_doubles);
        t.median_ms = reps % 2 ? ms[reps / 2] : 0.5 * (ms[reps / 2 - 1] + ms[reps / 2]);
        t.min_ms = ms[0];
        t.max_ms = ms[reps - 1];
        t.ok = 1;
    }
    for (int i = 0; i < created; ++i) cudaEventDestroy(events[i]);
    free(events);
    free(ms);
    return t;
}

void bench_sleep_ms(int ms) {
    if (ms <= 0) return;
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) { /* interrupted: sleep the rest */
    }
}

bench_timing bench_time_chain(bench_call_fn fn, void *arg, int sets, int warmup, int reps, int chains,
                              cudaStream_t stream) {
    bench_timing t;
    memset(&t, 0, sizeof t);
    if (sets < 1) sets = 1;
    if (reps < 1) reps = 1;
    if (chains < 1) chains = 1;
    t.reps = reps * chains;
    for (int i = 0; i < warmup; ++i)
        if (fn(arg, i % sets, t.reason, sizeof t.reason) != 0) {
            cudaStreamSynchronize(stream);
            return t;
        }
    if (cuda_failed(cudaStreamSynchronize(stream), "warm-up", &t)) return t;
    double *ms = calloc((size_t)chains, sizeof *ms);
    if (!ms) bench_die("out of host memory");
    cudaEvent_t start = NULL, stop = NULL;
    int failed = cuda_failed(cudaEventCreate(&start), "cudaEventCreate", &t) ||
                 cuda_failed(cudaEventCreate(&stop), "cudaEventCreate", &t);
    for (int c = 0, call = warmup; c < chains && !failed; ++c) {
        failed = cuda_failed(cudaEventRecord(start, stream), "cudaEventRecord", &t);
        for (int i = 0; i < reps && !failed; ++i, ++call)
            if (fn(arg, call % sets, t.reason, sizeof t.reason) != 0) failed = 1;
        if (!failed) failed = cuda_failed(cudaEventRecord(stop, stream), "cudaEventRecord", &t);
        const cudaError_t sync_err = cudaStreamSynchronize(stream); /* always drain */
        if (!failed) failed = cuda_failed(sync_err, "the timed calls", &t);
        float elapsed = 0.0f;
        if (!failed) failed = cuda_failed(cudaEventElapsedTime(&elapsed, start, stop), "cudaEventElapsedTime", &t);
        ms[c] = elapsed / reps;
    }
    if (!failed) failed = cuda_failed(cudaGetLastError(), "the timed calls", &t);
    if (!failed) {
        qsort(ms, (size_t)chains, sizeof *ms, compare_doubles);
        t.median_ms = chains % 2 ? ms[chains / 2] : 0.5 * (ms[chains / 2 - 1] + ms[chains / 2]);
        t.min_ms = ms[0];
        t.max_ms = ms[chains - 1];
        t.ok = 1;
    }
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
    free(ms);
    return t;
}

void bench_time_rounds(const bench_call_fn *fns, void *const *args, int n, int sets, int warmup, int reps,
                       cudaStream_t stream, bench_timing *out) {
    memset(out, 0, (size_t)n * sizeof *out);
    if (sets < 1) sets = 1;
    if (reps < 1) reps = 1;
    bench_timing status; /* the run's one verdict, copied to every contender */
    memset(&status, 0, sizeof status);
    for (int i = 0; i < warmup; ++i)
        for (int c = 0; c < n; ++c)
            if (fns[c](args[c], i % sets, status.reason, sizeof status.reason) != 0) {
                cudaStreamSynchronize(stream);
                for (int k = 0; k < n; ++k) out[k] = status;
                return;
            }
    const int calls = n * reps;
    cudaEvent_t *events = calloc((size_t)calls + 1, sizeof *events);
    double *ms = calloc((size_t)calls, sizeof *ms);
    int *who = calloc((size_t)calls, sizeof *who);
    if (!events || !ms || !who) bench_die("out of host memory");
    int created = 0, failed = cuda_failed(cudaStreamSynchronize(stream), "warm-up", &status);
    for (; !failed && created <= calls; ++created)
        if (cuda_failed(cudaEventCreate(&events[created]), "cudaEventCreate", &status)) failed = 1;
    if (!failed) failed = cuda_failed(cudaEventRecord(events[0], stream), "cudaEventRecord", &status);
    /* one event between consecutive calls: the time between events k and k+1 is call k's */
    for (int r = 0, k = 0; r < reps && !failed; ++r)
        for (int j = 0; j < n && !failed; ++j, ++k) {
            const int c = (r + j) % n;
            who[k] = c;
            if (fns[c](args[c], (warmup + r) % sets, status.reason, sizeof status.reason) != 0) failed = 1;
            else failed = cuda_failed(cudaEventRecord(events[k + 1], stream), "cudaEventRecord", &status);
        }
    const cudaError_t sync_err = cudaStreamSynchronize(stream);
    if (!failed) failed = cuda_failed(sync_err, "the timed calls", &status);
    if (!failed) failed = cuda_failed(cudaGetLastError(), "the timed calls", &status);
    for (int k = 0; k < calls && !failed; ++k) {
        float elapsed = 0.0f;
        failed = cuda_failed(cudaEventElapsedTime(&elapsed, events[k], events[k + 1]), "cudaEventElapsedTime",
                             &status);
        ms[k] = elapsed;
    }
    for (int c = 0; c < n; ++c) {
        out[c] = status;
        out[c].reps = reps;
        if (failed) continue;
        double *mine = calloc((size_t)reps, sizeof *mine);
        if (!mine) bench_die("out of host memory");
        int m = 0;
        for (int k = 0; k < calls; ++k)
            if (who[k] == c) mine[m++] = ms[k];
        qsort(mine, (size_t)m, sizeof *mine, compare_doubles);
        out[c].median_ms = m % 2 ? mine[m / 2] : 0.5 * (mine[m / 2 - 1] + mine[m / 2]);
        out[c].min_ms = mine[0];
        out[c].max_ms = mine[m - 1];
        out[c].ok = 1;
        free(mine);
    }
    for (int i = 0; i < created; ++i) cudaEventDestroy(events[i]);
    free(events);
    free(ms);
    free(who);
}

double bench_tflops(double flops, double ms) { return ms > 0.0 ? flops / (ms * 1e-3) / 1e12 : 0.0; }

/* ------------------------------------------------------------------------ */
/* NVML through dlopen: no link-time dependency, and "unknown" where the
 * driver library is absent. Only the few entry points used are declared. */

typedef int (*nvml_init_fn)(void);
typedef int (*nvml_handle_by_pci_fn)(const char *pci_bus_id, void **device);
typedef int (*nvml_clock_fn)(void *device, int clock_type, unsigned int *mhz);
typedef int (*nvml_temperature_fn)(void *device, int sensor, unsigned int *celsius);
typedef int (*nvml_power_fn)(void *device, unsigned int *milliwatts);

enum { NVML_SUCCESS = 0, NVML_CLOCK_SM = 1, NVML_TEMPERATURE_GPU = 0 };

static struct {
    int tried;
    void *library;
    nvml_handle_by_pci_fn handle_by_pci;
    nvml_clock_fn clock, max_clock;
    nvml_temperature_fn temperature;
    nvml_power_fn power;
} nvml;

static int nvml_load(void) {
    if (nvml.tried) return nvml.library != NULL;
    nvml.tried = 1;
    nvml.library = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!nvml.library) return 0;
    nvml_init_fn init = (nvml_init_fn)dlsym(nvml.library, "nvmlInit_v2");
    nvml.handle_by_pci = (nvml_handle_by_pci_fn)dlsym(nvml.library, "nvmlDeviceGetHandleByPciBusId_v2");
    nvml.clock = (nvml_clock_fn)dlsym(nvml.library, "nvmlDeviceGetClockInfo");
    nvml.max_clock = (nvml_clock_fn)dlsym(nvml.library, "nvmlDeviceGetMaxClockInfo");
    nvml.temperature = (nvml_temperature_fn)dlsym(nvml.library, "nvmlDeviceGetTemperature");
    nvml.power = (nvml_power_fn)dlsym(nvml.library, "nvmlDeviceGetPowerUsage");
    if (!init || !nvml.handle_by_pci || !nvml.clock || !nvml.max_clock || init() != NVML_SUCCESS) {
        dlclose(nvml.library);
        nvml.library = NULL;
        return 0;
    }
    return 1;
}

void bench_device_info_refresh_clocks(bench_device_info *info) {
    info->sm_clock_mhz = info->max_sm_clock_mhz = info->temperature_c = -1;
    if (!nvml_load()) return;
    void *device = NULL;
    if (nvml.handle_by_pci(info->pci_bus_id, &device) != NVML_SUCCESS) return;
    unsigned int value = 0;
    if (nvml.clock(device, NVML_CLOCK_SM, &value) == NVML_SUCCESS) info->sm_clock_mhz = (int)value;
    if (nvml.max_clock(device, NVML_CLOCK_SM, &value) == NVML_SUCCESS) info->max_sm_clock_mhz = (int)value;
    if (nvml.temperature && nvml.temperature(device, NVML_TEMPERATURE_GPU, &value) == NVML_SUCCESS)
        info->temperature_c = (int)value;
}

int bench_device_sample(const bench_device_info *info, double *sm_clock_mhz, double *watts) {
    *sm_clock_mhz = *watts = -1.0;
    void *device = NULL;
    unsigned int mhz = 0, mw = 0;
    if (!nvml_load() || !nvml.power || nvml.handle_by_pci(info->pci_bus_id, &device) != NVML_SUCCESS ||
        nvml.clock(device, NVML_CLOCK_SM, &mhz) != NVML_SUCCESS || nvml.power(device, &mw) != NVML_SUCCESS)
        return 0;
    *sm_clock_mhz = (double)mhz;
    *watts = 1e-3 * (double)mw;
    return 1;
}

static double seconds_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void bench_settle_rounds(const bench_call_fn *fns, void *const *args, int n, int sets, double seconds,
                         cudaStream_t stream) {
    char reason[512];
    const double t0 = seconds_now();
    for (long round = 0; seconds_now() - t0 < seconds; ++round) {
        for (int c = 0; c < n; ++c)
            if (fns[c](args[c], (int)(round % (sets > 0 ? sets : 1)), reason, sizeof reason) != 0) {
                cudaStreamSynchronize(stream);
                return;
            }
        if (cudaStreamSynchronize(stream) != cudaSuccess) return;
    }
}

bench_soak bench_time_soak(bench_call_fn fn, void *arg, int sets, double seconds, cudaStream_t stream,
                           const bench_device_info *info) {
    bench_soak r;
    memset(&r, 0, sizeof r);
    char reason[512];
    const double settle = seconds / 4 < 0.5 ? seconds / 4 : 0.5;
    enum { kBatch = 8 }; /* calls between two readings: a few ms of work */
    long call = 0, counted = 0;
    double clock_sum = 0.0, watts_sum = 0.0, t_measure = 0.0;
    const double t0 = seconds_now();
    for (;;) {
        for (int i = 0; i < kBatch; ++i, ++call)
            if (fn(arg, (int)(call % (sets > 0 ? sets : 1)), reason, sizeof reason) != 0) {
                cudaStreamSynchronize(stream);
                return r;
            }
        if (cudaStreamSynchronize(stream) != cudaSuccess) return r;
        const double t = seconds_now();
        if (t_measure == 0.0) {
            if (t - t0 >= settle) t_measure = t; /* counting starts after this batch */
            continue;
        }
        counted += kBatch;
        double mhz, watts;
        if (bench_device_sample(info, &mhz, &watts)) {
            clock_sum += mhz;
            watts_sum += watts;
            ++r.samples;
        }
        if (t - t0 >= seconds) {
            r.seconds = t - t_measure;
            break;
        }
    }
    r.ok = cudaGetLastError() == cudaSuccess;
    r.calls = counted;
    r.ms_per_call = 1e3 * r.seconds / (double)counted;
    if (r.samples) {
        r.sm_clock_mhz = clock_sum / r.samples;
        r.watts = watts_sum / r.samples;
    }
    return r;
}

void bench_device_info_read(int device, bench_device_info *info) {
    memset(info, 0, sizeof *info);
    info->device = device;
    struct cudaDeviceProp props;
    BENCH_CUDA_OR_DIE(cudaGetDeviceProperties(&props, device));
    snprintf(info->name, sizeof info->name, "%s", props.name);
    info->sm_count = props.multiProcessorCount;
    info->cc_major = props.major;
    info->cc_minor = props.minor;
    info->l2_bytes = props.l2CacheSize;
    info->memory_bytes = props.totalGlobalMem;
    int khz = 0;
    info->peak_sm_clock_mhz =
        cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device) == cudaSuccess ? khz / 1000 : -1;
    cudaGetLastError();
    if (cudaDeviceGetPCIBusId(info->pci_bus_id, (int)sizeof info->pci_bus_id, device) != cudaSuccess) {
        cudaGetLastError();
        info->pci_bus_id[0] = '\0';
    }
    cudaRuntimeGetVersion(&info->runtime_version);
    cudaDriverGetVersion(&info->driver_version);
    info->cublaslt_version = cublasLtGetVersion();
    bench_device_info_refresh_clocks(info);
}

void bench_device_info_print(FILE *f, const bench_device_info *info) {
    fprintf(f, "GPU %d: %s (sm_%d%d, %d SMs, L2 %d MiB, %.0f GiB), peak SM clock %d MHz",
            info->device, info->name, info->cc_major, info->cc_minor, info->sm_count,
            info->l2_bytes >> 20, (double)info->memory_bytes / (1u << 30), info->peak_sm_clock_mhz);
    if (info->sm_clock_mhz >= 0)
        fprintf(f, ", now %d MHz (max %d), %d C", info->sm_clock_mhz, info->max_sm_clock_mhz,
                info->temperature_c);
    else
        fprintf(f, ", current clock unreadable (no NVML)");
    fprintf(f, "\nCUDA runtime %d, driver %d, cuBLASLt %zu, blockfp8 %d.%d.%d\n",
            info->runtime_version, info->driver_version, info->cublaslt_version,
            BFP8_VERSION_MAJOR, BFP8_VERSION_MINOR, BFP8_VERSION_PATCH);
}

void bench_device_info_json(FILE *f, const char *key, const bench_device_info *info) {
    bench_json_string(f, key);
    fprintf(f, ": {\"name\": ");
    bench_json_string(f, info->name);
    fprintf(f, ", \"pci_bus_id\": ");
    bench_json_string(f, info->pci_bus_id);
    fprintf(f,
            ", \"compute_capability\": \"%d.%d\", \"sm_count\": %d, \"l2_bytes\": %d, "
            "\"memory_bytes\": %zu, \"peak_sm_clock_mhz\": %d, \"sm_clock_mhz\": %d, "
            "\"max_sm_clock_mhz\": %d, \"temperature_c\": %d, \"cuda_runtime_version\": %d, "
            "\"cuda_driver_version\": %d, \"cublaslt_version\": %zu, \"blockfp8_version\": "
            "\"%d.%d.%d\"}",
            info->cc_major, info->cc_minor, info->sm_count, info->l2_bytes, info->memory_bytes,
            info->peak_sm_clock_mhz, info->sm_clock_mhz, info->max_sm_clock_mhz,
            info->temperature_c, info->runtime_version, info->driver_version,
            info->cublaslt_version, BFP8_VERSION_MAJOR, BFP8_VERSION_MINOR, BFP8_VERSION_PATCH);
}

/* ------------------------------------------------------------------------ */

int bench_parse_triple(const char *text, int64_t out[3]) {
    const char *p = text;
    for (int i = 0; i < 3; ++i) {
        char *end = NULL;
        const long long v = strtoll(p, &end, 10);
        if (end == p || v < 1) return 0;
        out[i] = v;
        p = end;
        if (i < 2) {
            if (*p != 'x' && *p != 'X' && *p != ',') return 0;
            ++p;
        }
    }
    return *p == '\0';
}

void bench_json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; s && *s; ++s) {
        const unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
}

void bench_json_number(FILE *f, double v) {
    if (isfinite(v)) fprintf(f, "%.6g", v);
    else fprintf(f, "null");
}

const char *bench_cublas_status_name(int status) {
    return cublasLtGetStatusName((cublasStatus_t)status);
}

int bench_failed_with(bfp8_status status, const char *what, char *reason, size_t reason_size) {
    if (status == BFP8_OK) return 0;
    snprintf(reason, reason_size, "%s: %s: %s", what, bfp8_status_name(status), bfp8_last_error());
    return 1;
}
