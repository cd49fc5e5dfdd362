/* Compile-time and run-time options of shmheap.h and rpcool.h: the allocation hooks
 * (SHMHEAP_MALLOC/SHMHEAP_FREE, RPCOOL_MALLOC/RPCOOL_FREE), the log callbacks of the opts
 * structs, and the SHMHEAP_DEBUG/RPCOOL_DEBUG stderr loggers; the SHMHEAP_STATIC/RPCOOL_STATIC
 * builds, every error code's explanation, connect_timeout_ms and the channel file's mode,
 * max_conns and pods. */
#include <stdatomic.h>
#include <stddef.h>

/* Counting hooks: every private allocation of either library must come through them. */
static atomic_long t_shm_allocs, t_shm_frees, t_rpc_allocs, t_rpc_frees;
static void *t_shm_malloc(size_t n);
static void t_shm_free(void *p);
static void *t_rpc_malloc(size_t n);
static void t_rpc_free(void *p);
#define SHMHEAP_MALLOC(n) t_shm_malloc(n)
#define SHMHEAP_FREE(p) t_shm_free(p)
#define RPCOOL_MALLOC(n) t_rpc_malloc(n)
#define RPCOOL_FREE(p) t_rpc_free(p)
#define RPCOOL_IMPLEMENTATION
#include "rpcool.h"
#include "t.h"
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>

static void *t_shm_malloc(size_t n) { atomic_fetch_add(&t_shm_allocs, 1); return malloc(n); }
static void t_shm_free(void *p) { if (p) atomic_fetch_add(&t_shm_frees, 1); free(p); }
static void *t_rpc_malloc(size_t n) { atomic_fetch_add(&t_rpc_allocs, 1); return malloc(n); }
static void t_rpc_free(void *p) { if (p) atomic_fetch_add(&t_rpc_frees, 1); free(p); }

static int echo(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)user;
    void *r = rpcool_ctx_alloc(ctx, len ? len : 1);
    if (!r) return SHMHEAP_E_FULL;
    if (len) memcpy(r, arg, len);
    rpcool_ctx_reply(ctx, r, len);
    return 0;
}

/* Every allocation the libraries make goes through the hooks, and each is given back: a heap
   opened and closed, a batch unseal, a server with threads and handlers, a client that makes
   COPY calls (the serving thread's copy buffer grows and, past 1 MiB, is given back) and sealed
   calls released in a batch. */
static void hooks_used_and_balanced(void)
{
    const char *hn = t_uniq("ohook");
    shmheap_opts ho = {.size = 4 << 20};
    shmheap *h = NULL, *h2 = NULL;
    long shm0 = atomic_load(&t_shm_allocs);
    CHECK_EQ(shmheap_create(hn, &ho, &h), 0);
    CHECK_EQ(shmheap_open(hn, NULL, &h2), 0); /* the same handle, counted */
    if (h) {
        char *p = (char *)shmheap_aligned_alloc(h, 4096, 8192);
        CHECK(p != NULL);
        shmheap_range rg[2] = {{p, 4096}, {p + 4096, 4096}};
        CHECK_EQ(shmheap_seal(h, p, 8192), 0);
        CHECK_EQ(shmheap_unseal_batch(h, rg, 2), 0);
        shmheap_free(h, p);
    }
    if (h2) shmheap_close(h2);
    if (h) shmheap_close(h);
    shmheap_unlink(hn, NULL);
    CHECKF(atomic_load(&t_shm_allocs) > shm0, "shmheap allocated nothing through SHMHEAP_MALLOC");

    long rpc0 = atomic_load(&t_rpc_allocs);
    const char *ch = t_uniq("ohookch");
    rpcool_server *s = NULL;
    rpcool_conn *c = NULL;
    CHECK_EQ(rpcool_server_open(ch, NULL, &s), 0);
    if (!s) return;
    CHECK_EQ(rpcool_server_add_handler(s, 1, echo, NULL, 0), 0);
    CHECK_EQ(rpcool_server_add_handler(s, 1, echo, NULL, 0), 0); /* replaced: retired, freed */
    CHECK_EQ(rpcool_server_start(s, 2), 0);
    rpcool_conn_opts co = {.heap_size = 8 << 20, .seal_batch = 4};
    CHECK_EQ(rpcool_connect(ch, &co, &c), 0);
    if (c) {
        size_t sizes[3] = {100, 300000, 2 << 20};
        for (int k = 0; k < 3; k++) {
            char *a = (char *)rpcool_alloc(c, sizes[k]);
            CHECK(a != NULL);
            if (!a) continue;
            memset(a, 'a' + k, sizes[k]);
            rpcool_call_opts copy = {.safety = RPCOOL_COPY};
            void *ret = NULL;
            size_t n = 0;
            CHECK_EQ(rpcool_call_ex(c, 1, a, sizes[k], &copy, &ret, &n), 0);
            CHECK_EQ(n, sizes[k]);
            CHECK(ret && !memcmp(ret, a, sizes[k]));
            rpcool_free(c, ret);
            rpcool_free(c, a);
        }
        char *pg = (char *)rpcool_alloc_pages(c, 4096);
        CHECK(pg != NULL);
        rpcool_call_opts seal = {.safety = RPCOOL_SEAL};
        for (int k = 0; pg && k < 3; k++) {
            void *ret = NULL;
            CHECK_EQ(rpcool_call_ex(c, 1, pg, 64, &seal, &ret, NULL), 0);
            rpcool_free(c, ret);
        }
        CHECK_EQ(rpcool_release(c), 0);
        rpcool_free(c, pg);
        CHECK_EQ(rpcool_disconnect(c), 0);
    }
    CHECK_EQ(rpcool_server_close(s), 0);
    CHECKF(atomic_load(&t_rpc_allocs) > rpc0, "rpcool allocated nothing through RPCOOL_MALLOC");
    CHECKF(atomic_load(&t_rpc_allocs) == atomic_load(&t_rpc_frees), "RPCOOL_MALLOC %ld, RPCOOL_FREE %ld",
           (long)atomic_load(&t_rpc_allocs), (long)atomic_load(&t_rpc_frees));
    CHECKF(atomic_load(&t_shm_allocs) == atomic_load(&t_shm_frees),
           "SHMHEAP_MALLOC %ld, SHMHEAP_FREE %ld", (long)atomic_load(&t_shm_allocs),
           (long)atomic_load(&t_shm_frees));
}

