/*
 * checksum.c - CRC-32 by tables built on first use (eight bytes a step), Adler-32 with
 * the modulo deferred over blocks that cannot overflow.
 */
#include "train/checksum.h"

/* crc_tables[0] is the classic byte table; crc_tables[k][b] is the CRC of
 * byte b followed by k zero bytes, so eight bytes fold in with eight lookups
 * that do not depend on each other (slicing by 8: the same CRC, ~6x the
 * speed of a byte at a time, which matters for multi-gigabyte checkpoints). */
static uint32_t crc_tables[8][256];
static int crc_tables_ready;

static void build_crc_tables(void) {
    for (uint32_t i = 0; i < 256; ++i) {
        uint32_t c = i;
        for (int k = 0; k < 8; ++k) c = (c & 1u) ? 0xedb88320u ^ (c >> 1) : c >> 1;
        crc_tables[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i)
        for (int k = 1; k < 8; ++k)
            crc_tables[k][i] = crc_tables[0][crc_tables[k - 1][i] & 0xffu] ^ (crc_tables[k - 1][i] >> 8);
    crc_tables_ready = 1;
}

uint32_t crc32_update(uint32_t crc, const void *data, size_t n) {
    if (!crc_tables_ready) build_crc_tables();
    const uint8_t *p = data;
    crc = ~crc;
    for (; n >= 8; n -= 8, p += 8) {
        /* little-endian assembly of the two words, whatever the host order */
        const uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        const uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
        crc = crc_tables[7][lo & 0xffu] ^ crc_tables[6][(lo >> 8) & 0xffu] ^ crc_tables[5][(lo >> 16) & 0xffu] ^
              crc_tables[4][lo >> 24] ^ crc_tables[3][hi & 0xffu] ^ crc_tables[2][(hi >> 8) & 0xffu] ^
              crc_tables[1][(hi >> 16) & 0xffu] ^ crc_tables[0][hi >> 24];
    }
    for (; n > 0; --n, ++p) crc = crc_tables[0][(crc ^ *p) & 0xffu] ^ (crc >> 8);
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
