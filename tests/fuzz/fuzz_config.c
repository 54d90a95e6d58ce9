/* SPDX-License-Identifier: MIT */
/*
 * fuzz_config.c - the configuration file parser and the checks across
 * keys, over the built-in defaults as kvmemd -c reads a file
 *
 * A file is taken whole or not at all: a refused one must leave the
 * configuration as it was and say why; an accepted one must print (as
 * --print-config does) to a file that reads back to the same
 * configuration.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../daemon/config.h"
#include "../../daemon/kvmemd.h"
#include "fuzz_daemon.h"

static void fail(const char *what, const char *err)
{
	fprintf(stderr, "config: %s (%s)\n", what, err);
	abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct kvmemd_config def, c, again;
	static int ready;
	char err[1024] = "", *text = NULL;
	size_t len = 0;
	FILE *f;

	if (!ready) {
		kvmemd_log_init(LOG_CRIT);
		kvmemd_config_defaults(&def);
		ready = 1;
	}
	if (!size)
		return 0;
	c = def;
	f = fmemopen((void *)data, size, "r");
	if (!f)
		return 0;
	if (kvmemd_config_read(&c, f, "fuzz.conf", err, sizeof(err))) {
		fclose(f);
		if (!err[0])
			fail("refused without a reason", err);
		if (memcmp(&c, &def, sizeof(c)))
			fail("a refused file changed the configuration", err);
		return 0;
	}
	fclose(f);
	f = open_memstream(&text, &len);
	if (!f)
		return 0;
	kvmemd_config_print(&c, f);
	fclose(f);
	again = def;
	f = fmemopen(text, len, "r");
	if (!f || kvmemd_config_read(&again, f, "printed.conf", err,
				     sizeof(err)))
		fail("the printed configuration does not read back", err);
	fclose(f);
	free(text);
	if (memcmp(&c, &again, sizeof(c)))
		fail("the printed configuration reads back to another", "");
	return 0;
}