/* The repository root, from this file's path; 0 if the sources or a compiler are missing. */
static int t_root(char *root, size_t n)
{
    snprintf(root, n, "%s", __FILE__);
    char *slash = strrchr(root, '/');
    if (slash) *slash = 0; else snprintf(root, n, ".");
    strncat(root, "/..", n - strlen(root) - 1);
    char h[600];
    snprintf(h, sizeof h, "%s/rpcool.h", root);
    return !access(h, R_OK) && system("command -v cc >/dev/null 2>&1") == 0;
}

/* One hook of a pair alone is a compile error (#error), for either header. */
static void hooks_both_or_neither(void)
{
    char root[512], dir[] = "/tmp/t-opts-XXXXXX", file[600], cmd[2048];
    if (!t_root(root, sizeof root) || !mkdtemp(dir)) {
        t_skip("hooks_both_or_neither", "no compiler or sources here");
        return;
    }
    const char *srcs[] = {
        "#define SHMHEAP_MALLOC(n) malloc(n)\n#define SHMHEAP_IMPLEMENTATION\n#include \"shmheap.h\"\n",
        "#define SHMHEAP_FREE(p) free(p)\n#define SHMHEAP_IMPLEMENTATION\n#include \"shmheap.h\"\n",
        "#define RPCOOL_MALLOC(n) malloc(n)\n#define RPCOOL_IMPLEMENTATION\n#include \"rpcool.h\"\n",
        "#define RPCOOL_FREE(p) free(p)\n#define RPCOOL_IMPLEMENTATION\n#include \"rpcool.h\"\n",
        /* both: builds */
        "#define RPCOOL_MALLOC(n) malloc(n)\n#define RPCOOL_FREE(p) free(p)\n"
        "#define RPCOOL_IMPLEMENTATION\n#include \"rpcool.h\"\n",
    };
    for (int k = 0; k < 5; k++) {
        snprintf(file, sizeof file, "%s/h%d.c", dir, k);
        FILE *f = fopen(file, "w");
        if (!f) { CHECK(0); continue; }
        fputs(srcs[k], f);
        fclose(f);
        snprintf(cmd, sizeof cmd, "cc -std=c11 -Wall -Wextra -Werror -I%s -c %s -o %s/h%d.o 2>%s/err%d",
                 root, file, dir, k, dir, k);
        int rc = system(cmd);
        if (k < 4) {
            CHECKF(rc != 0, "source %d built with one hook of a pair", k);
            snprintf(cmd, sizeof cmd, "grep -q 'or neither' %s/err%d", dir, k);
            CHECKF(system(cmd) == 0, "source %d: no #error naming the pair", k);
        } else {
            CHECKF(rc == 0, "both RPCOOL hooks: did not build");
        }
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) {}
}

