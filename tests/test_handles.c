// TSAN
/* The one handle rule of every header's ERRORS section: a second close, a use after close and
   a forked child's use of its parent's handle return the header's own code, never a crash
   (shmheap.h, rpcool.h, alock.h here; krconn.h and nppin.h need a device: tests/vm). */
#define SHMHEAP_IMPLEMENTATION
#define RPCOOL_IMPLEMENTATION
#define ALOCK_IMPLEMENTATION
#include "rpcool.h"
#include "alock.h"
#include "t.h"
#include <sys/wait.h>

static void heap_closed_twice_and_used(void)
{
    const char *name = t_uniq("hdl-heap");
    shmheap *h = t_heap(name, 4 << 20);
    if (!h) return;
    shmheap *h2 = NULL;
    CHECK_EQ(shmheap_open(name, NULL, &h2), 0); /* the same handle, opened twice */
    CHECK(h2 == h);
    CHECK_EQ(shmheap_close(h2), 0);
    void *p = shmheap_malloc(h, 64); /* still open once */
    CHECK(p != NULL);
    CHECK_EQ(shmheap_free(h, p), 0);
    CHECK_EQ(shmheap_close(h), 0);
    CHECK_EQ(shmheap_close(h), SHMHEAP_E_BADHANDLE);
    errno = 0;
    CHECK(shmheap_malloc(h, 64) == NULL);
    CHECK_EQ(errno, EBADF);
    errno = 0;
    CHECK(shmheap_calloc(h, 2, 64) == NULL);
    CHECK_EQ(errno, EBADF);
    errno = 0;
    CHECK(shmheap_malloc(h, 1 << 20) == NULL); /* the large path too */
    CHECK_EQ(errno, EBADF);
    void *q = NULL;
    CHECK_EQ(shmheap_alloc(h, 64, 0, &q), SHMHEAP_E_BADHANDLE);
    CHECK_EQ(shmheap_free(h, p), SHMHEAP_E_BADHANDLE);
    CHECK_EQ(shmheap_flush(h), SHMHEAP_E_BADHANDLE);
    CHECK_EQ(shmheap_check(h, NULL), SHMHEAP_E_BADHANDLE);
    CHECK_EQ(shmheap_root_set(h, "r", NULL), SHMHEAP_E_BADHANDLE);
    CHECK(shmheap_root_get(h, "r") == NULL);
    CHECK(shmheap_base(h) == NULL);
    CHECK_EQ(shmheap_size(h), 0);
    CHECK(shmheap_name(h) == NULL);
    CHECK_EQ(shmheap_opens(h), SHMHEAP_E_BADHANDLE);
    CHECK_EQ(shmheap_contains(h, p, 1), 0);
    CHECK_EQ(shmheap_usable_size(h, p), 0);
    CHECK(shmheap_realloc(h, p, 128) == NULL);
    CHECK_EQ(shmheap_seal(h, p, 64), SHMHEAP_E_BADHANDLE);
    CHECK_EQ(shmheap_unseal(h, p, 64), SHMHEAP_E_BADHANDLE);
    shmheap_unlink(name, NULL);
}

static int heap_child(void *arg)
{
    shmheap *h = (shmheap *)arg;
    void *p = shmheap_malloc(h, 100);
    if (!p) return 1;
    if (shmheap_free(h, p)) return 2;
    if (shmheap_close(h)) return 3; /* children may use and close their parent's heaps */
    return shmheap_close(h) == SHMHEAP_E_BADHANDLE ? 0 : 4;
}

static void heap_forked_child_may_use(void)
{
    const char *name = t_uniq("hdl-heapf");
    shmheap *h = t_heap(name, 4 << 20);
    if (!h) return;
    CHECK_EQ(t_in_child(heap_child, h), 0);
    CHECK(shmheap_malloc(h, 10) != NULL); /* still the parent's */
    t_rm(h, name);
}

/* shmheap_resv (a range of the pod for heaps on descriptors) follows the rule as a heap does */
static void resv_destroyed_twice_and_used(void)
{
    t_pod pod;
    t_pod_enter(&pod, "hdl-resv");
    shmheap_resv *r = NULL;
    CHECK_EQ(shmheap_resv_create((size_t)4 << 20, NULL, &r), 0);
    if (!r) {
        t_pod_leave(&pod);
        return;
    }
    int fd = shmheap_resv_hold(r);
    CHECK(fd >= 0);
    if (fd >= 0) close(fd);
    CHECK_EQ(shmheap_resv_destroy(r), 0);
    CHECK_EQ(shmheap_resv_destroy(r), SHMHEAP_E_BADHANDLE);
    CHECK_EQ(shmheap_resv_hold(r), SHMHEAP_E_BADHANDLE);
    errno = 0;
    CHECK(shmheap_resv_base(r) == NULL);
    CHECK_EQ(errno, EBADF);
    errno = 0;
    CHECK_EQ(shmheap_resv_size(r), (size_t)0);
    CHECK_EQ(errno, EBADF);
    int mfd = memfd_create("t-hdl-resv", MFD_CLOEXEC);
    shmheap *h = NULL;
    CHECK_EQ(shmheap_create_fd_in(r, 0, mfd, NULL, &h), SHMHEAP_E_BADHANDLE);
    CHECK(h == NULL);
    if (mfd >= 0) close(mfd);
    t_pod_leave(&pod);
}

