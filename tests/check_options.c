/*
 * Unit tests of src/options.c: the -o option parser, and the option table
 * against --help, objfs(1), README and the bash completion.
 */
#include "config.h"

#include <check.h>
#include <math.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "doc_text.h"
#include "log.h"
#include "options.h"

static const char *const bad[] = {
	"bogus", "bogus=1", "chunk_size", "chunk_size=", "chunk_size=abc", "chunk_size=1",
	"chunk_size=2G", "chunk_size=-4K", "chunk_size=4X", "max_connections=0",
	"max_connections=99999", "max_connections=-1", "attr_timeout=-1",
	"attr_timeout=nan", "attr_timeout=-inf", "attr_timeout=1s", "timeout=inf",
	"list_timeout=forever", "negative_timeout=-1", "list_ttl=infinite", "http_version=3",
	"http_version=", "retries=1.5",
	"uid=abc", "uid=-1", "umask=999", "umask=8", "log_level=loud", "insecure=1",
	"allow_other=yes", "timeout=0", "ca_file=",
	"side", "side=yes", "side=", "ring_slots=1", "ring_slots=65", "ring_slot_size=4K",
	"ring_slot_size=65M", "fill_threads=0", "fill_threads=257",
	"cache_dir", "cache_dir=", "cache_dir_size=", "cache_dir_size=512K", "cache_dir_size=x",
	/* strtoull() skips blanks and takes a sign: refused */
	"chunk_size= 8M", "chunk_size=\t8M", "threads= 4", "uid= -1", "gid=+5", "umask= 022",
	"cache_size= -1",
	/* generic mount options take no value; log_file and metrics need one */
	"nodev=1", "rw=0", "_netdev=yes", "log_file=", "metrics=",
	/* hardening options */
	"allow_redirects", "allow_redirects=", "allow_redirects=all", "max_dir_entries=0",
	"max_dir_entries=x", "max_list_pages=0", "list_timeout=0", "list_timeout=-1",
	"debug_dumpable=1",
};

START_TEST(test_bad)
{
	struct objfs_opts o;
	char err[256];

	objfs_opts_init(&o);
	ck_assert_int_eq(objfs_opts_parse(&o, bad[_i], err, sizeof(err)), -EINVAL);
	ck_assert_msg(strlen(err) > 10, "no message for '%s'", bad[_i]);
	objfs_opts_clear(&o);
}
END_TEST

START_TEST(test_defaults_and_values)
{
	struct objfs_opts o;
	char err[256];

	objfs_opts_init(&o);
	ck_assert_uint_eq(o.chunk_size, 4u << 20);
	ck_assert_uint_eq(o.cache_size, 0);      /* from the machine */
	ck_assert_uint_eq(o.max_connections, 0); /* from the machine */
	ck_assert(!o.have_uid && !o.allow_other && !o.insecure);
	ck_assert_int_eq(objfs_opts_parse(&o, "chunk_size=4M,max_connections=8,"
					  "attr_timeout=1.5,entry_timeout=0,list_ttl=10,"
					  "allow_other,uid=1000,gid=100,umask=027,"
					  "ca_file=/etc/ssl/x.pem,insecure,log_level=debug,"
					  "retries=0,timeout=5,ro,default_permissions",
					  err, sizeof(err)), 0);
	ck_assert_uint_eq(o.chunk_size, 4u << 20);
	ck_assert_uint_eq(o.max_connections, 8);
	ck_assert(o.attr_timeout == 1.5);
	ck_assert(o.entry_timeout == 0);
	ck_assert(o.list_ttl == 10);
	ck_assert(o.allow_other && o.default_permissions && o.insecure);
	ck_assert(o.have_uid && o.uid == 1000 && o.have_gid && o.gid == 100);
	ck_assert(o.have_umask && o.umask == 027);
	ck_assert_str_eq(o.ca_file, "/etc/ssl/x.pem");
	ck_assert_int_eq(o.log_level, OBJFS_LOG_DEBUG);
	ck_assert_uint_eq(o.retries, 0);
	ck_assert(o.timeout == 5);
	/* Metadata TTLs of forever, for immutable datasets; a negative TTL of its own. */
	ck_assert(o.negative_timeout == 60);
	ck_assert_int_eq(objfs_opts_parse(&o, "attr_timeout=inf,entry_timeout=forever,"
					  "list_ttl=Infinity,negative_timeout=2.5", err, sizeof(err)), 0);
	ck_assert(isinf(o.attr_timeout) && isinf(o.entry_timeout) && isinf(o.list_ttl));
	ck_assert(o.negative_timeout == 2.5);
	ck_assert_int_eq(objfs_opts_parse(&o, "negative_timeout=inf", err, sizeof(err)), 0);
	ck_assert(isinf(o.negative_timeout));
	/* A later value replaces an earlier one without leaking. */
	ck_assert_int_eq(objfs_opts_parse(&o, "ca_file=/b", err, sizeof(err)), 0);
	ck_assert_str_eq(o.ca_file, "/b");
	objfs_opts_clear(&o);
	objfs_opts_clear(&o);
}
END_TEST

