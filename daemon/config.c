/*
 * The settings table (see config.h): every key of tenferrod.conf, the flag
 * that sets it on the command line, how its value is parsed and checked, and
 * whether it can change on SIGHUP.
 */
#include <errno.h>
#include <grp.h>
#include <ini.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/frame.h"
#include "daemon/backend/contract-cache.h"
#include "daemon/config.h"
#include "daemon/log.h"

typedef int (*setter_fn)(tfd_options *opt, void *field, const char *value, char *err, size_t len);

/* Writes a default that depends on the machine as the file would spell it. */
typedef void (*machine_fn)(char *text, size_t len);

typedef struct setting {
    const char *section;
    const char *key;
    const char *flag;   /* command-line flag, NULL when file-only */
    size_t offset;      /* of the field inside tfd_options */
    size_t size;        /* of that field; 0 for a setting its setter stores elsewhere (lists, names) */
    setter_fn set;
    int runtime;        /* may change on SIGHUP */
    /*
     * The default, written here and nowhere else: the text a user would write
     * in the file ("64M", "auto", "" for unset), which tfd_options_defaults
     * hands to the setter. When machine is set the default is computed at
     * start instead, and def says how (for --help and the docs).
     */
    const char *def;
    machine_fn machine;
    const char *help;   /* what the setting means; its default is printed from def */
} setting;

/* Parses an unsigned number with an optional K, M, G or T suffix (powers of 1024). */
static int parse_size(const char *value, uint64_t *out, char *err, size_t len) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(value, &end, 0);
    /* strtoull skips blanks and takes a sign ("-1" wraps to 2^64-1): a size starts with a digit. */
    if (end == value || errno || value[0] < '0' || value[0] > '9') {
        snprintf(err, len, "\"%s\" is not a number", value);
        return -1;
    }
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    case 't': case 'T': shift = 40; end++; break;
    }
    if (*end == 'i' || *end == 'I') end++;
    if (*end == 'b' || *end == 'B') end++;
    if (*end) {
        snprintf(err, len, "\"%s\" has an unknown suffix (use K, M, G or T)", value);
        return -1;
    }
    if (shift && v > (UINT64_MAX >> shift)) {
        snprintf(err, len, "\"%s\" is too large", value);
        return -1;
    }
    *out = (uint64_t)v << shift;
    return 0;
}

static int set_u64(tfd_options *opt, void *field, const char *value, char *err, size_t len) {
    (void)opt;
    return parse_size(value, field, err, len);
}

static int set_int(tfd_options *opt, void *field, const char *value, char *err, size_t len) {
    (void)opt;
    uint64_t v;
    if (parse_size(value, &v, err, len) != 0) return -1;
    if (v > 1000000) {
        snprintf(err, len, "%s is out of range", value);
        return -1;
    }
    *(int *)field = (int)v;
    return 0;
}

/* A count of microseconds up to one second, or "auto" (-1: chosen by the backend). */
static int set_int_or_auto(tfd_options *opt, void *field, const char *value, char *err, size_t len) {
    if (strcmp(value, "auto") == 0) {
        *(int *)field = -1;
        return 0;
    }
    return set_int(opt, field, value, err, len);
}

/* A switch: true/yes/on/1 or false/no/off/0 (a bare flag on the command line means true). */
static int set_bool(tfd_options *opt, void *field, const char *value, char *err, size_t len) {
    (void)opt;
    static const char *const yes[] = {"true", "yes", "on", "1"}, *const no[] = {"false", "no", "off", "0"};
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) {
        if (strcasecmp(value, yes[i]) == 0) {
            *(int *)field = 1;
            return 0;
        }
        if (strcasecmp(value, no[i]) == 0) {
            *(int *)field = 0;
            return 0;
        }
    }
    snprintf(err, len, "\"%s\" is not true or false (yes/no, on/off, 1/0)", value);
    return -1;
}

