// VM
/* bench/pod_pingpong.c - the floor of a call between two hosts of a pod: a bare cache-line
 * ping-pong across two qemu guests through the ivshmem device they share (tests/vm/run.sh
 * rpcbench's guests, bench/bench_pod_vm.sh). Nothing else crosses: one 64-byte line per
 * direction, each guest polling the other's line.
 *   pod_pingpong a DEVICE PEER_IP [-n N] [-b BLOCKS] [-N NAME]    the echoing side
 *   pod_pingpong b DEVICE PEER_IP [-n N] [-b BLOCKS] [-N NAME]    the timing side, prints
 * DEVICE: "ivshmem" (the guest's ivshmem BAR, tests/vm/ivshmem.h) or a file. The lines are in
 * the device's last page (a's at its start, b's 128 bytes on); a saves that page first and puts
 * it back at the end, so a pod formatted in the device before or after is left as it was.
 * b stores the round trip's number in its line and polls a's until a has stored the same
 * number back; a polls b's line and echoes. A block of N round trips (default 2000) is timed as
 * a whole (two clock reads per block: the guests' clock_gettime costs about a microsecond), one
 * untimed block first; BLOCKS blocks (default 31). Prints, per bench/hist.h, one result NAME
 * (default pod_floor/line) whose samples are the blocks' means per round trip: its median is the
 * median of the blocks. The guests agree on start and end over TCP (port 7490), never on the
 * timed path. Each side gives up after 120 s without progress. b also prints what one
 * clock_gettime costs in its guest (rows timed call by call pay one each). */
#define _GNU_SOURCE
#include "hist.h"
#include "../tests/vm/ivshmem.h"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>

#define PORT 7490
#define STOP UINT64_MAX
#define STALL_NS (120 * 1000000000ull)

static int tcp_pair(int is_a, const char *peer)
{
    if (is_a) {
        int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(PORT)};
        if (l < 0) return -1;
        setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(l, (struct sockaddr *)&sa, sizeof sa) || listen(l, 1)) {
            close(l);
            return -1;
        }
        struct pollfd p = {.fd = l, .events = POLLIN};
        int fd = poll(&p, 1, 120000) == 1 ? accept(l, NULL, NULL) : -1;
        close(l);
        return fd;
    }
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(PORT)};
    if (inet_pton(AF_INET, peer, &sa.sin_addr) != 1) return -1;
    for (int i = 0; i < 1200; i++) { /* a may still be starting: 120 s */
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) return -1;
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) return fd;
        close(fd);
        usleep(100000);
    }
    return -1;
}

static int send_byte(int fd, char c) { return write(fd, &c, 1) == 1 ? 0 : -1; }

static int expect_byte(int fd, char c)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    char got = 0;
    if (poll(&p, 1, 300000) != 1 || read(fd, &got, 1) != 1) return -1;
    return got == c ? 0 : -1;
}

static inline uint64_t ld(const volatile uint64_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static inline void st(volatile uint64_t *p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

/* spin until *p == want (or STOP, for a); 0, 1 on STOP, -1 after STALL_NS without it */
static int await_line(const volatile uint64_t *p, uint64_t want, int stop_ok)
{
    uint64_t t0 = 0;
    for (unsigned k = 1;; k++) {
        uint64_t v = ld(p);
        if (v == want) return 0;
        if (stop_ok && v == STOP) return 1;
        __builtin_ia32_pause();
        if ((k & 0xffff) == 0) {
            uint64_t now = hist_now();
            if (!t0) t0 = now;
            else if (now - t0 > STALL_NS) return -1;
        }
    }
}

int main(int argc, char **argv)
{
    if (argc < 4 || (strcmp(argv[1], "a") && strcmp(argv[1], "b"))) {
        fprintf(stderr, "usage: %s a|b DEVICE PEER_IP [-n N] [-b BLOCKS] [-N NAME]\n", argv[0]);
        return 2;
    }
    int is_a = argv[1][0] == 'a';
    long n = 2000, blocks = 31;
    const char *name = "pod_floor/line";
    for (int i = 4; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-n")) n = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "-b")) blocks = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "-N")) name = argv[i + 1];
    }
    if (n < 1 || blocks < 1) return 2;
    char path[512];
    const char *dev = vmt_pod_device(argv[2], path, sizeof path);
    size_t size = 0;
    unsigned char *m = dev ? (unsigned char *)vmt_ivshmem_map(dev, &size) : NULL;
    if (!m || size < 8192) {
        fprintf(stderr, "pod_pingpong: cannot map %s: %s\n", dev ? dev : argv[2], strerror(errno));
        return 1;
    }
    unsigned char *page = m + size - 4096;
    volatile uint64_t *la = (volatile uint64_t *)page;         /* a writes, b polls */
    volatile uint64_t *lb = (volatile uint64_t *)(page + 128); /* b writes, a polls */
    int fd = tcp_pair(is_a, argv[3]);
    if (fd < 0) {
        fprintf(stderr, "pod_pingpong %s: no TCP rendezvous with %s\n", argv[1], argv[3]);
        return 1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (is_a) {
        static unsigned char saved[4096];
        memcpy(saved, page, sizeof saved);
        st(la, 0);
        st(lb, 0);
        if (send_byte(fd, 'G')) return 1;
        int rc;
        uint64_t seq = 1;
        while ((rc = await_line(lb, seq, 1)) == 0) st(la, seq++);
        memcpy(page, saved, sizeof saved);
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        if (rc < 0) {
            fprintf(stderr, "pod_pingpong a: b stalled at round trip %llu\n",
                    (unsigned long long)seq);
            return 1;
        }
        send_byte(fd, 'D');
        printf("# pod_pingpong a: echoed %llu round trips on %s (%zu bytes)\n",
               (unsigned long long)(seq - 1), dev, size);
        return 0;
    }
    if (expect_byte(fd, 'G')) {
        fprintf(stderr, "pod_pingpong b: a never said go\n");
        return 1;
    }
    hist h;
    if (hist_init(&h, (size_t)blocks)) return 1;
    uint64_t seq = 0, t_all = 0, best = UINT64_MAX;
    for (long b = -1; b < blocks; b++) {
        uint64_t t0 = hist_now();
        for (long i = 0; i < n; i++) {
            st(lb, ++seq);
            if (await_line(la, seq, 0)) {
                fprintf(stderr, "pod_pingpong b: a stalled at round trip %llu\n",
                        (unsigned long long)seq);
                st(lb, STOP);
                return 1;
            }
        }
        uint64_t dt = hist_now() - t0;
        if (b < 0) continue; /* the untimed block */
        t_all += dt;
        hist_add(&h, dt / (uint64_t)n);
        if (dt / (uint64_t)n < best) best = dt / (uint64_t)n;
    }
    st(lb, STOP);
    if (expect_byte(fd, 'D')) fprintf(stderr, "pod_pingpong b: a did not confirm the end\n");
    /* what one clock read costs here: the rows timed per call pay it once each */
    uint64_t c0 = hist_now(), sink = 0;
    for (int i = 0; i < 10000; i++) sink += hist_now();
    uint64_t clk = (hist_now() - c0) / 10000;
    printf("# %s: %ld blocks of %ld round trips through %s (%zu bytes), block means: best %llu ns;"
           " one clock_gettime %llu ns%s\n", name, blocks, n, dev, size, (unsigned long long)best,
           (unsigned long long)clk, sink ? "" : " ");
    hist_print(&h, name, hist_ops_per_s((size_t)(n * blocks), t_all));
    hist_free(&h);
    close(fd);
    return 0;
}
