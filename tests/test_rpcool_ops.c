// TSAN
/* rpcool operations: who is calling (rpcool_ctx_peer, for a client of another uid too), the
 * connection hooks (a refusal, a cap per uid, the disconnect hook once for a disconnect and once
 * for a SIGKILLed client within reap_ms, the per-connection user pointer), cancelling an
 * asynchronous call before, during and after its handler, the stats request at the socket
 * (exact counts, refused to another uid) and the rpcoolctl tool (live, stale, --clean, --json
 * checked by a JSON parser, run as another user). Under ThreadSanitizer the tool's tests are left
 * out (a killed server forked from a threaded test; the ASan build runs them). */
#define RPCOOL_IMPLEMENTATION
#include "rpcool.h"
#include "t.h"
#include <grp.h>
#include <pthread.h>

enum { FN_WHO = 20, FN_COUNT = 21, FN_MARK = 22, FN_LOOP = 23 };
#define OTHER_UID 54321u /* the test user: an unused uid, switched to by a child (root only) */

static int h_count(rpcool_ctx *ctx, void *arg, size_t len, void *user) /* the conn's counter */
{
    (void)arg, (void)len, (void)user;
    int *n = (int *)rpcool_ctx_conn_user(ctx);
    return n ? ++*n : -1;
}

static int marks;
static int h_mark(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx, (void)arg, (void)len, (void)user;
    __atomic_add_fetch(&marks, 1, __ATOMIC_SEQ_CST);
    return 7;
}

static int loop_started, loop_saw_cancel;
static int h_loop(rpcool_ctx *ctx, void *arg, size_t len, void *user) /* until cancelled, 3 s */
{
    (void)arg, (void)len, (void)user;
    __atomic_store_n(&loop_started, 1, __ATOMIC_SEQ_CST);
    for (int k = 0; k < 3000; k++) {
        if (rpcool_ctx_cancelled(ctx)) {
            __atomic_store_n(&loop_saw_cancel, 1, __ATOMIC_SEQ_CST);
            return 1;
        }
        usleep(1000);
    }
    return 0;
}

/* The hooks: a cap of `cap` connections per uid (0: none), refuse the uids in `deny`; each
   accepted connection gets a counter as its user pointer; the disconnect hook records why. */
struct hooks {
    unsigned cap, deny;
    int per_uid[4];
    int connects, disconnects, last_why, last_count;
    uint64_t left_at;
    pthread_mutex_t lock;
};

static int on_connect(rpcool_server *s, const rpcool_peer *p, void **cu, void *user)
{
    (void)s;
    struct hooks *h = (struct hooks *)user;
    int r = 0;
    pthread_mutex_lock(&h->lock);
    if (p->uid == h->deny || !p->authenticated) r = -EPERM;
    else if (h->cap && h->per_uid[p->uid % 4] >= (int)h->cap) r = RPCOOL_E_REFUSED;
    else {
        h->per_uid[p->uid % 4]++;
        h->connects++;
        *cu = calloc(1, sizeof(int));
    }
    pthread_mutex_unlock(&h->lock);
    return r;
}

static void on_disconnect(rpcool_server *s, const rpcool_peer *p, void *cu, int why, void *user)
{
    (void)s;
    struct hooks *h = (struct hooks *)user;
    pthread_mutex_lock(&h->lock);
    h->per_uid[p->uid % 4]--;
    h->last_why = why;
    h->last_count = cu ? *(int *)cu : -1;
    h->left_at = rcp__now_ns();
    __atomic_add_fetch(&h->disconnects, 1, __ATOMIC_SEQ_CST); /* last: t_wait_for's signal */
    pthread_mutex_unlock(&h->lock);
    free(cu);
}

static rpcool_server *serve(const char *name, struct hooks *h, unsigned threads, unsigned mode)
{
    rpcool_server_opts o;
    memset(&o, 0, sizeof o);
    o.reap_ms = 20;
    o.mode = mode;
    if (h) {
        o.on_connect = on_connect;
        o.on_disconnect = on_disconnect;
        o.hook_user = h;
    }
    rpcool_server *s = NULL;
    int r = rpcool_server_open(name, &o, &s);
    CHECKF(r == 0, "server_open: %s", rpcool_strerror(r));
    if (r) return NULL;
    static const struct { unsigned id; rpcool_handler *fn; } hd[] = {
        {FN_WHO, t_h_peer}, {FN_COUNT, h_count}, {FN_MARK, h_mark}, {FN_LOOP, h_loop},
        {T_FN_SLOW, t_h_slow}};
    for (unsigned k = 0; k < sizeof hd / sizeof hd[0]; k++)
        rpcool_server_add_handler(s, hd[k].id, hd[k].fn, NULL, 0);
    rpcool_server_start(s, threads);
    return s;
}

