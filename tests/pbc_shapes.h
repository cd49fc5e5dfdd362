/* tests/pbc_shapes.h - what the protobuf-c tests share (test_pbc.c, vm/test_pbc_rdma.c):
   running a method of a ProtobufCService and keeping its answer packed, messages of every
   shape, and the check that every shape gets the same answer in process and from t_svc[] (the
   service in each mode over rpcool). Include after pbc_test.pb-c.c, t.h and pbc_svc.c. */
#ifndef PBC_SHAPES_H
#define PBC_SHAPES_H
#include <unistd.h>

/* ---- running a method and keeping its answer, packed */
struct res {
    int done, failed;
    uint8_t *packed;
    size_t len;
    uint64_t where;
};

static void res_cb(const ProtobufCMessage *m, void *data)
{
    struct res *r = (struct res *)data;
    if (!m) r->failed = 1;
    else if (m->descriptor == &report__descriptor) {
        Report tmp = *(const Report *)m;
        r->where = tmp.where;
        tmp.where = 0; /* an address: compared apart */
        r->len = protobuf_c_message_get_packed_size(&tmp.base);
        r->packed = (uint8_t *)malloc(r->len + 1);
        protobuf_c_message_pack(&tmp.base, r->packed);
    } else {
        r->len = protobuf_c_message_get_packed_size(m);
        r->packed = (uint8_t *)malloc(r->len + 1);
        protobuf_c_message_pack(m, r->packed);
    }
    __atomic_store_n(&r->done, 1, __ATOMIC_RELEASE);
}

static void run(ProtobufCService *svc, unsigned method, const ProtobufCMessage *in, struct res *r)
{
    memset(r, 0, sizeof *r);
    svc->invoke(svc, method, in, res_cb, r);
    for (int i = 0; i < 5000 && !__atomic_load_n(&r->done, __ATOMIC_ACQUIRE); i++) usleep(1000);
}

static int method_of(const char *name)
{
    const ProtobufCMethodDescriptor *m =
        protobuf_c_service_descriptor_get_method_by_name(&svc__descriptor, name);
    return m ? (int)(m - svc__descriptor.methods) : -1;
}

/* ---- messages of every shape, on the stack and in literals */
static void shapes(void (*each)(const char *what, const ProtobufCMessage *in))
{
    Item leaf = ITEM__INIT, mid = ITEM__INIT, it[3] = {ITEM__INIT, ITEM__INIT, ITEM__INIT};
    leaf.key = (char *)"leaf";
    leaf.value = 3;
    mid.key = (char *)"mid";
    mid.value = 2;
    mid.child = &leaf;
    Item *items[4];
    for (int i = 0; i < 3; i++) {
        it[i].key = (char *)(i == 0 ? "a" : i == 1 ? "bb" : "");
        it[i].value = -i;
        it[i].child = i == 1 ? &mid : NULL;
        items[i] = &it[i];
    }
    items[3] = &it[1]; /* shared: the same sub-message twice */
    int32_t nums[] = {1, -2, 3, 1000000007, -1000000007};
    double reals[] = {0.5, -1e300, 3.25};
    char *words[] = {(char *)"alpha", (char *)"", (char *)"gamma delta"};
    uint8_t d[] = {0, 1, 2, 255, 254};
    ProtobufCBinaryData blobs[2] = {{3, d}, {0, NULL}};
    P2 old = P2__INIT;
    old.id = 42;

    Msg full = MSG__INIT;
    full.text = (char *)"hello";
    full.data.data = d;
    full.data.len = sizeof d;
    full.n_nums = 5;
    full.nums = nums;
    full.n_reals = 3;
    full.reals = reals;
    full.n_words = 3;
    full.words = words;
    full.n_items = 4;
    full.items = items;
    full.top = &mid;
    full.choice_case = MSG__CHOICE_LABEL;
    full.label = (char *)"a label";
    full.n_blobs = 2;
    full.blobs = blobs;
    full.flag = 1;
    full.old = &old;
    each("full", &full.base);

    Msg chosen = full;
    chosen.choice_case = MSG__CHOICE_CHOSEN;
    chosen.chosen = &mid;
    each("oneof-message", &chosen.base);
    Msg code = full;
    code.choice_case = MSG__CHOICE_CODE;
    code.code = 77;
    each("oneof-scalar", &code.base);

    Msg empty = MSG__INIT; /* proto3 defaults: the empty string, by pointer identity */
    each("empty", &empty.base);

    P2 p0 = P2__INIT; /* proto2 defaults, by pointer identity */
    p0.id = 1;
    each("p2-defaults", &p0.base);
    P2 p1 = p0;
    p1.name = (char *)"somebody";
    p1.has_blob = 1;
    p1.blob.data = d;
    p1.blob.len = 2;
    p1.has_count = 1;
    p1.count = 0;
    p1.plain = (char *)"";
    p1.pick_case = P2__PICK_WORD;
    p1.word = (char *)"w";
    each("p2-set", &p1.base);
    P2 p3 = p0;
    p3.has_blob = 1; /* set, to the default's bytes: still the default's pointer */
    p3.pick_case = P2__PICK_NUMBER;
    p3.number = -5;
    each("p2-has-default", &p3.base);
    Msg wrap = MSG__INIT;
    wrap.old = &p1;
    each("p2-inside-p3", &wrap.base);

    /* 1 MiB */
    size_t big = (size_t)1 << 20;
    uint8_t *bd = (uint8_t *)malloc(big);
    for (size_t i = 0; i < big; i++) bd[i] = (uint8_t)(i * 7);
    Msg large = full;
    large.data.data = bd;
    large.data.len = big;
    each("1MiB", &large.base);
    free(bd);
}

