/*
 * test_png.c - the PNG writer, read back by an independent decoder written
 * here: signature, IHDR, every chunk's CRC-32 (bitwise, not the writer's
 * table), the zlib header and Adler-32, and an inflate of stored and
 * fixed-Huffman blocks that must give back the exact pixels. Images: 1x1,
 * ragged sizes, flat colour (must compress well), noise (must still round
 * trip), a plot-like picture; bad sizes are refused.
 *
 *   ctest --test-dir build -R train_png
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "train/file_io.h"
#include "train/png_writer.h"

/* ------------------------------------------------------------------------ */
/* Independent checksums */

static uint32_t crc32_bitwise(const uint8_t *p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; ++i) {
        c ^= p[i];
        for (int k = 0; k < 8; ++k) c = c & 1 ? (c >> 1) ^ 0xedb88320u : c >> 1;
    }
    return ~c;
}

static uint32_t adler32_plain(const uint8_t *p, size_t n) {
    uint32_t a = 1, b = 0;
    for (size_t i = 0; i < n; ++i) {
        a = (a + p[i]) % 65521u;
        b = (b + a) % 65521u;
    }
    return b << 16 | a;
}

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* ------------------------------------------------------------------------ */
/* A small inflate: stored and fixed-Huffman blocks (what the writer emits) */

typedef struct bit_reader {
    const uint8_t *p;
    size_t n, pos; /* pos in bits */
    int bad;
} bit_reader;

static uint32_t bits(bit_reader *r, int count) { /* LSB first */
    uint32_t v = 0;
    for (int i = 0; i < count; ++i) {
        if (r->pos >= 8 * r->n) {
            r->bad = 1;
            return 0;
        }
        v |= (uint32_t)(r->p[r->pos >> 3] >> (r->pos & 7) & 1) << i;
        ++r->pos;
    }
    return v;
}

static int fixed_literal(bit_reader *r) { /* Huffman codes are read MSB first */
    uint32_t code = 0;
    for (int len = 1; len <= 9 && !r->bad; ++len) {
        code = code << 1 | bits(r, 1);
        if (len == 7 && code <= 23) return 256 + (int)code;
        if (len == 8 && code >= 48 && code <= 191) return (int)code - 48;
        if (len == 8 && code >= 192 && code <= 199) return 280 + (int)code - 192;
        if (len == 9 && code >= 400) return 144 + (int)code - 400;
    }
    r->bad = 1;
    return -1;
}