static void rpcool_conn_closed_twice_and_used(void)
{
    const char *name = t_uniq("hdl-conn");
    rpcool_server *s;
    rpcool_conn *c;
    if (t_serving_connect(name, 0, NULL, &s, &c)) return;
    CHECK_EQ(rpcool_disconnect(c), 0);
    CHECK_EQ(rpcool_disconnect(c), RPCOOL_E_BADHANDLE);
    int v = 1;
    void *ret = NULL;
    size_t rl = 0;
    uint64_t id = 0;
    CHECK_EQ(rpcool_call(c, T_FN_ECHO, &v, sizeof v, &ret, &rl), RPCOOL_E_BADHANDLE);
    CHECK_EQ(rpcool_call_async(c, T_FN_ECHO, &v, sizeof v, NULL, NULL, NULL, &id),
             RPCOOL_E_BADHANDLE);
    CHECK_EQ(rpcool_poll(c, 1, &ret, &rl), RPCOOL_E_BADHANDLE);
    CHECK_EQ(rpcool_wait(c, 1, &ret, &rl), RPCOOL_E_BADHANDLE);
    CHECK_EQ(rpcool_cancel(c, 1), RPCOOL_E_BADHANDLE);
    CHECK_EQ(rpcool_progress(c), RPCOOL_E_BADHANDLE);
    CHECK_EQ(rpcool_release(c), RPCOOL_E_BADHANDLE);
    CHECK_EQ(rpcool_free(c, &v), RPCOOL_E_BADHANDLE);
    errno = 0;
    CHECK(rpcool_alloc(c, 8) == NULL);
    CHECK_EQ(errno, EBADF);
    CHECK(rpcool_alloc_pages(c, 8) == NULL);
    CHECK(rpcool_strdup(c, "x") == NULL);
    CHECK(rpcool_heap(c) == NULL);
    rpcool_server_close(s);
}

static void rpcool_server_closed_twice_and_used(void)
{
    const char *name = t_uniq("hdl-srv");
    rpcool_server *s = t_serving(name, 0);
    if (!s) return;
    rpcool_server_stats st;
    CHECK_EQ(rpcool_server_close(s), 0);
    CHECK_EQ(rpcool_server_close(s), RPCOOL_E_BADHANDLE);
    CHECK_EQ(rpcool_server_get_stats(s, &st), RPCOOL_E_BADHANDLE);
    CHECK_EQ(rpcool_server_add_handler(s, 3, t_h_echo, NULL, 0), RPCOOL_E_BADHANDLE);
    CHECK_EQ(rpcool_server_start(s, 1), RPCOOL_E_BADHANDLE);
    CHECK_EQ(rpcool_serve(s), RPCOOL_E_BADHANDLE);
    CHECK_EQ(rpcool_server_conns(s, NULL, 0), RPCOOL_E_BADHANDLE);
    rpcool_server_stop(s); /* returns nothing: does nothing */
}

static int conn_child(void *arg)
{
    rpcool_conn *c = (rpcool_conn *)arg;
    int v = 7;
    void *ret = NULL;
    size_t rl = 0;
    if (rpcool_call(c, T_FN_ECHO, &v, sizeof v, &ret, &rl) != RPCOOL_E_FORKED) return 1;
    if (rpcool_alloc(c, 8) != NULL || errno != EBADF) return 2;
    if (rpcool_disconnect(c) != RPCOOL_E_FORKED) return 3;
    return 0;
}

static int server_child(void *arg)
{
    rpcool_server *s = (rpcool_server *)arg;
    rpcool_server_stats st;
    if (rpcool_server_get_stats(s, &st) != RPCOOL_E_FORKED) return 1;
    if (rpcool_server_close(s) != RPCOOL_E_FORKED) return 2; /* its files stay the parent's */
    return 0;
}

static void rpcool_forked_child_gets_an_error(void)
{
    const char *name = t_uniq("hdl-fork");
    rpcool_server *s;
    rpcool_conn *c;
    if (t_serving_connect(name, 0, NULL, &s, &c)) return;
    CHECK_EQ(t_in_child(conn_child, c), 0);
    CHECK_EQ(t_in_child(server_child, s), 0);
    int *v = (int *)rpcool_alloc(c, sizeof *v);
    void *ret = NULL;
    size_t rl = 0;
    CHECK(v != NULL);
    CHECK_EQ(rpcool_call(c, T_FN_ECHO, v, sizeof *v, &ret, &rl), 0); /* the parent's still work */
    rpcool_free(c, ret);
    rpcool_free(c, v);
    t_disconnect_close(c, s);
}

