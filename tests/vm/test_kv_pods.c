// VM
// LIBS: -libverbs -pthread
/* tests/vm/test_kv_pods.c a|b PEER - examples/rpcool_kv_pods.c across the pair of guests: guest a is pod A (the server and KVP_NA local client processes), guest b is
 * pod B (KVP_NB client processes, SHMHEAP_POD_ID=1; roles pods-a and pods-b of tests/vm/init.sh).
 * Pod B's clients put even keys by call over RDMA and odd ones by RDMA WRITE, and read by locked
 * and by optimistic READ. The harness below (client processes meeting at barriers) is the
 * example's workload run by both pods at once. The guests meet
 * over TCP (port 7480):
 *   a: server up (RDMA required) -> 'R' -> both pods' clients ready -> both run at once (pod A's
 *      clients keep going until pod B's are done, so puts from both pods overlap, also on the
 *      hot keys every client writes) -> both done -> a sends pod A's rounds -> both pods check
 *      every key of every client -> b benches and sends 'Q' -> a closes the server.
 * Results:
 *   kvpods-server         (a) store, table, export (published for pod B), channel
 *   kvpods-run-a/-b       each pod's clients: every answer checked against what was put
 *   kvpods-final-a/-b     after all writers: every key of both pods, read every way
 *   kvpods-rpc-rdma       (b) a put and a get by call over RDMA from this process (skip when
 *                         rpcool's RDMA transport is not built: RPCOOL_E_NOTSUP)
 *   kvpods-bench          (b) remote get by locked and optimistic READ, and by call */
#define KVP_NO_MAIN
#include "../../examples/rpcool_kv_pods.c"
#include "vmt.h"
#include <sys/mman.h>

#define KVP_NA 2       /* pod A client processes */
#define KVP_NB 2       /* pod B client processes */
#define KVP_KEYS 24    /* keys per client */
#define KVP_ROUNDS 2   /* pod B's rounds; pod A's at least, then until pod B is done */
#define KVP_PORT 7480
#define KVP_SYNC_MS 240000

/* Shared by one pod's client processes and their parent (MAP_SHARED, made before the fork). */
typedef struct kvp_shared {
    uint32_t stop;            /* set: pod A's clients end after the round they are in */
    uint32_t rounds_a[16];    /* the rounds each pod A client did: its keys' last values */
} kvp_shared;

/* Client processes, forked before this process has any thread or krconn context. Each one
   waits for "go", runs its job, and meets its siblings at barriers: the parent reads a byte
   from every child, runs its hook (the VM test syncs with the other pod there), then answers
   every child. At the end each child writes its counts (the run's, the final check's). */
typedef struct kvp_job kvp_job;
typedef int kvp_client_fn(int i, const kvp_job *j, kvp_counts n[2]);
typedef struct kvp_kids { int n; pid_t pid[16]; int go[16], back[16]; } kvp_kids;
static int kvp_kid_go = -1, kvp_kid_back = -1; /* in a child: its two pipes */

struct kvp_job {
    const char *chan, *host;  /* host: pod B's clients reach the server there */
    int nclients;             /* of this pod */
    long keys;                /* per client */
    unsigned rounds;
    kvp_peer all[32];         /* every client of both pods: what the final check reads */
    int nall;
    kvp_shared *sh;           /* NULL: pod A clients do `rounds` rounds and stop */
};

/* After every writer of both pods finished: every key of every client, read every way. */
static int check_all(kvp_client *c, const kvp_job *j, kvp_counts *n)
{
    unsigned round[32];
    for (int p = 0; p < j->nall; p++)
        round[p] = j->all[p].pod == 'a' && j->sh && j->sh->rounds_a[j->all[p].id]
                       ? j->sh->rounds_a[j->all[p].id] : j->rounds;
    return kvp_check(c, j->all, round, j->nall, j->keys, n);
}

static int kvp_kid_sync(void) /* in a child: at a barrier */
{
    char x = 's';
    if (write(kvp_kid_back, &x, 1) != 1 || read(kvp_kid_go, &x, 1) != 1) return -EPIPE;
    return x == 'g' ? 0 : -ECANCELED;
}

