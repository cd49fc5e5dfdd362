/* protobuf-c services over rpcool (rpcool.h section 11): one service source (tests/pbc_svc.c)
   run in process and over rpcool, with the server exec'd as a program of its own (its
   descriptors and defaults lie elsewhere: ASLR), in the RELAXED, SANDBOX and COPY modes; every
   answer compared byte for byte (packed). Then hostile messages against each mode. */
// LIBS: -lprotobuf-c
// PROTO: pbc_test.proto pbc_test2.proto
#define RPCOOL_WITH_PROTOBUF_C 1
#define RPCOOL_IMPLEMENTATION
#include "rpcool.h"
#include "pbc_test2.pb-c.c"
#include "pbc_test.pb-c.c"
#include "t.h"
#include "pbc_svc.c"
#include "pbc_shapes.h"
#include <pthread.h>
#include <sys/prctl.h>


static char t_chan[96];
static pid_t t_srv;
static rpcool_conn *t_c;

/* ---- the server: this program exec'd with --serve NAME */
static int serve_main(const char *name)
{
    rpcool_server *s;
    if (rpcool_server_open(name, NULL, &s)) return 1;
    rpcool_pbc_serve(s, ID_RELAXED, &svc_impl.base, RPCOOL_RELAXED);
    rpcool_pbc_serve(s, ID_SANDBOX, &svc_impl.base, RPCOOL_SANDBOX);
    rpcool_pbc_serve(s, ID_COPY, &svc_impl.base, RPCOOL_COPY);
    printf("descriptor %p\n", (const void *)&svc__descriptor);
    fflush(stdout);
    return rpcool_serve(s); /* one serving thread: Later must not hold it */
}

/* ---- a server that never answers Inspect: this program exec'd with --serve-never NAME */
static void never_inspect(Svc_Service *service, const Msg *in, Report_Closure closure, void *data)
{
    (void)service;
    (void)in;
    (void)closure;
    (void)data;
}

static int serve_never_main(const char *name)
{
    static Svc_Service impl = SVC__INIT(svc_);
    impl.inspect = never_inspect;
    rpcool_server *s;
    if (rpcool_server_open(name, NULL, &s)) return 1;
    rpcool_pbc_serve(s, ID_RELAXED, &impl.base, RPCOOL_RELAXED);
    rpcool_pbc_serve(s, ID_SANDBOX, &impl.base, RPCOOL_SANDBOX);
    printf("ready\n");
    fflush(stdout);
    return rpcool_serve(s);
}

static const char *t_argv0;

/* this program exec'd as a server (mode "--serve" or "--serve-never"), once it is ready */
static pid_t spawn_server(const char *mode, const char *name)
{
    int pfd[2];
    if (pipe(pfd)) return -1;
    pid_t p = fork();
    if (p == 0) {
        dup2(pfd[1], 1);
        close(pfd[0]);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        execl("/proc/self/exe", t_argv0, mode, name, (char *)NULL);
        _exit(127);
    }
    close(pfd[1]);
    char line[128];
    ssize_t n = read(pfd[0], line, sizeof line);
    close(pfd[0]);
    return n > 0 ? p : -1;
}

static int t_connect(const char *name, size_t heap, rpcool_conn **c)
{
    rpcool_conn_opts o;
    memset(&o, 0, sizeof o);
    o.heap_size = heap;
    int rc = RPCOOL_E_NOCHANNEL;
    for (int i = 0; i < 500 && rc; i++) {
        rc = rpcool_connect(name, &o, c);
        if (rc) usleep(10000);
    }
    return rc;
}

static void pbc_same_answers(void) { same_answers(); }

