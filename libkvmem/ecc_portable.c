/* SPDX-License-Identifier: MIT */
/*
 * ecc_portable.c - bulk codec kernels in plain C, and the tables they share
 *
 * Every table is derived from the per-word functions of ecc_word.h the first
 * time it is needed, so there is one definition of each code. The syndromes
 * are linear maps over GF(2): a syndrome is the XOR of the contributions of
 * each byte (or nibble) of the word, which is what the tables hold.
 */
#include <pthread.h>
#include <string.h>

#include "ecc_word.h"
#include "internal.h"

static struct kvmem__ecc_tables tables;
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static unsigned int h74_syn_ext(unsigned int b)
{
	return kvmem_h74_syndrome(b) | (b >> 7) << 3;
}

/* The GF2P8AFFINEQB matrix of the linear byte map that sends bit b to
 * col[b]: byte 7 - i holds the input bits that feed output bit i. */
static uint64_t gf_matrix(const uint8_t *col)
{
	uint64_t m = 0;
	unsigned int b, i;

	for (b = 0; b < 8; b++)
		for (i = 0; i < 8; i++)
			m |= (uint64_t)(col[b] >> i & 1) << (8 * (7 - i) + b);
	return m;
}

static void tables_init(void)
{
	struct kvmem__ecc_tables *t = &tables;
	unsigned int i, k, n;
	uint8_t col[8];

	for (i = 0; i < 4096; i++) {
		t->golay_parity[i] = (uint16_t)kvmem_golay24_mul_b(i);
		t->golay_error[i] = kvmem_golay24_error(i);
	}
	for (k = 0; k < 8; k++) {
		for (i = 0; i < 256; i++)
			t->secded_check[k][i] =
				kvmem_secded72_encode((uint64_t)i << (8 * k));
		for (n = 0; n < 16; n++)
			t->secded_hi[k][n] = t->secded_check[k][n << 4];
	}
	for (k = 0; k < 8; k++)
		for (i = 0; i < 8; i++) {
			t->h74_gf |= (uint64_t)(h74_syn_ext(1u << k) >> i & 1)
				     << (8 * (7 - i) + k);
			t->h84_gf |=
				(uint64_t)(kvmem_h84_syndrome(1u << k) >> i & 1)
				<< (8 * (7 - i) + k);
		}
	for (k = 0; k < 3; k++)
		for (n = 0; n < 2; n++) {
			for (i = 0; i < 8; i++)
				col[i] = (uint8_t)(kvmem_golay24_syndrome(
							   1u << (8 * k + i)) >>
						   (8 * n));
			t->golay_gf[k][n] = gf_matrix(col);
		}
	for (n = 0; n < 16; n++) {
		t->h74_syn[0][n] = (uint8_t)h74_syn_ext(n);
		t->h74_syn[1][n] = (uint8_t)h74_syn_ext(n << 4);
		t->h84_syn[0][n] = (uint8_t)kvmem_h84_syndrome(n);
		t->h84_syn[1][n] = (uint8_t)kvmem_h84_syndrome(n << 4);
		t->h74_enc[n] = kvmem_h74_encode(n);
		t->h84_enc[n] = kvmem_h84_encode(n);
		for (k = 0; k < 3; k++) {
			uint32_t p = kvmem_golay24_mul_b(n << (4 * k));

			t->golay_par[k][0][n] = (uint8_t)p;
			t->golay_par[k][1][n] = (uint8_t)(p >> 8);
		}
	}
}

const struct kvmem__ecc_tables *kvmem__ecc_tables(void)
{
	pthread_once(&tables_once, tables_init);
	return &tables;
}

static uint64_t load64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static void store64(uint8_t *p, uint64_t v)
{
	memcpy(p, &v, sizeof(v));
}

/*
 * SWAR parity of each byte of v, left in bit 0 of the byte: 8 codewords per
 * 64-bit operation for the one-byte codes.
 */
static uint64_t byte_parity(uint64_t v)
{
	v ^= v >> 4;
	v ^= v >> 2;
	v ^= v >> 1;
	return v & 0x0101010101010101ull;
}

#define BYTES(b) (0x0101010101010101ull * (b))

/* Non-zero iff some byte of v is not a clean codeword. */
static uint64_t h74_dirty8(uint64_t v)
{
	return byte_parity(v & BYTES(KVMEM_H74_ROW0)) |
	       byte_parity(v & BYTES(KVMEM_H74_ROW1)) |
	       byte_parity(v & BYTES(KVMEM_H74_ROW2)) | (v & BYTES(0x80));
}

static uint64_t h84_dirty8(uint64_t v)
{
	return byte_parity(v & BYTES(KVMEM_H74_ROW0)) |
	       byte_parity(v & BYTES(KVMEM_H74_ROW1)) |
	       byte_parity(v & BYTES(KVMEM_H74_ROW2)) | byte_parity(v);
}

static size_t h74_scan(const uint8_t *code, size_t n)
{
	size_t i = 0;

	for (; i + 8 <= n; i += 8)
		if (h74_dirty8(load64(code + i)))
			break;
	for (; i < n; i++)
		if (code[i] >> 7 || kvmem_h74_syndrome(code[i]))
			return i;
	return n;
}

static size_t h84_scan(const uint8_t *code, size_t n)
{
	size_t i = 0;

	for (; i + 8 <= n; i += 8)
		if (h84_dirty8(load64(code + i)))
			break;
	for (; i < n; i++)
		if (kvmem_h84_syndrome(code[i]))
			return i;
	return n;
}

