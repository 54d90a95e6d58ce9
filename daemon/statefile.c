/* SPDX-License-Identifier: MIT */
/*
 * statefile.c - whole files, written and read: the records and indexes of
 * the state directory (record.c, resume.c, prefix-save.c,
 * prefix-disk.c)
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvmemd.h"

int kvmemd_file_write_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	ssize_t n;

	while (len) {
		n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int kvmemd_file_replace(const char *path, const void *buf, size_t len, int sync)
{
	int fd, ret;

	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	ret = kvmemd_file_write_all(fd, buf, len);
	/* What a longer copy left after this one is not part of it. */
	if (!ret && ftruncate(fd, (off_t)len))
		ret = -errno;
	if (!ret && sync && fsync(fd))
		ret = -errno;
	if (close(fd) && !ret)
		ret = -errno;
	return ret;
}

int kvmemd_file_read(const char *path, uint8_t **buf, size_t *size)
{
	struct stat st;
	size_t got = 0;
	ssize_t n;
	int fd, ret = 0;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) || st.st_size < 0 ||
	    (uint64_t)st.st_size > SIZE_MAX / 2) {
		close(fd);
		return -EINVAL;
	}
	*buf = malloc((size_t)st.st_size + 1);
	if (!*buf) {
		close(fd);
		return -ENOMEM;
	}
	while (got < (size_t)st.st_size) {
		n = read(fd, *buf + got, (size_t)st.st_size - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			ret = n < 0 ? -errno : -EIO;
			break;
		}
		got += (size_t)n;
	}
	close(fd);
	if (ret) {
		free(*buf);
		*buf = NULL;
		return ret;
	}
	*size = got;
	return 0;
}

int kvmemd_file_pair_read(const char *const path[2],
			  int (*check)(const uint8_t *buf, size_t size,
				       void *ctx, uint64_t *generation,
				       char *why, size_t len),
			  void *ctx, struct kvmemd_file_pair *out)
{
	uint8_t *b[2] = { NULL, NULL };
	uint64_t gen[2] = { 0, 0 };
	size_t n[2] = { 0, 0 };
	int i, ret;

	memset(out, 0, sizeof(*out));
	for (i = 0; i < 2; i++) {
		ret = kvmemd_file_read(path[i], &b[i], &n[i]);
		out->present[i] = ret != -ENOENT;
		if (ret) {
			snprintf(out->why[i], sizeof(out->why[i]), "%s",
				 ret == -ENOENT ? "not there" : strerror(-ret));
			continue;
		}
		out->ok[i] = !check(b[i], n[i], ctx, &gen[i], out->why[i],
				    sizeof(out->why[i]));
	}
	i = out->ok[1] && (!out->ok[0] || gen[1] > gen[0]);
	if (!out->ok[i]) {
		free(b[0]);
		free(b[1]);
		return -ENOENT;
	}
	free(b[!i]);
	out->buf = b[i];
	out->size = n[i];
	out->which = i;
	out->generation = gen[i];
	return 0;
}