/* A server of one thread, no hooks, and a connection to it: 0, or -1 (a FAIL line). */
static int serve_conn(const char *base, rpcool_server **s, rpcool_conn **c)
{
    const char *name = t_uniq(base);
    *c = NULL;
    if (!(*s = serve(name, NULL, 1, 0))) return -1;
    CHECK_EQ(rpcool_connect(name, NULL, c), 0);
    if (*c) return 0;
    rpcool_server_close(*s);
    return -1;
}

/* Fork a child running fn(arg), which prints a line to its stdout once it is ready: its pid
   once that line came (the child is SIGKILLed later with t_kill_wait), or -1. */
static pid_t child_ready(int (*fn)(void *), void *arg)
{
    int pfd[2];
    char buf[16] = {0};
    if (pipe(pfd)) return -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pfd[1], 1);
        _exit(fn(arg));
    }
    close(pfd[1]);
    int ok = read(pfd[0], buf, sizeof buf - 1) > 0;
    close(pfd[0]);
    if (ok) return pid;
    t_kill_wait(pid);
    return -1;
}

/* The end of a cancel test: the calls cancelled before their handler started, as counted. */
static void cancel_end(rpcool_server *s, rpcool_conn *c, unsigned cancelled)
{
    rpcool_server_stats st;
    rpcool_server_get_stats(s, &st);
    CHECK_EQ(st.cancelled, cancelled);
    rpcool_disconnect(c);
    rpcool_server_close(s);
}

/* Become the test user (a child only); 0, or -1. */
static int become_other(void)
{
    gid_t g = (gid_t)OTHER_UID;
    return setgroups(1, &g) || setgid((gid_t)OTHER_UID) || setuid((uid_t)OTHER_UID) ? -1 : 0;
}

/* A child that connects (as the test user if other), asks FN_WHO and writes what the handler saw
   to a pipe, then exits: the peer record, or zeros on an error. */
static int who_child(const char *name, int other, int fd)
{
    rpcool_peer p;
    memset(&p, 0, sizeof p);
    rpcool_conn *c = NULL;
    if (other && become_other()) return 3;
    int r = rpcool_connect(name, NULL, &c);
    if (!r) {
        void *ret = NULL;
        size_t rl = 0;
        r = rpcool_call(c, FN_WHO, NULL, 0, &ret, &rl);
        if (r == 0 && ret && rl == sizeof p) memcpy(&p, ret, sizeof p);
        rpcool_free(c, ret);
        rpcool_disconnect(c);
    }
    p.slot = (unsigned)r; /* the status rides in the slot field */
    return write(fd, &p, sizeof p) == (ssize_t)sizeof p ? 0 : 2;
}

static void identity_of(int other)
{
    const char *name = t_uniq("who");
    rpcool_server *s = serve(name, NULL, 1, 0666);
    if (!s) return;
    int pfd[2];
    CHECK(pipe(pfd) == 0);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) _exit(who_child(name, other, pfd[1]));
    rpcool_peer p;
    memset(&p, 0, sizeof p);
    CHECK_EQ(read(pfd[0], &p, sizeof p), sizeof p);
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECKF(p.slot == 0, "child's call: %s", rpcool_strerror((int)p.slot));
    CHECK_EQ(p.pid, pid);
    CHECK_EQ(p.uid, other ? OTHER_UID : getuid());
    CHECK_EQ(p.gid, other ? OTHER_UID : getgid());
    CHECK_EQ(p.authenticated, 1);
    CHECK_EQ(p.transport, RPCOOL_TRANSPORT_SHM);
    const char *pod = getenv("SHMHEAP_POD");
    CHECK(!strcmp(p.pod, pod && *pod ? pod : SHMHEAP__POD_DEFAULT));
    close(pfd[0]);
    close(pfd[1]);
    rpcool_server_close(s);
}

static void identity_same_uid(void) { identity_of(0); }

static void identity_other_uid(void) { identity_of(1); }

/* on_connect refuses: the code reaches rpcool_connect; the cap of one connection per uid; the
   user pointer is the connection's own; refused connects are counted. */
