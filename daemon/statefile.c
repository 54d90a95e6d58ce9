/* SPDX-License-Identifier: MIT */
/*
 * statefile.c - whole files, written and read: the records and indexes of
 * the state directory (record.c, resume.c, prefix-save.c,
 * prefix-disk.c)
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
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