static int set_frame(tfd_options *opt, void *field, const char *value, char *err, size_t len) {
    if (set_u64(opt, field, value, err, len) != 0) return -1;
    uint64_t v = *(uint64_t *)field;
    if (v < TF__MIN_MAX_FRAME_BYTES || v > UINT32_MAX) {
        snprintf(err, len, "must be between %llu and %u bytes",
                 (unsigned long long)TF__MIN_MAX_FRAME_BYTES, UINT32_MAX);
        return -1;
    }
    return 0;
}

/* Copies a string into a fixed buffer of the options, refusing one that does not fit. */
static int set_string(char *dst, size_t cap, const char *value, char *err, size_t len) {
    if (strlen(value) >= cap) {
        snprintf(err, len, "\"%s\" is longer than %zu bytes", value, cap - 1);
        return -1;
    }
    memcpy(dst, value, strlen(value) + 1);
    return 0;
}

static int set_socket(tfd_options *opt, void *field, const char *value, char *err, size_t len) {
    (void)field;
    return set_string(opt->socket_path, sizeof opt->socket_path, value, err, len);
}

static int set_group_name(tfd_options *opt, void *field, const char *value, char *err, size_t len) {
    (void)field;
    if (value[0] && !getgrnam(value)) {
        snprintf(err, len, "unknown group \"%s\"", value);
        return -1;
    }
    return set_string(opt->socket_group, sizeof opt->socket_group, value, err, len);
}

static int set_device(tfd_options *opt, void *field, const char *value, char *err, size_t len) {
    (void)field;
    /* A bare ordinal N means cuda:N: the systemd unit passes its instance name (tenferrod@0, @cpu). */
    if (value[0] && strspn(value, "0123456789") == strlen(value) && strlen(value) <= 4) {
        snprintf(opt->device, sizeof opt->device, "cuda:%s", value);
        return 0;
    }
    if (strcmp(value, "auto") != 0 && strcmp(value, "cpu") != 0 && strncmp(value, "cuda:", 5) != 0) {
        snprintf(err, len, "device \"%s\" is not auto, cpu or cuda:N", value);
        return -1;
    }
    return set_string(opt->device, sizeof opt->device, value, err, len);
}

static int set_mode(tfd_options *opt, void *field, const char *value, char *err, size_t len) {
    (void)opt;
    char *end;
    unsigned long v = strtoul(value, &end, 8);
    if (end == value || *end || v > 0777 || value[0] < '0' || value[0] > '7') {
        snprintf(err, len, "\"%s\" is not an octal permission mode like 0660", value);
        return -1;
    }
    *(unsigned *)field = (unsigned)v;
    return 0;
}

static int set_policy(tfd_options *opt, void *field, const char *value, char *err, size_t len) {
    (void)opt;
    if (strcmp(value, "reject") == 0)
        *(tfd_policy *)field = TFD_POLICY_REJECT;
    else if (strcmp(value, "wait") == 0)
        *(tfd_policy *)field = TFD_POLICY_WAIT;
    else {
        snprintf(err, len, "policy \"%s\" is not reject or wait", value);
        return -1;
    }
    return 0;
}

static int set_level(tfd_options *opt, void *field, const char *value, char *err, size_t len) {
    (void)opt;
    int level = tfd_log_parse_level(value);
    if (level < 0) {
        snprintf(err, len, "log level \"%s\" is not error, warn, info or debug", value);
        return -1;
    }
    *(int *)field = level;
    return 0;
}

/*
 * Resolves "alice", "1001", "@gpu" or "@100" to a principal. A number names
 * exactly that id: one that does not fit an id is refused, never truncated
 * (4294968296 would otherwise name uid 1000).
 */
