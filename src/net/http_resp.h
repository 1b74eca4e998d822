/*
 * http_resp: the one judge of an HTTP response, shared by the engine's two
 * receive paths.
 *
 * The engine receives a response either through libcurl (engine.c, whose
 * header and body callbacks feed it here) or through its own HTTP/1.1
 * reader (engine_direct.c, which feeds it the lines of a head it read
 * itself). Both ask this module what the response says and whether it is
 * acceptable, so the two paths cannot disagree on what a valid answer is
 * (docs/design.md: "two receive paths, one judge"). Like curl's
 * lib/http1.c, a parser shared by several transports, it calls neither
 * transport: it only reads header text and writes the response fields of
 * struct objfs_req (status, clen, cr_*, etag_out, ... see engine.h).
 *
 * The errno tables live here too: HTTP status to errno, and the S3 error
 * codes (<Error><Code> of the body, parsed with libxml2) that decide
 * differently from their status. Errors leave the engine as -errno only.
 *
 * No state, no locks: every function works on the request it is given, on
 * the calling thread.
 */
#ifndef OBJFS_HTTP_RESP_H
#define OBJFS_HTTP_RESP_H

#include <stddef.h>

#include "engine.h"

/*
 * Takes one response header line (@n bytes at @line, line end included,
 * not NUL-terminated) into @r. A status line ("HTTP/...") sets r->status
 * and forgets the headers of an earlier response (a redirect hop or an
 * interim 1xx); ETag, Content-Type, Location, x-amz-bucket-region,
 * Content-Length, Content-Range and Last-Modified set their fields (-1 or
 * "" when absent or malformed). Other lines are ignored. @line is only read.
 * Returns 0, or -EIO (logged with the URL) once the response head has grown
 * past OBJFS_HTTP_HEAD_MAX: a hostile or broken server's 200 KB head is a
 * wrong answer (EIO), never an allocation failure (ENOMEM).
 */
int objfs_http_header_line(struct objfs_req *r, const char *line, size_t n);

/* The largest response head accepted, status line included (all lines of
 * one response; libcurl itself refuses a single line over 100 KiB). */
#define OBJFS_HTTP_HEAD_MAX (64u << 10)

/*
 * Whether a redirect may be followed: @first is the URL the request was
 * made for, @cur the URL that answered with the 3xx (the same, or a hop
 * already followed), @location its Location (absolute or relative to
 * @cur), @policy an enum objfs_redirects. Refuses, whatever the policy, a
 * move from https to http; under OBJFS_REDIR_ORIGIN any target whose
 * scheme, host or port differs from @first's; under OBJFS_REDIR_NONE
 * everything. Returns 0, or -EIO after one warning naming both URLs and
 * the option that would allow it.
 */
int objfs_http_redirect_check(const char *first, const char *cur, const char *location,
			      int policy);

/*
 * Validates the 2xx response to ranged GET @r (r->off, r->len) from the
 * fields objfs_http_header_line set, before its first body byte is used:
 * pinned ETag, 206 with the exact Content-Range and Content-Length asked
 * for, object size against r->expect_size; a 200 (Range ignored) must be
 * long enough, and sets r->skip to the offset. Sets r->total. Returns 0,
 * -ESTALE (another version of the object) or -EIO (a wrong answer); every
 * failure is logged with the URL.
 */
int objfs_http_check_range(struct objfs_req *r);

/* Maps an HTTP status to -errno (0 for 2xx): the one status table. */
int objfs_http_errno(long status);

/*
 * The -errno of error response @r (r->status and, from an S3 error body in
 * r->body, its <Code>, which is copied to r->s3_code, "" if none); *retry:
 * whether another attempt may succeed (408, 429, 5xx, or an S3 code such
 * as SlowDown).
 */
int objfs_http_response_errno(struct objfs_req *r, int *retry);

#endif
