/* SPDX-License-Identifier: MIT */
/*
 * check_manpages.c - every function libkvmem.so exports has a manual page
 *
 * The functions are what the built library exports (nm -D), checked
 * against libkvmem.map. Then, in man/:
 *   - each function has NAME.3: a page of its own or a ".so man3/PAGE.3"
 *     link to the page of its group, which exists, is no link itself and
 *     lists NAME in its NAME section;
 *   - each kvmem_*.3 is a function's: no page outlives its function;
 *   - the SYNOPSIS of a page gives, for each function its NAME section
 *     lists, the header's declaration word for word (whitespace aside),
 *     after an #include of that header;
 *   - man renders every page without a warning (skipped, with a message,
 *     without man).
 */
#include <ctype.h>
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvmem_check.h"

#define MAX_FUNCS 256
#define NAME_LEN 64

struct names {
	char name[MAX_FUNCS][NAME_LEN];
	size_t n;
};

static void names_add(struct names *ns, const char *name, size_t len)
{
	ck_assert_uint_lt(len, NAME_LEN);
	ck_assert_uint_lt(ns->n, MAX_FUNCS);
	memcpy(ns->name[ns->n], name, len);
	ns->name[ns->n][len] = 0;
	ns->n++;
}

static int names_has(const struct names *ns, const char *name)
{
	size_t i;

	for (i = 0; i < ns->n; i++)
		if (!strcmp(ns->name[i], name))
			return 1;
	return 0;
}

/* The kvmem_* functions the built library exports. */
static void exported(struct names *ns)
{
	char cmd[PATH_MAX + 64], line[512], sym[256], type[8];
	unsigned long long addr;
	FILE *p;

	snprintf(cmd, sizeof(cmd), "nm -D --defined-only %s/libkvmem.so",
		 kvmem_check_builddir());
	p = popen(cmd, "r");
	ck_assert_msg(p != NULL, "%s: cannot run", cmd);
	ns->n = 0;
	while (fgets(line, sizeof(line), p))
		if (sscanf(line, "%llx %7s %255s", &addr, type, sym) == 3 &&
		    !strcmp(type, "T") && !strncmp(sym, "kvmem_", 6))
			/* "kvmem_close@@KVMEM_0.1": the version node cut */
			names_add(ns, sym, strcspn(sym, "@"));
	ck_assert_int_eq(pclose(p), 0);
}

/* The names of the version script's global: section. */
static void map_names(struct names *ns)
{
	char path[PATH_MAX], *text, *line, *save = NULL;

	snprintf(path, sizeof(path), "%s/libkvmem/libkvmem.map",
		 kvmem_check_srcdir());
	text = kvmem_check_read_file(path, NULL);
	ns->n = 0;
	for (line = strtok_r(text, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		while (isspace((unsigned char)*line))
			line++;
		if (!strncmp(line, "kvmem_", 6))
			names_add(ns, line, strcspn(line, ";"));
	}
	free(text);
}

/* man/@name.3, or NULL when there is none. free() it. */
static char *read_page(const char *name)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/man/%s.3", kvmem_check_srcdir(),
		 name);
	if (access(path, F_OK))
		return NULL;
	return kvmem_check_read_file(path, NULL);
}

/* The target page of a ".so man3/PAGE.3" link, in @page; 0 if no link. */
static int link_target(const char *text, char *page, size_t len)
{
	size_t n;

	if (strncmp(text, ".so man3/", 9))
		return 0;
	n = strcspn(text + 9, "\n");
	ck_assert_msg(n > 2 && !strncmp(text + 9 + n - 2, ".3", 2) &&
			      n - 2 < len,
		      "bad .so line: %.*s", (int)n + 9, text);
	memcpy(page, text + 9, n - 2);
	page[n - 2] = 0;
	return 1;
}

