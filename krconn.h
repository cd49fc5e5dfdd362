/* SPDX-License-Identifier: MIT */
/* krconn.h - RDMA connections in microseconds over standard verbs (KRCORE's control plane, in
   user space).
   version 0.4.0

   TABLE OF CONTENTS
   -----------------
   1. Usage            5. Directory          9. Thread safety
   2. Compile options  6. Data operations   10. Errors
   3. Example          7. Failures          11. Limits
   4. How it connects  8. Environment       12. Design notes
   The declarations follow this text; then the implementation, whose sections are marked with
   anchors to grep for: >>implementation >>errors >>no_rdma >>structures >>helpers >>ud >>pool
   >>phys >>directory >>rx >>thread >>context >>connect >>meta >>data >>events. The licence (MIT)
   is at the end of the file.

   1. USAGE
   --------
   Copy krconn.h and the impl/ folder into your project. In exactly one C or C++ file:

       #define KRCONN_IMPLEMENTATION
       #include "krconn.h"

   Link with -libverbs -pthread (Debian: libibverbs-dev). Other files include "krconn.h" without
   the define. Linux only. The implementation needs glibc's GNU extensions: include krconn.h
   before any system header in that file (it then defines _GNU_SOURCE), or build with
   -D_GNU_SOURCE.
   Options structs (krconn_ctx_opts, krconn_connect_opts, krconn_meta_opts): zero means the default.
   Fill one with designated initialisers in C; in C++, value-initialise it and assign the fields you
   set (`T o{};` and `T o = {};` never warn; an initialiser list that leaves fields out warns under
   -Wextra in g++ before 14, -Wmissing-field-initializers):

       krconn_ctx_opts o = {.pool_size = 64};  // C
       krconn_ctx_opts o{}; o.pool_size = 64;  // C++

   2. COMPILE OPTIONS
   ------------------
   Define before the include that holds the implementation:
       KRCONN_STATIC          make every function static (private to that file)
       KRCONN_NO_RDMA         build without rdma-core: declarations still compile (struct ibv_qp
                              and struct ibv_mr stay opaque), no -libverbs is needed, and every
                              function that would touch a device returns KRCONN_E_NOTSUP.
                              Automatic when __has_include(<infiniband/verbs.h>) is false, so a
                              program that includes every rpcool header builds with plain cc.
       KRCONN_ASSERT(x)       your assert (default: assert from <assert.h>)
       KRCONN_MALLOC(n), KRCONN_FREE(p)   your allocator: define both or neither

   3. EXAMPLE
   ----------
   One program, two roles: the server publishes "hello" at a meta server (itself) and hands the
   address and key of a greeting to every peer as connect data; the client finds it by name and
   reads the greeting with one RDMA READ. Run `./hello` on one host, then `KRCONN_META=HOST
   ./hello c` on another (or the same). examples/krconn_hello.c is a longer one.

       #define KRCONN_IMPLEMENTATION
       #include "krconn.h"
       #include <stdio.h>
       #include <unistd.h>

       static char greeting[64] = "hello over RDMA READ", got[64];

       int main(int argc, char **argv)
       {
           krconn_ctx *ctx = NULL;
           krconn_dir *dir = NULL;
           krconn_mr mr = {NULL, 0, 0, 0, NULL};
           char why[400];
           int server = argc < 2;
           (void)argv;
           int rc = krconn_ctx_create(NULL, &ctx); // device: $KRCONN_DEVICE or the first
           if (!rc) rc = krconn_reg(ctx, server ? greeting : got, 64, 0, &mr);
           if (!rc && server) {
               uint64_t info[2] = {(uintptr_t)greeting, mr.rkey}; // for every peer
               krconn_ctx_set_data(ctx, info, sizeof info);
               rc = krconn_meta_serve(ctx, NULL); // TCP port 7471 for the first contact
               if (!rc) rc = krconn_dir_meta(ctx, "127.0.0.1", 2000, &dir);
               if (!rc) rc = krconn_publish(ctx, dir, "hello", 2000);
               if (!rc) sleep(60); // the context's own thread answers connects
           } else if (!rc) {
               krconn *k;
               krconn_wc wc;
               rc = krconn_dir_meta(ctx, NULL, 2000, &dir); // NULL: $KRCONN_META
               if (!rc) rc = krconn_connect_name(ctx, dir, "hello", NULL, &k);
               if (!rc) {
                   const uint64_t *info = (const uint64_t *)krconn_peer_data(k);
                   rc = krconn_read(k, 1, &mr, got, 64, info[0], (uint32_t)info[1], 0);
                   if (!rc) rc = krconn_wait(k, &wc, 1000);
                   if (!rc) printf("read: %s\n", got);
                   krconn_disconnect(k);
               }
           }
           if (rc) fprintf(stderr, "%s\n", krconn_describe(rc, why, sizeof why));
           if (dir) krconn_dir_close(dir);
           if (mr.mr) krconn_dereg(&mr);
           if (ctx) krconn_ctx_destroy(ctx);
           return rc != 0;
       }

   4. HOW IT CONNECTS
   ------------------
   A context (krconn_ctx) belongs to one process and one device port. It owns a UD control QP, a
   pool of RC QPs created ahead of time and left in INIT (each with its own CQ), refilled by a
   background thread (at once when half the pool is used, else within 200 ms), so a connect never
   waits for ibv_create_qp while the pool has QPs. A context's address (krconn_addr) is {GID, UD
   QPN, qkey, generation}; the generation is a random 64-bit number drawn when the context is
   created, so a restarted peer is told apart from the one it replaces even if it gets the same QPN.
   krconn_connect takes a pooled QP and sends ONE UD request {QPN, PSN, nonce, the generation it
   expects}; the peer's context takes a pooled QP of its own, moves it to RTR, answers {QPN, PSN,
   nonce} and then moves it to RTS; the client moves its QP to RTR and RTS. The peer may send
   as soon as its side is up, before the client's connect has returned: krconn_connect_opts.before
   lets the client post receives on the QP (in INIT) before the request leaves. The peer's context
   answers from its background thread (or from any of its threads that is waiting on krconn), so the
   peer program does nothing for a connection to exist; krconn_accept hands incoming connections to
   a program that wants them (krconn_ctx_opts.accept_backlog). Both sides first create a UD address
   handle towards the other's GID, which resolves the neighbour (ARP) entry, so the RC QP's RTR does
   not wait for it. The source GID, unless krconn_ctx_opts.fixed_gid names one, is on RoCE the
   port's first RoCE v2 GID with an IPv4-mapped address (else another RoCE v2 one, else RoCE v1), on
   InfiniBand index 0: an IPv4-mapped GID is routable between subnets, and the IPv6 link-local one
   would not spare the kernel's address resolution in an RTR or an address handle (Linux derives the
   MAC from a link-local destination GID without the IP stack only when the source GID is RoCE v1;
   rxe has RoCE v2 GIDs only). A connection to a context that this context already has a shared
   physical connection with is VIRTUAL: it shares that RC QP and its CQ and sends no packet;
   completions are handed to the connection that posted the work (wr_id's top 16 bits carry the
   connection's tag, so user wr_ids are 48 bits). Physical connections are shared, made by either
   side, except those made with KRCONN_CONNECT_NO_VIRTUAL: such a connection is PRIVATE on both
   sides. Its QP, receive queue, CQ and error state belong to it alone: no later connect, by this
   context or by the peer's, becomes virtual over it; a plain connect when only private connections
   to the peer exist makes a new physical one. QP attributes: rnr_retry 6 (finite), min_rnr_timer 12
   (0.64 ms), timeout 14 (67 ms) and retry_cnt 6 (rxe treats 7 as "forever", so 7 is refused;
   KRCONN_DEFAULT_RNR_RETRY, KRCONN_MIN_RNR_TIMER, KRCONN_DEFAULT_ACK_TIMEOUT, _RETRY_CNT): a
   silent peer fails an operation within about 0.5 s (7 sends, 67 ms apart, plus the kernel timer's
   slack). All can be set in krconn_ctx_opts.
   Closing the last connection on a physical QP sends the peer a UD "disconnect" (no wait), resets
   the QP and puts it back in the pool (or destroys it when the pool is full): QPs, CQs and MRs
   stay bounded however many connects and closes there are.

   5. DIRECTORY
   ------------
   A directory maps a service name (up to 47 bytes) to a context address. It is a table of
   slots (128 bytes, seqlock word, FNV-1a hash with linear probing, a checksum over each slot):
   - in one pod it lives in shared memory: krconn_dir_shm(mem, len) on any memory several
     processes map (with shmheap.h included before krconn.h, krconn_dir_heap(h) keeps it under
     the heap's named root "krconn.dir"); publish and lookup are plain loads and stores, no
     network at all;
   - between pods a meta server (krconn_meta_serve: any context may be one) holds the table in
     registered memory; clients read slots with one-sided RDMA READ over a krconn connection.
     Publishing is a UD datagram to the meta server, which writes the slot itself and accepts
     only the sender's own address (source GID of the packet, source QPN of the datagram).
   krconn_publish(ctx, dir, name, timeout_ms) names ctx's address; publishing a name again
   replaces its address. krconn_unpublish(ctx, dir, name, timeout_ms) withdraws it: from then on
   krconn_lookup and krconn_connect_name of that name give KRCONN_E_NOTFOUND (a connect by a
   name cached before, to a context that no longer answers, ends with it at its first resend
   instead of waiting out its deadline). Only the address that published a name withdraws it:
   an unknown name, a name withdrawn already or one naming another context's address is
   KRCONN_E_NOTFOUND and stays as it was. A withdrawn name keeps its slot (empty of an address)
   for itself, so that names stored past it stay reachable; publishing it again fills it in.
   A meta server older than krconn_unpublish drops the request (KRCONN_E_TIMEDOUT).
   Finding the meta server the first time: krconn_dir_meta(ctx, "HOST[:PORT]", ...) (or NULL =
   the KRCONN_META environment variable) opens a TCP connection to HOST:PORT (default port
   KRCONN_DEFAULT_META_PORT, 7471), which the meta server's background thread answers with its
   context address (32 bytes) and closes. That is the only TCP exchange; it happens once per
   directory handle, and the connection to the meta server is then a krconn like any other
   (its answer also carries the table's address and rkey).
   krconn_connect_name caches what it looked up, per context. A stale entry (the peer restarted:
   new QPN or generation) is detected: the request names the generation it expects and the peer
   rejects a mismatch, or no answer comes and a fresh lookup shows another address; the entry is
   then refetched, and the stale generation is remembered and never used again. The memory is
   the context's, for every directory and for krconn_connect: a directory (this one or any other)
   still naming that peer's generation gives KRCONN_E_STALE at once, and so does krconn_connect
   to that address, without a packet sent.

   6. DATA OPERATIONS
   ------------------
   krconn_post_send, krconn_post_recv, krconn_write, krconn_read, krconn_cas, krconn_faa post one
   work request on the connection's QP (they never wait; a full send queue is KRCONN_E_AGAIN);
   krconn_poll and krconn_wait return completions (krconn_wc). Buffers must be registered with
   krconn_reg. Atomics work on 8-byte aligned remote words. Two-sided messages: the receive
   queue belongs to the physical QP, so on virtual connections to one peer a message fills the
   oldest receive posted by any of them, and completes at the connection that posted it.
   Raw verbs: krconn_qp gives the struct ibv_qp * (send and receive queues share one CQ, which
   krconn_poll reads and routes by the top 16 bits of wr_id, the connection's tag). Post your own
   work requests (chains too, signaled or not) with wr_id = krconn_wr_id(c, id), id < 2^48 - 1
   (2^48 - 1 is krconn_ping's); krconn_poll on c then returns them with wr_id == id. A connection
   made by krconn_connect that is not virtual has tag 0, so there krconn_wr_id(c, id) == id and a
   plain wr_id < 2^48 - 1 works as is; accepted and virtual connections need krconn_wr_id.
   Blocking instead of spinning (a context made with KRCONN_CTX_EVENTS): each RC QP's CQ has
   its own completion channel, whose non-blocking fd krconn_event_fd gives. To sleep: poll the
   connection (krconn_poll, timeout 0); if nothing came, krconn_arm, then poll once more (a
   completion that came before the arm raises no event), and only if that finds nothing too,
   wait for the fd to become readable (poll(2), epoll); then krconn_event_ack (it takes and
   acknowledges every pending event, never blocks) and poll the connection again. Arming is
   one-shot: arm again before each sleep. Virtual connections share their physical QP's CQ, so
   they share its fd: an event may be for another of them (krconn_poll keeps their completions
   for them), and the fd can be readable with nothing for this connection: treat every wake-up
   as a hint. The channel lives and dies with its CQ; a QP given back to the pool keeps both,
   and krconn drops the events left on it first. Without KRCONN_CTX_EVENTS these calls return
   KRCONN_E_NOTSUP.

   7. FAILURES
   -----------
   - Every call that waits takes timeout_ms and returns by then (give or take the one verbs or
     socket call in progress at the deadline): a dead or absent peer is KRCONN_E_TIMEDOUT
     (connect), a stale address KRCONN_E_STALE. An unanswered request is sent again after 50,
     100, 200, 400 and then every 800 ms; the answer to a repeated request is the same. A request
     that cannot be sent (no address handle: the kernel gives up resolving a host that does not
     answer after about 1 s) is tried again on the same schedule: there is no retry count, a
     slow or absent peer costs the whole deadline and never ends a connect early.
   - Peer died after connecting: the next operation completes with KRCONN_E_PEERDEAD within
     the retry bound (section 4); once that completion has been polled, later posts on the
     connection fail at once, and krconn_poll returns KRCONN_E_PEERDEAD when no completion is
     left. krconn_ping is an explicit keepalive (a zero-byte RDMA WRITE). A peer that closed
     sends a disconnect: posts then fail with KRCONN_E_CLOSED.
   - Background keepalive (krconn_ctx_opts.keepalive_ms > 0): the context's thread looks at every
     physical connection each keepalive_ms / 2 (at most 200 ms); one that saw no successful
     completion for keepalive_ms gets a zero-byte RDMA WRITE (the peer's program does nothing:
     its device acknowledges). When that write fails, the connection is marked dead: posts fail
     with KRCONN_E_PEERDEAD, and krconn_poll returns what is left and then KRCONN_E_PEERDEAD.
     Bound: a peer that dies while the connection is idle is reported within keepalive_ms + two
     rounds + the retry bound of section 4, that is within 2 x keepalive_ms + about 0.5 s with
     the default QP attributes (plus the kernel's timer and scheduling slack). A connection that
     had successful completions in the interval is not pinged (its own operations report a dead
     peer); a ping takes one send-queue slot while it is out. While its write is out,
     the thread polls the connection's CQ and keeps completions for their connections (use
     krconn_poll, not ibv_poll_cq, on krconn_qp's CQ); with KRCONN_CTX_EVENTS its completion
     may wake an armed channel (a spurious wake-up, section 6).
   - Pool empty: connect creates a QP itself (counted in krconn_stats.pool_fallback), or returns
     KRCONN_E_AGAIN with KRCONN_CONNECT_NOWAIT. A QP given back to the pool (disconnect, a
     failed connect) is reset and rests for its retry window (ACK timeout x (retry_cnt + 1),
     with the context's attributes, plus 50 ms) before a connect may take it again, oldest
     first: a late packet of its last connection never reaches the next one. A QP given back
     in the error state (a failed work request, or moved there by its user) is destroyed.
   - Anything on the UD QP that is not a well-formed message of this protocol (wrong size,
     magic, version, type, a source GID or QPN that disagrees with the packet's, a nonce no one
     is waiting for, a replayed request) is dropped and counted (krconn_ctx_get_stats, formerly
     krconn_ctx_stats, a name that still works); a connection is only completed with the context
     it was requested from, by the nonce it was requested with.
   - The UD QP failing: a UD send or receive that completes in error leaves the QP in the error
     state (rxe answers a datagram it could not send with "local QP operation error" and moves
     the QP to ERR), and every later message would be lost. The context's thread resets it in place
     within one round (200 ms at most): RESET, INIT, its receives posted again, RTS, the same
     QP number, so addresses already handed out stay valid. Messages in flight meanwhile are
     lost; a waiting connect sends its request again (the resends above) and succeeds within
     its timeout. Logged at KRCONN_LOG_WARN, counted in krconn_stats.ud_resets.

   8. ENVIRONMENT
   --------------
   KRCONN_DEVICE (device name when opts.device is NULL), KRCONN_META (meta server, HOST[:PORT]),
   KRCONN_DEBUG (any value: log to stderr when no log callback is given; read once).

   9. THREAD SAFETY
   ----------------
   Every function may be called from any thread, except: krconn_ctx_destroy (no other call on
   that context may run or follow), krconn_disconnect (no other call on that connection), and
   krconn_poll/krconn_wait of one connection by two threads at once (allowed, but each
   completion goes to one of them).

   10. ERRORS
   ----------
   0 or a negative code: -errno from the system or libibverbs, or KRCONN_E_*.

   One rule in every rpcool header: each owns a block of codes counting up from its number
   (shmheap -1000, rpcool -2000, alock -3000, krconn -4000, nppin -5000). X_strerror explains
   its own codes and those of every rpcool header declared before its implementation (a code
   passed through keeps its text); -1 to -4095 is -errno (strerror's text if the system knows
   it); an undeclared header's code names that header; else "unknown error code"; 0 "success".
   Static texts.

   Handles, one rule in every rpcool header: a handle is open from the call that made it until
   its close. A second close, or any use after the close, returns the header's E_BADHANDLE code
   (a function that returns a pointer or a size returns NULL or 0 and sets errno to EBADF); in
   a child of fork(), a handle its parent made returns the header's E_FORKED code, its close
   included (the child's copy goes at exit or exec), unless the header lets children use it. A
   table of open handles in each process tells these apart without reading the handle, so none
   of them is a crash; once a later open hands out the same address again, the old pointer is
   that new handle (as a file descriptor's number is). A pointer that was never a handle is
   undefined, as free() of one is.
   Here the handles are krconn_ctx, krconn (a connection) and krconn_dir: KRCONN_E_BADHANDLE
   and KRCONN_E_FORKED (verbs objects belong to the process that made them: a forked child makes
   its own context). krconn_ctx_destroy closes the connections still open on it: their handles
   are closed then too. A krconn_mr is a value the caller owns, not a handle: krconn_dereg
   clears it, so deregistering it again returns KRCONN_E_INVAL.

   krconn_strerror explains a code; krconn_describe explains the calling thread's last failure in
   full: the step, device, GID, QPN and errno ("connect: RTR of qp 17 on rxe0 port 1 gid
   ::ffff:10.0.2.15 to qp 23 ...: Connection timed out"). A registration failing with -ENOMEM is
   described with the locked-memory limit (ulimit -l), the usual cause. Why a thread-local record:
   the step, device and QPNs of a failure are known only inside the call, and a code is one int, so
   each thread keeps its last failure's context; krconn_describe adds it when the code it is given
   is that failure's, and nothing else reads it (a code from elsewhere gets its plain text).

   11. LIMITS
   ----------
   One context per process and device port is the intended use (contexts are independent, so
   more work). 65535 connections per physical QP, 48-bit wr_ids, 32 bytes of connect data per
   context (krconn_ctx_set_data), 47-byte service names, directories of up to 65536 slots. The
   directory's slots are in the host's byte order: meta server and clients must agree (all
   little-endian hosts do). A context keeps the stale generations it detected (32 bytes each)
   until it is destroyed. Publishing to a meta server is not authenticated beyond the
   packet's source address: run it on a trusted network. Disconnects are datagrams: one that
   is lost leaves the peer's QP until the peer's next operation fails or its context closes.

   12. DESIGN NOTES
   ----------------
   A connect to a new peer cannot be cheaper than its mandatory steps: one UD round trip and an
   RTR on each side, in sequence (the answering side can move its QP to RTR only once the
   request names the asking QP, the asker only once the answer names the other, and an answer
   sent before the answerer's RTR could see the asker's first packets dropped). Where modify_qp
   is a costly system call, as on Soft-RoCE, that floor alone is a large part of rdma_cm's time,
   so a hundredfold gain over rdma_cm for a new peer needs a transport without per-peer RTR
   (KRCORE's DC), which standard verbs on rxe do not offer. A virtual connect needs no packet
   and costs a table lookup: that is where krconn's large gains are.
*/
#ifndef KRCONN_H
#define KRCONN_H

/* The version: KRCONN_VERSION_MAJOR.MINOR.PATCH, and as a string (see CHANGES.md). */
#define KRCONN_VERSION_MAJOR 0
#define KRCONN_VERSION_MINOR 4
#define KRCONN_VERSION_PATCH 0
#define KRCONN_VERSION "0.4.0"

#if defined(KRCONN_IMPLEMENTATION) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE 1
#endif

#include <stddef.h>
#include <stdint.h>

#if !defined(KRCONN_NO_RDMA) && defined(__has_include)
#if !__has_include(<infiniband/verbs.h>)
#define KRCONN_NO_RDMA 1
#endif
#endif

