/*
 * Access (see access.h): matching a peer's uid and gid against configured
 * users and groups, the connect-time allow list, and the priority classes.
 * A peer's supplementary groups are looked up at most once per question, and
 * only when a group entry did not already match its gid.
 */
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <unistd.h>

#include "daemon/access.h"

/* Upper bound on the groups of one account that are looked at. */
#define MAX_GROUPS 256

/* A peer being matched, with its account's groups once they were looked up. */
typedef struct peer {
    uid_t uid;
    gid_t gid;
    int n_groups; /* -1 until looked up */
    gid_t groups[MAX_GROUPS];
} peer;

/* Fills p->groups with the groups of p->uid's account (none when it has no account). */
static void load_groups(peer *p) {
    p->n_groups = 0;
    struct passwd pw, *found = NULL;
    char buf[4096];
    if (getpwuid_r(p->uid, &pw, buf, sizeof buf, &found) != 0 || !found) return;
    int n = MAX_GROUPS;
    /* On overflow getgrouplist returns -1 but still fills the first MAX_GROUPS entries. */
    if (getgrouplist(pw.pw_name, pw.pw_gid, p->groups, &n) < 0 || n > MAX_GROUPS) n = MAX_GROUPS;
    p->n_groups = n;
}

/* 1 when the peer is the user, or belongs to the group, that `who` names. */
static int peer_matches(peer *p, const tfd_principal *who) {
    if (!who->is_group) return p->uid == (uid_t)who->id;
    if (p->gid == (gid_t)who->id) return 1;
    if (p->n_groups < 0) load_groups(p);
    for (int i = 0; i < p->n_groups; i++)
        if (p->groups[i] == (gid_t)who->id) return 1;
    return 0;
}

int tfd_access_matches(const tfd_principal *list, int n, uid_t uid, gid_t gid) {
    peer p = {.uid = uid, .gid = gid, .n_groups = -1};
    for (int i = 0; i < n; i++)
        if (peer_matches(&p, &list[i])) return 1;
    return 0;
}

tf_status tfd_access_check(const tfd_options *opt, uid_t uid, gid_t gid, char *msg, size_t len) {
    if (opt->n_allowed == 0 || uid == 0 || uid == geteuid()) return TF_OK;
    if (tfd_access_matches(opt->allowed, opt->n_allowed, uid, gid)) return TF_OK;
    snprintf(msg, len,
             "uid %u (gid %u) is not allowed by [access] allowed_users/allowed_groups; ask the "
             "administrator of tenferrod to list the user or one of its groups",
             (unsigned)uid, (unsigned)gid);
    return TF_ERR_PERMISSION;
}

int tfd_access_priority(const tfd_options *opt, uid_t uid, gid_t gid) {
    peer p = {.uid = uid, .gid = gid, .n_groups = -1};
    for (int i = 0; i < opt->n_priorities; i++)
        if (peer_matches(&p, &opt->priorities[i].who)) return opt->priorities[i].priority;
    return 0;
}