static int kvp_fork(kvp_kids *k, int n, kvp_client_fn *fn, const kvp_job *j)
{
    k->n = 0;
    for (int i = 0; i < n && i < 16; i++) {
        int a[2], b[2];
        if (pipe(a)) return -errno;
        if (pipe(b)) { close(a[0]); close(a[1]); return -errno; }
        fflush(stdout);
        pid_t p = fork();
        if (p < 0) return -errno;
        if (p == 0) {
            char x;
            kvp_counts cnt[2];
            memset(cnt, 0, sizeof cnt);
            for (int q = 0; q < k->n; q++) { close(k->go[q]); close(k->back[q]); }
            close(a[1]);
            close(b[0]);
            kvp_kid_go = a[0];
            kvp_kid_back = b[1];
            if (read(a[0], &x, 1) != 1 || x != 'g') _exit(3);
            int rc = fn(i, j, cnt);
            if (write(b[1], cnt, sizeof cnt) != (ssize_t)sizeof cnt) _exit(3);
            fflush(stdout);
            _exit(rc ? 1 : 0);
        }
        close(a[0]);
        close(b[1]);
        k->pid[i] = p;
        k->go[i] = a[1];
        k->back[i] = b[0];
        k->n++;
    }
    return 0;
}

/* Answer every child: 'g' goes on, anything else makes them stop. */
static void kvp_release(kvp_kids *k, char x)
{
    for (int i = 0; i < k->n; i++)
        if (write(k->go[i], &x, 1) != 1) { /* that child is gone; reaping says so */ }
}

/* Wait until every child reached the barrier; 0, or -1 if one failed on the way. */
static int kvp_barrier(kvp_kids *k)
{
    int fails = 0;
    for (int i = 0; i < k->n; i++) {
        char x = 0;
        if (read(k->back[i], &x, 1) != 1 || x != 's') fails++; /* gone, or wrote its counts */
    }
    return fails ? -1 : 0;
}