#ifdef KRCONN_STATIC
#define KRCONN_API static __attribute__((unused))
#else
#define KRCONN_API extern
#endif

#ifdef __cplusplus
extern "C" {
#endif

struct ibv_qp;
struct ibv_mr;

/* Error codes: X(name, value, what krconn_strerror says). Besides these, -errno. */
#define KRCONN_ERRORS(X)                                                                          \
    X(KRCONN_E_NOTSUP, -4000,                                                                     \
      "not supported (built without RDMA: KRCONN_NO_RDMA, or no rdma-core headers)")              \
    X(KRCONN_E_AGAIN, -3999,                                                                      \
      "try again: no QP ready in the pool (KRCONN_CONNECT_NOWAIT) or queue full")                 \
    X(KRCONN_E_TIMEDOUT, -3998,                                                                   \
      "timed out: the peer did not answer before the deadline (dead, absent or unreachable)")     \
    X(KRCONN_E_NOTFOUND, -3997, "no such service in the directory")                               \
    X(KRCONN_E_STALE, -3996,                                                                      \
      "stale address: the context it names is gone (restarted); look it up again")                \
    X(KRCONN_E_REJECTED, -3995, "the peer refused the connection (accept backlog full or no QP)") \
    X(KRCONN_E_PEERDEAD, -3994, "the peer stopped acknowledging (dead or unreachable)")           \
    X(KRCONN_E_CLOSED, -3993, "the peer closed the connection")                                   \
    X(KRCONN_E_QPERR, -3992,                                                                      \
      "the connection's QP is in the error state after a failed operation: close and reconnect")  \
    X(KRCONN_E_INVAL, -3991, "invalid argument to a krconn function")                             \
    X(KRCONN_E_PROTO, -3990, "protocol error from the peer")                                      \
    X(KRCONN_E_FULL, -3989, "the directory is full")                                              \
    X(KRCONN_E_NORECV, -3988, "the peer had no receive posted (RNR retries exhausted)")           \
    X(KRCONN_E_FLUSHED, -3987, "work flushed: the QP was in the error state")                     \
    X(KRCONN_E_NODEV, -3986, "no RDMA device with an active port and a usable GID")               \
    X(KRCONN_E_BADHANDLE, -3985, "not an open krconn handle (closed or destroyed already)")       \
    X(KRCONN_E_FORKED, -3984,                                                                     \
      "this krconn handle was made before fork(): not usable in the child")
#define KRCONN__ERROR_ENUM(name, value, text) name = value,
enum { KRCONN_ERRORS(KRCONN__ERROR_ENUM) };
#undef KRCONN__ERROR_ENUM

/* Levels of the messages a log callback gets. */
enum { KRCONN_LOG_ERROR = 0, KRCONN_LOG_WARN = 1, KRCONN_LOG_INFO = 2, KRCONN_LOG_DEBUG = 3 };

/* Defaults (zero in an opts field means these). */
#define KRCONN_DEFAULT_POOL        8    /* RC QPs kept ready in INIT */
#define KRCONN_DEFAULT_WR          64   /* send and receive queue depth of each RC QP */
#define KRCONN_DEFAULT_TIMEOUT_MS  5000
#define KRCONN_DEFAULT_QKEY        0x4b52434eu
#define KRCONN_DEFAULT_META_PORT   7471
#define KRCONN_DEFAULT_DIR_SLOTS   256
#define KRCONN_DEFAULT_ACK_TIMEOUT 14   /* RC local ACK timeout: 4.096 us * 2^14 = 67 ms */
#define KRCONN_DEFAULT_RETRY_CNT   6    /* RC transport retries */
#define KRCONN_DEFAULT_RNR_RETRY   6    /* RC receiver-not-ready retries */
#define KRCONN_MIN_RNR_TIMER       12   /* 0.64 ms: the least RNR NAK delay asked of a peer */
#define KRCONN_RETRY_FOREVER       7    /* retry_cnt or rnr_retry at this value: refused */
#define KRCONN_DATA_MAX            32   /* bytes of connect data */
#define KRCONN_NAME_MAX            47
#define KRCONN_DIR_BYTES(slots)    (64u + 128u * (size_t)(slots))

typedef struct krconn_ctx krconn_ctx;
typedef struct krconn krconn;
typedef struct krconn_dir krconn_dir;

/* A context's address: what the directory stores. */
typedef struct krconn_addr {
    uint8_t gid[16];
    uint32_t qpn;         /* UD control QP */
    uint32_t qkey;
    uint64_t generation;  /* random, per context; 0 in a connect = accept any */
} krconn_addr;

typedef struct krconn_ctx_opts {
    const char *device;       /* NULL: $KRCONN_DEVICE, else the first device with an active port */
    uint8_t port;             /* 0 = 1 */
    int fixed_gid; /* 1: use gid_index as given; 0: choose (RoCE v2, IPv4-mapped first) */
    int gid_index;
    unsigned pool_size;       /* 0 = KRCONN_DEFAULT_POOL */
    unsigned max_send_wr;     /* 0 = KRCONN_DEFAULT_WR */
    unsigned max_recv_wr;     /* 0 = KRCONN_DEFAULT_WR */
    unsigned max_inline;      /* 0 = none */
    unsigned accept_backlog;  /* 0 = incoming connections are served but not queued for accept */
    uint32_t qkey;            /* 0 = KRCONN_DEFAULT_QKEY */
    /* RC local ACK timeout, 4.096 us * 2^timeout; 0 = KRCONN_DEFAULT_ACK_TIMEOUT (14) */
    uint8_t timeout;
    uint8_t retry_cnt;    /* 0 = KRCONN_DEFAULT_RETRY_CNT (6); 7 is refused (rxe: forever) */
    uint8_t rnr_retry;    /* 0 = KRCONN_DEFAULT_RNR_RETRY (6); 7 (forever) is refused */
    uint8_t min_rnr_timer; /* values below KRCONN_MIN_RNR_TIMER (12, 0.64 ms) are raised to it */
    unsigned flags;           /* KRCONN_CTX_* */
    /* > 0: the context's thread pings each physical connection that saw no completion for this
       long and marks it dead when the peer stops answering (section 7); 0 = off */
    unsigned keepalive_ms;
    /* one line per message, KRCONN_LOG_* levels; NULL: silent, or stderr when $KRCONN_DEBUG */
    void (*log)(int level, const char *msg, void *user);
    void *log_user;
} krconn_ctx_opts;

/* The pool is filled once at create and then only by QPs that closed connections give back: a
   fixed QP budget (connects beyond it create QPs, or fail with KRCONN_E_AGAIN if NOWAIT). */
#define KRCONN_CTX_NO_REFILL 1u
/* Every RC QP's CQ this context creates (pool and fallback) gets its own completion channel, so a
   program can sleep in poll(2) instead of spinning: krconn_event_fd, krconn_arm, krconn_event_ack
   (section 6). */
#define KRCONN_CTX_EVENTS 2u

#define KRCONN_CONNECT_NOWAIT     1u /* pool empty: KRCONN_E_AGAIN instead of creating a QP */
/* Always a new physical connection, private to this handle on both sides: no later connect (by
   this context or the peer's) becomes virtual over it (section 4). */
#define KRCONN_CONNECT_NO_VIRTUAL 2u

typedef struct krconn_connect_opts {
    int timeout_ms;           /* 0 = KRCONN_DEFAULT_TIMEOUT_MS */
    unsigned flags;           /* KRCONN_CONNECT_* */
    /* A physical connect calls before(qp, user) with its QP in INIT, before it asks the peer:
       post receives there (ibv_post_recv), so that the peer's first message after its side is
       up finds one. Non-zero fails the connect with that code (the QP's receives are dropped
       with it). Not called for a virtual connect (check krconn_is_virtual). NULL: none. */
    int (*before)(struct ibv_qp *qp, void *user);
    void *user;
} krconn_connect_opts;

typedef struct krconn_meta_opts {
    uint16_t port;            /* TCP bootstrap port; 0 = KRCONN_DEFAULT_META_PORT */
    unsigned slots;           /* 0 = KRCONN_DEFAULT_DIR_SLOTS (at most 65536) */
} krconn_meta_opts;

typedef struct krconn_stats {
    uint64_t rx;              /* datagrams received on the UD QP */
    uint64_t rx_bad;          /* dropped: failed completion, wrong size, magic, version, type */
    uint64_t rx_forged;       /* dropped: source GID/QPN disagree with the packet, unknown nonce */
    uint64_t rx_replay; /* requests seen before (answered again if still connected, else dropped) */
    uint64_t rx_stale;        /* requests naming another generation: rejected */
    uint64_t connects;        /* physical connections made by this side */
    uint64_t virtual_connects;/* connections that shared an existing physical QP */
    uint64_t accepts;         /* physical connections made at a peer's request */
    uint64_t stale_detected;  /* stale generations detected by this side, each counted once */
    uint64_t pool_created;    /* QPs created by the refill thread */
    uint64_t pool_fallback;   /* QPs a connect had to create itself */
    uint64_t pool_recycled;   /* QPs reset and returned to the pool */
    /* where a physical connect's time goes, summed over `connects` (this side asking) and
       `accepts` (this side answering), in nanoseconds */
    uint64_t ns_pool;         /* taking a QP (from the pool, or creating one) */
    uint64_t ns_request; /* the UD request until its answer: the round trip and the peer's work */
    uint64_t ns_modify;       /* this side's RTR and RTS */
    uint64_t ns_modify_rtr;   /* of which the RTR */
    uint64_t ns_accept;       /* answering a request: QP, RTR, sending the answer */
    uint64_t ns_accept_modify;/* of which the RTR */
    uint64_t ns_accept_send;  /* of which posting the answer */
    uint64_t ns_accept_rts;   /* the RTS that follows the answer */
    uint64_t keepalive_sent;  /* background keepalive pings posted (keepalive_ms) */
    uint64_t keepalive_dead;  /* physical connections the keepalive found dead */
    uint32_t pool_ready;      /* QPs in the pool now (resting ones too) */
    uint32_t physical;        /* physical connections now */
    uint32_t connections;     /* krconn handles now */
    uint64_t ud_resets;       /* times the UD QP failed and was reset in place (same number) */
} krconn_stats;

/* Registered memory. */
typedef struct krconn_mr {
    void *addr;
    size_t len;
    uint32_t lkey, rkey;
    struct ibv_mr *mr;
} krconn_mr;

/* A completion. wr_id as posted (48 bits); status 0 or a KRCONN_E_* / -errno code. */
enum { KRCONN_OP_SEND = 1, KRCONN_OP_RECV, KRCONN_OP_WRITE, KRCONN_OP_READ, KRCONN_OP_CAS,
       KRCONN_OP_FAA, KRCONN_OP_OTHER };
typedef struct krconn_wc {
    uint64_t wr_id;
    int status;
    int op;                   /* KRCONN_OP_* */
    uint32_t byte_len;        /* receives */
    uint32_t imm;             /* receives with immediate data (host order) */
} krconn_wc;

/* Post flags. */
#define KRCONN_UNSIGNALED 1u  /* no completion unless it fails */
#define KRCONN_INLINE     2u  /* copy the data into the work request (len <= max_inline) */
#define KRCONN_FENCE      4u  /* wait for earlier READs and atomics first */

KRCONN_API const char *krconn_strerror(int code);
KRCONN_API const char *krconn_describe(int code, char *buf, size_t len);

KRCONN_API int krconn_ctx_create(const krconn_ctx_opts *opts, krconn_ctx **out);
KRCONN_API int krconn_ctx_destroy(krconn_ctx *ctx);
KRCONN_API int krconn_ctx_addr(const krconn_ctx *ctx, krconn_addr *out);
KRCONN_API int krconn_ctx_set_data(krconn_ctx *ctx, const void *data, size_t len);
KRCONN_API int krconn_ctx_get_stats(krconn_ctx *ctx, krconn_stats *out);
/* The former name of krconn_ctx_get_stats, deprecated; it keeps working. */
static inline int krconn_ctx_stats(krconn_ctx *ctx, krconn_stats *out)
{
    return krconn_ctx_get_stats(ctx, out);
}
KRCONN_API const char *krconn_ctx_device(const krconn_ctx *ctx);

/* "GID/QPN/QKEY/GENERATION" (GID as IPv6 text, numbers in hex); parse accepts what format wrote. */
KRCONN_API int krconn_addr_format(const krconn_addr *a, char *buf, size_t len);
KRCONN_API int krconn_addr_parse(const char *s, krconn_addr *out);

KRCONN_API int krconn_connect(krconn_ctx *ctx, const krconn_addr *peer,
                              const krconn_connect_opts *opts, krconn **out);
KRCONN_API int krconn_connect_name(krconn_ctx *ctx, krconn_dir *dir, const char *name,
                                   const krconn_connect_opts *opts, krconn **out);
/* timeout_ms < 0: do not wait (KRCONN_E_AGAIN when none is queued); 0 = the default. */
KRCONN_API int krconn_accept(krconn_ctx *ctx, int timeout_ms, krconn **out);
/* An eventfd (non-blocking) that becomes readable when a connection is queued for
   krconn_accept; read it to clear it. -1 without accept_backlog (or KRCONN_E_NOTSUP). */
KRCONN_API int krconn_accept_fd(const krconn_ctx *ctx);
KRCONN_API int krconn_disconnect(krconn *c);
KRCONN_API int krconn_is_virtual(const krconn *c);
KRCONN_API int krconn_peer_addr(const krconn *c, krconn_addr *out);
KRCONN_API const void *krconn_peer_data(const krconn *c); /* KRCONN_DATA_MAX bytes, 8-aligned */
KRCONN_API struct ibv_qp *krconn_qp(const krconn *c);

KRCONN_API int krconn_dir_shm(void *mem, size_t len, krconn_dir **out);
KRCONN_API int krconn_dir_meta(krconn_ctx *ctx, const char *where, int timeout_ms,
                               krconn_dir **out);
KRCONN_API int krconn_dir_close(krconn_dir *dir);
KRCONN_API int krconn_meta_serve(krconn_ctx *ctx, const krconn_meta_opts *opts);
KRCONN_API int krconn_publish(krconn_ctx *ctx, krconn_dir *dir, const char *name,
                              int timeout_ms);
/* Withdraw name, published by ctx's address (section 5): 0, KRCONN_E_NOTFOUND, or as publish. */
KRCONN_API int krconn_unpublish(krconn_ctx *ctx, krconn_dir *dir, const char *name,
                                int timeout_ms);
KRCONN_API int krconn_lookup(krconn_dir *dir, const char *name, int timeout_ms,
                             krconn_addr *out);

/* access 0 = local write, remote read, write and atomics (IBV_ACCESS_* otherwise). */
KRCONN_API int krconn_reg(krconn_ctx *ctx, void *addr, size_t len, int access, krconn_mr *out);
KRCONN_API int krconn_dereg(krconn_mr *mr);

KRCONN_API int krconn_post_send(krconn *c, uint64_t wr_id, const krconn_mr *mr, const void *buf,
                                uint32_t len, unsigned flags);
KRCONN_API int krconn_post_recv(krconn *c, uint64_t wr_id, const krconn_mr *mr, void *buf,
                                uint32_t len);
KRCONN_API int krconn_write(krconn *c, uint64_t wr_id, const krconn_mr *mr, const void *buf,
                            uint32_t len, uint64_t raddr, uint32_t rkey, unsigned flags);
KRCONN_API int krconn_read(krconn *c, uint64_t wr_id, const krconn_mr *mr, void *buf,
                           uint32_t len, uint64_t raddr, uint32_t rkey, unsigned flags);
KRCONN_API int krconn_cas(krconn *c, uint64_t wr_id, const krconn_mr *mr, uint64_t *old,
                          uint64_t raddr, uint32_t rkey, uint64_t expect, uint64_t desired,
                          unsigned flags);
KRCONN_API int krconn_faa(krconn *c, uint64_t wr_id, const krconn_mr *mr, uint64_t *old,
                          uint64_t raddr, uint32_t rkey, uint64_t add, unsigned flags);
/* Up to max completions of this connection: the number (>= 1), 0 when timeout_ms is 0 and none
   is there, KRCONN_E_TIMEDOUT, or, when none is left, KRCONN_E_CLOSED (the peer closed) or
   KRCONN_E_PEERDEAD (an operation or the keepalive found the peer dead). */
KRCONN_API int krconn_poll(krconn *c, krconn_wc *wc, int max, int timeout_ms);
/* One completion: its status (0 = success), or KRCONN_E_TIMEDOUT (or KRCONN_E_CLOSED /
   KRCONN_E_PEERDEAD as krconn_poll). */
KRCONN_API int krconn_wait(krconn *c, krconn_wc *wc, int timeout_ms);
/* Keepalive: a zero-byte RDMA WRITE; 0, KRCONN_E_PEERDEAD, KRCONN_E_CLOSED or a timeout. Use it
   on a connection with no other work outstanding. */
KRCONN_API int krconn_ping(krconn *c, int timeout_ms);
/* The wr_id to give a work request posted with raw verbs on krconn_qp(c) so that krconn_poll on
   c returns its completion with wr_id == user_id (the low 48 bits of user_id are kept). */
KRCONN_API uint64_t krconn_wr_id(const krconn *c, uint64_t user_id);

/* Completion events (a context made with KRCONN_CTX_EVENTS; section 6). The channel's fd (non-
   blocking; readable once an armed CQ got a completion), or KRCONN_E_NOTSUP without EVENTS. */
KRCONN_API int krconn_event_fd(const krconn *c);
/* Ask for one event at the CQ's next completion (ibv_req_notify_cq); 0 or -errno. Poll again
   after arming: a completion that came before the arm raises no event. */
KRCONN_API int krconn_arm(krconn *c);
/* Take every event pending on the channel without blocking and acknowledge them: how many
   (>= 0), or -errno / KRCONN_E_NOTSUP. */
KRCONN_API int krconn_event_ack(krconn *c);

#ifdef __cplusplus
}
#endif

/* With shmheap.h included first: the directory under heap h's named root "krconn.dir", made on
   first use with `slots` slots (0 = KRCONN_DEFAULT_DIR_SLOTS). Make it once before publishers
   race (two first users may each make one; the later root wins and the other's table is lost). */
#ifdef SHMHEAP_H
static inline int krconn_dir_heap(shmheap *h, unsigned slots, krconn_dir **out)
{
    void *t = shmheap_root_get(h, "krconn.dir");
    if (!slots) slots = KRCONN_DEFAULT_DIR_SLOTS;
    if (!t) {
        size_t n = KRCONN_DIR_BYTES(slots);
        void *m = shmheap_calloc(h, 1, n);
        if (!m) return -12; /* ENOMEM */
        int rc = krconn_dir_shm(m, n, out);
        if (rc) { shmheap_free(h, m); return rc; }
        krconn_dir_close(*out);
        shmheap_root_set(h, "krconn.dir", m);
        t = shmheap_root_get(h, "krconn.dir");
    }
    return krconn_dir_shm(t, shmheap_usable_size(h, t), out);
}
#endif

#endif /* KRCONN_H */

/* >>implementation - includes, options, constants ---------------------------------------------- */
#if defined(KRCONN_IMPLEMENTATION) && !defined(KRCONN_IMPLEMENTATION_ONCE)
#define KRCONN_IMPLEMENTATION_ONCE

#if defined(KRCONN_MALLOC) != defined(KRCONN_FREE)
#error "define both KRCONN_MALLOC and KRCONN_FREE, or neither"
#endif
#ifndef KRCONN_MALLOC
#include <stdlib.h>
#define KRCONN_MALLOC(n) malloc(n)
#define KRCONN_FREE(p) free(p)
#endif
#ifndef KRCONN_ASSERT
#include <assert.h>
#define KRCONN_ASSERT(x) assert(x)
#endif

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* >>errors - errors, and the calling thread's last failure ------------------------------------- */
#include "impl/errors.h"

KRCONN_API const char *krconn_strerror(int code)
{
    switch (code) {
#define RCP__ERROR_CASE(name, value, text) case name: return text;
#include "impl/errors.h" /* the codes of every rpcool header included before this point */
#undef RCP__ERROR_CASE
    default: return rcp__errtext(code, RCP__ERR_DECLARED);
    }
}

#if defined(__cplusplus)
#define KRCONN__TLS thread_local
#else
#define KRCONN__TLS _Thread_local
#endif
static KRCONN__TLS int krconn__last_code;
static KRCONN__TLS char krconn__last_text[320];

KRCONN_API const char *krconn_describe(int code, char *buf, size_t len)
{
    if (!buf || !len) return "";
    if (code && code == krconn__last_code && krconn__last_text[0])
        snprintf(buf, len, "%s: %s", krconn__last_text, krconn_strerror(code));
    else snprintf(buf, len, "%s", krconn_strerror(code));
    return buf;
}

