/*
 * Access: who a peer is, against the users and groups the configuration
 * names. A peer is known by the uid and gid the kernel reports for its socket
 * (SO_PEERCRED); a user entry matches the uid, a group entry matches the gid
 * or any supplementary group of the uid's account in the user database
 * (getpwuid_r + getgrouplist), since SO_PEERCRED carries only one gid. Every
 * list that names principals (allowed clients, admins, priority classes) is
 * matched here, so "member of @group" means the same thing everywhere.
 *
 * Loop thread. A lookup in the user database may consult NSS (files, LDAP);
 * it happens at the handshake and for admin requests, never per operation.
 */
#ifndef TENFERRO_DAEMON_ACCESS_H
#define TENFERRO_DAEMON_ACCESS_H

#include <stddef.h>
#include <sys/types.h>

#include "daemon/options.h"
#include "tenferro/status.h"

/* 1 when uid/gid matches any of the n principals of list (users by uid, @groups by membership). */
int tfd_access_matches(const tfd_principal *list, int n, uid_t uid, gid_t gid);

/*
 * Whether a peer may connect: always when [access] lists nobody, and always
 * for root and the daemon's own user; otherwise only when it matches
 * allowed_users or allowed_groups. Returns TF_OK, or TF_ERR_PERMISSION with
 * the reason in msg.
 */
tf_status tfd_access_check(const tfd_options *opt, uid_t uid, gid_t gid, char *msg, size_t len);

/* The stream priority of the first [priority] rule the peer matches; 0 when none does. */
int tfd_access_priority(const tfd_options *opt, uid_t uid, gid_t gid);

#endif
