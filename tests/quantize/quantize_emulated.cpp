/*
 * quantize_emulated.cpp - the CUDA quantize tile kernel
 * (src/cuda/quantize_tiles_kernel.cuh) run on CPU threads and compared bit for bit
 * with the CPU reference: the kernel's indexing (tiles, swizzles, the tile
 * walk, ragged edges, the general path, every output mode) tested without a
 * GPU. tests/quantize/test_gpu_quantize.c is the same check on the GPU.
 *
 * The emulation: one fiber per CUDA thread, __syncthreads a barrier over
 * the CTA, __reduce_max_sync one over the warp, CTAs one after another
 * (1 to 3 of them, so each walks several tiles with its one stage).
 * cp.async copies land only when the issuing thread waits for their group,
 * the latest the hardware may deliver them, and their source must lie inside
 * x. Shared memory is garbage at the start of every CTA. The e4m3 convert is
 * formats.h's, which test_gpu_formats.cu proves equal to the hardware's.
 * Built with AddressSanitizer where the compiler has it: any access outside
 * a buffer fails the test.
 *
 *   ctest --test-dir build -R quantize_emulated --output-on-failure
 */
#include <cuda.h>         /* CUtensorMap, a parameter of the kernel (TMA staging, not emulated) */
#include <cuda_runtime.h> /* vector types and the CUDA keywords, as a host compiler sees them */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include <algorithm>
#include <vector>

#include "formats/formats.h"

/* ------------------------------------------------------------------------ */
/* What the kernel uses from CUDA, on the host                               */

#define __launch_bounds__(...)

static uint3 threadIdx, blockIdx;
static dim3 gridDim;

/* The CUDA threads of one CTA are fibers (ucontext) on one OS thread. A
 * barrier hands control round the ring of its members (the CTA, or a warp):
 * when a fiber gets control back at a barrier, every other member has
 * reached it. That needs every member to pass the same barriers, as CUDA
 * does; the barrier counts are compared at the end. */
namespace emu {
constexpr int kThreads = 256;
constexpr size_t kStackBytes = 256 << 10;
ucontext_t main_context, fibers[kThreads];
char *stacks;
int current;
bool finished[kThreads];
long barriers[kThreads];
uint32_t warp_slots[kThreads];
void (*body)(const void *);
const void *body_args;
const uint8_t *x_begin, *x_end; /* where cp.async may read */
long faults;                    /* bad cp.async sources, copies left pending, uneven barriers */

struct copy16 {
    void *dst;
    const void *src;
};
std::vector<std::vector<copy16>> groups[kThreads]; /* committed, oldest first */
std::vector<copy16> open_group[kThreads];

/* Give control to the next unfinished member of the ring [first, first + size). */
void pass_on(int first, int size) {
    const int self = current;
    for (int k = 1; k <= size; ++k) {
        const int next = first + (self - first + k) % size;
        if (next == self) return;
        if (finished[next]) continue;
        current = next;
        threadIdx.x = (unsigned)next;
        swapcontext(&fibers[self], &fibers[next]);
        return; /* resumed by the member before us: current and threadIdx are ours again */
    }
}

void fiber_main() {
    body(body_args);
    const int self = current;
    finished[self] = true;
    for (int k = 1; k < kThreads; ++k) {
        const int next = (self + k) % kThreads;
        if (!finished[next]) {
            current = next;
            threadIdx.x = (unsigned)next;
            setcontext(&fibers[next]);
        }
    }
    setcontext(&main_context);
}
} /* namespace emu */

static inline void __syncthreads() {
    ++emu::barriers[emu::current];
    emu::pass_on(0, emu::kThreads);
}

static inline uint32_t __reduce_max_sync(unsigned, uint32_t v) {
    const int t = emu::current, w = t / 32;
    emu::warp_slots[t] = v;
    emu::pass_on(w * 32, 32);
    uint32_t m = 0;
    for (int i = 0; i < 32; ++i) m = std::max(m, emu::warp_slots[w * 32 + i]);
    emu::pass_on(w * 32, 32); /* nobody overwrites a slot before all have read */
    return m;
}

static inline uint32_t __vmaxu2(uint32_t a, uint32_t b) {
    return std::max(a & 0xffffu, b & 0xffffu) | std::max(a >> 16, b >> 16) << 16;
}
static inline float __uint_as_float(uint32_t u) { return bfp8_float_of(u); }
static inline uint32_t __float_as_uint(float f) { return bfp8_bits_of(f); }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
template <typename T> static inline T min(T a, T b) { return a < b ? a : b; }
template <typename T> static inline T max(T a, T b) { return a > b ? a : b; }

