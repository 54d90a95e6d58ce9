/* SPDX-License-Identifier: MIT */
/*
 * fuzz_store_hdr.c - what kvmemd makes of unit 0 of a backing store it
 * is given: keep, format or refuse
 *
 * Input: 8 bytes of store size (little-endian), a byte of flags (bit 0: a
 * regular file, bit 1: store.reformat), then unit 0 (zero-padded to the
 * unit). A store kept must be one whose header describes exactly that
 * size; one that holds something must never be formatted without
 * store.reformat; every refusal says why.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../daemon/store.h"
#include "fuzz_daemon.h"

static void fail(const char *what, const char *why)
{
	fprintf(stderr, "store header: %s (%s)\n", what, why);
	abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t unit0[KVMEMD_STORE_UNIT];
	struct kvmemd_store_hdr hdr;
	uint64_t bytes = 0;
	int is_file, reformat, ret, empty;
	char why[512];
	size_t i, n;

	if (size < 9)
		return 0;
	for (i = 0; i < 8; i++)
		bytes |= (uint64_t)data[i] << (8 * i);
	/* The open refuses a store of fewer than two units first. */
	if (bytes < 2 * KVMEMD_STORE_UNIT)
		return 0;
	is_file = data[8] & 1;
	reformat = !!(data[8] & 2);
	n = size - 9 < sizeof(unit0) ? size - 9 : sizeof(unit0);
	memset(unit0, 0, sizeof(unit0));
	memcpy(unit0, data + 9, n);
	for (i = 0; i < sizeof(unit0) && !unit0[i]; i++)
		;
	empty = i == sizeof(unit0);
	ret = kvmemd_store_judge(unit0, bytes, is_file, reformat, &hdr, why,
				 sizeof(why));
	switch (ret) {
	case KVMEMD_STORE_KEEP:
		if (empty || memcmp(hdr.magic, KVMEMD_STORE_MAGIC, 8) ||
		    hdr.size != bytes ||
		    hdr.nunits != bytes / KVMEMD_STORE_UNIT - 1 ||
		    hdr.unit != KVMEMD_STORE_UNIT ||
		    hdr.version != KVMEMD_STORE_VERSION)
			fail("kept a header that does not describe the store",
			     why);
		break;
	case KVMEMD_STORE_FORMAT:
		if (!reformat && !(empty && is_file))
			fail("formats over what it did not make", why);
		break;
	case -EEXIST:
		if (!why[0] || reformat)
			fail("refused without a reason, or despite reformat",
			     why);
		break;
	default:
		fail("an unknown answer", why);
	}
	return 0;
}
