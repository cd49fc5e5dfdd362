// VM
// LIBS: -libverbs
/* tests/vm/test_twohost.c - RDMA between two guests ("hosts") whose NICs are joined by a qemu
 * socket netdev, each with its own rxe device. Endpoints are swapped over TCP.
 *   test_twohost a PEER_IP     listens on port 18601 (the "server")
 *   test_twohost b PEER_IP     connects to the server
 * Both sides check what they receive and print their own result lines. */
#include "vmt.h"

#define PORT 18601
#define BUFSZ (2u << 20)
#define READ_OFF 0u             /* [0, 256K): my pattern, the peer READs it */
#define WRITE_OFF (256u << 10)  /* [256K, 512K): the peer WRITEs its pattern here */
#define SEG (256u << 10)
#define WORD_OFF (512u << 10)   /* a's counter for b's fetch-and-adds */
#define MSG_OFF (768u << 10)    /* send/recv staging: out, then in */
#define FAA_N 200

static int sock = -1;
static vmt_conn c;
static int is_a;
static unsigned my_seed, peer_seed;

static void connect_peer(const char *peer)
{
    const char *step = "";
    int rc;
    sock = vmt_tcp_peer(is_a, peer, PORT);
    if (sock < 0) return;
    rc = vmt_conn_setup(sock, IBV_QPT_RC, BUFSZ, NULL, &c, &step);
    CHECKF(rc == 0, "setup: %s: %s", step, strerror(-rc));
    if (rc) { close(sock); sock = -1; return; }
    printf("# qp %u (gid index %d) <-> peer qp %u\n", c.me.qpn, c.d.gid_index, c.peer.qpn);
}

/* a sends first, b echoes inverted; then the other way round. */
static void send_recv_both_ways(void)
{
    static const uint32_t sizes[] = {100, 4096, 200000};
    struct ibv_wc wc;
    char d[256];
    unsigned char *out = c.buf + MSG_OFF, *in = c.buf + MSG_OFF + SEG;
    int rc = 0;
    for (int round = 0; round < 2 && !rc; round++) {
        int sender = (round == 0) == is_a;
        for (unsigned i = 0; i < 3 && !rc; i++) {
            uint32_t n = sizes[i];
            unsigned seed = 1000 + round * 10 + i;
            if (!sender) rc = rcp__verbs_post_recv(c.qp, i, in, SEG, c.mr->lkey);
            /* the receiver says it has posted; the sender then sends */
            if (!rc) rc = sender ? vmt_expect_byte(sock, 'P', 60000) : vmt_send_byte(sock, 'P');
            if (!rc && sender) {
                vmt_fill(out, n, seed);
                rc = rcp__verbs_post_send(c.qp, i, out, n, c.mr->lkey, IBV_SEND_SIGNALED);
                if (!rc) rc = rcp__verbs_wait(c.scq, &wc, VMT_WAIT);
            } else if (!rc) {
                rc = rcp__verbs_wait(c.rcq, &wc, VMT_WAIT);
                if (!rc) {
                    CHECK_EQ(wc.byte_len, n);
                    CHECKF(vmt_check(in, n, seed) < 0, "round %d message %u corrupted", round, i);
                }
            }
            CHECKF(rc == 0, "round %d message %u: %s", round, i, rcp__verbs_describe(rc, &wc, d, sizeof d));
        }
    }
}

/* Both write their pattern into the other's buffer, then read the other's own pattern. */
static void write_and_read_both_ways(void)
{
    struct ibv_wc wc;
    char d[256];
    int rc = rcp__verbs_post_write(c.qp, 1, c.buf + READ_OFF, SEG, c.mr->lkey, c.raddr + WRITE_OFF,
                                   c.rkey, 0, 0, IBV_SEND_SIGNALED);
    if (!rc) rc = rcp__verbs_wait(c.scq, &wc, VMT_WAIT);
    CHECKF(rc == 0, "write: %s", rcp__verbs_describe(rc, &wc, d, sizeof d));
    if (!rc) rc = vmt_send_byte(sock, 'W');
    if (!rc) rc = vmt_expect_byte(sock, 'W', 60000);
    CHECK_EQ(rc, 0);
    if (rc) return;
    long bad = vmt_check(c.buf + WRITE_OFF, SEG, peer_seed);
    CHECKF(bad < 0, "peer's WRITE: byte %ld differs", bad);

    unsigned char *dst = c.buf + MSG_OFF;
    memset(dst, 0, SEG);
    rc = rcp__verbs_post_read(c.qp, 2, dst, SEG, c.mr->lkey, c.raddr + READ_OFF, c.rkey, IBV_SEND_SIGNALED);
    if (!rc) rc = rcp__verbs_wait(c.scq, &wc, VMT_WAIT);
    CHECKF(rc == 0, "read: %s", rcp__verbs_describe(rc, &wc, d, sizeof d));
    if (!rc) CHECKF(vmt_check(dst, SEG, peer_seed) < 0, "READ of the peer's pattern differs");
    vmt_send_byte(sock, 'X');
    CHECK_EQ(vmt_expect_byte(sock, 'X', 60000), 0); /* the peer is done reading us too */
}

/* b adds to a's word FAA_N times; a checks the total. */
static void fetch_add_across(void)
{
    struct ibv_wc wc;
    char d[256];
    uint64_t *word = (uint64_t *)(c.buf + WORD_OFF), *old = (uint64_t *)(c.buf + WORD_OFF + 64);
    if (is_a) {
        CHECK_EQ(vmt_expect_byte(sock, 'F', 60000), 0);
        CHECK_EQ(rcp__load(word), 5 * FAA_N);
        return;
    }
    int rc = 0;
    for (int i = 0; i < FAA_N && !rc; i++) {
        rc = rcp__verbs_post_faa(c.qp, 3, old, c.mr->lkey, c.raddr + WORD_OFF, c.rkey, 5, IBV_SEND_SIGNALED);
        if (!rc) rc = rcp__verbs_wait(c.scq, &wc, VMT_WAIT);
        if (!rc) CHECKF(*old == (uint64_t)5 * i, "faa %d returned %llu", i, (unsigned long long)*old);
    }
    CHECKF(rc == 0, "faa: %s", rcp__verbs_describe(rc, &wc, d, sizeof d));
    vmt_send_byte(sock, 'F');
}

int main(int argc, char **argv)
{
    if ((is_a = vmt_guest_role(argc, argv, 3, "PEER_IP")) < 0) return 2;
    my_seed = is_a ? 11 : 22;
    peer_seed = is_a ? 22 : 11;
    t_begin("twohost_connect");
    connect_peer(argv[2]);
    t_end();
    if (sock < 0) return T_DONE();
    vmt_fill(c.buf + READ_OFF, SEG, my_seed);
    TEST(send_recv_both_ways);
    TEST(write_and_read_both_ways);
    TEST(fetch_add_across);
    vmt_conn_free(&c);
    close(sock);
    return T_DONE();
}