static inline void cp_async_16(void *dst, const void *src) {
    const uint8_t *s = static_cast<const uint8_t *>(src);
    if (s < emu::x_begin || s + 16 > emu::x_end || (uintptr_t)s % 16 || (uintptr_t)dst % 16) {
        ++emu::faults;
        return;
    }
    emu::open_group[emu::current].push_back({dst, src});
}
static inline void cp_async_commit() {
    emu::groups[emu::current].push_back(std::move(emu::open_group[emu::current]));
    emu::open_group[emu::current].clear();
}
template <int kPending> static inline void cp_async_wait() {
    std::vector<std::vector<emu::copy16>> &g = emu::groups[emu::current];
    while ((int)g.size() > kPending) {
        for (const emu::copy16 &c : g.front()) memcpy(c.dst, c.src, 16);
        g.erase(g.begin());
    }
}
/* Aligned bf16 tiles are staged by the TMA unit, which this emulation does
 * not model: that path is never run here, and these only let it compile. */
[[noreturn]] static void no_tma() {
    fprintf(stderr, "quantize_emulated: TMA staging cannot be emulated\n");
    abort();
}
static inline void mbar_init(uint64_t *, uint32_t) { no_tma(); }
static inline void fence_mbar_init() { no_tma(); }
static inline void mbar_arrive_expect_tx(uint64_t *, uint32_t) { no_tma(); }
static inline void mbar_wait(uint64_t *, uint32_t) { no_tma(); }
static inline void tma_load_2d(void *, const CUtensorMap *, uint64_t *, int, int) { no_tma(); }
static inline void fence_proxy_async_shared() { no_tma(); }
static inline void tma_prefetch_descriptor(const CUtensorMap *) { no_tma(); }
/* a prefetch reads nothing, but its address must lie in x: touched here, under ASan */
static inline void prefetch_l2(const void *p) { (void)*static_cast<const volatile uint8_t *>(p); }
static inline void griddep_wait() {}
static inline void griddep_launch_dependents() {}
static inline void st_global_16_evict_last(uint8_t *dst, uint4 v) { *reinterpret_cast<uint4 *>(dst) = v; }

static inline uint32_t cvt_e4m3x2(float lo, float hi) {
    return bfp8_encode_e4m3(lo) | (uint32_t)bfp8_encode_e4m3(hi) << 8;
}

#define BFP8_QUANT_EMULATION 1
#include "cuda/quantize_tiles_kernel.cuh"

namespace bfp8_quant {
constexpr int kMaxSmem = std::max(kernel_shape<float>::kSmemBytes, kernel_shape<uint16_t>::kSmemBytes);
alignas(128) uint8_t smem[kMaxSmem];
}

extern "C" {
#include "quantize_cases.h"
#include "test_util.h"
}

using namespace bfp8_quant;

/* ------------------------------------------------------------------------ */
/* Launch                                                                    */

template <typename In, bool kBlock, bool kQ, bool kT, bool kAligned>
static void kernel_body(const void *args) {
    static const CUtensorMap no_map = {};
    quantize_tiles_kernel<In, kBlock, kQ, kT, kAligned>(*static_cast<const tile_args *>(args), no_map);
}

template <typename In, bool kBlock, bool kQ, bool kT, bool kAligned>
static void emulate(const tile_args &a, int grid) {
    if (!emu::stacks) emu::stacks = static_cast<char *>(test_malloc(emu::kThreads * emu::kStackBytes));
    emu::body = kernel_body<In, kBlock, kQ, kT, kAligned>;
    static tile_args warmed; /* every CTA warms L2 with its first tile (the prefetch addresses are checked) */
    warmed = a;
    warmed.warm_ctas = grid;
    emu::body_args = &warmed;
    gridDim = dim3((unsigned)grid, 1, 1);
    for (int b = 0; b < grid; ++b) {
        memset(smem, 0xcd, sizeof smem);
        blockIdx = make_uint3((unsigned)b, 0, 0);
        for (int t = 0; t < emu::kThreads; ++t) {
            emu::finished[t] = false;
            emu::barriers[t] = 0;
            emu::groups[t].clear();
            emu::open_group[t].clear();
            getcontext(&emu::fibers[t]);
            emu::fibers[t].uc_stack.ss_sp = emu::stacks + t * emu::kStackBytes;
            emu::fibers[t].uc_stack.ss_size = emu::kStackBytes;
            emu::fibers[t].uc_link = NULL;
            makecontext(&emu::fibers[t], emu::fiber_main, 0);
        }
        emu::current = 0;
        threadIdx = make_uint3(0, 0, 0);
        swapcontext(&emu::main_context, &emu::fibers[0]);
        for (int t = 0; t < emu::kThreads; ++t) {
            if (!emu::groups[t].empty() || !emu::open_group[t].empty()) ++emu::faults;
            if (emu::barriers[t] != emu::barriers[0]) ++emu::faults;
        }
    }
}