static int resolve(const char *name, int force_group, tfd_principal *p, char *err, size_t len) {
    int group = force_group || name[0] == '@';
    if (name[0] == '@') name++;
    p->is_group = group;
    if (name[0] && strspn(name, "0123456789") == strlen(name)) {
        errno = 0;
        unsigned long long id = strtoull(name, NULL, 10);
        if (errno || id >= UINT32_MAX) {
            snprintf(err, len, "%s id %s is out of range (0 .. %u)", group ? "group" : "user", name,
                     UINT32_MAX - 1);
            return -1;
        }
        p->id = (uint32_t)id;
        return 0;
    }
    if (group) {
        struct group *g = getgrnam(name);
        if (!g) {
            snprintf(err, len, "unknown group \"%s\"", name);
            return -1;
        }
        p->id = g->gr_gid;
    } else {
        struct passwd *u = getpwnam(name);
        if (!u) {
            snprintf(err, len, "unknown user \"%s\"", name);
            return -1;
        }
        p->id = u->pw_uid;
    }
    return 0;
}

/*
 * Parses a comma- or space-separated list of users (or @groups) into list,
 * replacing what was there. Returns the count, or -1.
 */
static int parse_principals(const char *value, int force_group, tfd_principal *list, int cap,
                            char *err, size_t len) {
    char buf[1024];
    if (strlen(value) >= sizeof buf) {
        snprintf(err, len, "list is longer than %zu bytes", sizeof buf - 1);
        return -1;
    }
    strcpy(buf, value);
    int n = 0;
    for (char *save, *tok = strtok_r(buf, ", \t", &save); tok; tok = strtok_r(NULL, ", \t", &save)) {
        if (n == cap) {
            snprintf(err, len, "more than %d names", cap);
            return -1;
        }
        if (resolve(tok, force_group, &list[n], err, len) != 0) return -1;
        n++;
    }
    return n;
}

/* Appends principals for allowed_users / allowed_groups to the one allow list. */
static int add_allowed(tfd_options *opt, const char *value, int groups, char *err, size_t len) {
    tfd_principal parsed[TFD_MAX_IDS];
    int n = parse_principals(value, groups, parsed, TFD_MAX_IDS, err, len);
    if (n < 0) return -1;
    /* Drop the entries of the same kind first: setting a key replaces its previous value. */
    int kept = 0;
    for (int i = 0; i < opt->n_allowed; i++)
        if (opt->allowed[i].is_group != groups) opt->allowed[kept++] = opt->allowed[i];
    if (kept + n > TFD_MAX_IDS) {
        snprintf(err, len, "more than %d allowed users and groups", TFD_MAX_IDS);
        return -1;
    }
    memcpy(&opt->allowed[kept], parsed, sizeof(tfd_principal) * (size_t)n);
    opt->n_allowed = kept + n;
    return 0;
}

static int set_allowed_users(tfd_options *opt, void *field, const char *value, char *err, size_t len) {
    (void)field;
    return add_allowed(opt, value, 0, err, len);
}

static int set_allowed_groups(tfd_options *opt, void *field, const char *value, char *err, size_t len) {
    (void)field;
    return add_allowed(opt, value, 1, err, len);
}

static int set_admins(tfd_options *opt, void *field, const char *value, char *err, size_t len) {
    (void)field;
    int n = parse_principals(value, 0, opt->admins, TFD_MAX_IDS, err, len);
    if (n < 0) return -1;
    opt->n_admins = n;
    return 0;
}

/* Sets the members of one priority class, replacing that class's earlier members. */
static int set_priority_class(tfd_options *opt, int priority, const char *value, char *err, size_t len) {
    tfd_principal parsed[TFD_MAX_IDS];
    int n = parse_principals(value, 0, parsed, TFD_MAX_IDS, err, len);
    if (n < 0) return -1;
    int kept = 0;
    for (int i = 0; i < opt->n_priorities; i++)
        if (opt->priorities[i].priority != priority) opt->priorities[kept++] = opt->priorities[i];
    if (kept + n > TFD_MAX_IDS) {
        snprintf(err, len, "more than %d priority entries", TFD_MAX_IDS);
        return -1;
    }
    for (int i = 0; i < n; i++) opt->priorities[kept + i] = (tfd_priority_rule){parsed[i], priority};
    opt->n_priorities = kept + n;
    return 0;
}

