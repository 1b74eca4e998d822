/*
 * notify: systemd's readiness protocol (sd_notify(3)) without libsystemd:
 * one datagram of "KEY=VALUE" lines to the unix socket named by
 * $NOTIFY_SOCKET ('@' for the abstract namespace). Type=notify units get
 * READY=1 once the mount answers and STOPPING=1 when it ends (mount.c).
 */
#ifndef OBJFS_NOTIFY_H
#define OBJFS_NOTIFY_H

/* Sends @state. 0 when sent, 1 when $NOTIFY_SOCKET is unset, or -errno. */
int objfs_notify(const char *state);

#endif