static void hook_refuse_and_cap(void)
{
    struct hooks h;
    memset(&h, 0, sizeof h);
    pthread_mutex_init(&h.lock, NULL);
    h.cap = 1;
    h.deny = (unsigned)-2;
    const char *name = t_uniq("cap");
    rpcool_server *s = serve(name, &h, 1, 0);
    if (!s) return;
    rpcool_conn *a = NULL, *b = NULL;
    CHECK_EQ(rpcool_connect(name, NULL, &a), 0);
    CHECK_EQ(rpcool_connect(name, NULL, &b), RPCOOL_E_REFUSED); /* over the cap */
    CHECK(b == NULL);
    CHECK_EQ(rpcool_call(a, FN_COUNT, NULL, 0, NULL, NULL), 1);
    CHECK_EQ(rpcool_call(a, FN_COUNT, NULL, 0, NULL, NULL), 2);
    CHECK_EQ(rpcool_disconnect(a), 0);
    t_wait_for(&h.disconnects, 1, 1000);
    CHECK_EQ(__atomic_load_n(&h.disconnects, __ATOMIC_SEQ_CST), 1);
    CHECK_EQ(h.last_count, 2);
    CHECK_EQ(rpcool_connect(name, NULL, &b), 0); /* under the cap again */
    CHECK_EQ(rpcool_call(b, FN_COUNT, NULL, 0, NULL, NULL), 1); /* a fresh counter */
    pthread_mutex_lock(&h.lock);
    h.deny = getuid(); /* the allow-list no longer has us */
    pthread_mutex_unlock(&h.lock);
    CHECK_EQ(rpcool_connect(name, NULL, &a), -EPERM);
    rpcool_server_stats st;
    rpcool_server_get_stats(s, &st);
    CHECK_EQ(st.refused, 2);
    CHECK_EQ(st.accepted, 2);
    rpcool_disconnect(b);
    rpcool_server_close(s);
    CHECK_EQ(h.connects, 2);
    CHECK_EQ(__atomic_load_n(&h.disconnects, __ATOMIC_SEQ_CST), 2); /* each accepted connect once */
    pthread_mutex_destroy(&h.lock);
}

static int connect_and_hang(void *name)
{
    rpcool_conn *c = NULL;
    if (rpcool_connect((const char *)name, NULL, &c)) return 1;
    if (rpcool_call(c, FN_COUNT, NULL, 0, NULL, NULL) != 1) return 2;
    printf("connected\n");
    fflush(stdout);
    for (;;) pause();
}

/* The disconnect hook: once for a disconnect (why 0), once for a SIGKILLed client
   (RPCOOL_E_PEERDEAD) within reap_ms (20 ms; 500 ms allowed for a loaded machine). */
static void hook_disconnect_and_kill(void)
{
    struct hooks h;
    memset(&h, 0, sizeof h);
    pthread_mutex_init(&h.lock, NULL);
    h.deny = (unsigned)-2;
    const char *name = t_uniq("gone");
    rpcool_server *s = serve(name, &h, 1, 0);
    if (!s) return;
    rpcool_conn *a = NULL;
    CHECK_EQ(rpcool_connect(name, NULL, &a), 0);
    rpcool_disconnect(a);
    t_wait_for(&h.disconnects, 1, 1000);
    CHECK_EQ(__atomic_load_n(&h.disconnects, __ATOMIC_SEQ_CST), 1);
    CHECK_EQ(h.last_why, 0);
    pid_t pid = child_ready(connect_and_hang, (void *)name);
    CHECK(pid > 0);
    uint64_t t0 = rcp__now_ns();
    t_kill_wait(pid);
    t_wait_for(&h.disconnects, 2, 400);
    pthread_mutex_lock(&h.lock);
    CHECK_EQ(__atomic_load_n(&h.disconnects, __ATOMIC_SEQ_CST), 2);
    CHECK_EQ(h.last_why, RPCOOL_E_PEERDEAD);
    CHECK_EQ(h.last_count, 1);
    CHECKF(h.left_at - t0 < 500000000ull, "reaped after %llu ms",
           (unsigned long long)((h.left_at - t0) / 1000000));
    pthread_mutex_unlock(&h.lock);
    usleep(100000);
    CHECK_EQ(__atomic_load_n(&h.disconnects, __ATOMIC_SEQ_CST), 2); /* never twice */
    rpcool_server_close(s);
    CHECK_EQ(__atomic_load_n(&h.disconnects, __ATOMIC_SEQ_CST), 2);
    pthread_mutex_destroy(&h.lock);
}

/* Cancel before the handler starts: the one serving thread is busy; the cancelled call's
   handler never runs, its id is finished. */