/* fftw_planner: how FFTW plans a transform it has not seen. */
static int set_planner(tfd_options *opt, void *field, const char *value, char *err, size_t len) {
    (void)opt;
    static const char *const names[] = {"estimate", "measure", "patient"};
    for (int i = 0; i < 3; i++) {
        if (strcmp(value, names[i]) == 0) {
            *(tfd_fftw_planner *)field = (tfd_fftw_planner)i;
            return 0;
        }
    }
    snprintf(err, len, "planner \"%s\" is not estimate, measure or patient", value);
    return -1;
}

/* fftw_wisdom: a file path, or empty for no wisdom file. */
static int set_wisdom(tfd_options *opt, void *field, const char *value, char *err, size_t len) {
    (void)field;
    return set_string(opt->caches.fftw_wisdom, sizeof opt->caches.fftw_wisdom, value, err, len);
}

static int set_high(tfd_options *opt, void *field, const char *value, char *err, size_t len) {
    (void)field;
    return set_priority_class(opt, -1, value, err, len);
}

static int set_low(tfd_options *opt, void *field, const char *value, char *err, size_t len) {
    (void)field;
    return set_priority_class(opt, 1, value, err, len);
}

/*
 * Pinned pages cannot be swapped: by default at most half the RAM is handed
 * out as buffers (0, no limit, when the RAM cannot be read).
 */
static void default_max_pinned_bytes(char *text, size_t len) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    uint64_t half = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page / 2 : 0;
    snprintf(text, len, "%llu", (unsigned long long)half);
}

/*
 * Each pinned buffer is one mapping of the daemon: half of the kernel's
 * vm.max_map_count is left to the daemon's own mappings (libraries, heap,
 * thread stacks, the clients' completion pages).
 */
static void default_max_buffers(char *text, size_t len) {
    long maps = 65530; /* the kernel's default */
    FILE *f = fopen("/proc/sys/vm/max_map_count", "r");
    if (f) {
        if (fscanf(f, "%ld", &maps) != 1) maps = 65530;
        fclose(f);
    }
    long half = maps / 2;
    snprintf(text, len, "%ld", half > 32768 ? 32768 : half < 64 ? 64 : half);
}

#define AT(field) offsetof(tfd_options, field), sizeof(((tfd_options *)0)->field)
/* A setting whose setter stores it itself (a list, a path, a name). */
#define CUSTOM 0, 0
/* A default the file could spell, or one the machine decides (how: the text for --help). */
#define DEFAULT(text) text, NULL
#define BY_MACHINE(how, fn) how, fn
/* A number another module also starts from, as text: the constant stays the one place it is written. */
#define TEXT_OF(x) #x
#define VALUE_TEXT(x) TEXT_OF(x)

