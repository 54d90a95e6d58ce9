/* SPDX-License-Identifier: MIT */
/*
 * remote.c - the shared tier: published prefixes pushed to a store that
 * the kvmemd of many machines share, and fetched from it for a tenant
 * that does not have them, every record checked before it is kept
 *
 * The event loop never waits on the network. One thread of the tier's
 * own talks to the store through the backend's table, one job at a time
 * from a bounded queue: a push (is the block there? if not, write it
 * once) or a fetch (read a chain of blocks in one batch, check each,
 * write back what the code corrected, delete what it could not). The
 * loop hands a job its inputs and takes its results back when the
 * thread is done (kvmemd_remote_reap()); the thread touches no session,
 * block or counter of the loop's.
 *
 * Each tenant talks to the store as its own user when remote.credentials
 * names one, so that the store's access lists keep tenants apart too;
 * kvmemd keeps them apart first (a tenant's key names it, and a record
 * names its tenant). A store that does not answer is tried again after a
 * pause that grows to 30 s; meanwhile a fetch fails at once
 * (-EHOSTUNREACH), a push is dropped, and local service goes on.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "json.h"
#include "prefix.h"
#include "remote.h"

/* Jobs queued or running: fetches past it fail with -EAGAIN. */
#define REMOTE_DEPTH 256
/* The most blocks one PREFIX_FETCH reads (KVMEM_PREFIX_FETCH_MAX): what
 * one batch may hold in memory is that many records. */
#define REMOTE_FETCH_MAX KVMEM_PREFIX_FETCH_MAX
#define BACKOFF_MIN_NS (100ull * 1000000u)
#define BACKOFF_MAX_NS (30ull * 1000000000u)

struct cred {
	uint64_t tenant;
	int any; /* "*": every tenant not listed */
	char user[64], password[128];
};

/* A tenant's connection: the thread's alone. */
struct conn {
	uint64_t tenant;
	void *ctx; /* NULL: not connected */
	uint64_t retry_at, backoff; /* after a failure */
	int error;
	char why[160];
};

struct kvmemd_remote {
	struct kvmemd *d;
	const struct kvmemd_remote_ops *ops;
	struct kvmemd_workers *thread;
	char seeds[sizeof(((struct kvmemd_config *)0)->remote_seeds)];
	int timeout_ms, retries;
	int stopping; /* set by the loop, read by the thread */
	struct cred *creds;
	unsigned int ncreds;
	/* the thread's */
	struct conn *conns;
	unsigned int nconns;
	uint64_t runs; /* jobs run, to order their snapshots of the stats */
	/* the loop's */
	uint64_t queued_bytes; /* records on their way */
	unsigned int jobs;
	int error; /* of the last job: 0 when the store answered */
	char why[160];
	uint64_t error_at; /* CLOCK_REALTIME s of that */
	struct kvmemd_remote_stats bstats; /* as the last job left them */
	uint64_t bstats_run; /* which job that was */
	char nodes[1024];
	struct {
		uint64_t pushed, push_present, push_dropped, push_unchained,
			push_errors, push_bytes;
		uint64_t fetches, fetch_errors, blocks_asked, hits, misses,
			unanswered, kept, keep_refused, fetch_bytes;
		uint64_t repaired, written_back, deleted;
		uint64_t refused[KVMEMD_REMOTE_VERDICTS];
		uint64_t words_corrected, words_uncorrectable;
	} n;
};

enum job_type { JOB_PUSH, JOB_FETCH };