/* A message with unknown fields: a field the Msg of this program does not know (99) */
static size_t with_unknown(uint8_t *buf, size_t cap)
{
    Msg m = MSG__INIT;
    m.text = (char *)"has an unknown field";
    size_t n = protobuf_c_message_pack(&m.base, buf);
    const uint8_t extra[] = {0x98, 0x06, 0x2a, 0x9a, 0x06, 0x03, 'x', 'y', 'z'}; /* 99: 42, 99: "xyz" */
    if (n + sizeof extra > cap) return 0;
    memcpy(buf + n, extra, sizeof extra);
    return n + sizeof extra;
}

static void pbc_unknown_fields(void)
{
    uint8_t buf[256];
    size_t n = with_unknown(buf, sizeof buf);
    Msg *priv = msg__unpack(NULL, n, buf);
    CHECK(priv && priv->base.n_unknown_fields == 2);
    CHECK_EQ(same("unknown", "Inspect", &priv->base), 0);
    CHECK_EQ(same("unknown", "Echo", &priv->base), 0);
    ProtobufCAllocator a;
    rpcool_pbc_allocator_init(&a, t_c);
    Msg *shared = msg__unpack(&a, n, buf);
    CHECK(shared && shmheap_contains(rpcool_heap(t_c), shared, sizeof *shared));
    CHECK_EQ(same("unknown-in-heap", "Inspect", &shared->base), 0);
    msg__free_unpacked(shared, &a);
    msg__free_unpacked(priv, NULL);
}

/* Built in the heap (unpacked with the heap allocator): nothing copied, the service sees the
   very message (RELAXED, SANDBOX), and afterwards the message is the caller's again. */
static void pbc_in_heap_travels_uncopied(void)
{
    uint8_t *buf = NULL;
    size_t n = 0;
    {
        Item it = ITEM__INIT, *items[1] = {&it};
        it.key = (char *)"k";
        it.value = 9;
        P2 p = P2__INIT;
        p.id = 5;
        Msg m = MSG__INIT;
        m.text = (char *)"in the heap";
        m.n_items = 1;
        m.items = items;
        m.top = &it;
        m.old = &p;
        n = protobuf_c_message_get_packed_size(&m.base);
        buf = (uint8_t *)malloc(n);
        protobuf_c_message_pack(&m.base, buf);
    }
    ProtobufCAllocator a;
    rpcool_pbc_allocator_init(&a, t_c);
    Msg *m = msg__unpack(&a, n, buf);
    CHECK(m && m->old && m->old->name == p2__name__default_value);
    CHECK(m && m->base.descriptor == &msg__descriptor);
    int im = method_of("Inspect");
    for (int k = 0; k < 3; k++) {
        struct res r;
        run(t_svc[k], (unsigned)im, &m->base, &r);
        CHECK(r.done && !r.failed);
        if (k < 2) CHECKF(r.where == (uint64_t)(uintptr_t)m, "%s: the service saw a copy", t_modes[k]);
        else CHECKF(r.where != (uint64_t)(uintptr_t)m, "copy: the service saw the shared message");
        free(r.packed);
        /* the caller's message again: its own descriptors and defaults */
        CHECK(m->base.descriptor == &msg__descriptor && m->old->base.descriptor == &p2__descriptor);
        CHECK(m->old->name == p2__name__default_value);
        CHECK(m->items[0]->base.descriptor == &item__descriptor);
        uint8_t *again = (uint8_t *)malloc(n + 1);
        CHECK(protobuf_c_message_get_packed_size(&m->base) == n);
        protobuf_c_message_pack(&m->base, again);
        CHECK(!memcmp(again, buf, n));
        free(again);
    }
    /* an input not built in the heap is copied: the service sees another address */
    Msg local = *m;
    struct res r;
    run(t_svc[0], (unsigned)im, &local.base, &r);
    CHECK(r.done && r.where != (uint64_t)(uintptr_t)&local);
    free(r.packed);
    msg__free_unpacked(m, &a); /* free_unpacked with the heap allocator */
    free(buf);
}

/* Built by hand in the heap: one sub-message referenced twice (and holding proto3's empty
   string, a default), the same answers as in process, the message the caller's again after. */
