/*
 * model_ops_ctx.h - what the model's operations run with: the first argument
 * of every op (model_ops.h), the CPU references included, so that the CPU
 * and CUDA versions of an op keep one signature.
 *
 * One object per model (or per test or benchmark), nothing process-global:
 * two models, on one thread or on several, never see each other's stream,
 * handles, options or failures. The CPU references read nothing from it (a
 * NULL one is fine for them); the CUDA versions take their stream, cuBLAS
 * handle, scratch buffers and options from it and keep their first failure
 * in it. An object is used by one thread at a time.
 */
#ifndef BFP8_MODEL_MODEL_OPS_CTX_H
#define BFP8_MODEL_MODEL_OPS_CTX_H

struct model_cuda_state; /* cuBLAS handle and scratch buffers (src/model/cuda/model_cuda_common.cuh) */
struct model_profile;    /* the step profile (model_profile.h) */

typedef struct model_ops_ctx {
    int device;          /* 1: a CUDA context's (the CUDA ops run with it) */
    void *stream;        /* CUDA: the stream every op enqueues on (the bfp8 context's) */
    int tf32;            /* CUDA: 1: the fp32 products (matmul_f32, attention) on the tensor cores in TF32
                          * (inputs rounded to 10 mantissa bits, fp32 accumulation); 0: exact fp32 */
    int flash_attention; /* CUDA: 1: attention with head_dim 64 or 128 runs flash style (flash_attention.cu) */
    struct model_cuda_state *cuda; /* CUDA: made on first use, freed by model_ops_ctx_release */
    struct model_profile *profile; /* time by kernel class, NULL when off (model_profile.h) */
    int failed;                    /* a failure is kept: the first one since model_ops_status */
    char message[384];
} model_ops_ctx;

#endif /* BFP8_MODEL_MODEL_OPS_CTX_H */