struct remote_job {
	struct kvmemd_work work; /* first: the pool's handle */
	struct kvmemd_remote *r;
	enum job_type type;
	uint64_t tenant;
	int error; /* the store could not be reached */
	char why[160];
	struct kvmemd_remote_stats stats;
	uint64_t run; /* r->runs when it ran */
	char nodes[1024];
	char (*keys)[KVMEMD_REMOTE_KEY_LEN];
	/* push: the record under keys[0], its TTL, what became of it */
	uint8_t *rec;
	size_t len;
	uint32_t ttl_s;
	int status;
	/* fetch: its blocks, and who takes the answer (NULL: no one any
	 * more) */
	void (*done)(void *ctx, int res);
	void *ctx;
	struct kvmem_geometry g;
	uint64_t digest;
	struct kvmem_page_layout layout[2];
	uint32_t n;
	uint8_t (*hash)[KVMEM_PREFIX_KEY_BYTES]; /* [n + 1]: parent first */
	uint32_t *start, *ntokens;
	struct kvmemd_remote_req *reqs; /* [n] */
	uint8_t *verdict; /* [n] */
	uint32_t good; /* leading records that passed */
	struct kvmem_ecc_counts words;
	uint64_t written_back, deleted, bytes;
};

/* ---- credentials ------------------------------------------------------ */

/* A line of remote.credentials @path: 0, or -EINVAL with why in @err. */
static int cred_parse(struct kvmemd_remote *r, const char *path, char *line,
		      unsigned int lineno, char *err, size_t len)
{
	char tenant[64], user[64], password[128], extra[2];
	struct cred *c, *more;
	unsigned long id = 0;
	char *end = NULL;
	int n;

	line[strcspn(line, "#\n")] = '\0';
	n = sscanf(line, "%63s %63s %127s %1s", tenant, user, password, extra);
	if (n <= 0)
		return 0;
	if (n != 3) {
		snprintf(err, len,
			 "remote.credentials: %s:%u: not TENANT USER PASSWORD",
			 path, lineno);
		return -EINVAL;
	}
	more = realloc(r->creds, (r->ncreds + 1) * sizeof(*r->creds));
	if (!more) {
		snprintf(err, len, "remote.credentials: out of memory");
		return -ENOMEM;
	}
	r->creds = more;
	c = &r->creds[r->ncreds];
	memset(c, 0, sizeof(*c));
	if (!strcmp(tenant, "*")) {
		c->any = 1;
	} else if ((!strncmp(tenant, "uid:", 4) ||
		    !strncmp(tenant, "gid:", 4)) &&
		   tenant[4] >= '0' && tenant[4] <= '9') {
		errno = 0;
		id = strtoul(tenant + 4, &end, 10);
		c->tenant = id | (tenant[0] == 'g' ? KVMEMD_TENANT_GROUP : 0);
	}
	if (!c->any && (!end || errno || *end || id > UINT32_MAX)) {
		snprintf(err, len,
			 "remote.credentials: %s:%u: \"%s\" is not uid:N, "
			 "gid:N or *",
			 path, lineno, tenant);
		return -EINVAL;
	}
	snprintf(c->user, sizeof(c->user), "%s", user);
	snprintf(c->password, sizeof(c->password), "%s", password);
	r->ncreds++;
	return 0;
}

/* Passwords stay kvmemd's: a file others can read or write is refused.
 * 0, or a negative errno with why in @err. */
static int creds_load(struct kvmemd_remote *r, const char *path, char *err,
		      size_t len)
{
	unsigned int lineno = 0;
	char line[512];
	struct stat st;
	int ret = 0;
	FILE *f;

	f = fopen(path, "re");
	if (!f) {
		ret = -errno;
		snprintf(err, len, "remote.credentials: %s: %s", path,
			 strerror(-ret));
		return ret;
	}
	if (fstat(fileno(f), &st)) {
		ret = -errno;
		snprintf(err, len, "remote.credentials: %s: %s", path,
			 strerror(-ret));
	} else if (st.st_mode & 077 ||
		   (st.st_uid != geteuid() && st.st_uid != 0)) {
		snprintf(err, len,
			 "remote.credentials: %s is mode %04o, owner %u: it "
			 "must be kvmemd's user's (or root's) and no one "
			 "else's to read (chmod 600)",
			 path, (unsigned int)(st.st_mode & 07777),
			 (unsigned int)st.st_uid);
		ret = -EPERM;
	}
	while (!ret && fgets(line, sizeof(line), f))
		ret = cred_parse(r, path, line, ++lineno, err, len);
	fclose(f);
	return ret;
}