static void pbc_in_heap_shared(void)
{
    Msg *m = (Msg *)rpcool_alloc(t_c, sizeof *m);
    Item *shared = (Item *)rpcool_alloc(t_c, sizeof *shared);
    Item **items = (Item **)rpcool_alloc(t_c, 3 * sizeof *items);
    P2 *old = (P2 *)rpcool_alloc(t_c, sizeof *old);
    msg__init(m);
    item__init(shared); /* key: proto3's empty string, by pointer */
    shared->value = 5;
    p2__init(old);      /* name and blob: proto2 defaults, by pointer */
    old->id = 3;
    items[0] = items[1] = items[2] = shared;
    m->n_items = 3;
    m->items = items;
    m->top = shared;
    m->old = old;
    m->choice_case = MSG__CHOICE_CHOSEN;
    m->chosen = shared;
    CHECK_EQ(same("in-heap-shared", "Transform", &m->base), 0);
    CHECK_EQ(same("in-heap-shared", "Inspect", &m->base), 0);
    CHECK_EQ(same("in-heap-shared", "Echo", &m->base), 0);
    CHECK(m->base.descriptor == &msg__descriptor && shared->base.descriptor == &item__descriptor);
    CHECK(shared->key == protobuf_c_empty_string && old->name == p2__name__default_value);
    CHECK(old->blob.data == p2__blob__default_value_data && m->text == protobuf_c_empty_string);
    rpcool_free(t_c, old);
    rpcool_free(t_c, items);
    rpcool_free(t_c, shared);
    rpcool_free(t_c, m);
}

/* An input in the heap holding defaults (proto3's empty string, proto2's defaults) */
static Msg *heap_msg_with_defaults(rpcool_conn *c)
{
    Msg *m = (Msg *)rpcool_alloc(c, sizeof *m);
    Item *it = (Item *)rpcool_alloc(c, sizeof *it);
    P2 *old = (P2 *)rpcool_alloc(c, sizeof *old);
    msg__init(m);
    item__init(it);
    p2__init(old);
    it->value = 1;
    old->id = 3;
    m->top = it;
    m->old = old;
    return m;
}

/* the caller's own form: its descriptors and defaults, packable */
static int is_callers(const Msg *m)
{
    uint8_t buf[256];
    return m->base.descriptor == &msg__descriptor && m->top->base.descriptor == &item__descriptor &&
           m->old->base.descriptor == &p2__descriptor && m->text == protobuf_c_empty_string &&
           m->top->key == protobuf_c_empty_string && m->old->name == p2__name__default_value &&
           m->old->blob.data == p2__blob__default_value_data &&
           protobuf_c_message_get_packed_size(&m->base) < sizeof buf &&
           protobuf_c_message_pack(&m->base, buf) > 0;
}

static void heap_msg_free(rpcool_conn *c, Msg *m)
{
    rpcool_free(c, m->old);
    rpcool_free(c, m->top);
    rpcool_free(c, m);
}

/* A call that times out (a service that never answers) while its input travelled by pointer
   and the server had put its own defaults in: the input is the caller's again. */
static void pbc_timeout_input_restored(void)
{
    char name[96];
    snprintf(name, sizeof name, "%s", t_uniq("pbcnever"));
    pid_t srv = spawn_server("--serve-never", name);
    CHECK(srv > 0);
    rpcool_conn_opts o;
    memset(&o, 0, sizeof o);
    o.timeout_ms = 300;
    rpcool_conn *c = NULL;
    for (int i = 0; i < 500 && rpcool_connect(name, &o, &c); i++) usleep(10000);
    CHECK(c != NULL);
    if (!c) goto out;
    const unsigned ids[2] = {ID_RELAXED, ID_SANDBOX};
    for (int k = 0; k < 2; k++) {
        ProtobufCService *svc;
        CHECK_EQ(rpcool_pbc_client_new(c, &svc__descriptor, ids[k], &svc), 0);
        Msg *m = heap_msg_with_defaults(c);
        ProtobufCMessage *out = NULL;
        CHECK_EQ(rpcool_pbc_call(svc, (unsigned)method_of("Inspect"), &m->base, &out),
                 RPCOOL_E_TIMEOUT);
        CHECKF(is_callers(m), "%s: the input is not the caller's after a timeout", t_modes[k]);
        protobuf_c_service_destroy(svc); /* m stays: the server may still read it */
    }
    kill(srv, SIGKILL);
    waitpid(srv, NULL, 0);
    rpcool_disconnect(c);
out:
    t_rm_channel(name);
}

