/*
 * checksum.c - CRC-32 by a 256-entry table built on first use, Adler-32 with
 * the modulo deferred over blocks that cannot overflow.
 */
#include "train/checksum.h"

static uint32_t crc_table[256];
static int crc_table_ready;

static void build_crc_table(void) {
    for (uint32_t i = 0; i < 256; ++i) {
        uint32_t c = i;
        for (int k = 0; k < 8; ++k) c = (c & 1u) ? 0xedb88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
    crc_table_ready = 1;
}

uint32_t crc32_update(uint32_t crc, const void *data, size_t n) {
    if (!crc_table_ready) build_crc_table();
    const uint8_t *p = data;
    crc = ~crc;
    for (size_t i = 0; i < n; ++i) crc = crc_table[(crc ^ p[i]) & 0xffu] ^ (crc >> 8);
    return ~crc;
}

uint32_t adler32_update(uint32_t adler, const void *data, size_t n) {
    enum { MOD = 65521, BLOCK = 5552 }; /* the largest block whose sums fit in 32 bits */
    const uint8_t *p = data;
    uint32_t a = adler & 0xffffu, b = adler >> 16;
    while (n > 0) {
        const size_t len = n < BLOCK ? n : BLOCK;
        for (size_t i = 0; i < len; ++i) {
            a += p[i];
            b += a;
        }
        a %= MOD;
        b %= MOD;
        p += len;
        n -= len;
    }
    return (b << 16) | a;
}
