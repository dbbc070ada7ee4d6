/*
 * Integration tests of admission at the handshake (DESIGN.md §8-9,
 * docs/admission.md):
 *
 *  - [access] allowed_users / allowed_groups: a peer (known by SO_PEERCRED)
 *    that matches no entry is refused with TF_ERR_PERMISSION naming its uid,
 *    and counted in connections_refused; a listed user, a peer whose gid is a
 *    listed group, and a user who is a supplementary member of a listed group
 *    (in the user database) are admitted; root and the daemon's own user
 *    always are;
 *  - max_clients: the connection above the limit gets TF_ERR_TOO_MANY_CLIENTS;
 *  - [priority]: a client's stream priority class is the first rule it
 *    matches (high = -1, low = 1), else 0, as the status report shows.
 *
 * The access tests need root, to run client processes as other users (a
 * child drops to them with setgroups, setgid and setuid before connecting);
 * without root they say so and pass without checking anything.
 */
#include <check.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/integration/harness.h"

/* The account every system has for "nobody": not root, not the test's user. */
#define NOBODY 65534

/* 1 when the test runs as root; otherwise says why the calling test checks nothing. */
static int have_root(const char *test) {
    if (geteuid() == 0) return 1;
    printf("%s: skipped: running client processes as other users needs root\n", test);
    return 0;
}

/* A client process run as another user. */
typedef struct peer {
    const th_daemon *d;
    uid_t uid;
    gid_t gid;
    tf_status want; /* what tf_connect must return */
} peer;

/*
 * Becomes uid/gid with no supplementary groups, connects, and checks the
 * result: an admitted peer must be able to work (upload and read back); a
 * refused one must be told its uid.
 */
static int peer_process(void *arg) {
    peer *p = arg;
    CHILD_CHECK(th_become(p->uid, p->gid));
    th_die_with_parent(); /* after the credential change, which clears it */
    tf_client *c = NULL;
    CHILD_STATUS(c, tf_connect(p->d->socket, &c), p->want);
    if (p->want == TF_ERR_PERMISSION) {
        char uid_text[64];
        snprintf(uid_text, sizeof uid_text, "uid %u ", (unsigned)p->uid);
        CHILD_CHECK(strstr(tf_client_last_error(c), uid_text) != NULL);
        CHILD_CHECK(strstr(tf_client_last_error(c), "allowed_users/allowed_groups") != NULL);
    } else {
        double x[4] = {1, 2, 3, 4};
        int64_t shape[1] = {4};
        tf_tensor t;
        void *back = NULL;
        size_t bytes = 0;
        CHILD_STATUS(c, tf_upload(c, TF_F64, 1, shape, x, &t), TF_OK);
        CHILD_STATUS(c, tf_download(c, t, &back, &bytes), TF_OK);
        CHILD_CHECK(bytes == sizeof x && memcmp(back, x, sizeof x) == 0);
        free(back);
    }
    tf_disconnect(c);
    return 0;
}

/* Runs peer_process as uid/gid against d and asserts its checks passed. */
static void expect_peer(const th_daemon *d, uid_t uid, gid_t gid, tf_status want) {
    peer p = {d, uid, gid, want};
    pid_t pid = th_spawn(peer_process, &p);
    ck_assert_msg(pid > 0, "fork failed");
    int rc = th_wait(pid);
    ck_assert_msg(rc == 0, "client as uid %u gid %u expecting %s exited with %d (see above)",
                  (unsigned)uid, (unsigned)gid, tf_status_name(want), rc);
}

/* The test's own user (root in the access tests) connects and works as usual. */
static void expect_own_user_works(const th_daemon *d) {
    tf_client *c = th_connect(d);
    double x = 42;
    int64_t shape[1] = {1};
    tf_tensor t;
    CK_STATUS(c, tf_upload(c, TF_F64, 1, shape, &x, &t), TF_OK);
    tf_disconnect(c);
}

START_TEST(test_unlisted_user_refused) {
    if (!have_root(__func__)) return;
    th_daemon d;
    CK_DAEMON_START(&d, "--allowed-users", "root", "--socket-mode", "0666");
    expect_peer(&d, NOBODY, NOBODY, TF_ERR_PERMISSION);
    ck_assert_uint_eq(th_counter(&d, "connections_refused"), 1);
    expect_own_user_works(&d);
    CK_DAEMON_STOP(&d);
}
END_TEST

START_TEST(test_listed_user_admitted) {
    if (!have_root(__func__)) return;
    th_daemon d;
    CK_DAEMON_START(&d, "--allowed-users", "nobody", "--socket-mode", "0666");
    expect_peer(&d, NOBODY, NOBODY, TF_OK);
    /* Another unprivileged user is not on the list. */
    expect_peer(&d, NOBODY - 1, NOBODY - 1, TF_ERR_PERMISSION);
    expect_own_user_works(&d);
    ck_assert_uint_eq(th_counter(&d, "connections_refused"), 1);
    CK_DAEMON_STOP(&d);
}
END_TEST

START_TEST(test_group_by_gid_admitted) {
    if (!have_root(__func__)) return;
    th_daemon d;
    char group[32];
    snprintf(group, sizeof group, "%u", (unsigned)NOBODY);
    CK_DAEMON_START(&d, "--allowed-groups", group, "--socket-mode", "0666");
    /* Admitted by its gid alone: uid 65533 has no account and no other group. */
    expect_peer(&d, NOBODY - 1, NOBODY, TF_OK);
    expect_peer(&d, NOBODY - 1, NOBODY - 1, TF_ERR_PERMISSION);
    CK_DAEMON_STOP(&d);
}
END_TEST