static void cancel_before_start(void)
{
    rpcool_server *s;
    rpcool_conn *c;
    if (serve_conn("cb", &s, &c)) return;
    int *ms = (int *)rpcool_alloc(c, sizeof *ms);
    *ms = 200;
    uint64_t slow, victim;
    __atomic_store_n(&marks, 0, __ATOMIC_SEQ_CST);
    CHECK_EQ(rpcool_call_async(c, T_FN_SLOW, ms, sizeof *ms, NULL, NULL, NULL, &slow), 0);
    usleep(50000); /* the serving thread is inside the slow handler */
    CHECK_EQ(rpcool_call_async(c, FN_MARK, NULL, 0, NULL, NULL, NULL, &victim), 0);
    CHECK_EQ(rpcool_cancel(c, victim), 0);
    CHECK_EQ(rpcool_poll(c, victim, NULL, NULL), RPCOOL_E_CANCELLED); /* finished by the cancel */
    CHECK_EQ(rpcool_cancel(c, victim), RPCOOL_E_INVAL);
    CHECK_EQ(rpcool_wait(c, slow, NULL, NULL), 1);
    CHECK_EQ(rpcool_call(c, FN_MARK, NULL, 0, NULL, NULL), 7); /* after the cancelled one */
    CHECK_EQ(marks, 1);                                          /* that one only */
    for (int k = 0; k < 100; k++) { /* every slot comes back: 64 calls in flight fit again */
        uint64_t id;
        CHECK_EQ(rpcool_call_async(c, FN_MARK, NULL, 0, NULL, NULL, NULL, &id), 0);
        CHECK_EQ(rpcool_wait(c, id, NULL, NULL), 7);
    }
    rpcool_free(c, ms);
    cancel_end(s, c, 1);
}

/* Cancel during the handler: it sees rpcool_ctx_cancelled and stops early. */
static void cancel_during(void)
{
    rpcool_server *s;
    rpcool_conn *c;
    if (serve_conn("cd", &s, &c)) return;
    __atomic_store_n(&loop_saw_cancel, 0, __ATOMIC_SEQ_CST);
    uint64_t t0 = t_cancel_running(c, FN_LOOP, &loop_started, 1000);
    CHECK(t_wait_for(&loop_saw_cancel, 1, 1000));
    CHECKF(rcp__now_ns() - t0 < 1000000000ull, "the handler stopped after %llu ms",
           (unsigned long long)((rcp__now_ns() - t0) / 1000000));
    CHECK_EQ(rpcool_call(c, FN_MARK, NULL, 0, NULL, NULL), 7); /* the thread serves again */
    cancel_end(s, c, 0); /* it had started: not counted as cancelled before start */
}

/* Cancel after the handler finished: no effect on it; the reply is freed, 1 is returned. */
static void cancel_after(void)
{
    rpcool_server *s;
    rpcool_conn *c;
    if (serve_conn("ca", &s, &c)) return;
    uint64_t id;
    shmheap_stats hs;
    CHECK_EQ(shmheap_check(rpcool_heap(c), &hs), 0);
    size_t before = hs.live_blocks; /* the connection header */
    CHECK_EQ(rpcool_call_async(c, FN_WHO, NULL, 0, NULL, NULL, NULL, &id), 0);
    for (int k = 0; k < 2000 && !rpcool__done(c, (unsigned)(id & 0xff)); k++) usleep(1000);
    CHECK_EQ(rpcool_cancel(c, id), 1); /* its reply is there: the handler ran */
    CHECK_EQ(rpcool_poll(c, id, NULL, NULL), RPCOOL_E_INVAL);
    CHECK_EQ(shmheap_check(rpcool_heap(c), &hs), 0);
    CHECK_EQ(hs.live_blocks, before); /* its reply was freed */
    cancel_end(s, c, 0);
}

/* The stats request at the socket: exact counts for a server with three clients, one call in
   flight. */