START_TEST(test_sizes)
{
	static const struct { const char *in; size_t out; int ok; } v[] = {
		{ "4096", 4096, 1 }, { "4K", 4096, 1 }, { "4k", 4096, 1 }, { "8M", 8u << 20, 1 },
		{ "1G", 1u << 30, 1 }, { "1GiB", 1u << 30, 1 }, { "2MB", 2u << 20, 1 },
		{ "", 0, 0 }, { "K", 0, 0 }, { "-1", 0, 0 }, { "+1", 0, 0 }, { "1T", 0, 0 },
		{ "99999999999999999999", 0, 0 }, { "17179869184G", 0, 0 }, { "1Kx", 0, 0 },
		/* fuzz_options: " -5" was 2^64 - 5, "\t55g" was 55 GiB */
		{ " 5", 0, 0 }, { " -5", 0, 0 }, { "\t55g", 0, 0 }, { "\n1M", 0, 0 },
	};

	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		size_t out = 0;
		int rc = objfs_parse_size(v[i].in, &out);

		ck_assert_msg(v[i].ok ? rc == 0 && out == v[i].out : rc == -EINVAL,
			      "size '%s'", v[i].in);
	}
}
END_TEST

/* Hardening options: defaults and values. */
START_TEST(test_hardening)
{
	struct objfs_opts o;
	char err[256];

	objfs_opts_init(&o);
	ck_assert(o.allow_redirects == 0 && !o.debug_dumpable);
	ck_assert_uint_eq(o.max_dir_entries, 10000000);
	ck_assert_uint_eq(o.max_list_pages, 20000);
	ck_assert(o.list_timeout == 1800);
	ck_assert_int_eq(objfs_opts_parse(&o, "allow_redirects=any,max_dir_entries=5,"
					  "max_list_pages=7,list_timeout=2.5,debug_dumpable",
					  err, sizeof(err)), 0);
	ck_assert(o.allow_redirects == 1 && o.debug_dumpable);
	ck_assert(o.max_dir_entries == 5 && o.max_list_pages == 7 && o.list_timeout == 2.5);
	ck_assert_int_eq(objfs_opts_parse(&o, "allow_redirects=none", err, sizeof(err)), 0);
	ck_assert_int_eq(o.allow_redirects, 2);
	ck_assert_int_eq(objfs_opts_parse(&o, "allow_redirects=origin", err, sizeof(err)), 0);
	ck_assert_int_eq(o.allow_redirects, 0);
	ck_assert_int_eq(objfs_opts_parse(&o, "allow_redirects=all", err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "origin, any, none"));
	objfs_opts_clear(&o);
}
END_TEST

START_TEST(test_side)
{
	struct objfs_opts o;
	char err[256];

	objfs_opts_init(&o);
	ck_assert(o.side == 1 && o.ring_slots == 64 && o.ring_slot_size == 2u << 20);
	ck_assert_int_eq(objfs_opts_parse(&o, "side=off,ring_slots=4,ring_slot_size=4M", err,
					  sizeof(err)), 0);
	ck_assert(o.side == 0 && o.ring_slots == 4 && o.ring_slot_size == 4u << 20);
	ck_assert_uint_eq(o.fill_threads, 0); /* 0: the side server's default */
	ck_assert_int_eq(objfs_opts_parse(&o, "fill_threads=16", err, sizeof(err)), 0);
	ck_assert_uint_eq(o.fill_threads, 16);
	ck_assert_int_eq(objfs_opts_parse(&o, "side=on", err, sizeof(err)), 0);
	ck_assert(o.side == 1);
	objfs_opts_clear(&o);
}
END_TEST