static void nibble_encode(const uint8_t *enc, const uint8_t *data,
			  uint8_t *code, size_t n)
{
	size_t i;

	for (i = 0; i + 2 <= n; i += 2) {
		code[i] = enc[data[i / 2] & 0xf];
		code[i + 1] = enc[data[i / 2] >> 4];
	}
	if (i < n)
		code[i] = enc[data[i / 2] & 0xf];
}

static void h74_encode(const uint8_t *data, uint8_t *code, size_t n)
{
	nibble_encode(kvmem__ecc_tables()->h74_enc, data, code, n);
}

static void h84_encode(const uint8_t *data, uint8_t *code, size_t n)
{
	nibble_encode(kvmem__ecc_tables()->h84_enc, data, code, n);
}

static void nibble_extract(const uint8_t *code, uint8_t *data, size_t n)
{
	size_t i;

	for (i = 0; i + 2 <= n; i += 2)
		data[i / 2] = (uint8_t)((code[i] & 0xf) | code[i + 1] << 4);
	if (i < n)
		data[i / 2] = code[i] & 0xf;
}

static uint32_t load24(const uint8_t *p)
{
	return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16;
}

static void store24(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
}

static size_t golay_scan(const uint8_t *code, size_t n)
{
	const uint16_t *par = kvmem__ecc_tables()->golay_parity;
	size_t i;

	for (i = 0; i < n; i++) {
		uint32_t w = load24(code + 3 * i);

		if (par[w & 0xfff] != w >> 12)
			return i;
	}
	return n;
}

static void golay_encode(const uint8_t *data, uint8_t *code, size_t n)
{
	const uint16_t *par = kvmem__ecc_tables()->golay_parity;
	size_t i;

	/* Two words per three data bytes. */
	for (i = 0; i + 2 <= n; i += 2) {
		uint32_t d = load24(data + i / 2 * 3);
		uint32_t w0 = d & 0xfff, w1 = d >> 12;

		store24(code + 3 * i, w0 | (uint32_t)par[w0] << 12);
		store24(code + 3 * i + 3, w1 | (uint32_t)par[w1] << 12);
	}
	if (i < n) {
		const uint8_t *p = data + i / 2 * 3;
		uint32_t w0 = (p[0] | (uint32_t)p[1] << 8) & 0xfff;

		store24(code + 3 * i, w0 | (uint32_t)par[w0] << 12);
	}
}

static void golay_extract(const uint8_t *code, uint8_t *data, size_t n)
{
	size_t i;

	/* Two words a step, from one 8-byte load to one 4-byte store, while
	 * both stay inside the buffers; a store's fourth byte is the next
	 * step's first. */
	for (i = 0; i + 3 <= n; i += 2) {
		uint64_t x = load64(code + 3 * i);
		uint32_t d = (uint32_t)((x & 0xfff) | (x >> 12 & 0xfff000));

		memcpy(data + i / 2 * 3, &d, sizeof(d));
	}
	for (; i + 2 <= n; i += 2) {
		uint32_t w0 = load24(code + 3 * i) & 0xfff;
		uint32_t w1 = load24(code + 3 * i + 3) & 0xfff;

		store24(data + i / 2 * 3, w0 | w1 << 12);
	}
	if (i < n) {
		uint32_t w0 = load24(code + 3 * i) & 0xfff;

		data[i / 2 * 3] = (uint8_t)w0;
		data[i / 2 * 3 + 1] = (uint8_t)(w0 >> 8);
	}
}

static unsigned int secded_check(const uint8_t (*t)[256], const uint8_t *d)
{
	return t[0][d[0]] ^ t[1][d[1]] ^ t[2][d[2]] ^ t[3][d[3]] ^ t[4][d[4]] ^
	       t[5][d[5]] ^ t[6][d[6]] ^ t[7][d[7]];
}

static size_t secded_scan(const uint8_t *code, size_t n)
{
	const uint8_t(*t)[256] = kvmem__ecc_tables()->secded_check;
	size_t i;

	for (i = 0; i < n; i++, code += 9)
		if (secded_check(t, code) != code[8])
			return i;
	return n;
}

static void secded_encode(const uint8_t *data, uint8_t *code, size_t n)
{
	const uint8_t(*t)[256] = kvmem__ecc_tables()->secded_check;
	size_t i;

	for (i = 0; i < n; i++, data += 8, code += 9) {
		store64(code, load64(data));
		code[8] = (uint8_t)secded_check(t, data);
	}
}

static void secded_extract(const uint8_t *code, uint8_t *data, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++, data += 8, code += 9)
		store64(data, load64(code));
}

const struct kvmem__ecc_kernels kvmem__ecc_portable[KVMEM_CODEC_NR] = {
	[KVMEM_CODEC_H74] = {
		.scan = h74_scan,
		.encode = h74_encode,
		.extract = nibble_extract,
	},
	[KVMEM_CODEC_H84] = {
		.scan = h84_scan,
		.encode = h84_encode,
		.extract = nibble_extract,
	},
	[KVMEM_CODEC_GOLAY24] = {
		.scan = golay_scan,
		.encode = golay_encode,
		.extract = golay_extract,
	},
	[KVMEM_CODEC_SECDED72] = {
		.scan = secded_scan,
		.encode = secded_encode,
		.extract = secded_extract,
	},
};