enum mode { MODE_DUAL, MODE_ROWS, MODE_COLS, MODE_BLOCK, MODE_BLOCK_T, MODE_COUNT };
static const char *const mode_names[MODE_COUNT] = {"1x128 dual", "1x128 rows", "1x128 cols",
                                                   "128x128", "128x128+T"};

template <typename In, bool kAligned>
static void emulate_mode(int mode, const tile_args &a, int grid) {
    switch (mode) {
    case MODE_DUAL: emulate<In, false, true, true, kAligned>(a, grid); break;
    case MODE_ROWS: emulate<In, false, true, false, kAligned>(a, grid); break;
    case MODE_COLS: emulate<In, false, false, true, kAligned>(a, grid); break;
    case MODE_BLOCK: emulate<In, true, true, false, kAligned>(a, grid); break;
    default: emulate<In, true, true, true, kAligned>(a, grid); break;
    }
}

/* ------------------------------------------------------------------------ */

struct reference {
    bfp8_qmatrix rows, cols, block, block_t;
    uint32_t flag;
};

static void alloc_q(bfp8_qmatrix *q, int64_t rows, int64_t cols, bfp8_granularity g) {
    size_t db, sb;
    if (bfp8_qmatrix_layout(q, rows, cols, g, &db, &sb) != BFP8_OK) test_fatal("%s", bfp8_last_error());
    q->data = (uint8_t *)test_malloc(db);
    q->scales = (float *)test_malloc(sb);
}

static void make_reference(bfp8_context *cpu, const bfp8_matrix *x, int pow2, reference *ref) {
    alloc_q(&ref->rows, x->rows, x->cols, BFP8_GRAN_1X128);
    alloc_q(&ref->cols, x->cols, x->rows, BFP8_GRAN_1X128);
    alloc_q(&ref->block, x->rows, x->cols, BFP8_GRAN_128X128);
    alloc_q(&ref->block_t, x->cols, x->rows, BFP8_GRAN_128X128);
    ref->flag = 0;
    bfp8_quantize_options o = {pow2, &ref->flag};
    CHECK_OK(bfp8_quantize_1x128(cpu, x, &ref->rows, &ref->cols, &o));
    CHECK_OK(bfp8_quantize_128x128(cpu, x, &ref->block, &ref->block_t, &o));
}

static void free_reference(reference *ref) {
    for (bfp8_qmatrix *q : {&ref->rows, &ref->cols, &ref->block, &ref->block_t}) {
        free(q->data);
        free(q->scales);
    }
}

static int64_t cases_run = 0;