START_TEST(test_cache_dir)
{
	struct objfs_opts o;
	char err[256];

	objfs_opts_init(&o);
	ck_assert(o.cache_dir == NULL && o.cache_dir_size == 10ull << 30);
	ck_assert_int_eq(objfs_opts_parse(&o, "cache_dir=/var/cache/objfs,cache_dir_size=200G",
					  err, sizeof(err)), 0);
	ck_assert_str_eq(o.cache_dir, "/var/cache/objfs");
	ck_assert(o.cache_dir_size == 200ull << 30);
	objfs_opts_clear(&o);
	ck_assert(o.cache_dir == NULL);
}
END_TEST

/* What mount(8), mount.fuse3 and fstab pass. */
START_TEST(test_mount_options)
{
	const struct objfs_machine m16 = { 16, 128ull << 30 };
	struct objfs_opts o;
	char err[256], desc[1024];

	objfs_opts_init(&o);
	ck_assert_int_eq(objfs_opts_parse(&o, "rw,nodev,nosuid,noexec,noatime,_netdev,nofail,auto,"
					  "noauto,user,users,defaults,relatime,"
					  "x-systemd.automount,x-systemd.requires=a.service,"
					  "x-gvfs-hide,comment=x,dev,sync", err, sizeof(err)), 0);
	ck_assert_int_eq(o.saw_rw, 1);
	ck_assert_str_eq(o.fuse_opts, "nodev,nosuid,noexec,noatime,dev,sync");
	/* util-linux <= 2.38 hands a helper "user=NAME" for a "user" line; the
	 * other generic options mount(8) may pass on: accepted */
	ck_assert_int_eq(objfs_opts_parse(&o, "user=alice,owner,group,nosymfollow,lazytime,"
					  "strictatime,norelatime,silent,loud,helper=objfs",
					  err, sizeof(err)), 0);
	ck_assert_str_eq(o.fuse_opts, "nodev,nosuid,noexec,noatime,dev,sync");
	ck_assert_int_eq(objfs_opts_parse(&o, "owner=bob", err, sizeof(err)), -EINVAL);
	ck_assert_int_eq(objfs_opts_parse(&o, "log_file=/var/log/o.log,metrics=127.0.0.1:9464,"
					  "proxy=http://p:3128,credentials_file=/c,"
					  "config_file=/f,chunk_size=8M", err, sizeof(err)), 0);
	ck_assert_str_eq(o.log_file, "/var/log/o.log");
	ck_assert_str_eq(o.metrics, "127.0.0.1:9464");
	ck_assert_str_eq(o.proxy, "http://p:3128");
	ck_assert_str_eq(o.credentials_file, "/c");
	ck_assert_str_eq(o.config_file, "/f");
	/* the summary names what differs from the defaults, nothing else; counts
	 * filled from the machine, as main does, are defaults */
	objfs_opts_machine(&o, &m16);
	objfs_opts_describe(&o, &m16, desc, sizeof(desc));
	ck_assert_msg(strstr(desc, "chunk_size=8388608") && strstr(desc, "log_file=/var/log/o.log") &&
		      strstr(desc, "rw") && strstr(desc, "nodev,nosuid") &&
		      !strstr(desc, "max_connections") && !strstr(desc, "threads") &&
		      !strstr(desc, "cache_size"), "%s", desc);
	objfs_opts_clear(&o);
	ck_assert(o.fuse_opts == NULL && o.log_file == NULL && o.metrics == NULL);
	objfs_opts_init(&o);
	objfs_opts_machine(&o, &m16);
	objfs_opts_describe(&o, &m16, desc, sizeof(desc));
	ck_assert_str_eq(desc, "");
	ck_assert_int_eq(objfs_opts_parse(&o, "threads=8", err, sizeof(err)), 0);
	objfs_opts_describe(&o, &m16, desc, sizeof(desc));
	ck_assert_str_eq(desc, "threads=8");
	/* a proxy's password stays out of the log's summary */
	ck_assert_int_eq(objfs_opts_parse(&o, "proxy=http://alice:S3cret@proxy.corp:3128/x",
					  err, sizeof(err)), 0);
	objfs_opts_describe(&o, &m16, desc, sizeof(desc));
	ck_assert_msg(strstr(desc, "proxy=http://***@proxy.corp:3128/x") && !strstr(desc, "S3cret") &&
		      !strstr(desc, "alice"), "%s", desc);
	objfs_opts_clear(&o);
}
END_TEST