static const setting settings[] = {
    {"daemon", "socket", "socket", CUSTOM, set_socket, 0, DEFAULT(""),
     "Unix socket path (unset: $TENFERRO_SOCKET, else /run/tenferro/tenferrod-<device>.sock)"},
    {"daemon", "socket_mode", "socket-mode", AT(socket_mode), set_mode, 0, DEFAULT("0660"), "socket permission bits"},
    {"daemon", "socket_group", "socket-group", CUSTOM, set_group_name, 0, DEFAULT(""), "group owning the socket (unset: the daemon's own)"},
    {"daemon", "device", "device", CUSTOM, set_device, 0, DEFAULT("auto"), "auto, cpu, cuda:N or N (= cuda:N)"},
    {"daemon", "workers", "workers", AT(workers), set_int, 0, DEFAULT("0"), "executor threads (0 = one per core)"},
    {"daemon", "max_frame_bytes", "max-frame-bytes", AT(max_frame_bytes), set_frame, 0, DEFAULT("64M"), "largest frame"},
    {"daemon", "max_pinned_bytes", "max-pinned-bytes", AT(max_pinned_bytes), set_u64, 1,
     BY_MACHINE("half the physical memory", default_max_pinned_bytes), "pinned buffers of all clients (0 = unlimited)"},
    {"daemon", "max_buffers", "max-buffers", AT(max_buffers), set_int, 1,
     BY_MACHINE("half of vm.max_map_count, at most 32768", default_max_buffers), "pinned buffers of all clients, each one mapping (0 = unlimited)"},
    {"limits", "max_buffers_per_client", "max-buffers-per-client", AT(max_buffers_per_client), set_int, 1, DEFAULT("1024"), "pinned buffers of one client (0 = unlimited)"},
    {"limits", "max_buffers_per_uid", "max-buffers-per-uid", AT(max_buffers_per_uid), set_int, 1, DEFAULT("4096"), "pinned buffers of all clients of one uid (0 = unlimited)"},
    {"daemon", "max_clients", "max-clients", AT(max_clients), set_int, 1, DEFAULT("256"), "clients served at once, past their Hello"},
    {"limits", "max_clients_per_uid", "max-clients-per-uid", AT(max_clients_per_uid), set_int, 1, DEFAULT("64"), "clients of one uid (0 = unlimited)"},
    {"limits", "max_handshakes_per_uid", "max-handshakes-per-uid", AT(max_handshakes_per_uid), set_int, 1, DEFAULT("8"), "connections of one uid before their Hello"},
    {"limits", "max_takes_per_uid", "max-takes-per-uid", AT(max_takes_per_uid), set_int, 1, DEFAULT("4"), "copies from other daemons (tf_copy_to) in progress for one uid, root included (0 = unlimited)"},
    {"limits", "hello_timeout_ms", "hello-timeout-ms", AT(hello_timeout_ms), set_u64, 1, DEFAULT("5000"), "time to say Hello before the connection is closed"},
    {"limits", "uid_receive_bytes", "uid-receive-bytes", AT(uid_receive_bytes), set_u64, 1, DEFAULT("256M"), "unfinished input buffered for one uid, and the decode budgets of its large frames (0 = unlimited)"},
    {"limits", "loop_slice_us", "loop-slice-us", AT(loop_slice_us), set_u64, 1, DEFAULT("2000"), "how long one connection's input may hold the loop"},
    {"limits", "client_reply_bytes", "client-reply-bytes", AT(client_reply_bytes), set_u64, 1, DEFAULT("128M"), "replies queued for one client before its input waits (at least max_frame_bytes)"},
    {"limits", "uid_reply_bytes", "uid-reply-bytes", AT(uid_reply_bytes), set_u64, 1, DEFAULT("512M"), "replies queued for all clients of one uid before their input waits (0 = unlimited)"},
    {"limits", "reply_stall_ms", "reply-stall-ms", AT(reply_stall_ms), set_u64, 1, DEFAULT("30000"), "a waiting client whose replies are not read this long is closed (0 = never)"},
    {"daemon", "log_level", "log-level", AT(log_level), set_level, 1, DEFAULT("info"), "error, warn, info or debug"},
    {"daemon", "busy_poll_us", "busy-poll-us", AT(busy_poll_us), set_int_or_auto, 1, DEFAULT("auto"), "us the loop and completion thread poll after activity (auto: 500 cuda, 0 cpu)"},
    {"daemon", "idle_poll_max_us", "idle-poll-max-us", AT(idle_poll_max_us), set_int_or_auto, 1, DEFAULT("auto"), "longest gap between requests the loop polls across (auto: 5000 cuda, 0 cpu)"},
    {"daemon", "ring_spin_us", "ring-spin-us", AT(ring_spin_us), set_int, 1, DEFAULT("50"), "us the loop polls submission rings after answering one (0 = never)"},
    {"admission", "policy", "reservation-policy", AT(policy), set_policy, 1, DEFAULT("reject"), "reject or wait"},
    {"admission", "wait_deadline_ms", "wait-deadline-ms", AT(wait_deadline_ms), set_u64, 1, DEFAULT("10000"), "queued opener deadline"},
    /* live_tensors and queued_ops are finite by default: each tensor and each queued operation is host memory of the daemon. */
    {"quota.client", "device_bytes", "client-device-bytes", AT(client_quota.device_bytes), set_u64, 1, DEFAULT("0"), "per client (0 = unlimited)"},
    {"quota.client", "pinned_bytes", "client-pinned-bytes", AT(client_quota.pinned_bytes), set_u64, 1, DEFAULT("0"), "per client (0 = unlimited)"},
    {"quota.client", "live_tensors", "client-live-tensors", AT(client_quota.live_tensors), set_u64, 1, DEFAULT("262144"), "per client (0 = unlimited)"},
    {"quota.client", "queued_ops", "client-queued-ops", AT(client_quota.queued_ops), set_u64, 1, DEFAULT("131072"), "per client (0 = unlimited)"},
    {"quota.uid", "device_bytes", "uid-device-bytes", AT(uid_quota.device_bytes), set_u64, 1, DEFAULT("0"), "per uid (0 = unlimited)"},
    {"quota.uid", "pinned_bytes", "uid-pinned-bytes", AT(uid_quota.pinned_bytes), set_u64, 1, DEFAULT("0"), "per uid (0 = unlimited)"},
    {"quota.uid", "live_tensors", "uid-live-tensors", AT(uid_quota.live_tensors), set_u64, 1, DEFAULT("1048576"), "per uid (0 = unlimited)"},
    {"quota.uid", "queued_ops", "uid-queued-ops", AT(uid_quota.queued_ops), set_u64, 1, DEFAULT("262144"), "per uid (0 = unlimited)"},
    {"access", "allowed_users", "allowed-users", CUSTOM, set_allowed_users, 1, DEFAULT(""), "who may connect (users; none listed = everyone)"},
    {"access", "allowed_groups", "allowed-groups", CUSTOM, set_allowed_groups, 1, DEFAULT(""), "who may connect (groups; none listed = everyone)"},
    {"access", "admin_users", "admin-users", CUSTOM, set_admins, 1, DEFAULT(""), "who may drain/terminate (besides root)"},
    {"priority", "high", "priority-high", CUSTOM, set_high, 1, DEFAULT(""), "users/@groups whose streams run first"},
    {"priority", "low", "priority-low", CUSTOM, set_low, 1, DEFAULT(""), "users/@groups whose streams run last"},
    {"peers", "allow_cross_uid", "peers-allow-cross-uid", AT(peers_allow_cross_uid), set_bool, 1, DEFAULT("false"), "tf_copy_to may copy between clients of two uids"},
    {"peers", "copy_timeout_ms", "peers-copy-timeout-ms", AT(peers_copy_timeout_ms), set_u64, 1, DEFAULT("600000"), "how long a copy from another daemon may take, its connect and queued work included"},
    {"testing", "fault_injection", "test-fault-injection", AT(test_fault_injection), set_bool, 0, DEFAULT("false"),
     "serve the fault-injection operation, which makes the device fault (tests only)"},
    {"caches", "prepared_graphs", "prepared-graphs", AT(prepared_graphs), set_u64, 0, DEFAULT("64"), "prepared-graph instances kept for the next equal prepare, in use or idle (0 = unbounded)"},
    {"limits", "max_graph_nodes", "max-graph-nodes", AT(max_graph_nodes), set_int, 1, DEFAULT("4096"), "nodes one prepared graph may have"},
    {"limits", "max_prepared", "max-prepared", AT(max_prepared), set_int, 1, DEFAULT("256"), "prepared graphs one client may hold (0 = unlimited)"},
    {"limits", "max_prepared_per_uid", "max-prepared-per-uid", AT(max_prepared_per_uid), set_int, 1, DEFAULT("1024"), "prepared graphs all clients of one uid may hold (0 = unlimited)"},
    /* The contraction cache starts at this bound before the configuration is read (contract-cache.c). */
    {"caches", "contraction_plans", "contraction-plans", AT(contraction_plans), set_u64, 1, DEFAULT(VALUE_TEXT(TFD_CONTRACT_PLANS_DEFAULT)), "contraction plans kept, least recently used dropped (0 = unbounded)"},
    {"caches", "fft_plans", "fft-plans", AT(caches.fft_plans), set_u64, 0, DEFAULT("64"), "FFT plans kept (LRU bound; 0 = unbounded)"},
    {"caches", "fftw_planner", "fftw-planner", AT(caches.fftw_planner), set_planner, 0, DEFAULT("estimate"), "estimate, measure or patient (cpu)"},
    /* In the service's state directory (StateDirectory=tenferro in tenferrod@.service). */
    {"caches", "fftw_wisdom", "fftw-wisdom", CUSTOM, set_wisdom, 0, DEFAULT("/var/lib/tenferro/fftw-wisdom"), "FFTW wisdom file (empty = none)"},
};

