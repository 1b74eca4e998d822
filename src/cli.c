/*
 * cli: see cli.h. What the commands share: finding the objfs mount a path
 * is on, numbers for people, and --version.
 */
#include "config.h"

#define FUSE_USE_VERSION 312

#include <curl/curl.h>
#include <errno.h>
#include <fuse.h> /* fuse_pkgversion(); fuse_common.h is not to be included alone */
#include <limits.h>
#include <liburing.h>
#include <openssl/crypto.h>
#include <openssl/opensslv.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "cli.h"

void objfs_version_print(FILE *f, const char *commit)
{
	const curl_version_info_data *cv = curl_version_info(CURLVERSION_NOW);

	fprintf(f, "objfs %s%s%s%s\n", PACKAGE_VERSION, commit && commit[0] ? " (git " : "",
		commit ? commit : "", commit && commit[0] ? ")" : "");
	fprintf(f, "libfuse %s (built with %d.%d)\n", fuse_pkgversion(), FUSE_MAJOR_VERSION,
		FUSE_MINOR_VERSION);
	fprintf(f, "libcurl %s%s%s (built with %s)\n", cv->version, cv->ssl_version ? ", " : "",
		cv->ssl_version ? cv->ssl_version : "", LIBCURL_VERSION);
	fprintf(f, "%s (built with %s)\n", OpenSSL_version(OPENSSL_VERSION), OPENSSL_VERSION_TEXT);
#ifdef IO_URING_VERSION_MAJOR
	fprintf(f, "liburing %d.%d (built with %s)\n", io_uring_major_version(),
		io_uring_minor_version(), OBJFS_URING_VERSION);
#else
	fprintf(f, "liburing %s (as built)\n", OBJFS_URING_VERSION);
#endif
#ifdef HAVE_CUDA
	fputs("CUDA: on (libobjfs fills CUDA device buffers)\n", f);
#else
	fputs("CUDA: off (libobjfs fills host buffers only)\n", f);
#endif
}

/* Undoes mountinfo's octal escapes (\040 for a space, ...) in place. */
static void unescape(char *s)
{
	char *o = s;

	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
		    s[3] >= '0' && s[3] <= '7') {
			*o++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
			s += 3;
		} else {
			*o++ = *s;
		}
	}
	*o = '\0';
}

int objfs_cli_mount_root(const char *path, char *root, size_t cap)
{
	char real[PATH_MAX], *line = NULL;
	size_t lcap = 0, best = 0;
	struct stat st;
	FILE *f;
	int ret = -ENOENT;

	if (stat(path, &st) || !realpath(path, real))
		return -errno;
	f = fopen("/proc/self/mountinfo", "re");
	if (!f)
		return -errno;
	/* "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [TAGS...] - FSTYPE SOURCE SUPER" */
	while (getline(&line, &lcap, f) > 0) {
		char *save = NULL, *mnt, *dash = strstr(line, " - ");
		unsigned maj, min;
		size_t n;

		strtok_r(line, " ", &save);
		strtok_r(NULL, " ", &save);
		if (!dash || sscanf(strtok_r(NULL, " ", &save), "%u:%u", &maj, &min) != 2 ||
		    makedev(maj, min) != st.st_dev || strncmp(dash + 3, "fuse.objfs ", 11))
			continue;
		strtok_r(NULL, " ", &save);
		mnt = strtok_r(NULL, " ", &save);
		if (!mnt)
			continue;
		unescape(mnt);
		n = strlen(mnt);
		/* the mount point @path is under (a bind mount elsewhere shares the device) */
		if (strncmp(real, mnt, n) || (real[n] && real[n] != '/' && n > 1) ||
		    (ret == 0 && n <= best))
			continue;
		if (n >= cap) {
			ret = -ENAMETOOLONG;
			continue;
		}
		memcpy(root, mnt, n + 1);
		best = n;
		ret = 0;
	}
	free(line);
	fclose(f);
	return ret;
}

char *objfs_cli_human(char *buf, size_t cap, double v, const char *unit, int rate)
{
	static const char *const iec[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
	static const char *const si[] = { "", "k", "M", "G", "T", "P" };
	const char *per = rate ? "/s" : "";
	int i = 0;

	if (strcmp(unit, "bytes") == 0) {
		while (v >= 1024 && i < 5) {
			v /= 1024;
			i++;
		}
		snprintf(buf, cap, i ? "%.1f %s%s" : "%.0f %s%s", v, iec[i], per);
	} else if (strcmp(unit, "us") == 0) {
		if (v < 1000)
			snprintf(buf, cap, "%.0f us%s", v, per);
		else if (v < 1e6)
			snprintf(buf, cap, "%.1f ms%s", v / 1e3, per);
		else
			snprintf(buf, cap, "%.2f s%s", v / 1e6, per);
	} else {
		/* counts: whole below 100,000, else in k, M, ... (rates: one decimal below 100) */
		while (v >= 100000 && i < 5) {
			v /= 1000;
			i++;
			while (v >= 1000 && i < 5) {
				v /= 1000;
				i++;
			}
		}
		snprintf(buf, cap, i || (rate && v < 100 && v != (long long)v) ? "%.1f%s%s" :
			 "%.0f%s%s", v, si[i], per);
	}
	return buf;
}
