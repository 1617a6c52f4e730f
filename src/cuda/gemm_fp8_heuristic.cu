/*
 * gemm_fp8_heuristic.cu - which FP8 GEMM configuration runs a given shape:
 * the tile, the split of the last wave along K, the raster group height and
 * the output path; deterministic, from the shape and how many CTAs of each
 * kernel are resident at once.
 *
 * Environment (for benchmarking and debugging), read once when a CUDA
 * context is created (bfp8_gemm_read_tuning): a GEMM call reads none, and a
 * change takes effect for the contexts created after it.
 *   BFP8_GEMM_CONFIG="bm=192,bn=128"  force a tile (bm 128 unless given) among
 *                                     the candidates (1D1D with f32 outputs
 *                                     through the TMA unit: the narrow bm=64,
 *                                     bn=32 or 64 too, where its tiles fit in
 *                                     one wave); "store=direct": outputs
 *                                     stored from registers, not by TMA;
 *                                     "split=N": the last wave's tiles in N
 *                                     k-slices (1: never split; the default
 *                                     chooses); "gm=G": tiles rasterized in
 *                                     groups of G tile rows; "small=0": never
 *                                     the kernel of few rows / tokens / small
 *                                     outputs (gemm_fp8_small.cu), "small=1":
 *                                     it wherever it can run (1D2D: M <= 16)
 *   BFP8_GEMM_TRACE=1                 print the configuration of each call
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/gemm_fp8_host.h"

namespace {

const char *env_or_null(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : nullptr;
}

/* the number after `key` in `config`, or `absent` */
int option(const char *config, const char *key, int absent) {
    const char *at = strstr(config, key);
    return at ? atoi(at + strlen(key)) : absent;
}

} /* namespace */

void bfp8_gemm_read_tuning(bfp8_gemm_tuning *t) {
    *t = bfp8_gemm_tuning{0, -1, -1, 0, 0, 0, -1, 0};
    t->trace = env_or_null("BFP8_GEMM_TRACE") != nullptr;
    const char *config = env_or_null("BFP8_GEMM_CONFIG");
    if (!config) return;
    t->given = 1;
    t->bm = option(config, "bm=", -1);
    t->bn = option(config, "bn=", -1);
    t->direct_store = strstr(config, "store=direct") != nullptr;
    t->split = option(config, "split=", 0);
    t->group_m = option(config, "gm=", 0);
    const char *small = strstr(config, "small=");
    t->small = small ? (small[6] == '1' ? 1 : 0) : -1;
}