static void creds_free(struct kvmemd_remote *r)
{
	if (r->creds)
		memset(r->creds, 0, r->ncreds * sizeof(*r->creds));
	free(r->creds);
	r->creds = NULL;
	r->ncreds = 0;
}

static const struct cred *cred_of(const struct kvmemd_remote *r,
				  uint64_t tenant)
{
	const struct cred *any = NULL;
	unsigned int i;

	for (i = 0; i < r->ncreds; i++) {
		if (r->creds[i].any)
			any = &r->creds[i];
		else if (r->creds[i].tenant == tenant)
			return &r->creds[i];
	}
	return any;
}

/* ---- the thread ------------------------------------------------------- */

/* @j's tenant's connection, made when it has none and may try: NULL with
 * j->error and j->why set when it cannot. */
static struct conn *conn_get(struct kvmemd_remote *r, struct remote_job *j)
{
	const uint64_t now = kvmemd_now_ns();
	char name[KVMEMD_TENANT_NAME_LEN];
	const struct cred *cr;
	struct conn *c = NULL, *more;
	unsigned int i;
	int ret;

	for (i = 0; i < r->nconns; i++)
		if (r->conns[i].tenant == j->tenant)
			c = &r->conns[i];
	if (!c) {
		more = realloc(r->conns, (r->nconns + 1) * sizeof(*r->conns));
		if (!more) {
			j->error = -ENOMEM;
			snprintf(j->why, sizeof(j->why), "out of memory");
			return NULL;
		}
		r->conns = more;
		c = &r->conns[r->nconns++];
		memset(c, 0, sizeof(*c));
		c->tenant = j->tenant;
	}
	if (c->ctx)
		return c;
	if (now < c->retry_at) {
		j->error = c->error;
		snprintf(j->why, sizeof(j->why), "%s", c->why);
		return NULL;
	}
	cr = cred_of(r, j->tenant);
	if (r->ncreds && !cr) {
		ret = -EACCES;
		snprintf(c->why, sizeof(c->why),
			 "remote.credentials names no user for %s",
			 kvmemd_prefix_tenant_name(j->tenant, name));
	} else {
		ret = r->ops->open(r->seeds, cr ? cr->user : NULL,
				   cr ? cr->password : NULL, r->timeout_ms,
				   r->retries, &c->ctx, c->why, sizeof(c->why));
	}
	if (!ret) {
		c->backoff = 0;
		c->error = 0;
		return c;
	}
	c->ctx = NULL;
	c->error = ret;
	c->backoff = c->backoff ? c->backoff * 2 : BACKOFF_MIN_NS;
	if (c->backoff > BACKOFF_MAX_NS)
		c->backoff = BACKOFF_MAX_NS;
	c->retry_at = now + c->backoff;
	j->error = ret;
	snprintf(j->why, sizeof(j->why), "%s", c->why);
	return NULL;
}

/* A batch no node took: the connection is made again next time. */
static void conn_failed(struct kvmemd_remote *r, struct conn *c,
			struct remote_job *j, int err)
{
	j->error = err;
	snprintf(j->why, sizeof(j->why), "%s", strerror(-err));
	r->ops->close(c->ctx);
	c->ctx = NULL;
}

static void push_run(struct kvmemd_remote *r, struct conn *c,
		     struct remote_job *j)
{
	struct kvmemd_remote_req q = {
		.op = KVMEMD_REMOTE_EXISTS,
		.key = j->keys[0],
	};
	int ret;

	kvmemd_remote_record_seal(j->rec, j->len);
	/* Written once: a block some node pushed first is the same block. */
	ret = r->ops->exec(c->ctx, &q, 1);
	if (!ret && q.status == -ENOENT) {
		q = (struct kvmemd_remote_req){
			.op = KVMEMD_REMOTE_SETNX,
			.key = j->keys[0],
			.val = j->rec,
			.vlen = j->len,
			.ttl_s = j->ttl_s,
		};
		ret = r->ops->exec(c->ctx, &q, 1);
	} else if (!ret && !q.status) {
		q.status = -EEXIST;
	}
	if (ret)
		conn_failed(r, c, j, ret);
	else
		j->status = q.status;
}