/* Thread, connection counts and the cache from the machine unless given. */
START_TEST(test_machine_defaults)
{
	const struct objfs_machine vm = { 2, 24ull << 30 }, gpu = { 16, 128ull << 30 },
				   big = { 200, 2048ull << 30 }, tiny = { 1, 0 };
	struct objfs_opts o;
	char err[256];

	objfs_opts_init(&o);
	objfs_opts_machine(&o, &vm);
	ck_assert_uint_eq(o.threads, 64);
	ck_assert_uint_eq(o.engine_threads, 2);
	ck_assert_uint_eq(o.max_connections, 16);
	ck_assert_uint_eq(o.cache_size, 1536ull << 20);
	ck_assert_uint_eq(o.max_dir_bytes, 3ull << 30); /* an eighth, 64 MiB to 4 GiB */
	objfs_opts_init(&o);
	objfs_opts_machine(&o, &gpu);
	ck_assert_uint_eq(o.threads, 128);
	ck_assert_uint_eq(o.engine_threads, 16);
	ck_assert_uint_eq(o.max_connections, 64);
	ck_assert_uint_eq(o.cache_size, 8ull << 30);
	ck_assert_uint_eq(o.max_dir_bytes, 4ull << 30);
	objfs_opts_init(&o);
	objfs_opts_machine(&o, &big);
	ck_assert_uint_eq(o.threads, 512);
	ck_assert_uint_eq(o.engine_threads, 64);
	ck_assert_uint_eq(o.max_connections, 256);
	ck_assert_uint_eq(o.cache_size, 16ull << 30);
	objfs_opts_init(&o);
	objfs_opts_machine(&o, &tiny); /* memory unknown: 1 GiB */
	ck_assert_uint_eq(o.cache_size, 1ull << 30);
	ck_assert_uint_eq(o.max_dir_bytes, 64u << 20);
	ck_assert_uint_eq(o.threads, 64);
	objfs_opts_init(&o);
	ck_assert_int_eq(objfs_opts_parse(&o, "threads=4,engine_threads=3,max_connections=5,"
					  "cache_size=64M,max_dir_bytes=16M", err, sizeof(err)), 0);
	objfs_opts_machine(&o, &gpu); /* given values stay */
	ck_assert_uint_eq(o.max_dir_bytes, 16u << 20);
	ck_assert_uint_eq(o.threads, 4);
	ck_assert_uint_eq(o.engine_threads, 3);
	ck_assert_uint_eq(o.max_connections, 5);
	ck_assert_uint_eq(o.cache_size, 64u << 20);
	objfs_opts_clear(&o);
}
END_TEST

/* The probe reads something sane: cores, and memory within what RAM says. */
START_TEST(test_machine_probe)
{
	struct objfs_machine m;
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);

	objfs_machine_probe(&m);
	ck_assert_int_ge(m.ncpu, 1);
	ck_assert_uint_gt(m.mem, 0);
	ck_assert_uint_le(m.mem, (uint64_t)pages * (uint64_t)psz);
}
END_TEST

/*
 * The option table is what --help, objfs(1) and README say: each option
 * has a row in --help, an item in the man page's OPTIONS (mount(8)'s
 * generic ones at least a mention there), a row in README's option tables,
 * and the man page and README name no option the parser does not know. A
 * new option that is not documented fails here.
 */
static int is_option(const char *name)
{
	for (size_t i = 0; objfs_opts_doc(i); i++)
		if (strcmp(objfs_opts_doc(i)->name, name) == 0)
			return 1;
	return 0;
}

/*
 * Whether @d's default is a value (not prose like "RAM/4"): the parser
 * takes it and the result is the default, which the mount's summary
 * leaves out (umask, once given, is always in it).
 */
static int literal_default(const struct objfs_opt_doc *d)
{
	const struct objfs_machine m = { 4, 8ull << 30 };
	struct objfs_opts o;
	char list[128], err[256], desc[1024];
	int ok;

	if (!d->def || !d->arg)
		return 0;
	snprintf(list, sizeof(list), "%s=%s", d->name, d->def);
	objfs_opts_init(&o);
	ok = objfs_opts_parse(&o, list, err, sizeof(err)) == 0;
	if (ok) {
		objfs_opts_machine(&o, &m);
		objfs_opts_describe(&o, &m, desc, sizeof(desc));
		ok = !desc[0] || (!strcmp(d->name, "umask") && !strcmp(desc, list));
	}
	objfs_opts_clear(&o);
	return ok;
}