/* The functions a page's NAME section lists: "a, b, c \- what". */
static void page_names(const char *page, const char *text, struct names *ns)
{
	const char *p = strstr(text, ".SH NAME\n"), *end;

	ck_assert_msg(p != NULL, "%s.3: no NAME section", page);
	p += 9;
	end = strstr(p, " \\- ");
	ck_assert_msg(end != NULL, "%s.3: NAME has no \" \\- \"", page);
	ns->n = 0;
	while (p < end) {
		size_t n = strcspn(p, ", \n");

		if (n > (size_t)(end - p))
			n = (size_t)(end - p);
		if (n)
			names_add(ns, p, n);
		p += n;
		while (p < end && (*p == ',' || *p == ' ' || *p == '\n'))
			p++;
	}
}

START_TEST(test_exports_match_map)
{
	static struct names lib, map;
	size_t i;

	exported(&lib);
	map_names(&map);
	ck_assert_uint_ge(lib.n, 40);
	for (i = 0; i < map.n; i++)
		ck_assert_msg(names_has(&lib, map.name[i]),
			      "%s: in libkvmem.map, not exported",
			      map.name[i]);
	ck_assert_uint_eq(lib.n, map.n);
}
END_TEST

START_TEST(test_every_function_has_a_page)
{
	static struct names lib, listed;
	char target[NAME_LEN];
	size_t i, missing = 0;

	exported(&lib);
	for (i = 0; i < lib.n; i++) {
		const char *name = lib.name[i];
		char *text = read_page(name), *page;

		if (!text) {
			fprintf(stderr, "%s: no man/%s.3\n", name, name);
			missing++;
			continue;
		}
		if (!link_target(text, target, sizeof(target))) {
			free(text);
			continue;
		}
		page = read_page(target);
		ck_assert_msg(page != NULL, "%s.3 leads to %s.3, missing",
			      name, target);
		ck_assert_msg(!link_target(page, target, sizeof(target)),
			      "%s.3 leads to a link", name);
		page_names(target, page, &listed);
		ck_assert_msg(names_has(&listed, name),
			      "%s.3 leads to %s.3, whose NAME does not list it",
			      name, target);
		free(page);
		free(text);
	}
	ck_assert_msg(missing == 0, "%zu exported functions have no page",
		      missing);
}
END_TEST

START_TEST(test_no_page_without_function)
{
	static struct names lib, listed;
	char dir[PATH_MAX], name[NAME_LEN];
	struct dirent *e;
	size_t i, n;
	DIR *d;

	exported(&lib);
	snprintf(dir, sizeof(dir), "%s/man", kvmem_check_srcdir());
	d = opendir(dir);
	ck_assert_msg(d != NULL, "%s: cannot open", dir);
	while ((e = readdir(d))) {
		char *text;

		n = strlen(e->d_name);
		if (strncmp(e->d_name, "kvmem_", 6) || n < 3 ||
		    strcmp(e->d_name + n - 2, ".3"))
			continue;
		ck_assert_uint_lt(n - 2, sizeof(name));
		memcpy(name, e->d_name, n - 2);
		name[n - 2] = 0;
		ck_assert_msg(names_has(&lib, name),
			      "man/%s: no such function is exported",
			      e->d_name);
		text = read_page(name);
		if (!link_target(text, dir, sizeof(dir))) {
			page_names(name, text, &listed);
			for (i = 0; i < listed.n; i++)
				ck_assert_msg(names_has(&lib, listed.name[i]),
					      "man/%s lists %s, not exported",
					      e->d_name, listed.name[i]);
			ck_assert_msg(names_has(&listed, name),
				      "man/%s: NAME does not list %s",
				      e->d_name, name);
		}
		free(text);
	}
	closedir(d);
}
END_TEST

/* @s with runs of white space as one blank, none after '(' or before ')'. */
static void normalize(char *s)
{
	char *w = s, *r = s;
	int blank = 0;

	for (; *r; r++) {
		if (isspace((unsigned char)*r)) {
			blank = 1;
			continue;
		}
		if (blank && w > s && w[-1] != '(' && *r != ')')
			*w++ = ' ';
		blank = 0;
		*w++ = *r;
	}
	*w = 0;
}

/*
 * The declaration of @name in the installed headers, normalized, in @decl;
 * its header's name in @header. A declaration starts in column 0 with its
 * type (as check_abi.c reads them) and ends at its ';'.
 */