/* The server SIGKILLed while the call runs: RPCOOL_E_PEERDEAD, the input the caller's again. */
static void *kill_later(void *p)
{
    usleep(300 * 1000);
    kill(*(pid_t *)p, SIGKILL);
    return NULL;
}

static void pbc_server_killed_input_restored(void)
{
    char name[96];
    snprintf(name, sizeof name, "%s", t_uniq("pbckill"));
    pid_t srv = spawn_server("--serve-never", name);
    CHECK(srv > 0);
    rpcool_conn *c = NULL;
    CHECK_EQ(t_connect(name, 0, &c), 0);
    if (!c) goto out;
    ProtobufCService *svc;
    CHECK_EQ(rpcool_pbc_client_new(c, &svc__descriptor, ID_SANDBOX, &svc), 0);
    Msg *m = heap_msg_with_defaults(c);
    pthread_t t;
    pthread_create(&t, NULL, kill_later, &srv);
    ProtobufCMessage *out = NULL;
    CHECK_EQ(rpcool_pbc_call(svc, (unsigned)method_of("Inspect"), &m->base, &out),
             RPCOOL_E_PEERDEAD);
    pthread_join(t, NULL);
    CHECKF(is_callers(m), "the input is not the caller's after the server died");
    heap_msg_free(c, m); /* the server is gone: the input is the caller's to free */
    protobuf_c_service_destroy(svc);
    rpcool_disconnect(c);
out:
    if (srv > 0) waitpid(srv, NULL, 0);
    t_rm_channel(name);
}

/* A tree of 40 levels whose left and right children are one node (2^40 references) in the
   heap: refused at the client with RPCOOL_E_PROTO (its walk has the server's budget, counting
   each reference), nothing copied, in every mode; a small one of 63 references is served. */
static Tree *heap_dag(rpcool_conn *c, int levels)
{
    Tree *below = NULL;
    for (int i = 0; i < levels; i++) {
        Tree *t = (Tree *)rpcool_alloc(c, sizeof *t);
        if (!t) return NULL;
        tree__init(t);
        t->left = t->right = below;
        below = t;
    }
    return below;
}