START_TEST(test_help_from_table)
{
	char *text = NULL, want[128], *p;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	ck_assert_ptr_nonnull(f);
	objfs_opts_help(f);
	fclose(f);
	for (size_t i = 0; objfs_opts_doc(i); i++) {
		const struct objfs_opt_doc *d = objfs_opts_doc(i);

		if (d->group == OBJFS_OPT_GENERIC) {
			ck_assert_ptr_null(d->help);
			snprintf(want, sizeof(want), " %s,", d->name);
			ck_assert_msg(strstr(text, want) || strstr(text, d->name), "--help: no %s",
				      d->name);
			continue;
		}
		ck_assert_msg(d->help && d->help[0], "option %s has no help line", d->name);
		snprintf(want, sizeof(want), "\n  %s%s%s", d->name, d->arg ? "=" : "",
			 d->arg ? d->arg : "");
		p = strstr(text, want);
		ck_assert_msg(p && (p[strlen(want)] == ' ' || p[strlen(want)] == '\n'),
			      "--help has no line for %s:\n%s", d->name, text);
	}
	ck_assert_ptr_nonnull(strstr(text, "fill_threads=N"));
	/* every line fits a terminal */
	for (p = text; *p;) {
		size_t n = strcspn(p, "\n");

		ck_assert_msg(n <= 79, "--help line of %zu columns: %.*s", n, (int)n, p);
		p += n + (p[n] != '\0');
	}
	free(text);
}
END_TEST

/*
 * A default --help gives as a value is the one objfs_opts_init() sets: each
 * default the parser takes as a number, size, time or choice must leave the
 * options as they were.
 */
START_TEST(test_help_defaults)
{
	int checked = 0;

	for (size_t i = 0; objfs_opts_doc(i); i++) {
		const struct objfs_opt_doc *d = objfs_opts_doc(i);
		struct objfs_opts o;
		char list[128], err[256];
		int parses;

		if (!d->def || !d->arg)
			continue;
		/* strings take anything: their defaults are prose ("the system store") */
		snprintf(list, sizeof(list), "%s=not a value", d->name);
		objfs_opts_init(&o);
		parses = objfs_opts_parse(&o, list, err, sizeof(err)) == 0;
		objfs_opts_clear(&o);
		if (parses)
			continue;
		snprintf(list, sizeof(list), "%s=%s", d->name, d->def);
		objfs_opts_init(&o);
		parses = objfs_opts_parse(&o, list, err, sizeof(err)) == 0;
		objfs_opts_clear(&o);
		if (!parses)
			continue; /* prose: "1/16 of memory, 1G-16G" */
		ck_assert_msg(literal_default(d), "--help says %s defaults to %s, which is not "
			      "the default", d->name, d->def);
		checked++;
	}
	ck_assert_int_ge(checked, 15);
}
END_TEST

START_TEST(test_man_options)
{
	char *man = doc_read("docs/objfs.1"), *sec;
	struct doc_list heads = { 0 }, head_names = { 0 }, bold = { 0 };

	ck_assert_msg(man, "docs/objfs.1 not found (srcdir)");
	sec = doc_man_section(man, "OPTIONS");
	ck_assert_msg(sec, "objfs(1) has no OPTIONS section");
	doc_man_heads(sec, &heads);
	for (size_t i = 0; i < heads.n; i++)
		doc_bold_names(heads.v[i], &head_names);
	doc_bold_names(sec, &bold);
	for (size_t i = 0; objfs_opts_doc(i); i++) {
		const struct objfs_opt_doc *d = objfs_opts_doc(i);

		if (d->group == OBJFS_OPT_GENERIC)
			ck_assert_msg(doc_list_has(&bold, d->name), "objfs(1) OPTIONS does not "
				      "name the generic option %s", d->name);
		else
			ck_assert_msg(doc_list_has(&head_names, d->name), "objfs(1) OPTIONS has "
				      "no item for %s", d->name);
	}
	for (size_t i = 0; i < head_names.n; i++)
		ck_assert_msg(is_option(head_names.v[i]), "objfs(1) OPTIONS has an item for "
			      "'%s', which is no option", head_names.v[i]);
	doc_list_free(&heads);
	doc_list_free(&head_names);
	doc_list_free(&bold);
	free(sec);
	free(man);
}
END_TEST

