/*
 * bench_util.h - host-side helpers of the benchmarks (bench/gemm,
 * bench/linear): timing with CUDA events (warm-up, median), what the device
 * and the libraries are (name, clocks, versions) and a few JSON writers.
 */
#ifndef BFP8_BENCH_UTIL_H
#define BFP8_BENCH_UTIL_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "blockfp8.h"

/* Setup failures (allocation, copies) end the program with exit code 2. */
void bench_die(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2), noreturn))
#endif
    ;

#define BENCH_CUDA_OR_DIE(call)                                                              \
    do {                                                                                     \
        cudaError_t bench_err_ = (call);                                                     \
        if (bench_err_ != cudaSuccess)                                                       \
            bench_die("%s:%d: %s: %s (%s)", __FILE__, __LINE__, #call,                      \
                      cudaGetErrorName(bench_err_), cudaGetErrorString(bench_err_));         \
    } while (0)

#define BENCH_BFP8_OR_DIE(call)                                                              \
    do {                                                                                     \
        bfp8_status bench_status_ = (call);                                                  \
        if (bench_status_ != BFP8_OK)                                                        \
            bench_die("%s:%d: %s: %s: %s", __FILE__, __LINE__, #call,                       \
                      bfp8_status_name(bench_status_), bfp8_last_error());                   \
    } while (0)

/* ------------------------------------------------------------------------ */
/* Timing                                                                    */

/* One call of the thing timed, on input set `set`. Returns 0 on success;
 * otherwise writes why into reason and returns non-zero. */
typedef int (*bench_call_fn)(void *arg, int set, char *reason, size_t reason_size);

typedef struct bench_timing {
    int ok;             /* 1: every call succeeded and the figures are valid */
    char reason[512];   /* why not, when !ok */
    int reps;
    double median_ms, min_ms, max_ms;
} bench_timing;

/* warmup calls, then reps calls back to back with an event between each;
 * the figures are the per-call times between consecutive events. Calls
 * rotate over `sets` input sets. A failing call or a CUDA error makes the
 * timing !ok with the reason (nothing failed is ever timed). */
bench_timing bench_time(bench_call_fn fn, void *arg, int sets, int warmup, int reps,
                        cudaStream_t stream);

/* warmup calls, then `chains` chains of `reps` calls back to back with
 * nothing between them (no events: a call may start behind the previous
 * one, as in a training step); the figures are each chain's time over reps,
 * so median/min/max are over chains. */
bench_timing bench_time_chain(bench_call_fn fn, void *arg, int sets, int warmup, int reps, int chains,
                              cudaStream_t stream);

/* Sleeps ms milliseconds (the host only; the GPU is left idle). */
void bench_sleep_ms(int ms);

/* bench_time for n contenders at once, in rounds: every round runs one call
 * of each, the order rotating from round to round, so the clock drift of a
 * long run (an H200 power-throttles from 1980 to ~1600 MHz within seconds of
 * dense GEMMs) falls on all of them alike instead of on whoever is timed
 * last. fns[i](args[i], ...) is contender i; out[i] its figures. Each
 * contender must have succeeded once before (a failing call makes every
 * timing !ok with the reason). */
void bench_time_rounds(const bench_call_fn *fns, void *const *args, int n, int sets, int warmup, int reps,
                       cudaStream_t stream, bench_timing *out);

/* Rounds of one call of each contender, back to back, for at least `seconds`
 * of wall time: the GPU brought to the clock and power it holds under
 * sustained load before anything is timed (the first shape of a process
 * would otherwise be timed in the first tens of milliseconds of load, at a
 * boost clock no training step sees). It stops at a failing call and leaves
 * the failure to the timing that follows, which reports it with its reason. */
void bench_settle_rounds(const bench_call_fn *fns, void *const *args, int n, int sets, double seconds,
                         cudaStream_t stream);

static inline int64_t bench_ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static inline int64_t bench_round_up(int64_t a, int64_t multiple) {
    return bench_ceil_div(a, multiple) * multiple;
}

/* 0 when status is BFP8_OK; otherwise 1, with "what: STATUS: last error" in reason. */
int bench_failed_with(bfp8_status status, const char *what, char *reason, size_t reason_size);

/* TFLOP/s of `flops` floating-point operations done in `ms` milliseconds. */
double bench_tflops(double flops, double ms);

/* ------------------------------------------------------------------------ */
/* The device and the libraries                                              */

typedef struct bench_device_info {
    int device;
    char name[256];
    char pci_bus_id[32];
    int sm_count;
    int cc_major, cc_minor;
    int l2_bytes;
    int peak_sm_clock_mhz;   /* cudaDevAttrClockRate; -1 if unknown */
    size_t memory_bytes;
    int runtime_version, driver_version; /* e.g. 13000 */
    size_t cublaslt_version;             /* e.g. 130100 */
    /* From NVML when it loads (dlopen), else -1. */
    int sm_clock_mhz, max_sm_clock_mhz, temperature_c;
} bench_device_info;

void bench_device_info_read(int device, bench_device_info *info);
/* Refresh the NVML figures (clock, temperature) only. */
void bench_device_info_refresh_clocks(bench_device_info *info);
void bench_device_info_print(FILE *f, const bench_device_info *info);
/* Writes "key": {...} (no trailing comma). */
void bench_device_info_json(FILE *f, const char *key, const bench_device_info *info);

/* The board now, from NVML: SM clock (MHz) and power draw (W). Returns 0
 * (and -1 in both) where NVML cannot be read. */
int bench_device_sample(const bench_device_info *info, double *sm_clock_mhz, double *watts);

/* ------------------------------------------------------------------------ */
/* Steady state                                                              */

typedef struct bench_soak {
    int ok;            /* 1: every call succeeded */
    double seconds;    /* measured (after the settling part) */
    long calls;        /* in those seconds */
    double ms_per_call;
    int samples;       /* board readings averaged below; 0: NVML unreadable */
    double sm_clock_mhz, watts;
} bench_soak;

/* fn alone, back to back, for `seconds`: the first quarter (at most 0.5 s)
 * lets the clock settle under its power draw, then calls are counted and
 * the board is read after every batch. Steady-state figures, for kernels
 * that hold the GPU at its power limit: their clock depends on the power
 * each draws, which interleaved timing (bench_time_rounds) averages out. */
bench_soak bench_time_soak(bench_call_fn fn, void *arg, int sets, double seconds, cudaStream_t stream,
                           const bench_device_info *info);

/* ------------------------------------------------------------------------ */
/* Small pieces                                                              */

/* Parses "AxBxC" (also "A,B,C") into three sizes >= 1; returns 1 on success. */
int bench_parse_triple(const char *text, int64_t out[3]);

/* A JSON string literal (escaped) / a number (non-finite -> null). */
void bench_json_string(FILE *f, const char *s);
void bench_json_number(FILE *f, double v);

/* The name of a cuBLAS status ("CUBLAS_STATUS_NOT_SUPPORTED"). */
const char *bench_cublas_status_name(int status);

#endif /* BFP8_BENCH_UTIL_H */
