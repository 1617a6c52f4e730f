/*
 * checksum.h - CRC-32 (the zlib / PNG polynomial) and Adler-32, used by the
 * checkpoint and tokenizer files and by the PNG writer.
 */
#ifndef BFP8_TRAIN_CHECKSUM_H
#define BFP8_TRAIN_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

/* Continue a CRC-32: start with crc = 0. */
uint32_t crc32_update(uint32_t crc, const void *data, size_t n);
/* Continue an Adler-32: start with adler = 1. */
uint32_t adler32_update(uint32_t adler, const void *data, size_t n);

#endif /* BFP8_TRAIN_CHECKSUM_H */
