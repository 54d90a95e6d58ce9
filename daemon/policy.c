/* SPDX-License-Identifier: MIT */
/*
 * policy.c - the configuration kvmemd runs on, in layers: the defaults,
 * the file (re-read on SIGHUP), the command line's settings, and the
 * run-time changes of the admin socket (kvmemctl policy set, scrub rate),
 * which a reload keeps; and what a change does beyond d->cfg
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvmemd.h"

int kvmemd_config_build(const struct kvmemd *d, struct kvmemd_config *c,
			char *err, size_t errlen)
{
	int i, ret;

	kvmemd_config_defaults(c);
	ret = kvmemd_config_load(c, d->config_path, d->config_must_exist, err,
				 errlen);
	for (i = 0; !ret && i < d->nset; i++)
		ret = kvmemd_config_set(c, d->set_keys[i], d->set_vals[i], err,
					errlen);
	for (i = 0; !ret && i < d->npolicy; i++)
		ret = kvmemd_config_set(c, d->policy_keys[i], d->policy_vals[i],
					err, errlen);
	if (!ret)
		ret = kvmemd_config_check(c, err, errlen);
	return ret;
}

void kvmemd_config_apply(struct kvmemd *d, const struct kvmemd_config *c)
{
	d->cfg = *c;
	kvmemd_log_init(d->cfg.log_level);
	kvmemd_prefix_trim(d);
}

int kvmemd_policy_set(struct kvmemd *d, const char *key, const char *val,
		      char *err, size_t errlen)
{
	struct kvmemd_config c = d->cfg;
	char *k, *v;
	int i, ret;

	ret = kvmemd_config_reloads(key);
	if (ret <= 0) {
		snprintf(err, errlen, "%s: %s", key,
			 ret ? "unknown key" : "takes a restart to change");
		return -EINVAL;
	}
	ret = kvmemd_config_set(&c, key, val, err, errlen);
	if (!ret)
		ret = kvmemd_config_check(&c, err, errlen);
	if (ret)
		return ret;
	for (i = 0; i < d->npolicy && strcmp(d->policy_keys[i], key); i++)
		;
	if (i == KVMEMD_MAX_SETS) {
		snprintf(err, errlen, "too many keys set at run time");
		return -EINVAL;
	}
	k = strdup(key);
	v = strdup(val);
	if (!k || !v) {
		free(k);
		free(v);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	if (i < d->npolicy) {
		free(d->policy_keys[i]);
		free(d->policy_vals[i]);
	} else {
		d->npolicy++;
	}
	d->policy_keys[i] = k;
	d->policy_vals[i] = v;
	kvmemd_config_apply(d, &c);
	kvmemd_log(LOG_NOTICE, "policy: %s = %s", key, val);
	return 0;
}

void kvmemd_policy_free(struct kvmemd *d)
{
	int i;

	for (i = 0; i < d->npolicy; i++) {
		free(d->policy_keys[i]);
		free(d->policy_vals[i]);
	}
	d->npolicy = 0;
}