/* What a log callback received. */
struct t_log {
    pthread_mutex_t mu;
    int n, bad, levels[4];
    char text[8192];
};
static void t_log_fn(int level, const char *msg, void *user)
{
    struct t_log *l = (struct t_log *)user;
    pthread_mutex_lock(&l->mu);
    l->n++;
    if (level < 0 || level > 3 || !msg || strchr(msg, '\n')) l->bad++;
    else l->levels[level]++;
    if (msg && strlen(l->text) + strlen(msg) + 2 < sizeof l->text) {
        strcat(l->text, msg);
        strcat(l->text, "\n");
    }
    pthread_mutex_unlock(&l->mu);
}

/* The log callback of each opts struct gets that handle's messages, with levels, one line each;
   rpcool's also gets its connection heaps' messages. */
static void log_callbacks(void)
{
    static struct t_log hl = {PTHREAD_MUTEX_INITIALIZER, 0, 0, {0}, {0}};
    static struct t_log sl = {PTHREAD_MUTEX_INITIALIZER, 0, 0, {0}, {0}};
    static struct t_log cl = {PTHREAD_MUTEX_INITIALIZER, 0, 0, {0}, {0}};
    const char *hn = t_uniq("olog");
    shmheap_opts ho = {.size = 2 << 20, .log = t_log_fn, .log_user = &hl};
    shmheap *h = NULL;
    CHECK_EQ(shmheap_create(hn, &ho, &h), 0);
    shmheap *h2 = NULL;
    CHECK_EQ(shmheap_create(hn, &ho, &h2), SHMHEAP_E_EXISTS);
    if (h) shmheap_close(h);
    shmheap_unlink(hn, NULL);
    CHECKF(strstr(hl.text, "created ") != NULL, "shmheap: no 'created' message: %s", hl.text);
    CHECKF(strstr(hl.text, "failed") != NULL, "shmheap: no message for the failed create");
    CHECK(hl.levels[SHMHEAP_LOG_INFO] >= 1 && hl.levels[SHMHEAP_LOG_ERROR] >= 1);
    CHECK_EQ(hl.bad, 0);

    const char *ch = t_uniq("ologch");
    rpcool_server_opts so = {.log = t_log_fn, .log_user = &sl};
    rpcool_conn_opts co = {.heap_size = 4 << 20, .log = t_log_fn, .log_user = &cl};
    rpcool_server *s = NULL;
    rpcool_conn *c = NULL;
    CHECK_EQ(rpcool_server_open(ch, &so, &s), 0);
    if (!s) return;
    CHECK_EQ(rpcool_server_add_handler(s, 1, echo, NULL, 0), 0);
    CHECK_EQ(rpcool_server_start(s, 1), 0);
    CHECK_EQ(rpcool_connect(ch, &co, &c), 0);
    if (c) {
        CHECK_EQ(rpcool_call(c, 1, NULL, 0, NULL, NULL), 0);
        CHECK_EQ(rpcool_disconnect(c), 0);
    }
    CHECK_EQ(rpcool_server_close(s), 0);
    CHECKF(strstr(sl.text, "serving") && strstr(sl.text, "closed"), "server messages: %s", sl.text);
    CHECKF(strstr(cl.text, "connected to") != NULL, "client messages: %s", cl.text);
    /* the connection heap is made by the server (its log says so) and opened by the client */
    CHECKF(strstr(sl.text, "created ") != NULL, "the connection heaps' messages: %s", sl.text);
    CHECKF(strstr(cl.text, "opened ") != NULL, "the connection heap's messages: %s", cl.text);
    CHECK(sl.levels[RPCOOL_LOG_INFO] >= 2 && cl.levels[RPCOOL_LOG_INFO] >= 1);
    CHECK_EQ(sl.bad + cl.bad, 0);
    CHECK_EQ(RPCOOL_LOG_ERROR, SHMHEAP_LOG_ERROR);
    CHECK_EQ(RPCOOL_LOG_DEBUG, SHMHEAP_LOG_DEBUG);
}

/* Child modes, run as a fresh process (the environment variables are read once per process):
   make a heap and a channel with a connection; "quiet" then sets the variables and does it all
   again. */