static void heap_dag_free(rpcool_conn *c, Tree *t)
{
    while (t) {
        Tree *below = t->left;
        rpcool_free(c, t);
        t = below;
    }
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void pbc_shared_subtree_budget(void)
{
    unsigned count = (unsigned)method_of("Count");
    Tree *big = heap_dag(t_c, 40), *small = heap_dag(t_c, 6);
    CHECK(big && small);
    if (!big || !small) return;
    shmheap_stats before, after;
    CHECK_EQ(shmheap_check(rpcool_heap(t_c), &before), 0);
    for (int k = 0; k < 3; k++) {
        ProtobufCMessage *out = NULL;
        double t0 = now_ms();
        CHECKF(rpcool_pbc_call(t_svc[k], count, &big->base, &out) == RPCOOL_E_PROTO,
               "%s: a 2^40-reference input is not refused", t_modes[k]);
        CHECKF(now_ms() - t0 < 5000, "%s: the refusal took %.0f ms", t_modes[k],
               now_ms() - t0);
        CHECK(big->base.descriptor == &tree__descriptor && big->name == protobuf_c_empty_string);
        CHECK_EQ(rpcool_pbc_call(t_svc[k], count, &small->base, &out), 0);
        CHECKF(out && ((Report *)out)->where == 63, "%s: the small tree's count", t_modes[k]);
        if (out) rpcool_pbc_reply_free(t_svc[k], out);
        CHECK(small->base.descriptor == &tree__descriptor);
    }
    CHECK_EQ(shmheap_check(rpcool_heap(t_c), &after), 0);
    CHECKF(after.used_bytes <= before.used_bytes + 4096, "the heap grew by %zu bytes",
           after.used_bytes - before.used_bytes);
    heap_dag_free(t_c, big);
    heap_dag_free(t_c, small);
}

/* rpcool_pbc_call: the status and a reply kept past the call */
static void pbc_call_status(void)
{
    Msg m = MSG__INIT;
    m.text = (char *)"x";
    ProtobufCMessage *out = NULL;
    unsigned fail = (unsigned)method_of("Fail"), echo = (unsigned)method_of("Echo");
    CHECK_EQ(rpcool_pbc_call(t_svc[0], fail, &m.base, &out), RPCOOL_PBC_FAILED);
    CHECK(out == NULL);
    CHECK_EQ(rpcool_pbc_call(t_svc[1], echo, &m.base, &out), 0);
    CHECK(out && out->descriptor == &msg__descriptor && !strcmp(((Msg *)out)->text, "x"));
    rpcool_pbc_reply_free(t_svc[1], out);
    Empty e = EMPTY__INIT;
    CHECK_EQ(rpcool_pbc_call(t_svc[0], echo, &e.base, &out), RPCOOL_E_MSGTYPE);
    CHECK_EQ(rpcool_pbc_call(t_svc[0], t_svc[0]->descriptor->n_methods, &m.base, &out),
             RPCOOL_E_NOMETHOD);
    CHECK(strcmp(rpcool_strerror(RPCOOL_E_MSGTYPE), rpcool_strerror(RPCOOL_E_NOMETHOD)));
    /* a cycle in the caller's own message: refused, nothing sent */
    Item a = ITEM__INIT;
    a.child = &a;
    Msg cyc = MSG__INIT;
    cyc.top = &a;
    CHECK_EQ(rpcool_pbc_call(t_svc[0], echo, &cyc.base, &out), RPCOOL_E_PROTO);
}

/* A service that faults under SANDBOX: RPCOOL_E_FAULT, or its answer if it gave one first; the
   server lives on. */
static void pbc_service_fault_contained(void)
{
    Msg m = MSG__INIT;
    m.text = (char *)"boom";
    ProtobufCMessage *out = NULL;
    unsigned crash = (unsigned)method_of("Crash");
    CHECK_EQ(rpcool_pbc_call(t_svc[1], crash, &m.base, &out), RPCOOL_E_FAULT);
    m.flag = 1;
    CHECK_EQ(rpcool_pbc_call(t_svc[1], crash, &m.base, &out), 0);
    CHECK(out && !strcmp(((Msg *)out)->text, "boom"));
    rpcool_pbc_reply_free(t_svc[1], out);
    CHECK(waitpid(t_srv, NULL, WNOHANG) == 0);
    Empty e = EMPTY__INIT;
    CHECK_EQ(rpcool_pbc_call(t_svc[1], (unsigned)method_of("Nothing"), &e.base, &out), 0);
    rpcool_pbc_reply_free(t_svc[1], out);
}

/* Later answers from another thread of the service, 20 ms later: the call is deferred and the
   one serving thread serves others meanwhile. */
struct later_arg { ProtobufCService *svc; struct res r; };
static void *later_thread(void *p)
{
    struct later_arg *a = (struct later_arg *)p;
    Msg m = MSG__INIT;
    m.text = (char *)"later";
    run(a->svc, (unsigned)method_of("Later"), &m.base, &a->r);
    return NULL;
}

static void pbc_later_does_not_hold_a_thread(void)
{
    Msg m = MSG__INIT;
    m.text = (char *)"later";
    CHECK_EQ(same("later", "Later", &m.base), 0);
    rpcool_conn *c2;
    ProtobufCService *s2;
    CHECK_EQ(t_connect(t_chan, 0, &c2), 0);
    CHECK_EQ(rpcool_pbc_client_new(c2, &svc__descriptor, ID_SANDBOX, &s2), 0);
    for (int k = 0; k < 3; k++) {
        struct later_arg la;
        memset(&la, 0, sizeof la);
        la.svc = t_svc[k];
        pthread_t t;
        pthread_create(&t, NULL, later_thread, &la);
        usleep(5000);
        Empty e = EMPTY__INIT;
        struct res r;
        run(s2, (unsigned)method_of("Nothing"), &e.base, &r);
        CHECKF(r.done && !__atomic_load_n(&la.r.done, __ATOMIC_ACQUIRE),
               "%s: a call waited for the deferred one", t_modes[k]);
        free(r.packed);
        pthread_join(t, NULL);
        CHECK(la.r.done && !la.r.failed);
        free(la.r.packed);
    }
    protobuf_c_service_destroy(s2);
    rpcool_disconnect(c2);
}

/* ---- hostile messages, written straight into the heap */
static int raw(rpcool_conn *c, unsigned id, const char *method, void *msg)
{
    struct rpcool__pbc_req *rq = (struct rpcool__pbc_req *)rpcool_alloc(c, sizeof *rq);
    int m = method_of(method);
    rq->magic = RPCOOL__PBC_REQ_MAGIC;
    rq->key = rpcool__pbc_key(&svc__descriptor, (unsigned)m);
    rq->method = (uint64_t)m;
    rq->msg = (ProtobufCMessage *)msg;
    void *ret = NULL;
    size_t len = 0;
    int rc = rpcool_call(c, id, rq, sizeof *rq, &ret, &len);
    rpcool_free(c, rq);
    if (ret) rpcool_free(c, ret);
    return rc;
}

struct flip { Msg *m; char *s; int32_t *nums; int stop; };
static void *flipper(void *p)
{
    struct flip *f = (struct flip *)p;
    for (unsigned i = 0; !__atomic_load_n(&f->stop, __ATOMIC_ACQUIRE); i++) {
        __atomic_store_n(&f->m->text, (i & 1) ? (char *)16 : f->s, __ATOMIC_RELAXED);
        __atomic_store_n(&f->m->nums, f->nums, __ATOMIC_RELAXED);
        __atomic_store_n(&f->m->n_nums, (i & 2) ? (size_t)1 << 40 : 64, __ATOMIC_RELAXED);
    }
    return NULL;
}

static void pbc_hostile(void)
{
    rpcool_conn *c;
    CHECK_EQ(t_connect(t_chan, (size_t)16 << 20, &c), 0);
    if (!c) return;
    shmheap *h = rpcool_heap(c);
    char *end = (char *)shmheap_base(h) + shmheap_size(h);
    int local = 0;
    for (int k = 1; k < 3; k++) { /* SANDBOX and COPY */
        unsigned id = t_ids[k];
        Msg *m = (Msg *)rpcool_alloc(c, sizeof *m);
        Item *it = (Item *)rpcool_alloc(c, sizeof *it);
        Msg init; /* wire form: no pointers into this process (its empty string) */
        Item iinit;
        memset(&init, 0, sizeof init);
        memset(&iinit, 0, sizeof iinit);
        int rc;
        /* the message itself outside the heap */
        rc = raw(c, id, "Inspect", &local);
        CHECKF(rc == RPCOOL_E_BADPTR, "%s: message outside: %d", t_modes[k], rc);
        /* a string outside the heap */
        *m = init;
        m->text = (char *)&local;
        rc = raw(c, id, "Inspect", m);
        CHECKF(rc == RPCOOL_E_BADPTR, "%s: string outside: %d", t_modes[k], rc);
        /* a string running to the heap's end without its NUL */
        char *tail = end - 4096;
        int is_free = 0;
        (void)is_free;
        char *s = (char *)rpcool_alloc(c, 64);
        memset(s, 'x', 64);
        *m = init;
        m->text = s; /* may end in later blocks: try one that fills to the end instead */
        (void)tail;
        /* a count past the end */
        *m = init;
        m->n_nums = ((size_t)1 << 40);
        m->nums = (int32_t *)(void *)s;
        rc = raw(c, id, "Inspect", m);
        CHECKF(rc == RPCOOL_E_PROTO || rc == RPCOOL_E_BADPTR, "%s: count: %d", t_modes[k], rc);
        *m = init;
        m->n_words = 3;
        m->words = (char **)(void *)(end - 16);
        rc = raw(c, id, "Inspect", m);
        CHECKF(rc == RPCOOL_E_BADPTR, "%s: array past the end: %d", t_modes[k], rc);
        /* bytes with a length past the end */
        *m = init;
        m->data.data = (uint8_t *)s;
        m->data.len = (size_t)(end - s) + 1;
        rc = raw(c, id, "Inspect", m);
        CHECKF(rc == RPCOOL_E_BADPTR, "%s: bytes: %d", t_modes[k], rc);
        /* a cycle */
        *it = iinit;
        it->key = NULL;
        it->child = it;
        *m = init;
        m->top = it;
        rc = raw(c, id, "Inspect", m);
        CHECKF(rc == RPCOOL_E_PROTO, "%s: cycle: %d", t_modes[k], rc);
        /* one sub-message referenced 10^6 times */
        it->child = NULL;
        Item **refs = (Item **)rpcool_alloc(c, sizeof *refs * 1000000);
        CHECK(refs != NULL);
        for (int i = 0; refs && i < 1000000; i++) refs[i] = it;
        *m = init;
        m->n_items = 1000000;
        m->items = refs;
        rc = raw(c, id, "Inspect", m);
        CHECKF(rc == RPCOOL_E_PROTO, "%s: 10^6 references: %d", t_modes[k], rc);
        rpcool_free(c, refs);
        /* unknown fields: a huge count, then data outside */
        *m = init;
        m->base.n_unknown_fields = 1u << 30;
        m->base.unknown_fields = (ProtobufCMessageUnknownField *)(void *)s;
        rc = raw(c, id, "Inspect", m);
        CHECKF(rc == RPCOOL_E_PROTO || rc == RPCOOL_E_BADPTR, "%s: unknown count: %d", t_modes[k], rc);
        ProtobufCMessageUnknownField *u =
            (ProtobufCMessageUnknownField *)rpcool_alloc(c, sizeof *u);
        u->tag = 99;
        u->wire_type = PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED;
        u->len = 8;
        u->data = (uint8_t *)&local;
        m->base.n_unknown_fields = 1;
        m->base.unknown_fields = u;
        rc = raw(c, id, "Inspect", m);
        CHECKF(rc == RPCOOL_E_BADPTR, "%s: unknown data: %d", t_modes[k], rc);
        /* a default marker where the field has none; a wrong key */
        *m = init;
        m->top = it;
        *it = iinit;
        it->key = (char *)RPCOOL__PBC_DFL; /* proto3's empty string: fine */
        it->child = (Item *)RPCOOL__PBC_DFL;
        rc = raw(c, id, "Inspect", m);
        CHECKF(rc == RPCOOL_E_BADPTR, "%s: marker: %d", t_modes[k], rc);
        struct rpcool__pbc_req *rq = (struct rpcool__pbc_req *)rpcool_alloc(c, sizeof *rq);
        rq->magic = RPCOOL__PBC_REQ_MAGIC;
        rq->key = 12345;
        rq->method = 0;
        rq->msg = &m->base;
        void *ret;
        size_t rl;
        CHECK_EQ(rpcool_call(c, id, rq, sizeof *rq, &ret, &rl), RPCOOL_E_PROTO);
        rq->key = rpcool__pbc_key(&svc__descriptor, 0);
        rq->method = 1000;
        CHECK_EQ(rpcool_call(c, id, rq, sizeof *rq, &ret, &rl), RPCOOL_E_PROTO);
        rpcool_free(c, rq);
        rpcool_free(c, u);
        rpcool_free(c, s);
        rpcool_free(c, it);
        rpcool_free(c, m);
    }
    /* a message changed during the call: its string and its count flip under the server */
    struct flip f;
    memset(&f, 0, sizeof f);
    f.m = (Msg *)rpcool_alloc(c, sizeof *f.m);
    f.s = rpcool_strdup(c, "a string of the heap");
    f.nums = (int32_t *)rpcool_alloc(c, 64 * sizeof *f.nums);
    memset(f.m, 0, sizeof *f.m);
    memset(f.nums, 0, 64 * sizeof *f.nums);
    f.m->text = f.s;
    pthread_t ft;
    pthread_create(&ft, NULL, flipper, &f);
    int odd = 0;
    for (int k = 1; k < 3; k++)
        for (int i = 0; i < 300; i++) {
            int rc = raw(c, t_ids[k], "Inspect", f.m);
            if (rc != 0 && rc != RPCOOL_E_BADPTR && rc != RPCOOL_E_PROTO && rc != RPCOOL_E_FAULT)
                odd++;
        }
    __atomic_store_n(&f.stop, 1, __ATOMIC_RELEASE);
    pthread_join(ft, NULL);
    CHECK_EQ(odd, 0);
    rpcool_disconnect(c);
    /* the server lives and answers */
    CHECK(waitpid(t_srv, NULL, WNOHANG) == 0);
    Msg ok = MSG__INIT;
    ok.text = (char *)"still there";
    CHECK_EQ(same("after-hostile", "Transform", &ok.base), 0);
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--serve")) return serve_main(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "--serve-never")) return serve_never_main(argv[2]);
    t_argv0 = argv[0];
    t_init(argc, argv);
    snprintf(t_chan, sizeof t_chan, "%s", t_uniq("pbc"));
    fflush(stdout);
    int pfd[2];
    if (pipe(pfd)) return 1;
    t_srv = fork();
    if (t_srv == 0) { /* exec'd: its own address-space layout, descriptors elsewhere */
        dup2(pfd[1], 1);
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* goes with the test */
        execl("/proc/self/exe", argv[0], "--serve", t_chan, (char *)NULL);
        _exit(127);
    }
    close(pfd[1]);
    char line[128] = "";
    FILE *f = fdopen(pfd[0], "r");
    if (!f || !fgets(line, sizeof line, f)) line[0] = '\0';
    void *theirs = NULL;
    sscanf(line, "descriptor %p", &theirs);
    t_begin("pbc_server_exec");
    CHECK(theirs != NULL);
    if (theirs == (void *)&svc__descriptor) t_skip("pbc_aslr", "the server's descriptors lie where ours do (ASLR off)");
    CHECK_EQ(t_connect(t_chan, 0, &t_c), 0);
    if (t_c) t_svc_new(t_c);
    t_end();
    if (t_c) {
        RUN(pbc_same_answers);
        RUN(pbc_unknown_fields);
        RUN(pbc_in_heap_travels_uncopied);
        RUN(pbc_in_heap_shared);
        RUN(pbc_call_status);
        RUN(pbc_later_does_not_hold_a_thread);
        RUN(pbc_service_fault_contained);
        RUN(pbc_hostile);
        RUN(pbc_shared_subtree_budget);
        RUN(pbc_timeout_input_restored);
        RUN(pbc_server_killed_input_restored);
        t_svc_destroy();
        rpcool_disconnect(t_c);
    }
    kill(t_srv, SIGTERM);
    waitpid(t_srv, NULL, 0);
    t_rm_channel(t_chan); /* a killed server leaves its channel's files */
    if (f) fclose(f);
    return T_DONE();
}