static void channel_stats_counts(void)
{
    const char *name = t_uniq("st");
    rpcool_server *s = serve(name, NULL, 2, 0);
    if (!s) return;
    rpcool_conn *c[3] = {0};
    for (int k = 0; k < 3; k++) CHECK_EQ(rpcool_connect(name, NULL, &c[k]), 0);
    for (int k = 0; k < 5; k++) CHECK_EQ(rpcool_call(c[1], FN_MARK, NULL, 0, NULL, NULL), 7);
    int *ms = (int *)rpcool_alloc(c[2], sizeof *ms);
    *ms = 300;
    uint64_t id;
    CHECK_EQ(rpcool_call_async(c[2], T_FN_SLOW, ms, sizeof *ms, NULL, NULL, NULL, &id), 0);
    usleep(50000);
    rpcool_server_stats st;
    rpcool_conn_stats cs[8];
    unsigned n = 0;
    memset(&st, 0, sizeof st);
    CHECK_EQ(rpcool_channel_stats(name, 0, &st, cs, 8, &n), 0);
    CHECK_EQ(n, 3);
    CHECK_EQ(st.conns, 3);
    CHECK_EQ(st.accepted, 3);
    CHECK_EQ(st.calls, 6); /* five done, one running */
    CHECK_EQ(st.server_pid, getpid());
    CHECK_EQ(st.max_conns, RPCOOL_DEFAULT_MAX_CONNS);
    unsigned inflight = 0;
    for (unsigned k = 0; k < n && k < 8; k++) {
        inflight += cs[k].inflight;
        CHECK_EQ(cs[k].peer.pid, getpid());
        CHECK_EQ(cs[k].peer.uid, getuid());
        CHECK_EQ(cs[k].peer.authenticated, 1);
    }
    CHECK_EQ(inflight, 1);
    CHECK_EQ(rpcool_channel_stats(name, 0, &st, cs, 1, &n), 0); /* room for one: told of 3 */
    CHECK_EQ(n, 3);
    CHECK_EQ(rpcool_channel_stats("no-such-chan", 0, &st, NULL, 0, NULL), RPCOOL_E_NOCHANNEL);
    CHECK_EQ(rpcool_channel_stats("bad/name", 0, &st, NULL, 0, NULL), RPCOOL_E_BADNAME);
    CHECK_EQ(rpcool_channel_stats("no-such-chan", 0, NULL, NULL, 0, NULL), RPCOOL_E_INVAL);
    CHECK_EQ(rpcool_wait(c[2], id, NULL, NULL), 1);
    rpcool_free(c[2], ms);
    for (int k = 0; k < 3; k++) rpcool_disconnect(c[k]);
    rpcool_server_close(s);
}

static int stats_as_other(void *name)
{
    rpcool_server_stats st;
    if (become_other()) return 3;
    int r = rpcool_channel_stats((const char *)name, 0, &st, NULL, 0, NULL);
    return r == -EACCES ? 0 : 10 + (r == 0);
}

/* Another uid (the socket open to it) is refused the stats. */
static void channel_stats_other_uid(void)
{
    const char *name = t_uniq("so");
    rpcool_server *s = serve(name, NULL, 1, 0666);
    if (!s) return;
    CHECK_EQ(t_in_child(stats_as_other, (void *)name), 0);
    rpcool_server_close(s);
}

/* ---- the tool --------------------------------------------------------------------------- */

static char tool[512];

/* Run the tool with args (as the test user if other), its output into out; exit status. */
static int run_tool(const char *args, int other, char *out, size_t cap)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s%s %s 2>&1", other ? "setpriv --reuid=54321 --regid=54321 "
                                                      "--clear-groups " : "", tool, args);
    FILE *f = popen(cmd, "r");
    if (!f) return -1;
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = '\0';
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int serve_forever(void *name)
{
    rpcool_server_opts o;
    memset(&o, 0, sizeof o);
    o.mode = 0666;
    rpcool_server *s = NULL;
    if (rpcool_server_open((const char *)name, &o, &s)) return 1;
    printf("up\n");
    fflush(stdout);
    for (;;) pause();
}

/* A line of the tool's text output about channel name, or NULL. */
static const char *line_of(const char *out, const char *name)
{
    return strstr(out, name);
}

/* The value in column head (of the header line of the channels' table) of channel name's row of
   the tool's text output, or "" when there is no such header or row. */
static const char *column(const char *out, const char *name, const char *head)
{
    static char val[64];
    char hdr[512] = "", row[512] = "";
    val[0] = '\0';
    for (const char *l = out; l && *l;) {
        const char *e = strchr(l, '\n');
        size_t n = e ? (size_t)(e - l) : strlen(l);
        char line[512];
        snprintf(line, sizeof line, "%.*s", (int)(n < 511 ? n : 511), l);
        char first[128] = "";
        sscanf(line, "%127s", first);
        if (!strcmp(first, "NAME") && strstr(line, " STATE ")) snprintf(hdr, sizeof hdr, "%s", line);
        else if (!strcmp(first, name)) snprintf(row, sizeof row, "%s", line);
        l = e ? e + 1 : NULL;
    }
    int at = -1, k = 0;
    for (char *sv = NULL, *t = strtok_r(hdr, " ", &sv); t; t = strtok_r(NULL, " ", &sv), k++)
        if (!strcmp(t, head)) at = k;
    k = 0;
    for (char *sv = NULL, *t = strtok_r(row, " ", &sv); t && at >= 0; t = strtok_r(NULL, " ", &sv))
        if (k++ == at) snprintf(val, sizeof val, "%s", t);
    return val;
}

