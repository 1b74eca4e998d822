/*
 * cli: the commands of the objfs binary besides mounting, for the user of
 * a mount (as `juicefs stats` and `juicefs warmup` are):
 *
 *   objfs stats MOUNT [-i SECS] [-n COUNT]   the counters as a table
 *   objfs warmup [-p N] [-q] PATH...         files read into the caches
 *
 * and --version. They talk to a mount only through its files: `stats`
 * reads MOUNT/.objfs-stats (its keys described by the counter table,
 * counters.h), `warmup` reads files as any program does, so what it
 * fetches lands in the memory cache and, with cache_dir, on disk. Both
 * first check, in /proc/self/mountinfo, that the path is on an objfs
 * mount, so a wrong path gets a clear message instead of a silent no-op.
 */
#ifndef OBJFS_CLI_H
#define OBJFS_CLI_H

#include <stddef.h>
#include <stdio.h>

/* The commands; @argv[0] is the command's name. Return the exit status. */
int objfs_cli_stats(int argc, char **argv);
int objfs_cli_warmup(int argc, char **argv);

/*
 * --version: objfs's version and @commit (the git commit it was built
 * from, "" when not built from git), the libraries' versions as loaded
 * (libfuse, libcurl, OpenSSL) and as built (liburing), and whether
 * libobjfs was built with CUDA.
 */
void objfs_version_print(FILE *f, const char *commit);

/*
 * Finds the objfs mount that @path is on: writes its mount point into
 * @root. 0; -ENOENT when @path is on another file system; -errno when it
 * cannot be looked at.
 */
int objfs_cli_mount_root(const char *path, char *root, size_t cap);

/*
 * @v in @unit (a counter table unit: "bytes", "us", anything else a
 * count) for people: "1.5 GiB", "12.0 ms", "1234", "12.3M". @rate adds
 * "/s". Returns @buf.
 */
char *objfs_cli_human(char *buf, size_t cap, double v, const char *unit, int rate);

/*
 * Renders the stats text @cur as the table `objfs stats` shows, in the
 * counter table's sections and order (keys it does not know last); with
 * @prev (the text @secs seconds earlier), each counter's rate per second
 * too. Returns the length the whole table needs, like snprintf.
 */
size_t objfs_cli_stats_table(char *buf, size_t cap, const char *cur, const char *prev,
			     double secs);

#endif
