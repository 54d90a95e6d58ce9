/* SPDX-License-Identifier: MIT */
/*
 * kvmem-ecc - encode, decode and corrupt codewords from the command line
 *
 *   kvmem-ecc encode -c CODEC            data words in, codewords out
 *   kvmem-ecc decode -c CODEC            codewords in, "DATA STATUS" out
 *   kvmem-ecc inject -c CODEC --ber P    codewords in, corrupted codewords out
 *
 * Words are hex numbers of exactly the codec's width (DESIGN.md section 3);
 * the number is the codeword's value, bit i being 2^i. The whole input is
 * read and checked before anything is printed, so bad input never leaves a
 * half-written output behind, and the bulk library calls see the input as
 * one buffer: the same input and seed give the same injected flips however
 * the input is split into lines.
 *
 * Exit status: 0 success, 1 decode met an uncorrectable word, 2 usage, input
 * or I/O error.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvmem/ecc.h"
#include "kvmem/inject.h"
#include "kvmem/kvmem.h"
#include "bitstream.h"

#define PROG "kvmem-ecc"

#define EXIT_UE 1
#define EXIT_USAGE 2

/* Longest token quoted back in an error message; the rest is elided. */
#define QUOTE_MAX 40

enum cmd {
	CMD_ENCODE,
	CMD_DECODE,
	CMD_INJECT,
};

static const char *const cmd_names[] = {
	[CMD_ENCODE] = "encode",
	[CMD_DECODE] = "decode",
	[CMD_INJECT] = "inject",
};

enum {
	OPT_BER = 256,
	OPT_SEED,
	OPT_CHANNEL,
	OPT_VERSION,
};

static const struct option long_opts[] = {
	{ "codec", required_argument, NULL, 'c' },
	{ "ber", required_argument, NULL, OPT_BER },
	{ "seed", required_argument, NULL, OPT_SEED },
	{ "channel", required_argument, NULL, OPT_CHANNEL },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, OPT_VERSION },
	{ NULL, 0, NULL, 0 },
};

/* Parsed words, each stored little-endian in a slot of @stride bytes. */
struct words {
	uint8_t *buf;
	size_t n;
	size_t cap;
	size_t stride;
};

static unsigned int data_digits(const struct kvmem_codec_info *ci)
{
	return ci->data_bits / 4;
}

/* Every codec's word fills its bytes' worth of hex digits. */
static unsigned int code_digits(const struct kvmem_codec_info *ci)
{
	return ci->word_bytes * 2;
}

static void usage(FILE *f)
{
	const struct kvmem_codec_info *ci;
	int c;

	fprintf(f,
		"Usage: " PROG " encode -c CODEC < DATA\n"
		"       " PROG " decode -c CODEC < CODES\n"
		"       " PROG " inject -c CODEC --ber P [--seed S] "
		"[--channel SPEC] < CODES\n"
		"\n"
		"Commands:\n"
		"  encode   read data words, print one codeword per line\n"
		"  decode   read codewords, print \"DATA STATUS\" per line,\n"
		"           STATUS one of ok, corrected, uncorrectable\n"
		"  inject   read codewords, flip bits through a fault channel\n"
		"           (default: each live bit with probability P), print\n"
		"           the codewords\n"
		"\n"
		"Options:\n"
		"  -c, --codec CODEC  the code (required)\n"
		"      --ber P        inject: bit error rate, 0 <= P <= 1 (required)\n"
		"      --seed S       inject: unsigned integer seed (default 1)\n"
		"      --channel SPEC inject: the fault channel (default bsc):\n"
		"                       bsc          each live bit, P per bit\n"
		"                       exact:K      K flips in every word\n"
		"                       burst:K      K adjacent bits, P per bit\n"
		"                       byte:K       K bits of a byte, P per byte\n"
		"                       adjacent:K   a bit in each of K bytes,\n"
		"                                    P per byte\n"
		"                       line[:BYTES] a garbled line (64 bytes),\n"
		"                                    P per line\n"
		"                       column:ROW   bit columns stuck in rows of\n"
		"                                    ROW bytes, P per column\n"
		"  -h, --help         print this help and exit\n"
		"      --version      print the version and exit\n"
		"\n"
		"Codecs, with the width of a word in hex digits:\n"
		"  codec      data  codeword\n");
	for (c = 0; c < KVMEM_CODEC_NR; c++) {
		ci = kvmem_codec_get(c);
		fprintf(f, "  %-9s  %4u  %8u\n", ci->name, data_digits(ci),
			code_digits(ci));
	}
	fprintf(f,
		"\n"
		"Input is hex words of exactly that width, no 0x prefix, separated\n"
		"by any whitespace; '#' starts a comment that runs to the end of\n"
		"the line. Output is lowercase hex, zero-padded, one word a line.\n"
		"\n"
		"Exit status: 0 success, 1 decode found an uncorrectable word,\n"
		"2 usage, input or I/O error.\n");
}

