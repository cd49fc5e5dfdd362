/* tests/test_krconn.c - krconn.h on the host, where there is no RDMA device: built with
 * KRCONN_NO_RDMA, every call that needs a device says KRCONN_E_NOTSUP; the pieces that need none
 * (error texts, address text) work, and the address parser takes random input without harm.
 * Everything that needs a device is tested in the VM tier (tests/vm/test_krconn.c). */
#define KRCONN_NO_RDMA 1
#define KRCONN_IMPLEMENTATION
#include "../krconn.h"
#include "t.h"

static void every_call_says_notsup(void)
{
    krconn_ctx *c = (krconn_ctx *)1;
    krconn *k = (krconn *)1;
    krconn_dir *d = (krconn_dir *)1;
    krconn_addr a;
    krconn_mr mr;
    krconn_wc wc;
    krconn_stats st;
    uint64_t w = 0;
    char buf[64];
    memset(&a, 0, sizeof a);
    CHECK_EQ(krconn_ctx_create(NULL, &c), KRCONN_E_NOTSUP);
    CHECK(c == NULL);
    CHECK_EQ(krconn_ctx_destroy(c), KRCONN_E_NOTSUP);
    CHECK_EQ(krconn_ctx_addr(c, &a), KRCONN_E_NOTSUP);
    CHECK_EQ(krconn_ctx_set_data(c, "x", 1), KRCONN_E_NOTSUP);
    CHECK_EQ(krconn_ctx_stats(c, &st), KRCONN_E_NOTSUP);
    CHECK_EQ(krconn_connect(c, &a, NULL, &k), KRCONN_E_NOTSUP);
    CHECK(k == NULL);
    CHECK_EQ(krconn_connect_name(c, d, "svc", NULL, &k), KRCONN_E_NOTSUP);
    CHECK_EQ(krconn_accept(c, 10, &k), KRCONN_E_NOTSUP);
    CHECK_EQ(krconn_disconnect(k), KRCONN_E_NOTSUP);
    CHECK(krconn_qp(k) == NULL && krconn_peer_data(k) == NULL);
    CHECK_EQ(krconn_dir_shm(buf, sizeof buf, &d), KRCONN_E_NOTSUP);
    CHECK_EQ(krconn_dir_meta(c, "127.0.0.1", 10, &d), KRCONN_E_NOTSUP);
    CHECK_EQ(krconn_meta_serve(c, NULL), KRCONN_E_NOTSUP);
    CHECK_EQ(krconn_publish(c, d, "svc", 10), KRCONN_E_NOTSUP);
    CHECK_EQ(krconn_unpublish(c, d, "svc", 10), KRCONN_E_NOTSUP);
    CHECK_EQ(krconn_lookup(d, "svc", 10, &a), KRCONN_E_NOTSUP);
    CHECK_EQ(krconn_reg(c, buf, sizeof buf, 0, &mr), KRCONN_E_NOTSUP);
    CHECK_EQ(krconn_post_send(k, 1, &mr, buf, 8, 0), KRCONN_E_NOTSUP);
    CHECK_EQ(krconn_post_recv(k, 1, &mr, buf, 8), KRCONN_E_NOTSUP);
    CHECK_EQ(krconn_write(k, 1, &mr, buf, 8, 0, 0, 0), KRCONN_E_NOTSUP);
    CHECK_EQ(krconn_read(k, 1, &mr, buf, 8, 0, 0, 0), KRCONN_E_NOTSUP);
    CHECK_EQ(krconn_cas(k, 1, &mr, &w, 0, 0, 0, 1, 0), KRCONN_E_NOTSUP);
    CHECK_EQ(krconn_faa(k, 1, &mr, &w, 0, 0, 1, 0), KRCONN_E_NOTSUP);
    CHECK_EQ(krconn_poll(k, &wc, 1, 0), KRCONN_E_NOTSUP);
    CHECK_EQ(krconn_wait(k, &wc, 10), KRCONN_E_NOTSUP);
    CHECK_EQ(krconn_ping(k, 10), KRCONN_E_NOTSUP);
    CHECK_EQ(krconn_event_fd(k), KRCONN_E_NOTSUP);
    CHECK_EQ(krconn_arm(k), KRCONN_E_NOTSUP);
    CHECK_EQ(krconn_event_ack(k), KRCONN_E_NOTSUP);
    CHECK_EQ(krconn_wr_id(k, 5), 5);
}

static void every_code_has_its_text(void)
{
    static const int codes[] = {
#define X(name, value, text) name,
        KRCONN_ERRORS(X)
#undef X
    };
    char buf[300];
    for (unsigned i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        CHECKF(codes[i] == -4000 + (int)i, "code %u is %d", i, codes[i]);
        const char *s = krconn_strerror(codes[i]);
        CHECKF(s && !strstr(s, "unknown"), "code %d has no text", codes[i]);
        CHECK(strcmp(krconn_describe(codes[i], buf, sizeof buf), s) == 0);
    }
    CHECK(strcmp(krconn_strerror(0), "success") == 0);
    CHECK(strcmp(krconn_strerror(-ENOMEM), strerror(ENOMEM)) == 0);
    CHECK(strcmp(krconn_strerror(-9999), "unknown error code") == 0);
    CHECK(strstr(krconn_strerror(-5000), "nppin.h") != NULL); /* nppin's block, not included */
}

static void address_text(void)
{
    krconn_addr a, b;
    char s[128];
    memset(&a, 0, sizeof a);
    a.gid[10] = a.gid[11] = 0xff;
    a.gid[12] = 10; a.gid[15] = 15;
    a.qpn = 0xabcdef;
    a.qkey = 0x4b52434e;
    a.generation = 0x0123456789abcdefull;
    CHECK_EQ(krconn_addr_format(&a, s, sizeof s), 0);
    CHECK_EQ(krconn_addr_parse(s, &b), 0);
    CHECK(memcmp(&a, &b, sizeof a) == 0);
    CHECK_EQ(krconn_addr_format(&a, s, 10), KRCONN_E_INVAL); /* too small: refused, not cut */
    CHECK_EQ(krconn_addr_parse("0:0:0:0:0:ffff:a00:f/1000000/1/1", &b), KRCONN_E_INVAL); /* QPN > 24 bits */
    CHECK_EQ(krconn_addr_parse("0:0:0:0:0:ffff:a00:f/1/1/1 trailing", &b), KRCONN_E_INVAL);
    CHECK_EQ(krconn_addr_parse("", &b), KRCONN_E_INVAL);
    CHECK_EQ(krconn_addr_parse(NULL, &b), KRCONN_E_INVAL);
    /* random text, and valid text with random bytes changed: never a crash */
    uint64_t seed = 42;
    for (int i = 0; i < 20000; i++) {
        char r[160];
        size_t n = t_rng(&seed) % sizeof r;
        if (i & 1) {
            for (size_t k = 0; k < n; k++) r[k] = (char)(32 + t_rng(&seed) % 95);
            r[n] = 0;
        } else {
            snprintf(r, sizeof r, "%s", s);
            r[t_rng(&seed) % strlen(r)] = (char)(32 + t_rng(&seed) % 95);
        }
        if (krconn_addr_parse(r, &b) == 0) CHECK(b.qpn <= 0xffffff);
    }
}

int main(int argc, char **argv)
{
    t_init(argc, argv);
    RUN(every_call_says_notsup);
    RUN(every_code_has_its_text);
    RUN(address_text);
    return T_DONE();
}