KRCONN_API int krconn_addr_format(const krconn_addr *a, char *buf, size_t len)
{
    static const char hx[] = "0123456789abcdef";
    char g[40];
    int k = 0;
    if (!a || !buf) return KRCONN_E_INVAL;
    for (int i = 0; i < 16; i++) {
        g[k++] = hx[a->gid[i] >> 4];
        g[k++] = hx[a->gid[i] & 15];
        if (i & 1 && i < 15) g[k++] = ':';
    }
    g[k] = 0;
    int n = snprintf(buf, len, "%s/%x/%x/%llx", g, (unsigned)a->qpn, (unsigned)a->qkey,
                     (unsigned long long)a->generation);
    return n < 0 || (size_t)n >= len ? KRCONN_E_INVAL : 0;
}

KRCONN_API int krconn_addr_parse(const char *s, krconn_addr *out)
{
    unsigned v[8], qpn, qkey;
    unsigned long long gen;
    char end;
    if (!s || !out) return KRCONN_E_INVAL;
    if (sscanf(s, "%4x:%4x:%4x:%4x:%4x:%4x:%4x:%4x/%x/%x/%llx%c", &v[0], &v[1], &v[2], &v[3],
               &v[4], &v[5], &v[6], &v[7], &qpn, &qkey, &gen, &end) != 11)
        return KRCONN_E_INVAL;
    if (qpn > 0xffffff) return KRCONN_E_INVAL;
    for (int i = 0; i < 8; i++) {
        out->gid[2 * i] = (uint8_t)(v[i] >> 8);
        out->gid[2 * i + 1] = (uint8_t)v[i];
    }
    out->qpn = qpn;
    out->qkey = qkey;
    out->generation = gen;
    return 0;
}

#ifdef KRCONN_NO_RDMA
/* >>no_rdma - without RDMA: every call that needs a device says so ----------------------------- */
KRCONN_API int krconn_ctx_create(const krconn_ctx_opts *opts, krconn_ctx **out)
{
    (void)opts;
    if (out) *out = NULL;
    return KRCONN_E_NOTSUP;
}
KRCONN_API int krconn_ctx_destroy(krconn_ctx *ctx) { (void)ctx; return KRCONN_E_NOTSUP; }
KRCONN_API int krconn_ctx_addr(const krconn_ctx *ctx, krconn_addr *o)
{
    (void)ctx, (void)o;
    return KRCONN_E_NOTSUP;
}
KRCONN_API int krconn_ctx_set_data(krconn_ctx *ctx, const void *data, size_t len)
{
    (void)ctx, (void)data, (void)len;
    return KRCONN_E_NOTSUP;
}
KRCONN_API int krconn_ctx_get_stats(krconn_ctx *ctx, krconn_stats *out)
{
    (void)ctx, (void)out;
    return KRCONN_E_NOTSUP;
}
KRCONN_API const char *krconn_ctx_device(const krconn_ctx *ctx) { (void)ctx; return ""; }
KRCONN_API int krconn_connect(krconn_ctx *ctx, const krconn_addr *p, const krconn_connect_opts *o,
                              krconn **out)
{
    (void)ctx, (void)p, (void)o;
    if (out) *out = NULL;
    return KRCONN_E_NOTSUP;
}
KRCONN_API int krconn_connect_name(krconn_ctx *ctx, krconn_dir *dir, const char *name,
                                   const krconn_connect_opts *opts, krconn **out)
{
    (void)ctx, (void)dir, (void)name, (void)opts;
    if (out) *out = NULL;
    return KRCONN_E_NOTSUP;
}
KRCONN_API int krconn_accept(krconn_ctx *ctx, int timeout_ms, krconn **out)
{
    (void)ctx, (void)timeout_ms;
    if (out) *out = NULL;
    return KRCONN_E_NOTSUP;
}
KRCONN_API int krconn_accept_fd(const krconn_ctx *ctx) { (void)ctx; return KRCONN_E_NOTSUP; }
KRCONN_API int krconn_disconnect(krconn *c) { (void)c; return KRCONN_E_NOTSUP; }
KRCONN_API int krconn_is_virtual(const krconn *c) { (void)c; return KRCONN_E_NOTSUP; }
KRCONN_API int krconn_peer_addr(const krconn *c, krconn_addr *o)
{
    (void)c, (void)o;
    return KRCONN_E_NOTSUP;
}
KRCONN_API const void *krconn_peer_data(const krconn *c) { (void)c; return NULL; }
KRCONN_API struct ibv_qp *krconn_qp(const krconn *c) { (void)c; return NULL; }
KRCONN_API int krconn_dir_shm(void *m, size_t n, krconn_dir **out)
{
    (void)m, (void)n;
    if (out) *out = NULL;
    return KRCONN_E_NOTSUP;
}
KRCONN_API int krconn_dir_meta(krconn_ctx *ctx, const char *where, int timeout_ms, krconn_dir **out)
{
    (void)ctx, (void)where, (void)timeout_ms;
    if (out) *out = NULL;
    return KRCONN_E_NOTSUP;
}
KRCONN_API int krconn_dir_close(krconn_dir *dir) { (void)dir; return KRCONN_E_NOTSUP; }
KRCONN_API int krconn_meta_serve(krconn_ctx *c, const krconn_meta_opts *o)
{
    (void)c, (void)o;
    return KRCONN_E_NOTSUP;
}
KRCONN_API int krconn_publish(krconn_ctx *ctx, krconn_dir *dir, const char *name, int timeout_ms)
{
    (void)ctx, (void)dir, (void)name, (void)timeout_ms;
    return KRCONN_E_NOTSUP;
}
KRCONN_API int krconn_unpublish(krconn_ctx *ctx, krconn_dir *dir, const char *name, int timeout_ms)
{
    (void)ctx, (void)dir, (void)name, (void)timeout_ms;
    return KRCONN_E_NOTSUP;
}
KRCONN_API int krconn_lookup(krconn_dir *dir, const char *name, int timeout_ms, krconn_addr *out)
{
    (void)dir, (void)name, (void)timeout_ms, (void)out;
    return KRCONN_E_NOTSUP;
}
KRCONN_API int krconn_reg(krconn_ctx *ctx, void *addr, size_t len, int access, krconn_mr *out)
{
    (void)ctx, (void)addr, (void)len, (void)access, (void)out;
    return KRCONN_E_NOTSUP;
}
KRCONN_API int krconn_dereg(krconn_mr *mr) { (void)mr; return KRCONN_E_NOTSUP; }
KRCONN_API int krconn_post_send(krconn *c, uint64_t w, const krconn_mr *mr, const void *b,
                                uint32_t n, unsigned f)
{
    (void)c, (void)w, (void)mr, (void)b, (void)n, (void)f;
    return KRCONN_E_NOTSUP;
}
KRCONN_API int krconn_post_recv(krconn *c, uint64_t wr_id, const krconn_mr *mr, void *buf,
                                uint32_t len)
{
    (void)c, (void)wr_id, (void)mr, (void)buf, (void)len;
    return KRCONN_E_NOTSUP;
}
KRCONN_API int krconn_write(krconn *c, uint64_t wr_id, const krconn_mr *mr, const void *buf,
                            uint32_t len, uint64_t raddr, uint32_t rkey, unsigned flags)
{
    (void)c, (void)wr_id, (void)mr, (void)buf, (void)len, (void)raddr, (void)rkey, (void)flags;
    return KRCONN_E_NOTSUP;
}
KRCONN_API int krconn_read(krconn *c, uint64_t wr_id, const krconn_mr *mr, void *buf, uint32_t len,
                           uint64_t raddr, uint32_t rkey, unsigned flags)
{
    (void)c, (void)wr_id, (void)mr, (void)buf, (void)len, (void)raddr, (void)rkey, (void)flags;
    return KRCONN_E_NOTSUP;
}
KRCONN_API int krconn_cas(krconn *c, uint64_t wr_id, const krconn_mr *mr, uint64_t *old,
                          uint64_t raddr, uint32_t rkey, uint64_t expect, uint64_t desired,
                          unsigned flags)
{
    (void)c, (void)wr_id, (void)mr, (void)old, (void)raddr, (void)rkey, (void)expect, (void)desired,
        (void)flags;
    return KRCONN_E_NOTSUP;
}
KRCONN_API int krconn_faa(krconn *c, uint64_t wr_id, const krconn_mr *mr, uint64_t *old,
                          uint64_t raddr, uint32_t rkey, uint64_t add, unsigned flags)
{
    (void)c, (void)wr_id, (void)mr, (void)old, (void)raddr, (void)rkey, (void)add, (void)flags;
    return KRCONN_E_NOTSUP;
}
KRCONN_API int krconn_poll(krconn *c, krconn_wc *wc, int max, int timeout_ms)
{
    (void)c, (void)wc, (void)max, (void)timeout_ms;
    return KRCONN_E_NOTSUP;
}
KRCONN_API int krconn_wait(krconn *c, krconn_wc *wc, int timeout_ms)
{
    (void)c, (void)wc, (void)timeout_ms;
    return KRCONN_E_NOTSUP;
}
KRCONN_API int krconn_ping(krconn *c, int t) { (void)c; (void)t; return KRCONN_E_NOTSUP; }
KRCONN_API uint64_t krconn_wr_id(const krconn *c, uint64_t user_id)
{
    (void)c;
    return user_id & ((1ull << 48) - 1);
}
KRCONN_API int krconn_event_fd(const krconn *c) { (void)c; return KRCONN_E_NOTSUP; }
KRCONN_API int krconn_arm(krconn *c) { (void)c; return KRCONN_E_NOTSUP; }
KRCONN_API int krconn_event_ack(krconn *c) { (void)c; return KRCONN_E_NOTSUP; }
#else /* RDMA */

#include "impl/verbs.h"
#include "impl/handle.h"
#include <netdb.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

/* The handle rule (ERRORS, impl/handle.h): 0 for a handle open in this process (or NULL, left
   to each function), else its code. */
static inline int krconn__hk(const void *h)
{
    return rcp__handle_code(h, KRCONN_E_BADHANDLE, KRCONN_E_FORKED);
}
static inline int krconn__hk_take(const void *h)
{
    return rcp__handle_take_code(h, KRCONN_E_BADHANDLE, KRCONN_E_FORKED);
}
#define KRCONN__HCHECK(h) RCP__HRETURN(krconn__hk(h))
#define KRCONN__HCHECK_PTR(h) RCP__HRETURN_NULL(krconn__hk(h))

/* >>structures - private structures and the wire format ---------------------------------------- */

#define KRCONN__MAGIC 0x4b52434eu   /* "KRCN" */
#define KRCONN__PROTO 1
#define KRCONN__MSG 160             /* every control message has exactly this size */
#define KRCONN__SLOT 512            /* UD buffer slot: GRH + message, room to see oversize ones */
#define KRCONN__NRX 64
#define KRCONN__NTX 32
#define KRCONN__NPEND 64
#define KRCONN__NRECENT 256
#define KRCONN__NAH 64
#define KRCONN__NNAMES 64
#define KRCONN__TAG_SHIFT 48
#define KRCONN__WRID_MASK ((1ull << KRCONN__TAG_SHIFT) - 1)
#define KRCONN__REST_EXTRA_NS 50000000ull /* a pool QP's rest beyond its peer's retry window */
#define KRCONN__RESEND_FIRST_NS 50000000ull /* a UD request is sent again after 50 ms, */
#define KRCONN__RESEND_MAX_NS 800000000ull  /* doubling up to 1.6 s */
#define KRCONN__REQ_SPINS 16                /* a waiting request spins this often, then naps */
#define KRCONN__REQ_NAP_NS 200000           /* 0.2 ms, on the answer's futex */
#define KRCONN__TX_REAP_NS 1000000000ull    /* longest wait for a UD send's completion */
#define KRCONN__KA_TAG 0xffffu      /* the background keepalive's completions; not a handle */

enum { KRCONN__REQ = 1, KRCONN__REP, KRCONN__REJ, KRCONN__DISC, KRCONN__PUB, KRCONN__PUBACK,
       KRCONN__UNPUB };
enum { KRCONN__PUBACK_OK = 0, KRCONN__PUBACK_FULL = 1, KRCONN__PUBACK_NOTFOUND = 2 };
enum { KRCONN__REJ_STALE = 1, KRCONN__REJ_BUSY = 2 };
/* REQ's code: KRCONN_CONNECT_NO_VIRTUAL (the connection is shared by neither side) */
enum { KRCONN__REQ_PRIVATE = 1 };

/* A control message, unpacked. On the wire: big-endian at fixed offsets (krconn__msg_pack). */
typedef struct krconn__msg {
    uint8_t type;
    uint16_t code;
    uint64_t nonce, src_gen, dst_gen;
    uint8_t src_gid[16];
    uint32_t src_udqpn;
    uint32_t qpn, psn;      /* REQ/REP: sender's RC QP; DISC: sender's RC QP, aux32 = receiver's */
    uint32_t aux32;         /* REP from a meta server: slots; DISC: receiver's RC QPN */
    uint64_t aux64;         /* REP from a meta server: table address */
    uint32_t aux32b;        /* REP from a meta server: rkey */
    uint8_t data[KRCONN_DATA_MAX];
    char name[48];          /* PUB */
} krconn__msg;

typedef struct krconn__phys krconn__phys;

struct krconn {
    krconn_ctx *ctx;
    krconn__phys *p;
    uint32_t tag;
    int virt;
    krconn_wc *stash;       /* completions another poller took for us */
    uint32_t st_head, st_n, st_cap;
};

enum { KRCONN__CONNECTING = 1, KRCONN__READY, KRCONN__GONE };

struct krconn__phys {
    krconn__phys *next;
    krconn_ctx *ctx;
    struct ibv_qp *qp;
    struct ibv_cq *cq;
    krconn_addr peer;
    uint32_t rqpn, rpsn, psn;
    uint64_t nonce;
    int state;              /* KRCONN__* (under ctx->mu) */
    int err;                /* code for new posts, 0 while usable */
    int refs;               /* krconn handles + held */
    int held;               /* 1: the context holds it (accepted, not handed out yet) */
    int shared;             /* 1: found by later connects to the same peer (0: NO_VIRTUAL's) */
    int queued;             /* in the accept queue */
    pthread_mutex_t mu;     /* CQ polling and the tag table */
    krconn **v;
    uint32_t nv;
    uint64_t peer_data[KRCONN_DATA_MAX / 8]; /* 8-byte aligned: callers cast it to structs */
    uint32_t meta_slots, meta_rkey; /* the peer is a meta server: its table */
    uint64_t meta_addr;
    /* keepalive (under mu): completions seen, the count at the last check, when, and whether a
       ping is out */
    uint64_t act, ka_act, ka_last;
    int ka_out;
};

typedef struct krconn__pending {
    int used;
    uint32_t state;         /* 0 waiting, 1 answered (a futex word) */
    uint64_t nonce;
    uint8_t gid[16];
    uint32_t udqpn;
    krconn__msg m;          /* the answer */
} krconn__pending;

typedef struct krconn__recent {
    uint8_t gid[16];
    uint32_t udqpn;
    uint64_t gen, nonce;
    krconn__phys *p;        /* may be gone: compared by pointer only while listed */
} krconn__recent;

typedef struct krconn__ah { uint8_t gid[16]; struct ibv_ah *ah; uint64_t used; } krconn__ah;

typedef struct krconn__name {
    const krconn_dir *dir;
    char name[48];
    krconn_addr a;
    int valid;
} krconn__name;

/* A peer's generation found stale (section 5): never used again, through any directory. */
typedef struct krconn__dead { uint8_t gid[16]; uint32_t qpn; uint64_t gen; } krconn__dead;

typedef struct krconn__poolqp {
    struct ibv_qp *qp;
    struct ibv_cq *cq;
    uint64_t ready_ns; /* a QP given back rests until then (krconn__pool_give); 0: fresh */
} krconn__poolqp;

struct krconn_ctx {
    rcp__verbs_dev d;
    krconn_ctx_opts o;
    struct rcp__logger lg;
    uint64_t gen;
    krconn_addr addr;
    struct ibv_cq *ud_rcq, *ud_scq;
    struct ibv_qp *ud;
    struct ibv_mr *ud_mr;
    unsigned char *ud_buf;          /* NRX receive slots, then NTX send slots */
    unsigned tx_next, tx_out;
    pthread_mutex_t mu, rx_mu, tx_mu;
    krconn__poolqp *pool;
    unsigned pool_n, pool_cap, pool_target;
    krconn__phys *phys;
    krconn__phys **acq;             /* accept queue */
    unsigned acq_head, acq_n;
    krconn__pending pend[KRCONN__NPEND];
    krconn__recent recent[KRCONN__NRECENT];
    unsigned recent_next;
    krconn__ah ahs[KRCONN__NAH];
    uint64_t ah_clock;
    krconn__name names[KRCONN__NNAMES];
    unsigned names_next;
    krconn__dead *dead;             /* stale generations, for the context's life */
    unsigned ndead, dead_cap;
    uint8_t data[KRCONN_DATA_MAX];
    krconn_stats st;
    uint32_t nconn;
    pthread_t thr;
    int thr_started, stop, evfd;
    int ud_err;             /* the UD QP failed (a send or receive in error): reset by the thread */
    int accfd;              /* eventfd: a connection was queued for krconn_accept (or -1) */
    /* meta server */
    unsigned char *meta_tab;
    size_t meta_len;
    struct ibv_mr *meta_mr;
    int meta_fd;
    uint64_t rng;
};

/* The directory table: 64-byte header, then slots of 128 bytes. */
#define KRCONN__DIR_MAGIC 0x52494443524b0001ull
#define KRCONN__DIR_VERSION 1u
typedef struct krconn__dhdr {
    uint64_t magic;
    uint32_t version, nslots;
    uint64_t pad[6];
} krconn__dhdr;
typedef struct krconn__dent {
    uint64_t seq;           /* 0 empty, odd while written */
    uint64_t gen;
    uint32_t qpn, qkey;
    uint8_t gid[16];
    char name[48];
    uint64_t check;         /* FNV-1a over seq and the fields: a torn copy does not match */
    uint64_t pad[4];
} krconn__dent;
RCP__STATIC_ASSERT(sizeof(krconn__dhdr) == 64, "directory header is 64 bytes");
RCP__STATIC_ASSERT(sizeof(krconn__dent) == 128, "directory slot is 128 bytes");

enum { KRCONN__DIR_SHM = 1, KRCONN__DIR_META };
struct krconn_dir {
    int kind;
    krconn__dhdr *hdr;      /* shm */
    krconn__dent *ent;
    uint32_t nslots;
    krconn_ctx *ctx;        /* meta */
    krconn *conn;
    krconn_mr buf;
    krconn__dent *lbuf;
    uint64_t raddr;
    uint32_t rkey;
    krconn_addr meta;
    pthread_mutex_t mu;
};

/* >>helpers - helpers: logging, failures, encoding --------------------------------------------- */

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static void krconn__log(krconn_ctx *ctx, int level, const char *fmt, ...)
{
    static int env = -1;
    struct rcp__logger lg;
    va_list ap;
    if (ctx) lg = ctx->lg;
    else lg = rcp__logger_pick(NULL, NULL, &env, "KRCONN_DEBUG", "krconn");
    va_start(ap, fmt);
    rcp__logv(&lg, level, fmt, ap);
    va_end(ap);
}

static void krconn__gidstr(const uint8_t *g, char *buf, size_t len)
{
    if (!inet_ntop(AF_INET6, g, buf, (socklen_t)len)) snprintf(buf, len, "?");
}

/* Record the calling thread's failure for krconn_describe, and log it. Returns code. */
static int krconn__fail(krconn_ctx *ctx, int code, const char *step, uint32_t qpn,
                        const uint8_t *peer_gid, uint32_t peer_qpn)
{
    char g[64] = "", pg[64] = "", peer[120] = "";
    if (ctx) krconn__gidstr(ctx->d.gid.raw, g, sizeof g);
    if (peer_gid) {
        krconn__gidstr(peer_gid, pg, sizeof pg);
        snprintf(peer, sizeof peer, " to qp %u gid %s", peer_qpn, pg);
    }
    if (ctx)
        snprintf(krconn__last_text, sizeof krconn__last_text, "%s: qp %u on %s port %u gid %s%s",
                 step, qpn, ctx->d.name, ctx->d.port, g, peer);
    else snprintf(krconn__last_text, sizeof krconn__last_text, "%s%s", step, peer);
    if (code < 0 && code > -1000) {
        size_t n = strlen(krconn__last_text);
        snprintf(krconn__last_text + n, sizeof krconn__last_text - n, " (errno %d)", -code);
    }
    krconn__last_code = code;
    krconn__log(ctx, KRCONN_LOG_ERROR, "%s: %s", krconn__last_text, krconn_strerror(code));
    return code;
}

static uint64_t krconn__mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t krconn__random(krconn_ctx *ctx)
{
    uint64_t c = rcp__fetch_add(&ctx->rng, 0x9e3779b97f4a7c15ull);
    return krconn__mix(c ^ ctx->gen);
}