static int kvp_reap(kvp_kids *k, kvp_counts sum[2])
{
    int fails = 0;
    for (int i = 0; i < k->n; i++) {
        kvp_counts cnt[2];
        int st;
        if (read(k->back[i], cnt, sizeof cnt) == (ssize_t)sizeof cnt) {
            kvp_counts_add(&sum[0], &cnt[0]);
            kvp_counts_add(&sum[1], &cnt[1]);
        } else {
            fails++;
        }
        close(k->go[i]);
        close(k->back[i]);
        waitpid(k->pid[i], &st, 0);
        fails += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    return fails;
}

/* A pod A client: calls over shared memory, reads by pointer. */
static int kvp_local_kid(int i, const kvp_job *j, kvp_counts n[2])
{
    kvp_peer others[32];
    kvp_client *c;
    int no = 0, rc = kvp_local_open(j->chan, &c);
    if (rc) return rc;
    for (int p = 0; p < j->nall; p++)
        if (j->all[p].pod != 'a' || j->all[p].id != i) others[no++] = j->all[p];
    if ((rc = kvp_kid_sync())) goto out;
    unsigned done = 0;
    rc = kvp_workload(c, 'a', i, j->keys, j->rounds, j->sh ? &j->sh->stop : NULL, others, no,
                      &n[0], &done);
    if (j->sh) __atomic_store_n(&j->sh->rounds_a[i], done, __ATOMIC_RELEASE);
    if (rc || (rc = kvp_kid_sync())) goto out;
    rc = check_all(c, j, &n[1]);
out:
    kvp_client_close(c);
    return rc ? rc : n[0].bad || n[1].bad ? -1 : 0;
}

/* A pod B client (ids 1..nclients): calls over RDMA if rpcool has them, one-sided otherwise. */
static int kvp_remote_kid(int i, const kvp_job *j, kvp_counts n[2])
{
    kvp_peer others[32];
    kvp_client *c = NULL;
    uint16_t id = (uint16_t)(i + 1);
    int no = 0, rc = kvp_remote_open(j->host, j->chan, id > 1, &c);
    if (rc) return rc;
    for (int p = 0; p < j->nall; p++)
        if (j->all[p].pod != 'b' || j->all[p].id != id) others[no++] = j->all[p];
    if ((rc = kvp_kid_sync())) goto out;
    if ((rc = kvp_workload(c, 'b', id, j->keys, j->rounds, NULL, others, no, &n[0], NULL)))
        goto out;
    if ((rc = kvp_kid_sync())) goto out;
    rc = check_all(c, j, &n[1]);
out:
    kvp_client_close(c);
    return rc ? rc : n[0].bad || n[1].bad ? -1 : 0;
}

/* One pod's clients: go, the two barriers with hook(phase) at "ready" (all there), "running"
   (released; pod A's hook sets sh->stop when pod B is done) and "done" (all done writing), reap.
   Every hook runs, in order, even after a failure (the other pod's hooks wait for them). The
   server, if any, must be serving before `go`. Returns how many clients failed. */
static int kvp_run_clients(kvp_kids *k, int (*hook)(const char *phase, void *user), void *user,
                           kvp_counts sum[2])
{
    int fails = 0;
    kvp_release(k, 'g');
    if (kvp_barrier(k)) fails++;                               /* ready (pod B: linked) */
    if (hook && hook("ready", user)) fails++;
    kvp_release(k, fails ? 'x' : 'g');
    if (hook && hook("running", user)) fails++;
    if (kvp_barrier(k)) fails++;                               /* done writing */
    if (hook && hook("done", user)) fails++;
    kvp_release(k, fails ? 'x' : 'g');
    return kvp_reap(k, sum) + fails;
}

typedef struct hook_ctx { int sock, is_a; kvp_shared *sh; } hook_ctx;

static int expect(int sock, char want, const char *what)
{
    int rc = vmt_expect_byte(sock, want, KVP_SYNC_MS);
    if (rc) printf("# kvpods: waiting for the other guest (%s): %s\n", what, strerror(-rc));
    return rc;
}

/* The pods meet: both ready; pod A stops when pod B is done writing; pod B learns pod A's
   rounds before the final check. */
static int hook(const char *phase, void *user)
{
    hook_ctx *h = (hook_ctx *)user;
    if (!strcmp(phase, "ready")) {
        if (vmt_send_byte(h->sock, 'r')) return -1;
        return expect(h->sock, 'r', "ready");
    }
    if (!strcmp(phase, "running")) {
        if (!h->is_a) return 0;
        int rc = expect(h->sock, 'd', "pod B done writing");
        __atomic_store_n(&h->sh->stop, 1, __ATOMIC_RELEASE); /* whatever happened: stop */
        return rc;
    }
    /* done: every client of this pod finished writing */
    if (h->is_a) return vmt_write_all(h->sock, h->sh->rounds_a, sizeof h->sh->rounds_a);
    if (vmt_send_byte(h->sock, 'd')) return -1;
    return vmt_read_all(h->sock, h->sh->rounds_a, sizeof h->sh->rounds_a, KVP_SYNC_MS);
}

static void report(const char *name, int fails, const kvp_counts *n, int final, int remote)
{
    char line[400];
    if (final)
        snprintf(line, sizeof line, "gets %llu by call, %llu by %s; %llu wrong",
                 (unsigned long long)n->gets_rpc,
                 (unsigned long long)(remote ? n->gets_read : n->gets_ptr),
                 remote ? "READ" : "pointer", (unsigned long long)n->bad);
    else
        snprintf(line, sizeof line, "puts %llu by call, %llu by WRITE; gets %llu by call, %llu by "
                 "pointer, %llu by READ; %llu other clients' and hot keys well formed; %llu wrong",
                 (unsigned long long)n->puts_rpc, (unsigned long long)n->puts_write,
                 (unsigned long long)n->gets_rpc, (unsigned long long)n->gets_ptr,
                 (unsigned long long)n->gets_read, (unsigned long long)n->others,
                 (unsigned long long)n->bad);
    /* something must have been read every way this pod can read without calls */
    uint64_t reads = remote ? n->gets_read : n->gets_ptr;
    if (fails || n->bad || !reads || (!final && !n->others))
        printf("FAIL %s: %d client processes failed; %s\n", name, fails, line);
    else
        printf("ok %s\n# %s: %s\n", name, name, line);
}

static int pod_a(const char *peer, kvp_job *j)
{
    kvp_kids k;
    kvp_counts sum[2];
    kvp_server *sv = NULL;
    int fails;
    memset(sum, 0, sizeof sum);
    if (kvp_fork(&k, KVP_NA, kvp_local_kid, j)) { printf("FAIL kvpods-server: fork\n"); return 1; }
    int sock = vmt_tcp_peer(1, peer, KVP_PORT);
    if (sock < 0 || kvp_server_open(j->chan, 4 * KVP_KEYS * (KVP_NA + KVP_NB), 1, &sv) ||
        !sv->remote) {
        printf("FAIL kvpods-server: %s\n", sock < 0 ? "no TCP to guest b" : !sv ? "see above"
                                                  : "no RDMA: pod B cannot reach the table");
        kvp_release(&k, 'x');
        kvp_reap(&k, sum);
        kvp_server_close(sv);
        if (sock >= 0) close(sock);
        return 1;
    }
    rpcool_server_start(sv->rpc, 1);
    printf("ok kvpods-server\n");
    vmt_send_byte(sock, 'R');
    hook_ctx h = {sock, 1, j->sh};
    uint64_t t0 = rcp__now_ns();
    fails = kvp_run_clients(&k, hook, &h, sum);
    unsigned rmin = ~0u, rmax = 0;
    for (int i = 0; i < KVP_NA; i++) {
        unsigned r = j->sh->rounds_a[i];
        rmin = r < rmin ? r : rmin;
        rmax = r > rmax ? r : rmax;
    }
    printf("# kvpods: pod A's clients did %u..%u rounds of %d keys while pod B's did %d (%.1f s)\n",
           rmin, rmax, KVP_KEYS, KVP_ROUNDS, (rcp__now_ns() - t0) / 1e9);
    report("kvpods-run-a", fails, &sum[0], 0, 0);
    report("kvpods-final-a", fails, &sum[1], 1, 0);
    expect(sock, 'Q', "pod B finished");
    rpcool_server_stats ss;
    rpcool_server_get_stats(sv->rpc, &ss);
    printf("# kvpods: the server served %llu calls\n", (unsigned long long)ss.calls);
    kvp_server_close(sv);
    close(sock);
    return 0;
}

static int pod_b(const char *peer, kvp_job *j)
{
    kvp_kids k;
    kvp_counts sum[2];
    memset(sum, 0, sizeof sum);
    if (kvp_fork(&k, KVP_NB, kvp_remote_kid, j)) { printf("FAIL kvpods-run-b: fork\n"); return 1; }
    int sock = vmt_tcp_peer(0, peer, KVP_PORT);
    if (sock < 0 || expect(sock, 'R', "the server")) {
        printf("FAIL kvpods-run-b: the server in guest a did not come up\n");
        kvp_release(&k, 'x');
        kvp_reap(&k, sum);
        if (sock >= 0) close(sock);
        return 1;
    }
    hook_ctx h = {sock, 0, j->sh};
    uint64_t t0 = rcp__now_ns();
    int fails = kvp_run_clients(&k, hook, &h, sum);
    printf("# kvpods: pod B's clients: %.1f s\n", (rcp__now_ns() - t0) / 1e9);
    report("kvpods-run-b", fails, &sum[0], 0, 1);
    report("kvpods-final-b", fails, &sum[1], 1, 1);
    /* calls from pod B (this process has no krconn context or thread of its own yet) */
    kvp_client *c = (kvp_client *)calloc(1, sizeof *c);
    char url[160];
    snprintf(url, sizeof url, "rdma://%s/%s", peer, j->chan);
    int rc = c ? kvp_client_rpc(c, url, 1) : -ENOMEM;
    if (!rc) {
        char val[KVP_VAL_MAX], got[KVP_VAL_MAX];
        kvp_value("b9:0", 1, val);
        rc = kvp_put_rpc(c, "b9:0", val);
        rc = rc == 1 ? kvp_get_rpc(c, "b9:0", got) : rc;
        if (rc == 1 && !strcmp(got, val)) printf("ok kvpods-rpc-rdma\n");
        else printf("FAIL kvpods-rpc-rdma: put and get over RDMA: %s\n", rc < 0 ? kvp_err(rc) : "wrong answer");
    } else if (rc == RPCOOL_E_NOTSUP) {
        printf("skip kvpods-rpc-rdma: RDMA transport not built (%s)\n", c->rpc_why);
    } else {
        printf("FAIL kvpods-rpc-rdma: %s\n", c ? c->rpc_why : "no memory");
    }
    kvp_client_close(c);
    /* the bench: remote gets by one-sided READ (locked, unlocked) and by call */
    if (!(rc = kvp_remote_open(peer, j->chan, 1, &c))) {
        rc = kvp_bench(c, 64, 10 * KVP_BLOCK);
        kvp_client_close(c);
    }
    if (rc) printf("FAIL kvpods-bench: %s\n", kvp_err(rc));
    else printf("ok kvpods-bench\n");
    vmt_send_byte(sock, 'Q');
    close(sock);
    return 0;
}

int main(int argc, char **argv)
{
    int is_a = vmt_guest_role(argc, argv, 3, "PEER_IP");
    if (is_a < 0) return 2;
    kvp_job j;
    memset(&j, 0, sizeof j);
    j.chan = "kv";
    j.host = argv[2];
    j.nclients = is_a ? KVP_NA : KVP_NB;
    j.keys = KVP_KEYS;
    j.rounds = KVP_ROUNDS;
    for (int i = 0; i < KVP_NA; i++) j.all[j.nall++] = (kvp_peer){'a', i};
    for (int i = 1; i <= KVP_NB; i++) j.all[j.nall++] = (kvp_peer){'b', i};
    j.sh = (kvp_shared *)mmap(NULL, sizeof *j.sh, PROT_READ | PROT_WRITE,
                              MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (j.sh == MAP_FAILED) return 1;
    memset(j.sh, 0, sizeof *j.sh);
    return is_a ? pod_a(argv[2], &j) : pod_b(argv[2], &j);
}