/* ---- the same answers in process and over rpcool: the services the test made, one a mode */
enum { ID_RELAXED = 1, ID_SANDBOX = 2, ID_COPY = 3 };
static const unsigned t_ids[3] = {ID_RELAXED, ID_SANDBOX, ID_COPY};
static const char *const t_modes[3] = {"relaxed", "sandbox", "copy"};
static ProtobufCService *t_svc[3];

/* t_svc: a client service on connection c for each mode's handler id (t_ids), each checked. */
static void t_svc_new(rpcool_conn *c)
{
    for (int k = 0; k < 3; k++)
        CHECK_EQ(rpcool_pbc_client_new(c, &svc__descriptor, t_ids[k], &t_svc[k]), 0);
}

static void t_svc_destroy(void)
{
    for (int k = 0; k < 3; k++) protobuf_c_service_destroy(t_svc[k]);
}

/* The same answer in process and in every mode over rpcool; returns the number of mismatches. */
static int same(const char *what, const char *method, const ProtobufCMessage *in)
{
    int bad = 0, m = method_of(method);
    struct res ref, got;
    run(&svc_impl.base, (unsigned)m, in, &ref);
    CHECKF(ref.done, "%s: in process: no answer", what);
    for (int k = 0; k < 3; k++) {
        run(t_svc[k], (unsigned)m, in, &got);
        int ok = got.done && got.failed == ref.failed && got.len == ref.len &&
                 (!got.len || !memcmp(got.packed, ref.packed, got.len));
        CHECKF(ok, "%s %s: %s: done %d failed %d/%d len %zu/%zu", what, method, t_modes[k],
               got.done, got.failed, ref.failed, got.len, ref.len);
        bad += !ok;
        free(got.packed);
    }
    free(ref.packed);
    return bad;
}

static const char *t_methods[] = {"Transform", "Echo", "Inspect"};
static int t_bad;

static void each_msg(const char *what, const ProtobufCMessage *in)
{
    if (in->descriptor == &p2__descriptor) {
        t_bad += same(what, "Inspect2", in);
        return;
    }
    for (int i = 0; i < 3; i++) t_bad += same(what, t_methods[i], in);
}

static void same_answers(void)
{
    t_bad = 0;
    shapes(each_msg);
    Empty e = EMPTY__INIT;
    t_bad += same("empty", "Nothing", &e.base);
    Msg m = MSG__INIT;
    t_bad += same("fail", "Fail", &m.base);
    CHECK_EQ(t_bad, 0);
}

#endif /* PBC_SHAPES_H */