/* The slot kind of block @i of fetch @j: a sink page is hot. */
static int fetch_kind(const struct remote_job *j, uint32_t i)
{
	return j->g.sink_tokens && !j->start[i] ? KVMEM_SLOT_HOT
						: KVMEM_SLOT_SEALED;
}

static void fetch_run(struct kvmemd_remote *r, struct conn *c,
		      struct remote_job *j)
{
	struct kvmemd_remote_req *fix;
	struct kvmemd_remote_want want;
	uint32_t i, nfix = 0;
	int ret, kind;

	/* A record is read no longer than a block of its kind is: a value
	 * someone made larger is refused on its length, having cost no more
	 * memory than a block. */
	for (i = 0; i < j->n; i++) {
		kind = fetch_kind(j, i);
		j->reqs[i] = (struct kvmemd_remote_req){
			.op = KVMEMD_REMOTE_GET,
			.key = j->keys[i],
			.max = kvmemd_remote_record_len(
				j->g.layers, (uint32_t)j->layout[kind].size),
		};
	}
	ret = r->ops->exec(c->ctx, j->reqs, j->n);
	if (ret) {
		conn_failed(r, c, j, ret);
		return;
	}
	fix = calloc(j->n, sizeof(*fix));
	for (i = 0; i < j->n; i++) {
		if (j->reqs[i].status)
			continue;
		j->bytes += j->reqs[i].dlen;
		kind = fetch_kind(j, i);
		want = (struct kvmemd_remote_want){
			.g = &j->g,
			.tenant = j->tenant,
			.fingerprint = kvmemd_remote_fingerprint(
				&j->g, kind, (uint32_t)j->layout[kind].size),
			.hash = j->hash[i + 1],
			.parent = j->hash[i],
			.token_start = j->start[i],
			.ntokens = j->ntokens[i],
			.page_bytes = (uint32_t)j->layout[kind].size,
			.kind = (uint8_t)kind,
		};
		j->verdict[i] = (uint8_t)kvmemd_remote_record_check(
			j->reqs[i].data, j->reqs[i].dlen, &want, &j->words);
		if (!fix)
			continue;
		/* What the code corrected goes back corrected; what is past
		 * it goes, for the engine to compute and push again. */
		if (j->verdict[i] == KVMEMD_REMOTE_REPAIRED)
			fix[nfix++] = (struct kvmemd_remote_req){
				.op = KVMEMD_REMOTE_SETXX,
				.key = j->keys[i],
				.val = j->reqs[i].data,
				.vlen = j->reqs[i].dlen,
			};
		else if (j->verdict[i] != KVMEMD_REMOTE_GOOD)
			fix[nfix++] = (struct kvmemd_remote_req){
				.op = KVMEMD_REMOTE_DEL,
				.key = j->keys[i],
			};
	}
	for (j->good = 0; j->good < j->n; j->good++)
		if (j->reqs[j->good].status ||
		    (j->verdict[j->good] != KVMEMD_REMOTE_GOOD &&
		     j->verdict[j->good] != KVMEMD_REMOTE_REPAIRED))
			break;
	if (nfix && !r->ops->exec(c->ctx, fix, nfix))
		for (i = 0; i < nfix; i++) {
			j->written_back += fix[i].op == KVMEMD_REMOTE_SETXX &&
					   !fix[i].status;
			j->deleted += fix[i].op == KVMEMD_REMOTE_DEL &&
				      !fix[i].status;
		}
	free(fix);
}

static void job_run(struct kvmemd_work *work)
{
	struct remote_job *j = (struct remote_job *)work;
	struct kvmemd_remote *r = j->r;
	struct conn *c;

	/* Stopping, a job goes without waiting on the network. */
	if (__atomic_load_n(&r->stopping, __ATOMIC_RELAXED)) {
		j->error = -ECANCELED;
		snprintf(j->why, sizeof(j->why), "kvmemd is stopping");
		return;
	}
	c = conn_get(r, j);
	if (!c)
		return;
	if (j->type == JOB_PUSH)
		push_run(r, c, j);
	else
		fetch_run(r, c, j);
	if (c->ctx) {
		r->ops->stats(c->ctx, &j->stats);
		r->ops->describe(c->ctx, j->nodes, sizeof(j->nodes));
		j->run = ++r->runs;
	}
}

