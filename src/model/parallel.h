/*
 * parallel.h - when a loop is worth an OpenMP team. Waking threads costs
 * microseconds, and on a busy machine much more: small tensors (sampling one
 * token, the gradient checks) run on the calling thread.
 */
#ifndef BFP8_MODEL_PARALLEL_H
#define BFP8_MODEL_PARALLEL_H

/* Scalar operations below which a loop stays on one thread. */
#define PARALLEL_MIN_WORK 32768

#endif /* BFP8_MODEL_PARALLEL_H */
