// VM
// LIBS: -libverbs -pthread
/* tests/vm/test_rpcool_export.c - rpcool's exports between pods (rpcool.h section 13) on
 * Soft-RoCE, in the rpcool-rdma guest. The exporter is a child process of pod 0 (rdma "serve":
 * krconn's meta server in it); local writers are processes of pod 0 that open the export;
 * attachers are this program exec'd again with SHMHEAP_POD_ID=1, attaching
 * "rdma://127.0.0.1/NAME".
 *   counts      exact counts under 2 local and 2 remote writers of one export (locks 0-3)
 *   list        a remote reader follows a linked list by pointer with further READs
 *   torn        optimistic remote reads see no torn record while a local and a remote writer
 *               rewrite it (a checker that counts)
 *   bad         bounds, lock indexes, modes, names, a READ-only export's PERM
 *   big         a 1 GiB export (a sparse heap) under a 64 MiB pin_budget, read at random with
 *               the data checked; nppin's pinned never above the budget
 *   killed      the exporter SIGKILLed: the attacher's next operations fail within its
 *               timeout_ms with RPCOOL_E_PEERDEAD or RPCOOL_E_TIMEOUT, a read of a chunk it never
 *               leased too; and, as its first operation after the kill, with the default
 *               timeout_ms (longer than the queue pair's retry bound: the lease channel finds
 *               the exporter dead first)
 *   corrupt     a 1 MiB remote read made to time out (timeout_ms 1) while its READ is still
 *               coming, then a 1 MiB remote write, CORRUPT_ROUNDS times: every write returns 0
 *               and every byte the exporter holds is what was written (a checker that counts
 *               the bytes that differ: 0)
 *   closed      the export closed by its exporter (alive): the attacher's read of a chunk it
 *               never leased fails with RPCOOL_E_PEERDEAD or RPCOOL_E_TIMEOUT within its
 *               timeout_ms (the default), and an attach of that name is RPCOOL_E_NOEXPORT at once (its name
 *               withdrawn from the meta server), while another export there still attaches
 *   holder      an attacher SIGKILLed holding lock 6 in WRITE mode: a remote waiter queued
 *               behind it takes the lock over (RPCOOL_OWNERDEAD); killed again with nobody
 *               waiting: a local process of the pod gets the lock once the exporter released it
 * XT_ONLY=NAME runs one of them. */
#define RPCOOL_WITH_RDMA 1
#define RPCOOL_IMPLEMENTATION
#include "../../rpcool.h"
#include "vmt.h"
#include <sys/wait.h>

#define URL "rdma://127.0.0.1/xt"
#define URLC "rdma://127.0.0.1/xtc" /* the corrupt and closed tests' export: area only */
#define MIB ((size_t)1 << 20)
#define CORRUPT_ROUNDS 8
#define AREA ((CORRUPT_ROUNDS + 1) * MIB) /* the rounds' writes, then the source of the reads */
#define CORRUPT_HEAP ((size_t)32 << 20)   /* an exporter of this heap size exports "xtc" too */
#define CLOSED_FLAG "/tmp/xt.closed"
#define KILLED_FLAG "/tmp/xt.killed"
#define NLOCAL 2000      /* increments of each local writer */
#define NREMOTE 150      /* increments of each remote writer */
#define WORDS 64
#define NLIST 100
#define BIG ((size_t)1 << 30)
#define BIG_BUDGET ((size_t)64 << 20)
#define BIG_CHUNKS 48    /* chunks of 2 MiB with data, spread over the GiB */
#define BIG_READS 400
#define KILL_TMO_MS 2000
#define TEST_NAMED(n, call) do { t_begin(n); call; t_end(); } while (0)

struct node {
    struct node *next;
    uint64_t v;
};

struct hdr {
    uint64_t counter[4];
    uint64_t rec[WORDS];   /* under lock 5: every word the same */
    struct node *head;
    uint64_t stop;
    uint64_t ro[8];        /* exported again, READ-only, as "xtro" */
    unsigned char *area;   /* CORRUPT_HEAP only: AREA bytes exported as "xtc" */
};

static const char *self;
static char heap_name[96];

/* ---- the exporter (a child of pod 0): the heap, the list, the exports; then waits ---- */

