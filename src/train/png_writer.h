/*
 * png_writer.h - write an 8-bit RGB image as a PNG file, dependency-free:
 * zlib stream of fixed-Huffman deflate blocks with a greedy LZ77 matcher
 * (plots are mostly flat colour, so this shrinks them ~50x), or stored
 * blocks when compress is 0. Chunk CRC-32s and the zlib Adler-32 as the
 * PNG and zlib specifications define them.
 */
#ifndef BFP8_TRAIN_PNG_WRITER_H
#define BFP8_TRAIN_PNG_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "blockfp8.h"

/* rgb: height rows of width * 3 bytes. The encoded file goes to *png (malloc'ed). */
bfp8_status png_encode(const uint8_t *rgb, int width, int height, int compress, uint8_t **png,
                       size_t *size);

/* png_encode, then an atomic write to path. */
bfp8_status png_write_file(const char *path, const uint8_t *rgb, int width, int height);

#endif /* BFP8_TRAIN_PNG_WRITER_H */