static void rpcool_export_closed_twice_and_used(void)
{
    const char *name = t_uniq("hdl-xh");
    shmheap *h = t_heap(name, 8 << 20);
    if (!h) return;
    rpcool_export *x = NULL, *y = NULL;
    CHECK_EQ(rpcool_export_create(h, "hdlx", NULL, 0, NULL, &x), 0);
    CHECK_EQ(rpcool_export_open(h, "hdlx", &y), 0);
    CHECK_EQ(rpcool_export_close(y), 0);
    CHECK_EQ(rpcool_export_close(y), RPCOOL_E_BADHANDLE);
    rpcool_xhold hd;
    CHECK_EQ(rpcool_export_lock(y, 0, RPCOOL_LOCK_WRITE, &hd), RPCOOL_E_BADHANDLE);
    CHECK(rpcool_export_base(y, NULL) == NULL);
    CHECK_EQ(rpcool_export_nlocks(y), 0);
    CHECK_EQ(rpcool_export_close(x), 0);
    CHECK_EQ(rpcool_export_close(x), RPCOOL_E_BADHANDLE);
    t_rm(h, name);
}

static void alock_table_closed_twice_and_used(void)
{
    const char *name = t_uniq("hdl-al");
    shmheap *h = t_heap(name, 8 << 20);
    if (!h) return;
    alock_table_opts o = {.nlocks = 4};
    alock_table *t = NULL;
    alock_hold hd;
    CHECK_EQ(alock_table_create(h, "t", &o, &t), 0);
    CHECK_EQ(alock_lock(t, 1, &hd), 0);
    CHECK_EQ(alock_table_close(t), 0);
    CHECK_EQ(alock_table_close(t), ALOCK_E_BADHANDLE);
    CHECK_EQ(alock_unlock(&hd), ALOCK_E_BADHANDLE);
    CHECK_EQ(alock_lock(t, 0, &hd), ALOCK_E_BADHANDLE);
    CHECK_EQ(alock_trylock(t, 0, &hd), ALOCK_E_BADHANDLE);
    CHECK_EQ(alock_recover(t), ALOCK_E_BADHANDLE);
    CHECK_EQ(alock_table_nlocks(t), 0);
    alock_table_unlink(h, "t");
    t_rm(h, name);
}

static int alock_child(void *arg)
{
    alock_table *t = (alock_table *)arg;
    alock_hold hd;
    if (alock_lock(t, 0, &hd) != ALOCK_E_FORKED) return 1;
    if (alock_table_close(t) != ALOCK_E_FORKED) return 2;
    return 0;
}

static void alock_forked_child_gets_an_error(void)
{
    const char *name = t_uniq("hdl-alf");
    shmheap *h = t_heap(name, 8 << 20);
    if (!h) return;
    alock_table_opts o = {.nlocks = 4};
    alock_table *t = NULL;
    alock_hold hd;
    CHECK_EQ(alock_table_create(h, "t", &o, &t), 0);
    CHECK_EQ(t_in_child(alock_child, t), 0);
    CHECK_EQ(alock_lock(t, 0, &hd), 0);
    CHECK_EQ(alock_unlock(&hd), 0);
    CHECK_EQ(alock_table_close(t), 0);
    alock_table_unlink(h, "t");
    t_rm(h, name);
}

/* Many handles opened and closed: the table keeps finding every open one. */
static void many_handles(void)
{
    enum { N = 300 };
    const char *name = t_uniq("hdl-many");
    shmheap *h = t_heap(name, 8 << 20);
    if (!h) return;
    alock_table_opts o = {.nlocks = 1, .slots = N + 8};
    alock_table *t[N];
    CHECK_EQ(alock_table_create(h, "t", &o, &t[0]), 0);
    for (int i = 1; i < N; i++) CHECK_EQ(alock_table_open(h, "t", NULL, &t[i]), 0);
    for (int i = 0; i < N; i += 2) CHECK_EQ(alock_table_close(t[i]), 0);
    for (int i = 0; i < N; i++)
        CHECK_EQ(alock_table_nlocks(t[i]), i % 2 ? 1 : 0);
    for (int i = 1; i < N; i += 2) CHECK_EQ(alock_table_close(t[i]), 0);
    for (int i = 0; i < N; i++) CHECK_EQ(alock_table_close(t[i]), ALOCK_E_BADHANDLE);
    alock_table_unlink(h, "t");
    t_rm(h, name);
}

int main(int argc, char **argv)
{
    t_init(argc, argv);
    RUN(heap_closed_twice_and_used);
    RUN(heap_forked_child_may_use);
    RUN(resv_destroyed_twice_and_used);
    RUN(rpcool_conn_closed_twice_and_used);
    RUN(rpcool_server_closed_twice_and_used);
    RUN(rpcool_forked_child_gets_an_error);
    RUN(rpcool_export_closed_twice_and_used);
    RUN(alock_table_closed_twice_and_used);
    RUN(alock_forked_child_gets_an_error);
    RUN(many_handles);
    return T_DONE();
}
