/* tests/pbc_shapes.h - what the protobuf-c tests share (test_pbc.c, vm/test_pbc_rdma.c):
   running a method of a ProtobufCService and keeping its answer packed, and messages of every
   shape. Include after pbc_test.pb-c.c and t.h. */
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

#endif /* PBC_SHAPES_H */