static uint64_t krconn__fnv(const void *p, size_t n, uint64_t h)
{
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t krconn__deadline(int timeout_ms)
{
    if (timeout_ms <= 0) timeout_ms = KRCONN_DEFAULT_TIMEOUT_MS;
    return rcp__now_ns() + (uint64_t)timeout_ms * 1000000ull;
}

static void krconn__put64(unsigned char *p, uint64_t v)
{
    rcp__verbs_put32(p, (uint32_t)(v >> 32));
    rcp__verbs_put32(p + 4, (uint32_t)v);
}
static uint64_t krconn__get64(const unsigned char *p)
{
    return (uint64_t)rcp__verbs_get32(p) << 32 | rcp__verbs_get32(p + 4);
}

static void krconn__msg_pack(const krconn__msg *m, unsigned char *b)
{
    memset(b, 0, KRCONN__MSG);
    rcp__verbs_put32(b, KRCONN__MAGIC);
    b[4] = KRCONN__PROTO;
    b[5] = m->type;
    b[6] = (unsigned char)(m->code >> 8);
    b[7] = (unsigned char)m->code;
    krconn__put64(b + 8, m->nonce);
    krconn__put64(b + 16, m->src_gen);
    krconn__put64(b + 24, m->dst_gen);
    memcpy(b + 32, m->src_gid, 16);
    rcp__verbs_put32(b + 48, m->src_udqpn);
    rcp__verbs_put32(b + 52, m->qpn);
    rcp__verbs_put32(b + 56, m->psn);
    rcp__verbs_put32(b + 60, m->aux32);
    krconn__put64(b + 64, m->aux64);
    rcp__verbs_put32(b + 72, m->aux32b);
    memcpy(b + 80, m->data, KRCONN_DATA_MAX);
    memcpy(b + 112, m->name, 48);
}

/* 0, or -1 if these bytes are not a message of this protocol. */
static int krconn__msg_unpack(const unsigned char *b, krconn__msg *m)
{
    if (rcp__verbs_get32(b) != KRCONN__MAGIC || b[4] != KRCONN__PROTO) return -1;
    m->type = b[5];
    if (m->type < KRCONN__REQ || m->type > KRCONN__UNPUB) return -1;
    m->code = (uint16_t)(b[6] << 8 | b[7]);
    m->nonce = krconn__get64(b + 8);
    m->src_gen = krconn__get64(b + 16);
    m->dst_gen = krconn__get64(b + 24);
    memcpy(m->src_gid, b + 32, 16);
    m->src_udqpn = rcp__verbs_get32(b + 48);
    m->qpn = rcp__verbs_get32(b + 52);
    m->psn = rcp__verbs_get32(b + 56);
    m->aux32 = rcp__verbs_get32(b + 60);
    m->aux64 = krconn__get64(b + 64);
    m->aux32b = rcp__verbs_get32(b + 72);
    memcpy(m->data, b + 80, KRCONN_DATA_MAX);
    memcpy(m->name, b + 112, 48);
    m->name[47] = 0;
    if (m->qpn > 0xffffff || m->psn > 0xffffff || m->src_udqpn > 0xffffff || !m->nonce ||
        !m->src_gen)
        return -1;
    return 0;
}

static void krconn__msg_init(krconn_ctx *ctx, krconn__msg *m, uint8_t type)
{
    memset(m, 0, sizeof *m);
    m->type = type;
    m->src_gen = ctx->gen;
    memcpy(m->src_gid, ctx->addr.gid, 16);
    m->src_udqpn = ctx->addr.qpn;
}

/* >>ud - the UD queue pair: address handles, datagrams ----------------------------------------- */

/* The cached address handle towards gid, or NULL. Under mu. */
static struct ibv_ah *krconn__ah_find(krconn_ctx *ctx, const uint8_t *gid)
{
    for (int i = 0; i < KRCONN__NAH; i++) {
        krconn__ah *a = &ctx->ahs[i];
        if (a->ah && memcmp(a->gid, gid, 16) == 0) {
            a->used = ++ctx->ah_clock;
            return a->ah;
        }
    }
    return NULL;
}

/* The address handle towards gid, cached. Creating one resolves the neighbour entry, which can
   take the kernel a second when the host does not answer: done without mu held, so the context
   keeps serving its other peers meanwhile. Takes mu itself. */
static struct ibv_ah *krconn__ah_get(krconn_ctx *ctx, const uint8_t *gid, int *rc)
{
    pthread_mutex_lock(&ctx->mu);
    struct ibv_ah *ah = krconn__ah_find(ctx, gid), *extra = NULL;
    pthread_mutex_unlock(&ctx->mu);
    if (ah) return ah;
    rcp__verbs_ep ep;
    memset(&ep, 0, sizeof ep);
    memcpy(ep.gid, gid, 16);
    *rc = rcp__verbs_ah_create(&ctx->d, &ep, &ah);
    if (*rc) return NULL;
    pthread_mutex_lock(&ctx->mu);
    struct ibv_ah *had = krconn__ah_find(ctx, gid); /* another thread made one meanwhile */
    if (had) {
        extra = ah;
        ah = had;
    } else {
        krconn__ah *victim = &ctx->ahs[0];
        for (int i = 0; i < KRCONN__NAH; i++) {
            krconn__ah *a = &ctx->ahs[i];
            if (!a->ah || (victim->ah && a->used < victim->used)) victim = a;
        }
        extra = victim->ah;
        memcpy(victim->gid, gid, 16);
        victim->ah = ah;
        victim->used = ++ctx->ah_clock;
    }
    pthread_mutex_unlock(&ctx->mu);
    if (extra) ibv_destroy_ah(extra);
    return ah;
}

static void krconn__wake(krconn_ctx *ctx);

/* A UD work request failed: the QP is in error now (rxe, for one, fails a UD send it could not
   send with LOC_QP_OP_ERR and moves the QP to ERR), so everything later would be flushed: every
   message lost until the context's thread resets it (krconn__ud_repair). */
static void krconn__ud_failed(krconn_ctx *ctx, const struct ibv_wc *wc, const char *what)
{
    if (rcp__load(&ctx->stop) || rcp__exchange(&ctx->ud_err, 1)) return;
    krconn__log(ctx, KRCONN_LOG_WARN, "UD qp %u: a %s failed (%s, vendor error 0x%x): resetting it",
                ctx->ud->qp_num, what, ibv_wc_status_str(wc->status), wc->vendor_err);
    krconn__wake(ctx);
}

/* Drain finished UD sends. Under tx_mu. */
static void krconn__tx_reap(krconn_ctx *ctx, int wait)
{
    struct ibv_wc wc[8];
    uint64_t end = rcp__now_ns() + KRCONN__TX_REAP_NS;
    for (;;) {
        int n = ibv_poll_cq(ctx->ud_scq, 8, wc);
        for (int k = 0; k < n; k++)
            if (wc[k].status != IBV_WC_SUCCESS) krconn__ud_failed(ctx, &wc[k], "send");
        if (n > 0) ctx->tx_out -= (unsigned)n;
        if (n > 0 || !wait || !ctx->tx_out || rcp__now_ns() > end) return;
        sched_yield();
    }
}

/* Send one control message to a context (gid, udqpn, qkey). Does not wait for the peer. */
static int krconn__send_msg(krconn_ctx *ctx, const krconn__msg *m, const uint8_t *gid,
                            uint32_t udqpn, uint32_t qkey)
{
    int rc = 0;
    struct ibv_ah *ah = krconn__ah_get(ctx, gid, &rc);
    if (!ah)
        return krconn__fail(ctx, rc, "address handle (neighbour resolution)", ctx->addr.qpn, gid,
                            udqpn);
    pthread_mutex_lock(&ctx->tx_mu);
    krconn__tx_reap(ctx, ctx->tx_out >= KRCONN__NTX);
    if (ctx->tx_out >= KRCONN__NTX) {
        pthread_mutex_unlock(&ctx->tx_mu);
        return KRCONN_E_AGAIN;
    }
    unsigned char *b = ctx->ud_buf + (KRCONN__NRX + ctx->tx_next) * KRCONN__SLOT;
    ctx->tx_next = (ctx->tx_next + 1) % KRCONN__NTX;
    krconn__msg_pack(m, b);
    rcp__verbs_ep r;
    memset(&r, 0, sizeof r);
    r.qpn = udqpn;
    r.qkey = qkey ? qkey : ctx->addr.qkey;
    rc = rcp__verbs_post_ud_send(ctx->ud, 0, b, KRCONN__MSG, ctx->ud_mr->lkey, ah, &r,
                                 IBV_SEND_SIGNALED);
    if (!rc) ctx->tx_out++;
    pthread_mutex_unlock(&ctx->tx_mu);
    return rc ? krconn__fail(ctx, rc, "post UD send", ctx->addr.qpn, gid, udqpn) : 0;
}

/* The sender's GID as the packet says (GRH for IB and RoCE v1/v2-IPv6, the IPv4 header that rxe
   and mlx put at byte 20 for RoCE v2 over IPv4). -1 if there is none. */
static int krconn__grh_gid(const unsigned char *grh, const struct ibv_wc *wc, uint8_t *gid)
{
    if (!(wc->wc_flags & IBV_WC_GRH)) return -1;
    if ((grh[0] >> 4) == 6) {
        memcpy(gid, grh + 8, 16);
        return 0;
    }
    if ((grh[20] >> 4) == 4) {
        memset(gid, 0, 10);
        gid[10] = gid[11] = 0xff;
        memcpy(gid + 12, grh + 20 + 12, 4);
        return 0;
    }
    return -1;
}

static int krconn__rx_post(krconn_ctx *ctx, unsigned i)
{
    return rcp__verbs_post_recv(ctx->ud, i, ctx->ud_buf + i * KRCONN__SLOT, KRCONN__SLOT,
                                ctx->ud_mr->lkey);
}

/* >>pool - the pool of RC QPs kept ready in INIT ----------------------------------------------- */

static int krconn__qp_new(krconn_ctx *ctx, krconn__poolqp *q)
{
    rcp__verbs_qp_opts qo;
    int rc;
    memset(&qo, 0, sizeof qo);
    qo.max_send_wr = ctx->o.max_send_wr;
    qo.max_recv_wr = ctx->o.max_recv_wr;
    qo.max_inline = ctx->o.max_inline;
    q->qp = NULL;
    q->ready_ns = 0;
    if ((rc = rcp__verbs_cq_create(&ctx->d, (int)(ctx->o.max_send_wr + ctx->o.max_recv_wr),
                                   (ctx->o.flags & KRCONN_CTX_EVENTS) != 0, &q->cq)))
        return krconn__fail(ctx, rc, "create CQ", 0, NULL, 0);
    if ((rc = rcp__verbs_qp_create(&ctx->d, q->cq, q->cq, &qo, &q->qp))) {
        rcp__verbs_cq_destroy(q->cq);
        q->cq = NULL;
        return krconn__fail(ctx, rc, "create RC QP", 0, NULL, 0);
    }
    return 0;
}

/* Take and acknowledge every event waiting on cq's channel (non-blocking fd): how many, or
   -errno. An event taken and not acknowledged would make ibv_destroy_cq wait forever. */
static int krconn__ev_drain(struct ibv_cq *cq)
{
    struct ibv_comp_channel *ch = cq->channel;
    if (!ch) return KRCONN_E_NOTSUP;
    int n = 0, rc = 0;
    for (;;) {
        struct ibv_cq *ev_cq;
        void *ev_ctx;
        if (ibv_get_cq_event(ch, &ev_cq, &ev_ctx)) {
            int e = errno;
            if (e == EINTR) continue;
            if (e != EAGAIN && e != EWOULDBLOCK) rc = e > 0 ? -e : -EIO;
            break;
        }
        ibv_ack_cq_events(ev_cq, 1);
        n++;
    }
    return n ? n : rc;
}

static void krconn__qp_free(krconn__poolqp *q)
{
    rcp__verbs_qp_destroy(q->qp);
    rcp__verbs_cq_destroy(q->cq);
    q->qp = NULL;
    q->cq = NULL;
}

static void krconn__wake(krconn_ctx *ctx)
{
    uint64_t one = 1;
    if (write(ctx->evfd, &one, sizeof one) < 0) { /* the counter is full: it is awake anyway */ }
}

/* A QP in INIT: from the pool, else created here unless nowait. */
/* The pool's QPs that may be handed out now (mu held). */
static unsigned krconn__pool_ready(krconn_ctx *ctx, uint64_t now)
{
    unsigned n = 0;
    for (unsigned i = 0; i < ctx->pool_n; i++) n += ctx->pool[i].ready_ns <= now;
    return n;
}

static int krconn__pool_take(krconn_ctx *ctx, int nowait, krconn__poolqp *q)
{
    uint64_t now = rcp__now_ns();
    pthread_mutex_lock(&ctx->mu);
    /* the oldest that has rested: QPs given back queue behind the others */
    for (unsigned i = 0; i < ctx->pool_n; i++) {
        if (ctx->pool[i].ready_ns > now) continue;
        *q = ctx->pool[i];
        memmove(&ctx->pool[i], &ctx->pool[i + 1], (ctx->pool_n - i - 1) * sizeof *ctx->pool);
        ctx->pool_n--;
        ctx->st.pool_ready = ctx->pool_n;
        int low = krconn__pool_ready(ctx, now) <= ctx->pool_target / 2;
        pthread_mutex_unlock(&ctx->mu);
        /* refill at the low-water mark (or the thread's next round, within 200 ms), not after
           every take: creating a QP competes with the connect for the CPU */
        if (low) krconn__wake(ctx);
        return 0;
    }
    pthread_mutex_unlock(&ctx->mu);
    krconn__wake(ctx);
    if (nowait) return KRCONN_E_AGAIN;
    int rc = krconn__qp_new(ctx, q);
    if (!rc) {
        pthread_mutex_lock(&ctx->mu);
        ctx->st.pool_fallback++;
        pthread_mutex_unlock(&ctx->mu);
    }
    return rc;
}

/* How long a QP given back rests before the pool hands it out again: its peer's retry window
   (the ACK timeout, 4.096 us x 2^timeout, times retry_cnt + 1, with this context's attributes)
   and 50 ms more. A packet of its last connection still in flight (a retransmission, a late
   acknowledgement) carries its QP number: reused at once, it would land in the next connection,
   whose peer's work requests then time out (seen on Soft-RoCE: a hello never acknowledged). */
static uint64_t krconn__pool_rest_ns(const krconn_ctx *ctx)
{
    return (4096ull << ctx->o.timeout) * ((uint64_t)ctx->o.retry_cnt + 1) + KRCONN__REST_EXTRA_NS;
}

/* Put q in the pool if ok and there is room (counting it in *count, a stats field), else
   destroy it. */
static void krconn__pool_keep(krconn_ctx *ctx, krconn__poolqp *q, int ok, uint64_t *count)
{
    pthread_mutex_lock(&ctx->mu);
    ok = ok && ctx->pool_n < ctx->pool_cap;
    if (ok) {
        ctx->pool[ctx->pool_n++] = *q;
        (*count)++;
        ctx->st.pool_ready = ctx->pool_n;
    }
    pthread_mutex_unlock(&ctx->mu);
    if (!ok) krconn__qp_free(q);
}

/* Reset a used QP and keep it in the pool (after its rest), or destroy it when the pool is full. */
static void krconn__pool_give(krconn_ctx *ctx, struct ibv_qp *qp, struct ibv_cq *cq)
{
    krconn__poolqp q;
    q.qp = qp;
    q.cq = cq;
    q.ready_ns = rcp__now_ns() + krconn__pool_rest_ns(ctx);
    /* a QP that ended in error is not used again: destroyed, whatever state it was left in */
    int ok = rcp__verbs_qp_recycle(&ctx->d, qp, cq, 0) == 0;
    if (cq->channel) krconn__ev_drain(cq); /* the next user starts with no stale event */
    krconn__pool_keep(ctx, &q, ok, &ctx->st.pool_recycled);
}

static void krconn__pool_refill(krconn_ctx *ctx)
{
    for (;;) {
        pthread_mutex_lock(&ctx->mu);
        int need = krconn__pool_ready(ctx, rcp__now_ns()) < ctx->pool_target &&
                   ctx->pool_n < ctx->pool_cap && !ctx->stop;
        pthread_mutex_unlock(&ctx->mu);
        if (!need) return;
        krconn__poolqp q;
        if (krconn__qp_new(ctx, &q)) return;
        krconn__pool_keep(ctx, &q, 1, &ctx->st.pool_created);
    }
}

/* >>phys - physical connections: RTR and RTS --------------------------------------------------- */

/* This context's RC attributes (defaults resolved at create) for the verbs layer's steps. */
static rcp__verbs_qp_opts krconn__rc_opts(const krconn_ctx *ctx)
{
    rcp__verbs_qp_opts o;
    memset(&o, 0, sizeof o);
    o.timeout = ctx->o.timeout;
    o.retry_cnt = ctx->o.retry_cnt;
    o.rnr_retry = ctx->o.rnr_retry;
    o.min_rnr_timer = ctx->o.min_rnr_timer;
    return o;
}

/* INIT -> RTR towards the peer's RC QP: from then on this side answers the peer's packets. */
static int krconn__rtr(krconn_ctx *ctx, krconn__phys *p)
{
    rcp__verbs_ep r;
    rcp__verbs_qp_opts o = krconn__rc_opts(ctx);
    memset(&r, 0, sizeof r);
    r.qpn = p->rqpn;
    r.psn = p->rpsn;
    memcpy(r.gid, p->peer.gid, 16);
    int rc = rcp__verbs_rc_rtr(&ctx->d, p->qp, &r, &o);
    if (rc) krconn__fail(ctx, rc, "RTR", p->qp->qp_num, p->peer.gid, p->rqpn);
    return rc;
}

/* RTR -> RTS: this side may send. */
static int krconn__rts(krconn_ctx *ctx, krconn__phys *p)
{
    rcp__verbs_qp_opts o = krconn__rc_opts(ctx);
    int rc = rcp__verbs_rc_rts(&ctx->d, p->qp, p->psn, &o);
    if (rc) krconn__fail(ctx, rc, "RTS", p->qp->qp_num, p->peer.gid, p->rqpn);
    return rc;
}

static krconn__phys *krconn__phys_new(krconn_ctx *ctx, const krconn_addr *peer)
{
    krconn__phys *p = (krconn__phys *)KRCONN_MALLOC(sizeof *p);
    if (!p) return NULL;
    memset(p, 0, sizeof *p);
    p->ctx = ctx;
    p->peer = *peer;
    p->psn = (uint32_t)krconn__random(ctx) & 0xffffff;
    pthread_mutex_init(&p->mu, NULL);
    return p;
}

/* Unlink p from the context's list. Under mu. */
static void krconn__phys_unlink(krconn_ctx *ctx, krconn__phys *p)
{
    for (krconn__phys **pp = &ctx->phys; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            ctx->st.physical--;
            return;
        }
}

/* Free a physical connection nobody refers to any more; tell the peer unless it told us. */
static void krconn__phys_free(krconn_ctx *ctx, krconn__phys *p, int tell_peer)
{
    if (tell_peer && p->state == KRCONN__READY && !rcp__load(&p->err)) {
        krconn__msg m;
        krconn__msg_init(ctx, &m, KRCONN__DISC);
        m.nonce = p->nonce;
        m.dst_gen = p->peer.generation;
        m.qpn = p->qp->qp_num;
        m.aux32 = p->rqpn;
        krconn__send_msg(ctx, &m, p->peer.gid, p->peer.qpn, p->peer.qkey);
    }
    if (p->qp) krconn__pool_give(ctx, p->qp, p->cq);
    for (uint32_t i = 0; i < p->nv; i++) KRCONN_ASSERT(p->v[i] == NULL);
    KRCONN_FREE(p->v);
    pthread_mutex_destroy(&p->mu);
    KRCONN_FREE(p);
}

/* A new handle on p (a tag in its table). */
static int krconn__handle(krconn_ctx *ctx, krconn__phys *p, int virt, krconn **out)
{
    krconn *c = (krconn *)KRCONN_MALLOC(sizeof *c);
    if (!c) return -ENOMEM;
    memset(c, 0, sizeof *c);
    c->ctx = ctx;
    c->p = p;
    c->virt = virt;
    pthread_mutex_lock(&p->mu);
    uint32_t t = 0;
    while (t < p->nv && p->v[t]) t++;
    if (t == p->nv) {
        uint32_t nn = p->nv ? p->nv * 2 : 4;
        if (nn > KRCONN__KA_TAG) nn = KRCONN__KA_TAG; /* tags 0..65534 */
        krconn **nv = t < nn ? (krconn **)KRCONN_MALLOC(nn * sizeof *nv) : NULL;
        if (!nv) {
            pthread_mutex_unlock(&p->mu);
            KRCONN_FREE(c);
            return t < nn ? -ENOMEM : KRCONN_E_FULL;
        }
        memset(nv, 0, nn * sizeof *nv);
        if (p->nv) memcpy(nv, p->v, p->nv * sizeof *nv);
        KRCONN_FREE(p->v);
        p->v = nv;
        p->nv = nn;
    }
    int rc = rcp__handle_add(c);
    if (!rc) {
        p->v[t] = c;
        c->tag = t;
    }
    pthread_mutex_unlock(&p->mu);
    if (rc) {
        KRCONN_FREE(c);
        return rc;
    }
    *out = c;
    return 0;
}

/* >>directory - directories: slots in shared memory -------------------------------------------- */

static uint64_t krconn__dent_check(const krconn__dent *e, uint64_t seq)
{
    uint64_t h = krconn__fnv(&seq, 8, 0xcbf29ce484222325ull);
    return krconn__fnv(&e->gen, offsetof(krconn__dent, check) - offsetof(krconn__dent, gen), h);
}

/* Copy a slot so that the copy is consistent: 1 valid, 0 empty, -1 busy or torn. */
static int krconn__dent_read(const krconn__dent *src, krconn__dent *out)
{
    uint64_t s1 = rcp__load(&src->seq);
    if (s1 == 0) return 0;
    if (s1 & 1) return -1;
    memcpy(out, (const void *)src, sizeof *out);
    rcp__full_fence();
    if (rcp__load(&src->seq) != s1 || out->seq != s1) return -1;
    return out->check == krconn__dent_check(out, s1) ? 1 : -1;
}

static int krconn__dent_valid(const krconn__dent *e)
{
    if (e->seq == 0) return 0;
    if ((e->seq & 1) || e->check != krconn__dent_check(e, e->seq)) return -1;
    return 1;
}

/* Write name -> a into a table in local memory (shared memory, or the meta server's own). */
static int krconn__dir_put(krconn__dent *tab, uint32_t n, const char *name, const krconn_addr *a)
{
    uint64_t h = krconn__fnv(name, strlen(name), 0xcbf29ce484222325ull);
    for (uint32_t i = 0; i < n; i++) {
        krconn__dent *e = &tab[(h + i) % n];
        for (int spin = 0;; spin++) {
            uint64_t s = rcp__load(&e->seq);
            int mine;
            if (s == 0) mine = 1;
            else if (s & 1) {
                if (spin > 100000) break; /* a writer died mid-write: skip the slot */
                sched_yield();
                continue;
            } else mine = strncmp(e->name, name, sizeof e->name) == 0;
            if (!mine) break;
            if (!rcp__cas(&e->seq, &s, s + 1)) continue;
            if (s == 0) {
                memset(e->name, 0, sizeof e->name);
                snprintf(e->name, sizeof e->name, "%s", name);
            }
            e->gen = a->generation;
            e->qpn = a->qpn;
            e->qkey = a->qkey;
            memcpy(e->gid, a->gid, 16);
            e->check = krconn__dent_check(e, s + 2);
            rcp__store(&e->seq, s + 2);
            return 0;
        }
    }
    return KRCONN_E_FULL;
}

/* Withdraw name from a table in local memory if it names address a (its publisher): the slot
   keeps the name with no address (generation 0), so that the names probed past it stay
   reachable; publishing the name again fills it in. 0, or KRCONN_E_NOTFOUND (no such name, or
   it names another address or none). */
static int krconn__dir_del(krconn__dent *tab, uint32_t n, const char *name, const krconn_addr *a)
{
    uint64_t h = krconn__fnv(name, strlen(name), 0xcbf29ce484222325ull);
    for (uint32_t i = 0; i < n; i++) {
        krconn__dent *e = &tab[(h + i) % n];
        for (int spin = 0;; spin++) {
            uint64_t s = rcp__load(&e->seq);
            if (s == 0) return KRCONN_E_NOTFOUND;
            if (s & 1) {
                if (spin > 100000) break; /* a writer died mid-write: skip the slot */
                sched_yield();
                continue;
            }
            if (strncmp(e->name, name, sizeof e->name)) break;
            if (!e->gen || e->gen != a->generation || e->qpn != a->qpn ||
                memcmp(e->gid, a->gid, 16))
                return KRCONN_E_NOTFOUND;
            if (!rcp__cas(&e->seq, &s, s + 1)) continue; /* changed meanwhile: look again */
            e->gen = 0;
            e->qpn = 0;
            e->qkey = 0;
            memset(e->gid, 0, 16);
            e->check = krconn__dent_check(e, s + 2);
            rcp__store(&e->seq, s + 2);
            return 0;
        }
    }
    return KRCONN_E_NOTFOUND;
}

static int krconn__dir_get_shm(krconn_dir *d, const char *name, krconn_addr *a)
{
    uint64_t h = krconn__fnv(name, strlen(name), 0xcbf29ce484222325ull);
    krconn__dent e;
    for (uint32_t i = 0; i < d->nslots; i++) {
        const krconn__dent *s = &d->ent[(h + i) % d->nslots];
        int r = 0;
        for (int tries = 0; tries < 1000 && (r = krconn__dent_read(s, &e)) < 0; tries++)
            sched_yield();
        if (r == 0) return KRCONN_E_NOTFOUND;
        if (r < 0 || strncmp(e.name, name, sizeof e.name)) continue;
        if (!e.gen) return KRCONN_E_NOTFOUND; /* withdrawn */
        memcpy(a->gid, e.gid, 16);
        a->qpn = e.qpn;
        a->qkey = e.qkey;
        a->generation = e.gen;
        return 0;
    }
    return KRCONN_E_NOTFOUND;
}

KRCONN_API int krconn_dir_shm(void *mem, size_t len, krconn_dir **out)
{
    if (!mem || !out || len < KRCONN_DIR_BYTES(1) || ((uintptr_t)mem & 7)) return KRCONN_E_INVAL;
    krconn__dhdr *h = (krconn__dhdr *)mem;
    uint64_t m = rcp__load(&h->magic);
    if (m == 0) {
        /* format: claim with an odd magic, publish the real one last */
        uint64_t z = 0;
        size_t slots = (len - 64) / 128;
        if (slots > 65536) slots = 65536;
        if (rcp__cas(&h->magic, &z, 1)) {
            h->version = KRCONN__DIR_VERSION;
            h->nslots = (uint32_t)slots;
            rcp__store(&h->magic, KRCONN__DIR_MAGIC);
        }
    }
    for (int i = 0; i < 100000 && rcp__load(&h->magic) == 1; i++) sched_yield();
    if (rcp__load(&h->magic) != KRCONN__DIR_MAGIC || h->version != KRCONN__DIR_VERSION ||
        !h->nslots || KRCONN_DIR_BYTES(h->nslots) > len)
        return KRCONN_E_PROTO;
    krconn_dir *d = (krconn_dir *)KRCONN_MALLOC(sizeof *d);
    if (!d) return -ENOMEM;
    memset(d, 0, sizeof *d);
    if (rcp__handle_add(d)) {
        KRCONN_FREE(d);
        return -ENOMEM;
    }
    d->kind = KRCONN__DIR_SHM;
    d->hdr = h;
    d->ent = (krconn__dent *)((char *)mem + 64);
    d->nslots = h->nslots;
    pthread_mutex_init(&d->mu, NULL);
    *out = d;
    return 0;
}

/* >>rx - receiving connection messages --------------------------------------------------------- */

/* The answer m to the request req: its type and code and, for a connection p accepted, p's
   queue pair, the context's data and where its directory is (when it has one). */
static void krconn__answer(krconn_ctx *ctx, krconn__msg *m, const krconn__msg *req, uint8_t type,
                           uint16_t code, const krconn__phys *p)
{
    krconn__msg_init(ctx, m, type);
    m->code = code;
    m->nonce = req->nonce;
    m->dst_gen = req->src_gen;
    if (!p) return;
    m->qpn = p->qp->qp_num;
    m->psn = p->psn;
    memcpy(m->data, ctx->data, KRCONN_DATA_MAX);
    if (ctx->meta_mr) {
        m->aux32 = (uint32_t)((ctx->meta_len - 64) / 128);
        m->aux64 = (uintptr_t)ctx->meta_tab;
        m->aux32b = ctx->meta_mr->rkey;
    }
}

static void krconn__reply(krconn_ctx *ctx, const krconn__msg *req, uint8_t type, uint16_t code,
                          const krconn__phys *p)
{
    krconn__msg m;
    krconn__answer(ctx, &m, req, type, code, p);
    krconn__send_msg(ctx, &m, req->src_gid, req->src_udqpn, 0);
}

static void krconn__on_req(krconn_ctx *ctx, const krconn__msg *m)
{
    krconn__recent *rec = NULL;
    uint64_t t0 = rcp__now_ns();
    pthread_mutex_lock(&ctx->mu);
    if (m->dst_gen && m->dst_gen != ctx->gen) {
        ctx->st.rx_stale++;
        pthread_mutex_unlock(&ctx->mu);
        krconn__reply(ctx, m, KRCONN__REJ, KRCONN__REJ_STALE, NULL);
        return;
    }
    for (int i = 0; i < KRCONN__NRECENT; i++) {
        krconn__recent *r = &ctx->recent[i];
        if (r->nonce == m->nonce && r->gen == m->src_gen && r->udqpn == m->src_udqpn &&
            memcmp(r->gid, m->src_gid, 16) == 0) {
            rec = r;
            break;
        }
    }
    if (rec) {
        /* A retransmission or a replay: the same answer if that connection still stands. */
        ctx->st.rx_replay++;
        krconn__phys *p = NULL;
        for (krconn__phys *q = ctx->phys; q; q = q->next)
            if (q == rec->p && q->nonce == m->nonce && q->state == KRCONN__READY) p = q;
        krconn__msg ans;
        int have = p != NULL;
        if (have) krconn__answer(ctx, &ans, m, KRCONN__REP, 0, p);
        pthread_mutex_unlock(&ctx->mu);
        if (have) krconn__send_msg(ctx, &ans, m->src_gid, m->src_udqpn, 0);
        return;
    }
    int full = ctx->o.accept_backlog && ctx->acq_n >= ctx->o.accept_backlog;
    pthread_mutex_unlock(&ctx->mu);
    if (full) {
        krconn__reply(ctx, m, KRCONN__REJ, KRCONN__REJ_BUSY, NULL);
        return;
    }
    krconn_addr peer;
    memcpy(peer.gid, m->src_gid, 16);
    peer.qpn = m->src_udqpn;
    peer.qkey = ctx->addr.qkey;
    peer.generation = m->src_gen;
    krconn__phys *p = krconn__phys_new(ctx, &peer);
    krconn__poolqp q;
    int rc = p ? krconn__pool_take(ctx, 0, &q) : -ENOMEM;
    if (rc) {
        if (p) { pthread_mutex_destroy(&p->mu); KRCONN_FREE(p); }
        krconn__reply(ctx, m, KRCONN__REJ, KRCONN__REJ_BUSY, NULL);
        return;
    }
    p->qp = q.qp;
    p->cq = q.cq;
    p->rqpn = m->qpn;
    p->rpsn = m->psn;
    p->nonce = m->nonce;
    memcpy(p->peer_data, m->data, KRCONN_DATA_MAX);
    int ahrc = 0;
    struct ibv_ah *ah = krconn__ah_get(ctx, m->src_gid, &ahrc); /* neighbour entry first */
    /* RTR, answer, then RTS: the client's first packet needs only our RTR, and our RTS overlaps
       its own RTR and RTS */
    uint64_t tm0 = rcp__now_ns();
    int crc = ah ? krconn__rtr(ctx, p) : -1;
    uint64_t tm1 = rcp__now_ns();
    if (!ah || crc) {
        krconn__pool_give(ctx, p->qp, p->cq);
        pthread_mutex_destroy(&p->mu);
        KRCONN_FREE(p);
        krconn__reply(ctx, m, KRCONN__REJ, KRCONN__REJ_BUSY, NULL);
        return;
    }
    uint64_t ts0 = rcp__now_ns();
    krconn__reply(ctx, m, KRCONN__REP, 0, p);
    uint64_t ts1 = rcp__now_ns();
    p->state = KRCONN__READY;
    if (krconn__rts(ctx, p)) { /* the peer believes it is connected: tell it, give the QP back */
        krconn__phys_free(ctx, p, 1);
        return;
    }
    uint64_t ts2 = rcp__now_ns();
    /* Published only now, in RTS: a program that accepts it may send at once. Requests are
       handled one at a time (rx_mu), so a repeat of this one cannot come in between. */
    pthread_mutex_lock(&ctx->mu);
    p->refs = 1;
    p->held = 1;
    p->shared = !(m->code & KRCONN__REQ_PRIVATE); /* the asker's NO_VIRTUAL binds us too */
    p->next = ctx->phys;
    ctx->phys = p;
    ctx->st.physical++;
    ctx->st.accepts++;
    if (ctx->o.accept_backlog) {
        ctx->acq[(ctx->acq_head + ctx->acq_n) % ctx->o.accept_backlog] = p;
        ctx->acq_n++;
        p->queued = 1;
        uint64_t one = 1;
        if (ctx->accfd >= 0 && write(ctx->accfd, &one, sizeof one) < 0) { /* full: readable */ }
    }
    rec = &ctx->recent[ctx->recent_next++ % KRCONN__NRECENT];
    memcpy(rec->gid, m->src_gid, 16);
    rec->udqpn = m->src_udqpn;
    rec->gen = m->src_gen;
    rec->nonce = m->nonce;
    rec->p = p;
    ctx->st.ns_accept += ts1 - t0;
    ctx->st.ns_accept_modify += tm1 - tm0;
    ctx->st.ns_accept_rts += ts2 - ts1;
    ctx->st.ns_accept_send += ts1 - ts0;
    pthread_mutex_unlock(&ctx->mu);
}

static void krconn__on_disc(krconn_ctx *ctx, const krconn__msg *m)
{
    krconn__phys *p, *gone = NULL;
    pthread_mutex_lock(&ctx->mu);
    for (p = ctx->phys; p; p = p->next)
        if (p->state == KRCONN__READY && p->qp->qp_num == m->aux32 && p->rqpn == m->qpn &&
            p->peer.qpn == m->src_udqpn && p->peer.generation == m->src_gen &&
            memcmp(p->peer.gid, m->src_gid, 16) == 0)
            break;
    if (!p) {
        ctx->st.rx_forged++;
        pthread_mutex_unlock(&ctx->mu);
        return;
    }
    rcp__store(&p->err, KRCONN_E_CLOSED);
    p->shared = 0;
    if (p->queued) { /* take it out of the accept queue */
        unsigned bl = ctx->o.accept_backlog, k = 0;
        for (unsigned i = 0; i < ctx->acq_n; i++) {
            krconn__phys *x = ctx->acq[(ctx->acq_head + i) % bl];
            if (x != p) ctx->acq[(ctx->acq_head + k++) % bl] = x;
        }
        ctx->acq_n = k;
        p->queued = 0;
    }
    if (p->held) {
        p->held = 0;
        p->refs--;
    }
    if (p->refs == 0) {
        krconn__phys_unlink(ctx, p);
        p->state = KRCONN__GONE;
        gone = p;
    }
    pthread_mutex_unlock(&ctx->mu);
    if (gone) krconn__phys_free(ctx, gone, 0);
}

static void krconn__meta_put(krconn_ctx *ctx, const krconn__msg *m);

/* One received datagram (slot i): check everything, act, repost the slot. */
static void krconn__rx_one(krconn_ctx *ctx, const struct ibv_wc *wc)
{
    unsigned i = (unsigned)wc->wr_id;
    if (i >= KRCONN__NRX) return;
    const unsigned char *b = ctx->ud_buf + i * KRCONN__SLOT;
    krconn__msg m;
    uint8_t gid[16];
    int bad = wc->status != IBV_WC_SUCCESS || wc->byte_len != RCP__VERBS_GRH + KRCONN__MSG ||
              krconn__msg_unpack(b + RCP__VERBS_GRH, &m);
    int forged = !bad && (krconn__grh_gid(b, wc, gid) || memcmp(gid, m.src_gid, 16) ||
                          wc->src_qp != m.src_udqpn);
    if (!bad && !forged && m.type != KRCONN__REQ && m.type != KRCONN__PUB &&
        m.type != KRCONN__UNPUB && m.dst_gen != ctx->gen)
        forged = 1; /* answers and disconnects name this context's generation */
    pthread_mutex_lock(&ctx->mu);
    ctx->st.rx++;
    if (bad) ctx->st.rx_bad++;
    else if (forged) ctx->st.rx_forged++;
    pthread_mutex_unlock(&ctx->mu);
    if (wc->status != IBV_WC_SUCCESS) krconn__ud_failed(ctx, wc, "receive");
    else krconn__rx_post(ctx, i);
    if (bad || forged) return;
    switch (m.type) {
    case KRCONN__REQ: krconn__on_req(ctx, &m); break;
    case KRCONN__DISC: krconn__on_disc(ctx, &m); break;
    case KRCONN__PUB: krconn__meta_put(ctx, &m); break;
    case KRCONN__UNPUB: krconn__meta_put(ctx, &m); break;
    default: { /* REP, REJ, PUBACK: to a waiting connect or publish, from whom it asked */
        int found = 0;
        pthread_mutex_lock(&ctx->mu);
        for (int k = 0; k < KRCONN__NPEND; k++) {
            krconn__pending *pd = &ctx->pend[k];
            if (pd->used && !pd->state && pd->nonce == m.nonce && pd->udqpn == m.src_udqpn &&
                memcmp(pd->gid, m.src_gid, 16) == 0) {
                pd->m = m;
                rcp__store(&pd->state, 1u);
                rcp__futex_wake(&pd->state, 1);
                found = 1;
                break;
            }
        }
        if (!found) ctx->st.rx_forged++;
        pthread_mutex_unlock(&ctx->mu);
    }
    }
}

/* Handle what has arrived on the UD QP. Returns without waiting if another thread is at it. */
static void krconn__rx_drive(krconn_ctx *ctx, int block)
{
    struct ibv_wc wc[16];
    if (block) pthread_mutex_lock(&ctx->rx_mu);
    else if (pthread_mutex_trylock(&ctx->rx_mu)) return;
    for (;;) {
        int n = ibv_poll_cq(ctx->ud_rcq, 16, wc);
        if (n <= 0) break;
        for (int k = 0; k < n; k++) krconn__rx_one(ctx, &wc[k]);
    }
    pthread_mutex_unlock(&ctx->rx_mu);
}

/* Bring the UD QP back after a failure (ud_err): RESET, both CQs emptied (what they held is
   lost; requests are sent again by whoever waits for them), INIT, every receive posted again,
   RTR, RTS. The QP keeps its number, so the context's address stays valid. The context's thread
   does it, holding rx_mu and tx_mu (in that order, as a received request that answers does). */
static void krconn__ud_repair(krconn_ctx *ctx)
{
    struct ibv_wc wc[16];
    pthread_mutex_lock(&ctx->rx_mu);
    pthread_mutex_lock(&ctx->tx_mu);
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RESET;
    int rc = rcp__verbs_modify(ctx->ud, &a, IBV_QP_STATE, "RESET");
    while (ibv_poll_cq(ctx->ud_scq, 16, wc) > 0) {}
    while (ibv_poll_cq(ctx->ud_rcq, 16, wc) > 0) {}
    ctx->tx_out = 0;
    if (!rc) rc = rcp__verbs_qp_init(&ctx->d, ctx->ud, ctx->o.qkey);
    for (unsigned i = 0; !rc && i < KRCONN__NRX; i++) rc = krconn__rx_post(ctx, i);
    if (!rc) rc = rcp__verbs_ud_ready(ctx->ud, (uint32_t)ctx->gen);
    if (!rc) rcp__store(&ctx->ud_err, 0);
    pthread_mutex_unlock(&ctx->tx_mu);
    pthread_mutex_unlock(&ctx->rx_mu);
    pthread_mutex_lock(&ctx->mu);
    if (!rc) ctx->st.ud_resets++;
    pthread_mutex_unlock(&ctx->mu);
    if (rc)
        krconn__log(ctx, KRCONN_LOG_ERROR, "UD qp %u: reset failed: %s (tried again next round)",
                    ctx->ud->qp_num, strerror(-rc));
    else krconn__log(ctx, KRCONN_LOG_INFO, "UD qp %u reset and ready again", ctx->ud->qp_num);
}

/* >>thread - the context's thread -------------------------------------------------------------- */

static void krconn__meta_accept(krconn_ctx *ctx);
static void krconn__cq_take(krconn__phys *p, krconn *c, krconn_wc *wc, int max, int *n);

/* The thread's round, in ms: how often it looks at the keepalive (and at least every 200). */
static int krconn__ka_period(const krconn_ctx *ctx)
{
    unsigned k = ctx->o.keepalive_ms / 2;
    return !ctx->o.keepalive_ms || k > 200 ? 200 : k ? (int)k : 1;
}

/* One keepalive round. A usable physical connection that saw no successful completion in the
   last keepalive_ms gets a zero-byte RDMA WRITE (tag KRCONN__KA_TAG); the next round takes its
   completion (or a poller does), and a failed one marks the connection dead (krconn__cq_take). */
static void krconn__keepalive(krconn_ctx *ctx)
{
    uint64_t now = rcp__now_ns(), ka = (uint64_t)ctx->o.keepalive_ms * 1000000ull;
    krconn__phys **list;
    unsigned n = 0;
    pthread_mutex_lock(&ctx->mu);
    list = (krconn__phys **)KRCONN_MALLOC((ctx->st.physical + 1) * sizeof *list);
    for (krconn__phys *p = ctx->phys; list && p && n <= ctx->st.physical; p = p->next)
        if (p->state == KRCONN__READY && !rcp__load(&p->err)) {
            p->refs++; /* pinned: a disconnect meanwhile leaves the freeing to us */
            list[n++] = p;
        }
    pthread_mutex_unlock(&ctx->mu);
    for (unsigned i = 0; i < n; i++) {
        krconn__phys *p = list[i];
        int post = 0, none = 0;
        pthread_mutex_lock(&p->mu);
        if (p->ka_out) krconn__cq_take(p, NULL, NULL, 0, &none);
        else if (!p->ka_last) p->ka_last = now;
        else if (now - p->ka_last >= ka) {
            post = p->act == p->ka_act && !rcp__load(&p->err);
            p->ka_out = post;
            p->ka_act = p->act;
            p->ka_last = now;
        }
        pthread_mutex_unlock(&p->mu);
        if (post) {
            int rc = rcp__verbs_post_ping(p->qp, (uint64_t)KRCONN__KA_TAG << KRCONN__TAG_SHIFT,
                                          0, 0);
            pthread_mutex_lock(&p->mu);
            if (rc) p->ka_out = 0; /* queue full: there is traffic; try next time */
            pthread_mutex_unlock(&p->mu);
            if (!rc) {
                pthread_mutex_lock(&ctx->mu);
                ctx->st.keepalive_sent++;
                pthread_mutex_unlock(&ctx->mu);
            }
        }
        int gone = 0;
        pthread_mutex_lock(&ctx->mu);
        if (--p->refs == 0) {
            krconn__phys_unlink(ctx, p);
            gone = 1;
        }
        pthread_mutex_unlock(&ctx->mu);
        if (gone) krconn__phys_free(ctx, p, 1);
    }
    KRCONN_FREE(list);
}

static void *krconn__thread(void *arg)
{
    krconn_ctx *ctx = (krconn_ctx *)arg;
    struct ibv_comp_channel *ch = ctx->ud_rcq->channel;
    int period = krconn__ka_period(ctx);
    uint64_t next_ka = 0;
    while (!rcp__load(&ctx->stop)) {
        if (rcp__load(&ctx->ud_err)) krconn__ud_repair(ctx);
        if (ctx->o.keepalive_ms && rcp__now_ns() >= next_ka) {
            krconn__keepalive(ctx);
            next_ka = rcp__now_ns() + (uint64_t)period * 1000000ull;
        }
        if (!(ctx->o.flags & KRCONN_CTX_NO_REFILL)) krconn__pool_refill(ctx);
        ibv_req_notify_cq(ctx->ud_rcq, 0);
        krconn__rx_drive(ctx, 1);
        struct pollfd pf[3];
        int n = 0;
        pf[n].fd = ch->fd; pf[n].events = POLLIN; pf[n++].revents = 0;
        pf[n].fd = ctx->evfd; pf[n].events = POLLIN; pf[n++].revents = 0;
        if (rcp__load(&ctx->meta_fd) >= 0) {
            pf[n].fd = ctx->meta_fd; pf[n].events = POLLIN; pf[n++].revents = 0;
        }
        if (poll(pf, (nfds_t)n, period) <= 0) continue;
        if (pf[0].revents) {
            struct ibv_cq *ev_cq;
            void *ev_ctx;
            if (ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0) ibv_ack_cq_events(ev_cq, 1);
        }
        if (pf[1].revents) {
            uint64_t v;
            if (read(ctx->evfd, &v, sizeof v) < 0) { /* nothing to read: fine */ }
        }
        if (n > 2 && pf[2].revents) krconn__meta_accept(ctx);
    }
    return NULL;
}

/* >>context - contexts: create, destroy, address, stats ---------------------------------------- */

/* The one place a context option's default is resolved: every zero replaced, values that would
   retry forever refused (KRCONN_E_INVAL). */
static int krconn__ctx_opts_defaults(krconn_ctx_opts *o)
{
    if (o->rnr_retry >= KRCONN_RETRY_FOREVER || o->retry_cnt >= KRCONN_RETRY_FOREVER)
        return KRCONN_E_INVAL;
    if (!o->pool_size) o->pool_size = KRCONN_DEFAULT_POOL;
    if (!o->max_send_wr) o->max_send_wr = KRCONN_DEFAULT_WR;
    if (!o->max_recv_wr) o->max_recv_wr = KRCONN_DEFAULT_WR;
    if (!o->qkey) o->qkey = KRCONN_DEFAULT_QKEY;
    if (!o->timeout) o->timeout = KRCONN_DEFAULT_ACK_TIMEOUT;
    if (!o->retry_cnt) o->retry_cnt = KRCONN_DEFAULT_RETRY_CNT;
    if (!o->rnr_retry) o->rnr_retry = KRCONN_DEFAULT_RNR_RETRY;
    if (o->min_rnr_timer < KRCONN_MIN_RNR_TIMER) o->min_rnr_timer = KRCONN_MIN_RNR_TIMER;
    return 0;
}

KRCONN_API int krconn_ctx_create(const krconn_ctx_opts *opts, krconn_ctx **out)
{
    krconn_ctx *ctx;
    rcp__verbs_dev_opts dopt;
    rcp__verbs_qp_opts uo;
    const char *step = "allocate";
    int rc;
    if (!out) return KRCONN_E_INVAL;
    *out = NULL;
    ctx = (krconn_ctx *)KRCONN_MALLOC(sizeof *ctx);
    if (!ctx) return -ENOMEM;
    memset(ctx, 0, sizeof *ctx);
    ctx->evfd = -1;
    ctx->accfd = -1;
    ctx->meta_fd = -1;
    if (opts) ctx->o = *opts;
    {
        static int env = -1;
        ctx->lg = rcp__logger_pick(ctx->o.log, ctx->o.log_user, &env, "KRCONN_DEBUG", "krconn");
    }
    if ((rc = krconn__ctx_opts_defaults(&ctx->o))) { /* not a handle yet: freed as it is */
        KRCONN_FREE(ctx);
        return rc;
    }
    if (rcp__handle_add(ctx)) { /* open from here: a failure below destroys it */
        KRCONN_FREE(ctx);
        return -ENOMEM;
    }
    pthread_mutex_init(&ctx->mu, NULL);
    pthread_mutex_init(&ctx->rx_mu, NULL);
    pthread_mutex_init(&ctx->tx_mu, NULL);
    if (getrandom(&ctx->gen, sizeof ctx->gen, 0) != sizeof ctx->gen)
        ctx->gen = krconn__mix(rcp__now_ns() ^ (uint64_t)getpid() << 32);
    if (!ctx->gen) ctx->gen = 1;
    ctx->rng = krconn__mix(ctx->gen + 1);

    memset(&dopt, 0, sizeof dopt);
    dopt.name = ctx->o.device ? ctx->o.device : getenv("KRCONN_DEVICE");
    dopt.port = ctx->o.port;
    dopt.fixed_gid = ctx->o.fixed_gid;
    dopt.gid_index = ctx->o.gid_index;
    step = "open device";
    if ((rc = rcp__verbs_open(&dopt, &ctx->d))) {
        if (rc == -ENODEV || rc == -ENOSYS) rc = KRCONN_E_NODEV;
        goto fail;
    }
    if (ctx->d.port_attr.state != IBV_PORT_ACTIVE) {
        rc = KRCONN_E_NODEV;
        step = "port not active";
        goto fail;
    }
    step = "allocate";
    rc = -ENOMEM;
    ctx->pool_target = ctx->o.pool_size;
    ctx->pool_cap = ctx->o.pool_size * 2;
    ctx->pool = (krconn__poolqp *)KRCONN_MALLOC(ctx->pool_cap * sizeof *ctx->pool);
    if (!ctx->pool) goto fail;
    if (ctx->o.accept_backlog) {
        ctx->acq = (krconn__phys **)KRCONN_MALLOC(ctx->o.accept_backlog * sizeof *ctx->acq);
        if (!ctx->acq) goto fail;
        step = "eventfd";
        if ((ctx->accfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) { rc = -errno; goto fail; }
        step = "allocate";
    }
    ctx->ud_buf = (unsigned char *)KRCONN_MALLOC((KRCONN__NRX + KRCONN__NTX) * KRCONN__SLOT);
    if (!ctx->ud_buf) goto fail;
    memset(ctx->ud_buf, 0, (KRCONN__NRX + KRCONN__NTX) * KRCONN__SLOT);
    step = "register UD buffers";
    if ((rc = rcp__verbs_reg(&ctx->d, ctx->ud_buf, (KRCONN__NRX + KRCONN__NTX) * KRCONN__SLOT,
                             IBV_ACCESS_LOCAL_WRITE, &ctx->ud_mr)))
        goto fail;
    step = "UD CQs";
    if ((rc = rcp__verbs_cq_create(&ctx->d, KRCONN__NRX, 1, &ctx->ud_rcq)) ||
        (rc = rcp__verbs_cq_create(&ctx->d, KRCONN__NTX, 0, &ctx->ud_scq)))
        goto fail;
    memset(&uo, 0, sizeof uo);
    uo.type = IBV_QPT_UD;
    uo.max_send_wr = KRCONN__NTX;
    uo.max_recv_wr = KRCONN__NRX;
    uo.qkey = ctx->o.qkey;
    step = "UD QP";
    if ((rc = rcp__verbs_qp_create(&ctx->d, ctx->ud_scq, ctx->ud_rcq, &uo, &ctx->ud))) goto fail;
    for (unsigned i = 0; i < KRCONN__NRX; i++)
        if ((rc = krconn__rx_post(ctx, i))) goto fail;
    if ((rc = rcp__verbs_ud_ready(ctx->ud, (uint32_t)ctx->gen))) goto fail;
    memcpy(ctx->addr.gid, ctx->d.gid.raw, 16);
    ctx->addr.qpn = ctx->ud->qp_num;
    ctx->addr.qkey = ctx->o.qkey;
    ctx->addr.generation = ctx->gen;
    step = "eventfd";
    if ((ctx->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) { rc = -errno; goto fail; }
    step = "pool";
    krconn__pool_refill(ctx);
    step = "thread";
    if ((rc = pthread_create(&ctx->thr, NULL, krconn__thread, ctx))) { rc = -rc; goto fail; }
    ctx->thr_started = 1;
    krconn__log(ctx, KRCONN_LOG_INFO,
                "context on %s port %u gid index %d, UD qp %u, generation %llx", ctx->d.name,
                ctx->d.port, ctx->d.gid_index, ctx->addr.qpn, (unsigned long long)ctx->gen);
    *out = ctx;
    return 0;
fail:
    krconn__fail(ctx->d.ctx ? ctx : NULL, rc, step, ctx->ud ? ctx->ud->qp_num : 0, NULL, 0);
    krconn_ctx_destroy(ctx);
    krconn__last_code = rc;
    return rc;
}

KRCONN_API int krconn_ctx_destroy(krconn_ctx *ctx)
{
    if (!ctx) return KRCONN_E_INVAL;
    int rc = krconn__hk_take(ctx);
    if (rc) return rc;
    if (ctx->thr_started) {
        rcp__store(&ctx->stop, 1);
        krconn__wake(ctx);
        pthread_join(ctx->thr, NULL);
    }
    while (ctx->phys) {
        krconn__phys *p = ctx->phys;
        ctx->phys = p->next;
        for (uint32_t i = 0; i < p->nv; i++)
            if (p->v[i]) {
                rcp__handle_del(p->v[i], 0); /* closed with its context */
                KRCONN_FREE(p->v[i]->stash);
                KRCONN_FREE(p->v[i]);
                p->v[i] = NULL;
            }
        krconn__phys_free(ctx, p, 1);
    }
    if (ctx->ud_scq) krconn__tx_reap(ctx, 1);
    for (unsigned i = 0; i < ctx->pool_n; i++) krconn__qp_free(&ctx->pool[i]);
    for (int i = 0; i < KRCONN__NAH; i++)
        if (ctx->ahs[i].ah) ibv_destroy_ah(ctx->ahs[i].ah);
    if (ctx->meta_fd >= 0) close(ctx->meta_fd);
    rcp__verbs_dereg(ctx->meta_mr);
    KRCONN_FREE(ctx->meta_tab);
    rcp__verbs_qp_destroy(ctx->ud);
    rcp__verbs_cq_destroy(ctx->ud_rcq);
    rcp__verbs_cq_destroy(ctx->ud_scq);
    rcp__verbs_dereg(ctx->ud_mr);
    rcp__verbs_close(&ctx->d);
    if (ctx->evfd >= 0) close(ctx->evfd);
    if (ctx->accfd >= 0) close(ctx->accfd);
    KRCONN_FREE(ctx->ud_buf);
    KRCONN_FREE(ctx->acq);
    KRCONN_FREE(ctx->pool);
    KRCONN_FREE(ctx->dead);
    pthread_mutex_destroy(&ctx->mu);
    pthread_mutex_destroy(&ctx->rx_mu);
    pthread_mutex_destroy(&ctx->tx_mu);
    KRCONN_FREE(ctx);
    return 0;
}

KRCONN_API int krconn_ctx_addr(const krconn_ctx *ctx, krconn_addr *out)
{
    KRCONN__HCHECK(ctx);
    if (!ctx || !out) return KRCONN_E_INVAL;
    *out = ctx->addr;
    return 0;
}

KRCONN_API int krconn_ctx_set_data(krconn_ctx *ctx, const void *data, size_t len)
{
    KRCONN__HCHECK(ctx);
    if (!ctx || len > KRCONN_DATA_MAX || (len && !data)) return KRCONN_E_INVAL;
    pthread_mutex_lock(&ctx->mu);
    memset(ctx->data, 0, KRCONN_DATA_MAX);
    if (len) memcpy(ctx->data, data, len);
    pthread_mutex_unlock(&ctx->mu);
    return 0;
}

KRCONN_API int krconn_ctx_get_stats(krconn_ctx *ctx, krconn_stats *out)
{
    KRCONN__HCHECK(ctx);
    if (!ctx || !out) return KRCONN_E_INVAL;
    pthread_mutex_lock(&ctx->mu);
    *out = ctx->st;
    out->connections = rcp__load(&ctx->nconn);
    pthread_mutex_unlock(&ctx->mu);
    return 0;
}

KRCONN_API const char *krconn_ctx_device(const krconn_ctx *ctx)
{
    KRCONN__HCHECK_PTR(ctx);
    return ctx ? ctx->d.name : "";
}

/* >>connect - connecting, accepting, disconnecting --------------------------------------------- */

static krconn__pending *krconn__pend_add(krconn_ctx *ctx, uint64_t nonce, const uint8_t *gid,
                                         uint32_t udqpn)
{
    krconn__pending *pd = NULL;
    pthread_mutex_lock(&ctx->mu);
    for (int k = 0; k < KRCONN__NPEND && !pd; k++)
        if (!ctx->pend[k].used) pd = &ctx->pend[k];
    if (pd) {
        memset(pd, 0, sizeof *pd);
        pd->used = 1;
        pd->nonce = nonce;
        memcpy(pd->gid, gid, 16);
        pd->udqpn = udqpn;
    }
    pthread_mutex_unlock(&ctx->mu);
    return pd;
}

static void krconn__pend_del(krconn_ctx *ctx, krconn__pending *pd)
{
    pthread_mutex_lock(&ctx->mu);
    pd->used = 0;
    pthread_mutex_unlock(&ctx->mu);
}

/* Send m to peer and wait for the answer with the same nonce, resending after 50, 100, 200...
   ms until the deadline. A send that fails (no address handle: the peer's host did not answer
   neighbour resolution in the kernel's own bound, about 1 s; or a full UD queue) is tried again
   on the same schedule: a slow or absent host costs the deadline, never less. recheck (may be
   NULL) is asked after each silent interval whether to give up early. */
typedef int (*krconn__recheck)(void *arg);
static int krconn__request(krconn_ctx *ctx, krconn__msg *m, const krconn_addr *peer,
                           uint64_t deadline, krconn__recheck recheck, void *rarg, krconn__msg *ans)
{
    krconn__pending *pd = krconn__pend_add(ctx, m->nonce, peer->gid, peer->qpn);
    if (!pd) return KRCONN_E_AGAIN;
    uint64_t wait = KRCONN__RESEND_FIRST_NS, next = 0;
    int rc = KRCONN_E_TIMEDOUT;
    unsigned spins = 0;
    for (;;) {
        uint64_t now = rcp__now_ns();
        if (rcp__load(&pd->state)) {
            *ans = pd->m;
            rc = 0;
            break;
        }
        if (now >= deadline) break;
        if (now >= next) {
            if (next && recheck && (rc = recheck(rarg)) != 0) break;
            rc = KRCONN_E_TIMEDOUT;
            (void)krconn__send_msg(ctx, m, peer->gid, peer->qpn, peer->qkey); /* logged */
            next = rcp__now_ns() + wait;
            if (wait < KRCONN__RESEND_MAX_NS) wait *= 2;
        }
        /* handle what came in ourselves; then sleep until whoever handles the answer wakes us
           (spinning would take the CPU from the peer when both share a host) */
        krconn__rx_drive(ctx, 0);
        if (++spins > KRCONN__REQ_SPINS) rcp__futex_wait(&pd->state, 0, KRCONN__REQ_NAP_NS);
        else rcp__cpu_relax();
    }
    krconn__pend_del(ctx, pd);
    return rc;
}

/* Is peer's generation one this context found stale? (mu held) */
static int krconn__is_dead(const krconn_ctx *ctx, const krconn_addr *peer)
{
    if (!peer->generation) return 0; /* 0 names no generation */
    for (unsigned i = 0; i < ctx->ndead; i++)
        if (ctx->dead[i].gen == peer->generation && ctx->dead[i].qpn == peer->qpn &&
            memcmp(ctx->dead[i].gid, peer->gid, 16) == 0)
            return 1;
    return 0;
}

/* Remember peer's generation as stale for the context's life (mu held): 1 if it is new, 0 if
   known (or 0), -ENOMEM. */
static int krconn__mark_dead(krconn_ctx *ctx, const krconn_addr *peer)
{
    if (!peer->generation || krconn__is_dead(ctx, peer)) return 0;
    if (ctx->ndead == ctx->dead_cap) {
        unsigned cap = ctx->dead_cap ? 2 * ctx->dead_cap : 8;
        krconn__dead *d = (krconn__dead *)KRCONN_MALLOC(cap * sizeof *d);
        if (!d) return -ENOMEM;
        if (ctx->ndead) memcpy(d, ctx->dead, ctx->ndead * sizeof *d);
        KRCONN_FREE(ctx->dead);
        ctx->dead = d;
        ctx->dead_cap = cap;
    }
    krconn__dead *e = &ctx->dead[ctx->ndead++];
    memcpy(e->gid, peer->gid, 16);
    e->qpn = peer->qpn;
    e->gen = peer->generation;
    return 1;
}

/* Find a usable physical connection to peer (mu held). */
static krconn__phys *krconn__find(krconn_ctx *ctx, const krconn_addr *peer)
{
    for (krconn__phys *p = ctx->phys; p; p = p->next)
        if (p->shared && !rcp__load(&p->err) && p->peer.qpn == peer->qpn &&
            memcmp(p->peer.gid, peer->gid, 16) == 0 &&
            (!peer->generation || p->peer.generation == peer->generation))
            return p;
    return NULL;
}

typedef struct krconn__name_check {
    krconn_dir *dir;
    const char *name;
    krconn_addr was;
    uint64_t deadline;      /* the connect's: a lookup never takes it past */
} krconn__name_check;

static int krconn__name_recheck(void *arg)
{
    krconn__name_check *nc = (krconn__name_check *)arg;
    krconn_addr now;
    uint64_t t = rcp__now_ns();
    int left = t < nc->deadline ? (int)((nc->deadline - t) / 1000000ull) : 0;
    if (left <= 0) return 0;
    int rc = krconn_lookup(nc->dir, nc->name, left, &now);
    if (rc) return rc == KRCONN_E_NOTFOUND ? rc : 0; /* withdrawn: nobody to wait for */
    return now.generation != nc->was.generation || now.qpn != nc->was.qpn ? KRCONN_E_STALE : 0;
}

static int krconn__connect(krconn_ctx *ctx, const krconn_addr *peer, const krconn_connect_opts *o,
                           krconn__recheck recheck, void *rarg, krconn **out)
{
    unsigned flags = o ? o->flags : 0;
    uint64_t deadline = krconn__deadline(o ? o->timeout_ms : 0);
    krconn__phys *p;
    krconn__poolqp q;
    int rc;
    if (!ctx || !peer || !out) return KRCONN_E_INVAL;
    *out = NULL;
    krconn__phys *np = krconn__phys_new(ctx, peer);
    if (!np) return -ENOMEM;
    np->state = KRCONN__CONNECTING;
    np->shared = !(flags & KRCONN_CONNECT_NO_VIRTUAL);
    np->refs = 1;
    np->nonce = krconn__random(ctx);
    if (!np->nonce) np->nonce = 1;
    /* find a physical connection to this peer, or list ours as connecting, in one step: two
       threads connecting at once make one physical connection, the other waits and shares it */
    for (;;) {
        pthread_mutex_lock(&ctx->mu);
        if (krconn__is_dead(ctx, peer)) { /* section 5: never used again */
            pthread_mutex_unlock(&ctx->mu);
            pthread_mutex_destroy(&np->mu);
            KRCONN_FREE(np);
            return krconn__fail(ctx, KRCONN_E_STALE, "connect: a generation found stale before",
                                0, peer->gid, peer->qpn);
        }
        p = np->shared ? krconn__find(ctx, peer) : NULL;
        int st = p ? p->state : 0;
        if (st == KRCONN__READY) {
            p->refs++;
            ctx->st.virtual_connects++;
            pthread_mutex_unlock(&ctx->mu);
            pthread_mutex_destroy(&np->mu);
            KRCONN_FREE(np);
            rc = krconn__handle(ctx, p, 1, out);
            if (rc) {
                pthread_mutex_lock(&ctx->mu);
                p->refs--; /* the other handle still holds it */
                pthread_mutex_unlock(&ctx->mu);
                return rc;
            }
            rcp__fetch_add(&ctx->nconn, 1);
            return 0;
        }
        if (st != KRCONN__CONNECTING) {
            p = np;
            p->next = ctx->phys;
            ctx->phys = p;
            ctx->st.physical++;
            pthread_mutex_unlock(&ctx->mu);
            break;
        }
        pthread_mutex_unlock(&ctx->mu);
        if (rcp__now_ns() >= deadline) {
            pthread_mutex_destroy(&np->mu);
            KRCONN_FREE(np);
            return krconn__fail(ctx, KRCONN_E_TIMEDOUT,
                                "connect: waiting for another thread's connect", 0, peer->gid,
                                peer->qpn);
        }
        krconn__rx_drive(ctx, 0);
        usleep(20);
    }

    uint64_t t0 = rcp__now_ns(), t1, t2, t2r, t3;
    rc = krconn__pool_take(ctx, flags & KRCONN_CONNECT_NOWAIT, &q);
    t1 = rcp__now_ns();
    if (rc) {
        if (rc == KRCONN_E_AGAIN)
            krconn__fail(ctx, rc, "connect: pool empty", 0, peer->gid, peer->qpn);
        goto fail;
    }
    p->qp = q.qp;
    p->cq = q.cq;
    if (o && o->before && (rc = o->before(p->qp, o->user))) {
        krconn__fail(ctx, rc, "connect: the caller's before()", p->qp->qp_num, peer->gid,
                     peer->qpn);
        goto fail;
    }
    krconn__msg m, ans;
    krconn__msg_init(ctx, &m, KRCONN__REQ);
    m.code = p->shared ? 0 : KRCONN__REQ_PRIVATE;
    m.nonce = p->nonce;
    m.dst_gen = peer->generation;
    m.qpn = p->qp->qp_num;
    m.psn = p->psn;
    pthread_mutex_lock(&ctx->mu);
    memcpy(m.data, ctx->data, KRCONN_DATA_MAX);
    pthread_mutex_unlock(&ctx->mu);
    rc = krconn__request(ctx, &m, peer, deadline, recheck, rarg, &ans);
    t2 = rcp__now_ns();
    if (rc) {
        krconn__fail(ctx, rc, "connect: request", p->qp->qp_num, peer->gid, peer->qpn);
        goto fail;
    }
    if (ans.type == KRCONN__REJ) {
        rc = ans.code == KRCONN__REJ_STALE ? KRCONN_E_STALE : KRCONN_E_REJECTED;
        krconn__fail(ctx, rc, "connect: rejected", p->qp->qp_num, peer->gid, peer->qpn);
        goto fail;
    }
    if (ans.type != KRCONN__REP || (peer->generation && ans.src_gen != peer->generation)) {
        rc = krconn__fail(ctx, KRCONN_E_PROTO, "connect: answer", p->qp->qp_num, peer->gid,
                          peer->qpn);
        goto fail;
    }
    pthread_mutex_lock(&ctx->mu); /* krconn__find reads the peer under mu */
    p->rqpn = ans.qpn;
    p->rpsn = ans.psn;
    p->peer.generation = ans.src_gen;
    memcpy(p->peer_data, ans.data, KRCONN_DATA_MAX);
    pthread_mutex_unlock(&ctx->mu);
    if ((rc = krconn__rtr(ctx, p))) goto fail;
    t2r = rcp__now_ns();
    if ((rc = krconn__rts(ctx, p))) goto fail;
    t3 = rcp__now_ns();
    if ((rc = krconn__handle(ctx, p, 0, out))) goto fail;
    pthread_mutex_lock(&ctx->mu);
    p->state = KRCONN__READY;
    ctx->st.connects++;
    ctx->st.ns_pool += t1 - t0;
    ctx->st.ns_request += t2 - t1;
    ctx->st.ns_modify += t3 - t2;
    ctx->st.ns_modify_rtr += t2r - t2;
    pthread_mutex_unlock(&ctx->mu);
    rcp__fetch_add(&ctx->nconn, 1);
    /* a meta server's answer says where its table is (for krconn_dir_meta) */
    p->meta_slots = ans.aux32;
    p->meta_addr = ans.aux64;
    p->meta_rkey = ans.aux32b;
    return 0;
fail:
    pthread_mutex_lock(&ctx->mu);
    krconn__phys_unlink(ctx, p);
    if (rc == KRCONN_E_STALE) { /* remembered for every later connect, through any directory */
        int nd = krconn__mark_dead(ctx, peer);
        if (nd > 0) ctx->st.stale_detected++;
        if (nd < 0) rc = nd;
    }
    pthread_mutex_unlock(&ctx->mu);
    if (p->qp) krconn__pool_give(ctx, p->qp, p->cq);
    pthread_mutex_destroy(&p->mu);
    KRCONN_FREE(p);
    return rc;
}

KRCONN_API int krconn_connect(krconn_ctx *ctx, const krconn_addr *peer,
                              const krconn_connect_opts *opts, krconn **out)
{
    KRCONN__HCHECK(ctx);
    return krconn__connect(ctx, peer, opts, NULL, NULL, out);
}

static int krconn__name_ok(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    return n > 0 && n <= KRCONN_NAME_MAX;
}

KRCONN_API int krconn_connect_name(krconn_ctx *ctx, krconn_dir *dir, const char *name,
                                   const krconn_connect_opts *opts, krconn **out)
{
    KRCONN__HCHECK(ctx);
    if (!ctx || !dir || !out || !krconn__name_ok(name)) return KRCONN_E_INVAL;
    int tmo = opts && opts->timeout_ms > 0 ? opts->timeout_ms : KRCONN_DEFAULT_TIMEOUT_MS;
    uint64_t deadline = krconn__deadline(tmo);
    *out = NULL;
    /* Each round returns, or has found the address it tried stale (then remembered: the next
       lookup names another one or fails at once); the deadline bounds them all. */
    for (;;) {
        krconn__name *n = NULL;
        krconn_addr a;
        int have = 0, dead = 0, rc;
        pthread_mutex_lock(&ctx->mu);
        for (int i = 0; i < KRCONN__NNAMES && !n; i++)
            if (ctx->names[i].dir == dir && strcmp(ctx->names[i].name, name) == 0)
                n = &ctx->names[i];
        if (n && n->valid) {
            if (krconn__is_dead(ctx, &n->a)) n->valid = 0; /* found stale by another path */
            else {
                have = 1;
                a = n->a;
            }
        }
        pthread_mutex_unlock(&ctx->mu);
        uint64_t now = rcp__now_ns();
        int left = now < deadline ? (int)((deadline - now) / 1000000ull) : 0;
        if (left <= 0) return krconn__fail(ctx, KRCONN_E_TIMEDOUT, "connect by name", 0, NULL, 0);
        if (!have) {
            if ((rc = krconn_lookup(dir, name, left, &a))) return rc;
            pthread_mutex_lock(&ctx->mu);
            dead = krconn__is_dead(ctx, &a);
            if (!dead) {
                if (!n) {
                    n = &ctx->names[ctx->names_next++ % KRCONN__NNAMES];
                    memset(n, 0, sizeof *n);
                    n->dir = dir;
                    snprintf(n->name, sizeof n->name, "%s", name);
                }
                n->a = a;
                n->valid = 1;
            }
            pthread_mutex_unlock(&ctx->mu);
            if (dead)
                return krconn__fail(ctx, KRCONN_E_STALE,
                                    "connect by name: the directory still names a stale generation",
                                    0, a.gid, a.qpn);
        }
        krconn__name_check nc;
        nc.dir = dir;
        nc.name = name;
        nc.was = a;
        nc.deadline = deadline;
        krconn_connect_opts co;
        memset(&co, 0, sizeof co);
        co.flags = opts ? opts->flags : 0;
        co.timeout_ms = left;
        co.before = opts ? opts->before : NULL;
        co.user = opts ? opts->user : NULL;
        rc = krconn__connect(ctx, &a, &co, krconn__name_recheck, &nc, out);
        if (rc == KRCONN_E_NOTFOUND) { /* withdrawn since it was cached */
            pthread_mutex_lock(&ctx->mu);
            if (n && n->dir == dir && strcmp(n->name, name) == 0) n->valid = 0;
            pthread_mutex_unlock(&ctx->mu);
        }
        if (rc != KRCONN_E_STALE) return rc;
        pthread_mutex_lock(&ctx->mu); /* look it up again (krconn__connect remembered it) */
        for (int i = 0; i < KRCONN__NNAMES; i++)
            if (ctx->names[i].dir == dir && strcmp(ctx->names[i].name, name) == 0)
                ctx->names[i].valid = 0;
        pthread_mutex_unlock(&ctx->mu);
        krconn__log(ctx, KRCONN_LOG_INFO, "%s: stale entry (generation %llx), looking it up again",
                    name, (unsigned long long)a.generation);
    }
}

KRCONN_API int krconn_accept(krconn_ctx *ctx, int timeout_ms, krconn **out)
{
    KRCONN__HCHECK(ctx);
    if (!ctx || !out) return KRCONN_E_INVAL;
    *out = NULL;
    if (!ctx->o.accept_backlog) return KRCONN_E_INVAL;
    uint64_t deadline = timeout_ms < 0 ? 0 : krconn__deadline(timeout_ms);
    for (;;) {
        krconn__phys *p = NULL;
        pthread_mutex_lock(&ctx->mu);
        if (ctx->acq_n) {
            p = ctx->acq[ctx->acq_head];
            ctx->acq_head = (ctx->acq_head + 1) % ctx->o.accept_backlog;
            ctx->acq_n--;
            p->queued = 0;
            p->held = 0; /* its reference goes to the handle */
        }
        pthread_mutex_unlock(&ctx->mu);
        if (p) {
            int rc = krconn__handle(ctx, p, 0, out);
            if (rc) {
                pthread_mutex_lock(&ctx->mu);
                p->held = 1;
                pthread_mutex_unlock(&ctx->mu);
                return rc;
            }
            rcp__fetch_add(&ctx->nconn, 1);
            return 0;
        }
        if (!deadline) return KRCONN_E_AGAIN; /* timeout_ms < 0: just look */
        if (rcp__now_ns() >= deadline) return KRCONN_E_TIMEDOUT;
        krconn__rx_drive(ctx, 0);
        usleep(50);
    }
}

KRCONN_API int krconn_accept_fd(const krconn_ctx *ctx)
{
    KRCONN__HCHECK(ctx);
    return ctx ? ctx->accfd : KRCONN_E_INVAL;
}

KRCONN_API int krconn_disconnect(krconn *c)
{
    if (!c) return KRCONN_E_INVAL;
    int rc = krconn__hk_take(c);
    if (rc) return rc;
    krconn_ctx *ctx = c->ctx;
    krconn__phys *p = c->p;
    int gone = 0;
    pthread_mutex_lock(&p->mu);
    p->v[c->tag] = NULL;
    pthread_mutex_unlock(&p->mu);
    KRCONN_FREE(c->stash);
    KRCONN_FREE(c);
    pthread_mutex_lock(&ctx->mu);
    if (--p->refs == 0) {
        krconn__phys_unlink(ctx, p);
        gone = 1;
    }
    pthread_mutex_unlock(&ctx->mu);
    rcp__fetch_add(&ctx->nconn, (uint32_t)-1);
    if (gone) krconn__phys_free(ctx, p, 1);
    return 0;
}

KRCONN_API int krconn_is_virtual(const krconn *c)
{
    KRCONN__HCHECK(c);
    return c ? c->virt : KRCONN_E_INVAL;
}
KRCONN_API int krconn_peer_addr(const krconn *c, krconn_addr *out)
{
    KRCONN__HCHECK(c);
    if (!c || !out) return KRCONN_E_INVAL;
    *out = c->p->peer;
    return 0;
}
KRCONN_API const void *krconn_peer_data(const krconn *c)
{
    KRCONN__HCHECK_PTR(c);
    return c ? c->p->peer_data : NULL;
}
KRCONN_API struct ibv_qp *krconn_qp(const krconn *c)
{
    KRCONN__HCHECK_PTR(c);
    return c ? c->p->qp : NULL;
}

/* >>meta - the meta server and its clients ----------------------------------------------------- */

/* A publish (KRCONN__PUB) or a withdrawal (KRCONN__UNPUB) at the meta server: of the sender's
   own address only. */
static void krconn__meta_put(krconn_ctx *ctx, const krconn__msg *m)
{
    if (!rcp__load(&ctx->meta_mr) || !m->name[0] || strlen(m->name) > KRCONN_NAME_MAX) {
        pthread_mutex_lock(&ctx->mu);
        ctx->st.rx_bad++;
        pthread_mutex_unlock(&ctx->mu);
        return;
    }
    if (m->dst_gen && m->dst_gen != ctx->gen) {
        pthread_mutex_lock(&ctx->mu);
        ctx->st.rx_stale++;
        pthread_mutex_unlock(&ctx->mu);
        krconn__reply(ctx, m, KRCONN__REJ, KRCONN__REJ_STALE, NULL);
        return;
    }
    krconn_addr a; /* the sender's own address, as the packet proved it */
    memcpy(a.gid, m->src_gid, 16);
    a.qpn = m->src_udqpn;
    a.qkey = m->aux32 ? m->aux32 : ctx->addr.qkey;
    a.generation = m->src_gen;
    krconn__dent *tab = (krconn__dent *)(ctx->meta_tab + 64);
    uint32_t n = (uint32_t)((ctx->meta_len - 64) / 128);
    if (m->type == KRCONN__UNPUB) {
        int rc = krconn__dir_del(tab, n, m->name, &a);
        krconn__reply(ctx, m, KRCONN__PUBACK, rc ? KRCONN__PUBACK_NOTFOUND : KRCONN__PUBACK_OK,
                      NULL);
        return;
    }
    int rc = krconn__dir_put(tab, n, m->name, &a);
    krconn__reply(ctx, m, KRCONN__PUBACK, rc ? KRCONN__PUBACK_FULL : KRCONN__PUBACK_OK, NULL);
}

static void krconn__meta_accept(krconn_ctx *ctx)
{
    int fd = accept4(ctx->meta_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) return;
    unsigned char b[32];
    memcpy(b, ctx->addr.gid, 16);
    rcp__verbs_put32(b + 16, ctx->addr.qpn);
    rcp__verbs_put32(b + 20, ctx->addr.qkey);
    krconn__put64(b + 24, ctx->addr.generation);
    struct timeval tv;
    tv.tv_sec = 0;
    tv.tv_usec = 200000;
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (send(fd, b, sizeof b, MSG_NOSIGNAL) != (ssize_t)sizeof b) { /* the client retries */ }
    close(fd);
}

KRCONN_API int krconn_meta_serve(krconn_ctx *ctx, const krconn_meta_opts *o)
{
    KRCONN__HCHECK(ctx);
    unsigned slots = o && o->slots ? o->slots : KRCONN_DEFAULT_DIR_SLOTS;
    uint16_t port = o && o->port ? o->port : KRCONN_DEFAULT_META_PORT;
    int rc, fd = -1, one = 1;
    size_t len = KRCONN_DIR_BYTES(slots);
    unsigned char *tab = NULL;
    struct ibv_mr *mr = NULL;
    struct sockaddr_in sa;
    if (!ctx || slots > 65536 || ctx->meta_tab) return KRCONN_E_INVAL;
    tab = (unsigned char *)KRCONN_MALLOC(len);
    if (!tab) return -ENOMEM;
    memset(tab, 0, len);
    krconn__dhdr *h = (krconn__dhdr *)tab;
    h->magic = KRCONN__DIR_MAGIC;
    h->version = KRCONN__DIR_VERSION;
    h->nslots = slots;
    if ((rc = rcp__verbs_reg(&ctx->d, tab, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ,
                             &mr))) {
        krconn__fail(ctx, rc, "meta server: register the table", 0, NULL, 0);
        goto fail;
    }
    fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) { rc = -errno; goto fail_sock; }
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    sa.sin_addr.s_addr = htonl(INADDR_ANY);
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) || listen(fd, 64)) {
        rc = -errno;
        goto fail_sock;
    }
    pthread_mutex_lock(&ctx->mu);
    ctx->meta_tab = tab;
    ctx->meta_len = len;
    pthread_mutex_unlock(&ctx->mu);
    rcp__store(&ctx->meta_mr, mr);
    rcp__store(&ctx->meta_fd, fd);
    krconn__wake(ctx);
    krconn__log(ctx, KRCONN_LOG_INFO, "meta server: %u slots, bootstrap on TCP port %u", slots,
                (unsigned)port);
    return 0;
fail_sock:
    krconn__fail(ctx, rc, "meta server: TCP bootstrap socket", 0, NULL, 0);
    if (fd >= 0) close(fd);
    rcp__verbs_dereg(mr);
fail:
    KRCONN_FREE(tab);
    return rc;
}

