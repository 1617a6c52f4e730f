/*
 * moe_reference.h - an fp64 mixture-of-experts layer (forward and analytic
 * backward) with bfp8_moe's semantics, for the layer's tests: the same
 * routing (scores, biased top-k, weights, capacity in token order), SwiGLU
 * experts, an optional shared expert, the load-balancing loss.
 */
#ifndef BFP8_TEST_MOE_REFERENCE_H
#define BFP8_TEST_MOE_REFERENCE_H

#include <stdint.h>

#include "blockfp8.h"

/* The parameters and their gradients, fp64, in bfp8_moe_weights' layout. */
typedef struct ref_params {
    double *x; /* T x H */
    double *router, *w13, *w2, *shared_w13, *shared_w2;
} ref_params;

/* round_router: the router's x and weights rounded to bf16 as the layer's
 * bf16 GEMM takes them (gradients pass through the rounding unchanged). */
typedef struct ref_config {
    bfp8_moe_config cfg;
    int round_router;
} ref_config;

/* y (T x H) and the aux loss value; with dy, the gradients of
 * L = sum dy . y + aux into g (every pointer of g set, stored). bias: E or NULL. */
void ref_moe(const ref_config *rc, int64_t T, const ref_params *p, const double *bias, const double *dy, double *y,
             double *aux_loss, ref_params *g);

/* Allocate (zeroed) the arrays of a ref_params for the config. */
void ref_params_alloc(const bfp8_moe_config *cfg, int64_t T, ref_params *p);
void ref_params_free(ref_params *p);
/* Number of values of each array (x, router, w13, w2, shared_w13, shared_w2). */
void ref_params_sizes(const bfp8_moe_config *cfg, int64_t T, int64_t sizes[6]);
double **ref_params_array(ref_params *p, int i);

#endif