/* The tool against a live server with clients: its counts, text and JSON (parsed by python3's
   json module); a SIGKILLed server shown stale and cleaned by --clean, the live one untouched. */
static void tool_live_and_stale(void)
{
    const char *live = t_uniq("tl"), *dead = t_uniq("td");
    rpcool_server *s = serve(live, NULL, 1, 0);
    if (!s) return;
    rpcool_conn *c[2] = {0};
    for (int k = 0; k < 2; k++) CHECK_EQ(rpcool_connect(live, NULL, &c[k]), 0);
    for (int k = 0; k < 4; k++) CHECK_EQ(rpcool_call(c[0], FN_MARK, NULL, 0, NULL, NULL), 7);
    pid_t pid = child_ready(serve_forever, (void *)dead);
    CHECK(pid > 0);
    t_kill_wait(pid);
    static char out[65536];
    char args[300];
    snprintf(args, sizeof args, "%s %s", live, dead);
    CHECK_EQ(run_tool(args, 0, out, sizeof out), 0);
    char conns[64];
    snprintf(conns, sizeof conns, "2/%u", RPCOOL_DEFAULT_MAX_CONNS);
    CHECKF(!strcmp(column(out, live, "STATE"), "live") &&
           !strcmp(column(out, live, "CONNS"), conns) && !strcmp(column(out, live, "CALLS"), "4"),
           "tool output:\n%s", out);
    CHECKF(!strcmp(column(out, dead, "STATE"), "stale"), "tool output:\n%s", out);
    /* JSON, through a real parser, with the exact counts */
    char cmd[1500];
    snprintf(cmd, sizeof cmd, "%s --json %s | python3 -c 'import json,sys; d=json.load(sys.stdin); "
             "c={x[\"name\"]:x for x in d[\"channels\"]}; l=c[\"%s\"]; "
             "assert l[\"state\"]==\"live\" and l[\"stats\"][\"conns\"]==2 and "
             "l[\"stats\"][\"calls\"]==4 and len(l[\"conns\"])==2, l; "
             "assert c[\"%s\"][\"state\"]==\"stale\"; assert isinstance(d[\"heaps\"], list)'",
             tool, args, live, dead);
    CHECKF(system(cmd) == 0, "JSON check failed (python3 from tests/deps.sh): %s", cmd);
    /* --clean: the stale channel's files go, the live one's stay */
    char p[256];
    snprintf(p, sizeof p, "/dev/shm/rpcool.%s", dead);
    CHECK(access(p, F_OK) == 0);
    snprintf(cmd, sizeof cmd, "--clean %s", args); /* only these: others' tests run here too */
    CHECK_EQ(run_tool(cmd, 0, out, sizeof out), 0);
    CHECKF(access(p, F_OK) != 0, "stale name file left: %s", out);
    snprintf(p, sizeof p, "/dev/shm/rpcool.%s.sock", dead);
    CHECK(access(p, F_OK) != 0);
    snprintf(p, sizeof p, "/dev/shm/rpcool.%s", live);
    CHECK(access(p, F_OK) == 0);
    snprintf(p, sizeof p, "/dev/shm/rpcool.%s.sock", live);
    CHECK(access(p, F_OK) == 0);
    CHECK_EQ(rpcool_call(c[1], FN_MARK, NULL, 0, NULL, NULL), 7); /* still served */
    rpcool_conn *c3 = NULL;
    CHECK_EQ(rpcool_connect(live, NULL, &c3), 0); /* and still connectable */
    rpcool_disconnect(c3);
    for (int k = 0; k < 2; k++) rpcool_disconnect(c[k]);
    rpcool_server_close(s);
    t_rm_channel(dead);
}

/* The text output's tables have their column headers (heaps, channels, a channel's
   connections, exports); a live channel's row reads under them. */