/* Returns the inflated size, or (size_t)-1 on a malformed stream. */
static size_t inflate_simple(const uint8_t *src, size_t n, uint8_t *out, size_t cap) {
    static const int len_base[29] = {3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27,
                                     31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
    static const int len_extra[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
                                      2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
    static const int dist_base[30] = {1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129,
                                      193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097,
                                      6145, 8193, 12289, 16385, 24577};
    static const int dist_extra[30] = {0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6,
                                       6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};
    bit_reader r = {src, n, 0, 0};
    size_t o = 0;
    int final = 0;
    while (!final && !r.bad) {
        final = (int)bits(&r, 1);
        const uint32_t type = bits(&r, 2);
        if (type == 0) {
            r.pos = (r.pos + 7) & ~(size_t)7;
            const uint32_t len = bits(&r, 16), nlen = bits(&r, 16);
            if (r.bad || (len ^ 0xffffu) != nlen || r.pos / 8 + len > n || o + len > cap) return (size_t)-1;
            memcpy(out + o, src + r.pos / 8, len);
            o += len;
            r.pos += 8 * (size_t)len;
        } else if (type == 1) {
            for (;;) {
                const int sym = fixed_literal(&r);
                if (r.bad || sym > 285) return (size_t)-1;
                if (sym == 256) break;
                if (sym < 256) {
                    if (o >= cap) return (size_t)-1;
                    out[o++] = (uint8_t)sym;
                    continue;
                }
                const int length = len_base[sym - 257] + (int)bits(&r, len_extra[sym - 257]);
                uint32_t dcode = 0;
                for (int i = 0; i < 5; ++i) dcode = dcode << 1 | bits(&r, 1);
                if (dcode >= 30) return (size_t)-1;
                const size_t dist = (size_t)dist_base[dcode] + bits(&r, dist_extra[dcode]);
                if (r.bad || dist > o || o + (size_t)length > cap) return (size_t)-1;
                for (int i = 0; i < length; ++i, ++o) out[o] = out[o - dist];
            }
        } else {
            return (size_t)-1; /* the writer emits no dynamic blocks */
        }
    }
    return r.bad ? (size_t)-1 : o;
}

/* ------------------------------------------------------------------------ */

/* Decode png (as this writer lays it out) and compare with rgb. */
static int check_png(const char *what, const uint8_t *png, size_t size, const uint8_t *rgb, int w, int h) {
    static const uint8_t signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (size < 8 || memcmp(png, signature, 8) != 0) {
        CHECK(0, "%s: bad signature", what);
        return 0;
    }
    uint8_t *zdata = test_malloc(size);
    size_t zsize = 0, at = 8;
    int seen_ihdr = 0, seen_iend = 0;
    while (at + 12 <= size && !seen_iend) {
        const uint32_t len = be32(png + at);
        if (at + 12 + len > size) {
            CHECK(0, "%s: chunk overruns the file", what);
            free(zdata);
            return 0;
        }
        const uint8_t *type = png + at + 4, *data = png + at + 8;
        if (crc32_bitwise(type, 4 + (size_t)len) != be32(data + len)) {
            CHECK(0, "%s: CRC of chunk %.4s", what, (const char *)type);
            free(zdata);
            return 0;
        }
        if (memcmp(type, "IHDR", 4) == 0) {
            seen_ihdr = len == 13 && be32(data) == (uint32_t)w && be32(data + 4) == (uint32_t)h &&
                        data[8] == 8 && data[9] == 2 && data[10] == 0 && data[11] == 0 && data[12] == 0;
        } else if (memcmp(type, "IDAT", 4) == 0) {
            memcpy(zdata + zsize, data, len);
            zsize += len;
        } else if (memcmp(type, "IEND", 4) == 0) {
            seen_iend = len == 0 && at + 12 == size;
        }
        at += 12 + len;
    }
    int ok = seen_ihdr && seen_iend && zsize >= 6;
    CHECK(ok, "%s: IHDR (%dx%d RGB8) and a final IEND expected", what, w, h);
    ok = ok && (zdata[0] & 0x0f) == 8 && (zdata[0] * 256 + zdata[1]) % 31 == 0 && !(zdata[1] & 0x20);
    CHECK(ok, "%s: zlib header", what);
    const size_t stride = (size_t)w * 3 + 1, raw_size = stride * (size_t)h;
    uint8_t *raw = test_malloc(raw_size + 1);
    if (ok) {
        const size_t got = inflate_simple(zdata + 2, zsize - 6, raw, raw_size + 1);
        ok = got == raw_size;
        CHECK(ok, "%s: inflate gave %zu bytes, expected %zu", what, got, raw_size);
    }
    if (ok) {
        ok = adler32_plain(raw, raw_size) == be32(zdata + zsize - 4);
        CHECK(ok, "%s: Adler-32", what);
    }
    for (int y = 0; ok && y < h; ++y) {
        ok = raw[(size_t)y * stride] == 0 &&
             memcmp(raw + (size_t)y * stride + 1, rgb + (size_t)y * w * 3, (size_t)w * 3) == 0;
        CHECK(ok, "%s: row %d differs", what, y);
    }
    free(raw);
    free(zdata);
    return ok;
}

int main(void) {
    static const int sizes[][2] = {{1, 1}, {7, 3}, {300, 200}, {961, 5}};
    test_rng rng;
    test_rng_seed(&rng, 11);
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; ++s) {
        const int w = sizes[s][0], h = sizes[s][1];
        uint8_t *rgb = test_malloc((size_t)w * h * 3);
        for (int kind = 0; kind < 3; ++kind) {
            /* 0: flat with a few lines (a plot), 1: noise, 2: smooth gradient */
            for (int y = 0; y < h; ++y)
                for (int x = 0; x < w; ++x) {
                    uint8_t *px = rgb + ((size_t)y * w + x) * 3;
                    if (kind == 0) {
                        const int line = y == h / 2 || x == w / 3 || (x + y) % 97 == 0;
                        px[0] = line ? 31 : 255, px[1] = line ? 119 : 255, px[2] = line ? 180 : 255;
                    } else if (kind == 1) {
                        for (int c = 0; c < 3; ++c) px[c] = (uint8_t)test_rng_range(&rng, 0, 255);
                    } else {
                        px[0] = (uint8_t)x, px[1] = (uint8_t)y, px[2] = (uint8_t)(x ^ y);
                    }
                }
            for (int compress = 0; compress <= 1; ++compress) {
                char what[64];
                snprintf(what, sizeof what, "%dx%d kind %d %s", w, h, kind, compress ? "deflate" : "stored");
                uint8_t *png = NULL;
                size_t size = 0;
                CHECK_OK(png_encode(rgb, w, h, compress, &png, &size));
                if (png) check_png(what, png, size, rgb, w, h);
                if (png && compress && kind == 0 && w * h > 1000)
                    CHECK(size * 20 < (size_t)w * h * 3, "%s: a flat picture must compress 20x (%zu bytes)",
                          what, size);
                free(png);
            }
        }
        free(rgb);
    }

    /* The file holds exactly the compressed encoding. */
    uint8_t rgb[4 * 2 * 3];
    for (size_t i = 0; i < sizeof rgb; ++i) rgb[i] = (uint8_t)(i * 20);
    const char *path = "train_png_test.png";
    CHECK_OK(png_write_file(path, rgb, 4, 2));
    uint8_t *file = NULL, *png = NULL;
    size_t file_size = 0, size = 0;
    CHECK_OK(read_whole_file(path, &file, &file_size));
    CHECK_OK(png_encode(rgb, 4, 2, 1, &png, &size));
    CHECK(file && png && file_size == size && memcmp(file, png, size) == 0, "the file differs from png_encode");
    if (file) check_png(path, file, file_size, rgb, 4, 2);
    free(file), free(png);
    remove(path);

    /* Bad sizes. */
    CHECK_STATUS(png_encode(rgb, 0, 2, 1, &png, &size), BFP8_ERR_INVALID_VALUE);
    CHECK_STATUS(png_encode(rgb, 4, -1, 1, &png, &size), BFP8_ERR_INVALID_VALUE);
    return test_exit_code("train_png");
}