static int exporter(int out_fd, int in_fd, size_t heap_size, size_t pin_budget)
{
    shmheap *h;
    shmheap_opts ho = {.size = heap_size};
    int rc = shmheap_create(heap_name, &ho, &h);
    if (rc) { printf("# exporter: heap: %s\n", rpcool_strerror(rc)); fflush(stdout); return 2; }
    struct hdr *hd = (struct hdr *)shmheap_calloc(h, 1, sizeof *hd);
    struct node **link = &hd->head;
    for (int i = 1; i <= NLIST; i++) {
        struct node *n = (struct node *)shmheap_calloc(h, 1, sizeof *n + 4000); /* apart */
        n->v = (uint64_t)i;
        *link = n;
        link = &n->next;
    }
    rpcool_export_opts o = {.nlocks = 8, .remote = RPCOOL_REMOTE_RW, .rdma = "serve",
                            .pin_budget = pin_budget};
    rpcool_export *x, *ro;
    if ((rc = rpcool_export_create(h, "xt", NULL, 0, &o, &x))) {
        printf("# exporter: export: %s\n", rpcool_strerror(rc));
        fflush(stdout);
        return 3;
    }
    rpcool_export_opts oro = {.remote = RPCOOL_REMOTE_READ, .rdma = "serve"};
    if ((rc = rpcool_export_create(h, "xtro", hd->ro, sizeof hd->ro, &oro, &ro))) {
        printf("# exporter: export xtro: %s\n", rpcool_strerror(rc));
        fflush(stdout);
        return 3;
    }
    rpcool_export *xc = NULL;
    if (heap_size == CORRUPT_HEAP) {
        hd->area = (unsigned char *)shmheap_calloc(h, 1, AREA);
        if (!hd->area) return 3;
        memset(hd->area + CORRUPT_ROUNDS * MIB, 0xa5, MIB); /* what the reads read */
        rpcool_export_opts oc = {.nlocks = 1, .remote = RPCOOL_REMOTE_RW, .rdma = "serve"};
        if ((rc = rpcool_export_create(h, "xtc", hd->area, AREA, &oc, &xc))) {
            printf("# exporter: export xtc: %s\n", rpcool_strerror(rc));
            fflush(stdout);
            return 3;
        }
    }
    uint64_t a = (uint64_t)(uintptr_t)hd;
    if (vmt_write_all(out_fd, &a, sizeof a)) return 4;
    char c;
    while (read(in_fd, &c, 1) == 1) { /* 's': stats; 'c': close xtc; EOF: close */
        if (c == 'c') {
            uint64_t t = rcp__now_ns(), v[4] = {(uint64_t)rpcool_export_close(xc), 0, 0, 0};
            xc = NULL;
            v[1] = rcp__now_ns() - t;
            if (vmt_write_all(out_fd, v, sizeof v)) return 5;
            continue;
        }
        rpcool_export_stats st;
        rpcool_export_get_stats(x, &st);
        uint64_t v[4] = {st.pin_budget, st.pinned_peak, st.leases_granted, st.evictions};
        if (vmt_write_all(out_fd, v, sizeof v)) return 5;
    }
    if (xc) rpcool_export_close(xc);
    rpcool_export_close(ro);
    rpcool_export_close(x);
    shmheap_close(h);
    shmheap_unlink(heap_name, NULL);
    return 0;
}

typedef struct {
    pid_t pid;
    int to, from;
    struct hdr *hd;
    shmheap *h;           /* the exporter's heap, opened here too (pod 0) */
} xproc;

static int exporter_start(xproc *e, size_t heap_size, size_t pin_budget)
{
    int a[2], b[2]; /* sockets: vmt_read_all uses recv */
    memset(e, 0, sizeof *e);
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, a) || socketpair(AF_UNIX, SOCK_STREAM, 0, b))
        return -1;
    fflush(stdout);
    e->pid = fork();
    if (e->pid == 0) {
        close(a[0]);
        close(b[1]);
        _exit(exporter(a[1], b[0], heap_size, pin_budget));
    }
    close(a[1]);
    close(b[0]);
    e->from = a[0];
    e->to = b[1];
    uint64_t addr = 0;
    if (vmt_read_all(e->from, &addr, sizeof addr, 120000)) return -1;
    if (shmheap_open(heap_name, NULL, &e->h)) return -1;
    e->hd = (struct hdr *)(uintptr_t)addr;
    return 0;
}