static void header_decl(const char *name, char *decl, size_t len,
			char *header, size_t hlen)
{
	static const char *const headers[] = { "kvmem.h", "page.h", "ecc.h",
					       "quant.h", "inject.h",
					       "crc32c.h", "cuda.h" };
	char path[PATH_MAX], pat[NAME_LEN + 2];
	size_t i;

	snprintf(pat, sizeof(pat), "%s(", name);
	for (i = 0; i < sizeof(headers) / sizeof(headers[0]); i++) {
		char *text, *p, *line, *semi;

		snprintf(path, sizeof(path), "%s/libkvmem/include/kvmem/%s",
			 kvmem_check_srcdir(), headers[i]);
		text = kvmem_check_read_file(path, NULL);
		for (p = strstr(text, pat); p; p = strstr(p + 1, pat)) {
			if (p > text && (isalnum((unsigned char)p[-1]) ||
					 p[-1] == '_'))
				continue;
			line = p;
			while (line > text && line[-1] != '\n')
				line--;
			if (!isalpha((unsigned char)*line) ||
			    !strncmp(line, "typedef", 7))
				continue;
			semi = strchr(p, ';');
			ck_assert_msg(semi && (size_t)(semi - line) < len,
				      "%s: declaration of %s", headers[i], name);
			memcpy(decl, line, (size_t)(semi - line + 1));
			decl[semi - line + 1] = 0;
			normalize(decl);
			snprintf(header, hlen, "%s", headers[i]);
			free(text);
			return;
		}
		free(text);
	}
	ck_abort_msg("%s: declared in no public header", name);
}

/*
 * The SYNOPSIS of a page as text: the arguments of its .B, .BI and .BR
 * lines, quoted or not, joined as roff sets them (.B: a blank between
 * arguments; .BI, .BR: none), a blank between lines.
 */
static char *synopsis_text(const char *page, const char *text)
{
	const char *p = strstr(text, ".SH SYNOPSIS\n"), *end;
	char *out, *w;

	ck_assert_msg(p != NULL, "%s.3: no SYNOPSIS", page);
	end = strstr(p + 1, "\n.SH ");
	ck_assert_msg(end != NULL, "%s.3: nothing after SYNOPSIS", page);
	out = kvmem_check_xmalloc((size_t)(end - p) + 1);
	w = out;
	while (p < end) {
		const char *eol = memchr(p, '\n', (size_t)(end - p));

		if (!eol)
			eol = end;
		if (!strncmp(p, ".B ", 3) || !strncmp(p, ".BI ", 4) ||
		    !strncmp(p, ".BR ", 4)) {
			int spaced = p[2] == ' ';

			p = strchr(p, ' ');
			while (p < eol) {
				if (*p == ' ') {
					p++;
					if (spaced && w > out && w[-1] != ' ')
						*w++ = ' ';
				} else if (*p == '"') {
					for (p++; p < eol && *p != '"'; p++)
						*w++ = *p;
					p++;
				} else {
					while (p < eol && *p != ' ')
						*w++ = *p++;
				}
			}
			*w++ = ' ';
		}
		p = eol + 1;
	}
	*w = 0;
	return out;
}

START_TEST(test_synopsis_matches_header)
{
	static struct names lib, listed;
	char decl[1024], header[32], include[64], got[1024];
	size_t i, j, pages = 0;

	exported(&lib);
	for (i = 0; i < lib.n; i++) {
		char *text = read_page(lib.name[i]), *syn, *start, *semi;

		if (!text || !strncmp(text, ".so ", 4)) {
			free(text);
			continue;
		}
		pages++;
		page_names(lib.name[i], text, &listed);
		syn = synopsis_text(lib.name[i], text);
		normalize(syn);
		for (j = 0; j < listed.n; j++) {
			char pat[NAME_LEN + 2];

			header_decl(listed.name[j], decl, sizeof(decl), header,
				    sizeof(header));
			snprintf(include, sizeof(include),
				 "#include <kvmem/%s>", header);
			ck_assert_msg(strstr(syn, include),
				      "%s.3: no %s for %s", lib.name[i],
				      include, listed.name[j]);
			snprintf(pat, sizeof(pat), "%s(", listed.name[j]);
			start = strstr(syn, pat);
			ck_assert_msg(start != NULL, "%s.3: SYNOPSIS lacks %s",
				      lib.name[i], listed.name[j]);
			/* Back to the start of the declaration. */
			while (start > syn && start[-1] != ';' &&
			       start[-1] != '>')
				start--;
			while (*start == ' ')
				start++;
			semi = strchr(start, ';');
			ck_assert_msg(semi && (size_t)(semi - start) <
						      sizeof(got),
				      "%s.3: %s has no ';'", lib.name[i],
				      listed.name[j]);
			memcpy(got, start, (size_t)(semi - start + 1));
			got[semi - start + 1] = 0;
			ck_assert_msg(!strcmp(got, decl),
				      "%s.3: SYNOPSIS\n  %s\nbut %s says\n  %s",
				      lib.name[i], got, header, decl);
		}
		free(syn);
		free(text);
	}
	ck_assert_uint_gt(pages, 10);
}
END_TEST

