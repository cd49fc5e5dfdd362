/* One error story across the five headers: every code of every header's X-macro list has a text
 * of its own from every X_strerror (a strerror explains the codes of the headers declared before
 * its implementation, so a code passed through keeps its text), -errno values get strerror's
 * text, and the failure paths a host can reach return codes that have their own text. */
// LIBS: -libverbs
#define _GNU_SOURCE 1
/* every declaration first, so that each implementation sees every header's codes */
#define RPCOOL_WITH_RDMA 1
#include "shmheap.h"
#include "rpcool.h"
#include "alock.h"
#include "krconn.h"
#include "nppin.h"
#define SHMHEAP_IMPLEMENTATION
#include "shmheap.h"
#define KRCONN_IMPLEMENTATION
#include "krconn.h"
#define RPCOOL_IMPLEMENTATION
#include "rpcool.h"
#define ALOCK_IMPLEMENTATION
#include "alock.h"
#define NPPIN_IMPLEMENTATION
#include "nppin.h"
#include "t.h"
#include <errno.h>
#include <limits.h>
#include <sys/mman.h>

struct t_code { int code; const char *name, *text; };
#define T_CODE(name, value, text) {name, #name, text},
static const struct t_code t_codes[] = {SHMHEAP_ERRORS(T_CODE) RPCOOL_ERRORS(T_CODE)
                                        ALOCK_ERRORS(T_CODE) KRCONN_ERRORS(T_CODE)
                                        NPPIN_ERRORS(T_CODE)};
#undef T_CODE
#define T_NCODES (sizeof t_codes / sizeof t_codes[0])

typedef const char *t_strerror_fn(int);
static t_strerror_fn *const t_fns[] = {shmheap_strerror, rpcool_strerror, alock_strerror,
                                       krconn_strerror, nppin_strerror};
static const char *const t_fn_names[] = {"shmheap_strerror", "rpcool_strerror", "alock_strerror",
                                         "krconn_strerror", "nppin_strerror"};
#define T_NFNS (sizeof t_fns / sizeof t_fns[0])

static const struct t_code *t_find(int code)
{
    for (unsigned i = 0; i < T_NCODES; i++)
        if (t_codes[i].code == code) return &t_codes[i];
    return NULL;
}

/* rc's text from every strerror: a code of a table gives that table's text, -errno gives
 * strerror's; never an "unknown" text. */