static int child_work(void)
{
    shmheap_opts o = {.size = 2 << 20};
    shmheap *h;
    const char *n = t_uniq("ologc");
    if (shmheap_create(n, &o, &h)) return 2;
    shmheap_close(h);
    shmheap_unlink(n, NULL);
    rpcool_server *s;
    rpcool_conn *c;
    const char *ch = t_uniq("ologcch");
    if (rpcool_server_open(ch, NULL, &s)) return 3;
    if (rpcool_server_start(s, 1)) return 4;
    rpcool_conn_opts co = {.heap_size = 4 << 20};
    if (rpcool_connect(ch, &co, &c)) return 5;
    t_disconnect_close(c, s);
    fflush(stderr);
    return 0;
}
static int child_main(const char *mode)
{
    int r = child_work();
    if (!r && !strcmp(mode, "quiet")) {
        setenv("SHMHEAP_DEBUG", "1", 1); /* too late: read once, at the first handle */
        setenv("RPCOOL_DEBUG", "1", 1);
        r = child_work();
    }
    return r;
}

/* Runs this program again as "--child MODE" with the given environment additions (or none);
   returns its exit status and what it wrote to stderr. */
static int run_child(const char *mode, int debug, char *err, size_t n)
{
    int pfd[2];
    if (pipe(pfd)) return -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pfd[1], 2);
        close(pfd[0]);
        if (debug) { setenv("SHMHEAP_DEBUG", "1", 1); setenv("RPCOOL_DEBUG", "1", 1); }
        else { unsetenv("SHMHEAP_DEBUG"); unsetenv("RPCOOL_DEBUG"); }
        execl("/proc/self/exe", "test_options", "--child", mode, (char *)NULL);
        _exit(127);
    }
    close(pfd[1]);
    size_t k = 0;
    ssize_t r;
    while (k + 1 < n && (r = read(pfd[0], err + k, n - 1 - k)) > 0) k += (size_t)r;
    err[k] = 0;
    close(pfd[0]);
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* SHMHEAP_DEBUG and RPCOOL_DEBUG switch on the stderr loggers. */
static void env_logs_to_stderr(void)
{
    char err[16384];
    CHECK_EQ(run_child("loud", 1, err, sizeof err), 0);
    CHECKF(strstr(err, "[shmheap ") != NULL, "nothing logged with SHMHEAP_DEBUG=1");
    CHECKF(strstr(err, "[rpcool ") != NULL, "nothing logged with RPCOOL_DEBUG=1");
}

/* Silent by default; the variables are read once, not on every message. */
static void silent_by_default_env_read_once(void)
{
    char err[16384];
    CHECK_EQ(run_child("quiet", 0, err, sizeof err), 0);
    CHECKF(err[0] == 0, "logged with no variable set, or after setting one late: %s", err);
}

static double ms_since(uint64_t t0) { return (double)(rcp__now_ns() - t0) / 1e6; }

static int shm_mode(const char *name)
{
    char p[256];
    struct stat st;
    snprintf(p, sizeof p, "/dev/shm/%s", name);
    return stat(p, &st) ? -1 : (int)(st.st_mode & 0777);
}

/* SHMHEAP_STATIC / RPCOOL_STATIC: "make every function static". A file that defines them and
   does not call every function must still build warning-free (this project builds with
   -Wall -Werror), as C11 and as C++17. */
