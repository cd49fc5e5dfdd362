// VM
/* tests/vm/test_podheap.c - one shmheap shared by two guests through ivshmem: our stand-in for
 * a CXL 3.0 pod of hosts. Guest a formats the device and builds a pointer-linked list; guest b
 * maps the same heap at the same address, walks the list, and links nodes of its own in front;
 * a walks those. The guests take turns, told by TCP over their joined NICs.
 *   test_podheap a DEVICE PEER_IP     (DEVICE: /sys/bus/pci/devices/ADDR/resource2)
 *   test_podheap b DEVICE PEER_IP */
#include "vmt.h"
#define SHMHEAP_IMPLEMENTATION
#include "shmheap.h"

#define PORT 18602
#define NODES 1000
#define B_NODES 10

struct node {
    uint64_t v;
    struct node *next;
    char tag[16];
};

static int sock = -1;
static shmheap *h;
static int is_a;
static uint64_t base_from_a;

/* a: format the device as a heap and build the list; tell b where the heap is. */
static void a_build_list(const char *dev)
{
    shmheap_opts o = {.overwrite = 1};
    int rc = shmheap_create(dev, &o, &h);
    CHECKF(rc == 0, "shmheap_create(%s): %s", dev, shmheap_strerror(rc));
    if (rc) return;
    printf("# heap on %s at %p, %zu bytes\n", dev, shmheap_base(h), shmheap_size(h));
    struct node *head = NULL;
    for (int i = NODES - 1; i >= 0; i--) {
        struct node *n = (struct node *)shmheap_malloc(h, sizeof *n);
        CHECK(n != NULL);
        if (!n) return;
        n->v = (uint64_t)i * 3;
        n->next = head;
        snprintf(n->tag, sizeof n->tag, "a%d", i);
        head = n;
    }
    CHECK_EQ(shmheap_root_set(h, "list", head), 0);
    CHECK_EQ(shmheap_check(h, NULL), 0);
    unsigned char msg[9] = {'L'};
    vmt_put64(msg + 1, (uintptr_t)shmheap_base(h));
    CHECK_EQ(vmt_write_all(sock, msg, sizeof msg), 0);
}

/* b: map the same heap at the same address and walk a's list with plain pointers. */
static void b_walk_list(const char *dev)
{
    unsigned char msg[9];
    int rc = vmt_read_all(sock, msg, sizeof msg, 60000);
    CHECKF(rc == 0 && msg[0] == 'L', "waiting for a: %s", strerror(-rc));
    if (rc || msg[0] != 'L') return;
    base_from_a = vmt_get64(msg + 1);
    rc = shmheap_open(dev, NULL, &h);
    CHECKF(rc == 0, "shmheap_open(%s): %s", dev, shmheap_strerror(rc));
    if (rc) return;
    CHECK_EQ((uintptr_t)shmheap_base(h), base_from_a);
    struct node *n = (struct node *)shmheap_root_get(h, "list");
    CHECK(n != NULL);
    int count = 0;
    for (; n && count <= NODES; n = n->next, count++) {
        char want[16];
        snprintf(want, sizeof want, "a%d", count);
        if (!shmheap_contains(h, n, sizeof *n) || n->v != (uint64_t)count * 3 || strcmp(n->tag, want)) {
            CHECKF(0, "node %d wrong (at %p)", count, (void *)n);
            return;
        }
    }
    CHECK_EQ(count, NODES);
}

/* b: allocate nodes of its own in the shared heap, link them in front of a's list. */
static void b_extends_list(void)
{
    if (!h) { CHECKF(0, "no heap"); return; }
    struct node *head = (struct node *)shmheap_root_get(h, "list");
    for (int i = B_NODES - 1; i >= 0; i--) {
        struct node *n = (struct node *)shmheap_malloc(h, sizeof *n);
        CHECK(n != NULL);
        if (!n) break;
        n->v = 1000000u + (uint64_t)i;
        n->next = head;
        snprintf(n->tag, sizeof n->tag, "b%d", i);
        head = n;
    }
    CHECK_EQ(shmheap_root_set(h, "reply", head), 0);
    CHECK_EQ(shmheap_check(h, NULL), 0);
    CHECK_EQ(vmt_send_byte(sock, 'B'), 0);
}

/* a: walk b's nodes into its own list: allocations and roots made by the other host. */
static void a_walks_reply(void)
{
    CHECK_EQ(vmt_expect_byte(sock, 'B', 60000), 0);
    if (!h) return;
    struct node *n = (struct node *)shmheap_root_get(h, "reply");
    CHECK(n != NULL);
    int count = 0;
    uint64_t sum = 0;
    for (; n && count <= NODES + B_NODES; n = n->next, count++) {
        if (!shmheap_contains(h, n, sizeof *n)) { CHECKF(0, "node %d outside the heap", count); return; }
        if (count < B_NODES) CHECKF(n->v == 1000000u + (uint64_t)count && n->tag[0] == 'b', "b's node %d", count);
        sum += n->v;
    }
    CHECK_EQ(count, NODES + B_NODES);
    CHECK_EQ(sum, (uint64_t)3 * NODES * (NODES - 1) / 2 + 1000000u * B_NODES + B_NODES * (B_NODES - 1) / 2);
    shmheap_stats st;
    CHECK_EQ(shmheap_check(h, &st), 0);
    CHECK_EQ(st.live_blocks, NODES + B_NODES);
}

int main(int argc, char **argv)
{
    if ((is_a = vmt_guest_role(argc, argv, 4, "DEVICE PEER_IP")) < 0) return 2;
    t_begin("podheap_connect");
    sock = vmt_tcp_peer(is_a, argv[3], PORT);
    t_end();
    if (sock < 0) return T_DONE();
    if (is_a) {
        t_begin("podheap_a_builds_list"); a_build_list(argv[2]); t_end();
        TEST(a_walks_reply);
    } else {
        t_begin("podheap_b_walks_list"); b_walk_list(argv[2]); t_end();
        TEST(b_extends_list);
    }
    /* close only after both are done with the heap */
    vmt_send_byte(sock, 'E');
    vmt_expect_byte(sock, 'E', 60000);
    if (h) CHECK_EQ(shmheap_close(h), 0);
    close(sock);
    return T_DONE();
}