/* TCP to the meta server's bootstrap port: its context address. */
static int krconn__bootstrap(krconn_ctx *ctx, const char *where, uint64_t deadline, krconn_addr *a)
{
    char host[256], port[16];
    const char *colon = strrchr(where, ':');
    struct addrinfo hints, *ai = NULL;
    int rc, fd = -1;
    if (colon && colon != where && !strchr(colon + 1, ']') && strchr(where, ':') == colon) {
        snprintf(host, sizeof host, "%.*s", (int)(colon - where), where);
        snprintf(port, sizeof port, "%s", colon + 1);
    } else {
        snprintf(host, sizeof host, "%s", where);
        snprintf(port, sizeof port, "%d", KRCONN_DEFAULT_META_PORT);
    }
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    if ((rc = getaddrinfo(host, port, &hints, &ai)) || !ai) {
        if (ai) freeaddrinfo(ai);
        return krconn__fail(ctx, KRCONN_E_INVAL, "meta server address (KRCONN_META=HOST[:PORT])", 0,
                            NULL, 0);
    }
    unsigned char b[32];
    size_t got = 0;
    rc = KRCONN_E_TIMEDOUT;
    while (rcp__now_ns() < deadline) {
        fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) {
            rc = -errno;
            break;
        }
        /* a non-blocking connect, so an unreachable host costs the deadline, not SYN retries */
        int cr = connect(fd, ai->ai_addr, ai->ai_addrlen), err = 0;
        if (cr < 0 && errno == EINPROGRESS) {
            struct pollfd pf;
            uint64_t now = rcp__now_ns();
            pf.fd = fd;
            pf.events = POLLOUT;
            pf.revents = 0;
            int ms = now < deadline ? (int)((deadline - now) / 1000000ull) + 1 : 0;
            socklen_t el = sizeof err;
            if (poll(&pf, 1, ms) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 &&
                !err)
                cr = 0;
        }
        if (cr == 0) {
            got = 0;
            while (got < sizeof b && rcp__now_ns() < deadline) {
                struct pollfd pf;
                pf.fd = fd;
                pf.events = POLLIN;
                pf.revents = 0;
                if (poll(&pf, 1, 50) <= 0) continue;
                ssize_t r = recv(fd, b + got, sizeof b - got, 0);
                if (r <= 0) break;
                got += (size_t)r;
            }
        }
        close(fd);
        fd = -1;
        if (got == sizeof b) {
            rc = 0;
            break;
        }
        usleep(100000);
    }
    freeaddrinfo(ai);
    if (rc) return krconn__fail(ctx, rc, "meta server bootstrap (TCP)", 0, NULL, 0);
    memcpy(a->gid, b, 16);
    a->qpn = rcp__verbs_get32(b + 16);
    a->qkey = rcp__verbs_get32(b + 20);
    a->generation = krconn__get64(b + 24);
    return a->qpn > 0xffffff || !a->generation ? KRCONN_E_PROTO : 0;
}