/*
 * Finds an account that is a supplementary member of a group other than its
 * primary one (in /etc/group or whatever NSS serves); 0 when there is none.
 */
static int find_supplementary_member(struct passwd *who, char *group, size_t len) {
    int found = 0;
    setgrent();
    for (struct group *g; !found && (g = getgrent()) != NULL;) {
        for (char **m = g->gr_mem; !found && *m; m++) {
            struct passwd *pw = getpwnam(*m);
            if (!pw || pw->pw_uid == 0 || pw->pw_gid == g->gr_gid) continue;
            *who = *pw;
            snprintf(group, len, "%s", g->gr_name);
            found = 1;
        }
    }
    endgrent();
    return found;
}

START_TEST(test_supplementary_group_admitted) {
    if (!have_root(__func__)) return;
    struct passwd member;
    char group[64];
    if (!find_supplementary_member(&member, group, sizeof group)) {
        printf("%s: skipped: no account here is a supplementary member of a group\n", __func__);
        return;
    }
    th_daemon d;
    CK_DAEMON_START(&d, "--allowed-groups", group, "--socket-mode", "0666");
    /* The child drops every supplementary group: only the user database says it is a member. */
    expect_peer(&d, member.pw_uid, member.pw_gid, TF_OK);
    expect_peer(&d, NOBODY, NOBODY, TF_ERR_PERMISSION);
    CK_DAEMON_STOP(&d);
}
END_TEST

/*
 * The daemon's own user is always admitted, whatever the list says: run
 * unprivileged, this is the service-user rule (the daemon runs as the test's
 * user); run as root, the root rule.
 */
START_TEST(test_daemon_user_always_admitted) {
    th_daemon d;
    char other[32];
    snprintf(other, sizeof other, "%u", (unsigned)NOBODY - 2);
    CK_DAEMON_START(&d, "--allowed-users", other, "--allowed-groups", other);
    expect_own_user_works(&d);
    ck_assert_uint_eq(th_counter(&d, "connections_refused"), 0);
    CK_DAEMON_STOP(&d);
}
END_TEST

/* ---- max clients ---- */

START_TEST(test_max_clients) {
    th_daemon d;
    CK_DAEMON_START(&d, "--max-clients", "2");
    tf_client *c1 = th_connect(&d), *c2 = th_connect(&d), *c3 = NULL;
    CK_STATUS(c3, tf_connect(d.socket, &c3), TF_ERR_TOO_MANY_CLIENTS);
    ck_assert_msg(strstr(tf_client_last_error(c3), "maximum of 2 clients"), "message: %s",
                  tf_client_last_error(c3));
    tf_disconnect(c3);
    /* Once a client leaves, a new one gets in (the daemon notices the departure soon after). */
    tf_disconnect(c1);
    tf_status st = TF_ERR_TOO_MANY_CLIENTS;
    for (int tries = 0; st == TF_ERR_TOO_MANY_CLIENTS && tries < 1000; tries++) {
        c3 = NULL;
        st = tf_connect(d.socket, &c3);
        if (st != TF_OK) {
            tf_disconnect(c3);
            nanosleep(&(struct timespec){0, 5000000L}, NULL);
        }
    }
    CK_STATUS(c3, st, TF_OK);
    tf_disconnect(c2);
    tf_disconnect(c3);
    /* A status request is a connection too: ask once the daemon has seen the clients leave. */
    for (int tries = 0; th_client_count(&d) != 0 && tries < 1000; tries++)
        nanosleep(&(struct timespec){0, 5000000L}, NULL);
    ck_assert_uint_ge(th_counter(&d, "connections_refused"), 1);
    CK_DAEMON_STOP(&d);
}
END_TEST

/* ---- priority classes: none (_i = 0), high by uid (1), low by primary group (2) ---- */

START_TEST(test_priority_classes) {
    static const int want[3] = {0, -1, 1};
    char uid[32], gid[32];
    snprintf(uid, sizeof uid, "%u", (unsigned)getuid());
    snprintf(gid, sizeof gid, "@%u", (unsigned)getgid());
    th_daemon d;
    if (_i == 0)
        CK_DAEMON_START(&d, "--log-level", "debug");
    else if (_i == 1)
        CK_DAEMON_START(&d, "--priority-high", uid);
    else
        CK_DAEMON_START(&d, "--priority-low", gid);
    tf_client *c = th_connect(&d);
    Tenferro__Frame *r = th_status_report(&d);
    ck_assert(r != NULL);
    int seen = 0;
    for (size_t i = 0; i < r->status_reply->n_clients; i++) {
        Tenferro__ClientInfo *ci = r->status_reply->clients[i];
        if (ci->client_id != tf_client_id(c)) continue;
        ck_assert_int_eq(ci->priority, want[_i]);
        seen = 1;
    }
    tf__frame_free(r);
    ck_assert_msg(seen, "the client is not in the status report");
    /* The class is chosen once, and the stream works at it. */
    double x = 1;
    int64_t shape[1] = {1};
    tf_tensor t;
    CK_STATUS(c, tf_upload(c, TF_F64, 1, shape, &x, &t), TF_OK);
    tf_disconnect(c);
    CK_DAEMON_STOP(&d);
}
END_TEST

static Suite *access_suite(void) {
    Suite *s = suite_create("access");
    TCase *tc = tcase_create("handshake");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_unlisted_user_refused);
    tcase_add_test(tc, test_listed_user_admitted);
    tcase_add_test(tc, test_group_by_gid_admitted);
    tcase_add_test(tc, test_supplementary_group_admitted);
    tcase_add_test(tc, test_daemon_user_always_admitted);
    tcase_add_test(tc, test_max_clients);
    tcase_add_loop_test(tc, test_priority_classes, 0, 3);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(access_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