__attribute__((format(printf, 1, 2))) static int bad_usage(const char *fmt, ...)
{
	va_list ap;

	fputs(PROG ": ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\n", stderr);
	usage(stderr);
	return EXIT_USAGE;
}

static int is_space(int ch)
{
	return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' ||
	       ch == '\v' || ch == '\f';
}

static int hex_value(int ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

static int words_grow(struct words *w)
{
	size_t cap = w->cap ? w->cap * 2 : 1024;
	uint8_t *p;

	if (cap < w->cap || cap > SIZE_MAX / w->stride)
		return -ENOMEM;
	p = realloc(w->buf, cap * w->stride);
	if (!p)
		return -ENOMEM;
	w->buf = p;
	w->cap = cap;
	return 0;
}

/* The token is arbitrary bytes: keep control characters off the terminal. */
static void quote_error(unsigned long line, const char *tok, size_t len,
			const char *what)
{
	size_t i;

	fprintf(stderr, PROG ": line %lu: '", line);
	for (i = 0; i < len && i < QUOTE_MAX; i++)
		fputc(tok[i] >= 0x20 && tok[i] < 0x7f ? tok[i] : '?', stderr);
	fprintf(stderr, "%s' %s\n", len > QUOTE_MAX ? "..." : "", what);
}

/* Check one token of line @line and append its value to @w. */
static int add_token(struct words *w, const char *tok, size_t len,
		     unsigned int digits, const char *kind, unsigned long line)
{
	int prefixed = len > 1 && tok[0] == '0' && (tok[1] | 0x20) == 'x';
	char what[96];
	uint8_t *slot;
	size_t i;
	int ret;

	for (i = 0; i < len; i++) {
		if (hex_value((unsigned char)tok[i]) < 0) {
			quote_error(line, tok, len,
				    prefixed ? "is not hex (no 0x prefix)"
					     : "is not hex");
			return -EINVAL;
		}
	}
	if (len != digits) {
		snprintf(what, sizeof(what), "has %zu hex %s; %s are %u digits",
			 len, len == 1 ? "digit" : "digits", kind, digits);
		quote_error(line, tok, len, what);
		return -EINVAL;
	}
	if (w->n == w->cap) {
		ret = words_grow(w);
		if (ret)
			return ret;
	}
	slot = w->buf + w->n * w->stride;
	memset(slot, 0, w->stride);
	/* The last digit is the least significant nibble. */
	for (i = 0; i < len; i++)
		slot[i / 2] |=
			(uint8_t)(hex_value((unsigned char)tok[len - 1 - i])
				  << (4 * (i % 2)));
	w->n++;
	return 0;
}

/*
 * Read all of stdin into @w: whitespace-separated words of @ci's data width
 * (@data) or codeword width, each in a slot of @w->stride bytes.
 */
static int read_words(struct words *w, const struct kvmem_codec_info *ci,
		      int data)
{
	unsigned int digits = data ? data_digits(ci) : code_digits(ci);
	char kind[32];
	unsigned long line = 0;
	char *buf = NULL;
	size_t bufsz = 0;
	ssize_t len;
	size_t i, start;
	int ret = 0;

	snprintf(kind, sizeof(kind), "%s %s", ci->name,
		 data ? "data words" : "codewords");
	for (;;) {
		errno = 0;
		len = getline(&buf, &bufsz, stdin);
		if (len < 0)
			break;
		line++;
		i = 0;
		while (i < (size_t)len && buf[i] != '#') {
			if (is_space((unsigned char)buf[i])) {
				i++;
				continue;
			}
			start = i;
			while (i < (size_t)len && buf[i] != '#' &&
			       !is_space((unsigned char)buf[i]))
				i++;
			ret = add_token(w, buf + start, i - start, digits, kind,
					line);
			if (ret)
				goto out;
		}
	}
	/* getline() fails without setting the error flag when out of memory. */
	if (ferror(stdin)) {
		fprintf(stderr, PROG ": reading standard input: %s\n",
			strerror(errno));
		ret = -EIO;
	} else if (errno == ENOMEM) {
		ret = -ENOMEM;
	}
out:
	free(buf);
	if (ret == -ENOMEM)
		fprintf(stderr, PROG ": out of memory\n");
	return ret;
}

static uint64_t slot_value(const uint8_t *slot, size_t nbytes)
{
	uint64_t v = 0;
	size_t i;

	for (i = nbytes; i-- > 0;)
		v = v << 8 | slot[i];
	return v;
}

static void print_code(const uint8_t *cw, unsigned int word_bytes)
{
	unsigned int i;

	for (i = word_bytes; i-- > 0;)
		printf("%02x", cw[i]);
	putchar('\n');
}

static void print_codes(const uint8_t *code, size_t n,
			const struct kvmem_codec_info *ci)
{
	size_t w;

	for (w = 0; w < n; w++)
		print_code(code + w * ci->word_bytes, ci->word_bytes);
}

static const char *plural(uint64_t n, const char *one, const char *many)
{
	return n == 1 ? one : many;
}

static int cmd_encode(int codec, const struct kvmem_codec_info *ci)
{
	struct words w = { .stride = (ci->data_bits + 7) / 8 };
	uint8_t *data = NULL, *code = NULL;
	size_t i;
	int ret;

	ret = read_words(&w, ci, 1);
	if (ret || !w.n)
		goto out;
	data = calloc(1, kvmem_ecc_data_bytes(codec, w.n));
	code = malloc(kvmem_ecc_code_bytes(codec, w.n));
	if (!data || !code) {
		fprintf(stderr, PROG ": out of memory\n");
		ret = -ENOMEM;
		goto out;
	}
	for (i = 0; i < w.n; i++)
		put_bits(data, i * ci->data_bits,
			 slot_value(w.buf + i * w.stride, w.stride),
			 ci->data_bits);
	ret = kvmem_ecc_encode(codec, data, code, w.n);
	if (ret) {
		fprintf(stderr, PROG ": encode: %s\n", strerror(-ret));
		goto out;
	}
	print_codes(code, w.n, ci);
out:
	free(code);
	free(data);
	free(w.buf);
	return ret;
}

/* Return: 0, -EBADMSG when a word was uncorrectable, or another -errno. */
static int cmd_decode(int codec, const struct kvmem_codec_info *ci)
{
	static const char *const status_names[] = {
		[KVMEM_ECC_CLEAN] = "ok",
		[KVMEM_ECC_CORRECTED] = "corrected",
		[KVMEM_ECC_UNCORRECTABLE] = "uncorrectable",
	};
	struct words w = { .stride = ci->word_bytes };
	struct kvmem_ecc_counts counts = { 0 };
	uint8_t *data = NULL, *status = NULL;
	size_t i;
	int ret;

	ret = read_words(&w, ci, 0);
	if (ret)
		goto out;
	if (w.n) {
		data = malloc(kvmem_ecc_data_bytes(codec, w.n));
		status = malloc(w.n);
		if (!data || !status) {
			fprintf(stderr, PROG ": out of memory\n");
			ret = -ENOMEM;
			goto out;
		}
		ret = kvmem_ecc_decode(codec, w.buf, data, w.n, &counts, status,
				       NULL);
		/* -EBADMSG still fills every output in. */
		if (ret && ret != -EBADMSG) {
			fprintf(stderr, PROG ": decode: %s\n", strerror(-ret));
			goto out;
		}
		ret = 0;
	}
	for (i = 0; i < w.n; i++) {
		if (status[i] >=
		    sizeof(status_names) / sizeof(status_names[0])) {
			fprintf(stderr,
				PROG ": decode: word %zu: bad status %u\n", i,
				status[i]);
			ret = -EPROTO;
			goto out;
		}
		printf("%0*" PRIx64 " %s\n", (int)data_digits(ci),
		       get_bits(data, i * ci->data_bits, ci->data_bits),
		       status_names[status[i]]);
	}
	fprintf(stderr,
		PROG ": %zu %s: %" PRIu64 " ok, %" PRIu64 " corrected, %" PRIu64
		     " uncorrectable\n",
		w.n, plural(w.n, "word", "words"), counts.clean,
		counts.corrected, counts.uncorrectable);
out:
	free(status);
	free(data);
	free(w.buf);
	if (!ret && counts.uncorrectable)
		ret = -EBADMSG;
	return ret;
}

static int cmd_inject(int codec, const struct kvmem_codec_info *ci, double ber,
		      uint64_t seed, const struct kvmem_inject_params *chan)
{
	struct words w = { .stride = ci->word_bytes };
	struct kvmem_inject_report rep = { 0 };
	struct kvmem_inject_params params;
	const char *sep = " (";
	unsigned int i;
	int ret;

	ret = kvmem_inject_params_for_codec(&params, codec, ber, seed);
	params.mode = chan->mode;
	params.k = chan->k;
	if (ret) {
		fprintf(stderr, PROG ": inject: %s\n", strerror(-ret));
		goto out;
	}
	ret = read_words(&w, ci, 0);
	if (ret)
		goto out;
	if (w.n) {
		ret = kvmem_inject(w.buf, w.n, &params, &rep);
		if (ret) {
			fprintf(stderr, PROG ": inject: %s\n", strerror(-ret));
			goto out;
		}
	}
	print_codes(w.buf, w.n, ci);
	fprintf(stderr,
		PROG ": %zu %s: %" PRIu64 " %s flipped, %" PRIu64 " %s hit",
		w.n, plural(w.n, "word", "words"), rep.bits,
		plural(rep.bits, "bit", "bits"), rep.words,
		plural(rep.words, "word", "words"));
	for (i = 1; i < KVMEM_INJECT_HIST; i++) {
		if (!rep.by_flips[i])
			continue;
		fprintf(stderr, "%s%u%s %s: %" PRIu64, sep, i,
			i == KVMEM_INJECT_HIST - 1 ? "+" : "",
			plural(i, "flip", "flips"), rep.by_flips[i]);
		sep = ", ";
	}
	fputs(rep.words ? ")\n" : "\n", stderr);
out:
	free(w.buf);
	return ret;
}

/*
 * A number in [0, 1], the whole of @s. ERANGE is not checked: underflow
 * (1e-400) is a fine tiny rate, and overflow fails the range test.
 */
static int parse_ber(const char *s, double *ber)
{
	char *end;
	double v;

	v = strtod(s, &end);
	if (end == s || *end)
		return -EINVAL;
	/* Written so that NaN fails too. */
	if (!(v >= 0.0 && v <= 1.0))
		return -ERANGE;
	*ber = v;
	return 0;
}

/* A decimal unsigned integer; strtoull alone would accept "-1". */
static int parse_seed(const char *s, uint64_t *seed)
{
	unsigned long long v;
	char *end;

	if (*s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (*end || errno == ERANGE)
		return -EINVAL;
	*seed = v;
	return 0;
}

/* Exit status for @ret; output that never reached its file is an error. */
static int finish_output(int ret)
{
	int err = 0;

	if (fflush(stdout))
		err = errno;
	else if (ferror(stdout))
		err = EIO;
	if (err) {
		fprintf(stderr, PROG ": writing standard output: %s\n",
			strerror(err));
		return EXIT_USAGE;
	}
	if (ret == -EBADMSG)
		return EXIT_UE;
	return ret ? EXIT_USAGE : 0;
}

int main(int argc, char **argv)
{
	const char *codec_name = NULL, *ber_arg = NULL, *seed_arg = NULL;
	const char *channel_arg = NULL;
	struct kvmem_inject_params chan = { .mode = KVMEM_INJECT_BSC };
	const char *cmd_arg = NULL;
	const struct kvmem_codec_info *ci;
	uint64_t seed = 1;
	double ber = 0.0;
	int opt, codec, cmd, ret;

	/*
	 * Leading '-': positional arguments come back in order as option 1,
	 * so "encode -c h84" and "-c h84 encode" both work even under
	 * POSIXLY_CORRECT; ':' lets us word the errors ourselves.
	 */
	opterr = 0;
	while ((opt = getopt_long(argc, argv, "-:c:h", long_opts, NULL)) !=
	       -1) {
		switch (opt) {
		case 1:
			if (cmd_arg)
				return bad_usage("unexpected argument '%s'",
						 optarg);
			cmd_arg = optarg;
			break;
		case 'c':
			codec_name = optarg;
			break;
		case OPT_BER:
			ber_arg = optarg;
			break;
		case OPT_SEED:
			seed_arg = optarg;
			break;
		case OPT_CHANNEL:
			channel_arg = optarg;
			break;
		case 'h':
			usage(stdout);
			return finish_output(0);
		case OPT_VERSION:
			printf(PROG " %s\n", kvmem_version());
			return finish_output(0);
		case ':':
			return bad_usage("option '%s' needs an argument",
					 argv[optind - 1]);
		default:
			/* A bad letter may sit inside a cluster like -hx. */
			if (optopt)
				return bad_usage("unknown option '-%c'",
						 optopt);
			return bad_usage("unknown option '%s'",
					 argv[optind - 1]);
		}
	}
	/* Whatever follows "--". */
	if (optind < argc) {
		if (cmd_arg || optind + 1 < argc)
			return bad_usage("unexpected argument '%s'",
					 argv[cmd_arg ? optind : optind + 1]);
		cmd_arg = argv[optind];
	}
	if (!cmd_arg)
		return bad_usage("no command given");
	for (cmd = 0; cmd < (int)(sizeof(cmd_names) / sizeof(cmd_names[0]));
	     cmd++)
		if (!strcmp(cmd_arg, cmd_names[cmd]))
			break;
	if (cmd == (int)(sizeof(cmd_names) / sizeof(cmd_names[0])))
		return bad_usage("unknown command '%s'", cmd_arg);

	if (!codec_name) {
		fprintf(stderr,
			PROG ": %s needs -c CODEC (try '" PROG " --help')\n",
			cmd_arg);
		return EXIT_USAGE;
	}
	codec = kvmem_codec_by_name(codec_name);
	ci = codec < 0 ? NULL : kvmem_codec_get(codec);
	if (!ci) {
		fprintf(stderr,
			PROG
			": unknown codec '%s' (h74, h84, golay24, secded72)\n",
			codec_name);
		return EXIT_USAGE;
	}

	if (cmd != CMD_INJECT && (ber_arg || seed_arg || channel_arg)) {
		fprintf(stderr, PROG ": %s only applies to inject\n",
			ber_arg	   ? "--ber"
			: seed_arg ? "--seed"
				   : "--channel");
		return EXIT_USAGE;
	}
	if (cmd == CMD_INJECT) {
		if (!ber_arg) {
			fprintf(stderr, PROG ": inject needs --ber P\n");
			return EXIT_USAGE;
		}
		if (parse_ber(ber_arg, &ber)) {
			fprintf(stderr,
				PROG ": --ber '%s': not a number in [0, 1]\n",
				ber_arg);
			return EXIT_USAGE;
		}
		if (channel_arg && kvmem_inject_parse(&chan, channel_arg)) {
			fprintf(stderr,
				PROG
				": --channel '%s': not bsc, exact:K, burst:K, "
				"byte:K (K 1..8), adjacent:K, line[:BYTES] "
				"or column:ROW\n",
				channel_arg);
			return EXIT_USAGE;
		}
		if (seed_arg && parse_seed(seed_arg, &seed)) {
			fprintf(stderr,
				PROG
				": --seed '%s': not an unsigned 64-bit integer\n",
				seed_arg);
			return EXIT_USAGE;
		}
	}

	switch (cmd) {
	case CMD_ENCODE:
		ret = cmd_encode(codec, ci);
		break;
	case CMD_DECODE:
		ret = cmd_decode(codec, ci);
		break;
	default:
		ret = cmd_inject(codec, ci, ber, seed, &chan);
		break;
	}
	return finish_output(ret);
}