START_TEST(test_readme_options)
{
	char *md = doc_read("README.md"), cell[4096];
	struct doc_list rows = { 0 }, names = { 0 };

	ck_assert_msg(md, "README.md not found (srcdir)");
	doc_md_rows(md, "| option |", &rows);
	ck_assert_uint_gt(rows.n, 20);
	for (size_t i = 0; i < rows.n; i++) {
		struct doc_list here = { 0 };

		doc_md_cell(rows.v[i], 0, cell, sizeof(cell));
		doc_md_names(cell, &here);
		for (size_t k = 0; k < here.n; k++) {
			const struct objfs_opt_doc *d = NULL;

			ck_assert_msg(is_option(here.v[k]), "README's option tables list '%s', "
				      "which is no option", here.v[k]);
			for (size_t j = 0; objfs_opts_doc(j); j++)
				if (!strcmp(objfs_opts_doc(j)->name, here.v[k]))
					d = objfs_opts_doc(j);
			/* a default given as a value is the one in its row */
			doc_md_cell(rows.v[i], 1, cell, sizeof(cell));
			if (literal_default(d))
				ck_assert_msg(strstr(cell, d->def), "README: %s defaults to %s, "
					      "its row says '%s'", d->name, d->def, cell);
			doc_md_cell(rows.v[i], 0, cell, sizeof(cell));
			doc_list_add(&names, here.v[k]);
		}
		doc_list_free(&here);
	}
	for (size_t i = 0; objfs_opts_doc(i); i++) {
		const struct objfs_opt_doc *d = objfs_opts_doc(i);

		if (d->group != OBJFS_OPT_GENERIC)
			ck_assert_msg(doc_list_has(&names, d->name), "README's option tables have "
				      "no row for %s", d->name);
	}
	doc_list_free(&rows);
	doc_list_free(&names);
	free(md);
}
END_TEST

/* contrib/completion/objfs.bash completes exactly the table's options. */
START_TEST(test_completion_options)
{
	char *sh = doc_read("contrib/completion/objfs.bash"), *p, *end;
	struct doc_list words = { 0 };

	ck_assert_msg(sh, "contrib/completion/objfs.bash not found (srcdir)");
	p = strstr(sh, "_objfs_options=\"");
	ck_assert_ptr_nonnull(p);
	p += strlen("_objfs_options=\"");
	end = strchr(p, '"');
	ck_assert_ptr_nonnull(end);
	*end = '\0';
	for (char *save = NULL, *t = strtok_r(p, " \n\t", &save); t;
	     t = strtok_r(NULL, " \n\t", &save)) {
		size_t n = strlen(t);
		int takes = n && t[n - 1] == '=';

		if (takes)
			t[n - 1] = '\0';
		ck_assert_msg(is_option(t), "the completion offers '%s', which is no option", t);
		for (size_t i = 0; objfs_opts_doc(i); i++)
			if (!strcmp(objfs_opts_doc(i)->name, t))
				ck_assert_msg(!objfs_opts_doc(i)->arg == !takes || !strcmp(t, "user"),
					      "the completion has %s%s, the table says it takes %s",
					      t, takes ? "=" : "", objfs_opts_doc(i)->arg ? "a value" :
					      "none");
		doc_list_add(&words, t);
	}
	for (size_t i = 0; objfs_opts_doc(i); i++)
		ck_assert_msg(doc_list_has(&words, objfs_opts_doc(i)->name),
			      "the completion does not offer %s", objfs_opts_doc(i)->name);
	doc_list_free(&words);
	free(sh);
}
END_TEST

static Suite *options_suite(void)
{
	Suite *s = suite_create("options");
	TCase *tc = tcase_create("core");

	tcase_add_loop_test(tc, test_bad, 0, sizeof(bad) / sizeof(bad[0]));
	tcase_add_test(tc, test_defaults_and_values);
	tcase_add_test(tc, test_sizes);
	tcase_add_test(tc, test_side);
	tcase_add_test(tc, test_hardening);
	tcase_add_test(tc, test_cache_dir);
	tcase_add_test(tc, test_mount_options);
	tcase_add_test(tc, test_machine_defaults);
	tcase_add_test(tc, test_machine_probe);
	tcase_add_test(tc, test_help_from_table);
	tcase_add_test(tc, test_help_defaults);
	tcase_add_test(tc, test_man_options);
	tcase_add_test(tc, test_readme_options);
	tcase_add_test(tc, test_completion_options);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(options_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
