/*
 * status.c - status names and the per-thread message of the last failure.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

static _Thread_local char last_error_message[512];

const char *bfp8_status_name(bfp8_status status) {
    switch (status) {
    case BFP8_OK: return "BFP8_OK";
    case BFP8_ERR_NULL_POINTER: return "BFP8_ERR_NULL_POINTER";
    case BFP8_ERR_INVALID_VALUE: return "BFP8_ERR_INVALID_VALUE";
    case BFP8_ERR_SHAPE: return "BFP8_ERR_SHAPE";
    case BFP8_ERR_LAYOUT: return "BFP8_ERR_LAYOUT";
    case BFP8_ERR_ALIGNMENT: return "BFP8_ERR_ALIGNMENT";
    case BFP8_ERR_UNSUPPORTED: return "BFP8_ERR_UNSUPPORTED";
    case BFP8_ERR_NO_DEVICE: return "BFP8_ERR_NO_DEVICE";
    case BFP8_ERR_CUDA: return "BFP8_ERR_CUDA";
    case BFP8_ERR_OUT_OF_MEMORY: return "BFP8_ERR_OUT_OF_MEMORY";
    case BFP8_ERR_NONFINITE: return "BFP8_ERR_NONFINITE";
    case BFP8_ERR_IO: return "BFP8_ERR_IO";
    case BFP8_ERR_BAD_POINTER: return "BFP8_ERR_BAD_POINTER";
    }
    return "BFP8_ERR_UNKNOWN";
}

const char *bfp8_last_error(void) { return last_error_message; }

bfp8_status bfp8_fail(bfp8_status status, const char *fmt, ...) {
    /* Format into a scratch buffer first: an argument may be bfp8_last_error()
     * itself (a caller adding context to the cause), and vsnprintf must not
     * write the buffer it is reading. */
    char message[sizeof last_error_message];
    va_list args;
    va_start(args, fmt);
    vsnprintf(message, sizeof message, fmt, args);
    va_end(args);
    memcpy(last_error_message, message, sizeof message);
    return status;
}