static void tool_text_headers(void)
{
    const char *live = t_uniq("th");
    rpcool_server *s = serve(live, NULL, 1, 0);
    if (!s) return;
    rpcool_conn *c = NULL;
    CHECK_EQ(rpcool_connect(live, NULL, &c), 0);
    static char out[65536];
    CHECK_EQ(run_tool(live, 0, out, sizeof out), 0);
    CHECKF(strstr(out, "channels:\n  NAME ") && strstr(out, " STATE ") && strstr(out, " PID ") &&
           strstr(out, " CONNS ") && strstr(out, " CALLS ") && strstr(out, " NOTE\n"),
           "no channel header:\n%s", out);
    CHECKF(strstr(out, "      TRANSPORT SLOT  PID      UID    GID    INFLIGHT PEER\n"),
           "no connection header:\n%s", out);
    CHECKF(!strstr(out, "heaps of pod") || strstr(out, "  BASE ") || strstr(out, ": none"),
           "no heap header:\n%s", out);
    char pid[16];
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    CHECKF(!strcmp(column(out, live, "PID"), pid) && !strcmp(column(out, live, "CALLS"), "0"),
           "tool output:\n%s", out);
    CHECK_EQ(run_tool("", 0, out, sizeof out), 0); /* all: exports are listed, with a header */
    CHECKF(strstr(out, "exports: none\n") || strstr(out, "exports (liveness files):\n  FILE "),
           "no exports' header:\n%s", out);
    rpcool_disconnect(c);
    rpcool_server_close(s);
}

/* A channel named that is not there, or a malformed name: an error on stderr and a non-zero
   exit (3 and 2), in text and in JSON (its "missing" list); "channels: none" is no answer. */
static void tool_unknown_and_malformed(void)
{
    static char out[65536];
    const char *none = t_uniq("tnone");
    CHECK_EQ(run_tool(none, 0, out, sizeof out), 3);
    CHECKF(strstr(out, "no such channel") && strstr(out, none), "tool output:\n%s", out);
    CHECK_EQ(run_tool("bad/name", 0, out, sizeof out), 2);
    CHECKF(strstr(out, "malformed channel name") && !strstr(out, "channels:"),
           "tool output:\n%s", out);
    CHECK_EQ(run_tool("--json bad/name", 0, out, sizeof out), 2);
    char args[300], cmd[1200];
    snprintf(args, sizeof args, "--json %s", none);
    CHECK_EQ(run_tool(args, 0, out, sizeof out), 3);
    snprintf(cmd, sizeof cmd, "%s --json %s | python3 -c 'import json,sys; d=json.load(sys.stdin);"
             " assert d[\"missing\"]==[\"%s\"] and d[\"channels\"]==[], d'", tool, none, none);
    CHECKF(system(cmd) == 0, "JSON check failed: %s", cmd);
}

/* An export's liveness file (/dev/shm/rpcool.x.HEAP.RECORD) is shown as an export, in text and
   JSON, never as a (stale) channel; its users and exporter as they are. */
static void tool_exports_not_channels(void)
{
    const char *hname = t_uniq("txh");
    shmheap *h = t_heap(hname, 8 << 20);
    if (!h) return;
    void *data = shmheap_calloc(h, 1, 4096);
    rpcool_export *x = NULL;
    CHECK_EQ(rpcool_export_create(h, "tooldata", data, 4096, NULL, &x), 0);
    char pre[64];
    snprintf(pre, sizeof pre, "x.%llx.", (unsigned long long)(uintptr_t)shmheap_base(h));
    static char out[65536];
    CHECK_EQ(run_tool("", 0, out, sizeof out), 0);
    char row[80];
    snprintf(row, sizeof row, "\n  rpcool.%s", pre);
    const char *r = strstr(out, row), *ex = strstr(out, "exports (liveness files):");
    CHECKF(ex && r && r > ex, "the export's file is not listed as an export:\n%s", out);
    char asname[80];
    snprintf(asname, sizeof asname, "\n  %s", pre);
    CHECKF(!strstr(out, asname), "the export's file is listed as a channel:\n%s", out);
    CHECKF(r && strstr(r, " yes ") && strstr(r, " live"), "users and exporter:\n%s", out);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "%s --json | python3 -c 'import json,sys; d=json.load(sys.stdin); "
             "p=\"%s\"; assert not [c for c in d[\"channels\"] if c[\"name\"].startswith(p)], d;"
             " e=[x for x in d[\"exports\"] if x[\"file\"].startswith(\"rpcool.\"+p)]; "
             "assert len(e)==1 and e[0][\"users\"] is True and e[0][\"exporter\"] is True and "
             "int(e[0][\"heap_base\"],16)==%llu, e'", tool, pre,
             (unsigned long long)(uintptr_t)shmheap_base(h));
    CHECKF(system(cmd) == 0, "JSON check failed: %s", cmd);
    CHECK_EQ(rpcool_export_close(x), 0);
    shmheap_free(h, data);
    t_rm_empty(h, hname);
}

/* `rpcoolctl --json` against the layout tools/rpcoolctl.md documents: every field of every object, of its
   type, and no other (tests/rpcoolctl_schema.py), with a live channel with connections, a stale
   one, an export and a missing name in the report. */