static void g_static_build(void)
{
    const char *src = __FILE__; /* this file, relative to the repository */
    char root[512], dir[] = "/tmp/t-gaps-XXXXXX", cmd[2048];
    snprintf(root, sizeof root, "%s", src);
    char *slash = strrchr(root, '/');
    if (slash) *slash = 0; else snprintf(root, sizeof root, ".");
    strncat(root, "/..", sizeof root - strlen(root) - 1);
    snprintf(cmd, sizeof cmd, "%s/rpcool.h", root);
    if (access(cmd, R_OK) || !mkdtemp(dir) || system("command -v cc >/dev/null 2>&1") != 0) {
        t_skip("g_static_build", "no compiler or sources here");
        return;
    }
    const char *kinds[2][2] = {
        {"shm", "#define SHMHEAP_STATIC\n#define SHMHEAP_IMPLEMENTATION\n#include \"shmheap.h\"\nint main(void) { return 0; }\n"},
        {"rpc", "#define SHMHEAP_STATIC\n#define RPCOOL_STATIC\n#define RPCOOL_IMPLEMENTATION\n#include \"rpcool.h\"\nint main(void) { return 0; }\n"},
    };
    for (int k = 0; k < 2; k++) {
        for (int cpp = 0; cpp < 2; cpp++) {
            char file[600];
            snprintf(file, sizeof file, "%s/%s.%s", dir, kinds[k][0], cpp ? "cpp" : "c");
            FILE *f = fopen(file, "w");
            if (!f) { CHECK(0); continue; }
            fputs(kinds[k][1], f);
            fclose(f);
            if (cpp && system("command -v c++ >/dev/null 2>&1") != 0) continue;
            snprintf(cmd, sizeof cmd, "%s -c -o /dev/null %s -Wall -Wextra -Werror -pthread -I%s %s >%s/err 2>&1",
                     cpp ? "c++" : "cc", cpp ? "-std=c++17" : "-std=c11", root, file, dir);
            int r = system(cmd);
            char first[200] = "";
            snprintf(cmd, sizeof cmd, "%s/err", dir);
            if (r && (f = fopen(cmd, "r"))) {
                while (fgets(first, sizeof first, f) && !strstr(first, "error")) first[0] = 0;
                fclose(f);
            }
            CHECKF(r == 0, "a %s static build (%s) does not compile warning-free: %s", kinds[k][0],
                   cpp ? "C++17" : "C11", first);
            unlink(file);
        }
    }
    snprintf(cmd, sizeof cmd, "%s/err", dir);
    unlink(cmd);
    rmdir(dir);
}

/* Every error code has its own explanation, the one its X-macro list gives; -errno is explained
   too. */
#define T_CODE(name, value, text) {name, value, text},
struct t_code { int code, value; const char *text; };
static const struct t_code t_shm_codes[] = {SHMHEAP_ERRORS(T_CODE)},
                           t_rpc_codes[] = {RPCOOL_ERRORS(T_CODE)};
#undef T_CODE

/* Checks one list: each code has its value, its text from strerror (which rpcool_strerror
   gives too), and no two codes share a text. Returns how many codes it checked. */
static int check_codes(const struct t_code *codes, size_t n, const char *(*str)(int))
{
    const char *seen[64];
    int k = 0;
    for (size_t i = 0; i < n && k < 64; i++) {
        int c = codes[i].code;
        const char *s = str(c);
        CHECK_EQ(c, codes[i].value);
        CHECKF(s && *s && !strstr(s, "unknown"), "strerror(%d) = %s", c, s ? s : "NULL");
        CHECKF(s && !strcmp(s, codes[i].text), "strerror(%d) = %s", c, s);
        CHECKF(s && !strcmp(s, rpcool_strerror(c)), "rpcool_strerror(%d) differs", c);
        for (int j = 0; j < k; j++) CHECKF(strcmp(seen[j], s), "two codes share \"%s\"", s);
        seen[k++] = s;
    }
    return k;
}

static void g_strerror(void)
{
    CHECK_EQ(check_codes(t_shm_codes, sizeof t_shm_codes / sizeof t_shm_codes[0], shmheap_strerror),
             18);
    CHECK_EQ(check_codes(t_rpc_codes, sizeof t_rpc_codes / sizeof t_rpc_codes[0], rpcool_strerror),
             35);
    CHECK(!strcmp(shmheap_strerror(-ETIMEDOUT), strerror(ETIMEDOUT)));
    CHECK(!strcmp(rpcool_strerror(-ENOENT), strerror(ENOENT)));
}

/* connect_timeout_ms: a connect whose answer does not come in that time fails with
   RPCOOL_E_TIMEOUT (the server's acceptor is held up making a heap of a size it has none of:
   we hold the lock of the server's pod), and the would-be connection leaves no file behind.
   mode: the permissions of the channel's name file and socket. */
static int count_shm(const char *needle)
{
    char cmd[256];
    int n = 0;
    FILE *f;
    snprintf(cmd, sizeof cmd, "ls /dev/shm 2>/dev/null | grep -c -- 'rpcool-%s-'", needle);
    if ((f = popen(cmd, "r"))) { if (fscanf(f, "%d", &n) != 1) n = -1; pclose(f); }
    return n;
}