/* ---- the loop --------------------------------------------------------- */

static void job_free(struct remote_job *j)
{
	uint32_t i;

	if (j->reqs)
		for (i = 0; i < j->n; i++)
			free(j->reqs[i].data);
	free(j->reqs);
	free(j->rec);
	free(j->keys);
	free(j->hash);
	free(j->start);
	free(j->ntokens);
	free(j->verdict);
	free(j);
}

/* Said once when the store stops answering, once when it answers again. */
static void job_state(struct kvmemd_remote *r, const struct remote_job *j)
{
	struct timespec ts;

	if (j->error == -ECANCELED)
		return;
	if (j->error) {
		if (!r->error)
			kvmemd_log(LOG_WARNING,
				   "remote: the shared tier at %s does not "
				   "answer: %s (local service goes on)",
				   r->seeds, j->why);
		r->error = j->error;
		snprintf(r->why, sizeof(r->why), "%s", j->why);
		clock_gettime(CLOCK_REALTIME, &ts);
		r->error_at = (uint64_t)ts.tv_sec;
		return;
	}
	if (r->error)
		kvmemd_log(LOG_NOTICE, "remote: the shared tier at %s answers",
			   r->seeds);
	r->error = 0;
	/* Jobs are not reaped in the order they ran: an older snapshot
	 * would take the counters back. */
	if (j->run < r->bstats_run)
		return;
	r->bstats_run = j->run;
	r->bstats = j->stats;
	memcpy(r->nodes, j->nodes, sizeof(r->nodes));
}

/* The leading good blocks @j brought, kept as the tenant's: how many, or
 * why not even the first. */
static int fetch_keep(struct kvmemd_remote *r, struct remote_job *j)
{
	struct kvmemd_prefix_block name, *b;
	struct kvmemd *d = r->d;
	uint32_t i;
	int kind, ret = 0;

	for (i = 0; i < j->good; i++) {
		kind = fetch_kind(j, i);
		memset(&name, 0, sizeof(name));
		memcpy(name.key, j->hash[i + 1], sizeof(name.key));
		name.g = j->g;
		name.digest = j->digest;
		name.token_start = j->start[i];
		name.ntokens = j->ntokens[i];
		name.layers = j->g.layers;
		name.page_bytes = (uint32_t)j->layout[kind].size;
		name.kind = (uint8_t)kind;
		name.layout = j->layout[kind];
		ret = kvmemd_prefix_stage(d, j->tenant, &name, &b);
		if (ret == -EEXIST) {
			ret = 0;
			continue;
		}
		if (ret)
			break;
		kvmemd_remote_record_unpack(j->reqs[i].data, b);
		ret = kvmemd_prefix_keep(d, b);
		if (ret == -EEXIST)
			ret = 0;
		if (ret)
			break;
		r->n.kept++;
	}
	if (ret)
		r->n.keep_refused++;
	return i ? (int)i : ret;
}

static void refused_log(const struct remote_job *j, uint32_t i)
{
	static struct kvmemd_ratelimit rl;
	char name[KVMEMD_TENANT_NAME_LEN], fields[160];

	if (!kvmemd_rl(&rl, KVMEMD_RL_WINDOW_NS, KVMEMD_RL_BURST,
		       "refused shared-tier records"))
		return;
	snprintf(fields, sizeof(fields),
		 "KVMEM_EVENT=remote_refused\nKVMEM_REASON=%s\nKVMEM_KEY=%s\n",
		 kvmemd_remote_verdict_names[j->verdict[i]], j->keys[i]);
	kvmemd_log_fields(LOG_WARNING, fields,
			  "remote: the record of %s's block at token %u does "
			  "not verify (%s): not served, deleted from the "
			  "shared tier",
			  kvmemd_prefix_tenant_name(j->tenant, name),
			  j->start[i],
			  kvmemd_remote_verdict_names[j->verdict[i]]);
}