static void t_has_text(int rc, const char *what)
{
    const struct t_code *c = t_find(rc);
    char want[256];
    snprintf(want, sizeof want, "%s", c ? c->text : strerror(-rc));
    CHECKF(rc < 0 && (c || rc > -900), "%s: %d is neither a table's code nor -errno", what, rc);
    for (unsigned f = 0; f < T_NFNS; f++) {
        const char *s = t_fns[f](rc);
        CHECKF(s && !strcmp(s, want), "%s: %s(%d) = \"%s\", expected \"%s\"", what, t_fn_names[f],
               rc, s ? s : "(null)", want);
        CHECKF(s && !strstr(s, "nknown"), "%s: %s(%d) = \"%s\"", what, t_fn_names[f], rc, s);
    }
}
#define T_EXPECT(call, want)                                                                      \
    do {                                                                                          \
        int t_rc_ = (call);                                                                       \
        CHECKF(t_rc_ == (want), "%s = %d (%s), expected %s", #call, t_rc_,                         \
               rpcool_strerror(t_rc_), #want);                                                    \
        if (t_rc_) t_has_text(t_rc_, #call);                                                      \
    } while (0)

/* Each code of each list, from each strerror: the list's own text. */
static void every_code_from_every_strerror(void)
{
    for (unsigned i = 0; i < T_NCODES; i++)
        for (unsigned f = 0; f < T_NFNS; f++) {
            const char *s = t_fns[f](t_codes[i].code);
            CHECKF(s && !strcmp(s, t_codes[i].text), "%s(%s) = \"%s\"", t_fn_names[f],
                   t_codes[i].name, s ? s : "(null)");
        }
}

/* No two codes share a text, and no code's text is an errno's: a text names one condition. */
static void every_text_distinct(void)
{
    for (unsigned i = 0; i < T_NCODES; i++) {
        const char *s = t_codes[i].text;
        CHECKF(*s && !strstr(s, "nknown"), "%s: \"%s\"", t_codes[i].name, s);
        for (unsigned j = 0; j < i; j++)
            CHECKF(strcmp(s, t_codes[j].text), "%s and %s share \"%s\"", t_codes[i].name,
                   t_codes[j].name, s);
        for (int e = 1; e < 134; e++)
            CHECKF(strcmp(s, strerror(e)), "%s has the text of errno %d: \"%s\"", t_codes[i].name,
                   e, s);
    }
}

/* The blocks: each header's codes count up from its number, 100 at most. */
static void codes_in_their_blocks(void)
{
    static const char *const prefix[] = {"SHMHEAP_", "RPCOOL_", "ALOCK_", "KRCONN_", "NPPIN_"};
    for (unsigned i = 0; i < T_NCODES; i++) {
        int b = -(int)((99 - t_codes[i].code) / 1000); /* -1 for -1000 ... -901 */
        CHECKF(b <= -1 && b >= -5 && t_codes[i].code <= b * 1000 + 99,
               "%s = %d lies in no block", t_codes[i].name, t_codes[i].code);
        if (b <= -1 && b >= -5)
            CHECKF(!strncmp(t_codes[i].name, prefix[-b - 1], strlen(prefix[-b - 1])),
                   "%s = %d lies in the block of %s", t_codes[i].name, t_codes[i].code,
                   prefix[-b - 1]);
    }
}

/* -errno: strerror's text from every strerror; 0 success; outside every rule: unknown. */
static void errno_and_the_rest(void)
{
    char want[256];
    for (int e = 1; e < 134; e++) { /* an errno the system does not know: a static text */
        snprintf(want, sizeof want, "%s", strerror(e));
        if (!strncmp(want, "Unknown error", 13)) snprintf(want, sizeof want, "unknown error code");
        for (unsigned f = 0; f < T_NFNS; f++)
            CHECKF(!strcmp(t_fns[f](-e), want), "%s(-%d) = \"%s\", expected \"%s\"",
                   t_fn_names[f], e, t_fns[f](-e), want);
    }
    for (unsigned f = 0; f < T_NFNS; f++) {
        CHECKF(!strcmp(t_fns[f](0), "success"), "%s(0) = \"%s\"", t_fn_names[f], t_fns[f](0));
        CHECKF(!strcmp(t_fns[f](-9999), "unknown error code"), "%s(-9999)", t_fn_names[f]);
        CHECKF(!strcmp(t_fns[f](INT_MIN), "unknown error code"), "%s(INT_MIN)", t_fn_names[f]);
        CHECKF(!strcmp(t_fns[f](-950), "unknown error code"), "%s(-950): an unused code of "
               "a declared header's block", t_fn_names[f]);
        CHECKF(!strcmp(t_fns[f](-1001), "unknown error code"), "%s(-1001)", t_fn_names[f]);
        if (t_fns[f] != alock_strerror)
            CHECKF(!strcmp(t_fns[f](1), "unknown error code"), "%s(1)", t_fn_names[f]);
    }
    CHECK(strstr(alock_strerror(ALOCK_OWNERDEAD), "died") != NULL);
    /* a block whose header was not declared before an implementation: named, not -errno */
    CHECK(strstr(rcp__errtext(KRCONN_E_TIMEDOUT, 0), "krconn_strerror") != NULL);
    CHECK(strstr(rcp__errtext(SHMHEAP_E_FULL, 0), "shmheap_strerror") != NULL);
    CHECK(strstr(rcp__errtext(NPPIN_E_NOTSUP, 0), "nppin_strerror") != NULL);
    CHECK(strstr(rcp__errtext(-4950, 0), "nppin.h") != NULL);
    CHECK(!strcmp(rcp__errtext(-4950, 16u), "unknown error code")); /* nppin.h declared */
    const char *a = krconn_strerror(-1001), *b = krconn_strerror(-1002); /* static, both */
    CHECK(a == b && !strcmp(a, "unknown error code"));
}

/* shmheap: names, sizes, a full heap, frees and roots. */
static void shmheap_failures(void)
{
    shmheap *h = NULL, *h2 = NULL;
    shmheap_opts o = {.size = 2u << 20};
    const char *name = t_uniq("errs");
    T_EXPECT(shmheap_create("", &o, &h), SHMHEAP_E_BADNAME);
    char longname[300];
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    T_EXPECT(shmheap_create(longname, &o, &h), SHMHEAP_E_BADNAME);
    T_EXPECT(shmheap_create("a/b", &o, &h), SHMHEAP_E_NOTFOUND); /* a file in no folder */
    T_EXPECT(shmheap_open(t_uniq("absent"), NULL, &h), SHMHEAP_E_NOTFOUND);
    T_EXPECT(shmheap_create(name, NULL, NULL), SHMHEAP_E_INVAL);
    T_EXPECT(shmheap_create(name, &o, &h), 0);
    if (!h) return;
    T_EXPECT(shmheap_create(name, &o, &h2), SHMHEAP_E_EXISTS);
    shmheap_opts ow = {.size = 2u << 20, .overwrite = 1};
    T_EXPECT(shmheap_create(name, &ow, &h2), SHMHEAP_E_BUSY);
    void *p = NULL, *q = NULL;
    T_EXPECT(shmheap_alloc(h, 64, 0, &p), 0);
    T_EXPECT(shmheap_free(h, (char *)p + 16), SHMHEAP_E_BADPTR);
    T_EXPECT(shmheap_free(h, p), 0);
    T_EXPECT(shmheap_free(h, p), SHMHEAP_E_DOUBLEFREE);
    int local;
    T_EXPECT(shmheap_free(h, &local), SHMHEAP_E_FOREIGN);
    T_EXPECT(shmheap_alloc(h, (size_t)1 << 40, 0, &q), SHMHEAP_E_FULL);
    T_EXPECT(shmheap_root_set(h, "", p), SHMHEAP_E_BADNAME);
    T_EXPECT(shmheap_seal(h, &local, 1), SHMHEAP_E_FOREIGN);
    t_rm(h, name);
    T_EXPECT(shmheap_close(h), SHMHEAP_E_BADHANDLE); /* closed by t_rm: the handle rule */
    T_EXPECT(shmheap_unlink(name, NULL), SHMHEAP_E_NOTFOUND);
}

/* rpcool: names, a channel nobody serves, a name taken, a handler that does not exist, and an
 * RDMA channel where there is no RDMA device (krconn's code passes through rpcool). */
static void rpcool_failures(void)
{
    rpcool_server *s = NULL, *s2 = NULL;
    rpcool_conn *c = NULL;
    const char *name = t_uniq("errc");
    T_EXPECT(rpcool_server_open("bad name!", NULL, &s), RPCOOL_E_BADNAME);
    T_EXPECT(rpcool_connect("", NULL, &c), RPCOOL_E_BADNAME);
    T_EXPECT(rpcool_connect(t_uniq("nobody"), NULL, &c), RPCOOL_E_NOCHANNEL);
    if (t_serve_connect(name, 1, &s, &c)) return;
    T_EXPECT(rpcool_server_open(name, NULL, &s2), RPCOOL_E_NAMETAKEN);
    T_EXPECT(rpcool_call(c, 1000, NULL, 0, NULL, NULL), RPCOOL_E_NOHANDLER);
    T_EXPECT(rpcool_call(c, 5000, NULL, 0, NULL, NULL), RPCOOL_E_INVAL);
    T_EXPECT(rpcool_server_get_stats(s, NULL), RPCOOL_E_INVAL);
    T_EXPECT(rpcool_server_get_stats(NULL, NULL), RPCOOL_E_INVAL);
    char local[8] = "x";
    T_EXPECT(rpcool_call(c, T_FN_SLOW, local, sizeof local, NULL, NULL), RPCOOL_E_BADPTR);
    t_disconnect_close(c, s);
    T_EXPECT(rpcool_disconnect(c), RPCOOL_E_BADHANDLE); /* the handle rule */
    T_EXPECT(rpcool_server_close(s), RPCOOL_E_BADHANDLE);
    int rc = rpcool_connect("rdma://127.0.0.1:1/none", NULL, &c);
    CHECKF(rc < 0, "an RDMA connect without a device: %d", rc);
    t_has_text(rc, "rpcool_connect(\"rdma://127.0.0.1:1/none\")");
    if (!rc) rpcool_disconnect(c);
}

/* alock: a table that does not exist, bad arguments, a held lock, the remote cohort's
 * arguments. */
static void alock_failures(void)
{
    const char *name = t_uniq("erra");
    shmheap *h = t_heap(name, 4u << 20);
    if (!h) return;
    alock_table *t = NULL;
    alock_hold hold, hold2;
    T_EXPECT(alock_table_open(h, "absent", NULL, &t), ALOCK_E_NOTFOUND);
    T_EXPECT(alock_table_create(NULL, "t", NULL, &t), ALOCK_E_INVAL);
    alock_table_opts big = {.nlocks = 1u << 30};
    T_EXPECT(alock_table_create(h, "big", &big, &t), ALOCK_E_INVAL);
    alock_table_opts to = {.nlocks = 16};
    T_EXPECT(alock_table_create(h, "t", &to, &t), 0);
    if (t) {
        alock_table *t2 = NULL;
        T_EXPECT(alock_table_create(h, "t", &to, &t2), ALOCK_E_EXISTS);
        T_EXPECT(alock_lock(t, 16, &hold), ALOCK_E_INVAL);
        T_EXPECT(alock_lock(t, 3, &hold), 0);
        T_EXPECT(alock_trylock(t, 3, &hold2), ALOCK_E_BUSY);
        T_EXPECT(alock_unlock(&hold), 0);
        alock_table_close(t);
        T_EXPECT(alock_table_close(t), ALOCK_E_BADHANDLE); /* the handle rule */
        alock_table_unlink(h, "t"); /* its liveness file in /dev/shm goes too */
    }
    T_EXPECT(alock_remote_create(NULL, NULL), ALOCK_E_INVAL);
    T_EXPECT(alock_remote_lock(NULL, 0, NULL), ALOCK_E_INVAL);
    t_rm(h, name);
}

/* krconn: addresses, a context with no device, a directory in memory: too small, a name not
 * published, a full one. */
static void krconn_failures(void)
{
    krconn_addr a;
    krconn_ctx *ctx = NULL;
    krconn_dir *dir = NULL;
    T_EXPECT(krconn_addr_parse("not an address", &a), KRCONN_E_INVAL);
    T_EXPECT(krconn_addr_parse(NULL, &a), KRCONN_E_INVAL);
    T_EXPECT(krconn_ctx_destroy(NULL), KRCONN_E_INVAL);
    setenv("KRCONN_DEVICE", "no-such-device", 1);
    int rc = krconn_ctx_create(NULL, &ctx);
    unsetenv("KRCONN_DEVICE");
    CHECKF(rc < 0, "a context on no device: %d", rc);
    if (rc < 0) t_has_text(rc, "krconn_ctx_create on no device");
    if (!rc) krconn_ctx_destroy(ctx);
    char small[64];
    T_EXPECT(krconn_dir_shm(small, sizeof small, &dir), KRCONN_E_INVAL);
    size_t n = KRCONN_DIR_BYTES(1);
    void *m = calloc(1, n);
    if (!m) return;
    T_EXPECT(krconn_dir_shm(m, n, &dir), 0);
    if (dir) {
        krconn_addr got;
        T_EXPECT(krconn_lookup(dir, "absent", 0, &got), KRCONN_E_NOTFOUND);
        krconn_dir_close(dir);
    }
    free(m);
}

/* nppin: no protection domain, no context. */
static void nppin_failures(void)
{
    nppin_ctx *ctx = NULL;
    nppin_region *rg = NULL;
    int rc = nppin_create(NULL, NULL, &ctx);
    CHECKF(rc == -EINVAL || rc == NPPIN_E_NOTSUP, "nppin_create(NULL pd) = %d", rc);
    t_has_text(rc, "nppin_create(NULL pd)");
    rc = nppin_reg(NULL, NULL, 4096, &rg);
    CHECKF(rc == -EINVAL || rc == NPPIN_E_NOTSUP, "nppin_reg(NULL ctx) = %d", rc);
    t_has_text(rc, "nppin_reg(NULL ctx)");
}

int main(int argc, char **argv)
{
    t_init(argc, argv);
    RUN(every_code_from_every_strerror);
    RUN(every_text_distinct);
    RUN(codes_in_their_blocks);
    RUN(errno_and_the_rest);
    RUN(shmheap_failures);
    RUN(rpcool_failures);
    RUN(alock_failures);
    RUN(krconn_failures);
    RUN(nppin_failures);
    return T_DONE();
}
