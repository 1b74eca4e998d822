/* Unit tests of src/options.c: the -o option parser. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
	/* found by tests/fuzz/fuzz_options: strtoull() skips blanks and takes a sign */
	"chunk_size= 8M", "chunk_size=\t8M", "threads= 4", "uid= -1", "gid=+5", "umask= 022",
	"cache_size= -1",
	/* generic mount options take no value; log_file and metrics need one */
	"nodev=1", "rw=0", "_netdev=yes", "log_file=", "metrics=",
	/* issue 19 */
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

/* Hardening options (issue 19): defaults and values. */
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

/* What mount(8), mount.fuse3 and fstab pass (issue 16). */
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
	 * other generic options mount(8) may pass on (a review: refused) */
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
	/* a proxy's password stays out of the log's summary (review) */
	ck_assert_int_eq(objfs_opts_parse(&o, "proxy=http://alice:S3cret@proxy.corp:3128/x",
					  err, sizeof(err)), 0);
	objfs_opts_describe(&o, &m16, desc, sizeof(desc));
	ck_assert_msg(strstr(desc, "proxy=http://***@proxy.corp:3128/x") && !strstr(desc, "S3cret") &&
		      !strstr(desc, "alice"), "%s", desc);
	objfs_opts_clear(&o);
}
END_TEST

/* Thread, connection counts and the cache from the machine unless given (issue 13). */
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