static void job_done(struct kvmemd_work *work)
{
	struct remote_job *j = (struct remote_job *)work;
	struct kvmemd_remote *r = j->r;
	uint32_t i;
	int res;

	r->jobs--;
	job_state(r, j);
	if (j->type == JOB_PUSH) {
		r->queued_bytes -= j->len;
		if (j->error || (j->status && j->status != -EEXIST)) {
			r->n.push_errors++;
		} else if (j->status == -EEXIST) {
			r->n.push_present++;
		} else {
			r->n.pushed++;
			r->n.push_bytes += j->len;
		}
		job_free(j);
		return;
	}
	r->n.fetch_bytes += j->bytes;
	r->n.words_corrected += j->words.corrected;
	r->n.words_uncorrectable += j->words.uncorrectable;
	r->n.written_back += j->written_back;
	r->n.deleted += j->deleted;
	for (i = 0; !j->error && i < j->n; i++) {
		if (j->reqs[i].status) {
			if (j->reqs[i].status == -ENOENT)
				r->n.misses++;
			else
				r->n.unanswered++;
			continue;
		}
		if (j->verdict[i] == KVMEMD_REMOTE_REPAIRED)
			r->n.repaired++;
		if (j->verdict[i] == KVMEMD_REMOTE_GOOD ||
		    j->verdict[i] == KVMEMD_REMOTE_REPAIRED) {
			r->n.hits++;
			continue;
		}
		r->n.refused[j->verdict[i]]++;
		refused_log(j, i);
	}
	res = j->error ? 0 : fetch_keep(r, j);
	if (j->error) {
		r->n.fetch_errors++;
		/* The store's refusal of the tenant's user says so; any
		 * other failure is the store's not answering. */
		res = j->error == -EACCES ? -EACCES : -EHOSTUNREACH;
	}
	if (j->done)
		j->done(j->ctx, res);
	job_free(j);
}

/* Queue @j: 0, or -EAGAIN (the queue is full, or the thread stopped). */
static int job_queue(struct kvmemd_remote *r, struct remote_job *j)
{
	j->work.fn = job_run;
	j->work.done = job_done;
	if (kvmemd_workers_queue(r->thread, &j->work))
		return -EAGAIN;
	r->jobs++;
	return 0;
}

void kvmemd_remote_push(struct kvmemd *d, const struct kvmemd_prefix_block *b,
			const uint8_t *parent)
{
	struct kvmemd_remote *r = d->remote;
	struct remote_job *j;

	if (!r || d->cfg.remote_publish != KVMEMD_YES)
		return;
	if (b->token_start && !parent) {
		/* Its chain is not known here: a fetch could not check it. */
		r->n.push_unchained++;
		return;
	}
	j = calloc(1, sizeof(*j));
	if (!j || r->queued_bytes >= d->cfg.remote_queue_bytes)
		goto dropped;
	j->r = r;
	j->type = JOB_PUSH;
	j->tenant = b->tenant;
	j->ttl_s = d->cfg.remote_ttl_s;
	j->keys = malloc(sizeof(*j->keys));
	j->rec = j->keys ? kvmemd_remote_record(b, parent, &j->len) : NULL;
	if (!j->rec)
		goto dropped;
	kvmemd_remote_key(
		j->keys[0], sizeof(j->keys[0]), b->tenant,
		kvmemd_remote_fingerprint(&b->g, b->kind, b->page_bytes),
		b->key);
	if (job_queue(r, j))
		goto dropped;
	r->queued_bytes += j->len;
	return;
dropped:
	r->n.push_dropped++;
	if (j)
		job_free(j);
}

int kvmemd_remote_fetch(struct kvmemd *d, const struct kvmemd_remote_fetch *f,
			struct remote_job **out)
{
	struct kvmemd_remote *r = d->remote;
	struct remote_job *j;
	uint32_t i;
	int kind, ret;