/* What man --warnings writes to stderr for @path: "" when all is well. */
static char *man_warnings(const char *path)
{
	char cmd[PATH_MAX + 96], buf[4096];
	size_t n, len = 0;
	char *out = kvmem_check_xmalloc(1);
	FILE *p;

	snprintf(cmd, sizeof(cmd),
		 "MANWIDTH=80 man --warnings -l '%s' 2>&1 >/dev/null", path);
	p = popen(cmd, "r");
	ck_assert_msg(p != NULL, "%s: cannot run", cmd);
	while ((n = fread(buf, 1, sizeof(buf), p)) > 0) {
		out = realloc(out, len + n + 1);
		ck_assert_ptr_nonnull(out);
		memcpy(out + len, buf, n);
		len += n;
	}
	out[len] = 0;
	ck_assert_int_eq(pclose(p), 0);
	return out;
}

START_TEST(test_pages_render_cleanly)
{
	char dir[PATH_MAX], path[PATH_MAX * 2], tmp[PATH_MAX];
	struct dirent *e;
	int pages = 0;
	char *warn;
	DIR *d;

	if (!kvmem_check_have("man")) {
		fprintf(stderr, "SKIP: test_pages_render_cleanly: no man in "
				"PATH; the pages are not rendered\n");
		return;
	}
	/* man --warnings reports a page that is wrong: this test can fail. */
	kvmem_check_tmpdir_make(tmp, sizeof(tmp), "manpages");
	snprintf(path, sizeof(path), "%s/bad.3", tmp);
	kvmem_check_write_file(path, ".TH BAD 3\n.SH NAME\nbad \\- bad\n"
				     ".XQ not a macro\n\\*[nostring]\n");
	warn = man_warnings(path);
	ck_assert_msg(*warn, "man --warnings said nothing of %s", path);
	free(warn);
	kvmem_check_tmpdir_remove(tmp);

	snprintf(dir, sizeof(dir), "%s/man", kvmem_check_srcdir());
	d = opendir(dir);
	ck_assert_msg(d != NULL, "%s: cannot open", dir);
	while ((e = readdir(d))) {
		size_t n = strlen(e->d_name);
		char *text;

		if (e->d_name[0] == '.' || n < 3 || e->d_name[n - 2] != '.' ||
		    !isdigit((unsigned char)e->d_name[n - 1]))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		text = kvmem_check_read_file(path, NULL);
		/* A link renders its target, which is rendered on its own. */
		if (!strncmp(text, ".so ", 4)) {
			free(text);
			continue;
		}
		free(text);
		warn = man_warnings(path);
		ck_assert_msg(!*warn, "man/%s:\n%s", e->d_name, warn);
		free(warn);
		pages++;
	}
	closedir(d);
	ck_assert_int_gt(pages, 20);
}
END_TEST

KVMEM_SUITE(manpages)
{
	Suite *s = suite_create("manpages");
	TCase *tc = tcase_create("manpages");

	tcase_add_test(tc, test_exports_match_map);
	tcase_add_test(tc, test_every_function_has_a_page);
	tcase_add_test(tc, test_no_page_without_function);
	tcase_add_test(tc, test_synopsis_matches_header);
	tcase_add_test(tc, test_pages_render_cleanly);
	suite_add_tcase(s, tc);
	return s;
}