#define N_SETTINGS (sizeof settings / sizeof *settings)

static const setting *find(const char *section, const char *key) {
    for (size_t i = 0; i < N_SETTINGS; i++)
        if (strcmp(settings[i].section, section) == 0 && strcmp(settings[i].key, key) == 0)
            return &settings[i];
    return NULL;
}

void tfd_config_apply_runtime(tfd_options *cur, const tfd_options *next) {
    for (size_t i = 0; i < N_SETTINGS; i++)
        if (settings[i].runtime && settings[i].size)
            memcpy((char *)cur + settings[i].offset, (const char *)next + settings[i].offset,
                   settings[i].size);
    /* The reloadable settings their setters store themselves: the access and priority lists. */
    memcpy(cur->allowed, next->allowed, sizeof cur->allowed);
    cur->n_allowed = next->n_allowed;
    memcpy(cur->admins, next->admins, sizeof cur->admins);
    cur->n_admins = next->n_admins;
    memcpy(cur->priorities, next->priorities, sizeof cur->priorities);
    cur->n_priorities = next->n_priorities;
}

/*
 * Every setting starts from its own setter given its default text, so a
 * default means exactly what the same line in the file would.
 */
void tfd_options_defaults(tfd_options *opt) {
    /*
     * Zero first for what is no setting: the counts of the access and priority
     * lists (their settings' empty defaults keep them at 0) and the padding,
     * so two default configurations compare equal byte for byte.
     */
    memset(opt, 0, sizeof *opt);
    for (size_t i = 0; i < N_SETTINGS; i++) {
        const setting *s = &settings[i];
        char text[64], why[256];
        if (s->machine) s->machine(text, sizeof text);
        const char *value = s->machine ? text : s->def;
        if (s->set(opt, (char *)opt + s->offset, value, why, sizeof why) != 0) {
            /* A default its own setter refuses is a bug of the table (test-config-table runs each). */
            tfd_log(TFD_LOG_ERROR, "config: the default of [%s] %s is refused: %s", s->section, s->key, why);
            abort();
        }
    }
}

