/* Deferred replies (rpcool.h section 2): a handler takes its call out of the serving thread
   and another thread finishes it later; the serving thread serves others meanwhile. */
// TSAN
#define RPCOOL_IMPLEMENTATION
#include "rpcool.h"
#include "t.h"
#include <pthread.h>

enum { FN_LATER = 20, FN_NOW = 21, FN_TWICE = 22, FN_FAILAFTER = 23, FN_BADREPLY = 24,
       FN_COPY = 25, FN_PLAIN = 26 };

static int t_late_rc = 1; /* what the late rpcool_deferred_reply returned */

struct late { rpcool_deferred *d; const char *arg; size_t len; int bad; };

/* 30 ms later, from a thread of its own: a reply in the caller's heap, made from the argument */
static void *late_thread(void *p)
{
    struct late *l = (struct late *)p;
    usleep(30000);
    char *r = (char *)rpcool_deferred_alloc(l->d, l->len + 6);
    int rc;
    if (!r) rc = rpcool_deferred_fail(l->d, SHMHEAP_E_FULL);
    else {
        memcpy(r, "late:", 5);
        memcpy(r + 5, l->arg, l->len);
        r[5 + l->len] = '\0';
        rc = rpcool_deferred_reply(l->d, 5, l->bad ? (void *)&rc : r, l->len + 6);
    }
    __atomic_store_n(&t_late_rc, rc, __ATOMIC_RELEASE);
    free(l);
    return NULL;
}

static int h_later(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    struct late *l = (struct late *)malloc(sizeof *l);
    l->arg = (const char *)arg;
    l->len = len;
    l->bad = user != NULL;
    int rc = rpcool_ctx_defer(ctx, &l->d);
    if (rc) { free(l); return rc; }
    pthread_t t;
    pthread_create(&t, NULL, late_thread, l);
    pthread_detach(t);
    return 0; /* ignored: the deferred reply answers */
}

static int h_now(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)arg, (void)len, (void)user;
    rpcool_deferred *d;
    int rc = rpcool_ctx_defer(ctx, &d);
    if (rc) return rc;
    rpcool_deferred *d2;
    int again = rpcool_ctx_defer(ctx, &d2);
    return rpcool_deferred_reply(d, again == RPCOOL_E_INVAL ? 3 : 99, NULL, 0);
}

static int h_failafter(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)arg, (void)len, (void)user;
    struct late *l = (struct late *)malloc(sizeof *l);
    l->arg = "x";
    l->len = 1;
    l->bad = 0;
    int rc = rpcool_ctx_defer(ctx, &l->d);
    if (rc) { free(l); return rc; }
    pthread_t t;
    pthread_create(&t, NULL, late_thread, l);
    pthread_detach(t);
    rpcool_ctx_fail(ctx, 7); /* ends the call now; the late reply finds it ended */
    return 0;
}

static int h_plain(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx, (void)arg, (void)len, (void)user;
    return 11;
}

static rpcool_server *t_s;
static rpcool_conn *t_c, *t_c2;

static void wait_late(void)
{
    for (int i = 0; i < 2000 && __atomic_load_n(&t_late_rc, __ATOMIC_ACQUIRE) == 1; i++) usleep(1000);
}