	if (!r)
		return -EOPNOTSUPP;
	if (!f->n || f->n > REMOTE_FETCH_MAX)
		return -EINVAL;
	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->r = r;
	j->type = JOB_FETCH;
	j->tenant = f->tenant;
	j->g = f->g;
	j->digest = f->digest;
	memcpy(j->layout, f->layout, sizeof(j->layout));
	j->n = f->n;
	j->done = f->done;
	j->ctx = f->ctx;
	j->hash = malloc((size_t)(j->n + 1) * sizeof(*j->hash));
	j->start = malloc(j->n * sizeof(*j->start));
	j->ntokens = malloc(j->n * sizeof(*j->ntokens));
	j->keys = malloc(j->n * sizeof(*j->keys));
	j->reqs = calloc(j->n, sizeof(*j->reqs));
	j->verdict = calloc(j->n, 1);
	if (!j->hash || !j->start || !j->ntokens || !j->keys || !j->reqs ||
	    !j->verdict) {
		job_free(j);
		return -ENOMEM;
	}
	memcpy(j->hash, f->hash, (size_t)(j->n + 1) * sizeof(*j->hash));
	memcpy(j->start, f->start, j->n * sizeof(*j->start));
	memcpy(j->ntokens, f->ntokens, j->n * sizeof(*j->ntokens));
	for (i = 0; i < j->n; i++) {
		kind = fetch_kind(j, i);
		kvmemd_remote_key(
			j->keys[i], sizeof(j->keys[i]), j->tenant,
			kvmemd_remote_fingerprint(
				&j->g, kind, (uint32_t)j->layout[kind].size),
			j->hash[i + 1]);
	}
	ret = job_queue(r, j);
	if (ret) {
		job_free(j);
		r->n.fetch_errors++;
		return ret;
	}
	r->n.fetches++;
	r->n.blocks_asked += j->n;
	*out = j;
	return 0;
}

void kvmemd_remote_forget(void *job)
{
	struct remote_job *j = job;

	j->done = NULL;
	j->ctx = NULL;
}

/* ---- start, stop, status ---------------------------------------------- */

int kvmemd_remote_init(struct kvmemd *d)
{
	const struct kvmemd_config *cfg = &d->cfg;
	struct kvmemd_remote *r;
	char err[512];
	int ret;

	if (!cfg->remote_seeds[0])
		return 0;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->d = d;
	r->ops = &kvmemd_remote_redis;
	snprintf(r->seeds, sizeof(r->seeds), "%s", cfg->remote_seeds);
	r->timeout_ms = (int)cfg->remote_timeout_ms;
	r->retries = (int)cfg->remote_retries;
	ret = cfg->remote_credentials[0]
		      ? creds_load(r, cfg->remote_credentials, err, sizeof(err))
		      : 0;
	if (ret)
		kvmemd_log(LOG_ERR, "%s", err);
	if (!ret) {
		/* One thread: a connection is used by one thread only. */
		ret = kvmemd_workers_start(1, REMOTE_DEPTH, &r->thread);
		if (ret)
			kvmemd_log_err(LOG_ERR, ret, "remote: thread");
	}
	if (ret) {
		creds_free(r);
		free(r);
		return ret;
	}
	d->remote = r;
	kvmemd_log(LOG_INFO, "remote: shared tier on the %s cluster at %s",
		   r->ops->name, r->seeds);
	return 0;
}

int kvmemd_remote_fd(const struct kvmemd *d)
{
	return d->remote ? kvmemd_workers_fd(d->remote->thread) : -1;
}

void kvmemd_remote_reap(struct kvmemd *d)
{
	struct kvmemd_work *w;

	while ((w = kvmemd_workers_reap(d->remote->thread)))
		w->done(w);
}