int tfd_config_set(tfd_options *opt, const char *section, const char *key, const char *value,
                   char *err, size_t err_len) {
    const setting *s = find(section, key);
    if (!s) {
        snprintf(err, err_len, "unknown key \"%s\" in section [%s]", key, section);
        return -1;
    }
    char why[256];
    if (s->set(opt, (char *)opt + s->offset, value, why, sizeof why) != 0) {
        snprintf(err, err_len, "[%s] %s: %s", section, key, why);
        return -1;
    }
    return 0;
}

int tfd_config_flag(const char *flag, const char **section, const char **key) {
    for (size_t i = 0; i < N_SETTINGS; i++) {
        if (settings[i].flag && strcmp(settings[i].flag, flag) == 0) {
            *section = settings[i].section;
            *key = settings[i].key;
            return 0;
        }
    }
    return -1;
}

int tfd_config_switch(const char *section, const char *key) {
    const setting *s = find(section, key);
    return s && s->set == set_bool;
}

int tfd_config_runtime(const char *section, const char *key) {
    const setting *s = find(section, key);
    return s ? s->runtime : 0;
}

typedef struct load_ctx {
    tfd_options *opt;
    char reason[384];
} load_ctx;

/* libinih calls this per key; a 0 return makes ini_parse report the line. */
static int on_ini_key(void *user, const char *section, const char *key, const char *value) {
    load_ctx *ctx = user;
    if (!section[0]) {
        snprintf(ctx->reason, sizeof ctx->reason, "key \"%s\" outside any [section]", key);
        return 0;
    }
    return tfd_config_set(ctx->opt, section, key, value, ctx->reason, sizeof ctx->reason) == 0;
}