static int exporter_end(xproc *e)
{
    int st = 0;
    if (e->h) shmheap_close(e->h);
    close(e->to);
    close(e->from);
    waitpid(e->pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* ---- attachers: this program again, in pod 1; their result on stdout ---- */

static pid_t attacher(const char *what, const struct hdr *hd, int *out)
{
    int p[2];
    char addr[32];
    if (pipe(p)) return -1;
    snprintf(addr, sizeof addr, "%llx", (unsigned long long)(uintptr_t)hd);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        setenv("SHMHEAP_POD_ID", "1", 1);
        setenv("SHMHEAP_POD", "shmheap-b.pod", 1);
        execl(self, self, "attacher", what, addr, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    *out = p[0];
    return pid;
}

/* The attacher's report: one line "rc v0 v1 v2 v3" (or an error text); its exit status. */
static int attacher_wait(pid_t pid, int fd, long long v[5], char *text, size_t tlen)
{
    char buf[512];
    size_t n = 0;
    ssize_t r;
    while (n < sizeof buf - 1 && (r = read(fd, buf + n, sizeof buf - 1 - n)) > 0) n += (size_t)r;
    buf[n] = 0;
    close(fd);
    int st = 0;
    waitpid(pid, &st, 0);
    memset(v, 0, 5 * sizeof *v);
    sscanf(buf, "%lld %lld %lld %lld %lld", &v[0], &v[1], &v[2], &v[3], &v[4]);
    snprintf(text, tlen, "%s", buf);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int att_main(const char *what, struct hdr *hd)
{
    rpcool_remote *r;
    int onc = !strcmp(what, "corrupt") || !strcmp(what, "closed");
    rpcool_attach_opts ao = {.timeout_ms = !strcmp(what, "killed") ? KILL_TMO_MS : 0};
    int rc = rpcool_attach(onc ? URLC : URL, &ao, &r);
    if (rc) { printf("attach: %s\n", rpcool_strerror(rc)); return 1; }
    if (!strcmp(what, "count")) { /* NREMOTE increments of each of counters 0-3 */
        printf("ready\n");
        fflush(stdout);
        for (int i = 0; i < NREMOTE * 4; i++) {
            rpcool_xhold h;
            uint32_t k = (uint32_t)(i & 3);
            uint64_t c = 0;
            if ((rc = rpcool_remote_lock(r, k, RPCOOL_LOCK_WRITE, &h)) < 0) break;
            rc = rpcool_remote_read(r, &hd->counter[k], &c, sizeof c);
            c++;
            if (!rc) rc = rpcool_remote_write(r, &hd->counter[k], &c, sizeof c);
            int u = rpcool_remote_unlock(&h);
            if (rc || (rc = u)) break;
        }
        printf("%d\n", rc);
    } else if (!strcmp(what, "list")) { /* follow the pointers by READ */
        struct hdr h;
        uint64_t sum = 0, n = 0;
        rc = rpcool_remote_read(r, hd, &h, sizeof h);
        for (struct node *p = h.head, nd; !rc && p; p = nd.next, n++) {
            rc = rpcool_remote_read(r, p, &nd, sizeof nd);
            sum += nd.v;
        }
        printf("%d %llu %llu\n", rc, (unsigned long long)n, (unsigned long long)sum);
    } else if (!strcmp(what, "opt") || !strcmp(what, "optw")) {
        uint64_t copy[WORDS], reads = 0, torn = 0, changes = 0, last = 0, stop = 0;
        uint64_t end = rcp__now_ns() + 20 * VMT_SEC;
        while (!rc && !stop && rcp__now_ns() < end) {
            if (!strcmp(what, "optw")) { /* a remote writer: lock 5, the record, unlock */
                rpcool_xhold h;
                if ((rc = rpcool_remote_lock(r, 5, RPCOOL_LOCK_WRITE, &h)) < 0) break;
                rc = rpcool_remote_read(r, hd->rec, copy, sizeof copy);
                uint64_t nv = copy[0] + 1;
                for (int w = 0; w < WORDS; w++) copy[w] = nv;
                if (!rc) rc = rpcool_remote_write(r, hd->rec, copy, 256);       /* in two */
                if (!rc) rc = rpcool_remote_write(r, hd->rec + 32, copy, 256); /* halves */
                int u = rpcool_remote_unlock(&h);
                if (!rc) rc = u;
                reads++;
            } else {
                rc = rpcool_remote_read_opt(r, 5, hd->rec, copy, sizeof copy);
                reads++;
                for (int w = 1; !rc && w < WORDS; w++)
                    if (copy[w] != copy[0]) { torn++; break; }
                if (copy[0] != last) changes++;
                last = copy[0];
            }
            if (!rc) rc = rpcool_remote_read(r, &hd->stop, &stop, sizeof stop);
        }
        printf("%d %llu %llu %llu\n", rc, (unsigned long long)reads, (unsigned long long)torn,
               (unsigned long long)changes);
    } else if (!strcmp(what, "rest")) { /* the record once every writer is done */
        uint64_t copy[WORDS];
        rc = rpcool_remote_read(r, hd->rec, copy, sizeof copy);
        printf("%d %llu %llu\n", rc, (unsigned long long)copy[0],
               (unsigned long long)copy[WORDS - 1]);
    } else if (!strcmp(what, "bad")) {
        size_t len = 0;
        char *base = (char *)rpcool_remote_base(r, &len);
        char b[16];
        rpcool_xhold h;
        rpcool_remote *r2 = NULL;
        int ok = base != NULL && len > sizeof *hd && rpcool_remote_nlocks(r) == 8;
        ok = ok && rpcool_remote_read(r, base - 1, b, 2) == RPCOOL_E_RANGE;
        ok = ok && rpcool_remote_read(r, base + len - 1, b, 2) == RPCOOL_E_RANGE;
        ok = ok && rpcool_remote_read(r, base, b, SIZE_MAX) == RPCOOL_E_RANGE;
        ok = ok && rpcool_remote_write(r, base + len, b, 1) == RPCOOL_E_RANGE;
        ok = ok && rpcool_remote_read(r, base + len - 2, b, 2) == 0;
        ok = ok && rpcool_remote_read(r, base, NULL, 2) == RPCOOL_E_INVAL;
        ok = ok && rpcool_remote_lock(r, 8, RPCOOL_LOCK_READ, &h) == RPCOOL_E_INVAL;
        ok = ok && rpcool_remote_lock(r, 0, 7, &h) == RPCOOL_E_INVAL;
        ok = ok && rpcool_remote_read_opt(r, 8, base, b, 2) == RPCOOL_E_INVAL;
        ok = ok && rpcool_remote_read_opt(r, 0, base - 8, b, 2) == RPCOOL_E_RANGE;
        memset(&h, 0, sizeof h);
        ok = ok && rpcool_remote_unlock(&h) == RPCOOL_E_INVAL;
        ok = ok && rpcool_remote_lock(r, 7, RPCOOL_LOCK_READ, &h) == 0;
        ok = ok && rpcool_export_unlock(&h) == RPCOOL_E_INVAL; /* not a local hold */
        ok = ok && rpcool_remote_unlock(&h) == 0;
        ok = ok && rpcool_remote_unlock(&h) == RPCOOL_E_INVAL;
        int e1 = rpcool_attach("rdma://127.0.0.1/nosuch", NULL, &r2);
        int e2 = rpcool_attach("rdma://127.0.0.1/bad name", NULL, &r2);
        int e3 = rpcool_attach("rdma://127.0.0.1/xtro", NULL, &r2), e4 = -1, e5 = -1, e6 = -1;
        if (!e3) {
            e4 = rpcool_remote_write(r2, hd->ro, b, 8);
            e5 = rpcool_remote_read(r2, hd->ro, b, 8);
            e6 = rpcool_remote_lock(r2, 0, RPCOOL_LOCK_WRITE, &h);
            rpcool_remote_detach(r2);
        }
        printf("%d %d %d %d %d %d %d\n", ok ? 0 : -1, e1, e2, e3, e4, e5, e6);
    } else if (!strcmp(what, "big")) { /* random pages of the chunks with data, and others */
        size_t len = 0;
        char *base = (char *)rpcool_remote_base(r, &len);
        static uint64_t page[512];
        uint64_t seed = 12345, bad = 0, reads = 0;
        for (int i = 0; !rc && i < BIG_READS; i++) {
            uint64_t k = t_rng(&seed) % BIG_CHUNKS, pg = t_rng(&seed) % 512;
            uint64_t off = k * (len / BIG_CHUNKS & ~(((uint64_t)2 << 20) - 1)) + pg * 4096;
            char *p = (char *)(((uintptr_t)base + off + 4095) & ~(uintptr_t)4095);
            if ((uint64_t)(p - base) + 4096 > len) continue;
            rc = rpcool_remote_read(r, p, page, 4096);
            reads++;
            for (int w = 0; !rc && w < 512; w++)
                if (page[w] != (uint64_t)(uintptr_t)(p + 8 * w) * 0x9e3779b97f4a7c15ull) {
                    bad++;
                    break;
                }
        }
        printf("%d %llu %llu\n", rc, (unsigned long long)reads, (unsigned long long)bad);
    } else if (!strcmp(what, "hold")) { /* lock 6, say so, and wait to be killed */
        rpcool_xhold h;
        rc = rpcool_remote_lock(r, 6, RPCOOL_LOCK_WRITE, &h);
        printf(rc < 0 ? "fail %d\n" : "ready\n", rc);
        fflush(stdout);
        for (;;) pause();
    } else if (!strcmp(what, "wait")) { /* queue for lock 6 behind the holder */
        rpcool_xhold h;
        printf("ready\n");
        fflush(stdout);
        usleep(100000);
        alarm(60); /* never recovered: SIGALRM, and the test says so */
        rc = rpcool_remote_lock(r, 6, RPCOOL_LOCK_WRITE, &h);
        uint64_t t = rcp__now_ns();
        if (rc >= 0) rpcool_remote_unlock(&h);
        printf("%d %llu\n", rc, (unsigned long long)t);
    } else if (!strcmp(what, "killed")) { /* read until it fails: when and how */
        uint64_t v;
        size_t len = 0;
        char *far = (char *)rpcool_remote_base(r, &len);
        far += len / 2; /* a chunk this attacher never leased */
        printf("ready\n");
        fflush(stdout);
        while (!(rc = rpcool_remote_read(r, &hd->counter[0], &v, sizeof v))) usleep(1000);
        uint64_t t = rcp__now_ns();
        int rc2 = rpcool_remote_read(r, far, &v, sizeof v);
        uint64_t t2 = rcp__now_ns();
        printf("%d %llu %d %llu\n", rc, (unsigned long long)t, rc2,
               (unsigned long long)(t2 - t));
    } else if (!strcmp(what, "killedfar")) { /* the first operation after the kill */
        uint64_t v;
        size_t len = 0;
        char *far = (char *)rpcool_remote_base(r, &len);
        rc = rpcool_remote_read(r, &hd->counter[0], &v, sizeof v);
        printf("ready %d\n", rc);
        fflush(stdout);
        for (int i = 0; i < 3000 && access(KILLED_FLAG, F_OK); i++) usleep(10000);
        uint64_t t = rcp__now_ns();
        rc = rpcool_remote_read(r, far + len / 2, &v, sizeof v); /* never leased */
        printf("%d %llu\n", rc, (unsigned long long)(rcp__now_ns() - t));
    } else if (!strcmp(what, "corrupt")) { /* reads timed out, then writes */
        size_t len = 0;
        unsigned char *base = (unsigned char *)rpcool_remote_base(r, &len);
        static uint64_t buf[MIB / 8], pat[MIB / 8];
        int timeouts = 0, first = 0, saved = r->timeout_ms;
        unsigned okmask = 0;
        rc = len == AREA ? rpcool_remote_read(r, base + CORRUPT_ROUNDS * MIB, buf, MIB) : -1;
        for (int i = 0; !rc && i < CORRUPT_ROUNDS; i++) {
            r->timeout_ms = 1; /* the READ outlives its call */
            int rr = rpcool_remote_read(r, base + CORRUPT_ROUNDS * MIB, buf, MIB);
            r->timeout_ms = saved;
            timeouts += rr == RPCOOL_E_TIMEOUT;
            for (size_t w = 0; w < MIB / 8; w++)
                pat[w] = ((uint64_t)(i + 1) << 56) ^ (w * 0x9e3779b97f4a7c15ull);
            int wr = rpcool_remote_write(r, base + (size_t)i * MIB, pat, MIB);
            if (!wr) okmask |= 1u << i;
            else if (!first) first = wr;
        }
        printf("%d %d %u %d\n", rc, timeouts, okmask, first);
    } else if (!strcmp(what, "closed")) { /* after the close: a chunk never leased, an attach */
        size_t len = 0;
        char *base = (char *)rpcool_remote_base(r, &len);
        uint64_t v;
        rc = rpcool_remote_read(r, base, &v, sizeof v); /* chunk 0 leased */
        printf("ready %d\n", rc);
        fflush(stdout);
        for (int i = 0; i < 3000 && access(CLOSED_FLAG, F_OK); i++) usleep(10000);
        uint64_t t = rcp__now_ns();
        int rc1 = rpcool_remote_read(r, base + 6 * MIB, &v, sizeof v);
        uint64_t t1 = rcp__now_ns();
        rpcool_remote *r2 = NULL, *r3 = NULL;
        rpcool_attach_opts a2 = {.timeout_ms = 5000};
        int rc2 = rpcool_attach(URLC, &a2, &r2);
        uint64_t t2 = rcp__now_ns();
        int rc3 = rpcool_attach(URL, &a2, &r3); /* the directory itself still serves */
        if (r2) rpcool_remote_detach(r2);
        if (r3) rpcool_remote_detach(r3);
        printf("%d %llu %d %llu %d\n", rc1, (unsigned long long)(t1 - t), rc2,
               (unsigned long long)(t2 - t1), rc3);
    }
    fflush(stdout);
    rpcool_remote_detach(r);
    return 0;
}

/* ---- the tests ---- */

/* Local writer i: increments until the remote writers are done (hd->stop), at least NLOCAL;
   its count in hd->ro[i]. */
static void local_writer(const struct hdr *hd, int me)
{
    shmheap *h;
    rpcool_export *x;
    struct hdr *d = (struct hdr *)(uintptr_t)hd;
    if (shmheap_open(heap_name, NULL, &h) || rpcool_export_open(h, "xt", &x)) _exit(20);
    int i;
    for (i = 0; i < NLOCAL || !__atomic_load_n(&d->stop, __ATOMIC_ACQUIRE); i++) {
        rpcool_xhold hold;
        uint32_t k = (uint32_t)(i & 3);
        if (rpcool_export_lock(x, k, RPCOOL_LOCK_WRITE, &hold) < 0) _exit(21);
        uint64_t c = d->counter[k];
        if ((c & 15) == 0) sched_yield();
        d->counter[k] = c + 1;
        rpcool_export_unlock(&hold);
        if (i >= NLOCAL) usleep(500); /* a steady trickle while the remote ones run */
    }
    d->ro[me] = (uint64_t)i;
    _exit(0);
}

static void x_counts(xproc *e)
{
    pid_t lp[2], rp[2];
    int fd[2];
    char rd[8];
    e->hd->stop = 0;
    for (int i = 0; i < 2; i++) { /* the remote writers attached, then the local ones start */
        rp[i] = attacher("count", e->hd, &fd[i]);
        CHECK(read(fd[i], rd, 6) == 6 && !strncmp(rd, "ready\n", 6));
    }
    for (int i = 0; i < 2; i++) {
        fflush(stdout);
        if ((lp[i] = fork()) == 0) local_writer(e->hd, i);
    }
    for (int i = 0; i < 2; i++) {
        long long v[5];
        char text[512];
        int st = attacher_wait(rp[i], fd[i], v, text, sizeof text);
        CHECKF(st == 0 && v[0] == 0 && text[0] == '0', "remote writer %d: status %d: %s", i, st,
               text);
    }
    __atomic_store_n(&e->hd->stop, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < 2; i++) {
        int st = 0;
        waitpid(lp[i], &st, 0);
        CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "local writer %d: status %d", i, st);
    }
    uint64_t sum = 0, want = e->hd->ro[0] + e->hd->ro[1] + 2ull * 4 * NREMOTE;
    for (int k = 0; k < 4; k++) sum += e->hd->counter[k];
    CHECKF(sum == want, "sum %llu, expected %llu (%llu and %llu local)", (unsigned long long)sum,
           (unsigned long long)want, (unsigned long long)e->hd->ro[0],
           (unsigned long long)e->hd->ro[1]);
    printf("# counts: %llu local and %d remote increments\n",
           (unsigned long long)(e->hd->ro[0] + e->hd->ro[1]), 2 * 4 * NREMOTE);
}

/* An attacher run to its end: its status, numbers and text. */
static int attacher_run(const char *what, const struct hdr *hd, long long v[5], char text[512])
{
    int fd;
    pid_t p = attacher(what, hd, &fd);
    return attacher_wait(p, fd, v, text, 512);
}

static void x_list(xproc *e)
{
    long long v[5];
    char text[512];
    int st = attacher_run("list", e->hd, v, text);
    CHECKF(st == 0 && text[0] == '0' && v[1] == NLIST && v[2] == NLIST * (NLIST + 1) / 2,
           "status %d: %s", st, text);
}

static void x_torn(xproc *e)
{
    int fr, fw;
    long long vr[5], vw[5];
    char tr[512], tw[512];
    e->hd->stop = 0;
    const char *only = getenv("XT_ONLY");
    int nolocal = only && !strcmp(only, "tornr"), noremote = only && !strcmp(only, "tornl");
    pid_t pr = attacher("opt", e->hd, &fr), pw = attacher(noremote ? "list" : "optw", e->hd, &fw);
    fflush(stdout);
    pid_t lw = fork();
    if (lw == 0 && nolocal) {
        sleep(4);
        __atomic_store_n(&e->hd->stop, 1, __ATOMIC_RELEASE);
        _exit(0);
    }
    if (lw == 0) { /* a local writer for 4 s */
        shmheap *h;
        rpcool_export *x;
        if (shmheap_open(heap_name, NULL, &h) || rpcool_export_open(h, "xt", &x)) _exit(20);
        uint64_t end = rcp__now_ns() + 4 * VMT_SEC;
        while (rcp__now_ns() < end) {
            rpcool_xhold hold;
            if (rpcool_export_lock(x, 5, RPCOOL_LOCK_WRITE, &hold) < 0) _exit(21);
            uint64_t v = e->hd->rec[0] + 1;
            for (int w = 0; w < WORDS; w++) {
                e->hd->rec[w] = v;
                if ((w & 15) == 0) sched_yield();
            }
            rpcool_export_unlock(&hold);
            usleep(100);
        }
        __atomic_store_n(&e->hd->stop, 1, __ATOMIC_RELEASE);
        _exit(0);
    }
    int st = 0;
    waitpid(lw, &st, 0);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "local writer: status %d", st);
    int sr = attacher_wait(pr, fr, vr, tr, sizeof tr);
    int sw = attacher_wait(pw, fw, vw, tw, sizeof tw);
    CHECKF(sr == 0 && tr[0] == '0', "reader: status %d: %s", sr, tr);
    CHECKF(sw == 0 && tw[0] == '0' && vw[1] > 0, "remote writer: status %d: %s", sw, tw);
    CHECKF(vr[2] == 0, "%lld of %lld optimistic remote reads were torn", vr[2], vr[1]);
    CHECKF(vr[1] > 0 && vr[3] > 1, "the reader read %lld times, saw %lld changes", vr[1], vr[3]);
    int same = 1;
    for (int w = 1; w < WORDS; w++) same &= e->hd->rec[w] == e->hd->rec[0];
    CHECKF(same, "the record at rest is torn here: %llu .. %llu",
           (unsigned long long)e->hd->rec[0], (unsigned long long)e->hd->rec[WORDS - 1]);
    long long vs[5];
    char ts[512];
    int ss = attacher_run("rest", e->hd, vs, ts);
    CHECKF(ss == 0 && ts[0] == '0' && (uint64_t)vs[1] == e->hd->rec[0] &&
           (uint64_t)vs[2] == e->hd->rec[WORDS - 1],
           "the record at rest: %llu .. %llu here, read remotely: %s",
           (unsigned long long)e->hd->rec[0], (unsigned long long)e->hd->rec[WORDS - 1], ts);
    printf("# torn: %lld optimistic reads, %lld changes seen, %lld remote writes\n", vr[1],
           vr[3], vw[1]);
}

static void x_bad(xproc *e)
{
    long long v[5];
    char text[512];
    int st = attacher_run("bad", e->hd, v, text);
    int e1, e2, e3, e4, e5, e6, ok = -1;
    int n = sscanf(text, "%d %d %d %d %d %d %d", &ok, &e1, &e2, &e3, &e4, &e5, &e6);
    CHECKF(st == 0 && n == 7 && ok == 0, "status %d: %s", st, text);
    CHECKF(n == 7 && e1 == RPCOOL_E_NOEXPORT && e2 == RPCOOL_E_BADNAME && e3 == 0 &&
           e4 == RPCOOL_E_PERM && e5 == 0 && e6 == RPCOOL_E_PERM, "%s", text);
}

/* The holder killed: when did the waiter (or a local process) get lock 6, and how. */
static void x_holder(xproc *e)
{
    int fh, fw, st = 0;
    char buf[64] = {0};
    long long v[5];
    char text[512];
    pid_t h = attacher("hold", e->hd, &fh);
    CHECK(read(fh, buf, 6) == 6 && !strncmp(buf, "ready\n", 6));
    pid_t w = attacher("wait", e->hd, &fw);
    CHECK(read(fw, buf, 6) == 6 && !strncmp(buf, "ready\n", 6));
    usleep(1000000); /* the waiter is queued behind the holder */
    kill(h, SIGKILL);
    uint64_t t0 = rcp__now_ns();
    waitpid(h, &st, 0);
    close(fh);
    st = attacher_wait(w, fw, v, text, sizeof text);
    double ms = v[1] > 0 ? ((double)(uint64_t)v[1] - (double)t0) / 1e6 : -1;
    CHECKF(st == 0 && v[0] == RPCOOL_OWNERDEAD, "the waiter: status %d: %s", st, text);
    printf("# holder: the remote waiter took the lock over %.0f ms after the kill (%s)\n", ms,
           v[0] == RPCOOL_OWNERDEAD ? "RPCOOL_OWNERDEAD" : text);
    /* nobody waiting: the exporter releases the lock; a local process of the pod gets it */
    h = attacher("hold", e->hd, &fh);
    memset(buf, 0, sizeof buf);
    CHECK(read(fh, buf, 6) == 6 && !strncmp(buf, "ready\n", 6));
    kill(h, SIGKILL);
    t0 = rcp__now_ns();
    waitpid(h, &st, 0);
    close(fh);
    fflush(stdout);
    pid_t lp = fork();
    if (lp == 0) {
        shmheap *hp;
        rpcool_export *x;
        rpcool_xhold hold;
        alarm(60);
        if (shmheap_open(heap_name, NULL, &hp) || rpcool_export_open(hp, "xt", &x)) _exit(20);
        int rc = rpcool_export_lock(x, 6, RPCOOL_LOCK_WRITE, &hold);
        if (rc >= 0) rpcool_export_unlock(&hold);
        _exit(rc >= 0 ? 0 : 21);
    }
    waitpid(lp, &st, 0);
    ms = (double)(rcp__now_ns() - t0) / 1e6;
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the local locker: status %d after %.0f ms "
           "(SIGALRM 14: the lock was never released)", st, ms);
    printf("# holder: alone, its lock released and taken locally %.0f ms after the kill\n", ms);
}

static void x_big(void)
{
    xproc e;
    snprintf(heap_name, sizeof heap_name, "%s", t_uniq("xbig"));
    CHECK(exporter_start(&e, BIG + ((size_t)64 << 20), BIG_BUDGET) == 0);
    if (!e.hd) return;
    /* data in BIG_CHUNKS chunks spread over the heap: word = address * constant (the exporter's
       memory is shared with this process: the same heap, opened) */
    rpcool_export *x = NULL;
    CHECK(rpcool_export_open(e.h, "xt", &x) == 0);
    if (!x) return;
    size_t len = 0;
    char *base = (char *)rpcool_export_base(x, &len);
    CHECKF(len >= BIG, "the export is %zu bytes", len);
    for (uint64_t k = 0; k < BIG_CHUNKS; k++) {
        uint64_t off = k * (len / BIG_CHUNKS & ~(((uint64_t)2 << 20) - 1));
        char *p = (char *)(((uintptr_t)base + off + 4095) & ~(uintptr_t)4095);
        for (size_t w = 0; w < ((size_t)2 << 20) / 8 && (size_t)(p - base) + 8 * w + 8 <= len; w++)
            ((uint64_t *)(void *)p)[w] = (uint64_t)(uintptr_t)(p + 8 * w) * 0x9e3779b97f4a7c15ull;
    }
    long long v[5];
    char text[512];
    int st = attacher_run("big", e.hd, v, text);
    CHECKF(st == 0 && text[0] == '0' && v[1] > BIG_READS / 2 && v[2] == 0, "status %d: %s", st,
           text);
    uint64_t s[4] = {0, 0, 0, 0};
    CHECK(vmt_write_all(e.to, "s", 1) == 0 && vmt_read_all(e.from, s, sizeof s, 30000) == 0);
    CHECKF(s[0] == BIG_BUDGET && s[1] > 0 && s[1] <= BIG_BUDGET,
           "pin_budget %llu, pinned at most %llu", (unsigned long long)s[0],
           (unsigned long long)s[1]);
    printf("# big: %lld reads of 1 GiB, pinned peak %llu MiB of %llu, %llu leases, "
           "%llu evictions\n", v[1], (unsigned long long)(s[1] >> 20),
           (unsigned long long)(s[0] >> 20), (unsigned long long)s[2], (unsigned long long)s[3]);
    rpcool_export_close(x);
    CHECK_EQ(exporter_end(&e), 0);
}

static void x_killed(void)
{
    xproc e;
    snprintf(heap_name, sizeof heap_name, "%s", t_uniq("xkill"));
    CHECK(exporter_start(&e, 16 << 20, 0) == 0);
    if (!e.hd) return;
    int fd;
    char buf[64] = {0};
    pid_t p = attacher("killed", e.hd, &fd);
    CHECK(read(fd, buf, 6) == 6 && !strncmp(buf, "ready\n", 6));
    usleep(200000);
    kill(e.pid, SIGKILL);
    uint64_t t0 = rcp__now_ns();
    long long v[5];
    char text[512];
    int st = attacher_wait(p, fd, v, text, sizeof text);
    double ms = v[1] > 0 ? ((double)(uint64_t)v[1] - (double)t0) / 1e6 : -1;
    CHECKF(st == 0 && (v[0] == RPCOOL_E_PEERDEAD || v[0] == RPCOOL_E_TIMEOUT),
           "status %d: %s", st, text);
    CHECKF(ms >= 0 && ms <= KILL_TMO_MS + 1000, "the attacher failed %.0f ms after the kill "
           "(timeout_ms %d)", ms, KILL_TMO_MS);
    double ms2 = (double)v[3] / 1e6;
    CHECKF((v[2] == RPCOOL_E_PEERDEAD || v[2] == RPCOOL_E_TIMEOUT) && ms2 <= KILL_TMO_MS + 1000,
           "a read of a chunk never leased: %lld (%s) after %.0f ms", v[2],
           rpcool_strerror((int)v[2]), ms2);
    printf("# killed: the attacher failed with %s %.0f ms after the kill; a chunk never leased "
           "then: %s after %.0f ms\n", rpcool_strerror((int)v[0]), ms, rpcool_strerror((int)v[2]),
           ms2);
    int est = 0;
    waitpid(e.pid, &est, 0);
    shmheap_close(e.h);
    close(e.to);
    close(e.from);
    shmheap_unlink(heap_name, NULL);
    /* the read of a chunk never leased is the first operation after the kill */
    unlink(KILLED_FLAG);
    snprintf(heap_name, sizeof heap_name, "%s", t_uniq("xkill2"));
    CHECK(exporter_start(&e, 16 << 20, 0) == 0);
    if (!e.hd) return;
    memset(buf, 0, sizeof buf);
    p = attacher("killedfar", e.hd, &fd);
    CHECK(read(fd, buf, 8) == 8 && !strncmp(buf, "ready 0\n", 8));
    kill(e.pid, SIGKILL);
    waitpid(e.pid, &est, 0);
    int ff = open(KILLED_FLAG, O_CREAT | O_WRONLY, 0600);
    if (ff >= 0) close(ff);
    st = attacher_wait(p, fd, v, text, sizeof text);
    ms = (double)v[1] / 1e6;
    printf("# killed: a chunk never leased as the first operation after the kill: %s after "
           "%.0f ms (timeout_ms %d)\n", rpcool_strerror((int)v[0]), ms,
           RPCOOL_ATTACH_DEFAULT_TIMEOUT_MS);
    CHECKF(st == 0 && (v[0] == RPCOOL_E_PEERDEAD || v[0] == RPCOOL_E_TIMEOUT) &&
           ms <= RPCOOL_ATTACH_DEFAULT_TIMEOUT_MS + 1000, "the first read after the kill: "
           "status %d: %s", st, text);
    shmheap_close(e.h);
    close(e.to);
    close(e.from);
    shmheap_unlink(heap_name, NULL);
    unlink(KILLED_FLAG);
}

/* Writes after reads that timed out: what the exporter holds, byte by byte. */
static void x_corrupt(void)
{
    xproc e;
    snprintf(heap_name, sizeof heap_name, "%s", t_uniq("xcor"));
    CHECK(exporter_start(&e, CORRUPT_HEAP, 0) == 0);
    if (!e.hd) return;
    long long v[5];
    char text[512];
    int st = attacher_run("corrupt", e.hd, v, text);
    CHECKF(st == 0 && v[0] == 0, "status %d: %s", st, text);
    unsigned okmask = (unsigned)v[2];
    uint64_t diff = 0, first = 0;
    int firstround = -1;
    for (int i = 0; i < CORRUPT_ROUNDS; i++) {
        if (!(okmask & (1u << i))) continue; /* a write that failed promises nothing */
        const unsigned char *p = e.hd->area + (size_t)i * MIB;
        uint64_t d = 0;
        for (size_t w = 0; w < MIB / 8; w++) {
            uint64_t want = ((uint64_t)(i + 1) << 56) ^ (w * 0x9e3779b97f4a7c15ull), got;
            memcpy(&got, p + 8 * w, 8);
            for (int b = 0; b < 8; b++) d += ((want >> (8 * b)) & 0xff) != ((got >> (8 * b)) & 0xff);
        }
        if (d && firstround < 0) {
            firstround = i;
            first = d;
        }
        diff += d;
    }
    printf("# corrupt: %lld of %d reads timed out; writes returning 0: %d of %d; bytes the "
           "exporter holds that differ from them: %llu\n", v[1], CORRUPT_ROUNDS,
           __builtin_popcount(okmask), CORRUPT_ROUNDS, (unsigned long long)diff);
    CHECKF(v[1] > 0, "no read timed out (%s): the test shows nothing", text);
    CHECKF(diff == 0, "%llu bytes differ from what writes that returned 0 wrote (round %d: "
           "%llu)", (unsigned long long)diff, firstround, (unsigned long long)first);
    CHECKF(okmask == (1u << CORRUPT_ROUNDS) - 1, "writes after a timed-out read failed: %s",
           text);
    CHECK_EQ(exporter_end(&e), 0);
}

/* The export closed, its exporter alive. */
static void x_closed(void)
{
    xproc e;
    unlink(CLOSED_FLAG);
    snprintf(heap_name, sizeof heap_name, "%s", t_uniq("xclo"));
    CHECK(exporter_start(&e, CORRUPT_HEAP, 0) == 0);
    if (!e.hd) return;
    int fd;
    char buf[64] = {0};
    pid_t p = attacher("closed", e.hd, &fd);
    CHECK(read(fd, buf, 8) == 8 && !strncmp(buf, "ready 0\n", 8));
    uint64_t c[4] = {1, 0, 0, 0};
    CHECK(vmt_write_all(e.to, "c", 1) == 0 && vmt_read_all(e.from, c, sizeof c, 30000) == 0);
    CHECKF(c[0] == 0, "rpcool_export_close: %d", (int)c[0]);
    int ff = open(CLOSED_FLAG, O_CREAT | O_WRONLY, 0600);
    if (ff >= 0) close(ff);
    long long v[5];
    char text[512];
    int st = attacher_wait(p, fd, v, text, sizeof text);
    double ms1 = (double)v[1] / 1e6, ms2 = (double)v[3] / 1e6;
    printf("# closed: export closed in %.0f ms; the attacher's read of a chunk never leased: %s "
           "after %.0f ms; an attach then: %s after %.0f ms\n", (double)c[1] / 1e6,
           rpcool_strerror((int)v[0]), ms1, rpcool_strerror((int)v[2]), ms2);
    CHECKF(st == 0 && (v[0] == RPCOOL_E_PEERDEAD || v[0] == RPCOOL_E_TIMEOUT) &&
           ms1 <= RPCOOL_ATTACH_DEFAULT_TIMEOUT_MS + 1000, "read after the close: status %d: %s",
           st, text);
    CHECKF(v[2] == RPCOOL_E_NOEXPORT && ms2 < 2000, "attach after the close: %s after %.0f ms",
           rpcool_strerror((int)v[2]), ms2);
    CHECKF(v[4] == 0, "another export of that exporter: %s", rpcool_strerror((int)v[4]));
    CHECK_EQ(exporter_end(&e), 0);
    unlink(CLOSED_FLAG);
}

int main(int argc, char **argv)
{
    self = argv[0];
    if (argc == 4 && !strcmp(argv[1], "attacher"))
        return att_main(argv[2], (struct hdr *)(uintptr_t)strtoull(argv[3], NULL, 16));
    t_init(argc, argv);
    if (getenv("XT_DEBUG")) { /* the library's log (RPCOOL_DEBUG) with the results */
        setvbuf(stdout, NULL, _IONBF, 0);
        dup2(1, 2);
    }
    const char *only = getenv("XT_ONLY");
    if (only && !*only) only = NULL;
    xproc e;
    snprintf(heap_name, sizeof heap_name, "%s", t_uniq("xt"));
    if (!only || strstr("counts list torn tornl tornr bad holder", only)) {
        int rc = exporter_start(&e, 16 << 20, 0);
        if (rc || !e.hd) {
            printf("FAIL exporter: could not start\n");
            return 1;
        }
        if (!only || strstr("counts", only)) TEST_NAMED("counts", x_counts(&e));
        if (!only || strstr("list", only)) TEST_NAMED("list", x_list(&e));
        if (!only || strstr(only, "torn")) TEST_NAMED("torn", x_torn(&e));
        if (!only || strstr("bad", only)) TEST_NAMED("bad", x_bad(&e));
        if (!only || strstr("holder", only)) TEST_NAMED("holder", x_holder(&e));
        int st = exporter_end(&e);
        if (st) printf("FAIL exporter: exit status %d\n", st);
    }
    if (!only || strstr("big", only)) TEST_NAMED("big", x_big());
    if (!only || strstr("killed", only)) TEST_NAMED("killed", x_killed());
    if (!only || strstr("corrupt", only)) TEST_NAMED("corrupt", x_corrupt());
    if (!only || strstr("closed", only)) TEST_NAMED("closed", x_closed());
    return T_DONE();
}
