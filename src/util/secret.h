/*
 * secret: memory for credentials, kept out of core dumps and wiped when
 * freed; and the process-wide switch that keeps core dumps from happening.
 *
 * Why: a core dump of objfs would hold the AWS secret key twice (see
 * docs/reliability.md): in the environment and in heap copies (the credential
 * provider's, the per-request copy, the SigV4 signing key). Two layers:
 * objfs_secret_nodump_process() makes the daemon not dumpable
 * (prctl(PR_SET_DUMPABLE, 0): no core file, /proc/PID/mem and environ
 * closed to other users, no ptrace by non-root) unless the user asks to
 * keep dumps (-o debug_dumpable); and every buffer holding a secret comes
 * from objfs_secret_alloc(), a page mapping of its own marked
 * MADV_DONTDUMP, so even a dumpable process (debug_dumpable, or a crash
 * handler that forces a dump) writes no secret. MADV_DONTDUMP works on
 * whole pages, hence one mapping per buffer: secrets are few and small
 * (a key, a session token, a signing-key cache), so a page each is cheap;
 * the cost is about four system calls per signed request.
 *
 * Thread-safe (no shared state).
 */
#ifndef OBJFS_SECRET_H
#define OBJFS_SECRET_H

#include <stddef.h>

/*
 * @n zeroed bytes in a mapping of their own marked MADV_DONTDUMP (and
 * MADV_DONTFORK). NULL on failure (errno set). Free with objfs_secret_free.
 */
void *objfs_secret_alloc(size_t n);

/* A copy of @s (NUL-terminated) from objfs_secret_alloc, or NULL. */
char *objfs_secret_strdup(const char *s);

/* Wipes the whole buffer and unmaps it. Accepts NULL. @p becomes invalid. */
void objfs_secret_free(void *p);

/*
 * Makes the process not dumpable (PR_SET_DUMPABLE 0), unless @keep_dumps.
 * Returns 0 or -errno. Call once at start, before secrets are read.
 */
int objfs_secret_nodump_process(int keep_dumps);

/* Whether the process is dumpable now (PR_GET_DUMPABLE): 1, 0 or -errno. */
int objfs_secret_dumpable(void);

#endif
