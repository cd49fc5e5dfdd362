/* The protobuf-c tests' service (tests/pbc_test.proto): plain protobuf-c code that knows nothing
   of rpcool. tests/test_pbc.c compiles it once and runs it both in process and over rpcool.
   Replies are built on the stack, point at literals and into the input; Later answers from
   another thread. Include after pbc_test.pb-c.h. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void svc_transform(Svc_Service *service, const Msg *in, Msg_Closure closure, void *data)
{
    (void)service;
    Msg out = MSG__INIT;
    Item top = ITEM__INIT, items[3] = {ITEM__INIT, ITEM__INIT, ITEM__INIT}, *pitems[3];
    int32_t nums[64];
    char text[256];
    uint8_t buf[4096];
    size_t n = in->n_nums < 64 ? in->n_nums : 64;
    int64_t sum = 0;
    for (size_t i = 0; i < in->n_nums; i++) sum += in->nums[i];
    for (size_t i = 0; i < n; i++) nums[i] = in->nums[n - 1 - i] * 2;
    snprintf(text, sizeof text, "%s|%zu words|%zu items|sum %lld", in->text, in->n_words,
             in->n_items, (long long)sum);
    out.text = text;                        /* on the stack */
    out.n_nums = n;
    out.nums = nums;
    out.n_words = in->n_words;              /* pointing into the input */
    out.words = in->words;
    out.reals = in->reals;
    out.n_reals = in->n_reals;
    size_t dl = in->data.len < sizeof buf ? in->data.len : sizeof buf;
    for (size_t i = 0; i < dl; i++) buf[i] = (uint8_t)(in->data.data[dl - 1 - i] ^ 0x5a);
    out.data.data = buf;
    out.data.len = dl;
    top.key = (char *)"top";                /* a literal */
    top.value = in->top ? in->top->value + 1 : -1;
    top.child = in->top;                    /* the input's sub-message */
    out.top = &top;
    for (int i = 0; i < 3; i++) {
        items[i].key = i < (int)in->n_items ? in->items[i]->key : (char *)"none";
        items[i].value = i * 10;
        items[i].child = i == 2 ? &items[0] : NULL; /* shared with the list itself */
        pitems[i] = &items[i];
    }
    out.n_items = 3;
    out.items = pitems;
    switch (in->choice_case) {
    case MSG__CHOICE_LABEL: out.choice_case = MSG__CHOICE_CODE; out.code = (uint32_t)strlen(in->label); break;
    case MSG__CHOICE_CODE: out.choice_case = MSG__CHOICE_LABEL; out.label = (char *)"was a code"; break;
    case MSG__CHOICE_CHOSEN: out.choice_case = MSG__CHOICE_CHOSEN; out.chosen = in->chosen; break;
    default: break;
    }
    out.n_blobs = in->n_blobs;
    out.blobs = in->blobs;
    out.flag = !in->flag;
    out.old = in->old;
    closure(&out, data);
}

static void svc_echo(Svc_Service *service, const Msg *in, Msg_Closure closure, void *data)
{
    (void)service;
    closure(in, data);
}

static void svc_report(const ProtobufCMessage *in, Report_Closure closure, void *data)
{
    Report r = REPORT__INIT;
    size_t n = protobuf_c_message_get_packed_size(in);
    uint8_t *buf = (uint8_t *)malloc(n ? n : 1);
    protobuf_c_message_pack(in, buf);
    r.packed.data = buf;
    r.packed.len = n;
    r.where = (uint64_t)(uintptr_t)in;
    char text[128];
    snprintf(text, sizeof text, "%s, %zu bytes", in->descriptor->name, n);
    r.text = text;
    closure(&r, data);
    free(buf);
}

static void svc_inspect(Svc_Service *service, const Msg *in, Report_Closure closure, void *data)
{
    (void)service;
    svc_report(&in->base, closure, data);
}

/* proto2: whether each field is set is decided by pointer identity with its default */
static void svc_inspect2(Svc_Service *service, const P2 *in, Report_Closure closure, void *data)
{
    (void)service;
    Report r = REPORT__INIT;
    char *notes[6], b[6][96];
    snprintf(b[0], sizeof b[0], "name=%s (%s)", in->name ? in->name : "(null)",
             in->name == p2__name__default_value ? "default" : "set");
    snprintf(b[1], sizeof b[1], "blob=%zu (%s)", in->blob.len,
             in->blob.data == p2__blob__default_value_data ? "default" : "set");
    snprintf(b[2], sizeof b[2], "count=%d has=%d", in->count, in->has_count);
    snprintf(b[3], sizeof b[3], "plain=%s", in->plain ? in->plain : "(null)");
    snprintf(b[4], sizeof b[4], "pick=%d %s %lld", (int)in->pick_case,
             in->pick_case == P2__PICK_WORD ? in->word : "-",
             in->pick_case == P2__PICK_NUMBER ? (long long)in->number : 0ll);
    snprintf(b[5], sizeof b[5], "id=%d", in->id);
    for (int i = 0; i < 6; i++) notes[i] = b[i];
    r.notes = notes;
    r.n_notes = 6;
    size_t n = protobuf_c_message_get_packed_size(&in->base);
    uint8_t *buf = (uint8_t *)malloc(n ? n : 1);
    protobuf_c_message_pack(&in->base, buf);
    r.packed.data = buf;
    r.packed.len = n;
    r.text = (char *)"p2";
    closure(&r, data);
    free(buf);
}

static void svc_nothing(Svc_Service *service, const Empty *in, Empty_Closure closure, void *data)
{
    (void)service;
    (void)in;
    Empty e = EMPTY__INIT;
    closure(&e, data);
}

static void svc_fail(Svc_Service *service, const Msg *in, Msg_Closure closure, void *data)
{
    (void)service;
    (void)in;
    closure(NULL, data);
}

struct svc_later { const Msg *in; Report_Closure closure; void *data; };

static void *svc_later_thread(void *p)
{
    struct svc_later *l = (struct svc_later *)p;
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    svc_report(&l->in->base, l->closure, l->data); /* from another thread, later */
    free(l);
    return NULL;
}

static void svc_later(Svc_Service *service, const Msg *in, Report_Closure closure, void *data)
{
    (void)service;
    struct svc_later *l = (struct svc_later *)malloc(sizeof *l);
    l->in = in;
    l->closure = closure;
    l->data = data;
    pthread_t t;
    pthread_create(&t, NULL, svc_later_thread, l);
    pthread_detach(t);
}

/* a service bug: a fault, before or after answering (never called in process) */
static void svc_crash(Svc_Service *service, const Msg *in, Msg_Closure closure, void *data)
{
    (void)service;
    static volatile uintptr_t wild = 16; /* the compiler cannot see where it points */
    if (in->flag) closure(in, data);
    *(volatile int *)wild = 1;
    closure(NULL, data);
}

static uint64_t svc_nodes(const Tree *t)
{
    return t ? 1 + svc_nodes(t->left) + svc_nodes(t->right) : 0;
}

static void svc_count(Svc_Service *service, const Tree *in, Report_Closure closure, void *data)
{
    (void)service;
    Report r = REPORT__INIT;
    r.where = svc_nodes(in);
    closure(&r, data);
}

static Svc_Service svc_impl = SVC__INIT(svc_);