static void tool_json_schema(void)
{
    const char *live = t_uniq("tj"), *dead = t_uniq("tjd"), *none = t_uniq("tjn");
    rpcool_server *s = serve(live, NULL, 1, 0);
    if (!s) return;
    rpcool_conn *c = NULL;
    CHECK_EQ(rpcool_connect(live, NULL, &c), 0);
    pid_t pid = child_ready(serve_forever, (void *)dead);
    CHECK(pid > 0);
    t_kill_wait(pid);
    char self[400], script[600], cmd[2000];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = '\0';
    if (strrchr(self, '/')) *strrchr(self, '/') = '\0';
    snprintf(script, sizeof script, "%s/../../tests/rpcoolctl_schema.py", self);
    if (access(script, R_OK)) snprintf(script, sizeof script, "tests/rpcoolctl_schema.py");
    snprintf(cmd, sizeof cmd, "%s --json %s %s %s | python3 %s", tool, live, dead, none, script);
    CHECKF(system(cmd) == 0, "schema check failed: %s", cmd);
    snprintf(cmd, sizeof cmd, "%s --json | python3 %s", tool, script); /* all, exports too */
    CHECKF(system(cmd) == 0, "schema check failed: %s", cmd);
    rpcool_disconnect(c);
    rpcool_server_close(s);
    t_rm_channel(dead);
}

/* Run as another user: the channel is listed, its stats are not given, --clean touches it not. */
static void tool_other_user(void)
{
    const char *live = t_uniq("to");
    rpcool_server *s = serve(live, NULL, 1, 0666);
    if (!s) return;
    rpcool_conn *c = NULL;
    CHECK_EQ(rpcool_connect(live, NULL, &c), 0);
    static char out[65536];
    CHECK_EQ(run_tool(live, 1, out, sizeof out), 0);
    const char *l = line_of(out, live);
    CHECKF(l && !strcmp(column(out, live, "STATE"), "live") && strstr(l, "not permitted") &&
           !strcmp(column(out, live, "CONNS"), "-"), "tool output as uid %u:\n%s", OTHER_UID,
           out);
    char args[300];
    snprintf(args, sizeof args, "--clean %s", live);
    CHECK_EQ(run_tool(args, 1, out, sizeof out), 0); /* nothing stale: nothing refused */
    char p[256];
    snprintf(p, sizeof p, "/dev/shm/rpcool.%s", live);
    CHECK(access(p, F_OK) == 0);
    CHECK_EQ(rpcool_call(c, FN_MARK, NULL, 0, NULL, NULL), 7);
    rpcool_disconnect(c);
    rpcool_server_close(s);
}

/* A test that needs root (a test user: a child switches to OTHER_UID), or the tool built. */
#define RUN_ROOT(fn) do { if (!t_only || strstr(#fn, t_only)) { \
    if (geteuid()) t_skip(#fn, "needs root to make a test user (uid 54321)"); else TEST(fn); } \
    } while (0)
#define RUN_TOOL(fn, root) do { if (!t_only || strstr(#fn, t_only)) { \
    if (access(tool, X_OK)) t_skip(#fn, "build/bin/rpcoolctl is not built (make builds it)"); \
    else if (root) RUN_ROOT(fn); else TEST(fn); } } while (0)

int main(int argc, char **argv)
{
    t_init(argc, argv);
    char self[400];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = '\0';
    char *sl = strrchr(self, '/');
    if (sl) *sl = '\0';
    snprintf(tool, sizeof tool, "%s/../bin/rpcoolctl", self); /* build/t -> build/bin */
    RUN(identity_same_uid);
    RUN_ROOT(identity_other_uid);
    RUN(hook_refuse_and_cap);
    RUN(hook_disconnect_and_kill);
    RUN(cancel_before_start);
    RUN(cancel_during);
    RUN(cancel_after);
    RUN(channel_stats_counts);
    RUN_ROOT(channel_stats_other_uid);
#ifndef T_TSAN
    RUN_TOOL(tool_live_and_stale, 0);
    RUN_TOOL(tool_other_user, 1);
    RUN_TOOL(tool_text_headers, 0);
    RUN_TOOL(tool_unknown_and_malformed, 0);
    RUN_TOOL(tool_exports_not_channels, 0);
    RUN_TOOL(tool_json_schema, 0);
#else
    (void)tool_live_and_stale, (void)tool_other_user, (void)tool_text_headers;
    (void)tool_unknown_and_malformed, (void)tool_exports_not_channels, (void)tool_json_schema;
#endif
    return T_DONE();
}