namespace bfp8_gemm {

namespace {

/* The cost of one k-slice's exchange (its partial tile stored, or one
 * partial read and added by slice 0), in k-blocks of main-loop time: a
 * 192x128 fp32 partial is 96 KiB against the 40 KiB of operands that one
 * k-block loads. */
constexpr double SPLIT_COST_K_BLOCKS = 2.5;
constexpr int SPLIT_MAX = 16;

/* The scale operand of 1D1D 256 x 112 tiles is made by a kernel of its own
 * before the GEMM (~2 us from launch to end on an H200): in the time of
 * k-blocks of a 128 x 128 tile (~0.37 us each at the tensor cores' speed).
 * It decides only where the GEMM has few k-blocks (few tokens). */
constexpr double SCALE_OPERAND_COST = 5.0;

} /* namespace */

const char *const TMA_OUT_NAMES[4] = {"registers", "tma-bf16", "tma-f32", "tma-f32-add"};

/* The tiles of a partial last wave are split into the number of k-slices (at
 * most slots / tail of them, so they all run at once) that minimises the
 * modelled time of that wave, where splitting pays. */
SplitPlan plan_split(int64_t tiles, int slots, int num_k_blocks, int requested) {
    const int64_t tail = tiles % slots;
    SplitPlan plan = {tiles, 1, tail ? 1.0 : 0.0};
    if (tail == 0 || requested == 1) return plan;
    int most = (int)(slots / tail);
    if (most > SPLIT_MAX) most = SPLIT_MAX;
    if (most > num_k_blocks) most = num_k_blocks;
    double best = num_k_blocks;
    for (int s = 2; s <= most; ++s) {
        const double t = (double)bfp8_ceil_div(num_k_blocks, s) + SPLIT_COST_K_BLOCKS * s;
        if (requested >= 2 ? s == requested || (s == most && requested > most) : t < best) {
            best = t;
            plan.split = s;
        }
    }
    if (plan.split > 1) {
        plan.whole = tiles - tail;
        plan.tail_waves = best / num_k_blocks;
    }
    return plan;
}

/* The estimated time of a candidate, in k-blocks of a 128 x 128 tile: waves
 * of resident CTAs (the last one split where that pays) times the cost of
 * one tile (its area over its speed) over all k-blocks, plus the scale
 * operand's kernel where the candidate needs it. Clusters of 2 CTAs sharing A or B by multicast, and a kernel with
 * two accumulators in flight, measured slower than the single-CTA tile of
 * the same shape and cannot split their last wave: this model never chose
 * them, so they are not built. */
Config choose_config(const bfp8_gemm_tuning &tuning, bool b_1x128, int m, int n, int num_k_blocks,
                     const int *slots) {
    const Candidate *list = b_1x128 ? CANDIDATES_1D1D : CANDIDATES_1D2D;
    const int count = b_1x128 ? NUM_CANDIDATES_1D1D : NUM_CANDIDATES_1D2D;
    Config best = {list[0].bm, list[0].bn, 0, 0, 0};
    double best_time = INFINITY;
    for (int i = 0; i < count; ++i) {
        const Candidate &c = list[i];
        if (slots[i] < 1) continue;
        const int64_t tiles = bfp8_ceil_div(m, c.bm) * bfp8_ceil_div(n, c.bn);
        const SplitPlan plan = plan_split(tiles, slots[i], num_k_blocks, can_split(c.bn, b_1x128) ? 0 : 1);
        const double waves = (double)(plan.whole / slots[i]) + plan.tail_waves;
        double time = waves * num_k_blocks * (c.bm * c.bn / (128.0 * 128.0)) / c.speed;
        if (b_1x128 && c.bm == 256) time += SCALE_OPERAND_COST;
        if (time < best_time * (1.0 - 1e-9)) {
            best_time = time;
            best.bm = c.bm;
            best.bn = c.bn;
        }
    }
    if (tuning.given) {
        if (tuning.bm >= 0 || tuning.bn >= 0) { /* a tile; else the chosen one */
            const int f_bm = tuning.bm >= 0 ? tuning.bm : 128, f_bn = tuning.bn >= 0 ? tuning.bn : best.bn;
            for (int i = 0; i < count; ++i)
                if (list[i].bm == f_bm && list[i].bn == f_bn && slots[i] > 0) {
                    best.bm = f_bm;
                    best.bn = f_bn;
                }
        }
        best.direct_store = tuning.direct_store;
        best.split = tuning.split;
        best.group_m = tuning.group_m;
    }
    return best;
}

/* The model of choose_small_output_1d1d: the time of one wave of units, in
 * microseconds, beyond what every call costs: the slowest CTA's k-blocks,
 * its output tile added into D by the TMA unit, and a split's exchange (the
 * other slices' partial tiles stored, then read and summed by slice 0, a few
 * at a time for narrow tiles). From the H200 with CUDA graphs of calls, each
 * tile forced over 128 to 32768 tokens with splits of 1 to 16
 * (bench_gemm_grid, BFP8_GEMM_CONFIG=small=0,bm=..,bn=..,split=..): a CTA
 * takes the same time per k-block however many stages it has in flight and
 * however many other CTAs run (0.28 / 0.35 / 0.50 us for 64 x 32 / 64 x 64 /
 * 128 x 128), and a narrow tile's SM runs two CTAs at 1.2 / 1.33 times that
 * each, so the narrow tiles split and spread over twice the CTAs. */
struct TileCost {
    int bm, bn;
    double k_block_us, exchange_slice_us, shared_sm_slowdown;
};
constexpr TileCost TILE_COSTS[] = {{128, 128, 0.50, 0.75, 1.0}, {64, 64, 0.35, 0.35, 1.33}, {64, 32, 0.28, 0.2, 1.2}};
constexpr int NUM_TILE_COSTS = (int)(sizeof TILE_COSTS / sizeof TILE_COSTS[0]);
constexpr double OUTPUT_BYTES_PER_US = 30e3, EXCHANGE_WAIT_US = 0.5;

static double one_wave_us(const TileCost &t, int64_t tiles, int num_k_blocks, int split, int num_sms) {
    const bool shared_sm = tiles * split > num_sms;
    double us = (double)bfp8_ceil_div(num_k_blocks, split) * t.k_block_us * (shared_sm ? t.shared_sm_slowdown : 1.0);
    us += 4.0 * t.bm * t.bn / OUTPUT_BYTES_PER_US;
    if (split > 1) us += EXCHANGE_WAIT_US + (split - 1) * t.exchange_slice_us;
    return us;
}

/* The split (1: none) with the least modelled time for `tiles` tiles on
 * `slots` resident CTAs, all in one wave; its time in *us. */
static int best_split(const TileCost &t, int64_t tiles, int slots, int num_k_blocks, int num_sms, double *us) {
    int best = 1;
    *us = one_wave_us(t, tiles, num_k_blocks, 1, num_sms);
    for (int s = 2; s <= SPLIT_MAX && s <= num_k_blocks && tiles * s <= slots; ++s) {
        const double u = one_wave_us(t, tiles, num_k_blocks, s, num_sms);
        if (u < *us) {
            *us = u;
            best = s;
        }
    }
    return best;
}

/* The cost of tile bm x bn (one of TILE_COSTS). */
static const TileCost &tile_cost(int bm, int bn) {
    for (const TileCost &t : TILE_COSTS)
        if (t.bm == bm && t.bn == bn) return t;
    return TILE_COSTS[0];
}

bool choose_small_output_1d1d(const bfp8_gemm_tuning &tuning, int m, int n, int num_k_blocks, int slots_128,
                              const int *narrow_slots, Config *c) {
    const int num_sms = slots_128; /* one 128 x 128 CTA an SM */
    auto slots_of = [&](const TileCost &t) {
        for (int i = 0; i < NUM_NARROW_1D1D; ++i)
            if (NARROW_1D1D[i].bm == t.bm && NARROW_1D1D[i].bn == t.bn) return narrow_slots[i];
        return slots_128;
    };
    if (tuning.given && tuning.bm >= 0) { /* a forced narrow tile (others: choose_config) */
        if (tuning.bm != 64) return false;
        const TileCost &t = tile_cost(64, tuning.bn == 32 ? 32 : 64);
        const int64_t tiles = bfp8_ceil_div(m, t.bm) * bfp8_ceil_div(n, t.bn);
        /* (narrow tiles run one wave of units, split or not, never more) */
        if (slots_of(t) < 1 || tiles > slots_of(t)) return false;
        *c = Config{t.bm, t.bn, 0, tuning.split, tuning.group_m};
        double us;
        if (c->split == 0) c->split = best_split(t, tiles, slots_of(t), num_k_blocks, num_sms, &us);
        return true;
    }
    if (tuning.given && (tuning.bn >= 0 || tuning.split > 0)) return false;
    if (bfp8_ceil_div(m, 128) * bfp8_ceil_div(n, 128) >= slots_128) return false;
    double best_us = INFINITY;
    int best = -1, split = 1;
    for (int i = 0; i < NUM_TILE_COSTS; ++i) {
        const TileCost &t = TILE_COSTS[i];
        const int64_t tiles = bfp8_ceil_div(m, t.bm) * bfp8_ceil_div(n, t.bn);
        /* (past one wave, narrow tiles measured slower than 128 x 128: their
         * many small adds into D) */
        if (slots_of(t) < 1 || tiles > slots_of(t)) continue;
        double us;
        const int s = best_split(t, tiles, slots_of(t), num_k_blocks, num_sms, &us);
        if (us < best_us) {
            best_us = us;
            best = i;
            split = s;
        }
    }
    if (best < 0) return false;
    *c = Config{TILE_COSTS[best].bm, TILE_COSTS[best].bn, 0, split, tuning.given ? tuning.group_m : 0};
    return true;
}

Config grouped_config(const bfp8_gemm_tuning &tuning) {
    Config c = {128, 128, 0, 1, 0};
    c.group_m = tuning.group_m;
    c.direct_store = tuning.direct_store;
    return c;
}

int64_t grouped_m_tiles(const int64_t *offsets, int num_groups, int bm) {
    int64_t tiles = 0;
    for (int g = 0; g < num_groups; ++g) tiles += bfp8_ceil_div(offsets[g + 1] - offsets[g], bm);
    return tiles;
}

/* (as choose_config; 192-row tiles end past a group whose rows are not a
 * multiple of 192: the rows computed there are not stored, and count) */
void grouped_1d2d_tile(const bfp8_gemm_tuning &tuning, const int64_t *offsets, int num_groups, int64_t n,
                       bool rows_128, const int *slots, Config *c) {
    double best = INFINITY;
    for (int i = 0; i < NUM_CANDIDATES_1D2D; ++i) {
        const Candidate &o = CANDIDATES_1D2D[i];
        if (slots[i] < 1 || (rows_128 && o.bm != 128)) continue;
        const int64_t tiles = grouped_m_tiles(offsets, num_groups, o.bm) * bfp8_ceil_div(n, o.bn);
        const double time = (double)bfp8_ceil_div(tiles, slots[i]) * o.bm * o.bn / o.speed;
        if (time < best) {
            best = time;
            c->bm = o.bm;
            c->bn = o.bn;
        }
    }
    if (tuning.bm == 192 && !rows_128) c->bm = 192, c->bn = 128;
    else if (tuning.bn == 192) c->bm = 128, c->bn = 192;
    else if (tuning.bn == 128) c->bm = 128, c->bn = 128;
}

/* A 1D2D GEMM walks groups of slots / 6 tile rows (22 with 132 resident
 * CTAs: each wave of tiles is 6 whole columns of a group), or all rows,
 * column by column, when there are fewer. On the H200 that beat every other
 * height tried (4 to 86 tile rows): against 16, 1.05-1.08x with M = 4096
 * (4096x7168x16384 and three more long-K shapes), 1.0-1.025x on the
 * 16384-row TARGETS shapes and 1.02x on 8192^3. The wgrad GEMM keeps 16:
 * all rows and 22 rows measured the same there, within the noise. */
int default_group_m(bool b_1x128, int num_tile_rows, int slots) {
    if (b_1x128) return 16;
    return max(1, min(num_tile_rows, slots / 6));
}

/* The small kernel (gemm_fp8_small.cu): which shapes it runs, from the H200
 * grid with the small kernel on and off in one run (CUDA graphs of calls,
 * bench/results/2026-12-03_gemm_small_kernel_h200.txt; ratios over cuBLASLt,
 * * over cuBLAS bf16 where cuBLASLt refuses).
 *
 * 1D2D, M <= 16: the tensor-core kernel's one row of tiles (at least 128
 * rows, 1/8 of them used) streams B on few SMs. The small kernel is ahead
 * for M = 1 at every K (N 256 / 1024, K 256: 0.86* / 1.13* against 0.78* /
 * 1.03*; K 1024: 1.27* / 2.57* against 0.69* / 1.40*), for M = 16 with K =
 * 1024 (1.65 / 1.66) and for M <= 8 with K = 7168 (N 256 / 1024 / 7168:
 * 3.47 / 1.78 / 1.00); behind it for M = 16 with K = 256 (0.84). */
bool small_1d2d_applies(const bfp8_context *ctx, int m, int64_t k) {
    if (m > SMALL_1D2D_MAX_M) return false;
    const int forced = tuning_of(ctx).small;
    if (forced != -1) return forced == 1;
    return m == 1 || k >= 1024;
}

/* 1D1D, an n x k output over `tokens`: the small kernel wins only on the
 * smallest outputs over 512 to 4096 tokens (256 x 256 over 512 / 2048 /
 * 4096 tokens: 0.93 / 0.90 / 0.86, against 0.46 / 0.42 / 0.54 for 128 x 128
 * tiles; the narrow tiles' model puts them at about 0.8 / 0.9 / 1.0), not
 * over more: over 8192 tokens it runs at 0.59 against 1.01 for the narrow
 * tiles' choice, 64 x 32 split 8 ways (H200, CUDA graphs;
 * bench/results/2026-12-04_gemm_grid_narrow_tiles_h200.txt, and for the
 * tensor-core kernel over 512 tokens the small-kernel file above); over 1 to
 * 64 tokens the tensor-core kernel is ahead of it on every output of the
 * grid (e.g. 64 tokens, 1024 x 1024: 0.76 against 0.34 with 128 x 128
 * tiles), and so it is for wider outputs over 512 and 4096 tokens (4096
 * tokens, 256 x 1024: 0.56 against 0.28). */
constexpr int64_t SMALL_1D1D_MAX_OUTPUTS = 256 * 256;
constexpr int SMALL_1D1D_MIN_TOKENS = 512, SMALL_1D1D_MAX_TOKENS = 4096;
bool small_1d1d_applies(const bfp8_context *ctx, int n, int k, int tokens) {
    const int forced = tuning_of(ctx).small;
    if (forced != -1) return forced == 1;
    return (int64_t)n * k <= SMALL_1D1D_MAX_OUTPUTS && tokens >= SMALL_1D1D_MIN_TOKENS &&
           tokens <= SMALL_1D1D_MAX_TOKENS;
}

/* Through shared memory and the TMA unit where it can address D (16-byte
 * aligned base and rows): 1D2D's bf16 and f32; 1D1D's f32, stored, or added
 * into D when D is the C accumulated (gradient accumulation). Otherwise from
 * registers. */
int output_path(bool b_1x128, const Config &c, const Params &p) {
    const bool tma_ok = !c.direct_store && (uintptr_t)p.d % 16 == 0;
    if (!b_1x128) {
        if (tma_ok && p.output_kind == OUTPUT_BF16 && p.ldd % 8 == 0) return TMA_BF16;
        if (tma_ok && p.output_kind == OUTPUT_F32 && p.ldd % 4 == 0) return TMA_F32;
    } else {
        if (tma_ok && p.output_kind == OUTPUT_F32 && p.ldd % 4 == 0) return TMA_F32;
        if (tma_ok && p.output_kind == OUTPUT_F32_ACCUMULATE && p.c == p.d && p.ldc == p.ldd && p.ldd % 4 == 0)
            return TMA_F32_ADD;
    }
    return TMA_NONE;
}

} /* namespace bfp8_gemm */