static void run_case(const void *dense, bfp8_dtype dtype, int64_t rows, int64_t cols, int pow2,
                     int mode, qlayout layout, const reference *ref, int grid_cap) {
    char what[160];
    snprintf(what, sizeof what, "%s %lldx%lld %s pow2=%d %s grid %d", bfp8_dtype_name(dtype), (long long)rows,
             (long long)cols, mode_names[mode], pow2, qlayout_name(layout), grid_cap);
    ximage xi;
    ximage_init(&xi, dense, dtype, rows, cols, layout);
    const bool block = mode == MODE_BLOCK || mode == MODE_BLOCK_T;
    const bfp8_granularity g = block ? BFP8_GRAN_128X128 : BFP8_GRAN_1X128;
    const bool want_q = mode != MODE_COLS, want_t = mode == MODE_DUAL || mode == MODE_COLS ||
                                                    mode == MODE_BLOCK_T;
    qimage q, t;
    qimage_init(&q, rows, cols, g, layout, 0xab);
    qimage_init(&t, cols, rows, g, layout, 0xab);
    uint32_t flag = 0;
    const bfp8_quantize_options o = {pow2, &flag};
    bool aligned = false;
    const tile_args a = make_tile_args(&xi.x, want_q ? &q.q : NULL, want_t ? &t.q : NULL, &o, &aligned);
    const bool expect_aligned = layout == QLAYOUT_PADDED ||
                                (layout == QLAYOUT_DENSE && cols * (int64_t)bfp8_dtype_size(dtype) % 16 == 0);
    CHECK(aligned == expect_aligned, "%s: fast path %d, expected %d", what, aligned, expect_aligned);
    if (dtype == BFP8_BF16 && aligned) { /* TMA-staged: the GPU tests cover it */
        qimage_free(&q);
        qimage_free(&t);
        ximage_free(&xi);
        return;
    }

    emu::x_begin = xi.img;
    emu::x_end = xi.img + xi.size;
    emu::faults = 0;
    const int grid = (int)std::min<int64_t>(a.num_tiles, grid_cap);
    if (dtype == BFP8_BF16)
        aligned ? emulate_mode<uint16_t, true>(mode, a, grid) : emulate_mode<uint16_t, false>(mode, a, grid);
    else
        aligned ? emulate_mode<float, true>(mode, a, grid) : emulate_mode<float, false>(mode, a, grid);
    CHECK(emu::faults == 0, "%s: %ld bad cp.async sources, copies never waited for or uneven barriers",
          what, emu::faults);

    char sub[200];
    if (want_q) {
        snprintf(sub, sizeof sub, "%s [q]", what);
        const int64_t e = qimage_check(&q, block ? &ref->block : &ref->rows, sub);
        CHECK(e == 0, "%s: %lld differences", sub, (long long)e);
    } else {
        snprintf(sub, sizeof sub, "%s [q untouched]", what);
        const int64_t e = qimage_check_untouched(&q, sub);
        CHECK(e == 0, "%s: %lld bytes written", sub, (long long)e);
    }
    if (want_t) {
        snprintf(sub, sizeof sub, "%s [t]", what);
        const int64_t e = qimage_check(&t, block ? &ref->block_t : &ref->cols, sub);
        CHECK(e == 0, "%s: %lld differences", sub, (long long)e);
    } else {
        snprintf(sub, sizeof sub, "%s [t untouched]", what);
        const int64_t e = qimage_check_untouched(&t, sub);
        CHECK(e == 0, "%s: %lld bytes written", sub, (long long)e);
    }
    CHECK(flag == ref->flag, "%s: non-finite flag %u, reference %u", what, flag, ref->flag);
    qimage_free(&q);
    qimage_free(&t);
    ximage_free(&xi);
    ++cases_run;
}

int main(void) {
    bfp8_context *cpu = NULL;
    if (bfp8_context_create(&cpu, BFP8_BACKEND_CPU, 0) != BFP8_OK) test_fatal("%s", bfp8_last_error());
    static const int64_t shapes[][2] = {{1, 1},     {1, 300},   {300, 1},  {127, 129}, {129, 127},
                                        {128, 128}, {257, 300}, {40, 520}, {390, 64},
                                        {256, 384}};
    int n = 0;
    for (const auto &s : shapes)
        for (bfp8_dtype dtype : {BFP8_BF16, BFP8_F32}) {
            const int64_t rows = s[0], cols = s[1];
            const unsigned fill = TEST_FILL_HARD | (n % 2 ? TEST_FILL_NONFINITE : TEST_FILL_WIDE_RANGE);
            void *dense = quantize_test_data(dtype, rows, cols, fill, 1000 + n);
            const bfp8_matrix x = {dense, dtype, rows, cols, cols};
            const int pow2 = n % 3 == 1;
            reference ref;
            make_reference(cpu, &x, pow2, &ref);
            /* one CTA walking every tile, two taking turns, one CTA per tile (as launched) */
            for (int grid_cap : {1, 2, 1 << 30})
                for (int mode = 0; mode < MODE_COUNT; ++mode)
                    for (int layout = 0; layout < QLAYOUT_COUNT; ++layout)
                        run_case(dense, dtype, rows, cols, pow2, mode, (qlayout)layout, &ref, grid_cap);
            free_reference(&ref);
            free(dense);
            ++n;
        }
    bfp8_context_destroy(cpu);
    printf("%lld emulated kernel runs\n", (long long)cases_run);
    return test_exit_code("quantize_emulated");
}