KRCONN_API int krconn_dir_meta(krconn_ctx *ctx, const char *where, int timeout_ms,
                               krconn_dir **out)
{
    KRCONN__HCHECK(ctx);
    uint64_t deadline = krconn__deadline(timeout_ms);
    krconn_dir *d;
    krconn_connect_opts co;
    int rc;
    if (!ctx || !out) return KRCONN_E_INVAL;
    *out = NULL;
    if (!where) where = getenv("KRCONN_META");
    if (!where || !where[0])
        return krconn__fail(ctx, KRCONN_E_INVAL,
                            "no meta server: pass HOST[:PORT] or set KRCONN_META", 0, NULL, 0);
    d = (krconn_dir *)KRCONN_MALLOC(sizeof *d);
    if (!d) return -ENOMEM;
    memset(d, 0, sizeof *d);
    if (rcp__handle_add(d)) { /* open from here: a failure below closes it */
        KRCONN_FREE(d);
        return -ENOMEM;
    }
    d->kind = KRCONN__DIR_META;
    d->ctx = ctx;
    pthread_mutex_init(&d->mu, NULL);
    if ((rc = krconn__bootstrap(ctx, where, deadline, &d->meta))) goto fail;
    memset(&co, 0, sizeof co);
    co.flags = KRCONN_CONNECT_NO_VIRTUAL;
    co.timeout_ms = (int)((deadline - rcp__now_ns()) / 1000000ull) + 1;
    if ((rc = krconn_connect(ctx, &d->meta, &co, &d->conn))) goto fail;
    if (!d->conn->p->meta_rkey || !d->conn->p->meta_slots) {
        rc = krconn__fail(ctx, KRCONN_E_PROTO, "meta server: the peer serves no directory", 0,
                          d->meta.gid, d->meta.qpn);
        goto fail;
    }
    d->raddr = d->conn->p->meta_addr;
    d->rkey = d->conn->p->meta_rkey;
    d->nslots = d->conn->p->meta_slots;
    d->lbuf = (krconn__dent *)KRCONN_MALLOC(sizeof *d->lbuf);
    if (!d->lbuf) { rc = -ENOMEM; goto fail; }
    if ((rc = krconn_reg(ctx, d->lbuf, sizeof *d->lbuf, 0, &d->buf))) goto fail;
    *out = d;
    return 0;
fail:
    krconn_dir_close(d);
    return rc;
}