int tfd_config_load(const char *path, tfd_options *opt, char *err, size_t err_len) {
    load_ctx ctx = {.opt = opt};
    int line = ini_parse(path, on_ini_key, &ctx);
    if (line == 0) return 0;
    if (line == -1)
        snprintf(err, err_len, "%s: cannot open: %s", path, strerror(errno));
    else if (line == -2)
        snprintf(err, err_len, "%s: out of memory reading it", path);
    else
        snprintf(err, err_len, "%s:%d: %s", path, line, ctx.reason[0] ? ctx.reason : "syntax error");
    return -1;
}

void tfd_config_usage(FILE *out) {
    for (size_t i = 0; i < N_SETTINGS; i++) {
        const setting *s = &settings[i];
        if (!s->flag) continue;
        /* An unset default says nothing here: the help says what unset means. */
        fprintf(out, "  --%-22s [%s] %s: %s%s%s\n", s->flag, s->section, s->key, s->help,
                s->def[0] ? "; default " : "", s->def);
    }
}

int tfd_config_setting(size_t i, tfd_setting_info *info) {
    if (i >= N_SETTINGS) return -1;
    const setting *s = &settings[i];
    *info = (tfd_setting_info){
        .section = s->section,
        .key = s->key,
        .flag = s->flag,
        .def = s->def,
        .by_machine = s->machine != NULL,
        .runtime = s->runtime,
        .help = s->help,
    };
    return 0;
}

int tfd_startup_options(const tfd_startup *startup, tfd_options *opt, char *err, size_t err_len) {
    tfd_options_defaults(opt);
    if (startup->config_path[0] && tfd_config_load(startup->config_path, opt, err, err_len) != 0)
        return -1;
    for (int i = 0; i < startup->n_flags; i++) {
        const tfd_flag *f = &startup->flags[i];
        char why[384];
        if (tfd_config_set(opt, f->section, f->key, f->value, why, sizeof why) != 0) {
            snprintf(err, err_len, "command line: %s", why);
            return -1;
        }
    }
    /*
     * Below one reply of the largest frame, every large reply would stop a
     * client's input until it is read: a limit that low is a mistake.
     */
    if (opt->client_reply_bytes < opt->max_frame_bytes) {
        snprintf(err, err_len,
                 "[limits] client_reply_bytes (%llu) is below [daemon] max_frame_bytes (%llu): "
                 "raise it to at least the frame maximum",
                 (unsigned long long)opt->client_reply_bytes,
                 (unsigned long long)opt->max_frame_bytes);
        return -1;
    }
    return 0;
}