struct bg { rpcool_conn *c; unsigned fn; int rc; char out[64]; int done; };
static void *bg_call(void *p)
{
    struct bg *b = (struct bg *)p;
    char *a = rpcool_strdup(b->c, "abc");
    void *ret = NULL;
    size_t n = 0;
    b->rc = rpcool_call(b->c, b->fn, a, 3, &ret, &n);
    if (ret) {
        snprintf(b->out, sizeof b->out, "%s", (char *)ret);
        rpcool_free(b->c, ret);
    }
    rpcool_free(b->c, a);
    __atomic_store_n(&b->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* one serving thread: while a call waits for its late reply, another call is served */
static void defer_later_frees_the_serving_thread(void)
{
    for (unsigned fn = FN_LATER; fn <= FN_COPY; fn += FN_COPY - FN_LATER) {
        __atomic_store_n(&t_late_rc, 1, __ATOMIC_RELEASE);
        struct bg b;
        memset(&b, 0, sizeof b);
        b.c = t_c;
        b.fn = fn;
        pthread_t t;
        pthread_create(&t, NULL, bg_call, &b);
        usleep(5000);
        CHECK_EQ(rpcool_call(t_c2, FN_PLAIN, NULL, 0, NULL, NULL), 11);
        CHECKF(!__atomic_load_n(&b.done, __ATOMIC_ACQUIRE), "fn %u: the other call waited", fn);
        pthread_join(t, NULL);
        CHECK_EQ(b.rc, 5);
        CHECKF(!strcmp(b.out, "late:abc"), "fn %u: reply '%s'", fn, b.out);
        wait_late();
        CHECK_EQ(__atomic_load_n(&t_late_rc, __ATOMIC_ACQUIRE), 0);
    }
}

static void defer_reply_inside_the_handler(void)
{
    CHECK_EQ(rpcool_call(t_c, FN_NOW, NULL, 0, NULL, NULL), 3);
}

static void defer_then_fail(void)
{
    __atomic_store_n(&t_late_rc, 1, __ATOMIC_RELEASE);
    CHECK_EQ(rpcool_call(t_c, FN_FAILAFTER, NULL, 0, NULL, NULL), 7);
    wait_late();
    CHECK_EQ(__atomic_load_n(&t_late_rc, __ATOMIC_ACQUIRE), RPCOOL_E_INVAL);
}

static void defer_private_reply_refused(void)
{
    __atomic_store_n(&t_late_rc, 1, __ATOMIC_RELEASE);
    char *a = rpcool_strdup(t_c, "abc");
    void *ret = NULL;
    size_t n = 0;
    CHECK_EQ(rpcool_call(t_c, FN_BADREPLY, a, 3, &ret, &n), RPCOOL_E_BADPTR);
    CHECK(ret == NULL);
    rpcool_free(t_c, a);
    wait_late();
    CHECK_EQ(__atomic_load_n(&t_late_rc, __ATOMIC_ACQUIRE), RPCOOL_E_BADPTR);
}

/* the client goes while its call is deferred: its heap stays until the reply, then is reaped */
static void defer_client_gone(void)
{
    rpcool_conn *c;
    CHECK_EQ(rpcool_connect(t_s->name, NULL, &c), 0);
    if (!c) return;
    __atomic_store_n(&t_late_rc, 1, __ATOMIC_RELEASE);
    char *a = rpcool_strdup(c, "abc");
    uint64_t id;
    CHECK_EQ(rpcool_call_async(c, FN_LATER, a, 3, NULL, NULL, NULL, &id), 0);
    usleep(5000);
    rpcool_server_stats st0, st1;
    rpcool_server_get_stats(t_s, &st0);
    CHECK_EQ(rpcool_disconnect(c), 0);
    wait_late();
    CHECK_EQ(__atomic_load_n(&t_late_rc, __ATOMIC_ACQUIRE), 0);
    for (int i = 0; i < 200; i++) {
        rpcool_server_get_stats(t_s, &st1);
        if (st1.closed + st1.reaped > st0.closed + st0.reaped) break;
        usleep(10000);
    }
    CHECK(st1.closed + st1.reaped > st0.closed + st0.reaped);
}

int main(int argc, char **argv)
{
    t_init(argc, argv);
    const char *name = t_uniq("defer");
    int r = rpcool_server_open(name, NULL, &t_s);
    if (r) { printf("FAIL defer: server_open: %s\n", rpcool_strerror(r)); return 1; }
    rpcool_server_add_handler(t_s, FN_LATER, h_later, NULL, 0);
    rpcool_server_add_handler(t_s, FN_COPY, h_later, NULL, RPCOOL_COPY);
    rpcool_server_add_handler(t_s, FN_NOW, h_now, NULL, 0);
    rpcool_server_add_handler(t_s, FN_FAILAFTER, h_failafter, NULL, 0);
    rpcool_server_add_handler(t_s, FN_BADREPLY, h_later, t_s, 0);
    rpcool_server_add_handler(t_s, FN_PLAIN, h_plain, NULL, 0);
    rpcool_server_start(t_s, 1);
    r = rpcool_connect(name, NULL, &t_c);
    if (!r) r = rpcool_connect(name, NULL, &t_c2);
    if (r) { printf("FAIL defer: connect: %s\n", rpcool_strerror(r)); return 1; }
    RUN(defer_later_frees_the_serving_thread);
    RUN(defer_reply_inside_the_handler);
    RUN(defer_then_fail);
    RUN(defer_private_reply_refused);
    RUN(defer_client_gone);
    rpcool_disconnect(t_c2);
    rpcool_disconnect(t_c);
    rpcool_server_close(t_s);
    return T_DONE();
}
