/*
 * rng.h - the trainer's random numbers: splitmix64, one 64-bit state, so a
 * checkpoint stores a generator as one integer and resumes it exactly.
 */
#ifndef BFP8_MODEL_RNG_H
#define BFP8_MODEL_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct rng_state {
    uint64_t state;
} rng_state;

static inline rng_state rng_seeded(uint64_t seed) {
    rng_state r = {seed ^ 0x243f6a8885a308d3ull};
    return r;
}

static inline uint64_t rng_next_u64(rng_state *r) {
    uint64_t z = (r->state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The generator as it is after `draws` more calls of rng_next_u64 (the state
 * only counts), so a stream can be split among threads exactly. */
static inline void rng_skip(rng_state *r, uint64_t draws) { r->state += draws * 0x9e3779b97f4a7c15ull; }

/* Uniform in [0, 1) with 24 random bits. */
static inline float rng_uniform(rng_state *r) { return (float)(rng_next_u64(r) >> 40) * 0x1p-24f; }

/* Uniform integer in [0, n), n >= 1 (the modulo bias is below 2^-40 for the n used here). */
static inline uint64_t rng_below(rng_state *r, uint64_t n) { return rng_next_u64(r) % n; }

/* Standard normal by Box-Muller; uses two draws per value, so the stream
 * depends only on how many values were taken. */
static inline float rng_normal(rng_state *r) {
    const double u1 = ((double)(rng_next_u64(r) >> 11) + 1.0) * 0x1p-53; /* (0, 1] */
    const double u2 = (double)(rng_next_u64(r) >> 11) * 0x1p-53;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

#endif /* BFP8_MODEL_RNG_H */
