/*
 * png_writer.c - PNG container and a small deflate encoder.
 */
#include "train/png_writer.h"

#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "train/checksum.h"
#include "train/file_io.h"

/* ------------------------------------------------------------------------ */
/* A growable byte buffer and an LSB-first bit writer (deflate's bit order) */

typedef struct byte_buffer {
    uint8_t *data;
    size_t size, capacity;
    int failed;
    uint64_t bits; /* pending bits, LSB first */
    int bit_count;
} byte_buffer;

static void buffer_reserve(byte_buffer *b, size_t extra) {
    if (b->failed || b->size + extra <= b->capacity) return;
    size_t cap = b->capacity ? b->capacity : 4096;
    while (cap < b->size + extra) cap *= 2;
    uint8_t *p = realloc(b->data, cap);
    if (!p) {
        b->failed = 1;
        return;
    }
    b->data = p;
    b->capacity = cap;
}

static void put_bytes(byte_buffer *b, const void *data, size_t n) {
    if (n == 0) return;
    buffer_reserve(b, n);
    if (b->failed) return;
    memcpy(b->data + b->size, data, n);
    b->size += n;
}

static void put_byte(byte_buffer *b, uint8_t v) { put_bytes(b, &v, 1); }

static void put_be32(byte_buffer *b, uint32_t v) {
    const uint8_t p[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
    put_bytes(b, p, 4);
}

static void put_bits(byte_buffer *b, uint32_t value, int count) {
    b->bits |= (uint64_t)value << b->bit_count;
    b->bit_count += count;
    while (b->bit_count >= 8) {
        put_byte(b, (uint8_t)b->bits);
        b->bits >>= 8;
        b->bit_count -= 8;
    }
}

static void flush_bits(byte_buffer *b) {
    if (b->bit_count > 0) put_byte(b, (uint8_t)b->bits);
    b->bits = 0;
    b->bit_count = 0;
}

/* Huffman codes go most significant bit first. */
static void put_code(byte_buffer *b, uint32_t code, int length) {
    uint32_t reversed = 0;
    for (int i = 0; i < length; ++i) reversed |= ((code >> i) & 1u) << (length - 1 - i);
    put_bits(b, reversed, length);
}

/* ------------------------------------------------------------------------ */
/* Deflate with the fixed Huffman code (RFC 1951 section 3.2.6) */

static void put_literal_or_length(byte_buffer *b, int symbol) {
    if (symbol < 144) put_code(b, 0x30u + (uint32_t)symbol, 8);
    else if (symbol < 256) put_code(b, 0x190u + (uint32_t)(symbol - 144), 9);
    else if (symbol < 280) put_code(b, (uint32_t)(symbol - 256), 7);
    else put_code(b, 0xc0u + (uint32_t)(symbol - 280), 8);
}

static const uint16_t length_base[29] = {3,  4,  5,  6,  7,  8,  9,  10, 11,  13,  15,  17,  19,  23, 27,
                                         31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
static const uint8_t length_extra[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
                                         2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
static const uint16_t distance_base[30] = {1,    2,    3,    4,    5,    7,     9,     13,    17,  25,
                                           33,   49,   65,   97,   129,  193,   257,   385,   513, 769,
                                           1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};
static const uint8_t distance_extra[30] = {0, 0, 0, 0, 1, 1, 2, 2,  3,  3,  4,  4,  5,  5,  6,
                                           6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};

static void put_match(byte_buffer *b, int length, int distance) {
    int li = 28;
    while (length_base[li] > length) --li;
    put_literal_or_length(b, 257 + li);
    put_bits(b, (uint32_t)(length - length_base[li]), length_extra[li]);
    int di = 29;
    while (distance_base[di] > distance) --di;
    put_code(b, (uint32_t)di, 5);
    put_bits(b, (uint32_t)(distance - distance_base[di]), distance_extra[di]);
}

enum { WINDOW = 32768, MIN_MATCH = 3, MAX_MATCH = 258, HASH_BITS = 15, MAX_CHAIN = 48 };

static uint32_t hash3(const uint8_t *p) {
    return ((uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2]) * 2654435761u >> (32 - HASH_BITS);
}

static int deflate_fixed(byte_buffer *out, const uint8_t *data, size_t n) {
    int32_t *head = malloc(sizeof(int32_t) << HASH_BITS);
    int32_t *prev = malloc(WINDOW * sizeof *prev);
    if (!head || !prev) {
        free(head), free(prev);
        return 0;
    }
    for (size_t i = 0; i < (size_t)1 << HASH_BITS; ++i) head[i] = -1;
    put_bits(out, 1, 1); /* BFINAL: one block */
    put_bits(out, 1, 2); /* BTYPE 01: fixed Huffman */
    size_t pos = 0;
    while (pos < n) {
        int best_len = 0, best_dist = 0;
        if (pos + MIN_MATCH <= n) {
            const uint32_t h = hash3(data + pos);
            int32_t cand = head[h];
            const size_t max_len = n - pos < MAX_MATCH ? n - pos : MAX_MATCH;
            for (int chain = 0; cand >= 0 && chain < MAX_CHAIN && pos - (size_t)cand <= WINDOW; ++chain) {
                size_t len = 0;
                while (len < max_len && data[(size_t)cand + len] == data[pos + len]) ++len;
                if ((int)len > best_len) {
                    best_len = (int)len;
                    best_dist = (int)(pos - (size_t)cand);
                    if (len == max_len) break;
                }
                const int32_t next = prev[cand % WINDOW];
                if (next >= cand) break; /* the slot was reused: the chain ends */
                cand = next;
            }
        }
        const size_t advance = best_len >= MIN_MATCH ? (size_t)best_len : 1;
        if (best_len >= MIN_MATCH) put_match(out, best_len, best_dist);
        else put_literal_or_length(out, data[pos]);
        for (size_t k = 0; k < advance; ++k, ++pos) { /* index every position passed */
            if (pos + MIN_MATCH > n) continue;
            const uint32_t h = hash3(data + pos);
            prev[pos % WINDOW] = head[h];
            head[h] = (int32_t)pos;
        }
    }
    put_literal_or_length(out, 256); /* end of block */
    flush_bits(out);
    free(head), free(prev);
    return !out->failed;
}

static void deflate_stored(byte_buffer *out, const uint8_t *data, size_t n) {
    size_t pos = 0;
    do {
        const size_t len = n - pos < 65535 ? n - pos : 65535;
        put_byte(out, pos + len == n ? 1 : 0); /* BFINAL, BTYPE 00 */
        const uint8_t lens[4] = {(uint8_t)len, (uint8_t)(len >> 8), (uint8_t)~len, (uint8_t)(~len >> 8)};
        put_bytes(out, lens, 4);
        put_bytes(out, data + pos, len);
        pos += len;
    } while (pos < n);
}

/* ------------------------------------------------------------------------ */
/* PNG */

static void put_chunk(byte_buffer *b, const char type[4], const uint8_t *data, size_t n) {
    put_be32(b, (uint32_t)n);
    put_bytes(b, type, 4);
    put_bytes(b, data, n);
    uint32_t crc = crc32_update(0, type, 4);
    crc = crc32_update(crc, data, n);
    put_be32(b, crc);
}

bfp8_status png_encode(const uint8_t *rgb, int width, int height, int compress, uint8_t **png,
                       size_t *size) {
    *png = NULL;
    *size = 0;
    if (width < 1 || height < 1 || width > 16384 || height > 16384)
        return bfp8_fail(BFP8_ERR_INVALID_VALUE, "png: bad size %d x %d", width, height);
    const size_t stride = (size_t)width * 3 + 1;
    uint8_t *raw = malloc(stride * (size_t)height); /* each row: filter type 0, then RGB */
    if (!raw) return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "png: out of memory");
    for (int y = 0; y < height; ++y) {
        raw[(size_t)y * stride] = 0;
        memcpy(raw + (size_t)y * stride + 1, rgb + (size_t)y * width * 3, (size_t)width * 3);
    }
    const size_t raw_size = stride * (size_t)height;
    byte_buffer z = {0};
    put_byte(&z, 0x78); /* zlib: deflate, 32 KiB window */
    put_byte(&z, 0x01); /* no dictionary; (0x7801 % 31 == 0) */
    int ok = 1;
    if (compress) ok = deflate_fixed(&z, raw, raw_size);
    else deflate_stored(&z, raw, raw_size);
    put_be32(&z, adler32_update(1, raw, raw_size));
    free(raw);
    byte_buffer b = {0};
    static const uint8_t signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    put_bytes(&b, signature, 8);
    uint8_t ihdr[13];
    ihdr[0] = (uint8_t)(width >> 24), ihdr[1] = (uint8_t)(width >> 16);
    ihdr[2] = (uint8_t)(width >> 8), ihdr[3] = (uint8_t)width;
    ihdr[4] = (uint8_t)(height >> 24), ihdr[5] = (uint8_t)(height >> 16);
    ihdr[6] = (uint8_t)(height >> 8), ihdr[7] = (uint8_t)height;
    ihdr[8] = 8;  /* bit depth */
    ihdr[9] = 2;  /* colour type: RGB */
    ihdr[10] = 0; /* deflate */
    ihdr[11] = 0; /* adaptive filtering (every row says 0: none) */
    ihdr[12] = 0; /* no interlace */
    put_chunk(&b, "IHDR", ihdr, sizeof ihdr);
    if (!z.failed) put_chunk(&b, "IDAT", z.data, z.size);
    put_chunk(&b, "IEND", NULL, 0);
    const int failed = !ok || z.failed || b.failed;
    free(z.data);
    if (failed) {
        free(b.data);
        return bfp8_fail(BFP8_ERR_OUT_OF_MEMORY, "png: out of memory");
    }
    *png = b.data;
    *size = b.size;
    return BFP8_OK;
}

bfp8_status png_write_file(const char *path, const uint8_t *rgb, int width, int height) {
    uint8_t *png;
    size_t size;
    BFP8_TRY(png_encode(rgb, width, height, 1, &png, &size));
    const bfp8_status st = atomic_file_write_all(path, png, size);
    free(png);
    return st;
}