void kvmemd_remote_free(struct kvmemd *d)
{
	struct kvmemd_remote *r = d->remote;
	struct kvmemd_work *w;
	unsigned int i;

	if (!r)
		return;
	__atomic_store_n(&r->stopping, 1, __ATOMIC_RELAXED);
	kvmemd_workers_stop(r->thread);
	while ((w = kvmemd_workers_reap(r->thread)))
		w->done(w);
	kvmemd_workers_free(r->thread);
	for (i = 0; i < r->nconns; i++)
		if (r->conns[i].ctx)
			r->ops->close(r->conns[i].ctx);
	free(r->conns);
	creds_free(r);
	free(r);
	d->remote = NULL;
}

int kvmemd_remote_check(const struct kvmemd_config *c, char *err, size_t len)
{
	struct kvmemd_remote r;
	int ret;

	if (!c->remote_seeds[0] || !c->remote_credentials[0])
		return 0;
	memset(&r, 0, sizeof(r));
	ret = creds_load(&r, c->remote_credentials, err, len);
	creds_free(&r);
	return ret;
}

void kvmemd_remote_status(struct kvmemd *d, struct jw *w)
{
	const struct kvmemd_remote *r = d->remote;
	unsigned int i;

	jw_open(w, "remote", '{');
	jw_bool(w, "configured", !!r);
	if (!r) {
		jw_close(w, '}');
		return;
	}
	jw_str(w, "backend", r->ops->name);
	jw_str(w, "seeds", r->seeds);
	jw_str(w, "state", r->error ? "unreachable" : "ok");
	if (r->error) {
		jw_str(w, "reason", r->why);
		jw_u64(w, "since", r->error_at);
	}
	jw_str(w, "nodes", r->nodes);
	jw_u64(w, "tenants_with_credentials", r->ncreds);
	jw_u64(w, "queued_bytes", r->queued_bytes);
	jw_u64(w, "jobs", r->jobs);
	jw_open(w, "push", '{');
	jw_u64(w, "pushed", r->n.pushed);
	jw_u64(w, "present", r->n.push_present);
	jw_u64(w, "dropped", r->n.push_dropped);
	jw_u64(w, "unchained", r->n.push_unchained);
	jw_u64(w, "errors", r->n.push_errors);
	jw_u64(w, "bytes", r->n.push_bytes);
	jw_close(w, '}');
	jw_open(w, "fetch", '{');
	jw_u64(w, "requests", r->n.fetches);
	jw_u64(w, "errors", r->n.fetch_errors);
	jw_u64(w, "blocks_asked", r->n.blocks_asked);
	jw_u64(w, "hits", r->n.hits);
	jw_u64(w, "misses", r->n.misses);
	jw_u64(w, "unanswered", r->n.unanswered);
	jw_u64(w, "kept", r->n.kept);
	jw_u64(w, "keep_refused", r->n.keep_refused);
	jw_u64(w, "bytes", r->n.fetch_bytes);
	jw_u64(w, "repaired", r->n.repaired);
	jw_u64(w, "written_back", r->n.written_back);
	jw_u64(w, "deleted", r->n.deleted);
	jw_u64(w, "words_corrected", r->n.words_corrected);
	jw_u64(w, "words_uncorrectable", r->n.words_uncorrectable);
	jw_open(w, "refused", '{');
	for (i = KVMEMD_REMOTE_BAD_HEADER; i < KVMEMD_REMOTE_VERDICTS; i++)
		jw_u64(w, kvmemd_remote_verdict_names[i], r->n.refused[i]);
	jw_close(w, '}');
	jw_close(w, '}');
	jw_open(w, "client", '{');
	jw_u64(w, "requests", r->bstats.requests);
	jw_u64(w, "redirects", r->bstats.redirects);
	jw_u64(w, "retries", r->bstats.retries);
	jw_u64(w, "timeouts", r->bstats.timeouts);
	jw_u64(w, "errors", r->bstats.errors);
	jw_u64(w, "refreshes", r->bstats.refreshes);
	jw_u64(w, "bytes_out", r->bstats.bytes_out);
	jw_u64(w, "bytes_in", r->bstats.bytes_in);
	jw_u64(w, "masters", r->bstats.masters);
	jw_u64(w, "connected", r->bstats.connected);
	jw_close(w, '}');
	jw_close(w, '}');
}