static void g_connect_timeout_and_mode(void)
{
    const char *name = t_uniq("gcto");
    const char *pod = t_uniq("gctopod");
    rpcool_server_opts so = {.mode = 0640, .pod = pod};
    mode_t old = umask(0);
    rpcool_server *s = t_serve(name, &so, 1);
    umask(old);
    if (!s) return;
    char fn[128], sn[160], pp[128];
    snprintf(fn, sizeof fn, "rpcool.%s", name);
    snprintf(sn, sizeof sn, "rpcool.%s.sock", name);
    CHECKF(shm_mode(fn) == 0640, "channel mode 0640 asked, file has %o", shm_mode(fn));
    CHECKF(shm_mode(sn) == 0640, "channel mode 0640 asked, socket has %o", shm_mode(sn));
    rpcool_conn *c = NULL;
    CHECK_EQ(rpcool_connect(name, NULL, &c), 0); /* the server's first heaps: its pod exists */
    if (c) rpcool_disconnect(c);
    snprintf(pp, sizeof pp, "/dev/shm/%s", pod);
    int pfd = open(pp, O_RDWR);
    CHECK(pfd >= 0 && flock(pfd, LOCK_EX) == 0);
    rpcool_conn_opts o = {.connect_timeout_ms = 150};
    o.heap_size = 6 << 20; /* not the pool's size: made during the connect */
    c = NULL;
    uint64_t t0 = rcp__now_ns();
    CHECK_EQ(rpcool_connect(name, &o, &c), RPCOOL_E_TIMEOUT);
    double ms = ms_since(t0);
    CHECKF(ms >= 140 && ms < 1500, "connect_timeout_ms 150 took %.0f ms", ms);
    if (pfd >= 0) close(pfd); /* the acceptor goes on, and finds the client gone */
    o.connect_timeout_ms = 0;
    CHECK_EQ(rpcool_connect(name, &o, &c), 0); /* and answers the next one */
    if (c) {
        CHECK_EQ(t_slow_call(c, 0), 1);
        rpcool_disconnect(c);
    }
    CHECK_EQ(count_shm(name), 0);
    rpcool_server_close(s);
    unlink(pp);
    s = t_serve(name, NULL, 0);
    if (s) CHECKF(shm_mode(fn) == 0600, "default channel mode: %o", shm_mode(fn));
    if (s) rpcool_server_close(s);
}

/* max_conns: 0 means RPCOOL_DEFAULT_MAX_CONNS slots, more than RPCOOL_MAX_CONNS is refused. A
   connection in a pod of its own. (Three descriptors per connection in this process: the soft
   RLIMIT_NOFILE is raised for them.) */
static void g_max_conns_and_pod(void)
{
    enum { N = RPCOOL_DEFAULT_MAX_CONNS };
    rpcool_server *s = NULL;
    rpcool_server_opts so = {.max_conns = RPCOOL_MAX_CONNS + 1};
    CHECK_EQ(rpcool_server_open(t_uniq("gmax"), &so, &s), RPCOOL_E_INVAL);
    rpcool_server_opts small = {.stack_size = 4096}; /* below RPCOOL_STACK_RESERVE: at open */
    CHECK_EQ(rpcool_server_open(t_uniq("gstk"), &small, &s), RPCOOL_E_INVAL);
    struct rlimit rl;
    if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < 8 * N) {
        rl.rlim_cur = rl.rlim_max < 8 * N ? rl.rlim_max : 8 * N;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    const char *name = t_uniq("gmax");
    const char *pod = t_uniq("gcpod");
    so.max_conns = 0;
    so.pod = pod;
    s = t_serve(name, &so, 1);
    if (!s) return;
    rpcool_server_stats st;
    rpcool_server_get_stats(s, &st);
    CHECK_EQ(st.max_conns, N);
    rpcool_conn_opts o = {.heap_size = 2 << 20, .pod = pod};
    static rpcool_conn *c[N + 1];
    int k = 0, r = 0;
    while (k < N + 1 && (r = rpcool_connect(name, &o, &c[k])) == 0) k++;
    CHECK_EQ(k, N);
    CHECK_EQ(r, RPCOOL_E_NOSLOT);
    CHECK(shm_mode(pod) >= 0); /* the heaps went to that pod */
    if (k) CHECK_EQ(t_slow_call(c[k - 1], 0), 1);
    while (k > 0) rpcool_disconnect(c[--k]);
    rpcool_server_close(s);
    char pp[128];
    snprintf(pp, sizeof pp, "/%s", pod);
    shm_unlink(pp);
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--child")) return child_main(argv[2]);
    t_init(argc, argv);
    RUN(hooks_used_and_balanced);
    RUN(hooks_both_or_neither);
    RUN(log_callbacks);
    RUN(env_logs_to_stderr);
    RUN(silent_by_default_env_read_once);
    RUN(g_static_build);
    RUN(g_strerror);
    RUN(g_connect_timeout_and_mode);
    RUN(g_max_conns_and_pod);
    return T_DONE();
}