KRCONN_API int krconn_dir_close(krconn_dir *d)
{
    if (!d) return KRCONN_E_INVAL;
    int rc = krconn__hk_take(d);
    if (rc) return rc;
    if (d->buf.mr) krconn_dereg(&d->buf);
    if (d->conn) krconn_disconnect(d->conn);
    KRCONN_FREE(d->lbuf);
    pthread_mutex_destroy(&d->mu);
    KRCONN_FREE(d);
    return 0;
}

KRCONN_API int krconn_lookup(krconn_dir *d, const char *name, int timeout_ms, krconn_addr *out)
{
    KRCONN__HCHECK(d);
    if (!d || !out || !krconn__name_ok(name)) return KRCONN_E_INVAL;
    if (d->kind == KRCONN__DIR_SHM) return krconn__dir_get_shm(d, name, out);
    uint64_t deadline = krconn__deadline(timeout_ms);
    uint64_t h = krconn__fnv(name, strlen(name), 0xcbf29ce484222325ull);
    int rc = KRCONN_E_NOTFOUND;
    pthread_mutex_lock(&d->mu);
    for (uint32_t i = 0; i < d->nslots; i++) {
        uint64_t idx = (h + i) % d->nslots;
        int r = -1;
        for (int tries = 0; tries < 8 && r < 0; tries++) {
            krconn_wc wc;
            int left = (int)((deadline - rcp__now_ns()) / 1000000ull);
            if (rcp__now_ns() >= deadline || left <= 0) { rc = KRCONN_E_TIMEDOUT; goto out; }
            rc = krconn_read(d->conn, 1, &d->buf, d->lbuf, sizeof *d->lbuf,
                             d->raddr + 64 + idx * sizeof(krconn__dent), d->rkey, 0);
            if (!rc) rc = krconn_wait(d->conn, &wc, left);
            if (rc) {
                krconn__fail(d->ctx, rc, "directory lookup: RDMA READ", krconn_qp(d->conn)->qp_num,
                             d->meta.gid, d->meta.qpn);
                goto out;
            }
            r = krconn__dent_valid(d->lbuf);
        }
        rc = KRCONN_E_NOTFOUND;
        if (r == 0) goto out;
        if (r < 0 || strncmp(d->lbuf->name, name, sizeof d->lbuf->name)) continue;
        if (!d->lbuf->gen) goto out; /* withdrawn: KRCONN_E_NOTFOUND */
        memcpy(out->gid, d->lbuf->gid, 16);
        out->qpn = d->lbuf->qpn;
        out->qkey = d->lbuf->qkey;
        out->generation = d->lbuf->gen;
        rc = 0;
        goto out;
    }
out:
    pthread_mutex_unlock(&d->mu);
    return rc;
}

