/*
 * side_guard: a SIGBUS guard over the client rings the daemon has mapped.
 *
 * Why: a ring is memory the client shares. side.c makes each one, a memfd
 * on tmpfs whose size is sealed (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
 * where no access inside the mapping can raise SIGBUS: a page the client
 * punches out (fallocate PUNCH_HOLE, MADV_REMOVE) comes back as a zero
 * page when touched. A hugetlbfs memfd takes the same seals and still lets
 * its owner punch a huge page out and keep the pool empty, so a copy into
 * it raises SIGBUS and would kill the mount (docs/reliability.md): rings
 * are made by the daemon, never taken from a client, and this guard is the
 * second line for whatever a future kernel adds: the daemon must never die
 * of a client's memory.
 *
 * How: each mapped ring is registered here with the session's failure
 * word. On SIGBUS at an address inside a registered ring, the handler maps
 * private anonymous memory over the whole ring (mmap MAP_FIXED is
 * async-signal-safe: a system call), stores EFAULT in the failure word and
 * returns: the faulting copy resumes into the anonymous pages and the
 * session ends at its next check, its client told EFAULT. A SIGBUS
 * anywhere else is a bug of ours: the default action is restored and the
 * fault repeats, so the daemon dies as it would have. Kernel copies into a
 * ring (recv, pread) do not signal: they fail with EFAULT, an ordinary
 * error of that fill.
 *
 * The table is a fixed array read by the handler without locks. A slot is
 * published by writing its end, failure word and then its start (release);
 * the handler reads the start (acquire), the rest, and the start again, and
 * acts only when both reads agree. A slot is cleared (start first) only
 * when no copy into its ring can be running (side.c unregisters after the
 * session's last job ended), so the handler never races a reuse of the
 * range it matched. Registration takes guard_lock; the handler does not.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "side_i.h"

#define GUARD_SLOTS 1024

struct guard {
	uintptr_t start;             /* 0: free; written last (release) */
	uintptr_t end;
	int *failed;
};

static struct guard guards[GUARD_SLOTS];
static pthread_mutex_t guard_lock = PTHREAD_MUTEX_INITIALIZER;
static int guard_installed;     /* guard_lock */

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
	uintptr_t a = (uintptr_t)si->si_addr;
	int saved = errno;

	(void)uc;
	for (unsigned i = 0; i < GUARD_SLOTS; i++) {
		uintptr_t s = __atomic_load_n(&guards[i].start, __ATOMIC_ACQUIRE);
		uintptr_t e;
		int *f;

		if (!s || a < s)
			continue;
		e = __atomic_load_n(&guards[i].end, __ATOMIC_RELAXED);
		f = __atomic_load_n(&guards[i].failed, __ATOMIC_RELAXED);
		if (a >= e || __atomic_load_n(&guards[i].start, __ATOMIC_ACQUIRE) != s)
			continue;
		if (mmap((void *)s, e - s, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
			break; /* cannot repair: die as without the guard */
		__atomic_store_n(f, EFAULT, __ATOMIC_RELAXED);
		errno = saved;
		return;
	}
	signal(sig, SIG_DFL); /* not a ring: the fault repeats and kills, as it should */
	errno = saved;
}

int objfs_side_guard_install(void)
{
	struct sigaction sa;
	int err = 0;

	pthread_mutex_lock(&guard_lock);
	if (!guard_installed) {
		memset(&sa, 0, sizeof(sa));
		sa.sa_sigaction = on_sigbus;
		sa.sa_flags = SA_SIGINFO | SA_RESTART;
		sigemptyset(&sa.sa_mask);
		if (sigaction(SIGBUS, &sa, NULL))
			err = -errno;
		else
			guard_installed = 1;
	}
	pthread_mutex_unlock(&guard_lock);
	return err;
}

int objfs_side_guard_add(void *start, size_t len, int *failed)
{
	int err = -EBUSY;

	pthread_mutex_lock(&guard_lock);
	for (unsigned i = 0; i < GUARD_SLOTS; i++) {
		if (guards[i].start)
			continue;
		__atomic_store_n(&guards[i].end, (uintptr_t)start + len, __ATOMIC_RELAXED);
		__atomic_store_n(&guards[i].failed, failed, __ATOMIC_RELAXED);
		__atomic_store_n(&guards[i].start, (uintptr_t)start, __ATOMIC_RELEASE);
		err = 0;
		break;
	}
	pthread_mutex_unlock(&guard_lock);
	return err;
}

void objfs_side_guard_del(void *start)
{
	pthread_mutex_lock(&guard_lock);
	for (unsigned i = 0; i < GUARD_SLOTS; i++) {
		if (guards[i].start == (uintptr_t)start) {
			__atomic_store_n(&guards[i].start, 0, __ATOMIC_RELEASE);
			break;
		}
	}
	pthread_mutex_unlock(&guard_lock);
}