KRCONN_API int krconn_publish(krconn_ctx *ctx, krconn_dir *d, const char *name, int timeout_ms)
{
    KRCONN__HCHECK(ctx);
    if (!ctx || !d || !krconn__name_ok(name)) return KRCONN_E_INVAL;
    if (d->kind == KRCONN__DIR_SHM) return krconn__dir_put(d->ent, d->nslots, name, &ctx->addr);
    krconn__msg m, ans;
    krconn__msg_init(ctx, &m, KRCONN__PUB);
    m.nonce = krconn__random(ctx) | 1;
    m.dst_gen = d->meta.generation;
    m.aux32 = ctx->addr.qkey;
    snprintf(m.name, sizeof m.name, "%s", name);
    int rc = krconn__request(ctx, &m, &d->meta, krconn__deadline(timeout_ms), NULL, NULL, &ans);
    if (rc)
        return krconn__fail(ctx, rc, "publish to the meta server", ctx->addr.qpn, d->meta.gid,
                            d->meta.qpn);
    if (ans.type == KRCONN__REJ) return KRCONN_E_STALE;
    return ans.type == KRCONN__PUBACK ? (ans.code ? KRCONN_E_FULL : 0) : KRCONN_E_PROTO;
}

KRCONN_API int krconn_unpublish(krconn_ctx *ctx, krconn_dir *d, const char *name, int timeout_ms)
{
    KRCONN__HCHECK(ctx);
    if (!ctx || !d || !krconn__name_ok(name)) return KRCONN_E_INVAL;
    if (d->kind == KRCONN__DIR_SHM) return krconn__dir_del(d->ent, d->nslots, name, &ctx->addr);
    krconn__msg m, ans;
    krconn__msg_init(ctx, &m, KRCONN__UNPUB);
    m.nonce = krconn__random(ctx) | 1;
    m.dst_gen = d->meta.generation;
    snprintf(m.name, sizeof m.name, "%s", name);
    int rc = krconn__request(ctx, &m, &d->meta, krconn__deadline(timeout_ms), NULL, NULL, &ans);
    if (rc)
        return krconn__fail(ctx, rc, "withdraw from the meta server", ctx->addr.qpn, d->meta.gid,
                            d->meta.qpn);
    if (ans.type == KRCONN__REJ) return KRCONN_E_STALE;
    if (ans.type != KRCONN__PUBACK) return KRCONN_E_PROTO;
    return ans.code == KRCONN__PUBACK_OK ? 0 : KRCONN_E_NOTFOUND;
}

/* >>data - registration, work requests, completions -------------------------------------------- */

KRCONN_API int krconn_reg(krconn_ctx *ctx, void *addr, size_t len, int access, krconn_mr *out)
{
    KRCONN__HCHECK(ctx);
    struct ibv_mr *mr = NULL;
    if (!ctx || !out || !addr || !len) return KRCONN_E_INVAL;
    int rc = rcp__verbs_reg(&ctx->d, addr, len, access, &mr);
    if (rc == -ENOMEM) {
        struct rlimit rl;
        char step[160];
        getrlimit(RLIMIT_MEMLOCK, &rl);
        if (rl.rlim_cur == RLIM_INFINITY)
            snprintf(step, sizeof step, "register %zu bytes (memlock limit unlimited)", len);
        else
            snprintf(step, sizeof step,
                     "register %zu bytes: the locked-memory limit is %llu KiB (raise ulimit -l / "
                     "RLIMIT_MEMLOCK)",
                     len, (unsigned long long)rl.rlim_cur / 1024);
        return krconn__fail(ctx, rc, step, 0, NULL, 0);
    }
    if (rc) return krconn__fail(ctx, rc, "register memory", 0, NULL, 0);
    out->addr = addr;
    out->len = len;
    out->lkey = mr->lkey;
    out->rkey = mr->rkey;
    out->mr = mr;
    return 0;
}

KRCONN_API int krconn_dereg(krconn_mr *mr)
{
    if (!mr || !mr->mr) return KRCONN_E_INVAL;
    int rc = rcp__verbs_dereg(mr->mr);
    if (!rc) memset(mr, 0, sizeof *mr);
    return rc;
}

/* Check a post's handle and wr_id; the verbs wr_id carries the handle's tag on top. */
static int krconn__pre(krconn *c, uint64_t wr_id, uint64_t *wrid)
{
    if (!c || wr_id > KRCONN__WRID_MASK) return KRCONN_E_INVAL;
    int e = rcp__load(&c->p->err);
    if (e) return e;
    *wrid = (uint64_t)c->tag << KRCONN__TAG_SHIFT | wr_id;
    return 0;
}

static unsigned krconn__flags(unsigned f)
{
    return (f & KRCONN_UNSIGNALED ? 0u : (unsigned)IBV_SEND_SIGNALED) |
           (f & KRCONN_INLINE ? (unsigned)IBV_SEND_INLINE : 0u) |
           (f & KRCONN_FENCE ? (unsigned)IBV_SEND_FENCE : 0u);
}

static int krconn__post_rc(int rc) { return rc == -ENOMEM ? KRCONN_E_AGAIN : rc; }

KRCONN_API int krconn_post_send(krconn *c, uint64_t wr_id, const krconn_mr *mr, const void *buf,
                                uint32_t len, unsigned flags)
{
    KRCONN__HCHECK(c);
    uint64_t w;
    int rc = krconn__pre(c, wr_id, &w);
    if (rc) return rc;
    return krconn__post_rc(rcp__verbs_post_send(c->p->qp, w, (void *)buf, len, mr ? mr->lkey : 0,
                                                krconn__flags(flags)));
}

KRCONN_API int krconn_post_recv(krconn *c, uint64_t wr_id, const krconn_mr *mr, void *buf,
                                uint32_t len)
{
    KRCONN__HCHECK(c);
    uint64_t w;
    int rc = krconn__pre(c, wr_id, &w);
    if (rc) return rc;
    if (!mr) return KRCONN_E_INVAL;
    return krconn__post_rc(rcp__verbs_post_recv(c->p->qp, w, buf, len, mr->lkey));
}

KRCONN_API int krconn_write(krconn *c, uint64_t wr_id, const krconn_mr *mr, const void *buf,
                            uint32_t len, uint64_t raddr, uint32_t rkey, unsigned flags)
{
    KRCONN__HCHECK(c);
    uint64_t w;
    int rc = krconn__pre(c, wr_id, &w);
    if (rc) return rc;
    return krconn__post_rc(rcp__verbs_post_write(c->p->qp, w, (void *)buf, len, mr ? mr->lkey : 0,
                                                 raddr, rkey, 0, 0, krconn__flags(flags)));
}

KRCONN_API int krconn_read(krconn *c, uint64_t wr_id, const krconn_mr *mr, void *buf,
                           uint32_t len, uint64_t raddr, uint32_t rkey, unsigned flags)
{
    KRCONN__HCHECK(c);
    uint64_t w;
    int rc = krconn__pre(c, wr_id, &w);
    if (rc) return rc;
    if (!mr) return KRCONN_E_INVAL;
    return krconn__post_rc(rcp__verbs_post_read(c->p->qp, w, buf, len, mr->lkey, raddr, rkey,
                                                krconn__flags(flags)));
}

KRCONN_API int krconn_cas(krconn *c, uint64_t wr_id, const krconn_mr *mr, uint64_t *old,
                          uint64_t raddr, uint32_t rkey, uint64_t expect, uint64_t desired,
                          unsigned flags)
{
    KRCONN__HCHECK(c);
    uint64_t w;
    int rc = krconn__pre(c, wr_id, &w);
    if (rc) return rc;
    if (!mr || !old) return KRCONN_E_INVAL;
    return krconn__post_rc(rcp__verbs_post_cas(c->p->qp, w, old, mr->lkey, raddr, rkey, expect,
                                               desired, krconn__flags(flags)));
}

KRCONN_API int krconn_faa(krconn *c, uint64_t wr_id, const krconn_mr *mr, uint64_t *old,
                          uint64_t raddr, uint32_t rkey, uint64_t add, unsigned flags)
{
    KRCONN__HCHECK(c);
    uint64_t w;
    int rc = krconn__pre(c, wr_id, &w);
    if (rc) return rc;
    if (!mr || !old) return KRCONN_E_INVAL;
    return krconn__post_rc(rcp__verbs_post_faa(c->p->qp, w, old, mr->lkey, raddr, rkey, add,
                                               krconn__flags(flags)));
}

static int krconn__wc_status(enum ibv_wc_status s)
{
    switch (s) {
    case IBV_WC_SUCCESS: return 0;
    case IBV_WC_RETRY_EXC_ERR: return KRCONN_E_PEERDEAD;
    case IBV_WC_RNR_RETRY_EXC_ERR: return KRCONN_E_NORECV;
    case IBV_WC_WR_FLUSH_ERR: return KRCONN_E_FLUSHED;
    default: return rcp__verbs_wc_errno(s);
    }
}

static int krconn__wc_op(enum ibv_wc_opcode op)
{
    switch (op) {
    case IBV_WC_SEND: return KRCONN_OP_SEND;
    case IBV_WC_RDMA_WRITE: return KRCONN_OP_WRITE;
    case IBV_WC_RDMA_READ: return KRCONN_OP_READ;
    case IBV_WC_COMP_SWAP: return KRCONN_OP_CAS;
    case IBV_WC_FETCH_ADD: return KRCONN_OP_FAA;
    case IBV_WC_RECV:
    case IBV_WC_RECV_RDMA_WITH_IMM: return KRCONN_OP_RECV;
    default: return KRCONN_OP_OTHER;
    }
}

/* Keep a completion for another handle of the same QP. Under p->mu. */
static void krconn__stash(krconn_ctx *ctx, krconn *t, const krconn_wc *wc)
{
    if (!t->stash) {
        t->st_cap = ctx->o.max_send_wr + ctx->o.max_recv_wr + 16;
        t->stash = (krconn_wc *)KRCONN_MALLOC(t->st_cap * sizeof *t->stash);
        if (!t->stash) { t->st_cap = 0; return; }
    }
    if (t->st_n == t->st_cap) return; /* cannot happen: no more than the queues hold */
    t->stash[(t->st_head + t->st_n++) % t->st_cap] = *wc;
}

/* Poll p's CQ once and route what came: c's completions into wc (up to max, *n counts), other
   handles' into their stashes, the keepalive's handled here. c may be NULL. Under p->mu. */
static void krconn__cq_take(krconn__phys *p, krconn *c, krconn_wc *wc, int max, int *n)
{
    struct ibv_wc w[16];
    int k = ibv_poll_cq(p->cq, 16, w);
    for (int i = 0; i < k; i++) {
        krconn_wc x;
        uint32_t tag = (uint32_t)(w[i].wr_id >> KRCONN__TAG_SHIFT);
        x.wr_id = w[i].wr_id & KRCONN__WRID_MASK;
        x.status = krconn__wc_status(w[i].status);
        x.op = w[i].status == IBV_WC_SUCCESS ? krconn__wc_op(w[i].opcode) : KRCONN_OP_OTHER;
        x.byte_len = w[i].byte_len;
        x.imm = w[i].wc_flags & IBV_WC_WITH_IMM ? ntohl(w[i].imm_data) : 0;
        if (x.status && !rcp__load(&p->err)) {
            rcp__store(&p->err,
                       x.status == KRCONN_E_PEERDEAD ? KRCONN_E_PEERDEAD : KRCONN_E_QPERR);
            if (tag == KRCONN__KA_TAG) {
                pthread_mutex_lock(&p->ctx->mu);
                p->ctx->st.keepalive_dead++;
                pthread_mutex_unlock(&p->ctx->mu);
                krconn__log(p->ctx, KRCONN_LOG_WARN, "keepalive: qp %u to qp %u: %s",
                            p->qp->qp_num, p->rqpn, krconn_strerror(x.status));
            }
        }
        if (tag == KRCONN__KA_TAG) {
            p->ka_out = 0;
            continue;
        }
        if (!x.status) p->act++;
        if (c && tag == c->tag && *n < max) wc[(*n)++] = x;
        else if (tag < p->nv && p->v[tag]) krconn__stash(p->ctx, p->v[tag], &x);
    }
}

KRCONN_API int krconn_poll(krconn *c, krconn_wc *wc, int max, int timeout_ms)
{
    KRCONN__HCHECK(c);
    if (!c || !wc || max <= 0) return KRCONN_E_INVAL;
    krconn__phys *p = c->p;
    uint64_t deadline = timeout_ms > 0 ? rcp__now_ns() + (uint64_t)timeout_ms * 1000000ull : 0;
    unsigned spins = 0;
    for (;;) {
        int n = 0;
        pthread_mutex_lock(&p->mu);
        while (n < max && c->st_n) {
            wc[n++] = c->stash[c->st_head];
            c->st_head = (c->st_head + 1) % c->st_cap;
            c->st_n--;
        }
        if (!n) krconn__cq_take(p, c, wc, max, &n);
        pthread_mutex_unlock(&p->mu);
        if (n) return n;
        int e = rcp__load(&p->err);
        if (e == KRCONN_E_CLOSED || e == KRCONN_E_PEERDEAD) return e;
        if (timeout_ms == 0) return 0;
        if (rcp__now_ns() >= deadline) return KRCONN_E_TIMEDOUT;
        if (++spins > 256) sched_yield();
        else rcp__cpu_relax();
    }
}

KRCONN_API int krconn_wait(krconn *c, krconn_wc *wc, int timeout_ms)
{
    KRCONN__HCHECK(c);
    int n = krconn_poll(c, wc, 1, timeout_ms > 0 ? timeout_ms : KRCONN_DEFAULT_TIMEOUT_MS);
    return n == 1 ? wc->status : n;
}

KRCONN_API int krconn_ping(krconn *c, int timeout_ms)
{
    KRCONN__HCHECK(c);
    uint64_t w;
    krconn_wc wc;
    int rc = krconn__pre(c, KRCONN__WRID_MASK, &w);
    if (rc) return rc;
    if ((rc = rcp__verbs_post_ping(c->p->qp, w, 0, 0))) return krconn__post_rc(rc);
    uint64_t deadline = krconn__deadline(timeout_ms);
    for (;;) {
        int left = (int)((deadline - rcp__now_ns()) / 1000000ull);
        if (rcp__now_ns() >= deadline || left <= 0) return KRCONN_E_TIMEDOUT;
        int n = krconn_poll(c, &wc, 1, left);
        if (n < 0) return n;
        if (n == 1 && wc.wr_id == KRCONN__WRID_MASK) return wc.status;
    }
}

KRCONN_API uint64_t krconn_wr_id(const krconn *c, uint64_t user_id)
{
    if (c && krconn__hk(c)) {
        errno = EBADF;
        return 0;
    }
    return (c ? (uint64_t)c->tag << KRCONN__TAG_SHIFT : 0) | (user_id & KRCONN__WRID_MASK);
}

/* >>events - completion events ----------------------------------------------------------------- */

KRCONN_API int krconn_event_fd(const krconn *c)
{
    KRCONN__HCHECK(c);
    if (!c) return KRCONN_E_INVAL;
    struct ibv_comp_channel *ch = c->p->cq->channel;
    return ch ? ch->fd : KRCONN_E_NOTSUP;
}

KRCONN_API int krconn_arm(krconn *c)
{
    KRCONN__HCHECK(c);
    if (!c) return KRCONN_E_INVAL;
    if (!c->p->cq->channel) return KRCONN_E_NOTSUP;
    int rc = ibv_req_notify_cq(c->p->cq, 0);
    return rc ? rcp__verbs_err(rc) : 0;
}

KRCONN_API int krconn_event_ack(krconn *c)
{
    KRCONN__HCHECK(c);
    if (!c) return KRCONN_E_INVAL;
    return krconn__ev_drain(c->p->cq);
}

#endif /* KRCONN_NO_RDMA */
#endif /* KRCONN_IMPLEMENTATION */

/*
   ------------------------------------------------------------------------------------------
   MIT License

   Copyright (c) 2026 the rpcool authors

   Permission is hereby granted, free of charge, to any person obtaining a copy of this software
   and associated documentation files (the "Software"), to deal in the Software without
   restriction, including without limitation the rights to use, copy, modify, merge, publish,
   distribute, sublicense, and/or sell copies of the Software, and to permit persons to whom the
   Software is furnished to do so, subject to the following conditions:

   The above copyright notice and this permission notice shall be included in all copies or
   substantial portions of the Software.

   THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING
   BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND
   NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM,
   DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
   OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
*/
