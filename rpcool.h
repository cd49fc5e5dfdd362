/* SPDX-License-Identifier: MIT */
/* rpcool.h - pointer-passing RPC over CXL shared memory (channels, calls, sealing, sandboxes).
   version 0.4.0

   TABLE OF CONTENTS
   -----------------
   1. Usage           how to build it in, compile-time options, logging
   2. What it is      channels, connections, calls, waiting, transports
   3. Example
   4. Safety modes    RELAXED, COPY, SEAL, SANDBOX and their threat models
   5. Between pods    the RDMA transport: names, addresses, what travels, failures
   6. Failures        dead clients and servers, dropped clients, bad input
   7. Thread safety
   8. Errors
   9. Limits
  10. Design notes
  11. protobuf-c      .proto services over rpcool (RPCOOL_WITH_PROTOBUF_C)
  12. Operating       who is calling, connection hooks, cancelling, stats, rpcoolctl
  13. Shared data     exports: a heap range by pointer in its pod, by one-sided RDMA elsewhere
  14. Pods of hosts   the pod transport: hosts that share one device and no kernel
   The declarations follow this text; then the implementation, whose sections are marked with
   anchors to grep for: >>implementation >>support >>layout >>state >>seam >>errors >>liveness
   >>contain >>names >>server >>ops >>accept >>dispatch >>serve >>handler >>client >>seal >>call
   >>connect >>shm >>builders; rpcool's own parts are in impl/rpcool/: the RDMA transport in
   rdma.h (>>r-conn >>r-client >>r-server >>r-tables), the pod transport in pod.h (>>p-dev
   >>p-server >>p-client >>p-tables), deferred replies in defer.h (>>defer), protobuf-c services
   in pbc.h (>>pbc), shared data in export.h (>>export >>x-remote). The licence (MIT) is at the
   end of the file.

   1. USAGE
   --------
   Copy rpcool.h, shmheap.h, alock.h and the impl/ folder into your project. In exactly one C or
   C++ file:

       #define RPCOOL_IMPLEMENTATION
       #include "rpcool.h"

   RPCOOL_IMPLEMENTATION also compiles shmheap's and alock's implementations into that file
   (unless they are there already; alock's without its remote cohort, ALOCK_NO_RDMA, unless
   RPCOOL_WITH_RDMA), so one define gives a working program. If shmheap's or alock's
   implementation lives in another file of yours, define RPCOOL_NO_SHMHEAP_IMPLEMENTATION or
   RPCOOL_NO_ALOCK_IMPLEMENTATION as well. Other files include
   "rpcool.h" without the define. Build with plain `cc -pthread` on Linux (glibc); no other
   libraries. Include rpcool.h before any system header in the implementation file (it needs
   GNU extensions), or compile with -D_GNU_SOURCE. Options, defined before the implementation
   include:
       RPCOOL_STATIC         make every rpcool function static (define SHMHEAP_STATIC too for
                             an all-static build)
       RPCOOL_ASSERT(x)      your assert (default: assert from <assert.h>), checking the
                             library's private state only, never data a peer controls
       RPCOOL_MALLOC(size)   your allocator for the library's private memory (default: malloc
       RPCOOL_FREE(p)        and free); define both or neither (#error otherwise). When
                             RPCOOL_IMPLEMENTATION compiles shmheap's implementation and
                             SHMHEAP_MALLOC/SHMHEAP_FREE are not defined, shmheap uses these too
       RPCOOL_LIMIT_SIGNAL   the signal that ends a sandboxed handler over its time limit
                             (default SIGURG; see "Time limits" in FAILURES)
   Logging is silent by default. The log field of rpcool_server_opts and rpcool_conn_opts
   receives connections, reaping and faults (and the messages of the connection heaps); without
   it, set RPCOOL_DEBUG (any value) in the environment to send them to stderr (read once per
   process).
   Options structs (rpcool_server_opts, rpcool_conn_opts, rpcool_call_opts, rpcool_handler_opts,
   rpcool_export_opts, rpcool_attach_opts): zero means the default. Fill one with designated
   initialisers in C; in C++, value-initialise it and assign the fields you set (`T o{};` and
   `T o = {};` never warn; an initialiser list that leaves fields out warns under -Wextra in g++
   before 14, -Wmissing-field-initializers):

       rpcool_server_opts o = {.max_conns = 64};  // C
       rpcool_server_opts o{}; o.max_conns = 64;  // C++

   2. WHAT IT IS
   -------------
   A server opens a *channel* by name and registers handlers by id; clients connect to the
   channel and call handlers. Arguments and results are not serialised: they are native data
   structures (pointer-rich if you like) in the connection's shared heap, and a call passes a
   pointer. Every process maps a heap at the same address (shmheap.h), so the pointer means the
   same thing in client and server.

       channel "kv"    a memfd of the server's, sealed against resizing: a small directory of
                       connection slots, the server's doorbell, and byte-range locks that tell
                       each side whether the other lives. /dev/shm/rpcool.kv holds the name
                       (the server's lock on it) and /dev/shm/rpcool.kv.sock is the front door:
                       a UNIX socket on which an acceptor thread of the server answers connects
       connection      one shmheap per client connection holding 64 call slots, a request
                       bitmap and the client's doorbell; arguments are allocated there by the
                       client, results there by the server. The heap is a memfd with no name,
                       made, sealed against resizing and formatted by a thread of the server
                       (at a lower priority) ahead of connects (rpcool_server_opts.prealloc of
                       them, of the size last asked for, from the first connect on: the first
                       connect, and one of another size, waits for its heap). Its address
                       range is carved from an arena the server reserves in the pod
                       (shmheap_resv_create: one pod entry per arena of heaps of one size,
                       arenas twice as large as the last, so thousands of connections leave the
                       pod to other programs);
                       a range is used again once its slot is free. A connect is a socket
                       round trip: the acceptor picks a free slot, takes the slot's liveness
                       lock through the very descriptor it then sends, and sends that channel
                       descriptor, the heap and a hold on the heap's address range (SCM_RIGHTS)
                       to that one client, keeping only its own handle of the heap; the client maps
                       both (a channel once per process, whatever its number of connections)
       call            client fills a slot's request line {handler id, arg pointer, length,
                       safety flags, generation}, sets the slot's bit in the request bitmap if
                       it is not still set, and its connection's bit in the channel's ready
                       summary (two words) if not still set, and rings the server only if it
                       sleeps; a serving pass visits the connections of the ready summary
                       only, starting after the last one it served (round robin: no busy client
                       waits behind more than one pass of the others), and a connection found
                       idle leaves the summary after 64 passes (a busy one's bits stay set, so
                       its calls write nothing there); a server
                       thread claims the request in its own memory, runs the handler and
                       writes the slot's response line {status, result pointer, length}: one
                       cache line moves each way, as in a bare ping-pong

   Waiting: both sides busy-poll for spin_ns (RPCOOL_DEFAULT_SPIN_NS, 20 us), then sleep on a
   shared futex, so an idle server uses no CPU; a sleeping side is woken only when it announced
   that it sleeps, so a busy pair on separate CPUs makes no system calls at all. The clock is
   read once per 16-128 polls. A polling side yields its CPU (sched_yield) at every poll when
   the peer was seen on the same CPU (sched_getcpu hints in the channel file): there a yield is
   what lets the peer answer, and a round trip costs two context switches. On separate CPUs a
   yield would only add latency: only a client still waiting after 2 us yields, once per 64
   polls, in case its server has no CPU of its own. Many clients: a client answered while it
   polled yields once when other clients of the channel sleep waiting for their answers (they
   need a CPU to take them), and a client that posts while the server's passes find more
   requests than there are CPUs (in the last millisecond) sleeps at once instead of polling: its
   answer comes after theirs, and a crowd that polls is served unfairly (clients beside the
   server's CPU get it less often). Both counts are hints in the channel's header, kept by the
   server (a client killed asleep is taken out when reaped). Idle costs nothing:
   serving threads sleep without a timeout, and the acceptor wakes once a second (every
   reap_ms while a dead client can only be found by polling its lock, and every 10 ms while a
   time limit is set).

   Asynchronous calls: rpcool_call_async() returns at once with a call id; finish it with
   rpcool_poll() (never blocks), rpcool_wait(), or give a callback and call rpcool_progress()
   from the client's loop (callbacks run inside rpcool_progress, on the caller's thread). Its
   timeout (opts->timeout_ms, else the connection's) counts from rpcool_call_async: once it has
   passed, rpcool_poll and rpcool_wait return RPCOOL_E_TIMEOUT and rpcool_progress gives the
   callback RPCOOL_E_TIMEOUT.

   Deferred replies: a handler may take its call out of the serving thread with
   rpcool_ctx_defer(ctx, &d) and return; the serving thread goes on serving others, and any
   thread finishes the call later with rpcool_deferred_reply(d, status, p, len) (p in the
   client's heap, from rpcool_deferred_alloc(d, size), or NULL) or rpcool_deferred_fail(d, code);
   both free d, and the caller gets status and p as if the handler had returned them. The
   caller waits as for any call (its timeout applies). A handler may also finish its deferred
   call itself before it returns. After rpcool_ctx_defer the handler's return value is
   ignored, unless the handler ends by rpcool_ctx_fail, a failed checked accessor or a fault
   contained under RPCOOL_SANDBOX: the call then ends at once with that code, and the later
   rpcool_deferred_reply only frees d and returns RPCOOL_E_INVAL. A reply outside the client's
   heap is refused: the caller gets RPCOOL_E_BADPTR and so does rpcool_deferred_reply. Under
   RPCOOL_COPY the argument's private copy stays valid until the call is finished. The checked
   accessors and rpcool_ctx_alloc belong to the handler's run: after it returns use
   rpcool_deferred_alloc. A second rpcool_ctx_defer of a call returns RPCOOL_E_INVAL. Over RDMA
   too: the RDMA thread goes on with the connection's next frames, and the deferred reply
   travels from the thread that gives it (its blocks inline, as any reply). A connection's heap
   (over RDMA: its mirror) stays at the server until every deferred call of it is finished, even
   when its client is gone. Finish
   every deferred call before rpcool_server_close. With protection keys (section 4) a thread
   that finishes a deferred call and is not a serving thread needs access to the connection
   heaps first, as any other thread of the server (shmheap_pkey_set).

   Transports: within one kernel, shared memory (RPCOOL_TRANSPORT_SHM, the default); between
   hosts that share a device and no kernel, the pod transport (RPCOOL_TRANSPORT_POD, section 14:
   a server that names the device serves there too); between pods, RDMA (section 5; compiled in
   with RPCOOL_WITH_RDMA). A plain name takes the fastest way there is: "kv" is the channel of a
   server in this kernel, else of the pod's device when the client names one; "pod:kv" takes
   the pod only, "rdma://HOST/kv" the channel kv of a server in another pod; the same calls and
   handlers work on all three.

   3. EXAMPLE
   ----------
   One program, run as `./echo serve &` and then `./echo`:

       #define RPCOOL_IMPLEMENTATION
       #include "rpcool.h"
       #include <stdio.h>
       #include <string.h>

       static int echo(rpcool_ctx *ctx, void *arg, size_t len, void *user)
       {
           (void)user;
           char *r = rpcool_ctx_alloc(ctx, len);       // the result lives in the client's heap
           if (!r) return SHMHEAP_E_FULL;
           memcpy(r, arg, len);
           rpcool_ctx_reply(ctx, r, len);
           return 0;                                   // the status rpcool_call returns
       }

       static int fail(int rc)
       {
           fprintf(stderr, "echo: %s\n", rpcool_strerror(rc));
           return 1;
       }

       int main(int argc, char **argv)
       {
           int rc;
           if (argc > 1 && !strcmp(argv[1], "serve")) {
               rpcool_server *s;
               if ((rc = rpcool_server_open("echo", NULL, &s))) return fail(rc);
               rpcool_server_add_handler(s, 1, echo, NULL, 0);
               return rpcool_serve(s);                 // or rpcool_server_start(s, nthreads)
           }
           rpcool_conn *c;
           if ((rc = rpcool_connect("echo", NULL, &c))) return fail(rc);
           char *msg = rpcool_strdup(c, "hello");      // in the connection heap
           void *ret;
           size_t n;
           rc = rpcool_call(c, 1, msg, 6, &ret, &n);   // the handler's status, or an error
           if (rc == 0) printf("%.*s\n", (int)n, (char *)ret);
           rpcool_free(c, ret);
           rpcool_free(c, msg);
           rpcool_disconnect(c);
           return rc ? fail(rc) : 0;
       }

   4. SAFETY MODES AND THEIR THREAT MODELS
   ---------------------------------------
   Flags, combinable. A call gets the union of the client's per-call flags, the client's
   connection default, the channel's policy (server opts) and the handler's flags. Whatever
   the mode, the server treats everything in a client's heap as untrusted input: slot indexes
   are masked, handler ids range-checked, every pointer it follows for the library (argument,
   seal range) is checked with shmheap_contains against that connection's heap, names are
   checked for their pattern, and the library's own reads of a client's heap run under fault
   containment (a fault there, such as a SIGBUS for memory the kernel cannot provide, makes
   that connection fail, not the server; this includes rpcool_ctx_alloc and the checked
   accessors called by a handler of any mode, and a sandboxed handler's SIGBUS inside the
   client's heap, after which the server drops the connection). A malicious client can always
   deny service to its own connection.
   Connection heaps are memfds the server made, sealed against shrinking and growing
   (F_SEAL_SHRINK, F_SEAL_GROW): no client can truncate its heap (ftruncate fails with EPERM).
   They have no name in /dev/shm; each is given over the socket to one client only, and the
   server makes its process non-dumpable (unless rpcool_server_opts.dumpable is 1), so no other
   process of its user can open its descriptors (/proc/PID/fd, pidfd_getfd) or read its memory
   (/proc/PID/mem): another client cannot take or read a client's heap, except through that
   client's own process (see LIMITS). A heap made ahead that nobody claimed is held by the
   server alone and goes with it. A client at the socket that sends junk is refused at once, one
   that sends nothing after 100 ms; neither makes the acceptor wait.
   The channel is a memfd sealed against shrinking and growing (F_SEAL_SHRINK, F_SEAL_GROW):
   no client can truncate it. Every client maps it writable (it rings the server's doorbell
   and marks its slot closing there), so a client can overwrite its header: the server
   restores the header on its timed rounds (every reap_ms while one is due, else every second),
   and clients, connected or connecting, believe a
   "closed" state or a changed epoch only when the server's liveness lock confirms it, so they
   are not disturbed. The name file /dev/shm/rpcool.NAME is never mapped and clients do not
   read it: a client that truncates or overwrites it disturbs nobody (the server rewrites it
   on the same rounds). What a client can still do to others: write their channel slots (their
   state words; liveness is the kernel's byte locks, and calls do not use the slots), and the
   ready summary (section 2): setting bits makes the server look at connections for nothing
   (bits beyond the channel's slots are ignored and counted as bad entries), clearing them
   delays another client's call by at most that client's peer_check_ms (and the server's
   timed rounds put back every connection with a request flagged).

   RPCOOL_RELAXED (0)  Trust the peer. The handler gets the pointer into the shared heap. A
       buggy or malicious client can change the argument while the handler reads it, and a
       handler that follows a wild pointer crashes the server.
   RPCOOL_COPY  The server copies [arg, arg+len) into private memory before the handler runs
       (under fault containment). Protects against everything for *flat* arguments: the
       sender cannot change what the handler sees (no time-of-check/time-of-use), bad ranges
       are refused. Pointers *inside* the copy still point into the shared heap; follow them
       with rpcool_ctx_need() or use SANDBOX. Costs a memcpy per call. An argument larger
       than the server's max_copy (RPCOOL_DEFAULT_MAX_COPY, 64 MiB) fails with
       RPCOOL_E_TOOBIG, since a client picks its heap's size; a serving thread keeps at most
       1 MiB of copy buffer between calls.
   RPCOOL_SEAL  The client makes the pages holding the argument read-only in its own address
       space (mprotect via shmheap_seal) before posting and releases them after the reply, in
       batches (rpcool_conn_opts.seal_batch; rpcool_release()). Protects against a *buggy*
       sender: another thread of the client that writes to the argument during the call
       faults instead of corrupting what the server reads. It does NOT protect against a
       malicious sender: the sender can call mprotect itself, or map the same shm file a
       second time writable and write through that alias; the server cannot verify any of
       this from user space (RPCool's kernel patch forbids mprotect on heap ranges; a library
       cannot). A seal covers whole pages: allocate sealed arguments with rpcool_alloc_pages()
       or an arena (rpcool_arena_init) so no unrelated data shares the pages; ranges must
       start on a page.
       Below a page, copy instead (RPCool's rule): when the seal range (seal_p/seal_len, or
       [arg, arg+len) without seal_p) is shorter than a page, nothing is sealed and no
       mprotect is made; the server copies [arg, arg+len) into private memory as under
       RPCOOL_COPY (whatever max_copy), the handler gets that copy and rpcool_ctx_safety()
       reports RPCOOL_COPY as well. This is stronger than a seal for the argument's own
       bytes, even against a malicious sender: what the handler reads cannot change. Pointers
       inside the copy still point into the shared heap, which the sender can still change:
       follow them with rpcool_ctx_need() or use SANDBOX. Such an argument need not start on
       a page, its pages stay writable for the sender during and after the call, and it takes
       no part in batched release. Everything below is about ranges of a page or more.
       Batched release (seal_batch > 1, as RPCool's): after the reply the pages stay
       read-only until seal_batch sealed calls have finished or rpcool_release() is called, so
       the sender must not write to argument memory before then (it would fault); rpcool_free
       of a block that is still sealed releases first, but memory freed by other means (an
       arena, shmheap_free) must be released by hand before it is reused. A call whose range
       is still sealed from an earlier call makes no system call at all; sealed calls in
       flight at once may share pages (a range stays sealed while any call uses it).
       Cost: a sealed call of a page or more pays one mprotect to seal and one to release,
       and each may flush the TLB of every CPU running a thread of the sender, so it depends
       on the machine (bench/seal_cost.c measures it; sh bench/bench_shmheap.sh runs it). The
       first seal of a range also maps that range on its own (shmheap_seal), so that sealing
       the same range again does not split the heap's mapping and merge it back; one
       under a page pays a memcpy of the argument instead, as RPCOOL_COPY. A repeated
       argument with batched release costs no more than a relaxed call.
   RPCOOL_SANDBOX  The handler runs inside a recovery point: a SIGSEGV or SIGBUS raised while
       it runs becomes the error reply RPCOOL_E_FAULT and the server thread carries on. So
       does a stack overflow (a handler recursing over a client's cyclic data): every thread
       that runs handlers has an alternate signal stack (one the thread has already is kept),
       so the fault on the stack's guard page can be handled; see LIMITS for how deep a
       handler may recurse. Handlers read peer data through checked accessors
       (rpcool_ctx_need, RPCOOL_NEED, rpcool_ctx_need_str, rpcool_map_get_checked) that end
       the call with RPCOOL_E_BADPTR when a pointer leaves the connection's heap, and with
       RPCOOL_E_BUDGET once the bytes they checked in one call add up to more than the
       connection heap holds (the data has a cycle, or is read again and again): a walk over
       a cyclic list through them ends, in any mode (on shared memory). Each charges what it
       reads: rpcool_ctx_need its len (RPCOOL_NEED: sizeof *p), rpcool_ctx_need_str the
       string's length plus its NUL, rpcool_map_get_checked the map's header (sizeof
       (rpcool_map)), each entry it probes (sizeof (rpcool_map_entry)) and each key it
       compares (length plus NUL); rpcool_ctx_ok charges nothing. A sandboxed handler
       that loops without them is ended by a time limit (see "Time limits" in FAILURES).
       With memory protection keys (pku; shmheap_pkey_supported()) each connection heap also
       gets a key and the handler runs with the keys of all *other* connections' heaps
       disabled, so a stray pointer into
       another client's data (or its heap's header) faults even if the handler does not check
       it. The server takes the keys (up to 15, all that are free) when the channel is opened
       with RPCOOL_SANDBOX or a sandboxed handler is registered before serving starts; later
       registrations get no keys. Slot i uses key i mod 15, so beyond 15 connections some
       share a key and are not fenced from each other; a client in the server's own process
       gets no key. Only rpcool's serving threads (and rpcool_server_close) may then touch
       connection heaps: another thread of the server process needs shmheap_pkey_set for them
       first. Protects the server from malformed pointer-rich data; it does not stop the
       sender from changing the data during the call (combine with COPY for flat data). A
       handler abandoned by a fault or a time limit does not unwind: it must not hold locks
       or own private resources while touching peer data (do that first, then take locks on
       private state), and in C++ no destructors run (rpcool_ctx_fail and the checked
       accessors do unwind in C++: see "C++" in FAILURES). A time limit may end a sandboxed
       handler anywhere in its own code (not inside rpcool's functions): one with a limit
       should not call functions that take locks (malloc, stdio) while it may run over it.

   5. BETWEEN PODS (RDMA)
   ----------------------
   Build: #define RPCOOL_WITH_RDMA before the implementation include, keep krconn.h beside
   rpcool.h (its implementation comes along, unless RPCOOL_NO_KRCONN_IMPLEMENTATION says it is in
   another file of yours) and link -libverbs -pthread (Debian: libibverbs-dev). Without the define,
   or without rdma-core's headers, RDMA names and rpcool_server_opts.rdma give RPCOOL_E_NOTSUP.
   Server: rpcool_server_opts.rdma = "serve" also serves clients of other pods: the process runs
   krconn.h's meta server (TCP port 7471, "serve:PORT" for another) and publishes the channel
   there as "rpcool.NAME"; if that port is served already (another server's or an export's
   "serve" in this process, or another process of this host), it publishes there, and that meta
   server must stay up while the channel is open. "HOST[:PORT]" publishes at another meta server
   instead, "" at $KRCONN_META. RDMA connections are served by one thread that starts with the
   server's first serving thread (rpcool_serve or rpcool_server_start) and stops with
   rpcool_server_stop; a second thread answers page faults from rpcool_server_open to
   rpcool_server_close. A server needs userfaultfd: Linux 5.11 or later (UFFD_USER_MODE_ONLY),
   else root or vm.unprivileged_userfaultfd=1 (rpcool_server_open fails with -EPERM otherwise).
   Client: rpcool_connect("rdma://HOST[:PORT]/NAME", ...) asks the meta server at HOST:PORT,
   "rdma:NAME" (or opts.transport = RPCOOL_TRANSPORT_RDMA with a plain NAME) the one
   $KRCONN_META names. A process has one krconn context (device $KRCONN_DEVICE, else the first
   active one), made at its first RDMA connect and kept until it exits; a forked child makes its
   own. Each connection is a physical RC queue pair of its own, taken from krconn's pool.
   Addresses: the connection heap is a heap of the client's pod (on a memfd: nothing in
   /dev/shm), and the server keeps a private mirror of it at the same address, so pointers mean
   the same on both sides. Heaps of different pods must not share addresses: give every pod its
   own pod id (SHMHEAP_POD_ID, 0-15, set when the pod is first used; shmheap.h). A connection
   whose heap clashes with a mapping of the server is refused with RPCOOL_E_ADDRINUSE; the
   client then holds that range and tries again with a heap elsewhere in its pod (up to 4 times
   within connect_timeout_ms), so a client that starts while the server still mirrors up to 4
   dead, not yet reclaimed clients of its pod at the ranges it is given connects all the same.
   A connect whose queue pair fails before the server's hello arrives, or that has no hello
   8 s after krconn connected it, starts afresh with another queue pair while
   connect_timeout_ms allows; a queue pair whose connection failed is never used again.
   What travels with a call: the argument's bytes [arg, arg+len), the seal range if the call
   names one (rpcool_call_opts.seal_p, seal_len) and the ranges named in
   rpcool_call_opts.extents (up to 16; an arena's [base, base + used) for pointer-rich data),
   rounded out to whole pages and clipped to the heap, in the call's message (up to 2 MiB; what
   does not fit is fetched). A page that travelled with the previous call of the connection and
   is the same now on both sides (the client compares it with its copy of what it sent, the
   server with its copy of what it installed, so a page the handler wrote does not count) stays
   in the mirror and does not travel again; if only some of its bytes changed, those bytes travel
   (in 8-byte words). Before it runs a call the server drops every other page of the mirror, so
   a handler never reads a page older than its call. A page the handler touches that did not
   travel is fetched from the client on first touch (userfaultfd), one page per fault: a
   pointer outside the extents works, slowly. The client sends that page from inside its wait:
   it answers only while one of its threads is in rpcool_call, rpcool_wait, rpcool_poll or
   rpcool_progress on that connection (a synchronous call always is); a fetch unanswered for
   10 s drops the connection.
   Replies: a quarter of the connection heap (rounded to pages) is the reply region, owned by
   the server. rpcool_ctx_alloc allocates there, and every block the handler allocated during the
   call travels back with the answer (at most 2 MiB in all, else the call fails with
   RPCOOL_E_TOOBIG) and lands at the same address in the client's heap. The caller frees each
   block of a reply with rpcool_free, once, as on shared memory (the free travels with a later
   call; a pointer that is not the start of a reply block is ignored there). What a
   handler writes into the argument (the mirror) does not travel back. rpcool_ctx_heap returns
   NULL (the heap is in another pod).
   Safety: the bytes a handler reads crossed the network and cannot change under it, so every
   RDMA call counts as sealed (RPCOOL_SEAL is in rpcool_ctx_safety; a channel's RPCOOL_SEAL
   policy is met; the client seals nothing). RPCOOL_COPY copies out of the mirror; SANDBOX keeps
   its checked accessors (bounded by the mirror: the client's heap range) and fault containment;
   with protection keys, a sandboxed RDMA handler cannot touch shared-memory clients' heaps, but
   mirrors of other RDMA clients have no key. A pointer the library follows for a client (the
   argument, a fetch, a reply block, a free) never leaves that client's mirror. A malformed
   message (bad length, type, sequence or address) drops that connection (counted in
   bad_entries), never the server.
   Serving: the calls of one RDMA connection run one at a time, in order, on the RDMA thread;
   connections take turns. A call is admitted, run and answered as on shared memory: time
   limits hold (the RDMA thread is watched as every serving thread; a handler over its limit
   ends at its next checked accessor, a SANDBOX one by RPCOOL_LIMIT_SIGNAL, and the thread
   serves on), and the budget of the checked accessors is the client's heap's size.
   Waiting on either side: poll the completion queue while spin_ns lasts (by default
   RPCOOL_DEFAULT_RDMA_SPIN_NS, 500 us, RR-Compound's busy-poll time: a network round trip is
   longer than the 20 us that suit shared memory), or while calls are
   frequent: up to 4 times the recent round trip (a client) or gap between calls (the server)
   when that is under 50 ms; then sleep on the completion channel (RR-Compound's BPEV). A
   side whose spin_ns is the default measures both ways and waits the faster one: it polls
   first or sleeps at once, whichever gave the shorter recent waits (moving averages of a
   client's round trips, of the serving thread's gaps between calls under 12.5 ms; the first
   wait polls, the second sleeps, then 1 in 16 tries the other way). On Soft-RoCE the kernel
   moves the packets on the same CPUs, and a side that polls can delay its own messages. A
   spin_ns of the caller's own turns the choice off.
   Only the thread that waits polls; the completion queue is armed only right before it sleeps.
   An idle server wakes every reap_ms (keepalives).
   An RDMA connection that made calls logs one line at RPCOOL_LOG_INFO on each side when it ends
   (rpcool_disconnect; the server's when it lets go of it): how many calls, how many of them
   were compared in place, and how the side waited (its recent waits polling first and sleeping
   at once); the client's line adds the bytes of kept pages and of whole pages sent, and the
   times it slept.
   Failures: a client waiting for an answer sends a keepalive (a zero-byte RDMA WRITE) when
   nothing came for peer_check_ms; if the server is dead it fails after the queue pair's retry
   bound (rpcool's queue pairs wait 0.54 s for an acknowledgement, 7 times: about 4 s, so that
   slow but live peers are not given up), so a call fails with RPCOOL_E_PEERDEAD within
   peer_check_ms plus that bound. A server that closes tells its clients (RPCOOL_E_CLOSED):
   rpcool_server_close waits, up to a second for all its RDMA connections together, until each
   client's NIC has taken the goodbye before it lets the queue pair go. The server sends
   keepalives on connections silent for reap_ms: a dead client's mirror, queue pair and
   registered memory are reclaimed within reap_ms plus the retry bound (counted in reaped).

   6. FAILURES
   -----------
   Liveness uses open-file-description byte locks (F_OFD_SETLK) on the channel: the server
   holds byte 0 (and byte 0 of the name file while it owns the name), client slot i holds
   byte 1+i. The kernel drops them when the process dies, in
   any pid namespace, with no pid reuse race. A process that fork()s after opening a channel or
   connecting: the child closes its inherited copies (pthread_atfork) and does not inherit the
   channel mapping (MADV_DONTFORK), so the parent's death is still seen; connections and
   servers are not usable in the child.
   - Client disconnects with calls in flight (shared memory; over RDMA rpcool_disconnect sends
     its goodbye and returns without waiting): rpcool_disconnect returns once the server let go
     of the connection, at most disconnect_ms (RPCOOL_DEFAULT_DISCONNECT_MS, 5 s) after it
     began: at once when no handler runs for it, else when the running ones have returned
     (plus up to reap_ms). Its calls not yet started never start, as for a dead client; a
     handler still running after disconnect_ms goes on at the server (its heap stays mapped
     there until it returns), and no reply of any of them reaches the client.
   - Client dies (even mid-call): the server notices at once where the kernel tells it (a
     pidfd of the client's process, from the socket it connected by, SO_PEERPIDFD on Linux 6.5
     and later, else pidfd_open of its pid: its end is an event in the acceptor's epoll, which
     then asks the client's lock byte), else within reap_ms (RPCOOL_DEFAULT_REAP_MS, 100 ms: a
     thread of the server asks the lock bytes of such clients every reap_ms, whatever its
     serving threads do; also for a client whose process ended while a descriptor of its
     connection lives on elsewhere); a connect that finds every slot taken first reaps the
     clients dead by then. It starts none of the dead client's calls from then on, lets any
     handler running for it finish and unmaps its heap (handlers running for other clients do
     not hold this up): a connection heap is
     a memfd with no name, freed whole when the last process that has it lets go. So also for
     a client that dies anywhere inside rpcool_connect (its slot's lock is taken through the
     descriptor it is sent, so it is the client's from the first instant, and goes with the
     client even before it received it) or rpcool_disconnect, and for one the server had not
     noticed yet when it closes or dies. rpcool_server_close waits (up to about a second) for
     clients inside rpcool_disconnect to see the channel closed and leave. A connected client
     that outlives its server keeps its heap mapped until rpcool_disconnect.
   - Heaps made ahead: the server holds them alone, so they go when it closes or dies. Their
     address ranges in the pod (shmheap.h) are held by locks that die with their holders; the
     next heap made on a descriptor (the next server's first) frees the entries nobody holds.
   - Server dies: a waiting call checks the server's lock every peer_check_ms
     (RPCOOL_DEFAULT_PEER_CHECK_MS, 100 ms) and fails with RPCOOL_E_PEERDEAD; calls also fail
     if the channel was closed (RPCOOL_E_CLOSED) or taken over by a new server.
   - Client dropped by the server: a read of its heap faulted (SIGBUS: memory the kernel
     could not provide; a client cannot truncate its heap), or it kept its heap's mutex taken
     for over a second. The server serves it no more and
     reclaims its heap; the client's waiting and later calls fail with RPCOOL_E_DROPPED
     within peer_check_ms, and rpcool_disconnect returns at once.
   - Timeouts: optional per call (timeout_ms). A call that timed out is not taken back: it may
     still run; its slot (and reply, and seal) is reclaimed once the server has answered, by
     the connection's next call or rpcool_progress, its seal also by an rpcool_release that
     finds the server gone. A call that fails because the
     server is gone (RPCOOL_E_PEERDEAD, RPCOOL_E_CLOSED, RPCOOL_E_DROPPED) gives its seal up at
     once: after rpcool_release its pages are writable.
   - Bad input: unknown handler id (RPCOOL_E_NOHANDLER), argument outside the connection heap
     (RPCOOL_E_BADPTR), unknown flags (RPCOOL_E_INVAL), a COPY argument over max_copy
     (RPCOOL_E_TOOBIG), a slot that was flagged but not filled (ignored and counted), a
     handler that faults in SANDBOX mode (RPCOOL_E_FAULT), checked reads over the heap's
     size (RPCOOL_E_BUDGET, counted in over_budget), a connect asking for a heap over
     max_heap_size (RPCOOL_E_HEAPSIZE; RPCOOL_DEFAULT_MAX_HEAP_SIZE, 1 GiB). The log gets a
     contained fault of a handler, an unknown handler id, a reply outside the connection
     heap, a time limit and a budget exceeded once per connection each (WARN, with the
     client's pid as the kernel saw it on the socket), so a client cannot flood it.
   - C++: with the implementation compiled as C++ (with exceptions), an exception that escapes
     a handler is the error reply RPCOOL_E_EXCEPTION and the serving thread carries on (the
     call's blocks are freed as for any failed call), in every safety mode and on both
     transports; rpcool_ctx_fail and the checked accessors end a call by unwinding, so its
     destructors run. A fault (SIGSEGV, SIGBUS) or a time limit still ends a sandboxed handler
     without unwinding. Compiled as C, an exception cannot reach rpcool: do not let one
     escape a handler.
   - Failed calls: a call that fails (a negative status, however it came: returned,
     rpcool_ctx_fail, a checked accessor, a fault, a time limit, a deferred reply) returns no
     reply (*ret is NULL), and every block its handler allocated with rpcool_ctx_alloc (or
     rpcool_deferred_alloc) is freed; so is every block of a call that succeeds without a
     reply. A handler must not free those
     blocks itself, nor keep pointers to them after the call. A call that succeeds with a
     reply leaves all its blocks to the caller, who frees each with rpcool_free, once, on
     both transports. rpcool_call with ret NULL discards the reply: the server frees every
     block the handler allocated for it (nothing travels back), so the caller frees nothing.
   - Time limits: rpcool_server_opts.limit_ms for every handler, rpcool_handler_opts.limit_ms
     (rpcool_server_add_handler_ex) for one; none by default. A thread of the server looks
     every 10 ms while any limit is set. A handler over its limit is counted (over_limit)
     and logged; its next checked accessor ends the call with RPCOOL_E_DEADLINE, in any
     mode. A SANDBOX handler that makes no checked access within 20 ms more is ended where
     it is: the server sends its thread RPCOOL_LIMIT_SIGNAL (SIGURG; a handler of yours for
     it still gets the signals that are not rpcool's), the call fails with RPCOOL_E_DEADLINE
     and the thread carries on, as after a fault. A handler of another mode is never
     interrupted (abandoning it could leave the server's state half changed): it runs on
     until it returns or reaches a checked accessor. Time limits and the budget of the
     checked accessors hold for calls of every transport (over RDMA too: see BETWEEN PODS).
   - Closing: rpcool_server_close waits close_ms (RPCOOL_DEFAULT_CLOSE_MS, 1 s) for running
     handlers (time limits hold meanwhile), then ends sandboxed ones as a time limit would.
     A handler of another mode still running 100 ms after that is left to its thread:
     rpcool_server_close closes the channel (clients fail with RPCOOL_E_CLOSED), removes its
     files and returns RPCOOL_E_TIMEOUT, keeping the server's memory and the connection heaps
     for that thread (they are never freed). So rpcool_server_close returns within close_ms
     plus about 100 ms, plus the second it may wait for clients inside rpcool_disconnect.
   - A server killed by a signal it does not handle (SIGTERM, the way services are stopped)
     leaves its name file and socket (rpcoolctl --clean removes them, the next server of the
     name takes them over). rpcool_serve_until_signal(s, nthreads) serves until SIGINT or
     SIGTERM and returns; rpcool_server_close(s) then removes every file of the channel.
   - A channel name served by a live server: RPCOOL_E_NAMETAKEN. A name whose server died is
     taken over: the new server makes a new channel and socket; the old one's clients fail
     with RPCOOL_E_PEERDEAD and keep their heaps until they disconnect (nothing is unlinked:
     heaps have no names).

   7. THREAD SAFETY
   ----------------
   A connection may be used by many threads at once (up to 64 calls in flight per connection;
   synchronous calls wait for a free slot, asynchronous ones return RPCOOL_E_AGAIN). The first
   thread whose synchronous call finds no slot kept on the connection keeps its slot, so its
   later synchronous calls there take no atomic operation for a slot; a call that finds every
   other slot in flight takes the kept slot whenever its thread is not in a call on it (it
   makes every thread of the process pass a memory barrier: membarrier(2), private expedited),
   so all 64 stay everyone's. Without that membarrier command (Linux before 4.14, a seccomp
   filter) no slot is kept; 256 threads of a process keep slots at once, later ones none. A server
   may be served by many threads (rpcool_server_start, or several threads in rpcool_serve).
   Register handlers before serving or at any time: a registration is published whole (one
   atomic pointer store), so a call sees one registration's function, user pointer and flags;
   replaced registrations are freed when the server closes. rpcool_server_close waits for
   threads in rpcool_serve to return, within its bound (see "Closing" in FAILURES; from a
   handler of that server it fails with RPCOOL_E_INVAL). Disconnect a connection only when no
   other thread uses it, and only once.
   A log callback may be called from any thread that uses the server or connection.

   8. ERRORS
   ---------
   Functions return 0 or a negative code: RPCOOL_E_* (RPCOOL_ERRORS lists them), SHMHEAP_E_*
   from the heap (a full connection heap is SHMHEAP_E_FULL), or -errno. rpcool_strerror(code)
   explains any of them. rpcool_call returns the handler's status (>= 0) or a negative code
   (the handler's own negative return passes through unchanged); with a negative code there
   is no reply (see "Failed calls" in FAILURES). rpcool_free returns 0, or a code for a
   pointer that is no live block of the connection heap (on the stack, from malloc, inside a
   block, already freed: SHMHEAP_E_FOREIGN, SHMHEAP_E_BADPTR, SHMHEAP_E_DOUBLEFREE), which
   it leaves alone.

   One rule in every rpcool header: each header owns a block of 100 codes counting up from its
   number (shmheap -1000, rpcool -2000, alock -3000, krconn -4000, nppin -5000). Every
   X_strerror explains its own codes and those of every rpcool header declared before its
   implementation, so a code passed through keeps its text; another code from -1 to -4095 is
   -errno, with strerror's text when the system knows that errno; a code of a header not
   declared names that header; anything else (an unused code of a declared header's block too)
   is "unknown error code", and 0 is "success".
   Every text is a static string.

   Handles, one rule in every rpcool header: a handle is open from the call that made it until
   its close. A second close, or any use after the close, returns the header's E_BADHANDLE code
   (a function that returns a pointer or a size returns NULL or 0 and sets errno to EBADF); in
   a child of fork(), a handle its parent made returns the header's E_FORKED code, its close
   included (the child's copy goes at exit or exec), unless the header lets children use it. A
   table of open handles in each process tells these apart without reading the handle, so none
   of them is a crash; once a later open hands out the same address again, the old pointer is
   that new handle (as a file descriptor's number is). A pointer that was never a handle is
   undefined, as free() of one is.
   Here the handles are rpcool_server, rpcool_conn, rpcool_export and rpcool_remote:
   RPCOOL_E_BADHANDLE and RPCOOL_E_FORKED. No handle of rpcool.h is usable in a forked child
   (see FAILURES): the child opens, connects, opens an export or attaches anew.

   9. LIMITS
   ---------
   Linux with glibc. Channel names: 1-48 characters of [A-Za-z0-9._-]. Up to RPCOOL_MAX_CONNS
   (16384) connections per channel (RPCOOL_DEFAULT_MAX_CONNS, 1024, by default), 64 calls in
   flight per connection, handler ids below 1024, connection heaps up to max_heap_size
   (RPCOOL_DEFAULT_MAX_HEAP_SIZE, 1 GiB) each. Each shared-memory connection holds three
   descriptors in the server (its heap, the heap's hold on its range, its client's pidfd) and
   three in its client (the channel, the heap, the hold): raise RLIMIT_NOFILE (1024 by default
   on many systems) for more than about 300 connections in one process. Connection heaps take
   address space of the pod's window (8 TiB by default; a sixteenth of it with SHMHEAP_POD_ID):
   16384 connections of 64 MiB take 1 TiB. The channel's lock bytes live in one kernel list, so
   a connect or a disconnect costs a little more with every connection already there.
   Stack: a handler on a thread of rpcool_server_start has the thread's stack_size
   (RPCOOL_DEFAULT_STACK_SIZE, 8 MiB) less what the library uses below it, at most
   RPCOOL_STACK_RESERVE (64 KiB): a handler may recurse until its frames take stack_size -
   64 KiB. A handler run by rpcool_serve has what is left of the calling thread's stack. A
   deeper one faults: RPCOOL_E_FAULT under SANDBOX; in another mode the process dies, as
   any program that overflows its stack. Each thread that runs handlers also maps a 64 KiB
   alternate signal stack (unless it has one).
   A connect fails at once with RPCOOL_E_NOCHANNEL when no server holds the channel's name,
   unless rpcool_conn_opts.wait_ready is 1: then it tries again every 5 ms until
   connect_timeout_ms (gRPC's wait-for-ready).
   Shared-memory channels (liveness by byte locks and pidfds, waking by futexes, connecting
   through a UNIX socket) need one kernel for both peers (processes of one host, or one VM).
   Hosts that share a device and no kernel use the pod transport (section 14), whose liveness is
   a lease in the device and whose doorbells are datagrams.
   A client connects to the socket /dev/shm/rpcool.NAME.sock, created with the name file's
   mode (rpcool_server_opts.mode): a process that may not connect to it gets -EACCES.
   rpcool_server_open makes the whole process non-dumpable (prctl PR_SET_DUMPABLE 0), for the
   rest of its life: no core dumps, and only processes with CAP_SYS_PTRACE may ptrace it or
   open its /proc files. rpcool_server_opts.dumpable = 1 leaves the process as it was; then
   any process of its user can open every connection heap through /proc/PID/fd. A client's
   heap is as private as the client's process: any process that may ptrace the client (its
   user, unless the client made itself non-dumpable) can read it.
   The acceptor keeps up to 32 connected clients waiting for their request (100 ms each);
   beyond that the one waiting longest is refused (RPCOOL_E_PROTO) at once, so a flood of
   silent connects can make an honest connect whose request was not there yet fail; it never
   makes one wait. A connect that asks for a heap size no made-ahead heap has pays for making
   the heap (a memfd, its mapping and formatting) inside rpcool_connect.
   A client that keeps its heap's mutex taken can stall the serving thread running one of its
   handlers for up to a second, once, in rpcool_ctx_alloc of a block that needs the mutex
   (over 32 KiB, or a size class with no span a quarter free in its heap): then the server
   drops it (RPCOOL_E_DROPPED). Accepting it never waits for that mutex.
   RDMA (section 5): each connection registers (pins) 8 MiB on each side, a 4 MiB receive ring
   and its send buffer; a call carries at most 2 MiB of pages and 16 extents, an answer at most
   2 MiB of reply; one call at a time per connection at the server. A client's connection heap
   is a memfd (no file in /dev/shm): a client killed while connected leaves only its range in
   its pod's directory, freed by the pod's next shmheap_create_fd (every RDMA connect makes
   one) or by any create that needs the room. Publishing at the meta server and its TCP
   bootstrap are not authenticated (krconn.h): run it on a trusted network.

   10. DESIGN NOTES
   ----------------
   A receiver-enforced seal with userfaultfd write-protection buys nothing over mprotect
   against a malicious sender: the uffd must be created by the sender (it acts on the
   creator's mm), the receiver would need ptrace rights (pidfd_getfd) to fetch it, and the
   sender keeps its own descriptor and can still map an alias writable. rpcool does not use it.
   Between pods, a page the handler touches is fetched by asking the client (a message that the
   client answers with the page) rather than by an RDMA READ of the client's heap: a READ needs
   the heap registered (pinned) whole for as long as the connection lives, or registered chunk
   by chunk with a lease round trip on each miss (nppin.h), which costs the same round trip as
   asking and adds lease state; a connection heap is sparse and 64 MiB by default. Messages
   are RDMA WRITEs with immediate data into the peer's ring (RR-Compound's [length][payload]
   [flag]): the immediate's completion tells the receiver the whole message is there, which a
   flag byte polled in memory cannot promise on every NIC.

   Over RDMA a side polls first or sleeps at once, whichever gave its shorter recent waits,
   rather than always polling: a round trip between pods is long beside a wake-up, so sleeping
   at once costs the call nothing measurable and leaves the CPU to the NIC's work and to the
   peer; always polling never won by more than a few percent, and against a polling server it
   lost by up to 2.5x on CPUs shared with the emulated NIC.
   Every call takes one path on the server, whatever transport it came by: the transport reads
   the call off its wire once into a neutral record (struct rpcool__incoming: handler id, flags,
   argument, seal, slot and generation, its connection, budget, key) and hands it to
   rpcool__dispatch, which admits it (flags, handler, range, policy, seal, cancelled, COPY and
   max_copy), runs it (time limit, budget, key fence, containment) and answers it through the
   transport's reply, or hands it to its deferred token. So a promise made for calls holds on
   every transport, and the call-semantics suite (tests/call_semantics.h) checks it on each.
   A transport is its state and two tables (struct rpcool__client_tp, rpcool__server_tp, their
   contract at >>seam): shared memory's at >>shm, RDMA's in impl/rpcool/rdma.h. A third one (a
   pod of several hosts sharing a CXL device, say) is one more file, impl/rpcool/NAME.h, with
   its two tables filled member by member: its serving threads join the server as workers
   (rpcool__worker_join) and pass each call they read to rpcool__dispatch; rpcool_connect picks
   it by a channel prefix and rpcool_server_opts by an option.
   Passing pointers wins in proportion to what serialising costs: a call between pods pays at
   least one network round trip, so a small structure that serialises in less than that round
   trip gains little over protobuf-c on TCP, while a large one (thousands of nodes) gains
   several times. A structure called again on the same ranges is compared in place on both
   sides, and only its changed pages (or their changed words) travel.

   Many clients per server: a pass reads the ready summary (one top word per 4096 slots, then
   the words it points to), not every connection, and a busy client's bits stay set so its
   calls write no shared line; clearing a bit is followed by a second look, as for the request
   bits. A client's death is a pidfd event, so an idle server makes no system call per
   connection. Connection heaps share arenas: one pod entry and one lock for thousands of
   connections (each hold a lock of its own made every lock call of the pod's file walk a
   list as long as the connections). The channel's slot locks remain one per connection.

  11. PROTOBUF-C SERVICES
  -----------------------
   Services written in .proto and served with protobuf-c (Debian: libprotobuf-c-dev,
   protobuf-c-compiler) run over rpcool unchanged: a message travels as a pointer, with no pack
   and no unpack. Build: #define RPCOOL_WITH_PROTOBUF_C before including rpcool.h, in the
   implementation file and in every file that uses these functions; keep impl/rpcool/pbc.h
   beside it and link -lprotobuf-c. For a service Svc of a .proto compiled with protoc-c:

       Svc_Service impl = SVC__INIT(my_);                  // server: the user's functions
       rpcool_pbc_serve(s, 5, &impl.base, RPCOOL_SANDBOX); // as handler id 5
       ProtobufCService *svc;                              // client
       rpcool_pbc_client_new(c, &svc__descriptor, 5, &svc);
       svc__get(svc, &request, on_reply, data);            // a generated stub, unchanged
       protobuf_c_service_destroy(svc);                    // before rpcool_disconnect(c)

   Client: rpcool_pbc_client_new makes a ProtobufCService that calls handler id fn on the
   connection. A generated stub calls it, and its closure gets the reply (NULL when the call
   failed) before the stub returns; the reply lives until the closure returns. rpcool_pbc_call
   makes the same call and returns its status: 0 and *out (valid until rpcool_pbc_reply_free;
   it may point into the input, so keep the input until then), RPCOOL_PBC_FAILED (1) when the
   service answered closure(NULL), RPCOOL_E_NOMETHOD when method is not below the service's
   n_methods, RPCOOL_E_MSGTYPE when the input is not of the method's input type, or another
   negative code. method is the method's index in the service descriptor, the order of the
   rpc lines in the .proto (svc__descriptor.methods[method]; protoc-c's generated stub
   svc__get passes that index for Get). A client service may be used by several threads at once,
   as its connection may. An input built anywhere (stack, literals, malloc) is deep-copied
   into the connection heap for the call by walking its descriptor, and the copy is freed with
   the reply. An input that lies wholly in the heap (built or unpacked through the allocator
   that rpcool_pbc_allocator_init makes over the connection heap; protobuf_c_message_unpack
   into it works too) travels by pointer with nothing copied, and is the caller's again when
   the call returns, whatever it returns (a timeout and a dead server included): its
   descriptors and default values are its own again, and protobuf_c_message_free_unpacked with
   the same allocator frees it. Nobody else may use the input during the call. A call that
   timed out (RPCOOL_E_TIMEOUT) may still run at the server (section 6): the copy of its input
   is not freed, and an input that travelled by pointer is in the caller's form again but may
   still be read by the server, so do not free it. The client walks an input that lies in the
   heap within the budget the server has (below: as many bytes as the connection heap holds,
   counting a shared sub-message each time it is referenced): past it the call returns
   RPCOOL_E_PROTO at once, nothing copied or sent, the input the caller's. An input not wholly
   in the heap is copied into it within the same budget (RPCOOL_E_PROTO past it;
   SHMHEAP_E_FULL when the heap has no room for the copy). A message with a sub-message more
   than RPCOOL_PBC_MAX_DEPTH (100) levels below the top (a cycle, say) is refused with
   RPCOOL_E_PROTO.
   Server: rpcool_pbc_serve registers a ProtobufCService (a generated Foo_Service filled with
   the user's functions; it must outlive the server) as one handler id with its safety flags;
   the call names its method by index, checked against a hash of the service, method and type
   names (RPCOOL_E_PROTO when they differ). The user's code runs unchanged: it gets the input
   with its own process's descriptors and default values, so pointer identity with a proto2
   default or with proto3's empty string means what protobuf-c says. Its closure may be called
   before the method returns or later from any thread: the call is deferred (section 2), so no
   serving thread waits meanwhile. Call the closure once. When it is called, what the reply
   holds outside the client's heap (the service's stack, literals, malloc, a private copy of
   the input) is copied into the client's heap; what lies in the client's heap (parts of the
   input) is referenced. closure(NULL) gives the caller RPCOOL_PBC_FAILED, a reply of another
   type RPCOOL_E_INVAL. A service that never calls its closure leaves its caller waiting (its
   timeout applies).
   Descriptors and default values lie at different addresses in each process (ASLR): no
   descriptor pointer is sent or read, and while a message travels its pointers to its fields'
   defaults are a marker that the receiver replaces with its own defaults.
   Safety: at the server every mode walks the message under fault containment and within a
   budget of bytes: as many as the connection heap holds, counting a shared sub-message each
   time it is referenced (RPCOOL_E_PROTO past it). RPCOOL_RELAXED trusts the pointers.
   RPCOOL_SANDBOX checks every pointer, length, count and string against the connection heap
   (RPCOOL_E_BADPTR; a count beyond the budget, RPCOOL_E_PROTO) before the service runs, and
   the service reads the client's message in place: the client can still change it during the
   call. RPCOOL_COPY copies the message into
   private memory, reading each shared value once and checking it as RPCOOL_SANDBOX does; the
   service reads only that copy. RPCOOL_SEAL applies to the call's small request frame, not to
   the message. A malformed message is an error reply and the server carries on. Under
   RPCOOL_SANDBOX a fault in the service's own code is contained too (RPCOOL_E_FAULT); its
   closure must not be called after that.
   Between pods (RDMA, section 5): the input is always copied, into blocks of the connection
   heap that travel with the call as its extents (up to 16 blocks; the rest is fetched on
   touch), and the reply travels back as any reply does (at most 2 MiB). Whatever the mode,
   the server reads the message as RPCOOL_COPY does, out of its mirror of the client's heap
   (checked against the mirror's range; the budget is rpcool_server_opts.max_copy). A closure
   called later, from another thread, answers as on shared memory (a deferred reply).
   Limits: a sub-message shared within the input arrives as separate copies when the input is
   copied (RPCOOL_COPY, RDMA, or an input not wholly in the heap).

  12. OPERATING
  -------------
   Callers and connections. Inside a handler rpcool_ctx_peer(ctx) says who called: on shared
   memory the client's pid, uid and gid as the kernel gave them when the client connected
   (SO_PEERCRED on the socket: a client cannot forge them; authenticated is 1), its slot, and
   the pod (the server's: a client of shared memory maps its heaps in the same pod). pod is a
   name, never a path: the name of the server's pod directory in /dev/shm (no '/'), that is
   rpcool_server_opts.pod, else $SHMHEAP_POD when set and not empty, else "shmheap.pod"
   ("shmheap-tsan.pod" in ThreadSanitizer builds); a name of more than 63 bytes is cut. When the
   kernel gives no pid (a client in a pid namespace the server cannot see), pid is what the
   client claims and authenticated is 0 (uid and gid are still the kernel's). Over RDMA
   (transport RPCOOL_TRANSPORT_RDMA) authenticated is 0: pid, uid, gid and pod (the client's
   $SHMHEAP_POD_ID as text, at most 19 bytes, "" if it had none: a pod id, not a directory)
   are what the client's connect claimed, and addr is the
   address (GID, as IPv6 text; "lid N" without one) its queue pair is connected to; slot is
   RPCOOL_MAX_CONNS.
   rpcool_server_opts.on_connect (NULL: every client is accepted) is called on the server's acceptor
   thread for each connecting shared-memory client, after its identity is read and before a slot or
   heap is given (peer->slot is RPCOOL_MAX_CONNS then); connects (and stats requests) wait while it
   runs. For a client over RDMA it is called on the RDMA transport's serving thread once the
   client's hello is checked, before its heap is mirrored, with the claims of its hello (the peer
   is unauthenticated: judge it by its address, not by its uid); that client's calls wait while it
   runs. It returns 0 to accept, and may set *conn_user (NULL before the call), or a negative code
   to refuse: the client's rpcool_connect returns that code (a positive return refuses with
   RPCOOL_E_REFUSED); refusals are counted (stats.refused). An allow-list by uid, or a cap of
   connections per uid (counted up in on_connect, down in on_disconnect), need nothing more.
   rpcool_ctx_conn_user(ctx) gives a handler its connection's pointer.
   on_disconnect (NULL: not called) is called exactly once for every connection accepted (by
   on_connect, or every one without it), with its conn_user, once no handler of that connection runs
   any more and its deferred calls are finished: why is 0 when the client disconnected,
   RPCOOL_E_PEERDEAD when it died and was reaped (FAILURES), RPCOOL_E_DROPPED when the server
   dropped it (FAILURES), RPCOOL_E_CLOSED from rpcool_server_close, or the code of a connect that
   failed after on_connect accepted it (RPCOOL_E_NOSLOT, -ENOMEM). An rpcool_server_close that
   returns RPCOOL_E_TIMEOUT (a handler would not end) leaves the connections to that handler and
   calls no hook for them. on_disconnect runs on a thread of the server, or in rpcool_server_close,
   possibly holding the server's housekeeping lock: keep it short, and call no rpcool_server_*
   function of that server from either hook. Free conn_user there. For an RDMA client why is 0
   after its BYE, RPCOOL_E_DROPPED when it sent a malformed frame, RPCOOL_E_CLOSED from
   rpcool_server_close, RPCOOL_E_PEERDEAD otherwise (it died or its link failed).

   Cancelling. rpcool_cancel(c, id) cancels an asynchronous call (with or without a callback; a
   callback of a cancelled call never runs). If the call's reply has come, the reply is
   freed and 1 returned: the handler ran, the cancel had no effect on it. Otherwise it returns 0
   and the id is finished (poll and wait return RPCOOL_E_CANCELLED for it): the slot, the reply
   and the seal come back as for a timed-out call (FAILURES), when the server answers. A call
   whose handler has not started is not started: the server answers it with RPCOOL_E_CANCELLED
   (counted in stats.cancelled), unless a serving thread was starting it at that moment: then it
   runs as one cancelled while running. A handler already running goes on, and
   rpcool_ctx_cancelled(ctx) (a load of one word the call's request line already holds) turns
   1: a long handler may poll it and return early; whatever it returns is freed. Over RDMA the
   cancel is one RDMA WRITE of that word into the server's memory, behind the call on the same queue
   pair: a call still queued at the server is never started (RPCOOL_E_CANCELLED, counted), a running
   handler sees the flag the same way (its client's calls are served in order, one at a time).

   Stats. rpcool_server_get_stats(s, &st) (0, or RPCOOL_E_INVAL for a NULL) counts calls,
   connections accepted, closed, reaped, dropped and refused, faults, malformed entries,
   handlers over their limit or budget and cancelled calls since the server opened, and gives
   the connections now (conns: those of shared memory and of RDMA), the heaps made ahead, the
   server's pid and its slots.
   rpcool_server_conns(s, out, max) lists the connections now, those of shared memory first,
   then those of RDMA (whose hello was accepted): each one's rpcool_peer and its calls in
   flight (posted, not yet answered; 0 for an RDMA connection), and returns how many there
   are. stats.conns and this list count the same connections: one whose client has gone
   (disconnected, died, dropped) stays in both, with 0 calls in flight, until its handlers and
   deferred calls have finished and it is let go (when on_disconnect is called). Another
   process asks the server the same at its socket: rpcool_channel_stats(channel, timeout_ms,
   &st, conns, max, &n) (the acceptor answers it, so a busy or stuck handler does not delay
   it); the server answers
   callers of its own uid and root, anyone else gets -EACCES (the socket's mode decides who
   may ask at all); its answer lists up to RPCOOL_STATS_CONNS (1024) connections, the first
   ones by slot (a socket message holds no more). A server of an older
   version answers RPCOOL_E_PROTO (and counts a bad entry).

   rpcoolctl (tools/rpcoolctl.c, built by make as build/bin/rpcoolctl) shows, for this host, the
   heaps of the pod ($SHMHEAP_POD, else the default: each one's range, size, whether something still
   holds it, and for a named heap the bytes its file uses; -1 in JSON for a heap on a descriptor,
   whose use the tool cannot see) and every channel in /dev/shm or those named: live (its server
   holds the name) or stale (the server is gone, its name file or socket left), the server's pid,
   its stats and connections (pid, uid, gid, calls in flight; an RDMA connection with its address
   and claims) where the server answers this user; "unknown" where the name file may not be read. At
   most 64 connections of a channel are listed: the text says how many more there are, and in JSON
   stats.conns counts them all. At most 512 channels are listed. --json prints one JSON object per
   report (one line each); --watch SECONDS repeats; --clean removes the name file and socket of each
   stale channel (only those named, if any): it takes the name's lock first, which a live server
   holds, so a live channel is never touched; a server starting on that very name at that moment may
   fail with RPCOOL_E_NAMETAKEN (start it again). --help prints the usage and exits 0. Exit status:
   0, 1 when --clean could not remove something (another user's), 2 for a usage error (an
   unknown option: the usage goes to stderr; a malformed channel name: "malformed channel name"
   on stderr, nothing reported), 3 when a channel named is not on this host ("no such channel"
   on stderr, and in JSON its "missing" list; the others are reported). With no channel named it
   also lists the exports' liveness files (/dev/shm/rpcool.x.*, section 13) as exports, never as
   channels: whether a handle and the exporter hold them. With --pod DEVICE (else
   $RPCOOL_POD_DEVICE) it also lists that pod device's channels (section 14): live, opening,
   closed or gone (the server's lease not held, or not renewed while it watched for half a
   lease bound), the server's host and pid as its lease claims, and the connections in use; it
   maps the device read-only and takes no lease; a device it cannot read is said, not an error.
   The text (tables under column headers) and the JSON (a "schema" number first) are a stable
   layout, documented field by field in tools/rpcoolctl.md.

   13. SHARED DATA
   ---------------
   An export is a range of a pod heap published under a name, with a table of ALock locks
   (alock.h) beside it. Processes of the pod use the data by pointer and lock with ALock's local
   cohort (CPU atomics, no NIC, no call); other pods (RPCOOL_WITH_RDMA) attach and read and write
   it by one-sided RDMA at the same addresses.
       shmheap *h;  rpcool_export *x;  rpcool_xhold hold;
       shmheap_create("pod", NULL, &h);                    // others: shmheap_open("pod", ...)
       struct table *t = shmheap_calloc(h, 1, sizeof *t);  // the data, anywhere in h
       rpcool_export_create(h, "kv", t, sizeof *t, NULL, &x); // others: rpcool_export_open
       rpcool_export_lock(x, 3, RPCOOL_LOCK_WRITE, &hold); // 0, or RPCOOL_OWNERDEAD (held)
       t->count++;                                         // by pointer, under lock 3
       rpcool_export_unlock(&hold);
       rpcool_export_read(x, 3, &t->count, &n, sizeof n);  // optimistic: no lock taken
       rpcool_export_close(x);
   Exporting: rpcool_export_create(h, name, base, len, opts, &x) exports [base, base+len), which
   must lie inside h's data area (RPCOOL_E_RANGE otherwise); base NULL and len 0 export the whole
   data area (rpcool_export_base says where it starts and how long it is). Names are channel
   names of at most RPCOOL_EXPORT_NAME_MAX (38) characters (RPCOOL_E_NAMELONG when longer,
   RPCOOL_E_BADNAME when malformed). The
   export lives in h: a record under the root "rpcool.x.NAME" (128 bytes and 64 per lock) and
   an alock table under "rpcool.xl.<offset>", whose liveness file is
   /dev/shm/rpcool.x.<heap address>.<offset>. A second create of a name whose exporter lives
   is RPCOOL_E_EXPORTED; if its exporter died (its process ended without rpcool_export_close),
   the create withdraws the old export and makes a new one. Options (rpcool_export_opts, zero
   = default, NULL opts = all defaults): nlocks (RPCOOL_EXPORT_DEFAULT_LOCKS, 64; at most
   RPCOOL_EXPORT_MAX_LOCKS, RPCOOL_E_INVAL beyond), budget (ALock's hand-offs within a cohort,
   ALOCK_DEFAULT_BUDGET), remote (what other pods may do, RPCOOL_REMOTE_NONE by default: see
   "Other pods" below), rdma, pin_budget, log and log_user (the library's messages; RPCOOL_DEBUG
   as for servers).
   Opening: rpcool_export_open(h, name, &x) in any process of the pod that opened h (its own
   shmheap_open; a forked child opens the export again). No export of that name (or a root of
   that name that is no export) is RPCOOL_E_NOEXPORT. rpcool_export_base(x, &len) and
   rpcool_export_nlocks(x) are the same in every handle.
   Closing: rpcool_export_close(x) frees the handle. The exporter's close withdraws the export:
   the name is free again at once, rpcool_export_open finds nothing, and the handles other
   processes still hold return RPCOOL_E_WITHDRAWN from lock and read (their data stays where it is:
   the export never owned it). The record and the lock table are freed by the last handle's
   close, or by the withdrawing close or create if no live process holds a handle (a process
   that died holding one does not count).
   Fork: a child does not hold its parent's handles. It closes its copies of their liveness
   descriptors at the fork (pthread_atfork), so it keeps no record alive and makes no dead
   exporter seem alive: a create of the name takes over from an exporter that died while its
   children live. An inherited handle is not usable in the child: every call on it, close
   included, is RPCOOL_E_FORKED (the one handle rule, section 8) and withdraws nothing; the
   child opens the export again to use it.
   Locks: rpcool_export_lock(x, idx, mode, &hold) takes lock idx (below nlocks, else
   RPCOOL_E_INVAL) in RPCOOL_LOCK_READ or RPCOOL_LOCK_WRITE mode; both are exclusive (one holder
   at a time), and WRITE also makes the lock's version word odd until rpcool_export_unlock(&hold)
   makes it even again, which is what optimistic readers look at: write the data under a WRITE
   lock, read it under either. It returns 0 or RPCOOL_OWNERDEAD when the lock is held:
   RPCOOL_OWNERDEAD says that the previous holder died holding it (the data it protects may be
   half-updated; the news is given once). A holder's death is found by its waiters (ALock's
   liveness, every ALOCK_DEFAULT_CHECK_MS): the next lock call takes the lock over. Unlock a hold
   once, from the process that took it; a hold that is not locked is RPCOOL_E_INVAL.
   Optimistic reads: rpcool_export_read(x, idx, addr, buf, len) copies [addr, addr+len), which
   must lie inside the export (RPCOOL_E_RANGE), to buf between two reads of lock idx's version
   word that are equal and even, retrying while a WRITE holder is inside; the copy is then what
   the data was between two WRITE sections, never a mix (as long as every writer of those bytes
   holds lock idx in WRITE mode). It takes no lock and writes nothing shared. A version that
   stays odd (a writer holding the lock that long, or one that died holding it: until the lock's
   next holder unlocks) makes it give up after RPCOOL_EXPORT_DEFAULT_READ_MS (1 s) with
   RPCOOL_E_TIMEOUT.
   Other pods (RPCOOL_WITH_RDMA, as section 5; without it, or without rdma-core's headers,
   rpcool_export_create with remote other than RPCOOL_REMOTE_NONE, rpcool_attach and
   rpcool_attach_conn return RPCOOL_E_NOTSUP, rpcool_remote_base NULL, rpcool_remote_nlocks 0): an
   export made with opts.remote RPCOOL_REMOTE_READ (other pods read) or RPCOOL_REMOTE_RW (read and
   write) is served to other pods by the exporter's process: a krconn context of its own, a thread,
   and the name "rpcool.x.NAME" published at krconn's meta server (withdrawn by the exporter's
   close, krconn_unpublish: an attach from then on is RPCOOL_E_NOEXPORT). opts.rdma says which:
   "serve"[:PORT] (the default) runs the meta server in this process, or uses the one already
   serving that port on this host (an rpcool server's "serve", say); "HOST[:PORT]" publishes at that
   meta server; "" at $KRCONN_META. The lock lines and the version words are registered whole
   (writable by attachers of either mode); the data through nppin.h: nothing is pinned up front,
   2 MiB chunks are registered on an attacher's first access and leased to it, at most
   opts.pin_budget bytes (RPCOOL_EXPORT_DEFAULT_PIN_BUDGET, 64 MiB) at once, and a chunk unmapped or
   remapped under the export is revoked and registered again, never read stale (nppin.h, sections 5
   and 6). rpcool_export_get_stats reports attachers and nppin's figures (pinned, pinned_peak).
   Attaching: rpcool_attach("rdma://HOST[:PORT]/NAME", opts, &r) finds the export at that meta
   server ("rdma:NAME": $KRCONN_META); rpcool_attach_conn(c, NAME, opts, &r) at the meta server
   the RDMA connection c was made with (RPCOOL_E_INVAL for a shared-memory connection: open the
   export instead). No export of that name is RPCOOL_E_NOEXPORT. An attachment has a krconn
   context of its own and three connections to the exporter (every connect through krconn.h),
   and publishes itself as "rpcool.xr.<export's generation>.<its id>" so that other attachers
   can link to its lock descriptors. opts.timeout_ms (RPCOOL_ATTACH_DEFAULT_TIMEOUT_MS, 5 s)
   bounds the attach and each remote operation.
   Remote data: rpcool_remote_base(r, &len) is the export's range in its pod: the data is read
   and written at those addresses, so pointers inside it can be followed with further reads.
   rpcool_remote_read(r, addr, buf, len) and rpcool_remote_write copy by one-sided RDMA through a
   1 MiB registered buffer of the attachment (larger ranges move in pieces; buf is anywhere in
   this process); the range is checked against the export before anything is posted
   (RPCOOL_E_RANGE), and the registrations cover only the export. A write to an export that is
   not RPCOOL_REMOTE_RW is RPCOOL_E_PERM (the registration forbids it too).
   Remote locks: rpcool_remote_lock(r, idx, mode, &hold) takes lock idx through ALock's remote
   cohort (RDMA compare-and-swap, READ and WRITE on the lock lines), in the same queue as the
   pod's local users; links to other attachers' descriptors are made by the library when ALock
   first needs one. In WRITE mode (RPCOOL_E_PERM unless RPCOOL_REMOTE_RW) it makes the lock's
   version word odd, and rpcool_remote_unlock even, by RDMA compare-and-swap, as a local writer
   does. rpcool_remote_read_opt(r, idx, addr, buf, len) is the optimistic read: READs of the
   version word, the range and the version again, posted together on one queue pair, whose
   responder executes them in that order (the assumption ALock's cas_read makes too): one round
   trip per try for a range of up to 1 MiB whose chunks are leased (otherwise the three one
   after another); retried while the version is odd or changed, as rpcool_export_read
   (RPCOOL_E_TIMEOUT after RPCOOL_EXPORT_DEFAULT_READ_MS).
   Failures: after the exporter dies (or closes), an attacher's remote operation fails when its
   queue pair finds the exporter gone or, at the latest, once the attachment's timeout_ms has passed
   without an answer: RPCOOL_E_PEERDEAD or RPCOOL_E_TIMEOUT, so an attacher learns it within about
   timeout_ms; detach then. An operation that timed out may leave its RDMA work posted, writing
   into the attachment's buffer: the next operation first waits (up to timeout_ms) for that work
   to complete or be flushed, and fails with RPCOOL_E_TIMEOUT (nothing moved) while it has not,
   so no operation returns 0 with bytes another one moved. The exporter pings each attacher
   every second: one dead (or detached) is dropped within that and the queue pair's retry bound
   (about 4 s): its connections are closed (it reaches nothing of the export any more), its leases
   run out (nppin), and its locks are recovered by ALock's recovery (alock.h, "Dead holders and
   waiters"; the exporter makes a loopback link to its own lock lines for it, once): a remote waiter
   queued behind it takes the lock over (rpcool_remote_lock returns RPCOOL_OWNERDEAD: the data may
   be half-updated, and the version word stays odd until that holder unlocks in WRITE mode), and a
   lock it held with nobody queued behind it in its cohort is released (its next holder is not
   told). What ALock cannot recover safely stays held (a process dead between its
   enqueue and its link, two dead processes next to each other in one queue): such a lock is
   usable again only in an export made anew (close and create). An attacher taken for dead
   while alive (no answer for the retry bound) finds its operations failing from then on
   (RPCOOL_E_PEERDEAD); detach it. While the service waits for a ping it grants no
   lease, so an attacher's access that needs one waits meanwhile (up to its timeout_ms, then
   RPCOOL_E_TIMEOUT). A second rpcool_attach of the same export makes an attacher of its own.
   Limits: at most 64 attachers of one export at once (nppin's peers: a 65th attach fails), and
   65535 attaches over an export's life (ALock's 16-bit ids are not reused: then
   RPCOOL_E_NOSLOT). A remote lock waits without a deadline (ALock's remote cohort).
   Threads: an export handle may be used by any thread of its process; an attachment by one
   thread at a time (give each thread its own); one rpcool_xhold per acquisition.

  14. PODS OF HOSTS
  -----------------
   Hosts that share one memory device and no kernel (no socket between them but their network,
   no file system, no futex) make calls through the device: the pod transport
   (RPCOOL_TRANSPORT_POD). The same calls, handlers, safety modes and call path as on shared
   memory; the channel's slots, the request and response lines and the connection heaps are in
   the device, so a pointer passed means the same on every host.

       rpcool_server_opts so = {.pod_device = "/dev/dax0.0"};  // or $RPCOOL_POD_DEVICE
       rpcool_server_open("kv", &so, &s);     // serves "kv" in its kernel and in the pod
       rpcool_conn_opts co = {.pod_device = "/dev/dax0.0"};    // on another host
       rpcool_connect("kv", &co, &c);         // this kernel's "kv", else the pod's
       rpcool_connect("pod:kv", &co, &c);     // the pod's only

   The device. "file:PATH" or a path with a '/' (a regular file, "/dev/daxX.Y", a PCI BAR such
   as an ivshmem device's .../resource2), or "cxl:regionN" (SHMHEAP_WITH_CXL); at least 16 MiB,
   zeroed before its first use (a new file, a cleared device). Every process that uses it maps
   it whole, shared, at one address recorded in it, so the address range must be free there
   (else -EADDRINUSE); the first process to open a zeroed device lays it out and picks that
   address: $RPCOOL_POD_BASE if set, else 0x660000000000 (0x550000000000 in ThreadSanitizer
   builds). What it holds: a header (layout, size, address, where the rest is), a lease per
   process (impl/podlease.h), a registry of up to 32 channels (name, the server's lease, its
   datagram addresses), each channel's area (the channel header with its ready summary, then
   its connection slots: a pod channel has at most 426 slots, fewer if max_conns says so), and
   the heaps' extents (2 MiB each, an owner word per extent). Every field is checked before use:
   a corrupt or hostile header is RPCOOL_E_PROTO, never a crash. A process maps one device (a
   second needs its own address: format it with another $RPCOOL_POD_BASE).
   Connecting. The client claims a free slot of the channel's area by compare-and-swap, writes
   its request (heap size, pid, uid, gid, host name, the address of its datagram socket) and
   rings the server's acceptor with a datagram; the acceptor (woken by it, or every reap_ms)
   carves the connection heap from free extents (rounded up to 2 MiB: a full device refuses
   with SHMHEAP_E_FULL), formats it and answers in the slot. Nothing is mapped: the heap is in
   the device every process maps. connect_timeout_ms and wait_ready hold as on shared memory.
   Waiting. Each side polls for spin_ns, then sleeps on a UDP socket of its own after saying so
   in the device; the other side sends one datagram only to a side that said it sleeps, so a
   busy pair makes no system call and an idle server uses no CPU (its acceptor looks at the
   slots and the leases every reap_ms). A server's sockets are published with its address:
   $RPCOOL_POD_ADDR (a numeric IPv4 or IPv6 address) if set, else its first non-loopback IPv4
   address that is up, else 127.0.0.1; a client's with the address its route to the server
   takes. The hosts must reach each other's UDP ports (any datagram is only a wake-up: its
   content is never read). A datagram lost on the way, or one that cannot be sent, delays a
   call and never hangs it: a sleeping serving thread looks at its connections every 100 ms by
   itself, a waiting client at its answer every peer_check_ms (RPCOOL_DEBUG says once when a
   wake-up could not be sent).
   Safety modes. As on shared memory: RPCOOL_SEAL makes the caller's own mapping of the range
   read-only (other processes' mappings are theirs), RPCOOL_SANDBOX contains the handler's
   faults in the server, RPCOOL_COPY copies. Pod connection heaps have no protection keys.
   Trust. Every process of the pod maps the whole device read-write: it can read and write
   every channel's slots and every connection's heap. The server treats them all as untrusted
   input (section 4): a client that writes garbage into its slot, its lines or its heap fails
   its own connection and harms no other (tests/test_rpcool_pod.c), but nothing keeps one client
   of the pod from reading or writing another's heap. rpcool_ctx_peer: transport
   RPCOOL_TRANSPORT_POD, authenticated 0, pid (as the client's pid namespace sees it), uid and
   gid as the client claims, pod its host name as it claims, addr its datagram address.
   Liveness. Every process that uses the device holds a lease in it, renewed by a thread of its
   own every quarter of the bound; the bound is written at the device's first use:
   $RPCOOL_POD_LEASE_MS, else 1000 ms. The server reaps a client whose lease lapsed (unchanged
   for longer than the bound on the server's clock: within the bound and reap_ms of its death),
   and its heap's extents go back to the device; a waiting client fails its call with
   RPCOOL_E_PEERDEAD within the bound and peer_check_ms of its server's death, and its next
   ones at once. A server that opens a name whose registry entry a live lease holds gets
   RPCOOL_E_NAMETAKEN; one held by a lapsed lease is taken over once that lease is recovered
   (rpcool_server_open waits up to the bound for it). Every pod server's acceptor watches all
   the device's leases and recovers those that lapsed, so what a dead process held (its
   registry entries, its heaps' extents) becomes free again. A client's heap stays out of other
   connections' reach while its client lives, even after its server died, until it
   disconnects.
   Fencing. A process that stalls past its lease (SIGSTOP, a paused VM) is taken for dead: its
   connections are reaped, its channel may be taken over. When it resumes, it finds its lease
   recovered and acts on nothing of the pod any more: its calls and the waits of its calls
   return RPCOOL_E_FENCED (a thread that stalled between that check and its post still posts:
   that call is not served, but its request line may land in memory given to another
   connection by then), its server serves its pod connections no more and logs why.
   Disconnect those connections and close that server, then connect or open again (a new
   lease). The library cannot stop the program's own code from writing into a heap it kept a
   pointer to after it was fenced: that memory may belong to another connection by then, as
   freed memory does.
   Coherence. The transport assumes a coherent device: an aligned 64-bit atomic operation by one
   host is seen in order by the loads and atomics of every other host, as CXL 3.0 shared memory
   provides, and as a file or an ivshmem BAR of one machine does (guests of one host). A pooled
   CXL 2.0 device, whose memory is not kept coherent between hosts, is not supported (it would
   need explicit flushes around every access; there is no such mode).
   Limits. Exports (section 13) do not travel over the pod transport; rpcoolctl lists a pod
   device's channels (--pod), not the heaps of its extents. Handles are not usable in a forked
   child (as everywhere).
*/
#ifndef RPCOOL_H
#define RPCOOL_H

/* The version: RPCOOL_VERSION_MAJOR.MINOR.PATCH, and as a string (see CHANGES.md). */
#define RPCOOL_VERSION_MAJOR 0
#define RPCOOL_VERSION_MINOR 4
#define RPCOOL_VERSION_PATCH 0
#define RPCOOL_VERSION "0.4.0"

#if defined(RPCOOL_IMPLEMENTATION) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE 1
#endif
#include "shmheap.h"
#include <stddef.h>
#include <stdint.h>

#ifdef RPCOOL_STATIC
/* unused: no warning for the functions a file does not call */
#define RPCOOL_API static __attribute__((unused))
#else
#define RPCOOL_API extern
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rpcool_server rpcool_server; /* a served channel (process-local handle) */
typedef struct rpcool_conn rpcool_conn;     /* a client's connection to a channel */
typedef struct rpcool_ctx rpcool_ctx;       /* one call, as seen by its handler */

/* Error codes: X(name, value, what rpcool_strerror says); a comment adds what the
   text leaves out. */
#define RPCOOL_ERRORS(X)                                                                           \
    X(RPCOOL_E_NAMETAKEN, -2000, "channel name taken: a live server serves it")                    \
    X(RPCOOL_E_NOCHANNEL, -1999, "no such channel, or no server on it")                            \
    /* the server (or client) died or the channel was taken over */                                \
    X(RPCOOL_E_PEERDEAD, -1998, "peer died (or the channel was taken over)")                       \
    X(RPCOOL_E_CLOSED, -1997, "channel closed by the server")                                      \
    /* the call or connect did not finish in time */                                               \
    X(RPCOOL_E_TIMEOUT, -1996, "timed out")                                                        \
    X(RPCOOL_E_NOHANDLER, -1995, "no handler registered under that id")                            \
    X(RPCOOL_E_BADPTR, -1994, "pointer or range outside the connection heap")                      \
    /* the handler faulted (SIGSEGV/SIGBUS) on peer data */                                        \
    X(RPCOOL_E_FAULT, -1993, "handler faulted on peer data (contained)")                           \
    X(RPCOOL_E_POLICY, -1991, "call lacks a safety mode the channel or handler requires")          \
    /* malformed shared state: bad magic, version, names */                                        \
    X(RPCOOL_E_PROTO, -1990, "malformed shared state (protocol error)")                            \
    X(RPCOOL_E_NOSLOT, -1989, "channel has no free connection slot")                               \
    /* not finished yet / no free call slot (async) */                                             \
    X(RPCOOL_E_AGAIN, -1988, "not finished yet, or no free call slot")                             \
    /* transport or feature not available */                                                       \
    X(RPCOOL_E_NOTSUP, -1987, "not supported")                                                     \
    X(RPCOOL_E_INVAL, -1986, "invalid argument to an rpcool function")                             \
    X(RPCOOL_E_BADNAME, -1985, "malformed channel name")                                           \
    /* the server dropped this connection: its heap faulted the server (truncated) or its mutex    \
       stayed taken (see FAILURES) */                                                              \
    X(RPCOOL_E_DROPPED, -1984,                                                                     \
      "the server dropped this connection (its heap was truncated, or its mutex stayed taken)")    \
    /* RPCOOL_COPY: the argument is larger than the server's max_copy */                           \
    X(RPCOOL_E_TOOBIG, -1983,                                                                      \
      "the argument is larger than the server copies (rpcool_server_opts.max_copy)")               \
    /* RDMA: the client's heap lies where the server already maps something (same pod id) */     \
    X(RPCOOL_E_ADDRINUSE, -1982,                                                                   \
      "the connection heap's addresses are in use at the server: give each pod its own "           \
      "SHMHEAP_POD_ID")                                                                            \
    /* the handler ran over its time limit (rpcool_server_opts.limit_ms, rpcool_handler_opts) */   \
    X(RPCOOL_E_DEADLINE, -1981, "the handler ran over its time limit and was ended")               \
    /* a checked accessor was asked to read more bytes in one call than the heap holds */          \
    X(RPCOOL_E_BUDGET, -1980,                                                                      \
      "the handler's checked reads exceeded the connection heap's size (cyclic data?)")            \
    /* rpcool_connect: the heap size asked for is over the server's max_heap_size */              \
    X(RPCOOL_E_HEAPSIZE, -1979,                                                                    \
      "the connection heap asked for is larger than the server allows (max_heap_size)")            \
    /* C++: an exception escaped a handler (the implementation compiled as C++) */                 \
    X(RPCOOL_E_EXCEPTION, -1978, "the handler threw a C++ exception")                              \
    /* rpcool_cancel: the call was cancelled before its handler started */                         \
    X(RPCOOL_E_CANCELLED, -1977, "the call was cancelled by its caller")                           \
    /* the server's on_connect hook refused the connection (a hook may return its own code) */     \
    X(RPCOOL_E_REFUSED, -1976, "the server refused this client (its on_connect hook)")             \
    /* exports (section 13): an address range not inside the export */                            \
    X(RPCOOL_E_RANGE, -1975, "address range outside the export")                                   \
    /* exports: a remote write to an export that is not RPCOOL_REMOTE_RW, an attach to one that  \
       is RPCOOL_REMOTE_NONE */                                                                    \
    X(RPCOOL_E_PERM, -1974, "the export does not allow this to other pods (its remote mode)")      \
    X(RPCOOL_E_NOEXPORT, -1973, "no export of that name")                                          \
    X(RPCOOL_E_EXPORTED, -1972, "an export of that name exists already in this heap")              \
    X(RPCOOL_E_BADHANDLE, -1971, "not an open rpcool handle (closed or disconnected already)")     \
    X(RPCOOL_E_FORKED, -1970,                                                                      \
      "this rpcool handle was made before fork(): not usable in the child")                        \
    X(RPCOOL_E_NOMETHOD, -1969, "no such method: the index is not below the service's n_methods")  \
    X(RPCOOL_E_MSGTYPE, -1968, "the message is not of the method's input type")                    \
    X(RPCOOL_E_NAMELONG, -1967, "export name longer than RPCOOL_EXPORT_NAME_MAX (38) characters")  \
    X(RPCOOL_E_WITHDRAWN, -1966, "the export was withdrawn: its exporter closed it")            \
    /* the pod transport: this process stalled past its lease and was fenced (section 14) */     \
    X(RPCOOL_E_FENCED, -1965,                                                                      \
      "this process stalled past its pod lease and was fenced: reconnect")
#define RPCOOL__ERROR_ENUM(name, value, text) name = value,
enum { RPCOOL_ERRORS(RPCOOL__ERROR_ENUM) };
#undef RPCOOL__ERROR_ENUM

/* Safety flags (see SAFETY MODES above). */
enum {
    RPCOOL_RELAXED = 0,
    RPCOOL_COPY = 1,
    RPCOOL_SEAL = 2,
    RPCOOL_SANDBOX = 4
};

enum { RPCOOL_TRANSPORT_SHM = 0, RPCOOL_TRANSPORT_RDMA = 1, RPCOOL_TRANSPORT_POD = 2 };

/* Levels of the messages a log callback gets (the values of SHMHEAP_LOG_*). */
enum {
    RPCOOL_LOG_ERROR = SHMHEAP_LOG_ERROR,
    RPCOOL_LOG_WARN = SHMHEAP_LOG_WARN,
    RPCOOL_LOG_INFO = SHMHEAP_LOG_INFO,
    RPCOOL_LOG_DEBUG = SHMHEAP_LOG_DEBUG
};

#define RPCOOL_MAX_HANDLERS 1024 /* handler ids are below this */
#define RPCOOL_STATS_CONNS 1024  /* connections an answer of rpcool_channel_stats lists */
#define RPCOOL_MAX_INFLIGHT 64   /* calls in flight per connection */
#define RPCOOL_MAX_CONNS 16384   /* the most connection slots a channel can have */

/* Defaults: what a zero field of the options below means. */
#define RPCOOL_DEFAULT_MAX_CONNS 1024
#define RPCOOL_DEFAULT_SPIN_NS 20000 /* 20 us */
#define RPCOOL_DEFAULT_RDMA_SPIN_NS 500000 /* 500 us over RDMA (RR-Compound's busy-poll time) */
#define RPCOOL_DEFAULT_REAP_MS 100
#define RPCOOL_DEFAULT_PEER_CHECK_MS 100
#define RPCOOL_DEFAULT_CONNECT_TIMEOUT_MS 5000
#define RPCOOL_DEFAULT_DISCONNECT_MS 5000 /* rpcool_disconnect waits for running handlers */
#define RPCOOL_DEFAULT_MODE 0600
#define RPCOOL_DEFAULT_HEAP_SIZE ((size_t)64 << 20) /* 64 MiB */
#define RPCOOL_DEFAULT_MAX_COPY ((size_t)64 << 20)  /* 64 MiB */
#define RPCOOL_DEFAULT_SEAL_BATCH 1
#define RPCOOL_DEFAULT_PREALLOC 4
#define RPCOOL_MAX_PREALLOC 16
#define RPCOOL_DEFAULT_STACK_SIZE ((size_t)8 << 20)     /* 8 MiB per serving thread */
#define RPCOOL_DEFAULT_MAX_HEAP_SIZE ((size_t)1 << 30)  /* 1 GiB */
#define RPCOOL_DEFAULT_CLOSE_MS 1000
#define RPCOOL_STACK_RESERVE ((size_t)64 << 10) /* stack a serving thread keeps from handlers */
#ifndef RPCOOL_LIMIT_SIGNAL
#define RPCOOL_LIMIT_SIGNAL SIGURG /* ends a sandboxed handler over its time limit */
#endif

/* rpcool_ctx_fail does not return. */
#if defined(__cplusplus)
#define RPCOOL_NORETURN [[noreturn]]
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define RPCOOL_NORETURN _Noreturn
#else
#define RPCOOL_NORETURN __attribute__((noreturn))
#endif

/* Who is calling (section 12): one per connection. */
typedef struct rpcool_peer {
    int transport;       /* RPCOOL_TRANSPORT_SHM, _RDMA or _POD */
    int authenticated;   /* 1: pid, uid and gid come from the kernel (SO_PEERCRED at connect);
                            0: they are what the client claims (RDMA, the pod) */
    int32_t pid;
    uint32_t uid, gid;
    unsigned slot;       /* the connection's slot (RPCOOL_MAX_CONNS inside on_connect) */
    char pod[64];        /* shared memory: the name (not a path) of the server's pod
                            directory in /dev/shm, e.g. "shmheap.pod"; RDMA: the client's
                            $SHMHEAP_POD_ID as it claims it ("" without one) */
    char addr[64];       /* RDMA: the client's address; "" on shared memory */
} rpcool_peer;

/* Connection hooks (rpcool_server_opts.on_connect/on_disconnect; section 12). */
typedef int rpcool_connect_hook(rpcool_server *s, const rpcool_peer *peer, void **conn_user,
                                void *user);
typedef void rpcool_disconnect_hook(rpcool_server *s, const rpcool_peer *peer, void *conn_user,
                                    int why, void *user);

/* Server options. Zero means default (section 1: filling it in C and C++). */
typedef struct rpcool_server_opts {
    unsigned max_conns;   /* connection slots; 0 = RPCOOL_DEFAULT_MAX_CONNS, at most
                             RPCOOL_MAX_CONNS */
    unsigned safety;      /* flags every call on this channel gets (RPCOOL_SEAL: calls must
                             come sealed, or copied under a page, else RPCOOL_E_POLICY) */
    uint64_t spin_ns;     /* busy-poll this long after the last request before sleeping;
                             0 = RPCOOL_DEFAULT_SPIN_NS (RPCOOL_DEFAULT_RDMA_SPIN_NS for the
                             RDMA thread, which may also sleep at once: section 5) */
    unsigned reap_ms;     /* look for dead clients the kernel cannot report (FAILURES) this
                             often; 0 = RPCOOL_DEFAULT_REAP_MS */
    unsigned mode;        /* permissions of the channel's name file and socket, whatever the
                             umask; 0 = RPCOOL_DEFAULT_MODE */
    const char *pod;      /* shmheap pod (NULL = default) */
    size_t max_copy;      /* RPCOOL_COPY: the largest argument copied; larger calls fail with
                             RPCOOL_E_TOOBIG. 0 = RPCOOL_DEFAULT_MAX_COPY; SIZE_MAX = no
                             limit */
    void (*log)(int level, const char *msg, void *user); /* gets the library's messages
                             (RPCOOL_LOG_* levels, one line each), those of the connection
                             heaps too; NULL = silent, or stderr when RPCOOL_DEBUG is set */
    void *log_user;       /* passed to log */
    unsigned prealloc;    /* connection heaps kept made ahead of connects, of the size last
                             asked for; 0 = RPCOOL_DEFAULT_PREALLOC, at most
                             RPCOOL_MAX_PREALLOC (16) */
    int dumpable;         /* 1: leave the process dumpable (see LIMITS: then any process of its
                             user can open its descriptors, every connection heap among them);
                             0: rpcool_server_open makes it non-dumpable */
    const char *rdma;     /* also serve clients of other pods over RDMA (RPCOOL_WITH_RDMA):
                             "serve" or "serve:PORT" runs krconn's meta server in this process
                             (TCP port KRCONN_DEFAULT_META_PORT, 7471) and publishes the channel
                             there; "HOST[:PORT]" publishes at that meta server; "" at
                             $KRCONN_META. NULL = shared memory only */
    const char *rdma_device; /* RDMA device; NULL = $KRCONN_DEVICE, else the first active */
    size_t stack_size;    /* stack of each thread of rpcool_server_start (see LIMITS: how deep
                             a handler may recurse); 0 = RPCOOL_DEFAULT_STACK_SIZE; less than
                             RPCOOL_STACK_RESERVE + PTHREAD_STACK_MIN: RPCOOL_E_INVAL (open) */
    unsigned limit_ms;    /* time limit of every handler (see "Time limits" in FAILURES);
                             rpcool_handler_opts.limit_ms overrides it; 0 = none */
    unsigned close_ms;    /* rpcool_server_close waits this long for running handlers, then
                             ends sandboxed ones; 0 = RPCOOL_DEFAULT_CLOSE_MS */
    size_t max_heap_size; /* the largest connection heap a client may ask for (larger:
                             RPCOOL_E_HEAPSIZE); 0 = RPCOOL_DEFAULT_MAX_HEAP_SIZE */
    rpcool_connect_hook *on_connect;       /* a client connects: 0 accepts it (and may set
                             *conn_user), a negative code refuses it with that code; NULL =
                             accept all (section 12) */
    rpcool_disconnect_hook *on_disconnect; /* an accepted client has left: once per accepted
                             connection (without on_connect: every one); why: 0
                             (disconnected), RPCOOL_E_PEERDEAD (reaped), RPCOOL_E_DROPPED,
                             RPCOOL_E_CLOSED (rpcool_server_close) or the code of a connect
                             that failed after on_connect accepted it; NULL = not called */
    void *hook_user;      /* passed to both hooks */
    const char *pod_device; /* also serve the pod's other hosts through this shared device
                             (section 14): "file:PATH" or a path, "/dev/daxX.Y", "cxl:regionN",
                             a PCI BAR; NULL = $RPCOOL_POD_DEVICE; "" (or neither) = none */
} rpcool_server_opts;

/* Connection options. */
typedef struct rpcool_conn_opts {
    size_t heap_size;         /* connection heap bytes; 0 = RPCOOL_DEFAULT_HEAP_SIZE (sparse in
                                 /dev/shm) */
    unsigned safety;          /* default flags of every call */
    uint64_t spin_ns;         /* busy-poll for a reply this long, then sleep;
                                 0 = RPCOOL_DEFAULT_SPIN_NS (RPCOOL_DEFAULT_RDMA_SPIN_NS over
                                 RDMA, or sleep at once when that was faster: section 5) */
    unsigned timeout_ms;      /* default per-call timeout; 0 = none */
    unsigned peer_check_ms;   /* a waiting call checks the server lives this often;
                                 0 = RPCOOL_DEFAULT_PEER_CHECK_MS */
    unsigned connect_timeout_ms; /* 0 = RPCOOL_DEFAULT_CONNECT_TIMEOUT_MS */
    unsigned seal_batch;      /* release seals after this many sealed calls;
                                 0 = RPCOOL_DEFAULT_SEAL_BATCH (1: at once).
                                 > 1: see "Batched release" under RPCOOL_SEAL */
    int transport;            /* RPCOOL_TRANSPORT_SHM (0), or RPCOOL_TRANSPORT_RDMA: the channel
                                 name is then looked up at the meta server $KRCONN_META (as
                                 "rdma:NAME" would be) */
    const char *pod;          /* shmheap pod (NULL = default) */
    void (*log)(int level, const char *msg, void *user); /* as in rpcool_server_opts */
    void *log_user;           /* passed to log */
    int wait_ready;           /* 1: a channel with no server yet is waited for until
                                 connect_timeout_ms (else RPCOOL_E_NOCHANNEL at once) */
    unsigned disconnect_ms;   /* rpcool_disconnect waits at most this long for the handlers
                                 running for it; 0 = RPCOOL_DEFAULT_DISCONNECT_MS */
    const char *pod_device;   /* the pod's shared device, tried when the channel has no server
                                 in this kernel (section 14); NULL = $RPCOOL_POD_DEVICE; "" =
                                 none */
} rpcool_conn_opts;

/* Per-call options (NULL = connection defaults). */
/* A range of the connection heap that an RDMA call carries with it (see "Between pods"). */
typedef struct rpcool_extent {
    const void *p;
    size_t len;
} rpcool_extent;

typedef struct rpcool_call_opts {
    unsigned safety;          /* added to the connection's default flags */
    unsigned timeout_ms;      /* 0 = connection default */
    const void *seal_p;       /* RPCOOL_SEAL: the range to seal (page aligned start); */
    size_t seal_len;          /* NULL = [arg, arg+len); under a page: the argument is copied */
    const rpcool_extent *extents; /* RDMA: ranges sent with the call besides [arg, arg+len) */
    unsigned nextents;        /* (up to 16; ignored on shared memory) */
} rpcool_call_opts;

/* A handler: arg/len as sent (a private copy under RPCOOL_COPY, and for a sealed call whose seal
   range is under a page). Returns a status >= 0 that the
   caller receives, or a negative error code. Set a result with rpcool_ctx_reply. */
typedef int rpcool_handler(rpcool_ctx *ctx, void *arg, size_t len, void *user);
/* Completion callback of an asynchronous call; ret belongs to the callee (free with
   rpcool_free). */
typedef void rpcool_callback(rpcool_conn *c, int status, void *ret, size_t ret_len, void *user);

typedef struct rpcool_server_stats {
    uint64_t calls;        /* handlers run */
    uint64_t accepted;     /* connections accepted */
    uint64_t closed;       /* connections closed by their clients */
    uint64_t reaped;       /* connections of dead clients reclaimed (also of one that died
                              inside rpcool_disconnect before the server let go of it) */
    uint64_t faults;       /* faults contained */
    uint64_t bad_entries;  /* malformed requests (flagged but not filled, bad names, ...) */
    unsigned conns;        /* connections now (shared memory and RDMA) */
    unsigned ready;        /* connection heaps made ahead, waiting for a connect */
    uint64_t over_limit;   /* handlers that ran over their time limit */
    uint64_t over_budget;  /* calls ended because their checked reads exceeded the heap */
    uint64_t refused;      /* connects its on_connect hook refused */
    uint64_t dropped;      /* connections dropped (heap faulted or mutex stuck; see FAILURES) */
    uint64_t cancelled;    /* calls cancelled before their handler started */
    uint32_t server_pid;   /* the server's pid */
    unsigned max_conns;    /* its connection slots */
} rpcool_server_stats;

/* One connection as the server sees it (rpcool_server_conns, rpcool_channel_stats). */
typedef struct rpcool_conn_stats {
    rpcool_peer peer;
    unsigned inflight;     /* its calls posted and not yet answered */
} rpcool_conn_stats;

/* Options of one handler (rpcool_server_add_handler_ex). Zero means default (section 1). */
typedef struct rpcool_handler_opts {
    unsigned safety;      /* as the safety argument of rpcool_server_add_handler */
    unsigned limit_ms;    /* this handler's time limit; 0 = the server's limit_ms */
} rpcool_handler_opts;

RPCOOL_API const char *rpcool_strerror(int code);

/* Server. */
RPCOOL_API int rpcool_server_open(const char *channel, const rpcool_server_opts *opts,
                                  rpcool_server **out);
/* Sets (or replaces) handler id; fn NULL removes it (its calls then fail RPCOOL_E_NOHANDLER).
   RPCOOL_E_INVAL: s NULL, id >= RPCOOL_MAX_HANDLERS, an unknown safety flag. */
RPCOOL_API int rpcool_server_add_handler(rpcool_server *s, unsigned id, rpcool_handler *fn,
                                         void *user, unsigned safety);
RPCOOL_API int rpcool_server_add_handler_ex(rpcool_server *s, unsigned id, rpcool_handler *fn,
                                            void *user, const rpcool_handler_opts *opts);
RPCOOL_API int rpcool_server_start(rpcool_server *s, unsigned nthreads); /* background threads */
RPCOOL_API int rpcool_serve(rpcool_server *s);       /* serve on this thread until stopped */
RPCOOL_API void rpcool_server_stop(rpcool_server *s); /* make serving threads return */
/* Serve on nthreads background threads (0 = 1; none more if started already) until SIGINT or
   SIGTERM (or rpcool_server_stop), then stop: returns the signal's number (0 if stopped), or
   a negative code. Then rpcool_server_close(s) removes the channel's files. Meanwhile the two
   signals only wake it (its handler), the previous handlers are back when it returns; one call
   at a time per process (RPCOOL_E_AGAIN). */
RPCOOL_API int rpcool_serve_until_signal(rpcool_server *s, unsigned nthreads);
/* stop, join, close the channel; RPCOOL_E_TIMEOUT: a handler that may not be ended still ran
   after close_ms (see FAILURES: Time limits) */
RPCOOL_API int rpcool_server_close(rpcool_server *s);
RPCOOL_API int rpcool_server_get_stats(rpcool_server *s, rpcool_server_stats *st);
/* Its connections now (shared memory, then RDMA): fills up to max entries, returns how many
   there are. */
RPCOOL_API int rpcool_server_conns(rpcool_server *s, rpcool_conn_stats *out, unsigned max);
/* Ask the server of a channel for its stats at its socket (callers of the server's uid, or
   root; else -EACCES): 0, *st, up to max entries of conns and *nconns (how many there are);
   RPCOOL_E_BADNAME (a malformed name), RPCOOL_E_INVAL (st NULL, or conns NULL with max > 0),
   RPCOOL_E_NOCHANNEL (no server), RPCOOL_E_TIMEOUT (no answer within timeout_ms, 0 = 1000). */
RPCOOL_API int rpcool_channel_stats(const char *channel, unsigned timeout_ms,
                                    rpcool_server_stats *st, rpcool_conn_stats *conns,
                                    unsigned max, unsigned *nconns);

/* Handler side. */
RPCOOL_API shmheap *rpcool_ctx_heap(rpcool_ctx *ctx);           /* the client's heap */
/* Who called (section 12): valid during the call (and while a deferred call is unfinished). */
RPCOOL_API const rpcool_peer *rpcool_ctx_peer(const rpcool_ctx *ctx);
/* The connection's user pointer, as on_connect set it (NULL without a hook). */
RPCOOL_API void *rpcool_ctx_conn_user(const rpcool_ctx *ctx);
/* 1 if the caller cancelled this call (rpcool_cancel), else 0: cheap, poll it in long work. */
RPCOOL_API int rpcool_ctx_cancelled(const rpcool_ctx *ctx);
/* In the client's heap; NULL when it is full, or when the client keeps its heap's mutex taken
   for over a second or reading its heap faults (contained in any safety mode): then the
   connection is also dropped (served no more, its heap reclaimed). */
RPCOOL_API void *rpcool_ctx_alloc(rpcool_ctx *ctx, size_t size);
RPCOOL_API void rpcool_ctx_reply(rpcool_ctx *ctx, void *p, size_t len);
RPCOOL_API unsigned rpcool_ctx_safety(const rpcool_ctx *ctx);
RPCOOL_API int rpcool_ctx_ok(const rpcool_ctx *ctx, const void *p, size_t len); /* 1 or 0 */
/* p if [p, p+len) lies in the client's heap (or the private copy), else ends the call with
   RPCOOL_E_BADPTR (does not return); len counts towards the call's budget of checked reads. */
RPCOOL_API const void *rpcool_ctx_need(rpcool_ctx *ctx, const void *p, size_t len);
/* s if it is a NUL-terminated string inside the heap, else ends the call (RPCOOL_E_BADPTR; or
   RPCOOL_E_FAULT if reading it faults, whatever the mode, which also drops the connection; so
   does rpcool_map_get_checked). The checked accessors also end the call with RPCOOL_E_BUDGET or
   RPCOOL_E_DEADLINE (see "Time limits" in FAILURES). */
RPCOOL_API const char *rpcool_ctx_need_str(rpcool_ctx *ctx, const char *s);
/* End the call now: the caller gets code (a status >= 0 or a negative error code), as if the
   handler had returned it. Does not return. With the implementation compiled as C++ (with
   exceptions), this and a checked accessor that ends the call unwind the handler's frames (its
   destructors run; a catch (...) in the handler must rethrow what it does not know); in C they
   jump (longjmp) out of it. */
RPCOOL_NORETURN RPCOOL_API void rpcool_ctx_fail(rpcool_ctx *ctx, int code);
#define RPCOOL_NEED(ctx, p) ((__typeof__(p))rpcool_ctx_need((ctx), (p), sizeof *(p)))
/* Deferred replies (section 2): take the call out of the serving thread, finish it later from
   any thread, on either transport. 0 and *out, or RPCOOL_E_INVAL (deferred already), -ENOMEM. */
typedef struct rpcool_deferred rpcool_deferred;
RPCOOL_API int rpcool_ctx_defer(rpcool_ctx *ctx, rpcool_deferred **out);
RPCOOL_API void *rpcool_deferred_alloc(rpcool_deferred *d, size_t size); /* in the client's heap */
/* Finish the call: the caller gets status and [p, p+len) (p in the client's heap, or NULL);
   frees d. 0, RPCOOL_E_BADPTR (p outside the heap: the caller gets RPCOOL_E_BADPTR), or
   RPCOOL_E_INVAL (the call had ended already: the handler faulted or failed after deferring). */
RPCOOL_API int rpcool_deferred_reply(rpcool_deferred *d, int status, void *p, size_t len);
RPCOOL_API int rpcool_deferred_fail(rpcool_deferred *d, int code); /* reply(d, code, NULL, 0) */

/* Client. */
RPCOOL_API int rpcool_connect(const char *channel, const rpcool_conn_opts *opts, rpcool_conn **out);
RPCOOL_API int rpcool_disconnect(rpcool_conn *c);
RPCOOL_API shmheap *rpcool_heap(rpcool_conn *c);
RPCOOL_API void *rpcool_alloc(rpcool_conn *c, size_t size);
RPCOOL_API void *rpcool_alloc_pages(rpcool_conn *c, size_t size); /* page aligned, whole pages */
RPCOOL_API char *rpcool_strdup(rpcool_conn *c, const char *s);
/* 0, or an error for a pointer that is no live block of the connection heap (SHMHEAP_E_*: on the
   stack, from malloc, inside a block, already freed); NULL is 0. */
RPCOOL_API int rpcool_free(rpcool_conn *c, void *p);

RPCOOL_API int rpcool_call(rpcool_conn *c, unsigned fn, const void *arg, size_t len, void **ret,
                           size_t *ret_len);
RPCOOL_API int rpcool_call_ex(rpcool_conn *c, unsigned fn, const void *arg, size_t len,
                              const rpcool_call_opts *opts, void **ret, size_t *ret_len);
/* Asynchronous: 0 and *id, or an error (RPCOOL_E_AGAIN: 64 calls in flight). With cb, the call
   completes inside rpcool_progress (id may be NULL); without, finish it with poll or wait. */
RPCOOL_API int rpcool_call_async(rpcool_conn *c, unsigned fn, const void *arg, size_t len,
                                 const rpcool_call_opts *opts, rpcool_callback *cb, void *user,
                                 uint64_t *id);
RPCOOL_API int rpcool_poll(rpcool_conn *c, uint64_t id, void **ret, size_t *ret_len);
RPCOOL_API int rpcool_wait(rpcool_conn *c, uint64_t id, void **ret, size_t *ret_len);
/* Cancel an asynchronous call (section 12): 0 (cancelled: the id is finished, its
   callback never runs, its slot and reply come back as for a timed-out call), 1 (it had
   finished already: its reply is freed, its handler ran), RPCOOL_E_INVAL (no such call of
   ours). rpcool_poll and rpcool_wait on an id it cancelled (0): RPCOOL_E_CANCELLED. */
RPCOOL_API int rpcool_cancel(rpcool_conn *c, uint64_t id);
/* Runs the callbacks of finished calls; returns how many, or a negative error (server dead). */
RPCOOL_API int rpcool_progress(rpcool_conn *c);
/* Release all pending seals now (see RPCOOL_SEAL). */
RPCOOL_API int rpcool_release(rpcool_conn *c);

/* Building data in a heap. An arena hands out memory from one page-aligned block (so it can be
   sealed whole); an arena initialised with bytes == 0 allocates straight from the heap. */
typedef struct rpcool_arena {
    shmheap *heap;
    char *base, *cur, *end;
} rpcool_arena;
RPCOOL_API int rpcool_arena_init(rpcool_arena *a, shmheap *h, size_t bytes);
RPCOOL_API void *rpcool_arena_alloc(rpcool_arena *a, size_t size, size_t align);
RPCOOL_API size_t rpcool_arena_used(const rpcool_arena *a);
RPCOOL_API void rpcool_arena_reset(rpcool_arena *a);   /* forget everything (region arenas) */
RPCOOL_API void rpcool_arena_destroy(rpcool_arena *a); /* free the region */
RPCOOL_API char *rpcool_arena_strdup(rpcool_arena *a, const char *s);
RPCOOL_API char *rpcool_arena_strndup(rpcool_arena *a, const char *s, size_t n);

/* A growable array of fixed-size elements. */
typedef struct rpcool_array {
    uint64_t len, cap, elem;
    void *items;
} rpcool_array;
RPCOOL_API rpcool_array *rpcool_array_new(rpcool_arena *a, size_t elem, size_t cap);
RPCOOL_API void *rpcool_array_push(rpcool_arena *a, rpcool_array *arr, const void *elem);
#define RPCOOL_AT(arr, T, i) (((T *)(arr)->items)[i])

/* A hash map from strings to 64-bit values (often pointers), open addressing. */
typedef struct rpcool_map_entry {
    const char *key; /* NULL: empty */
    uint64_t hash;
    uint64_t val;
} rpcool_map_entry;
typedef struct rpcool_map {
    uint64_t len, cap; /* cap: a power of two */
    rpcool_map_entry *e;
} rpcool_map;
RPCOOL_API rpcool_map *rpcool_map_new(rpcool_arena *a, size_t cap);
/* Insert or overwrite; the key is copied into the arena. *old (if not NULL) gets the value
   replaced (0 if new). 0, or SHMHEAP_E_FULL. */
RPCOOL_API int rpcool_map_put(rpcool_arena *a, rpcool_map *m, const char *key, uint64_t val,
                              uint64_t *old);
RPCOOL_API int rpcool_map_get(const rpcool_map *m, const char *key, uint64_t *val); /* 1/0 */
/* The same on a map in a peer's heap, from a handler: every pointer checked; the call's budget
   of checked reads is charged the header, each entry probed and each key compared. */
RPCOOL_API int rpcool_map_get_checked(rpcool_ctx *ctx, const rpcool_map *m, const char *key,
                                      uint64_t *val);
RPCOOL_API uint64_t rpcool_hash(const char *s);

/* Shared data (section 13): a range of a pod heap exported under a name with a lock table
   beside it; used by pointer in its pod and by one-sided RDMA from other pods. */
#define RPCOOL_EXPORT_DEFAULT_LOCKS 64
#define RPCOOL_EXPORT_MAX_LOCKS 65536    /* locks of one export at most */
#define RPCOOL_EXPORT_NAME_MAX 38        /* characters of an export's name at most */
#define RPCOOL_EXPORT_DEFAULT_READ_MS 1000 /* an optimistic read retries this long at most */
#define RPCOOL_EXPORT_DEFAULT_PIN_BUDGET ((size_t)64 << 20) /* bytes registered at once */
#define RPCOOL_ATTACH_DEFAULT_TIMEOUT_MS 5000 /* an attach, and each remote operation */
#define RPCOOL_OWNERDEAD 1 /* a lock is held; its previous holder died holding it */
enum { RPCOOL_LOCK_READ = 0, RPCOOL_LOCK_WRITE = 1 }; /* both exclusive; WRITE bumps the lock's
                                                          version word (a seqlock) */
enum { RPCOOL_REMOTE_NONE = 0, RPCOOL_REMOTE_READ = 1, RPCOOL_REMOTE_RW = 2 };

typedef struct rpcool_export rpcool_export; /* the exporter's, or a same-pod opener's handle */
typedef struct rpcool_remote rpcool_remote; /* another pod's attachment to an export */

typedef struct rpcool_export_opts {
    uint32_t nlocks;      /* the lock table beside the data; 0 = RPCOOL_EXPORT_DEFAULT_LOCKS */
    uint32_t budget;      /* ALock's cohort budget; 0 = ALOCK_DEFAULT_BUDGET */
    int remote;           /* what other pods may do: RPCOOL_REMOTE_NONE (default), _READ, _RW */
    const char *rdma;     /* where to publish for other pods, as rpcool_server_opts.rdma:
                             "serve"[:PORT] runs krconn's meta server in this process (shared
                             with an rpcool server of the same process), "HOST[:PORT]", ""
                             = $KRCONN_META; NULL with remote != NONE: "serve" */
    size_t pin_budget;    /* bytes of the export registered at once (nppin); 0 =
                             RPCOOL_EXPORT_DEFAULT_PIN_BUDGET */
    void (*log)(int level, const char *msg, void *user); /* as rpcool's other log fields */
    void *log_user;
} rpcool_export_opts;

/* A held lock of an export, local or remote (treat as opaque). */
typedef struct rpcool_xhold {
    void *x;
    uint32_t idx, mode;
    uint64_t priv[6];
} rpcool_xhold;

/* Exporter: [base, base+len) inside heap h (base NULL, len 0: the whole heap's usable range),
   published under name (as channel names, at most RPCOOL_EXPORT_NAME_MAX characters). */
RPCOOL_API int rpcool_export_create(shmheap *h, const char *name, void *base, size_t len,
                                    const rpcool_export_opts *opts, rpcool_export **out);
/* Another process of the same pod: h opened by the caller (shmheap_open), the export by name. */
RPCOOL_API int rpcool_export_open(shmheap *h, const char *name, rpcool_export **out);
RPCOOL_API int rpcool_export_close(rpcool_export *x); /* the exporter's close withdraws it */
RPCOOL_API void *rpcool_export_base(const rpcool_export *x, size_t *len);
RPCOOL_API uint32_t rpcool_export_nlocks(const rpcool_export *x);
/* Local cohort (CPU atomics, no NIC, no call): 0, RPCOOL_OWNERDEAD (held; the previous holder
   died holding it), or a negative code. */
RPCOOL_API int rpcool_export_lock(rpcool_export *x, uint32_t idx, int mode, rpcool_xhold *h);
RPCOOL_API int rpcool_export_unlock(rpcool_xhold *h);
/* The exporter's service for other pods (zero for a handle without one). */
typedef struct rpcool_export_stats {
    uint64_t attached;    /* attachers accepted since create */
    uint64_t dropped;     /* attachers found dead or gone (detached) */
    uint32_t attachers;   /* attached now */
    size_t pin_budget;    /* bytes of the export registered at once at most (nppin) */
    size_t pinned, pinned_peak; /* registered now, and at most so far */
    uint64_t leases_granted, evictions; /* nppin's leases to attachers, chunks deregistered */
} rpcool_export_stats;
RPCOOL_API int rpcool_export_get_stats(rpcool_export *x, rpcool_export_stats *out);
/* Optimistic local read without the lock: copy [addr, addr+len) between two equal even reads
   of lock idx's version word, retrying; 0 or a negative code (RPCOOL_E_RANGE outside). */
RPCOOL_API int rpcool_export_read(rpcool_export *x, uint32_t idx, const void *addr, void *buf,
                                  size_t len);

typedef struct rpcool_attach_opts {
    int timeout_ms;       /* each remote operation and the attach; 0 =
                             RPCOOL_ATTACH_DEFAULT_TIMEOUT_MS */
    void (*log)(int level, const char *msg, void *user);
    void *log_user;
} rpcool_attach_opts;

/* Another pod: "rdma://HOST[:PORT]/NAME" (krconn's meta server at HOST), "rdma:NAME"
   ($KRCONN_META); every connect through krconn.h. */
RPCOOL_API int rpcool_attach(const char *url, const rpcool_attach_opts *opts,
                             rpcool_remote **out);
/* The same, through the meta server an existing RDMA connection c was made with. */
RPCOOL_API int rpcool_attach_conn(rpcool_conn *c, const char *name,
                                  const rpcool_attach_opts *opts, rpcool_remote **out);
RPCOOL_API int rpcool_remote_detach(rpcool_remote *r);
/* The export's range in its pod: pointers inside the data are valid addresses for the calls
   below (the data is read and written at the same addresses). */
RPCOOL_API void *rpcool_remote_base(const rpcool_remote *r, size_t *len);
RPCOOL_API uint32_t rpcool_remote_nlocks(const rpcool_remote *r);
/* One-sided: bounds checked before posting (RPCOOL_E_RANGE), buf anywhere in this process.
   write: RPCOOL_E_PERM when the export is not RPCOOL_REMOTE_RW. */
RPCOOL_API int rpcool_remote_read(rpcool_remote *r, const void *addr, void *buf, size_t len);
RPCOOL_API int rpcool_remote_write(rpcool_remote *r, void *addr, const void *buf, size_t len);
/* ALock's remote cohort; the remote waiters' queue links are made by the library. */
RPCOOL_API int rpcool_remote_lock(rpcool_remote *r, uint32_t idx, int mode, rpcool_xhold *h);
RPCOOL_API int rpcool_remote_unlock(rpcool_xhold *h);
/* Optimistic remote read: READ the version word, READ the range, READ the version again,
   retried while it is odd or changed. */
RPCOOL_API int rpcool_remote_read_opt(rpcool_remote *r, uint32_t idx, const void *addr,
                                      void *buf, size_t len);

#ifdef __cplusplus
}
#endif
#ifdef RPCOOL_WITH_PROTOBUF_C /* protobuf-c services over rpcool (section 11) */
#include "impl/rpcool/pbc.h"
#endif
#endif /* RPCOOL_H */

/* >>implementation - includes, options, constants ---------------------------------------------- */
#if defined(RPCOOL_IMPLEMENTATION) && !defined(RPCOOL_IMPLEMENTATION_ONCE)
#define RPCOOL_IMPLEMENTATION_ONCE

#if defined(RPCOOL_MALLOC) != defined(RPCOOL_FREE)
#error "rpcool.h: define both RPCOOL_MALLOC and RPCOOL_FREE, or neither"
#endif

#if !defined(SHMHEAP_IMPLEMENTATION_ONCE) && !defined(RPCOOL_NO_SHMHEAP_IMPLEMENTATION)
#if defined(RPCOOL_MALLOC) && !defined(SHMHEAP_MALLOC) && !defined(SHMHEAP_FREE)
#define SHMHEAP_MALLOC(size) RPCOOL_MALLOC(size) /* one pair of hooks for both */
#define SHMHEAP_FREE(p) RPCOOL_FREE(p)
#endif
#define SHMHEAP_IMPLEMENTATION
#include "shmheap.h"
#undef SHMHEAP_IMPLEMENTATION
#endif

#ifdef RPCOOL_WITH_RDMA /* the RDMA transport: krconn.h connects (its implementation comes along) */
#if !defined(KRCONN_IMPLEMENTATION_ONCE) && !defined(RPCOOL_NO_KRCONN_IMPLEMENTATION)
#define KRCONN_IMPLEMENTATION
#endif
#include "krconn.h"
#ifndef KRCONN_NO_RDMA /* no rdma-core headers: RDMA stays "not supported" */
#define RPCOOL__RDMA 1
#endif
#endif
#ifdef RPCOOL__RDMA /* exports to other pods register through nppin.h (section 13) */
#if !defined(NPPIN_IMPLEMENTATION_ONCE) && !defined(RPCOOL_NO_NPPIN_IMPLEMENTATION)
#define NPPIN_IMPLEMENTATION
#include "nppin.h"
#undef NPPIN_IMPLEMENTATION
#else
#include "nppin.h"
#endif
#endif
/* Exports lock with alock.h (section 13): its local cohort always, its remote cohort with
   RPCOOL_WITH_RDMA; its implementation comes along. */
#if !defined(ALOCK_IMPLEMENTATION_ONCE) && !defined(RPCOOL_NO_ALOCK_IMPLEMENTATION)
#if !defined(RPCOOL__RDMA) && !defined(ALOCK_NO_RDMA)
#define ALOCK_NO_RDMA 1 /* plain cc: no libibverbs */
#endif
#if defined(RPCOOL_MALLOC) && !defined(ALOCK_MALLOC) && !defined(ALOCK_FREE)
#define ALOCK_MALLOC(size) RPCOOL_MALLOC(size)
#define ALOCK_FREE(p) RPCOOL_FREE(p)
#endif
#define ALOCK_IMPLEMENTATION
#include "alock.h"
#undef ALOCK_IMPLEMENTATION
#else
#include "alock.h"
#endif
#include "impl/platform.h"
#include "impl/handle.h"
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <linux/membarrier.h>

#ifndef RPCOOL_MALLOC
#define RPCOOL_MALLOC(size) malloc(size)
#define RPCOOL_FREE(p) free(p)
#endif

#ifndef RPCOOL_ASSERT
#include <assert.h>
#define RPCOOL_ASSERT(x) assert(x)
#endif

#define RPCOOL__CH_MAGIC 0x314c4843434f4352ull   /* "RCOCCHL1" */
#define RPCOOL__CONN_MAGIC 0x314e4e43434f4352ull /* "RCOCCNN1" */
#define RPCOOL__VERSION 7u /* 4: the channel is a sealed memfd, named by a rendezvous record;
                              5: a sealed call under a page carries RPCOOL__SEAL_COPY;
                              6: connection heaps are the server's memfds, given over a socket;
                              7: the ready summary in the channel's header page */
#define RPCOOL__RDV_MAGIC 0x3156445243434f52ull /* "RCOCRDV1" */
#define RPCOOL__NSLOTS 64u
#define RPCOOL__NAME_MAX 48
#define RPCOOL__HEAPNAME 112
#define RPCOOL__ROOT "rpcool.conn"
#define RPCOOL__COPY_KEEP ((size_t)1 << 20) /* a serving thread keeps a copy buffer up to this */
#define RPCOOL__IDLE_PASSES 64u /* passes a flagged connection stays in the ready summary idle */
#define RPCOOL__ARENA_HEAPS 64u /* a server's first arena of connection heaps holds this many */
#define RPCOOL__ARENA_FIRST ((size_t)4 << 30) /* a first arena's bytes at most */
#define RPCOOL__ARENA_MAX ((size_t)64 << 30) /* arenas grow twice as large each, to this */
#define RPCOOL__CARVE_TRIES 4
#define RPCOOL__QUIET_MS 1000u  /* the acceptor's round when no death needs polling to be seen */
#define RPCOOL__NOSLOT_TRIES 5  /* reaping rounds a connect that finds no free slot waits for */
#ifdef SO_PEERPIDFD
#define RPCOOL__SO_PEERPIDFD SO_PEERPIDFD
#else
#define RPCOOL__SO_PEERPIDFD 77 /* Linux 6.5; older kernels say ENOPROTOOPT */
#endif
#ifdef SYS_pidfd_open
#define RPCOOL__SYS_PIDFD_OPEN SYS_pidfd_open
#else
#define RPCOOL__SYS_PIDFD_OPEN 434 /* Linux 5.3, the same number on every architecture */
#endif
/* A sealed call whose seal range is smaller than a page: the client did not seal, the server
   copies the argument instead (as RPCOOL_COPY, whatever max_copy). Never seen by handlers. */
#define RPCOOL__SEAL_COPY 8u
#define RPCOOL__KNOWN_FLAGS (RPCOOL_COPY | RPCOOL_SEAL | RPCOOL_SANDBOX)
/* The caller discards the reply (rpcool_call with ret NULL): the server frees every block the
   handler allocated and answers without a reply. */
#define RPCOOL__DISCARD 16u
#define RPCOOL__WIRE_FLAGS (RPCOOL__KNOWN_FLAGS | RPCOOL__SEAL_COPY | RPCOOL__DISCARD)
#define RPCOOL__ALTSTACK ((size_t)64 << 10) /* a serving thread's alternate signal stack */
#define RPCOOL__WATCH_MS 10u        /* how often time limits are looked at, when there are any */
#define RPCOOL__ABANDON_NS 20000000u /* a sandboxed handler over its limit that makes no checked
                                        access within this is ended by RPCOOL_LIMIT_SIGNAL */

/* ThreadSanitizer does not see membarrier(2): there the cheap sides of the asymmetric fences
   (kept slots, a serving thread's current connection) use seq_cst instead. */
#if defined(__SANITIZE_THREAD__)
#define RPCOOL__TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RPCOOL__TSAN 1
#endif
#endif
#ifndef RPCOOL__TSAN
#define RPCOOL__TSAN 0
#endif

/* >>support - private memory, logging ---------------------------------------------------------- */

static size_t rpcool__page_size(void)
{
    static size_t pg; /* racy but idempotent: every thread stores the same value */
    size_t v = rcp__load_relaxed(&pg);
    if (!v) { v = (size_t)sysconf(_SC_PAGESIZE); rcp__store_relaxed(&pg, v); }
    return v;
}

/* Private memory: every allocation of the library goes through RPCOOL_MALLOC/RPCOOL_FREE. */
static void *rpcool__calloc(size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size) return NULL;
    void *p = RPCOOL_MALLOC(n * size);
    if (p) memset(p, 0, n * size);
    return p;
}

static void rpcool__free(void *p)
{
    if (p) RPCOOL_FREE(p);
}

static int rpcool__debug_env = -1; /* RPCOOL_DEBUG, read once */

static struct rcp__logger rpcool__logger(rcp__log_fn *fn, void *user)
{
    return rcp__logger_pick(fn, user, &rpcool__debug_env, "RPCOOL_DEBUG", "rpcool");
}

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static void rpcool__log(const struct rcp__logger *lg, int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rcp__logv(lg, level, fmt, ap);
    va_end(ap);
}

/* >>layout - shared layouts: the channel file, the connection header --------------------------- */

/* Channel file: header page, then one slot per connection. Mapped anywhere (no pointers). */
struct rpcool__chan_hdr {
    uint64_t magic;
    uint32_t version, max_conns;
    uint32_t epoch;     /* bumped by every server that (re)opens the channel */
    uint32_t state;     /* RPCOOL__CH_OPEN / RPCOOL__CH_CLOSED */
    uint32_t safety;    /* the channel policy, for clients' information */
    uint32_t server_pid;
    uint32_t pending;   /* bumped by clients that connect or close */
    uint32_t pad0;
    uint64_t server_cpus; /* bit cpu%64 of every CPU a serving thread polls on (a hint) */
    uint64_t client_cpus; /* bit cpu%64 of every CPU a client posted from (a hint) */
    uint32_t cwaiting;  /* clients asleep waiting for an answer, as a signed count (a hint: see
                           rpcool__cwaiting_check) */
    uint32_t crowd;     /* the most requests one serving pass found in the last millisecond, 0
                           while the server sleeps (a hint: see rpcool__shm_wait) */
    uint32_t sdoor;     /* server doorbell (futex) */
    uint32_t ssleepers; /* server threads asleep on sdoor */
    uint32_t pad1[14];
};
RCP__STATIC_ASSERT(sizeof(struct rpcool__chan_hdr) == 128, "channel header layout");

enum { RPCOOL__CH_OPEN = 1, RPCOOL__CH_CLOSED = 2 };
enum { /* channel slot states */
    RPCOOL__CS_FREE = 0, RPCOOL__CS_CLAIMED, RPCOOL__CS_PENDING, RPCOOL__CS_ACTIVE,
    RPCOOL__CS_REFUSED, RPCOOL__CS_CLOSING,
    RPCOOL__CS_DROPPED /* the server served the connection no more: its client fails its calls */
};

struct rpcool__chan_slot {
    uint32_t state;
    uint32_t seq;     /* futex: bumped by the server at every answer */
    uint32_t epoch;   /* channel epoch the client connected in */
    int32_t status;   /* why a connection was refused */
    uint32_t client_pid;
    uint32_t pad;
    uint64_t hdr;     /* the connection header's address (the heap maps at it everywhere) */
    char heap[RPCOOL__HEAPNAME];
};
RCP__STATIC_ASSERT(sizeof(struct rpcool__chan_slot) == 144, "channel slot layout");
#define RPCOOL__SLOTS_OFF 4096u

/* The ready summary, in the channel's header page: a client that posts a call sets its slot's
   bit (bit i%64 of word i/64 of rdy) and that word's bit in rdy_top when it finds them clear,
   so a serving pass visits the connections that may hold a request, not every one. The server
   clears the bits of connections found idle, then looks once more (seq_cst both ways, as for
   req_bits). Any client can write these words: a bit beyond max_conns is cleared unread, and a
   bit cleared by someone else is set again by its client when its wait sleeps (>>client). */
#define RPCOOL__RDY_TOP_OFF 256u  /* RPCOOL__RDY_TOP words: bit k, word k of rdy may be set */
#define RPCOOL__RDY_OFF 384u      /* RPCOOL_MAX_CONNS / 64 words: bit i, slot i may be ready */
#define RPCOOL__RDY_TOP (RPCOOL_MAX_CONNS / 4096)
RCP__STATIC_ASSERT(RPCOOL_MAX_CONNS % 4096 == 0 && RPCOOL__RDY_TOP_OFF + 8 * RPCOOL__RDY_TOP <=
                   RPCOOL__RDY_OFF && RPCOOL__RDY_OFF + RPCOOL_MAX_CONNS / 8 <= RPCOOL__SLOTS_OFF,
                   "ready summary layout");

static uint64_t *rpcool__rdy_top(struct rpcool__chan_hdr *ch)
{
    return (uint64_t *)(void *)((char *)ch + RPCOOL__RDY_TOP_OFF);
}

static uint64_t *rpcool__rdy(struct rpcool__chan_hdr *ch)
{
    return (uint64_t *)(void *)((char *)ch + RPCOOL__RDY_OFF);
}

/* A client's post: make slot i visible to the serving passes. Only loads while the bits are
   set (a busy connection's are), so a busy pair writes no shared line here. */
static void rpcool__ready_mark(struct rpcool__chan_hdr *ch, uint32_t i)
{
    uint64_t *w = &rpcool__rdy(ch)[i / 64], *t = &rpcool__rdy_top(ch)[i / 4096];
    uint64_t b = 1ull << (i % 64), tb = 1ull << (i / 64 % 64);
    if (!(__atomic_load_n(w, __ATOMIC_SEQ_CST) & b)) __atomic_fetch_or(w, b, __ATOMIC_SEQ_CST);
    if (!(__atomic_load_n(t, __ATOMIC_SEQ_CST) & tb)) __atomic_fetch_or(t, tb, __ATOMIC_SEQ_CST);
}

/* A call slot is two cache lines: the request, written only by the client, and the response,
   written only by the server, so each direction of a call moves one line (as a bare ping-pong
   does) and neither side ever takes a line the other is polling. States carry the slot's
   generation (gen << 2 | RPCOOL__SL_*): the client posts gen|REQ, the server answers gen|DONE,
   so an answer to an earlier call on the slot never matches. Server threads claim a request in
   private memory (rpcool__sconn.claimed), never in the client's lines. */
struct rpcool__req {
    uint32_t state; /* gen|REQ once posted; stays so after the answer */
    uint32_t fn;
    uint32_t flags;
    uint32_t cancel; /* gen|REQ: the client cancelled call gen (rpcool_cancel) */
    uint64_t arg, arg_len;
    uint64_t seal, seal_len;
    uint64_t pad1[2];
};
struct rpcool__resp {
    uint32_t state; /* gen|DONE */
    int32_t status;
    uint64_t ret, ret_len;
    uint64_t pad[5];
};
RCP__STATIC_ASSERT(sizeof(struct rpcool__req) == 64 && sizeof(struct rpcool__resp) == 64,
                   "call slot layout");
enum { RPCOOL__SL_FREE = 0, RPCOOL__SL_REQ = 1, RPCOOL__SL_DONE = 3 };
#define RPCOOL__SL(gen, st) ((uint32_t)(gen) << 2 | (uint32_t)(st))

struct rpcool__conn_hdr {
    uint64_t magic;
    uint32_t version, nslots;
    uint32_t chan_slot, epoch;
    uint32_t pad0[10];
    /* bit i: slot i may hold a request, look at it. Set by the client when it posts and finds
       the bit clear; left set while the connection is busy, so a client that calls again and
       again never writes this line; cleared for idle slots by a server about to sleep (both
       sides re-check the other's word afterwards, seq_cst, so no request is missed). */
    uint64_t req_bits;
    uint64_t pad1[7];
    uint32_t cdoor;    /* client doorbell (futex) */
    uint32_t csleepers;
    uint32_t pad2[14];
    struct rpcool__req req[RPCOOL__NSLOTS];
    uint64_t pad3[16]; /* keeps the last request and first response off one 128-byte pair */
    struct rpcool__resp resp[RPCOOL__NSLOTS];
};
RCP__STATIC_ASSERT(sizeof(struct rpcool__conn_hdr) == 320 + 128 * RPCOOL__NSLOTS, "conn layout");

/* >>state - process-local state ---------------------------------------------------------------- */

enum { RPCOOL__SC_FREE = 0, RPCOOL__SC_ACTIVE, RPCOOL__SC_DRAINING };

/* A connection heap made ahead of a connect: a memfd sealed against resizing, formatted and
   mapped by the server, its connection header allocated; and a new open of the channel memfd
   for its client, whose lock byte the server takes before giving it away. */
/* Connection heaps are carved from ranges the server reserves in the pod (shmheap_resv), one
   pod entry per arena whatever the number of connections; a carve is one heap's place. */
struct rpcool__arena {
    shmheap_resv *r;
    size_t hsize;   /* the size of its heaps: one size per arena */
    size_t top;     /* carved below this */
    struct rpcool__arena *next;
};
struct rpcool__carve {
    struct rpcool__arena *a;
    size_t off, size;
    struct rpcool__carve *next; /* on the free list (oldest first) */
};

struct rpcool__prem {
    int hfd, cfd;
    int ofd, pfd;   /* the client's own open of the heap, and a hold on its pod range */
    struct rpcool__carve *cv; /* where the heap lives */
    size_t size;
    shmheap *h;
    struct rpcool__conn_hdr *hdr;
};

struct rpcool__sconn { /* the server's view of one connection */
    uint32_t state;
    uint32_t condemned; /* a read of its heap faulted, or its mutex stays taken: drain it, serve it
                           no more */
    uint64_t drain_gp;  /* grace period that began when it started draining */
    shmheap *heap;
    struct rpcool__conn_hdr *hdr;
    int dead;          /* client died: reclaim its connection once drained */
    uint32_t ndeferred; /* deferred calls not yet finished: its heap stays until they are */
    int pkey;
    uint32_t rot;      /* where the next scan starts (fairness) */
    uint32_t idle;     /* passes that found it flagged with nothing to do: its bits go at
                          RPCOOL__IDLE_PASSES (so a busy client's stay set) */
    uint32_t logged;   /* RPCOOL__NOTE_* kinds already logged for it (once per connection) */
    uint32_t pid;      /* its client's pid (the socket's peer), for the log */
    size_t size;       /* its heap's size: a call's budget of checked reads */
    uint32_t claimed[RPCOOL__NSLOTS]; /* generation last claimed per slot (server threads) */
    char heap_name[RPCOOL__HEAPNAME];
    rpcool_peer peer;  /* who its client is (set before it is active) */
    void *cuser;       /* on_connect's conn_user */
    int hooked;        /* on_connect accepted it: on_disconnect is owed */
    int pidfd;         /* its client's process (in the acceptor's epoll), or -1: byte locks */
    uint32_t suspect;  /* its pidfd fired: look at its lock byte now */
    const struct rpcool__pwake *pw; /* the pod: its client sleeps on a socket (NULL: a futex) */
};

/* What the serving passes visit: a channel's slots, its connections and its ready summary (the
   server's own channel, or a pod's channel in a shared device). */
struct rpcool__sset {
    uint64_t *rdy, *rdy_top;      /* the ready summary in the channel's header page */
    struct rpcool__chan_slot *cs; /* the channel's slots */
    struct rpcool__sconn *conns;  /* max_conns of them */
    uint32_t max_conns;
    uint32_t rr;                  /* the slot the next pass starts at: after the last served */
};

/* A registration; immutable once published in the handler table, so a call sees one
   registration's function, user pointer and flags together. Replaced entries are kept on a
   retired list until the server closes (a serving thread may still be using one). */
struct rpcool__handler_ent {
    rpcool_handler *fn;
    void *user;
    unsigned flags;
    uint32_t hlimit;   /* RPCOOL__HL_RUN | its time limit in ms (its own, else the server's) */
    struct rpcool__handler_ent *next_retired;
};

enum { RPCOOL__HL_RUN = 1u << 31, RPCOOL__HL_SBX = 1u << 30, RPCOOL__HL_MS = (1u << 30) - 1 };

/* Blocks a call's handler allocated in the client's heap (rpcool__blocks_settle): a serving
   thread's, or a deferred call's (then lock is the token's: several threads may add). */
struct rpcool__blocks {
    void **p;
    unsigned n, cap;
    pthread_mutex_t *lock;
};

/* A serving thread, registered with its server. A pass over the connections is a read-side
   critical section: gp is 0 outside one, else the grace period the pass started in; a
   draining connection is unmapped once no pass that may have seen it active remains. */
struct rpcool__worker {
    uint64_t gp;    /* the grace period its passes announce (0: in none; see rpcool__drain) */
    uint64_t calls; /* handlers it started: written by it alone, summed by get_stats; the
                       running handler's number (rpcool_ctx.call_no) */
    uint32_t hlimit; /* while a handler runs: RPCOOL__HL_RUN, _SBX if sandboxed, limit in ms */
    uint64_t expired; /* the call number the watchdog found over its limit */
    uint64_t seen_calls, seen_since, expired_at; /* the watchdog's (under wk_lock) */
    pthread_t thread;
    struct rpcool__blocks blk; /* blocks the running handler allocated (rpcool_ctx_alloc) */
    struct rpcool__worker *next;
    rpcool_server *s;
    char *buf; /* private copies (RPCOOL_COPY) */
    size_t cap;
    struct rpcool__sconn *volatile cur; /* the connection being touched, for fault recovery */
    unsigned cpu;                       /* where it last polled (sched_getcpu) */
    uint32_t crowd;                     /* the most requests a pass found since crowd_at */
    uint64_t crowd_at;
};

/* The channel's name file /dev/shm/rpcool.NAME holds this record and nothing else. The server
   holds its byte 0 (the name is taken while it lives: a connect that finds no socket retries
   while the name is held) and writes it with pwrite. Clients get the channel over the socket,
   not through this record. Nobody maps the name file: a client that truncates or overwrites
   it disturbs nobody; the server rewrites it every reap_ms. */
struct rpcool__rdv {
    uint64_t magic;
    uint32_t version, server_pid;
    int32_t fd;         /* the channel memfd's descriptor in the server */
    uint32_t max_conns, epoch, pad;
    uint64_t ino;       /* the memfd's inode: a client checks it opened that very file */
    uint64_t pad2[3];
};
RCP__STATIC_ASSERT(sizeof(struct rpcool__rdv) == 64, "rendezvous layout");

struct rpcool_server {
    char name[RPCOOL__NAME_MAX + 1];
    char path[RPCOOL__NAME_MAX + 32];
    int fd;             /* the channel memfd (liveness locks: byte 0 ours, 1+i client slot i) */
    int name_fd;        /* the name file (its byte 0: the name is ours) */
    struct rpcool__rdv rdv;
    struct rpcool__chan_hdr *ch;
    struct rpcool__chan_slot *cs;
    size_t map_len;
    uint32_t max_conns, epoch;
    unsigned safety, reap_ms;
    uint64_t spin_ns;
    size_t max_copy;
    size_t stack_size, max_heap;
    unsigned limit_ms, close_ms;
    int any_limit;      /* a time limit is set somewhere: the watchdog looks often */
    int mb_ok;          /* membarrier registered (see rpcool__drain) */
    shmheap_opts hopts;
    struct rcp__logger log;
    struct rpcool__handler_ent **handlers; /* RPCOOL_MAX_HANDLERS, each published atomically */
    struct rpcool__handler_ent *retired;   /* replaced entries, freed at close */
    struct rpcool__sconn *conns;
    uint32_t seen_pending;
    int dep;             /* epoll of the clients' pidfds (the acceptor waits on it), or -1 */
    uint32_t deaths, seen_deaths; /* pidfd events the acceptor saw, and housekeeping handled */
    uint32_t nopid;      /* active connections watched by their lock byte only (changed under
                            hk_lock) */
    uint32_t hk_due;     /* connections housekeeping must come back to (draining, stale slots) */
    pthread_mutex_t ar_lock; /* the arenas and carves below */
    struct rpcool__arena *arenas; /* the newest first */
    struct rpcool__carve *cv_free, *cv_tail; /* carves free again: reused oldest first */
    struct rpcool__carve **carves; /* per slot: its heap's carve, until the slot is free */
    uint32_t nscan;      /* 1 + highest connection slot in use */
    struct rpcool__sset set; /* what the serving passes visit: the channel's slots */
    uint64_t last_hk;
    uint64_t gp;         /* grace period counter, bumped when a connection starts draining */
    struct rpcool__worker *workers; /* changed under hk_lock and wk_lock, read under either */
    pthread_mutex_t hk_lock;
    pthread_mutex_t wk_lock; /* taken after hk_lock; never held while logging */
    int stop;
    pthread_t *threads;
    unsigned nthreads;
    int pkeys[15], npkeys;
    rpcool_server_stats st;
    /* the front door: a listening socket, a thread that gives each connect a heap made ahead */
    int lfd, acc_ev; /* the listening socket; an eventfd that stops the acceptor */
    char sock_path[RPCOOL__NAME_MAX + 40];
    pthread_t acceptor;
    int acc_started, acc_stop;
    /* the pool of heaps made ahead: filled by the maker thread, emptied by the acceptor */
    pthread_t maker;
    int maker_started;
    pthread_mutex_t pool_lock;
    pthread_cond_t pool_cv; /* the maker waits on it for room, or for the stop */
    unsigned prealloc, npool;
    size_t last_size;   /* the heap size last asked for: what the pool is refilled with (0:
                           nobody asked yet, the pool stays empty) */
    struct rpcool__prem *pool; /* RPCOOL_MAX_PREALLOC entries, under pool_lock */
    const struct rpcool__server_tp *xtp; /* a listener of another transport, or NULL */
    struct rpcool__rsrv *rdma; /* the RDMA transport's listener (xtp's state), or NULL */
    const struct rpcool__server_tp *ptp; /* the pod transport's listener, or NULL */
    struct rpcool__psrv *psrv; /* its state (impl/rpcool/pod.h) */
    rpcool_connect_hook *on_connect;
    rpcool_disconnect_hook *on_disconnect;
    void *hook_user;
    char pod[64];       /* the pod's name, for rpcool_peer */
};

struct rpcool__pend { /* client-private state of one call slot */
    uint32_t gen;
    uint32_t pstate; /* RPCOOL__P_* */
    rpcool_callback *cb;
    void *user;
    uint64_t deadline;  /* an asynchronous call's timeout (rcp__now_ns), or 0 */
    const void *seal_p; /* the seal this call holds (a key of the seal table), or NULL */
    size_t seal_len;
};

/* A sealed (read-only) range of the client's heap and the calls in flight that rely on it.
   Ranges with no user stay sealed until the batch is released. */
struct rpcool__seal {
    const void *p;
    size_t len;
    uint32_t users;
};
enum { RPCOOL__P_FREE = 0, RPCOOL__P_SYNC, RPCOOL__P_ASYNC, RPCOOL__P_TAKEN, RPCOOL__P_ABANDONED };

/* >>seam - the transport seam: one table per side ---------------------------------------------- */

/* A call as the call path hands it to a transport: what the caller asked, checked (fn in range,
   flags known, the argument in the connection's heap), in no transport's layout. */
struct rpcool__call {
    unsigned slot;            /* the call's slot: c->pend[slot], its reply in c->hdr->resp[slot] */
    uint32_t gen;             /* the slot's generation (c->pend[slot].gen) */
    unsigned fn, flags;       /* the handler id; the safety flags, RPCOOL__DISCARD included */
    const void *arg;          /* the argument, in the connection's heap, or NULL */
    size_t arg_len;
    const void *seal_p;       /* rpcool_call_opts.seal_p/seal_len as given (NULL: none) */
    size_t seal_len;
    const rpcool_extent *ext; /* rpcool_call_opts.extents (NULL: none) */
    unsigned next;
    uint64_t deadline;        /* the call's deadline (rcp__now_ns), 0 = none */
};

/* What the transport's calls cross by (flags of a table). */
#define RPCOOL__TP_COPIES 1u /* the bytes cross by copy: the server never maps the caller's heap, a
                                call is sealed by construction, a reply's blocks go as one */

/* The client's side of a transport. rpcool_connect picks the table from the channel's name
   (rpcool__tp_pick), sets c->tp and calls connect; from then on the call path reaches the
   transport through this table only, and a transport keeps its own state behind c (its own
   fields, as c->rdma) and in c->hdr->resp (the replies, which the call path reads).
   The contract, for every operation:
   - connect(c, where, name, o, ms): make the connection: c->heap (the connection heap calls
     take their arguments from), c->hdr (resp[] is where a reply shows: status, ret, ret_len,
     then state = RPCOOL__SL(gen, RPCOOL__SL_DONE), stored last) and the transport's state. May
     block up to ms. No lock held. Returns 0, or an RPCOOL_E_* / -errno, having freed what it
     made (the call path frees c itself).
   - post(c, call): send the call. Called by the slot's owner (a synchronous caller, or
     rpcool_call_async) with no rpcool lock held; several threads post on other slots at once.
     May block while there is no room to send, up to call->deadline (RPCOOL_E_TIMEOUT).
     Returns 0 once the server will see it, or an error with nothing sent (the call path then
     gives the slot back): RPCOOL_E_INVAL / RPCOOL_E_AGAIN / SHMHEAP_E_* for a seal that
     cannot be made, a peer's error (RPCOOL_E_PEERDEAD, RPCOOL_E_CLOSED), -ENOMEM.
   - wait(c, i, deadline): block until slot i is done (0), the deadline passed
     (RPCOOL_E_TIMEOUT) or the server is gone (gone's error). No lock held.
   - poll(c): take in what came, without blocking (it may do nothing if another thread is at
     it); after it, done slots show in c->hdr->resp. Called from rpcool_poll, rpcool_progress,
     the reclaiming of abandoned calls.
   - gone(c): 0 while the server serves us, else RPCOOL_E_PEERDEAD, RPCOOL_E_CLOSED or
     RPCOOL_E_DROPPED (the liveness detector: cheap, called in waits and before calls; it may
     make a system call at most once per c->peer_check_ms). c->dead is tested before it.
   - drop_reply(c, p): a reply nobody takes (a discarded or abandoned call's): free it (may
     block as free does).
   - free(c, p): rpcool_free of p: 1 if p was a block of the transport's own (then freed), 0
     to let the connection's heap free it. May block as post does, without a deadline, when
     it must send (RDMA: a full queue of frees goes as a frame).
   - disconnect(c): tell the server, release the transport's state and c->heap. May block a
     bounded time (a few seconds at most). Does not free c.
   - cancel(c, i): tell the server that the call in slot i (taken by rpcool_cancel, not done)
     is cancelled: a handler not started must not start, a running one sees
     rpcool_ctx_cancelled. Must not block. NULL: the transport cannot cancel (rpcool_cancel
     says RPCOOL_E_NOTSUP). */
struct rpcool__client_tp {
    const char *name;
    unsigned flags; /* RPCOOL__TP_* */
    int (*connect)(rpcool_conn *c, const char *where, const char *name, const rpcool_conn_opts *o,
                   unsigned connect_ms);
    int (*post)(rpcool_conn *c, const struct rpcool__call *call);
    int (*wait)(rpcool_conn *c, unsigned i, uint64_t deadline);
    void (*poll)(rpcool_conn *c);
    int (*gone)(rpcool_conn *c);
    void (*drop_reply)(rpcool_conn *c, void *p);
    int (*free)(rpcool_conn *c, void *p);
    void (*disconnect)(rpcool_conn *c);
    void (*cancel)(rpcool_conn *c, unsigned i);
};

/* The server's side of a transport. Shared memory is the server's own (its channel, slots and
   serving threads: rpcool_server_create..rpcool_server_close); another transport is a listener
   it carries as well (s->xtp, its state behind s, as s->rdma), asked for by an option of
   rpcool_server_opts. The contract:
   - open(s, how, device, spin_ns): make the listener (rpcool_server_create, after the channel
     is up; no lock held). May block a few seconds (a directory to reach). Returns 0, or an
     error having logged why; close is called after a failed open, so open leaves its state
     where close finds it.
   - start(s): serve its connections (called by each serving thread as it starts; a second
     call while started does nothing; a call after stop starts it again). Returns 0 or -errno.
     Its serving threads register as workers (rpcool__worker_join), so the watchdog holds
     them to their time limits, and hand every call they read to rpcool__dispatch.
   - stop(s): ask its threads to stop (rpcool_server_stop: no lock held, must not block).
   - close(s): stop, join, tell its clients and free everything (rpcool_server_close, after the
     serving threads were joined). Also after a failed or no open.
   - conns(s, out, max, n): rpcool_server_conns of its connections, from out[n] on (up to
     max); returns n plus their number. Any thread; must not block on a call.
   For a call it serves (ctx->tp is the table, ctx->conn the connection, ctx->cookie the word
   the transport put in the call's struct rpcool__incoming); none of them blocks on a call:
   - alloc(ctx, size): a reply block (rpcool_ctx_alloc), or NULL with errno set.
   - in_range(ctx, p, len): 1 if [p, p+len) is the caller's memory as the handler sees it.
   - heap(ctx): the caller's heap as a shmheap, or NULL if there is none here.
   - peer(ctx): who is calling (rpcool_ctx_peer), never NULL.
   - conn_user(ctx): the connection's user pointer (rpcool_ctx_conn_user), or NULL.
   - cancelled(ctx): 1 if the client cancelled the call (rpcool_ctx_cancelled); cheap.
   - drop(ctx, why): serve the connection no more (a fault on the caller's memory that every
     later access would meet); logs why.
   - hold(ctx, delta): a deferred call of this connection begins (+1: ctx is the token's,
     ctx->dfr set; what the transport keeps per call moves to the token, ctx->cookie may
     change; 0 or -ENOMEM with nothing held) or ends (-1): while any is unfinished the
     connection's state (heap or mirror) stays, even with its client gone.
   - reply(ctx, status, p, len): answer the call: the serving thread's answer (ctx->dfr NULL,
     under its recovery point) or a deferred one, from any thread (ctx->dfr set). p is checked
     by in_range already, or NULL. A failed call (status < 0), one without a reply or one its
     caller discards (RPCOOL__DISCARD in ctx->wflags) sends no reply and frees the blocks the
     handler allocated. 0, or 1 when answering faulted (the connection is dropped). */
struct rpcool__server_tp {
    const char *name;
    unsigned flags; /* RPCOOL__TP_* */
    int (*open)(rpcool_server *s, const char *how, const char *device, uint64_t spin_ns);
    int (*start)(rpcool_server *s);
    void (*stop)(rpcool_server *s);
    void (*close)(rpcool_server *s);
    int (*conns)(rpcool_server *s, rpcool_conn_stats *out, unsigned max, int n);
    void *(*alloc)(rpcool_ctx *ctx, size_t size);
    int (*in_range)(const rpcool_ctx *ctx, const void *p, size_t len);
    shmheap *(*heap)(rpcool_ctx *ctx);
    const rpcool_peer *(*peer)(const rpcool_ctx *ctx);
    void *(*conn_user)(const rpcool_ctx *ctx);
    int (*cancelled)(const rpcool_ctx *ctx);
    void (*drop)(rpcool_ctx *ctx, const char *why);
    int (*hold)(rpcool_ctx *ctx, int delta);
    int (*reply)(rpcool_ctx *ctx, int status, void *p, size_t len);
};

/* A call as a transport read it off its wire, handed to rpcool__dispatch: every field read
   once (the client may change its copy at any moment), in no transport's layout. */
struct rpcool__incoming {
    unsigned fn, flags;   /* the handler id; the flags as sent (RPCOOL__WIRE_FLAGS) */
    void *arg;            /* the argument, where the handler sees the caller's memory */
    size_t arg_len;
    const void *seal;     /* the range the caller sealed (RPCOOL_SEAL; none where the
                             transport copies: RPCOOL__TP_COPIES) */
    size_t seal_len;
    unsigned slot;        /* where its answer goes: the slot and its generation */
    uint32_t gen;
    void *conn;           /* the transport's connection (ctx->conn) */
    uintptr_t cookie;     /* the transport's word for this call (ctx->cookie) */
    size_t budget;        /* what its checked reads may read: the caller's heap's size */
    int pkey;             /* the protection key of the caller's memory, or -1 (none) */
    uint32_t *logged;     /* RPCOOL__NOTE_* kinds logged for the connection (once each) */
    uint32_t pid;         /* the caller's pid, and its connection's name, for the log */
    const char *who;
};

struct rpcool_conn {
    const struct rpcool__client_tp *tp;
    int fd;
    struct rpcool__chan_hdr *ch;
    struct rpcool__chan_slot *cs;
    size_t map_len;
    uint32_t index, epoch;
    shmheap *heap;
    shmheap_opts hopts;
    struct rcp__logger log;
    struct rpcool__conn_hdr *hdr;
    int pod_fd;          /* holds the heap's range in the pod (see shmheap_pod_hold) */
    char heap_name[RPCOOL__HEAPNAME];
    unsigned safety, timeout_ms, peer_check_ms, seal_batch;
    uint64_t spin_ns;
    uint64_t free_bits;
    uint64_t cancelled[RPCOOL__NSLOTS]; /* per slot: 1 + the last id rpcool_cancel cancelled */
    unsigned disconnect_ms;
    uint64_t hot; /* the kept slot (rpcool__hot_take): owner cell << 8 | slot, 0, or REVOKING */
    int32_t dead;        /* sticky error once the server is known gone */
    uint64_t last_check; /* when the server's lock was last tested */
    struct rpcool__pend pend[RPCOOL__NSLOTS];
    uint32_t abandoned;  /* calls timed out or cancelled whose slots are not reclaimed yet */
    pthread_mutex_t seal_lock;
    struct rpcool__seal *seals; /* seal_batch + RPCOOL__NSLOTS entries */
    shmheap_range *release;     /* scratch for a batch release */
    size_t nseals, seal_cap;    /* nseals: read unlocked only as a hint */
    unsigned seal_done;         /* sealed calls finished since the last release */
    struct rpcool__rconn *rdma; /* an RDMA connection's state, or NULL (shared memory) */
    struct rpcool__pconn *pod;  /* a pod connection's state (impl/rpcool/pod.h), or NULL */
};

struct rpcool_ctx {
    rpcool_server *s;
    const struct rpcool__server_tp *tp; /* the transport the call came by */
    void *conn;         /* its connection, the transport's own (struct rpcool__sconn, _rconn) */
    uintptr_t cookie;   /* the transport's word for this call (shared memory: where its blocks
                           are recorded; RDMA: its reply blocks' group) */
    struct rpcool__worker *w; /* the serving thread (NULL in a deferred call's token) */
    struct rpcool__guard *guard;
    unsigned flags;
    const char *copy;   /* private copy of the argument (RPCOOL_COPY) */
    size_t copy_len;
    void *ret;
    size_t ret_len;
    int aborted;        /* rpcool_ctx_fail ended the call with abort_code */
    int abort_code;
    int fault_sig;      /* a contained fault: its signal and address */
    void *fault_addr;
    uint64_t call_no;   /* w->calls of this call */
    size_t spent, budget; /* bytes the checked accessors read; budget: the caller's heap's size */
    int limit_hit;      /* RPCOOL_LIMIT_SIGNAL ended it */
    unsigned slot;      /* the call's slot and generation (a deferred reply needs them) */
    uint32_t gen;
    struct rpcool_deferred *dfr; /* rpcool_ctx_defer took the call out of the serving thread */
    unsigned wflags;    /* the call's flags as sent (RPCOOL__DISCARD) */
};

/* A deferred call's token (rpcool_ctx_defer, impl/rpcool/defer.h). */
struct rpcool_deferred {
    rpcool_ctx ctx;   /* the call's context, kept (guard NULL: no checked accessors) */
    uint32_t done;    /* the call was answered */
    uint32_t refs;    /* serving path + user */
    char *copy;       /* the argument's private copy (RPCOOL_COPY), owned now by the token */
    struct rpcool__blocks blk; /* the call's blocks where the transport records them here
                                  (shared memory: rpcool__shm_hold) */
    pthread_mutex_t lock; /* guards blk */
};

/* The RDMA transport (impl/rpcool/rdma.h, compiled in with RPCOOL_WITH_RDMA). */
struct rpcool__rconn;
struct rpcool__rsrv;
/* "rdma://HOST[:PORT]/NAME" or "rdma:NAME": the meta server (NULL: $KRCONN_META) and the name.
   Returns 1 for an RDMA name, 0 for another, or RPCOOL_E_BADNAME. */
static int rpcool__r_parse(const char *channel, char *where, size_t wlen, const char **name)
{
    if (strncmp(channel, "rdma:", 5)) return 0;
    const char *p = channel + 5;
    where[0] = '\0';
    if (!strncmp(p, "//", 2)) {
        p += 2;
        const char *sl = strchr(p, '/');
        if (!sl || sl == p || (size_t)(sl - p) >= wlen) return RPCOOL_E_BADNAME;
        memcpy(where, p, (size_t)(sl - p));
        where[sl - p] = '\0';
        p = sl + 1;
    }
    *name = p;
    return 1;
}

/* Each transport's tables, beside its code: shared memory's at >>shm, RDMA's at the end of
   impl/rpcool/rdma.h (>>r-tables). */
static const struct rpcool__client_tp *rpcool__shm_client_tp(void);
static const struct rpcool__server_tp *rpcool__shm_server_tp(void);
static const struct rpcool__client_tp *rpcool__p_client_tp(void); /* impl/rpcool/pod.h */
static const char *rpcool__p_device(const rpcool_conn_opts *o);
static const struct rpcool__server_tp *rpcool__p_server_tp(void);
#ifdef RPCOOL__RDMA /* impl/rpcool/rdma.h defines them */
static const struct rpcool__client_tp *rpcool__r_client_tp(void);
static const struct rpcool__server_tp *rpcool__r_server_tp(void);
#else /* not built in: connecting and opening say so; nothing else is ever reached */
static int rpcool__r_none_connect(rpcool_conn *c, const char *where, const char *name,
                                  const rpcool_conn_opts *o, unsigned connect_ms)
{
    (void)where, (void)name, (void)o, (void)connect_ms;
    rpcool__log(&c->log, RPCOOL_LOG_ERROR, "RDMA transport not built in: define "
                "RPCOOL_WITH_RDMA, have rdma-core's headers and link -libverbs");
    return RPCOOL_E_NOTSUP;
}
static int rpcool__r_none_open(rpcool_server *s, const char *how, const char *device,
                               uint64_t spin_ns)
{
    (void)how, (void)device, (void)spin_ns;
    rpcool__log(&s->log, RPCOOL_LOG_ERROR, "RDMA transport not built in: define "
                "RPCOOL_WITH_RDMA, have rdma-core's headers and link -libverbs");
    return RPCOOL_E_NOTSUP;
}
static int rpcool__r_none_start(rpcool_server *s) { (void)s; return 0; }
static void rpcool__r_none_stop(rpcool_server *s) { (void)s; }
static void rpcool__r_none_close(rpcool_server *s) { (void)s; }
static const struct rpcool__client_tp rpcool__r_none_client = {
    .name = "rdma", .flags = RPCOOL__TP_COPIES, .connect = rpcool__r_none_connect, .post = NULL,
    .wait = NULL, .poll = NULL, .gone = NULL, .drop_reply = NULL, .free = NULL,
    .disconnect = NULL, .cancel = NULL};
static const struct rpcool__server_tp rpcool__r_none_server = {
    .name = "rdma", .flags = RPCOOL__TP_COPIES, .open = rpcool__r_none_open,
    .start = rpcool__r_none_start, .stop = rpcool__r_none_stop, .close = rpcool__r_none_close,
    .conns = NULL, .alloc = NULL, .in_range = NULL, .heap = NULL, .peer = NULL,
    .conn_user = NULL, .cancelled = NULL, .drop = NULL, .hold = NULL, .reply = NULL};
static const struct rpcool__client_tp *rpcool__r_client_tp(void) { return &rpcool__r_none_client; }
static const struct rpcool__server_tp *rpcool__r_server_tp(void) { return &rpcool__r_none_server; }
#endif

/* >>errors - errors ---------------------------------------------------------------------------- */

#include "impl/errors.h"

RPCOOL_API const char *rpcool_strerror(int code)
{
    switch (code) {
#define RCP__ERROR_CASE(name, value, text) case name: return text;
#include "impl/errors.h" /* the codes of every rpcool header included before this point */
#undef RCP__ERROR_CASE
    default: return rcp__errtext(code, RCP__ERR_DECLARED);
    }
}

/* The handle rule (ERRORS, impl/handle.h): 0 for a handle open in this process, else its code.
   NULL is left to each function (most say RPCOOL_E_INVAL). */
static inline int rpcool__handle(const void *h)
{
    return rcp__handle_code(h, RPCOOL_E_BADHANDLE, RPCOOL_E_FORKED);
}
/* a close: 0 when this call took h out of the table (the caller frees it), else its code */
static inline int rpcool__handle_take(const void *h)
{
    return rcp__handle_take_code(h, RPCOOL_E_BADHANDLE, RPCOOL_E_FORKED);
}
#define RPCOOL__HCHECK(h) RCP__HRETURN(rpcool__handle(h))
#define RPCOOL__HCHECK_PTR(h) RCP__HRETURN_NULL(rpcool__handle(h))
#define RPCOOL__HCHECK_ZERO(h) RCP__HRETURN_ZERO(rpcool__handle(h))
#define RPCOOL__HCHECK_VOID(h) RCP__HRETURN_VOID(rpcool__handle(h))

/* >>liveness - liveness: OFD byte locks on the channel file ------------------------------------ */

/* One byte lock operation: cmd F_OFD_SETLK or F_OFD_GETLK, type F_WRLCK or F_UNLCK. */
static int rpcool__lock_op(int fd, off_t off, int cmd, short type, struct flock *fl)
{
    memset(fl, 0, sizeof *fl);
    fl->l_type = type;
    fl->l_whence = SEEK_SET;
    fl->l_start = off;
    fl->l_len = 1;
    return fcntl(fd, cmd, fl) ? -errno : 0;
}

static int rpcool__lock_try(int fd, off_t off)
{
    struct flock fl;
    return rpcool__lock_op(fd, off, F_OFD_SETLK, F_WRLCK, &fl);
}

/* 1 if another open file description holds the byte, 0 if free, or -errno. */
static int rpcool__lock_held(int fd, off_t off)
{
    struct flock fl;
    int r = rpcool__lock_op(fd, off, F_OFD_GETLK, F_WRLCK, &fl);
    return r ? r : fl.l_type != F_UNLCK;
}

/* Descriptors whose locks a forked child must drop, so a parent's death stays visible. */
static int rpcool__fds[256];
static pthread_mutex_t rpcool__fds_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t rpcool__fork_once = PTHREAD_ONCE_INIT;

/* A client process maps each channel once, whatever its number of connections to it (>>connect,
   rpcool__chmap_get). */
struct rpcool__chmap {
    uint64_t dev, ino;
    size_t len;
    void *m;
    unsigned refs;
    struct rpcool__chmap *next;
};
static struct rpcool__chmap *rpcool__chmaps;
static pthread_mutex_t rpcool__chmaps_lock = PTHREAD_MUTEX_INITIALIZER;

static void rpcool__atfork_child(void)
{
    for (unsigned i = 0; i < 256; i++)
        if (rpcool__fds[i] > 0) {
            close(rpcool__fds[i]);
            rpcool__fds[i] = 0;
        }
    pthread_mutex_init(&rpcool__fds_lock, NULL);
    rpcool__chmaps = NULL; /* not inherited (MADV_DONTFORK); the list's memory is left behind */
    pthread_mutex_init(&rpcool__chmaps_lock, NULL);
}
static void rpcool__fork_init(void) { pthread_atfork(NULL, NULL, rpcool__atfork_child); }

static void rpcool__fd_track(int fd, int add)
{
    pthread_once(&rpcool__fork_once, rpcool__fork_init);
    pthread_mutex_lock(&rpcool__fds_lock);
    for (unsigned i = 0; i < 256; i++)
        if (rpcool__fds[i] == (add ? 0 : fd)) {
            rpcool__fds[i] = add ? fd : 0;
            break;
        }
    pthread_mutex_unlock(&rpcool__fds_lock);
}

/* >>contain - fault containment ---------------------------------------------------------------- */

struct rpcool__guard {
    sigjmp_buf jb;
    volatile int contain; /* a SIGSEGV/SIGBUS in this thread jumps to jb */
    int sig;              /* the contained fault's signal and address */
    void *addr;
    rpcool_ctx *ctx;      /* a handler's own recovery point: its call (else NULL) */
    struct rpcool__guard *prev;
    int unwind;           /* C++: rpcool_ctx_fail throws rpcool__unwind to this guard */
};
#if defined(__cplusplus) && (defined(__cpp_exceptions) || defined(__EXCEPTIONS))
#define RPCOOL__UNWIND 1
struct rpcool__unwind { /* rpcool_ctx_fail in a C++ build: destructors run on the way out */
    int code;
};
#endif
static RCP__THREAD_LOCAL struct rpcool__guard *rpcool__cur;

/* A recovery point not armed yet (the caller's own sigsetjmp arms it, then sets contain):
   prev is the one it nests in, ctx the handler's call it belongs to (or NULL). */
static void rpcool__guard_init(struct rpcool__guard *g, struct rpcool__guard *prev,
                               rpcool_ctx *ctx)
{
    g->prev = prev;
    g->contain = 0;
    g->ctx = ctx;
    g->unwind = 0;
}
static struct sigaction rpcool__old_segv, rpcool__old_bus, rpcool__old_limit;
static pthread_once_t rpcool__sig_once = PTHREAD_ONCE_INIT;

static void rpcool__on_fault(int sig, siginfo_t *si, void *uc)
{
    struct rpcool__guard *g = rpcool__cur;
    if (g && g->contain) {
        g->contain = 0;
        g->sig = sig;
        g->addr = si ? si->si_addr : NULL;
        siglongjmp(g->jb, 1);
    }
    /* not ours: behave as if we had never been installed */
    struct sigaction *old = sig == SIGBUS ? &rpcool__old_bus : &rpcool__old_segv;
    if ((old->sa_flags & SA_SIGINFO) && old->sa_sigaction) {
        old->sa_sigaction(sig, si, uc);
    } else if (old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN) {
        old->sa_handler(sig);
    } else {
        signal(sig, SIG_DFL); /* returning re-runs the access, which now kills the process */
    }
}

/* RPCOOL_LIMIT_SIGNAL, sent by the watchdog to a serving thread whose sandboxed handler ran over
   its time limit: ends the handler if it still runs that call in its own code (not inside the
   library: a checked accessor or rpcool_ctx_alloc ends it there themselves). Else passed on. */
static void rpcool__on_limit(int sig, siginfo_t *si, void *uc)
{
    struct rpcool__guard *g = rpcool__cur;
    rpcool_ctx *ctx = g ? g->ctx : NULL;
    int e = errno;
    if (ctx && g->contain && si && si->si_code == SI_TKILL && si->si_pid == getpid() &&
        (ctx->flags & RPCOOL_SANDBOX) && ctx->w &&
        rcp__load(&ctx->w->expired) == ctx->call_no) {
        g->contain = 0;
        ctx->limit_hit = 1;
        siglongjmp(g->jb, 1);
    }
    if ((rpcool__old_limit.sa_flags & SA_SIGINFO) && rpcool__old_limit.sa_sigaction)
        rpcool__old_limit.sa_sigaction(sig, si, uc);
    else if (rpcool__old_limit.sa_handler != SIG_DFL && rpcool__old_limit.sa_handler != SIG_IGN)
        rpcool__old_limit.sa_handler(sig);
    errno = e;
}

/* SA_ONSTACK: a handler that exhausted its stack faults on the guard page; the signal can only
   be handled on the thread's alternate stack (rpcool__altstack). */
static void rpcool__sig_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = rpcool__on_fault;
    /* NODEFER: the mask stays right after siglongjmp */
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &rpcool__old_segv);
    sigaction(SIGBUS, &sa, &rpcool__old_bus);
    sa.sa_sigaction = rpcool__on_limit;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK | SA_RESTART;
    sigaction(RPCOOL_LIMIT_SIGNAL, &sa, &rpcool__old_limit);
}

/* Every thread that runs handlers gets an alternate signal stack (unless it has one), so that a
   handler that overflows its stack can be contained; it goes when the thread exits. */
static RCP__THREAD_LOCAL int rpcool__alt_done;
static pthread_key_t rpcool__alt_key;
static pthread_once_t rpcool__alt_once = PTHREAD_ONCE_INIT;

static void rpcool__alt_exit(void *m)
{
    stack_t off;
    memset(&off, 0, sizeof off);
    off.ss_flags = SS_DISABLE;
    sigaltstack(&off, NULL);
    munmap(m, RPCOOL__ALTSTACK);
}
static void rpcool__alt_init(void) { pthread_key_create(&rpcool__alt_key, rpcool__alt_exit); }

static void rpcool__altstack(void)
{
    stack_t cur, ss;
    if (rpcool__alt_done) return;
    rpcool__alt_done = 1;
    if (sigaltstack(NULL, &cur) == 0 && !(cur.ss_flags & SS_DISABLE)) return; /* has one */
    pthread_once(&rpcool__alt_once, rpcool__alt_init);
    void *m = mmap(NULL, RPCOOL__ALTSTACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (m == MAP_FAILED) return;
    memset(&ss, 0, sizeof ss);
    ss.ss_sp = m;
    ss.ss_size = RPCOOL__ALTSTACK;
    if (sigaltstack(&ss, NULL) || pthread_setspecific(rpcool__alt_key, m)) {
        ss.ss_flags = SS_DISABLE;
        sigaltstack(&ss, NULL);
        munmap(m, RPCOOL__ALTSTACK);
    }
}

/* After a fault was contained: make sure SIGSEGV and SIGBUS are not left blocked. Our handler is
   installed with SA_NODEFER and we siglongjmp without restoring the mask (a system call per
   call otherwise), but an interposed handler may not pass SA_NODEFER on: ThreadSanitizer
   installs its own and the kernel blocks the signal while it runs, so without this the
   second fault of a thread would kill the process. Only on the fault path. */
static void rpcool__fault_unblock(void)
{
    sigset_t m;
    sigemptyset(&m);
    sigaddset(&m, SIGSEGV);
    sigaddset(&m, SIGBUS);
    sigaddset(&m, RPCOOL_LIMIT_SIGNAL);
    pthread_sigmask(SIG_UNBLOCK, &m, NULL);
}

/* Run fn(arg) with faults contained; returns fn's result, or onfault after a SIGSEGV/SIGBUS. */
static int rpcool__guarded(int (*fn)(void *), void *arg, int onfault)
{
    struct rpcool__guard g;
    rpcool__guard_init(&g, rpcool__cur, NULL);
    if (sigsetjmp(g.jb, 0)) {
        rpcool__cur = g.prev;
        rpcool__fault_unblock();
        return onfault;
    }
    g.contain = 1;
    rpcool__cur = &g;
    int r = fn(arg);
    rpcool__cur = g.prev;
    return r;
}

/* Switch fault containment of this thread's innermost recovery point off (0) or back on around
   calls into shmheap: a fault inside shmheap_open/close/unlink must not jump out of them while
   they hold their process-wide locks. Returns the previous setting. */
static int rpcool__contain_set(int on)
{
    struct rpcool__guard *g = rpcool__cur;
    int old = g ? g->contain : 0;
    if (g) g->contain = on;
    return old;
}

/* CPU hints: a side that busy-waits yields its CPU only when the peer may need that CPU (it was
   seen polling or posting there); otherwise a yield (a system call, ~0.4 us on a VM) would only
   add latency. The masks are reset every reap period by the server, so stale bits fade. */
static unsigned rpcool__cpu_bit(void)
{
    int cpu = sched_getcpu(); /* vDSO/rseq: about a nanosecond */
    return cpu < 0 ? 0u : (unsigned)cpu & 63u;
}

static void rpcool__cpu_mark(uint64_t *mask, unsigned cpu)
{
    uint64_t bit = 1ull << cpu;
    if (!(rcp__load_relaxed(mask) & bit)) rcp__fetch_or(mask, bit); /* written once per period */
}

/* >>names - channel names ---------------------------------------------------------------------- */

static int rpcool__check_name(const char *n)
{
    size_t len = n ? strlen(n) : 0;
    if (len < 1 || len > RPCOOL__NAME_MAX) return RPCOOL_E_BADNAME;
    for (size_t i = 0; i < len; i++) {
        char ch = n[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '.' || ch == '_' || ch == '-'))
            return RPCOOL_E_BADNAME;
    }
    return 0;
}

static void rpcool__path(char *out, size_t n, const char *name)
{
    snprintf(out, n, "/dev/shm/rpcool.%s", name);
}

static size_t rpcool__chan_bytes(uint32_t max_conns)
{
    return RPCOOL__SLOTS_OFF + (size_t)max_conns * sizeof(struct rpcool__chan_slot);
}

/* >>server - server: open, handlers ------------------------------------------------------------ */

static void rpcool__sconn_release(rpcool_server *s, uint32_t i, int dead);
static void rpcool__cwaiting_drop(struct rpcool__chan_hdr *ch, struct rpcool__conn_hdr *hdr);
static void rpcool__slot_carve_put(rpcool_server *s, uint32_t i);
static void rpcool__hooks_set(rpcool_server *s, const rpcool_server_opts *o);
static int rpcool__peer_admit(rpcool_server *s, int sk, uint32_t claimed, rpcool_peer *pr,
                              void **cuser, int *hooked);
static int rpcool__peer_hook(rpcool_server *s, const rpcool_peer *pr, void **cuser, int *hooked);
static void rpcool__peer_left(rpcool_server *s, int *hooked, const rpcool_peer *pr, void *cuser,
                              int why);
static void rpcool__stats_answer(rpcool_server *s, int sk);

/* A stale slot: one whose client is gone (its lock byte is free) with no connection behind it
   (a client that wrote a slot by hand, or one that closed). It is freed; nothing is unlinked:
   connection heaps have no names, and what a slot names is not believed. */
static void rpcool__reclaim_stale(rpcool_server *s, uint32_t i)
{
    struct rpcool__chan_slot *cs = &s->cs[i];
    uint32_t st = rcp__load(&cs->state);
    if (st == RPCOOL__CS_FREE) return;
    int held = rpcool__lock_held(s->fd, 1 + (off_t)i);
    if (held != 0) return; /* a live client still uses it (or is finishing its close) */
    if (i >= s->max_conns || rcp__load(&s->conns[i].state) == RPCOOL__SC_FREE)
        rpcool__slot_carve_put(s, i); /* a dropped client's heap: unmapped by now */
    rcp__store(&cs->heap[0], '\0');
    rcp__store(&cs->state, (uint32_t)RPCOOL__CS_FREE);
    rcp__fetch_add(&cs->seq, 1u);
    rcp__futex_wake(&cs->seq, INT_MAX);
}

/* Write the rendezvous record (and cut the name file to its size). */
static int rpcool__rdv_write(rpcool_server *s)
{
    if (pwrite(s->name_fd, &s->rdv, sizeof s->rdv, 0) != (ssize_t)sizeof s->rdv)
        return errno ? -errno : -EIO;
    struct stat st;
    if (fstat(s->name_fd, &st) == 0 && st.st_size != (off_t)sizeof s->rdv &&
        ftruncate(s->name_fd, sizeof s->rdv))
        return -errno;
    return 0;
}

/* Put the rendezvous record back if a client truncated or overwrote the name file. */
static void rpcool__rdv_restore(rpcool_server *s)
{
    struct rpcool__rdv now;
    struct stat st;
    if (pread(s->name_fd, &now, sizeof now, 0) == (ssize_t)sizeof now &&
        !memcmp(&now, &s->rdv, sizeof now) &&
        fstat(s->name_fd, &st) == 0 && st.st_size == (off_t)sizeof now)
        return;
    rcp__fetch_add(&s->st.bad_entries, 1u);
    rpcool__log(&s->log, RPCOOL_LOG_WARN, "%s: the channel's name file was changed: restored",
                s->name);
    rpcool__rdv_write(s);
}

/* Make the channel: a memfd sealed against shrinking and growing (no client can truncate it),
   with our lock on byte 0; then publish it in the name file, whose lock we hold. An earlier
   record (a dead server's) gives the epoch to follow. */
static int rpcool__chan_init(rpcool_server *s)
{
    struct rpcool__rdv old;
    struct stat st;
    char mname[RPCOOL__NAME_MAX + 16];
    uint32_t old_epoch = 0;
    void *m;
    int fd, r;
    if (pread(s->name_fd, &old, sizeof old, 0) == (ssize_t)sizeof old &&
        old.magic == RPCOOL__RDV_MAGIC)
        old_epoch = old.epoch;
    s->map_len = rpcool__chan_bytes(s->max_conns);
    snprintf(mname, sizeof mname, "rpcool.%s", s->name);
    if ((fd = memfd_create(mname, MFD_CLOEXEC | MFD_ALLOW_SEALING)) < 0) return -errno;
    if (ftruncate(fd, (off_t)s->map_len) ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) || fstat(fd, &st)) {
        r = -errno;
        close(fd);
        return r;
    }
    if ((r = rpcool__lock_try(fd, 0))) {
        close(fd);
        return r;
    }
    m = mmap(NULL, s->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        r = -errno;
        close(fd);
        return r;
    }
    /* a mapping holds the open file description, and with it our lock byte: a forked child
       must not inherit it, or our death would go unseen while the child lives */
    madvise(m, s->map_len, MADV_DONTFORK);
    s->fd = fd;
    s->ch = (struct rpcool__chan_hdr *)m;
    s->cs = (struct rpcool__chan_slot *)((char *)m + RPCOOL__SLOTS_OFF);
    s->set.rdy = rpcool__rdy(s->ch);
    s->set.rdy_top = rpcool__rdy_top(s->ch);
    s->set.cs = s->cs;
    s->epoch = old_epoch + 1;
    s->ch->version = RPCOOL__VERSION;
    s->ch->max_conns = s->max_conns;
    s->ch->safety = s->safety;
    s->ch->server_pid = (uint32_t)getpid();
    rcp__store(&s->ch->epoch, s->epoch);
    rcp__store(&s->ch->state, (uint32_t)RPCOOL__CH_OPEN);
    rcp__store(&s->ch->magic, RPCOOL__CH_MAGIC);
    s->seen_pending = rcp__load(&s->ch->pending) - 1; /* look at the slots once */
    memset(&s->rdv, 0, sizeof s->rdv);
    s->rdv.magic = RPCOOL__RDV_MAGIC;
    s->rdv.version = RPCOOL__VERSION;
    s->rdv.server_pid = (uint32_t)getpid();
    s->rdv.fd = fd;
    s->rdv.max_conns = s->max_conns;
    s->rdv.epoch = s->epoch;
    s->rdv.ino = (uint64_t)st.st_ino;
    if ((r = rpcool__rdv_write(s))) {
        munmap(m, s->map_len);
        close(fd);
        s->fd = -1;
    }
    return r;
}

static void rpcool__arenas_free(rpcool_server *s);

static void rpcool__server_free(rpcool_server *s)
{
    pthread_mutex_destroy(&s->hk_lock);
    pthread_mutex_destroy(&s->wk_lock);
    pthread_mutex_destroy(&s->pool_lock);
    rpcool__arenas_free(s);
    pthread_mutex_destroy(&s->ar_lock);
    pthread_cond_destroy(&s->pool_cv);
    for (unsigned i = 0; s->handlers && i < RPCOOL_MAX_HANDLERS; i++) rpcool__free(s->handlers[i]);
    while (s->retired) {
        struct rpcool__handler_ent *e = s->retired;
        s->retired = e->next_retired;
        rpcool__free(e);
    }
    rpcool__free(s->handlers);
    rpcool__free(s->conns);
    if (s->dep >= 0) close(s->dep);
    rpcool__free(s);
}

/* Memory protection keys for SANDBOX. The keys are taken before any thread serves (from
   rpcool_server_open or rpcool_server_add_handler asking for SANDBOX), so every serving thread can
   enable them all on entry: a new key is usable only by the thread that allocated it and by threads
   it creates later. Returns the number of keys. */
static int rpcool__pkeys_init(rpcool_server *s)
{
    pthread_mutex_lock(&s->hk_lock);
    if (s->npkeys == 0 && !s->threads && !s->workers && shmheap_pkey_supported())
        while (s->npkeys < 15) {
            int k = shmheap_pkey_alloc(0);
            if (k < 0) break;
            s->pkeys[s->npkeys++] = k;
        }
    int n = s->npkeys;
    pthread_mutex_unlock(&s->hk_lock);
    return n;
}

/* One key per connection heap (round robin), header included. Not for a heap this process
   also has open as a client: its threads could not touch their own heap any more. */
static void rpcool__pkey_attach(rpcool_server *s, struct rpcool__sconn *sc, uint32_t i)
{
    sc->pkey = -1;
    if (s->npkeys == 0 || shmheap_opens(sc->heap) > 1) return;
    int k = s->pkeys[i % (uint32_t)s->npkeys];
    if (shmheap_pkey_protect(sc->heap, shmheap_base(sc->heap), shmheap_size(sc->heap), k) == 0)
        sc->pkey = k;
}

/* The front door. A client connects to the socket /dev/shm/rpcool.NAME.sock (mode as the name
   file) and sends a request; the acceptor thread answers with a connection slot and two
   descriptors (SCM_RIGHTS): a new open of the channel memfd whose lock byte for that slot it
   has already taken, and a connection heap it made ahead of time. Nobody else ever holds
   either: the heap has no name, and the server is not dumpable (see LIMITS). */
#define RPCOOL__CREQ_MAGIC 0x3151455243434f52ull /* "RCOCREQ1" */
#define RPCOOL__CREP_MAGIC 0x3150455243434f52ull /* "RCOCREP1" */
#define RPCOOL__SREQ_MAGIC 0x3154415453434f52ull /* "ROCSTAT1": a stats request (>>ops) */
#define RPCOOL__REQ_WAIT_MS 100 /* how long the acceptor waits for a connected client's request */
struct rpcool__creq {
    uint64_t magic;
    uint32_t version, pad;
    uint64_t heap_size; /* 0 = the server's choice */
    uint32_t pid;       /* the client's word (for the log and the slot; not trusted) */
    uint32_t pad2;
};
struct rpcool__crep {
    uint64_t magic;
    uint32_t version;
    int32_t status;     /* 0: two descriptors come with it (channel, heap) */
    uint32_t slot, epoch, max_conns, pad;
    uint64_t hdr;       /* the connection header's address */
    uint64_t pad2[2];
};
RCP__STATIC_ASSERT(sizeof(struct rpcool__creq) == 32 && sizeof(struct rpcool__crep) == 56,
                   "front door messages");

static void rpcool__sock_path(char *out, size_t n, const char *name)
{
    snprintf(out, n, "/dev/shm/rpcool.%s.sock", name);
}

/* A place for a heap of size bytes: a carve freed before (the oldest of that size), else room
   in an arena of heaps of that size, else a new one (each twice the last of that size, from
   RPCOOL__ARENA_HEAPS heaps or RPCOOL__ARENA_FIRST bytes, whichever is less, to
   RPCOOL__ARENA_MAX). */
static int rpcool__carve_get(rpcool_server *s, size_t size, struct rpcool__carve **out)
{
    struct rpcool__carve *cv = NULL, *prev = NULL;
    struct rpcool__arena *a = NULL;
    int r = 0;
    pthread_mutex_lock(&s->ar_lock);
    for (cv = s->cv_free; cv && cv->size != size; cv = cv->next) prev = cv;
    if (cv) {
        *(prev ? &prev->next : &s->cv_free) = cv->next;
        if (s->cv_tail == cv) s->cv_tail = prev;
        goto out;
    }
    for (a = s->arenas; a && a->hsize != size; a = a->next) {}
    if (!a || shmheap_resv_size(a->r) - a->top < size) {
        size_t want = a ? shmheap_resv_size(a->r) * 2 : size * RPCOOL__ARENA_HEAPS;
        if (!a && want > RPCOOL__ARENA_FIRST) want = RPCOOL__ARENA_FIRST;
        if (want > RPCOOL__ARENA_MAX) want = RPCOOL__ARENA_MAX;
        if (want < size) want = size;
        struct rpcool__arena *na = (struct rpcool__arena *)rpcool__calloc(1, sizeof *na);
        if (!na) {
            r = -ENOMEM;
            goto out;
        }
        if ((r = shmheap_resv_create(want, &s->hopts, &na->r))) {
            rpcool__free(na);
            goto out;
        }
        na->hsize = size;
        na->next = s->arenas;
        s->arenas = a = na;
    }
    if (!(cv = (struct rpcool__carve *)rpcool__calloc(1, sizeof *cv))) {
        r = -ENOMEM;
        goto out;
    }
    cv->a = a;
    cv->off = a->top;
    cv->size = size;
    a->top += size;
out:
    pthread_mutex_unlock(&s->ar_lock);
    *out = r ? NULL : cv;
    return r;
}

/* A carve nothing maps any more in this process, and no client of ours (its slot is free). */
static void rpcool__carve_put(rpcool_server *s, struct rpcool__carve *cv)
{
    if (!cv) return;
    pthread_mutex_lock(&s->ar_lock);
    cv->next = NULL;
    if (s->cv_tail) s->cv_tail->next = cv;
    else s->cv_free = cv;
    s->cv_tail = cv;
    pthread_mutex_unlock(&s->ar_lock);
}

/* Slot i is free: its heap's carve may be reused. */
static void rpcool__slot_carve_put(rpcool_server *s, uint32_t i)
{
    if (!s->carves || i >= s->max_conns) return;
    struct rpcool__carve *cv = rcp__exchange(&s->carves[i], (struct rpcool__carve *)NULL);
    rpcool__carve_put(s, cv);
}

/* At close: the arenas' own holds go (heaps clients still map keep theirs). */
static void rpcool__arenas_free(rpcool_server *s)
{
    for (uint32_t i = 0; s->carves && i < s->max_conns; i++) rpcool__free(s->carves[i]);
    while (s->cv_free) {
        struct rpcool__carve *cv = s->cv_free;
        s->cv_free = cv->next;
        rpcool__free(cv);
    }
    while (s->arenas) {
        struct rpcool__arena *a = s->arenas;
        s->arenas = a->next;
        shmheap_resv_destroy(a->r);
        rpcool__free(a);
    }
    rpcool__free(s->carves);
    s->carves = NULL;
}

static void rpcool__prem_free(rpcool_server *s, struct rpcool__prem *pm)
{
    if (pm->h) shmheap_close(pm->h);
    rpcool__carve_put(s, pm->cv); /* not given to a client (else the slot has it) */
    rpcool__fd_track(pm->cfd, 0);
    rpcool__fd_track(pm->ofd, 0);
    rpcool__fd_track(pm->pfd, 0);
    if (pm->hfd >= 0) close(pm->hfd);
    if (pm->cfd >= 0) close(pm->cfd);
    if (pm->ofd >= 0) close(pm->ofd);
    if (pm->pfd >= 0) close(pm->pfd);
    memset(pm, 0, sizeof *pm);
    pm->hfd = pm->cfd = pm->ofd = pm->pfd = -1;
}

/* A new connection heap's connection header (its magic is written when it is given away). */
static int rpcool__hdr_make(shmheap *h, struct rpcool__conn_hdr **out)
{
    struct rpcool__conn_hdr *hd =
        (struct rpcool__conn_hdr *)shmheap_aligned_alloc(h, 128, sizeof *hd);
    if (!hd) return SHMHEAP_E_FULL;
    memset(hd, 0, sizeof *hd);
    hd->version = RPCOOL__VERSION;
    hd->nslots = RPCOOL__NSLOTS;
    *out = hd;
    return shmheap_root_set(h, RPCOOL__ROOT, hd);
}

/* Make a connection heap of size bytes ahead of its connect. */
static int rpcool__prem_make(rpcool_server *s, size_t size, struct rpcool__prem *pm)
{
    char nm[RPCOOL__NAME_MAX + 16];
    shmheap_opts ho = s->hopts;
    int r;
    memset(pm, 0, sizeof *pm);
    pm->cfd = pm->ofd = pm->pfd = -1;
    pm->size = size;
    snprintf(nm, sizeof nm, "rpcool-%s", s->name);
    if ((pm->hfd = memfd_create(nm, MFD_CLOEXEC | MFD_ALLOW_SEALING)) < 0) return -errno;
    ho.size = size;
    ho.addr = 0;
    /* in a carve of an arena; a place this process still maps (a client of its own that is
       still letting go of a heap) is set aside and freed again after */
    struct rpcool__carve *busy[RPCOOL__CARVE_TRIES];
    int nbusy = 0;
    for (int k = 0; k < RPCOOL__CARVE_TRIES; k++) {
        if ((r = rpcool__carve_get(s, size, &pm->cv))) break;
        r = shmheap_create_fd_in(pm->cv->a->r, pm->cv->off, pm->hfd, &ho, &pm->h);
        if (r != SHMHEAP_E_ADDRINUSE) break;
        busy[nbusy++] = pm->cv;
        pm->cv = NULL;
    }
    while (nbusy) rpcool__carve_put(s, busy[--nbusy]);
    if (r) goto fail;
    /* nobody, its client included, can truncate it under the server */
    if (fcntl(pm->hfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) {
        r = -errno;
        goto fail;
    }
    if ((r = rpcool__hdr_make(pm->h, &pm->hdr))) goto fail;
    char proc[48]; /* new open file descriptions, the client's own: its byte locks */
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", s->fd);
    if ((pm->cfd = open(proc, O_RDWR | O_CLOEXEC)) < 0) {
        r = -errno;
        goto fail;
    }
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", pm->hfd);
    if ((pm->ofd = open(proc, O_RDWR | O_CLOEXEC)) < 0) {
        r = -errno;
        goto fail;
    }
    if ((pm->pfd = shmheap_resv_hold(pm->cv->a->r)) < 0) { /* the arena's one lock */
        r = pm->pfd;
        goto fail;
    }
    /* a child forked meanwhile must not keep the client's descriptions (its lock byte) */
    rpcool__fd_track(pm->cfd, 1);
    rpcool__fd_track(pm->ofd, 1);
    rpcool__fd_track(pm->pfd, 1);
    return 0;
fail:
    rpcool__prem_free(s, pm);
    return r;
}

/* Make one more heap of the size last asked for if the pool lacks one: 1 if it made one, 0
   if the pool is full (or being stopped) or making failed. Called with pool_lock held; the
   heap is made without it, so the acceptor can take from the pool meanwhile. */
static int rpcool__pool_fill_one(rpcool_server *s)
{
    unsigned have = 0;
    if (!s->last_size) return 0; /* no client of this pod has asked yet */
    for (unsigned k = 0; k < s->npool; k++) have += s->pool[k].size == s->last_size;
    if (!have && s->npool == s->prealloc && s->npool) { /* all of another size: one goes */
        struct rpcool__prem old = s->pool[0];
        s->pool[0] = s->pool[--s->npool];
        rcp__store(&s->st.ready, s->npool);
        pthread_mutex_unlock(&s->pool_lock);
        rpcool__prem_free(s, &old);
        pthread_mutex_lock(&s->pool_lock);
    }
    if (s->npool >= s->prealloc || rcp__load(&s->acc_stop)) return 0;
    struct rpcool__prem pm;
    size_t size = s->last_size;
    pthread_mutex_unlock(&s->pool_lock);
    int r = rpcool__prem_make(s, size, &pm);
    pthread_mutex_lock(&s->pool_lock);
    if (r) return 0;
    if (s->npool >= s->prealloc || rcp__load(&s->acc_stop)) { /* filled meanwhile */
        pthread_mutex_unlock(&s->pool_lock);
        rpcool__prem_free(s, &pm);
        pthread_mutex_lock(&s->pool_lock);
        return 0;
    }
    s->pool[s->npool++] = pm;
    rcp__store(&s->st.ready, s->npool);
    return 1;
}

/* The maker: keeps the pool full, at a lower priority than the rest of the server (nice +5),
   so that answering a connect or serving a call never waits for a heap being made. It waits
   for room when the pool is full; after a failure (a full pod, say) it waits for the next
   connect, whose own make then reports the error: it never retries in a loop. */
static void *rpcool__maker_main(void *p)
{
    rpcool_server *s = (rpcool_server *)p;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 5); /* a hint only */
    pthread_mutex_lock(&s->pool_lock);
    while (!rcp__load(&s->acc_stop)) {
        if (rpcool__pool_fill_one(s)) continue;
        if (!rcp__load(&s->acc_stop)) pthread_cond_wait(&s->pool_cv, &s->pool_lock);
    }
    pthread_mutex_unlock(&s->pool_lock);
    return NULL;
}

/* Give the made-ahead heap pm to a client (peer pid, 0 if unknown): a free slot whose lock
   byte we take through pm->cfd (the descriptor the client gets, so the lock is the client's
   from the start and goes when it dies, even before it has received it), then the connection
   is active for the serving threads. Under hk_lock. */
static int rpcool__grant_locked(rpcool_server *s, struct rpcool__prem *pm, const rpcool_peer *pr,
                                void *cuser, int hooked, int *pidfd, uint32_t *slot)
{
    uint32_t pid = (uint32_t)pr->pid;
    for (uint32_t i = 0; i < s->max_conns; i++) {
        struct rpcool__chan_slot *cs = &s->cs[i];
        struct rpcool__sconn *sc = &s->conns[i];
        uint32_t exp = RPCOOL__CS_FREE;
        if (rcp__load(&cs->state) != RPCOOL__CS_FREE ||
            rcp__load(&sc->state) != RPCOOL__SC_FREE || rpcool__lock_try(pm->cfd, 1 + (off_t)i))
            continue;
        if (!rcp__cas(&cs->state, &exp, (uint32_t)RPCOOL__CS_CLAIMED)) { /* a client wrote it */
            struct flock fl;
            rpcool__lock_op(pm->cfd, 1 + (off_t)i, F_OFD_SETLK, F_UNLCK, &fl);
            continue;
        }
        pm->hdr->chan_slot = i;
        pm->hdr->epoch = s->epoch;
        rcp__store(&pm->hdr->magic, RPCOOL__CONN_MAGIC);
        sc->heap = pm->h;
        sc->hdr = pm->hdr;
        sc->dead = 0;
        sc->rot = 0;
        sc->idle = 0;
        sc->logged = 0;
        sc->pid = pid;
        sc->peer = *pr;
        sc->peer.slot = i;
        sc->cuser = cuser;
        sc->hooked = hooked;
        sc->size = shmheap_size(pm->h);
        snprintf(sc->heap_name, sizeof sc->heap_name, "%.100s", shmheap_name(pm->h));
        sc->pkey = -1;
        if (pid != (uint32_t)getpid()) rpcool__pkey_attach(s, sc, i); /* not our own client */
        /* its death is an event of the acceptor's epoll (one shot), else its lock is polled */
        struct epoll_event ev;
        memset(&ev, 0, sizeof ev);
        ev.events = EPOLLIN | EPOLLONESHOT;
        ev.data.u32 = i;
        sc->pidfd = -1;
        rcp__store(&sc->suspect, 0u);
        if (*pidfd >= 0 && s->dep >= 0 && !epoll_ctl(s->dep, EPOLL_CTL_ADD, *pidfd, &ev)) {
            sc->pidfd = *pidfd;
            *pidfd = -1;
        } else {
            rcp__fetch_add(&s->nopid, 1u);
        }
        rcp__store(&sc->condemned, 0u);
        for (unsigned k = 0; k < RPCOOL__NSLOTS; k++) rcp__store_relaxed(&sc->claimed[k], ~0u);
        /* seq_cst: a pass that clears slot i's ready bit, then finds it not active, is ordered
           before this store, so the client's first post finds its bit clear (rpcool__visit) */
        __atomic_store_n(&sc->state, (uint32_t)RPCOOL__SC_ACTIVE, __ATOMIC_SEQ_CST);
        if (i + 1 > rcp__load_relaxed(&s->nscan)) rcp__store(&s->nscan, i + 1);
        rcp__fetch_add(&s->st.accepted, 1u);
        cs->client_pid = pid;
        cs->epoch = s->epoch;
        cs->status = 0;
        cs->hdr = (uint64_t)(uintptr_t)pm->hdr;
        snprintf(cs->heap, sizeof cs->heap, "%s", sc->heap_name);
        rcp__store(&cs->state, (uint32_t)RPCOOL__CS_ACTIVE);
        rcp__fetch_add(&cs->seq, 1u);
        pm->h = NULL; /* the connection's now */
        rcp__store(&s->carves[i], pm->cv); /* its place, until the slot is free again */
        pm->cv = NULL;
        *slot = i;
        return 0;
    }
    return RPCOOL_E_NOSLOT;
}

/* mh for one message, iov, with the control buffer ctl of n bytes (zeroed), or none (ctl NULL):
   the connect's answer and its descriptors (SCM_RIGHTS), on both sides of the socket. */
static void rpcool__msg_init(struct msghdr *mh, struct iovec *iov, char *ctl, size_t n)
{
    memset(mh, 0, sizeof *mh);
    mh->msg_iov = iov;
    mh->msg_iovlen = 1;
    if (!ctl) return;
    memset(ctl, 0, n);
    mh->msg_control = ctl;
    mh->msg_controllen = n;
}

static void rpcool__housekeep(rpcool_server *s, int force, uint64_t now);
static void rpcool__pkeys(rpcool_server *s, int mine, int all);

/* A pidfd of the process at the other end of socket sk: the kernel's own (SO_PEERPIDFD, no
   pid reuse race, in any pid namespace), else pidfd_open of its pid where we see it; or -1. */
static int rpcool__peer_pidfd(int sk, int pid)
{
    int fd = -1;
    socklen_t n = sizeof fd;
    if (!getsockopt(sk, SOL_SOCKET, RPCOOL__SO_PEERPIDFD, &fd, &n) && fd >= 0) return fd;
    if (pid <= 0) return -1;
    fd = (int)syscall(RPCOOL__SYS_PIDFD_OPEN, pid, 0);
    if (fd >= 0) (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
    return fd < 0 ? -1 : fd;
}

/* Answer one connected client whose request (n bytes of rq; n < 0: none came in time) was
   read: a heap of the size it asks for (from the pool, else made now) and a slot, or an
   error. The descriptors we sent are closed here: from then on only the client holds them. */
static void rpcool__front_answer(rpcool_server *s, int sk, const struct rpcool__creq *req,
                                 ssize_t n)
{
    struct rpcool__creq rq;
    struct rpcool__crep rp;
    struct rpcool__prem pm;
    rpcool_peer peer;
    void *cuser = NULL;
    size_t want;
    int r = 0, hooked = 0, pidfd = -1;
    if (n == (ssize_t)sizeof rq && req->magic == RPCOOL__SREQ_MAGIC) {
        rpcool__stats_answer(s, sk);
        return;
    }
    memset(&rp, 0, sizeof rp);
    memset(&pm, 0, sizeof pm);
    memcpy(&rq, req, sizeof rq);
    pm.hfd = pm.cfd = pm.ofd = pm.pfd = -1;
    rp.magic = RPCOOL__CREP_MAGIC;
    rp.version = RPCOOL__VERSION;
    if (n != (ssize_t)sizeof rq ||
        rq.magic != RPCOOL__CREQ_MAGIC || rq.version != RPCOOL__VERSION) {
        rcp__fetch_add(&s->st.bad_entries, 1u);
        r = RPCOOL_E_PROTO;
        goto answer;
    }
    want = rq.heap_size ? (size_t)rq.heap_size : RPCOOL_DEFAULT_HEAP_SIZE;
    if (rq.heap_size > s->max_heap) { /* a few such heaps would fill the pod's window */
        rpcool__log(&s->log, RPCOOL_LOG_WARN, "%s: pid %u asked for a heap of %llu bytes: "
                    "over max_heap_size (%zu)", s->name, (unsigned)rq.pid,
                    (unsigned long long)rq.heap_size, s->max_heap);
        r = RPCOOL_E_HEAPSIZE;
        goto answer;
    }
    /* who it is (the kernel's word: the pid for the log and the slot), and on_connect */
    if ((r = rpcool__peer_admit(s, sk, rq.pid, &peer, &cuser, &hooked))) goto answer;
    rq.pid = (uint32_t)peer.pid;
    want = (want + ((size_t)2 << 20) - 1) & ~(((size_t)2 << 20) - 1); /* as shmheap rounds */
    pthread_mutex_lock(&s->pool_lock);
    s->last_size = want;
    for (unsigned k = 0; k < s->npool && pm.hfd < 0; k++)
        if (s->pool[k].size == want) {
            pm = s->pool[k];
            s->pool[k] = s->pool[--s->npool];
            rcp__store(&s->st.ready, s->npool);
        }
    pthread_cond_signal(&s->pool_cv); /* room, or a new size: the maker makes one */
    pthread_mutex_unlock(&s->pool_lock);
    if (pm.hfd < 0 && (r = rpcool__prem_make(s, want, &pm))) goto answer;
    pidfd = rpcool__peer_pidfd(sk, (int)peer.pid);
    for (int k = 0;; k++) {
        pthread_mutex_lock(&s->hk_lock);
        r = rpcool__grant_locked(s, &pm, &peer, cuser, hooked, &pidfd, &rp.slot);
        pthread_mutex_unlock(&s->hk_lock);
        if (r != RPCOOL_E_NOSLOT || k == RPCOOL__NOSLOT_TRIES) break;
        /* every slot taken: reap the clients that died since (a short-lived one that exited
           without rpcool_disconnect frees its slot here, not reap_ms later) */
        if (s->npkeys) rpcool__pkeys(s, -1, 1);
        rpcool__housekeep(s, 1, 0);
        if (k) usleep(1000);
    }
    if (pidfd >= 0) close(pidfd);
    if (r) goto answer;
    rp.epoch = s->epoch;
    rp.max_conns = s->max_conns;
    rp.hdr = s->cs[rp.slot].hdr;
    rpcool__log(&s->log, RPCOOL_LOG_INFO, "%s: slot %u to pid %d (heap %s)", s->name, rp.slot,
                (int)rq.pid, s->conns[rp.slot].heap_name);
answer:
    if (r) rpcool__peer_left(s, &hooked, &peer, cuser, r); /* accepted, then no heap or slot */
    rp.status = r;
    {
        struct iovec iov = {&rp, sizeof rp};
        union {
            struct cmsghdr h;
            char b[CMSG_SPACE(3 * sizeof(int))];
        } cm;
        struct msghdr mh;
        rpcool__msg_init(&mh, &iov, r ? NULL : cm.b, sizeof cm.b);
        if (!r) {
            int fds[3] = {pm.cfd, pm.ofd, pm.pfd};
            struct cmsghdr *ch = CMSG_FIRSTHDR(&mh);
            ch->cmsg_level = SOL_SOCKET;
            ch->cmsg_type = SCM_RIGHTS;
            ch->cmsg_len = CMSG_LEN(sizeof fds);
            memcpy(CMSG_DATA(ch), fds, sizeof fds);
        }
        /* a client gone by now: its slot's lock goes with our copy below, and reaping
           reclaims the connection as a dead client's */
        if (sendmsg(sk, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
            rpcool__log(&s->log, RPCOOL_LOG_INFO, "%s: a client left inside connect", s->name);
    }
    rpcool__prem_free(s, &pm); /* after a grant: our copies of the descriptors only */
}

/* The acceptor: never blocks on one client. Connected clients whose request has not come yet
   wait in a set (RPCOOL__ACC_WAITING at most; when full, the one waiting longest is refused),
   each until its own deadline (RPCOOL__REQ_WAIT_MS); one poll covers the listening socket, the
   waiting clients and the stop event. The maker thread refills the pool meanwhile. */
#define RPCOOL__ACC_WAITING 32
struct rpcool__acc_wait {
    int fd;
    uint64_t deadline;
};

static void rpcool__acc_drop(struct rpcool__acc_wait *w, unsigned *nw, unsigned k)
{
    close(w[k].fd);
    w[k] = w[--*nw];
}

/* Read a client's request if it is there: 1 and answered (socket closed), 0 not yet. */
static int rpcool__acc_try(rpcool_server *s, int sk, int expired)
{
    struct rpcool__creq rq;
    memset(&rq, 0, sizeof rq);
    ssize_t n = recv(sk, &rq, sizeof rq, MSG_DONTWAIT | MSG_TRUNC);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) && !expired)
        return 0;
    rpcool__front_answer(s, sk, &rq, n);
    return 1;
}

/* The watchdog, every reap_ms (every RPCOOL__WATCH_MS when a time limit is set) from the
   acceptor thread, and from rpcool_server_close: dead clients are found and reaped even while
   every serving thread runs a long handler; a handler over its time limit is marked (its
   checked accessors end it), and a sandboxed one that goes on is sent RPCOOL_LIMIT_SIGNAL.
   all: every handler is over its limit (close). */
static void rpcool__watch(rpcool_server *s, uint64_t now, int all)
{
    if (s->npkeys) rpcool__pkeys(s, -1, 1); /* reaping touches connection heaps */
    rpcool__housekeep(s, 0, now);
    if (!rcp__load_relaxed(&s->any_limit) && !all) return;
    pthread_mutex_lock(&s->wk_lock);
    for (struct rpcool__worker *w = s->workers; w; w = w->next) {
        uint64_t calls = rcp__load_relaxed(&w->calls);
        uint32_t hl = rcp__load_relaxed(&w->hlimit);
        if (!(hl & RPCOOL__HL_RUN) || calls != w->seen_calls || !w->seen_since) {
            w->seen_calls = calls; /* a new call (or none): its time starts now */
            w->seen_since = (hl & RPCOOL__HL_RUN) ? now : 0;
            continue;
        }
        uint64_t ms = hl & RPCOOL__HL_MS;
        if (!all && (!ms || now - w->seen_since < ms * 1000000u)) continue;
        if (rcp__load_relaxed(&w->expired) != calls) {
            rcp__store(&w->expired, calls); /* its checked accessors end it now */
            w->expired_at = now;
            rcp__fetch_add(&s->st.over_limit, 1u);
        }
        if ((hl & RPCOOL__HL_SBX) && (all || now - w->expired_at >= RPCOOL__ABANDON_NS))
            pthread_kill(w->thread, RPCOOL_LIMIT_SIGNAL);
    }
    pthread_mutex_unlock(&s->wk_lock);
}

/* Clients whose process ended (their pidfds fired, once each): housekeeping asks their lock
   bytes now and reaps them. */
static void rpcool__acc_deaths(rpcool_server *s)
{
    struct epoll_event ev[64];
    int n = epoll_wait(s->dep, ev, 64, 0);
    for (int k = 0; k < n; k++)
        if (ev[k].data.u32 < s->max_conns) rcp__store(&s->conns[ev[k].data.u32].suspect, 1u);
    if (n <= 0) return;
    rcp__fetch_add(&s->deaths, 1u);
    if (s->npkeys) rpcool__pkeys(s, -1, 1); /* reaping touches connection heaps */
    rpcool__housekeep(s, 0, 0);
}

static void *rpcool__acceptor_main(void *p)
{
    rpcool_server *s = (rpcool_server *)p;
    struct rpcool__acc_wait w[RPCOOL__ACC_WAITING];
    struct pollfd pf[RPCOOL__ACC_WAITING + 3];
    unsigned nw = 0;
    uint64_t last_watch = rcp__now_ns();
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL); /* the program's signals go to its own threads */
    while (!rcp__load(&s->acc_stop)) {
        uint64_t now = rcp__now_ns(), next = UINT64_MAX;
        pf[0].fd = s->lfd;
        pf[0].events = POLLIN;
        pf[1].fd = s->acc_ev;
        pf[1].events = POLLIN;
        pf[2].fd = s->dep; /* the clients' pidfds: a death is an event */
        pf[2].events = POLLIN;
        for (unsigned k = 0; k < nw; k++) {
            pf[3 + k].fd = w[k].fd;
            pf[3 + k].events = POLLIN;
            if (w[k].deadline < next) next = w[k].deadline;
        }
        /* the watchdog's rounds: time limits every RPCOOL__WATCH_MS when there are any; reaping
           every reap_ms while a death can only be polled (a client without a pidfd) or a
           connection waits to be unmapped; else a quiet round (the channel's files checked) */
        unsigned ms = rcp__load_relaxed(&s->any_limit) ? RPCOOL__WATCH_MS : s->reap_ms;
        if (!rcp__load_relaxed(&s->any_limit) && !rcp__load_relaxed(&s->nopid) &&
            !rcp__load_relaxed(&s->hk_due) &&
            rcp__load(&s->deaths) == rcp__load_relaxed(&s->seen_deaths))
            ms = RPCOOL__QUIET_MS > s->reap_ms ? RPCOOL__QUIET_MS : s->reap_ms;
        else if (rcp__load(&s->deaths) != rcp__load_relaxed(&s->seen_deaths))
            ms = 1; /* a death not handled yet (housekeeping was busy): soon */
        uint64_t tick = (uint64_t)ms * 1000000u;
        if (now - last_watch >= tick) {
            rpcool__watch(s, now, 0);
            last_watch = now;
        }
        if (last_watch + tick < next) next = last_watch + tick;
        int tmo = next > now ? (int)((next - now) / 1000000u) + 1 : 0;
        int pr = poll(pf, 3 + nw, tmo);
        if (pr < 0) {
            if (errno != EINTR) usleep(1000);
            continue;
        }
        now = rcp__now_ns();
        if (pf[2].revents & POLLIN) rpcool__acc_deaths(s);
        for (unsigned k = nw; k-- > 0;) /* answered, or out of time (a refusal) */
            if (((pf[3 + k].revents & (POLLIN | POLLHUP | POLLERR)) || w[k].deadline <= now) &&
                rpcool__acc_try(s, w[k].fd, 1))
                rpcool__acc_drop(w, &nw, k);
        if (pf[0].revents & POLLIN)
            for (int m = 0; m < 16; m++) { /* a few at a time, so waiting ones are not starved */
                int sk = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
                if (sk < 0) {
                    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
                        errno != ECONNABORTED)
                        usleep(1000); /* out of descriptors, say: do not spin */
                    break;
                }
                if (rpcool__acc_try(s, sk, 0)) { /* usually its request is there already */
                    close(sk);
                    continue;
                }
                if (nw == RPCOOL__ACC_WAITING) { /* full: the one waiting longest goes */
                    unsigned old = 0;
                    for (unsigned k = 1; k < nw; k++)
                        if (w[k].deadline < w[old].deadline) old = k;
                    rpcool__acc_try(s, w[old].fd, 1);
                    rpcool__acc_drop(w, &nw, old);
                }
                w[nw].fd = sk;
                w[nw].deadline = rcp__now_ns() + (uint64_t)RPCOOL__REQ_WAIT_MS * 1000000u;
                nw++;
            }
    }
    while (nw) rpcool__acc_drop(w, &nw, nw - 1);
    return NULL;
}

/* Open the front door: the pool, the socket, the acceptor thread. */
static int rpcool__front_open(rpcool_server *s, unsigned mode)
{
    struct sockaddr_un a;
    int r;
    s->pool = (struct rpcool__prem *)rpcool__calloc(RPCOOL_MAX_PREALLOC, sizeof *s->pool);
    if (!s->pool) return -ENOMEM;
    /* no heap is made before the first connect of a client of this pod: a server that serves
       only clients of other pods (RDMA) keeps its pod's address ranges free for their mirrors */
    s->last_size = 0;
    if ((r = pthread_create(&s->maker, NULL, rpcool__maker_main, s))) return -r;
    s->maker_started = 1;
    if ((s->acc_ev = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) return -errno;
    if ((s->dep = epoll_create1(EPOLL_CLOEXEC)) < 0) return -errno;
    rpcool__sock_path(s->sock_path, sizeof s->sock_path, s->name);
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    snprintf(a.sun_path, sizeof a.sun_path, "%s", s->sock_path);
    if ((s->lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)) < 0)
        return -errno;
    unlink(s->sock_path); /* a dead server's: we hold the name */
    if (bind(s->lfd, (struct sockaddr *)&a, sizeof a) || chmod(s->sock_path, mode) ||
        listen(s->lfd, 128))
        return -errno;
    if ((r = pthread_create(&s->acceptor, NULL, rpcool__acceptor_main, s))) return -r;
    s->acc_started = 1;
    return 0;
}

/* Close it: no new connects; made-ahead heaps go (nobody else has them). */
static void rpcool__front_close(rpcool_server *s)
{
    uint64_t one = 1;
    rcp__store(&s->acc_stop, 1);
    if (s->acc_ev >= 0) { /* wakes its poll */
        ssize_t w = write(s->acc_ev, &one, sizeof one);
        (void)w;
    }
    if (s->acc_started) pthread_join(s->acceptor, NULL);
    s->acc_started = 0;
    pthread_mutex_lock(&s->pool_lock);
    pthread_cond_broadcast(&s->pool_cv);
    pthread_mutex_unlock(&s->pool_lock);
    if (s->maker_started) pthread_join(s->maker, NULL);
    s->maker_started = 0;
    if (s->acc_ev >= 0) close(s->acc_ev);
    s->acc_ev = -1;
    if (s->lfd >= 0) {
        unlink(s->sock_path);
        close(s->lfd);
    }
    s->lfd = -1;
    for (unsigned k = 0; s->pool && k < s->npool; k++) rpcool__prem_free(s, &s->pool[k]);
    s->npool = 0;
    rcp__store(&s->st.ready, 0u);
    rpcool__free(s->pool);
    s->pool = NULL;
}

static int rpcool__server_close(rpcool_server *s);
RPCOOL_API int rpcool_server_open(const char *channel, const rpcool_server_opts *opts,
                                  rpcool_server **out)
{
    const char *pd; /* the pod device, if any */
    rpcool_server_opts o;
    rpcool_server *s;
    int r;
    if (!out) return RPCOOL_E_INVAL;
    *out = NULL;
    if ((r = rpcool__check_name(channel))) return r;
    memset(&o, 0, sizeof o);
    if (opts) o = *opts;
    if (o.max_conns == 0) o.max_conns = RPCOOL_DEFAULT_MAX_CONNS;
    if (o.max_conns > RPCOOL_MAX_CONNS || (o.safety & ~(unsigned)RPCOOL__KNOWN_FLAGS) ||
        (o.stack_size && o.stack_size < (size_t)RPCOOL_STACK_RESERVE + PTHREAD_STACK_MIN))
        return RPCOOL_E_INVAL;
    if (!(s = (rpcool_server *)rpcool__calloc(1, sizeof *s))) return -ENOMEM;
    s->dep = -1;
    snprintf(s->name, sizeof s->name, "%s", channel);
    rpcool__path(s->path, sizeof s->path, channel);
    s->max_conns = o.max_conns;
    s->safety = o.safety;
    s->spin_ns = o.spin_ns ? o.spin_ns : RPCOOL_DEFAULT_SPIN_NS;
    s->reap_ms = o.reap_ms ? o.reap_ms : RPCOOL_DEFAULT_REAP_MS;
    s->max_copy = o.max_copy ? o.max_copy : RPCOOL_DEFAULT_MAX_COPY;
    s->stack_size = o.stack_size ? o.stack_size : RPCOOL_DEFAULT_STACK_SIZE;
    s->max_heap = o.max_heap_size ? o.max_heap_size : RPCOOL_DEFAULT_MAX_HEAP_SIZE;
    s->limit_ms = o.limit_ms;
    s->any_limit = o.limit_ms != 0;
    s->close_ms = o.close_ms ? o.close_ms : RPCOOL_DEFAULT_CLOSE_MS;
    rpcool__hooks_set(s, &o);
    s->hopts.pod = o.pod;
    s->hopts.log = o.log;
    s->hopts.log_user = o.log_user;
    s->log = rpcool__logger(o.log, o.log_user);
    /* a client that stops holding its heap's mutex must not hang us */
    s->hopts.lock_timeout_ms = 1000;
    pthread_mutex_init(&s->hk_lock, NULL);
    pthread_mutex_init(&s->wk_lock, NULL);
    pthread_mutex_init(&s->pool_lock, NULL);
    pthread_mutex_init(&s->ar_lock, NULL);
    pthread_cond_init(&s->pool_cv, NULL);
    s->handlers =
        (struct rpcool__handler_ent **)rpcool__calloc(RPCOOL_MAX_HANDLERS, sizeof *s->handlers);
    s->conns = (struct rpcool__sconn *)rpcool__calloc(s->max_conns, sizeof *s->conns);
    s->carves = (struct rpcool__carve **)rpcool__calloc(s->max_conns, sizeof *s->carves);
    s->set.conns = s->conns;
    s->set.max_conns = s->max_conns;
    if (!s->handlers || !s->conns || !s->carves) {
        r = -ENOMEM;
        goto fail_free;
    }
    s->fd = -1;
    s->lfd = s->acc_ev = -1;
    s->name_fd = open(s->path, O_RDWR | O_CREAT | O_CLOEXEC, o.mode ? o.mode : RPCOOL_DEFAULT_MODE);
    if (s->name_fd < 0) {
        r = -errno;
        goto fail_free;
    }
    if ((r = rpcool__lock_try(s->name_fd, 0))) { /* the name is ours while we hold byte 0 */
        if (r == -EAGAIN || r == -EACCES) r = RPCOOL_E_NAMETAKEN;
        goto fail_close;
    }
    /* the mode as asked, whatever the umask (as the socket's: rpcool__front_open) */
    if (fchmod(s->name_fd, o.mode ? o.mode : RPCOOL_DEFAULT_MODE)) {
        r = -errno;
        goto fail_close;
    }
    if ((r = rpcool__chan_init(s))) goto fail_close;
    pthread_once(&rpcool__sig_once, rpcool__sig_install);
    s->mb_ok = !RPCOOL__TSAN &&
               !syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0);
    rpcool__fd_track(s->name_fd, 1);
    rpcool__fd_track(s->fd, 1);
    /* no process of our user may open our descriptors (/proc/PID/fd) or memory: they hold
       every client's heap */
    if (!o.dumpable) prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    s->prealloc = o.prealloc ? o.prealloc : RPCOOL_DEFAULT_PREALLOC;
    if (s->prealloc > RPCOOL_MAX_PREALLOC) s->prealloc = RPCOOL_MAX_PREALLOC;
    if ((r = rpcool__front_open(s, o.mode ? o.mode : RPCOOL_DEFAULT_MODE))) {
        rpcool__front_close(s);
        rpcool__fd_track(s->fd, 0);
        rpcool__fd_track(s->name_fd, 0);
        munmap(s->ch, s->map_len);
        close(s->fd);
        unlink(s->path);
        goto fail_close;
    }
    if (s->safety & RPCOOL_SANDBOX) rpcool__pkeys_init(s);
    rpcool__log(&s->log, RPCOOL_LOG_INFO, "%s: serving (epoch %u, %u slots)", s->name, s->epoch,
                s->max_conns);
    if (o.rdma) s->xtp = rpcool__r_server_tp();
    pd = o.pod_device ? o.pod_device : getenv("RPCOOL_POD_DEVICE");
    if (pd && *pd) s->ptp = rpcool__p_server_tp();
    if ((r = rcp__handle_add(s)) ||
        (s->xtp && (r = s->xtp->open(s, o.rdma, o.rdma_device, o.spin_ns))) ||
        (s->ptp && (r = s->ptp->open(s, NULL, pd, o.spin_ns)))) {
        rpcool__server_close(s); /* takes the half-made listener down too */
        return r;
    }
    *out = s;
    return 0;
fail_close:
    close(s->name_fd);
fail_free:
    rpcool__server_free(s);
    return r;
}

RPCOOL_API int rpcool_server_add_handler(rpcool_server *s, unsigned id, rpcool_handler *fn,
                                         void *user, unsigned safety)
{
    RPCOOL__HCHECK(s);
    rpcool_handler_opts o;
    memset(&o, 0, sizeof o);
    o.safety = safety;
    return rpcool_server_add_handler_ex(s, id, fn, user, &o);
}

RPCOOL_API int rpcool_server_add_handler_ex(rpcool_server *s, unsigned id, rpcool_handler *fn,
                                            void *user, const rpcool_handler_opts *opts)
{
    RPCOOL__HCHECK(s);
    unsigned safety = opts ? opts->safety : 0;
    if (!s || id >= RPCOOL_MAX_HANDLERS || (safety & ~(unsigned)RPCOOL__KNOWN_FLAGS))
        return RPCOOL_E_INVAL;
    struct rpcool__handler_ent *e = NULL, *old;
    if (fn) {
        if (!(e = (struct rpcool__handler_ent *)rpcool__calloc(1, sizeof *e))) return -ENOMEM;
        e->fn = fn;
        e->user = user;
        e->flags = safety;
        unsigned ms = opts && opts->limit_ms ? opts->limit_ms : s->limit_ms;
        e->hlimit = RPCOOL__HL_RUN | (ms < RPCOOL__HL_MS ? ms : RPCOOL__HL_MS);
        if (ms) rcp__store(&s->any_limit, 1);
        if (safety & RPCOOL_SANDBOX) rpcool__pkeys_init(s);
    }
    old = __atomic_exchange_n(&s->handlers[id], e, __ATOMIC_ACQ_REL);
    if (old) { /* a serving thread may still hold it: keep it until the server closes */
        old->next_retired = rcp__load(&s->retired);
        while (!rcp__cas(&s->retired, &old->next_retired, old)) {}
    }
    return 0;
}

/* >>ops - callers, connection hooks, stats at the socket, cancelling --------------------------- */

static void rpcool__hooks_set(rpcool_server *s, const rpcool_server_opts *o)
{
    const char *pod = o->pod ? o->pod : getenv("SHMHEAP_POD");
    s->on_connect = o->on_connect;
    s->on_disconnect = o->on_disconnect;
    s->hook_user = o->hook_user;
    snprintf(s->pod, sizeof s->pod, "%.63s", pod && *pod ? pod : SHMHEAP__POD_DEFAULT);
}

/* A connecting client: who it is (the kernel's word, else its own pid, unauthenticated), then
   on_connect's verdict: 0 (*hooked: on_disconnect is owed), or the code it is refused with. */
static int rpcool__peer_admit(rpcool_server *s, int sk, uint32_t claimed, rpcool_peer *pr,
                              void **cuser, int *hooked)
{
    struct ucred cr;
    socklen_t cl = sizeof cr;
    memset(pr, 0, sizeof *pr);
    *cuser = NULL;
    *hooked = 0;
    pr->transport = RPCOOL_TRANSPORT_SHM;
    pr->slot = RPCOOL_MAX_CONNS;
    pr->pid = (int32_t)claimed;
    pr->uid = pr->gid = (uint32_t)-1;
    snprintf(pr->pod, sizeof pr->pod, "%s", s->pod);
    if (!getsockopt(sk, SOL_SOCKET, SO_PEERCRED, &cr, &cl)) {
        pr->uid = (uint32_t)cr.uid;
        pr->gid = (uint32_t)cr.gid;
        pr->authenticated = cr.pid > 0; /* 0: a pid namespace we cannot see into */
        if (cr.pid > 0) pr->pid = (int32_t)cr.pid;
    }
    return rpcool__peer_hook(s, pr, cuser, hooked);
}

/* on_connect's verdict on a client of any transport (*cuser NULL before): 0 (*hooked:
   on_disconnect is owed), or the code it is refused with (counted, logged). */
static int rpcool__peer_hook(rpcool_server *s, const rpcool_peer *pr, void **cuser, int *hooked)
{
    if (!s->on_connect) {
        *hooked = s->on_disconnect != NULL;
        return 0;
    }
    int r = s->on_connect(s, pr, cuser, s->hook_user);
    if (r == 0) {
        *hooked = 1;
        return 0;
    }
    if (r > 0) r = RPCOOL_E_REFUSED;
    *cuser = NULL;
    rcp__fetch_add(&s->st.refused, 1u);
    rpcool__log(&s->log, RPCOOL_LOG_INFO, "%s: on_connect refused pid %d uid %u (%d)", s->name,
                (int)pr->pid, (unsigned)pr->uid, r);
    return r;
}

/* An accepted client left (why: 0, RPCOOL_E_PEERDEAD, _DROPPED, _CLOSED, _NOSLOT): its
   on_disconnect, once (*hooked: still owed; cleared), outside any fault containment of the
   library's. Either transport's connections. */
static void rpcool__peer_left(rpcool_server *s, int *hooked, const rpcool_peer *pr, void *cuser,
                              int why)
{
    if (!*hooked) return;
    *hooked = 0;
    if (!s->on_disconnect) return;
    struct rpcool__guard *g = rpcool__cur;
    rpcool__cur = NULL;
    s->on_disconnect(s, pr, cuser, why, s->hook_user);
    rpcool__cur = g;
}

static void rpcool__sconn_left(rpcool_server *s, struct rpcool__sconn *sc, int why)
{
    rpcool__peer_left(s, &sc->hooked, &sc->peer, sc->cuser, why);
}

/* Calls of a connection posted and not yet answered (read from its header). */
static unsigned rpcool__inflight(const struct rpcool__conn_hdr *hd)
{
    unsigned n = 0;
    for (unsigned k = 0; k < RPCOOL__NSLOTS; k++) {
        uint32_t q = rcp__load_relaxed(&hd->req[k].state);
        if ((q & 3u) == RPCOOL__SL_REQ &&
            rcp__load_relaxed(&hd->resp[k].state) != ((q & ~3u) | RPCOOL__SL_DONE))
            n++;
    }
    return n;
}

RPCOOL_API int rpcool_server_conns(rpcool_server *s, rpcool_conn_stats *out, unsigned max)
{
    RPCOOL__HCHECK(s);
    if (!s || (max && !out)) return RPCOOL_E_INVAL;
    int n = 0;
    pthread_mutex_lock(&s->hk_lock);
    for (uint32_t i = 0; i < s->max_conns; i++) {
        struct rpcool__sconn *sc = &s->conns[i];
        uint32_t state = rcp__load(&sc->state);
        if (state == RPCOOL__SC_FREE) continue; /* a draining one is listed, as stats count it */
        if ((unsigned)n < max) {
            out[n].peer = sc->peer;
            /* its client is gone: nobody waits for its calls (and its heap may fault) */
            out[n].inflight = state == RPCOOL__SC_ACTIVE ? rpcool__inflight(sc->hdr) : 0;
        }
        n++;
    }
    pthread_mutex_unlock(&s->hk_lock);
    if (s->xtp && s->xtp->conns) n = s->xtp->conns(s, out, max, n);
    return s->ptp ? s->ptp->conns(s, out, max, n) : n;
}

/* The stats request at the front door (RPCOOL__SREQ_MAGIC) is answered with one message, a
   header and an entry per connection, to a caller of the server's uid or root. */
struct rpcool__srep {
    uint64_t magic;
    uint32_t version;
    int32_t status;
    uint32_t n, pad;
    char pod[64];
    rpcool_server_stats st;
};
struct rpcool__sent {
    int32_t pid;
    uint32_t uid, gid, slot, inflight, authenticated, transport;
    char pod[20], addr[48]; /* RDMA: its claimed pod id and its address */
};

static void rpcool__stats_answer(rpcool_server *s, int sk)
{
    struct ucred cr;
    socklen_t cl = sizeof cr;
    size_t cap = sizeof(struct rpcool__srep) + RPCOOL_STATS_CONNS * sizeof(struct rpcool__sent);
    char *buf = (char *)rpcool__calloc(1, cap);
    rpcool_conn_stats *cs = (rpcool_conn_stats *)rpcool__calloc(RPCOOL_STATS_CONNS, sizeof *cs);
    struct rpcool__srep rp;
    memset(&rp, 0, sizeof rp);
    rp.magic = RPCOOL__SREQ_MAGIC;
    rp.version = RPCOOL__VERSION;
    if (getsockopt(sk, SOL_SOCKET, SO_PEERCRED, &cr, &cl) ||
        (cr.uid != 0 && cr.uid != geteuid()))
        rp.status = -EACCES;
    else if (!buf || !cs)
        rp.status = -ENOMEM;
    if (!rp.status) {
        int n = rpcool_server_conns(s, cs, RPCOOL_STATS_CONNS); /* RDMA ones too */
        rp.n = (uint32_t)(n < 0 ? 0 : n > RPCOOL_STATS_CONNS ? RPCOOL_STATS_CONNS : n);
        rpcool_server_get_stats(s, &rp.st);
        snprintf(rp.pod, sizeof rp.pod, "%s", s->pod);
        for (uint32_t k = 0; k < rp.n; k++) {
            struct rpcool__sent e = {cs[k].peer.pid, cs[k].peer.uid, cs[k].peer.gid,
                                     cs[k].peer.slot, cs[k].inflight,
                                     (uint32_t)cs[k].peer.authenticated,
                                     (uint32_t)cs[k].peer.transport, "", ""};
            snprintf(e.pod, sizeof e.pod, "%.19s", cs[k].peer.pod);
            snprintf(e.addr, sizeof e.addr, "%.47s", cs[k].peer.addr);
            memcpy(buf + sizeof rp + k * sizeof e, &e, sizeof e);
        }
    }
    if (buf) {
        memcpy(buf, &rp, sizeof rp);
        ssize_t w = send(sk, buf, sizeof rp + rp.n * sizeof(struct rpcool__sent),
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)w;
    }
    rpcool__free(buf);
    rpcool__free(cs);
}

RPCOOL_API int rpcool_channel_stats(const char *channel, unsigned timeout_ms,
                                    rpcool_server_stats *st, rpcool_conn_stats *conns,
                                    unsigned max, unsigned *nconns)
{
    struct sockaddr_un a;
    struct rpcool__creq rq;
    struct rpcool__srep rp;
    struct pollfd pf;
    ssize_t n;
    int r, sk;
    if ((r = rpcool__check_name(channel))) return r;
    if (!st || (max && !conns)) return RPCOOL_E_INVAL;
    if (nconns) *nconns = 0;
    size_t cap = sizeof rp + (size_t)RPCOOL_STATS_CONNS * sizeof(struct rpcool__sent);
    char *buf = (char *)rpcool__calloc(1, cap);
    if (!buf) return -ENOMEM;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    rpcool__sock_path(a.sun_path, sizeof a.sun_path, channel);
    memset(&rq, 0, sizeof rq);
    rq.magic = RPCOOL__SREQ_MAGIC;
    rq.version = RPCOOL__VERSION;
    rq.pid = (uint32_t)getpid();
    if ((sk = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0)) < 0) {
        r = -errno;
        goto out;
    }
    if (connect(sk, (struct sockaddr *)&a, sizeof a)) {
        r = errno == EACCES ? -EACCES : RPCOOL_E_NOCHANNEL;
        goto out_sk;
    }
    if (send(sk, &rq, sizeof rq, MSG_NOSIGNAL) != (ssize_t)sizeof rq) {
        r = RPCOOL_E_NOCHANNEL;
        goto out_sk;
    }
    pf.fd = sk;
    pf.events = POLLIN;
    if ((r = poll(&pf, 1, timeout_ms ? (int)timeout_ms : 1000)) <= 0) {
        r = r < 0 ? -errno : RPCOOL_E_TIMEOUT;
        goto out_sk;
    }
    n = recv(sk, buf, cap, MSG_DONTWAIT);
    memcpy(&rp, buf, n >= (ssize_t)sizeof rp ? sizeof rp : 0);
    if (n <= 0) r = RPCOOL_E_NOCHANNEL;
    else if (n < (ssize_t)sizeof rp || rp.magic != RPCOOL__SREQ_MAGIC ||
             rp.version != RPCOOL__VERSION || rp.n > RPCOOL_STATS_CONNS ||
             (size_t)n != sizeof rp + rp.n * sizeof(struct rpcool__sent))
        r = RPCOOL_E_PROTO;
    else r = rp.status;
    if (!r) {
        *st = rp.st;
        for (uint32_t k = 0; k < rp.n && k < max; k++) {
            struct rpcool__sent e;
            memcpy(&e, buf + sizeof rp + k * sizeof e, sizeof e);
            memset(&conns[k], 0, sizeof conns[k]);
            conns[k].peer.transport = (int)e.transport;
            conns[k].peer.authenticated = (int)e.authenticated;
            conns[k].peer.pid = e.pid;
            conns[k].peer.uid = e.uid;
            conns[k].peer.gid = e.gid;
            conns[k].peer.slot = e.slot;
            snprintf(conns[k].peer.pod, sizeof conns[k].peer.pod, "%.*s",
                     e.transport == RPCOOL_TRANSPORT_SHM ? (int)sizeof rp.pod : (int)sizeof e.pod,
                     e.transport == RPCOOL_TRANSPORT_SHM ? rp.pod : e.pod);
            snprintf(conns[k].peer.addr, sizeof conns[k].peer.addr, "%.*s", (int)sizeof e.addr,
                     e.addr);
            conns[k].inflight = e.inflight;
        }
        if (nconns) *nconns = rp.n;
    }
out_sk:
    close(sk);
out:
    rpcool__free(buf);
    return r;
}

/* >>accept - server: accepting, draining and reaping connections ------------------------------- */

static RCP__THREAD_LOCAL struct rpcool__worker *rpcool__me; /* this thread's worker, if any */

/* A connection's client is watched by its pidfd no more (it is gone, or its lock outlives its
   process): the descriptor leaves the epoll as it is closed. Under hk_lock. */
static void rpcool__pidfd_drop(rpcool_server *s, struct rpcool__sconn *sc)
{
    if (sc->pidfd >= 0) close(sc->pidfd);
    else if (rcp__load_relaxed(&s->nopid)) rcp__fetch_add(&s->nopid, (uint32_t)-1);
    sc->pidfd = -1;
    rcp__store(&sc->suspect, 0u);
}

/* Unmap a connection once no pass that may have seen it active is still running (a pass that
   announced a later grace period saw it draining); 0 when done, 1 when still in use. Under
   hk_lock. seq_cst on both sides: the state store and grace period bump here, the announce
   and state loads in rpcool__pass. A polling worker keeps its announcement from pass to pass
   (it stores again only when the counter moved) and withdraws it (0) before it sleeps or
   leaves; the worker running this, if any, is between passes: its announcement does not
   count. */
static int rpcool__drain_wait(rpcool_server *s, struct rpcool__sconn *sc)
{
    if (rcp__load(&sc->state) != RPCOOL__SC_DRAINING) {
        __atomic_store_n(&sc->state, (uint32_t)RPCOOL__SC_DRAINING, __ATOMIC_SEQ_CST);
        sc->drain_gp = __atomic_add_fetch(&s->gp, 1u, __ATOMIC_SEQ_CST);
    }
    if (rcp__load(&sc->ndeferred)) return 1; /* deferred calls still write to its heap */
    /* a polling worker moves on within a pass: wait for that a little (20 us), not for a
       handler that runs long (the next housekeeping round tries again). A worker inside another
       connection's scan (a handler of another client, however long) does not hold us up: it
       reads this connection's state again before it touches it, and sees it draining. */
    for (uint64_t t0 = 0;;) {
        int busy = 0, fenced = 0;
        for (struct rpcool__worker *w = s->workers; w && !busy; w = w->next) {
            uint64_t g = w == rpcool__me ? 0 : __atomic_load_n(&w->gp, __ATOMIC_SEQ_CST);
            busy = g && g <= sc->drain_gp;
            if (busy && !fenced && !RPCOOL__TSAN && s->mb_ok) /* see rpcool__cur_set */
                fenced = !syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
            if (busy && (fenced || RPCOOL__TSAN)) {
                struct rpcool__sconn *at = __atomic_load_n(&w->cur, __ATOMIC_SEQ_CST);
                busy = !at || at == sc;
            }
        }
        if (!busy) break;
        uint64_t now = rcp__now_ns();
        if (!t0) t0 = now;
        else if (now - t0 > 20000) return 1;
        sched_yield();
    }
    return 0;
}

static int rpcool__drain(rpcool_server *s, uint32_t i)
{
    if (rpcool__drain_wait(s, &s->conns[i])) return 1;
    rpcool__sconn_release(s, i, rcp__load(&s->conns[i].dead));
    return 0;
}

/* Unmap a drained connection (its heap goes when its client has let go of it too). dead:
   counted as reaped, not closed. */
static void rpcool__sconn_release(rpcool_server *s, uint32_t i, int dead)
{
    struct rpcool__sconn *sc = &s->conns[i];
    struct rpcool__chan_slot *cs = &s->cs[i];
    if (dead && !rcp__load(&sc->condemned)) rpcool__cwaiting_drop(s->ch, sc->hdr);
    int o = rpcool__contain_set(0);
    shmheap_close(sc->heap);
    rpcool__contain_set(o);
    rpcool__log(&s->log, RPCOOL_LOG_INFO, "%s: slot %u %s (%s)", s->name, i,
                dead ? "reaped" : "closed", sc->heap_name);
    rcp__fetch_add(dead ? &s->st.reaped : &s->st.closed, 1u);
    if (rcp__load(&sc->condemned)) rcp__fetch_add(&s->st.dropped, 1u);
    rpcool__sconn_left(s, sc, rcp__load(&sc->condemned) ? RPCOOL_E_DROPPED
                              : dead ? RPCOOL_E_PEERDEAD : 0);
    sc->heap = NULL;
    sc->hdr = NULL;
    rpcool__pidfd_drop(s, sc);
    rcp__store(&sc->state, (uint32_t)RPCOOL__SC_FREE);
    uint32_t n = rcp__load_relaxed(&s->nscan);
    while (n && rcp__load(&s->conns[n - 1].state) == RPCOOL__SC_FREE) n--;
    rcp__store(&s->nscan, n);
    /* A condemned connection's client may live on: the slot says why it is served no more (its
       calls and close fail with RPCOOL_E_DROPPED instead of waiting), and stays its own until
       its lock byte goes (rpcool__reclaim_stale frees it then, or when the client closes). */
    rcp__store(&cs->heap[0], '\0'); /* its heap is gone: the slot names none */
    if (!rcp__load(&sc->condemned)) rpcool__slot_carve_put(s, i);
    rcp__store(&cs->state,
               (uint32_t)(rcp__load(&sc->condemned) ? RPCOOL__CS_DROPPED : RPCOOL__CS_FREE));
    rcp__fetch_add(&cs->seq, 1u);
    rcp__futex_wake(&cs->seq, INT_MAX);
}

/* A fault on the channel mapping. The channel is sealed against shrinking, so no client can
   truncate it; should it ever be shorter than our mapping, give it its size back (its pages
   read as zeros: the next housekeeping rewrites the header). Touches no mapped memory. */
static void rpcool__chan_repair(rpcool_server *s)
{
    struct stat st;
    if (fstat(s->fd, &st) == 0 && (size_t)st.st_size < s->map_len &&
        ftruncate(s->fd, (off_t)s->map_len) == 0)
        rpcool__log(&s->log, RPCOOL_LOG_WARN,
                    "%s: channel file was truncated (to %lld bytes): restored", s->name,
                    (long long)st.st_size);
}

/* Put back header fields a client scribbled on (or a truncation zeroed), so new clients can
   still connect. Clients that looked at the header meanwhile may have given up on the channel:
   the header is writable by every client (see LIMITS). Under hk_lock, with faults contained. */
static void rpcool__chan_restore(rpcool_server *s)
{
    struct rpcool__chan_hdr *h = s->ch;
    if (rcp__load(&h->magic) == RPCOOL__CH_MAGIC && h->version == RPCOOL__VERSION &&
        h->max_conns == s->max_conns && h->safety == s->safety &&
        rcp__load(&h->epoch) == s->epoch && rcp__load(&h->state) == RPCOOL__CH_OPEN)
        return;
    rcp__fetch_add(&s->st.bad_entries, 1u);
    rpcool__log(&s->log, RPCOOL_LOG_WARN, "%s: channel header was overwritten: restored", s->name);
    h->version = RPCOOL__VERSION;
    h->max_conns = s->max_conns;
    h->safety = s->safety;
    h->server_pid = (uint32_t)getpid();
    rcp__store(&h->epoch, s->epoch);
    rcp__store(&h->state, (uint32_t)RPCOOL__CH_OPEN);
    rcp__store(&h->magic, RPCOOL__CH_MAGIC);
}

/* Accept, close and reap. One thread at a time; cheap when nothing changed. now: the time if
   the caller read the clock (timed work is due every reap_ms), else 0. Reads of the channel
   file are guarded: a fault (a truncated file) repairs it. The unlocked fast path reads the
   channel under the caller's recovery point (a worker's; see rpcool__worker_run). */
static void rpcool__housekeep_locked(rpcool_server *s, int force, uint64_t now, int timed);

/* With hk_lock held: the work (under rpcool__guarded: a fault on the channel is contained). */
struct rpcool__hk_args {
    rpcool_server *s;
    int force, timed;
    uint64_t now;
};

static int rpcool__housekeep_fn(void *p)
{
    struct rpcool__hk_args *a = (struct rpcool__hk_args *)p;
    rpcool__housekeep_locked(a->s, a->force, a->now, a->timed);
    return 0;
}

static void rpcool__housekeep(rpcool_server *s, int force, uint64_t now)
{
    if (force && !now) now = rcp__now_ns();
    int timed = now && now - rcp__load_relaxed(&s->last_hk) >= (uint64_t)s->reap_ms * 1000000u;
    if (!force && !timed && rcp__load(&s->ch->pending) == rcp__load_relaxed(&s->seen_pending) &&
        rcp__load(&s->deaths) == rcp__load_relaxed(&s->seen_deaths))
        return;
    if (pthread_mutex_trylock(&s->hk_lock)) return;
    struct rpcool__hk_args a = {s, force, timed, now};
    if (rpcool__guarded(rpcool__housekeep_fn, &a, 1)) { /* a fault: the channel file repaired */
        rcp__fetch_add(&s->st.faults, 1u);
        rpcool__chan_repair(s);
    }
    pthread_mutex_unlock(&s->hk_lock);
}

/* The count of clients asleep waiting (cwaiting, a hint every client reads to choose between
   polling and sleeping at once) stays true: a connection reaped while its client slept takes
   its sleepers out of it, and a count no set of clients could reach (a client scribbled on
   it) is set to what the connections' own counts say. Resetting it instead would let it go
   negative as a crowd of sleepers wakes: every client would then poll. */
static void rpcool__cwaiting_drop(struct rpcool__chan_hdr *ch, struct rpcool__conn_hdr *hdr)
{
    if (!hdr) return;
    uint32_t n = rcp__load(&hdr->csleepers);
    if (n && n <= RPCOOL__NSLOTS) rcp__fetch_add(&ch->cwaiting, (uint32_t)-n);
}

static void rpcool__cwaiting_check(struct rpcool__chan_hdr *ch, struct rpcool__sset *set)
{
    int32_t v = (int32_t)rcp__load_relaxed(&ch->cwaiting);
    if (v >= 0 && (int64_t)v <= (int64_t)set->max_conns * RPCOOL__NSLOTS) return;
    uint32_t sum = 0;
    for (uint32_t i = 0; i < set->max_conns; i++) {
        struct rpcool__sconn *sc = &set->conns[i];
        if (rcp__load(&sc->state) != RPCOOL__SC_ACTIVE || rcp__load(&sc->dead) ||
            rcp__load(&sc->condemned) || !sc->hdr)
            continue;
        uint32_t n = rcp__load(&sc->hdr->csleepers);
        sum += n <= RPCOOL__NSLOTS ? n : RPCOOL__NSLOTS;
    }
    rcp__store_relaxed(&ch->cwaiting, sum);
}

/* The crowd a channel's clients see (ch->crowd): the most requests one of this worker's passes
   served (n) over about a millisecond, published when the clock is read (now != 0) and only
   when it changed. It does not depend on how the clients wait: a crowd that polls posts as
   many requests per pass as one that sleeps, so the choice it drives does not feed on itself
   (the number of clients asleep would: polling clients are not asleep). */
static void rpcool__crowd_note(struct rpcool__chan_hdr *ch, struct rpcool__worker *w, int n,
                               uint64_t now)
{
    if ((uint32_t)n > w->crowd) w->crowd = (uint32_t)n;
    if (!now || now - w->crowd_at < 1000000u) return;
    if (rcp__load_relaxed(&ch->crowd) != w->crowd) rcp__store_relaxed(&ch->crowd, w->crowd);
    w->crowd = 0;
    w->crowd_at = now;
}

/* The ready summary's safety net, on timed rounds (under hk_lock: no connection is unmapped
   meanwhile): a connection with request bits but no ready bit (its client died between the
   two, or another client cleared the summary) is put back in, and a sleeping server rung. */
static void rpcool__ready_sweep(rpcool_server *s)
{
    int any = 0;
    for (uint32_t i = 0; i < s->max_conns; i++) {
        struct rpcool__sconn *sc = &s->conns[i];
        uint64_t b = 1ull << (i % 64), tb = 1ull << (i / 64 % 64);
        if (rcp__load(&sc->state) != RPCOOL__SC_ACTIVE || rcp__load(&sc->dead) || !sc->hdr ||
            !rcp__load(&sc->hdr->req_bits) || (rcp__load(&s->set.rdy[i / 64]) & b))
            continue;
        __atomic_fetch_or(&s->set.rdy[i / 64], b, __ATOMIC_SEQ_CST);
        __atomic_fetch_or(&s->set.rdy_top[i / 4096], tb, __ATOMIC_SEQ_CST);
        any = 1;
    }
    if (any && __atomic_load_n(&s->ch->ssleepers, __ATOMIC_SEQ_CST)) {
        rcp__fetch_add(&s->ch->sdoor, 1u);
        rcp__futex_wake(&s->ch->sdoor, 1);
    }
}

static void rpcool__housekeep_locked(rpcool_server *s, int force, uint64_t now, int timed)
{
    uint32_t pend = rcp__load(&s->ch->pending), due = 0;
    rcp__store_relaxed(&s->seen_pending, pend);
    rcp__store_relaxed(&s->seen_deaths, rcp__load(&s->deaths));
    if (timed || force) {
        rcp__store_relaxed(&s->last_hk, now);
        rcp__store_relaxed(&s->ch->server_cpus, 0ull); /* hints fade: pollers mark them again */
        rcp__store_relaxed(&s->ch->client_cpus, 0ull);
        rpcool__cwaiting_check(s->ch, &s->set);
    }
    for (uint32_t i = 0; i < s->max_conns; i++) {
        struct rpcool__sconn *sc = &s->conns[i];
        uint32_t st = rcp__load(&s->cs[i].state), ss = rcp__load(&sc->state);
        if (ss == RPCOOL__SC_DRAINING) {
            due += rpcool__drain(s, i);
        } else if (ss == RPCOOL__SC_ACTIVE) {
            /* the lock byte is asked when the client's pidfd fired, or on timed rounds for a
               client without one: not one system call per connection per round */
            int ask = force || rcp__load(&sc->suspect) || (timed && sc->pidfd < 0);
            if (rcp__load(&sc->condemned)) {
                due += rpcool__drain(s, i);
            } else if (st == RPCOOL__CS_CLOSING) {
                if (rpcool__lock_held(s->fd, 1 + (off_t)i) == 0) /* died inside rpcool_disconnect */
                    rcp__store(&sc->dead, 1);
                due += rpcool__drain(s, i);
            } else if (ask && rpcool__lock_held(s->fd, 1 + (off_t)i) == 0) {
                rcp__store(&sc->dead, 1); /* client gone without closing: reclaim its heap */
                due += rpcool__drain(s, i);
            } else if (rcp__load(&sc->suspect)) { /* its process left, its lock lives on (a
                                                     descriptor passed on): watch the lock */
                rcp__store(&sc->suspect, 0u);
                rpcool__pidfd_drop(s, sc);
                rcp__fetch_add(&s->nopid, 1u);
            }
        } else if (st != RPCOOL__CS_FREE && (timed || force || st == RPCOOL__CS_CLOSING)) {
            rpcool__reclaim_stale(s, i);
            due += rcp__load(&s->cs[i].state) != RPCOOL__CS_FREE;
        } else if (st != RPCOOL__CS_FREE) {
            due++;
        }
    }
    rcp__store_relaxed(&s->hk_due, due);
    if (timed || force) {
        rpcool__chan_restore(s);
        rpcool__rdv_restore(s);
        rpcool__ready_sweep(s);
    }
}

/* >>dispatch - server: running calls ----------------------------------------------------------- */

/* What is logged once per connection (a hostile client cannot flood the log). */
enum { RPCOOL__NOTE_FAULT = 1, RPCOOL__NOTE_NOHANDLER = 2, RPCOOL__NOTE_BADREPLY = 4,
       RPCOOL__NOTE_LIMIT = 8, RPCOOL__NOTE_BUDGET = 16 };

#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
static void rpcool__note(rpcool_server *s, const struct rpcool__incoming *in, uint32_t kind,
                         const char *fmt, ...)
{
    char msg[160];
    va_list ap;
    if (rcp__fetch_or(in->logged, kind) & kind) return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    rpcool__log(&s->log, RPCOOL_LOG_WARN, "%s: client pid %u (%s): %s (logged once per "
                "connection)", s->name, (unsigned)in->pid, in->who, msg);
}

static int rpcool__run_handler(rpcool_ctx *ctx, const struct rpcool__handler_ent *e,
                               rpcool_handler *fn, void *arg, size_t len)
{
    struct rpcool__guard g;
    rpcool__guard_init(&g, rpcool__cur, ctx);
    ctx->guard = &g;
    if (sigsetjmp(g.jb, 0)) {
        rpcool__cur = g.prev;
        if (ctx->aborted) return ctx->abort_code; /* rpcool_ctx_fail, not a signal */
        rpcool__fault_unblock();
        if (ctx->limit_hit) return RPCOOL_E_DEADLINE; /* RPCOOL_LIMIT_SIGNAL */
        ctx->fault_sig = g.sig;
        ctx->fault_addr = g.addr;
        return RPCOOL_E_FAULT;
    }
    g.contain = (ctx->flags & RPCOOL_SANDBOX) != 0; /* faults become RPCOOL_E_FAULT */
    if (g.contain && !rpcool__alt_done) rpcool__altstack(); /* threads of the RDMA transport */
    rpcool__cur = &g;
#ifdef RPCOOL__UNWIND
    int r;
    g.unwind = 1;
    try {
        r = fn(ctx, arg, len, e->user);
    } catch (const rpcool__unwind &u) { /* rpcool_ctx_fail or a checked accessor */
        r = u.code;
    } catch (...) {
        ctx->aborted = 1; /* not a fault: nothing to unblock */
        r = ctx->abort_code = RPCOOL_E_EXCEPTION;
    }
    g.contain = 0;
#else
    g.unwind = 0;
    int r = fn(ctx, arg, len, e->user);
#endif
    rpcool__cur = g.prev;
    return r;
}

/* Around a sandboxed handler: disable the keys of all connections but its own (mine; -1 if its
   heap has none: then all of them), or give this thread every key back (all = 1). Restoring
   sets all of them, the handler's own key included: after a contained fault this thread keeps
   the rights the kernel gave the signal handler (all keys but 0 disabled), since siglongjmp
   does not restore them. */
static void rpcool__pkeys(rpcool_server *s, int mine, int all)
{
    for (int k = 0; k < s->npkeys; k++)
        if (all || s->pkeys[k] != mine) shmheap_pkey_set(s->pkeys[k], all ? 0u : 1u);
}

/* A handler ended with an error: count and log what the library ended it for. */
static void rpcool__failed(rpcool_server *s, const struct rpcool__incoming *in, rpcool_ctx *ctx,
                           int status)
{
    if (rcp__load_relaxed(&ctx->w->expired) == ctx->call_no) /* counted by the watchdog */
        rpcool__note(s, in, RPCOOL__NOTE_LIMIT, "a handler ran over its time limit%s",
                     status == RPCOOL_E_DEADLINE ? " and was ended" : "");
    if (!ctx->aborted && status == RPCOOL_E_FAULT) {
        rcp__fetch_add(&s->st.faults, 1u);
        rpcool__note(s, in, RPCOOL__NOTE_FAULT, "sandboxed handler faulted (signal %d at %p)",
                     ctx->fault_sig, ctx->fault_addr);
        /* SIGBUS inside the caller's memory: its file no longer backs the mapping (the client
           truncated it); every later access by the library would fault too */
        if (ctx->fault_sig == SIGBUS && ctx->tp->in_range(ctx, ctx->fault_addr, 1))
            ctx->tp->drop(ctx, "SIGBUS on its heap (truncated)");
    } else if (status == RPCOOL_E_BUDGET && ctx->aborted) {
        rcp__fetch_add(&s->st.over_budget, 1u);
        rpcool__note(s, in, RPCOOL__NOTE_BUDGET, "handler ended: its checked reads exceeded "
                     "the heap's %zu bytes (cyclic data?)", ctx->budget);
    }
}

/* The handler's private copy of its argument (RPCOOL_COPY), in the serving thread's buffer,
   grown as needed: 0 with *arg pointing at the copy, or -ENOMEM. A fault reading the argument
   is the client's: the caller serves under a guard. */
static int rpcool__copy_arg(struct rpcool__worker *w, rpcool_ctx *ctx, void **arg, size_t len)
{
    if (len > w->cap) {
        char *nb = (char *)RPCOOL_MALLOC(len); /* the old contents are not needed */
        if (!nb) return -ENOMEM;
        rpcool__free(w->buf);
        w->buf = nb;
        w->cap = len;
    }
    if (len) memcpy(w->buf, *arg, len);
    ctx->copy = w->buf;
    ctx->copy_len = len;
    *arg = len ? w->buf : NULL;
    return 0;
}

/* Once a call is answered, a big argument's copy goes back: not one per serving thread. */
static void rpcool__copy_trim(struct rpcool__worker *w)
{
    if (w->cap <= RPCOOL__COPY_KEEP) return;
    rpcool__free(w->buf);
    w->buf = NULL;
    w->cap = 0;
}

static void rpcool__defer_handoff(struct rpcool__worker *w, rpcool_ctx *ctx, int status);

/* May the call run: its flags known, its handler registered, its argument (and seal) in the
   caller's memory, the channel's policy met, not cancelled while queued? Then the call's
   flags and, under RPCOOL_COPY (or a sealed call under a page), the argument's private copy.
   A transport that copies (RPCOOL__TP_COPIES) delivers calls sealed by construction. */
static int rpcool__admit(struct rpcool__worker *w, const struct rpcool__incoming *in,
                         rpcool_ctx *ctx, const struct rpcool__handler_ent *e, void **arg)
{
    rpcool_server *s = w->s;
    const struct rpcool__server_tp *tp = ctx->tp;
    unsigned cflags = in->flags, copies = tp->flags & RPCOOL__TP_COPIES;
    size_t len = in->arg_len;
    /* a seal copy is a sealed call of less than a page: the copy is bounded by a page */
    unsigned small = copies ? 0u : cflags & RPCOOL__SEAL_COPY;
    if (cflags & ~(unsigned)RPCOOL__WIRE_FLAGS) return RPCOOL_E_INVAL;
    if (small && (!(cflags & RPCOOL_SEAL) || in->seal_len >= rpcool__page_size()))
        return RPCOOL_E_INVAL;
    if (!e) {
        rpcool__note(s, in, RPCOOL__NOTE_NOHANDLER, "call of handler id %u: none registered",
                     in->fn);
        return RPCOOL_E_NOHANDLER;
    }
    unsigned need = s->safety | e->flags | (copies ? (unsigned)RPCOOL_SEAL : 0u);
    if ((*arg || len) && !tp->in_range(ctx, *arg, len)) return RPCOOL_E_BADPTR;
    if (!copies && (need & RPCOOL_SEAL) && !(cflags & RPCOOL_SEAL)) return RPCOOL_E_POLICY;
    if (!copies && (cflags & RPCOOL_SEAL)) {
        const char *a = (const char *)*arg, *sl = (const char *)in->seal;
        if (!tp->in_range(ctx, in->seal, in->seal_len) || a < sl || a + len > sl + in->seal_len)
            return RPCOOL_E_BADPTR;
    }
    if (RCP__UNLIKELY(tp->cancelled(ctx))) { /* cancelled while queued: never started */
        rcp__fetch_add(&s->st.cancelled, 1u);
        return RPCOOL_E_CANCELLED;
    }
    ctx->flags = (cflags & RPCOOL__KNOWN_FLAGS) | need;
    if (!(ctx->flags & RPCOOL_COPY) && !small) return 0;
    if ((ctx->flags & RPCOOL_COPY) && len > s->max_copy)
        return RPCOOL_E_TOOBIG; /* a client's heap may be far larger than we want to copy */
    ctx->flags |= RPCOOL_COPY; /* the handler gets a private copy: say so */
    return rpcool__copy_arg(w, ctx, arg, len);
}

/* Run the admitted call: its time limit and budget of checked reads, behind the protection
   keys' fence under RPCOOL_SANDBOX, failures counted and logged, a reply outside the caller's
   memory refused. */
static int rpcool__run(struct rpcool__worker *w, const struct rpcool__incoming *in,
                       rpcool_ctx *ctx, const struct rpcool__handler_ent *e, void *arg)
{
    rpcool_server *s = w->s;
    int fence = (ctx->flags & RPCOOL_SANDBOX) && s->npkeys;
    ctx->budget = in->budget;
    ctx->call_no = w->calls + 1;
    /* plain stores, no locked operation on the call's path: the watchdog reads them */
    rcp__store_relaxed(&w->calls, ctx->call_no);
    rcp__store_relaxed(&w->hlimit, e->hlimit | ((ctx->flags & RPCOOL_SANDBOX) ? RPCOOL__HL_SBX
                                                                              : 0u));
    if (fence) rpcool__pkeys(s, in->pkey, 0);
    int status = rpcool__run_handler(ctx, e, e->fn, arg, in->arg_len);
    if (fence) rpcool__pkeys(s, -1, 1);
    rcp__store_relaxed(&w->hlimit, 0u);
    if (RCP__UNLIKELY(status < 0 || rcp__load_relaxed(&w->expired) == ctx->call_no))
        rpcool__failed(s, in, ctx, status);
    if (ctx->ret && !ctx->tp->in_range(ctx, ctx->ret, ctx->ret_len)) {
        status = RPCOOL_E_BADPTR; /* a handler bug: never hand out private pointers */
        rpcool__note(s, in, RPCOOL__NOTE_BADREPLY, "handler %u replied %p (%zu bytes): "
                     "outside the caller's memory", in->fn, ctx->ret, ctx->ret_len);
        ctx->ret = NULL;
        ctx->ret_len = 0;
    }
    return status;
}

/* Serve one call a transport read off its wire, claimed by this serving thread: admit it, run
   it, answer it through the transport's reply (or hand it to its deferred token). The one
   path of every call, whatever transport it came by. */
static void rpcool__dispatch(struct rpcool__worker *w, const struct rpcool__server_tp *tp,
                             const struct rpcool__incoming *in)
{
    rpcool_server *s = w->s;
    rpcool_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.s = s;
    ctx.tp = tp;
    ctx.conn = in->conn;
    ctx.cookie = in->cookie;
    ctx.w = w;
    ctx.slot = in->slot;
    ctx.gen = in->gen;
    ctx.wflags = in->flags;
    void *arg = in->arg;
    struct rpcool__handler_ent *e =
        in->fn < RPCOOL_MAX_HANDLERS ? rcp__load(&s->handlers[in->fn]) : NULL;
    if (e && !e->fn) e = NULL;
    int status = rpcool__admit(w, in, &ctx, e, &arg);
    if (status == 0) status = rpcool__run(w, in, &ctx, e, arg);
    if (ctx.dfr) { /* deferred: the token finishes the call (and owns the copy) */
        rpcool__defer_handoff(w, &ctx, status);
        return;
    }
    tp->reply(&ctx, status, ctx.ret, ctx.ret ? ctx.ret_len : 0);
    rpcool__copy_trim(w);
}

static void rpcool__serve_slot(struct rpcool__worker *w, struct rpcool__sconn *sc, unsigned i,
                               uint32_t gen);

/* Clear request bits (a server about to sleep, or a bit with no request behind it), then look
   at those slots once more: a client that posted meanwhile and saw its bit still set did not
   set it again, so a request found now gets its bit back. seq_cst against rpcool__shm_post.
   Returns 1 if a request waits. */
static int rpcool__unflag(struct rpcool__sconn *sc, uint64_t bits)
{
    struct rpcool__conn_hdr *hd = sc->hdr;
    int n = 0;
    __atomic_fetch_and(&hd->req_bits, ~bits, __ATOMIC_SEQ_CST);
    for (; bits; bits &= bits - 1) {
        unsigned i = (unsigned)__builtin_ctzll(bits);
        uint32_t st = __atomic_load_n(&hd->req[i].state, __ATOMIC_SEQ_CST);
        if ((st & 3u) == RPCOOL__SL_REQ && st >> 2 != rcp__load(&sc->claimed[i])) {
            __atomic_fetch_or(&hd->req_bits, 1ull << i, __ATOMIC_SEQ_CST);
            n = 1;
        }
    }
    return n;
}

/* Serve the requests of one connection; returns how many. With trim (a server about to
   sleep) it serves nothing: it clears the bits of idle slots and returns 1 if a request waits. */
/* The client is inside rpcool_disconnect: its calls not started never start. Reads the channel
   file (the caller's faults are contained). */
static int rpcool__leaving(const struct rpcool__sset *set, struct rpcool__sconn *sc)
{
    return rcp__load(&set->cs[sc - set->conns].state) == RPCOOL__CS_CLOSING;
}

static int rpcool__scan_conn(struct rpcool__worker *w, const struct rpcool__sset *set,
                             struct rpcool__sconn *sc, int trim)
{
    struct rpcool__conn_hdr *hd = sc->hdr;
    int n = 0;
    uint64_t bits = rcp__load(&hd->req_bits), idle = 0, bad = 0;
    unsigned rot = rcp__load_relaxed(&sc->rot) & 63u; /* start after the last served slot */
    uint64_t rb = rot ? (bits >> rot) | (bits << (64 - rot)) : bits;
    for (; rb; rb &= rb - 1) {
        unsigned i = ((unsigned)__builtin_ctzll(rb) + rot) & 63u;
        /* claimed first: a state read after it is at least as new as the claim (the claimer
           read that state before its CAS), so gen != cl means a newer request, never an old
           one seen late (which would be served twice) */
        uint32_t cl = rcp__load(&sc->claimed[i]);
        uint32_t st = rcp__load(&hd->req[i].state), gen = st >> 2;
        if ((st & 3u) != RPCOOL__SL_REQ) bad |= 1ull << i; /* flagged, never filled */
        else if (cl == gen) idle |= 1ull << i;             /* answered (or being answered) */
        else if (trim) n = 1;
        /* dropped or its client dead meanwhile (a condemned connection is dead too): serve no
           more (a dead client's calls never start) */
        else if (rcp__load_relaxed(&sc->dead) || rpcool__leaving(set, sc)) break;
        else if (rcp__cas(&sc->claimed[i], &cl, gen)) {     /* else another thread took it */
            rcp__store_relaxed(&sc->rot, i + 1);
            rpcool__serve_slot(w, sc, i, gen);
            n++;
        }
    }
    if (bad) {
        rcp__fetch_add(&w->s->st.bad_entries, (uint64_t)__builtin_popcountll(bad));
        rpcool__unflag(sc, bad);
    }
    if (trim && idle && rpcool__unflag(sc, idle)) n = 1;
    return n;
}

/* The connection a worker is in (NULL: between connections). The drainer's side of the fence
   is a membarrier (rpcool__drain) after it marked a connection draining: a worker seen inside
   another connection then reads that state again, with the barrier between, before it touches
   the drained one; so the worker's side costs no fence (seq_cst under ThreadSanitizer). */
static void rpcool__cur_set(struct rpcool__worker *w, struct rpcool__sconn *sc)
{
#if RPCOOL__TSAN
    __atomic_store_n(&w->cur, sc, __ATOMIC_SEQ_CST);
#else
    __atomic_store_n(&w->cur, sc, __ATOMIC_RELEASE);
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
#endif
}

/* Take slot i out of the ready summary, then look once more: a client that posted meanwhile
   found its bit still set and did not set it again. For an active connection (w->cur is it)
   the look is at its request bits, else at its state (a connection granted meanwhile). */
static void rpcool__ready_clear(struct rpcool__sset *set, uint32_t i, struct rpcool__sconn *sc)
{
    uint64_t b = 1ull << (i % 64);
    __atomic_fetch_and(&set->rdy[i / 64], ~b, __ATOMIC_SEQ_CST);
    int again = sc ? __atomic_load_n(&sc->hdr->req_bits, __ATOMIC_SEQ_CST) != 0
                   : __atomic_load_n(&set->conns[i].state, __ATOMIC_SEQ_CST) == RPCOOL__SC_ACTIVE;
    if (again) __atomic_fetch_or(&set->rdy[i / 64], b, __ATOMIC_SEQ_CST);
}

/* Visit a connection of the ready summary: serve it (serve 1), or trim it (serve 0). Its bit
   goes when it has nothing flagged any more: at once before a sleep, else after
   RPCOOL__IDLE_PASSES idle passes, so a client that calls again and again rewrites nothing. */
static int rpcool__visit(struct rpcool__worker *w, struct rpcool__sset *set, uint32_t i, int serve)
{
    struct rpcool__sconn *sc = &set->conns[i];
    if (__atomic_load_n(&sc->state, __ATOMIC_SEQ_CST) != RPCOOL__SC_ACTIVE ||
        rcp__load_relaxed(&sc->dead)) { /* free, draining, dead or condemned: not served */
        rpcool__ready_clear(set, i, NULL);
        return 0;
    }
    rpcool__cur_set(w, sc);
    int n = rpcool__scan_conn(w, set, sc, !serve);
    if (serve && n) rcp__store_relaxed(&sc->idle, 0u);
    if (!n && (!serve || rcp__fetch_add(&sc->idle, 1u) + 1 >= RPCOOL__IDLE_PASSES)) {
        if (serve) (void)rpcool__scan_conn(w, set, sc, 1); /* unflag idle slots (a request that
                                                          came meanwhile keeps its bit) */
        if (!rcp__load(&sc->dead) && !__atomic_load_n(&sc->hdr->req_bits, __ATOMIC_SEQ_CST)) {
            rcp__store_relaxed(&sc->idle, 0u);
            rpcool__ready_clear(set, i, sc);
        }
    }
    rpcool__cur_set(w, NULL);
    return n;
}

/* Visit the ready connections of slots [lo, hi) in order; stops at the first request when
   serve is 0. Top bits with an empty word behind them go (and are looked at once more). */
static int rpcool__pass_range(struct rpcool__worker *w, struct rpcool__sset *set, uint32_t lo,
                              uint32_t hi, int serve)
{
    int n = 0;
    for (uint32_t t = lo / 4096; t * 4096 < hi && !(n && !serve); t++) {
        uint64_t tb = __atomic_load_n(&set->rdy_top[t], __ATOMIC_SEQ_CST);
        uint32_t k0 = t * 64;
        if (lo / 64 > k0) tb &= ~0ull << (lo / 64 - k0);                 /* words below lo */
        if ((hi + 63) / 64 < k0 + 64) tb &= (1ull << ((hi + 63) / 64 - k0)) - 1; /* above hi */
        for (; tb && !(n && !serve); tb &= tb - 1) {
            uint32_t k = k0 + (uint32_t)__builtin_ctzll(tb);
            uint64_t wb = __atomic_load_n(&set->rdy[k], __ATOMIC_SEQ_CST);
            if (!wb) { /* the word is empty: its top bit goes, unless a client set one since */
                uint64_t bit = 1ull << (k % 64);
                __atomic_fetch_and(&set->rdy_top[t], ~bit, __ATOMIC_SEQ_CST);
                if (__atomic_load_n(&set->rdy[k], __ATOMIC_SEQ_CST))
                    __atomic_fetch_or(&set->rdy_top[t], bit, __ATOMIC_SEQ_CST);
                continue;
            }
            if (k * 64 < lo) wb &= ~0ull << (lo - k * 64);
            if (k * 64 + 64 > hi) wb &= hi - k * 64 >= 64 ? ~0ull : (1ull << (hi - k * 64)) - 1;
            for (; wb && !(n && !serve); wb &= wb - 1) {
                uint32_t i = k * 64 + (uint32_t)__builtin_ctzll(wb);
                int m = rpcool__visit(w, set, i, serve);
                if (m && serve) rcp__store_relaxed(&set->rr, i + 1);
                n += m;
            }
        }
    }
    return n;
}

/* Bits a client set beyond the channel's slots: cleared, never followed. */
static void rpcool__ready_bogus(rpcool_server *s, struct rpcool__sset *set)
{
    uint32_t nw = (set->max_conns + 63) / 64;
    for (uint32_t t = 0; t < RPCOOL__RDY_TOP; t++) {
        uint64_t tb = rcp__load_relaxed(&set->rdy_top[t]), ok;
        ok = t * 64 >= nw ? 0 : nw - t * 64 >= 64 ? ~0ull : (1ull << (nw - t * 64)) - 1;
        if (tb & ~ok) {
            rcp__fetch_add(&s->st.bad_entries, 1u);
            __atomic_fetch_and(&set->rdy_top[t], ok, __ATOMIC_SEQ_CST);
        }
    }
    uint64_t last = set->max_conns % 64 ? (1ull << (set->max_conns % 64)) - 1 : ~0ull;
    if (rcp__load_relaxed(&set->rdy[nw - 1]) & ~last) {
        rcp__fetch_add(&s->st.bad_entries, 1u);
        __atomic_fetch_and(&set->rdy[nw - 1], last, __ATOMIC_SEQ_CST);
    }
}

/* One pass over the ready connections: serve their requests, or (serve == 0: about to sleep)
   trim their request bits and say whether any request waits. A pass starts after the
   connection the last one served last and goes round once (no busy client waits behind more
   than one pass of the others). It costs what the ready connections cost: the top words of the
   ready summary, then the connections flagged there. It announces the grace period it runs in
   (see rpcool__drain) and reads client heaps with faults contained by the worker's recovery
   point g. */
static int rpcool__pass(struct rpcool__worker *w, struct rpcool__sset *set, struct rpcool__guard *g,
                       int serve)
{
    rpcool_server *s = w->s;
    rpcool__ready_bogus(s, set);
    /* announce the grace period; a locked store only when it changed (rare: a drain began) */
    uint64_t gp = __atomic_load_n(&s->gp, __ATOMIC_SEQ_CST) + 1;
    if (rcp__load_relaxed(&w->gp) != gp) __atomic_store_n(&w->gp, gp, __ATOMIC_SEQ_CST);
    (void)g; /* containment is on all the time in a worker (rpcool__worker_run) */
    uint32_t start = rcp__load_relaxed(&set->rr);
    if (start >= set->max_conns) start = 0;
    int n = rpcool__pass_range(w, set, start, set->max_conns, serve);
    if (start && !(n && !serve)) n += rpcool__pass_range(w, set, 0, start, serve);
    return n; /* the announcement stays (see rpcool__drain) */
}

/* >>serve - server: serving threads, stop, close ----------------------------------------------- */

/* A serving loop's recovery point was reached by a fault: leave the guard, count the fault, and
   return the connection the worker was visiting (NULL if none), now no longer its own. */
static struct rpcool__sconn *rpcool__worker_faulted(struct rpcool__worker *w)
{
    rpcool__cur = NULL;
    rpcool__fault_unblock();
    rcp__store(&w->gp, 0ull);
    struct rpcool__sconn *sc = w->cur;
    rpcool__cur_set(w, NULL);
    rcp__fetch_add(&w->s->st.faults, 1u);
    return sc;
}

/* Serve until stopped or a fault. Polling: a pass, a pause, and once every 128 rounds the
   clock (timed housekeeping, the spin budget) and the CPU hints; a worker yields its CPU
   while idle only if a client posts from that CPU. Returns after a fault in the library's own
   reads of a client heap (a truncated file: SIGBUS): that connection is condemned, the
   server carries on; or of the channel file (truncated by a client): it is repaired. Faults
   are contained all along the loop, except inside handlers (their own recovery point) and
   shmheap calls (rpcool__contain_set). */
static void rpcool__worker_run(struct rpcool__worker *w)
{
    rpcool_server *s = w->s;
    struct rpcool__guard g;
    rpcool__guard_init(&g, NULL, NULL);
    if (sigsetjmp(g.jb, 0)) {
        struct rpcool__sconn *sc = rpcool__worker_faulted(w);
        if (sc) {
            rpcool__log(&s->log, RPCOOL_LOG_WARN, "%s: fault on a client heap (%s): dropping it",
                        s->name, sc->heap_name);
            rcp__store(&sc->dead, 1);
            rcp__store(&sc->condemned, 1u);
        } else {
            rpcool__chan_repair(s); /* not a client heap: the channel file */
        }
        rpcool__housekeep(s, 1, 0);
        return;
    }
    g.contain = 1;
    rpcool__cur = &g;
    uint64_t idle_since = 0;
    int share = 0;
    for (unsigned it = 1; !rcp__load(&s->stop); it++) {
        uint64_t now = 0;
        if (!(it & 127)) {
            now = rcp__now_ns();
            w->cpu = rpcool__cpu_bit();
            rpcool__cpu_mark(&s->ch->server_cpus, w->cpu);
            share = (rcp__load_relaxed(&s->ch->client_cpus) >> w->cpu) & 1;
        }
        rpcool__housekeep(s, 0, now);
        int n = rpcool__pass(w, &s->set, &g, 1);
        rpcool__crowd_note(s->ch, w, n, now);
        if (n) {
            idle_since = 0;
            continue;
        }
        if (share) sched_yield(); /* a client may be waiting for this CPU */
        else rcp__cpu_relax();
        if (!now) continue;
        if (!idle_since) idle_since = now;
        if (now - idle_since < s->spin_ns) continue;
        /* nothing for spin_ns: announce that we sleep, look once more, sleep */
        if (rcp__load_relaxed(&s->ch->crowd)) rcp__store_relaxed(&s->ch->crowd, 0u);
        __atomic_fetch_add(&s->ch->ssleepers, 1u, __ATOMIC_SEQ_CST);
        uint32_t seq = rcp__load(&s->ch->sdoor);
        rcp__full_fence();
        int wait = !rcp__load(&s->stop) && !rpcool__pass(w, &s->set, &g, 0);
        rcp__store(&w->gp, 0ull); /* a sleeper holds up no drain */
        if (wait) rcp__futex_wait(&s->ch->sdoor, seq, 0); /* reaping is the acceptor's */
        rcp__fetch_add(&s->ch->ssleepers, (uint32_t)-1);
        idle_since = 0;
        it = 127; /* read the clock next round: timed housekeeping may be due */
    }
    rcp__store(&w->gp, 0ull);
    rpcool__cur = NULL;
}

/* A serving thread, of any transport, joins its server: the watchdog holds its handlers to
   their time limits, rpcool_server_get_stats counts its calls, rpcool_server_close waits for it
   to leave. */
static void rpcool__worker_join(rpcool_server *s, struct rpcool__worker *w)
{
    memset(w, 0, sizeof *w);
    w->s = s;
    w->thread = pthread_self();
    rpcool__me = w;
    rpcool__altstack(); /* a handler's stack overflow can be contained */
    pthread_mutex_lock(&s->hk_lock);
    pthread_mutex_lock(&s->wk_lock);
    w->next = s->workers;
    s->workers = w;
    pthread_mutex_unlock(&s->wk_lock);
    pthread_mutex_unlock(&s->hk_lock);
}

static void rpcool__worker_leave(struct rpcool__worker *w)
{
    rpcool_server *s = w->s;
    pthread_mutex_lock(&s->hk_lock);
    pthread_mutex_lock(&s->wk_lock);
    for (struct rpcool__worker **pp = &s->workers; *pp; pp = &(*pp)->next)
        if (*pp == w) {
            *pp = w->next;
            break;
        }
    rcp__fetch_add(&s->st.calls, rcp__load_relaxed(&w->calls));
    pthread_mutex_unlock(&s->wk_lock);
    pthread_mutex_unlock(&s->hk_lock);
    rpcool__free(w->buf);
    rpcool__free(w->blk.p);
    rpcool__me = NULL;
}

static void rpcool__worker_loop(rpcool_server *s)
{
    struct rpcool__worker w, *outer = rpcool__me;
    rpcool__worker_join(s, &w);
    rpcool__pkeys(s, -1, 1); /* this thread may touch every connection heap */
    if (s->xtp) s->xtp->start(s); /* another transport's connections: its own threads */
    if (s->ptp) s->ptp->start(s);
    while (!rcp__load(&s->stop)) rpcool__worker_run(&w);
    rpcool__worker_leave(&w);
    rpcool__me = outer;
}

RPCOOL_API int rpcool_serve(rpcool_server *s)
{
    RPCOOL__HCHECK(s);
    if (!s) return RPCOOL_E_INVAL;
    rpcool__worker_loop(s);
    return 0;
}

static void *rpcool__thread_main(void *p)
{
    rpcool__worker_loop((rpcool_server *)p);
    return NULL;
}

RPCOOL_API int rpcool_server_start(rpcool_server *s, unsigned nthreads)
{
    RPCOOL__HCHECK(s);
    pthread_attr_t at;
    if (!s || nthreads == 0 || s->threads) return RPCOOL_E_INVAL;
    if (pthread_attr_init(&at)) return -ENOMEM;
    int r = pthread_attr_setstacksize(&at, s->stack_size); /* how deep handlers may recurse */
    s->threads = r ? NULL : (pthread_t *)rpcool__calloc(nthreads, sizeof *s->threads);
    if (!r && !s->threads) r = ENOMEM;
    for (unsigned i = 0; !r && i < nthreads; i++) {
        if ((r = pthread_create(&s->threads[i], &at, rpcool__thread_main, s))) {
            rpcool_server_stop(s);
            for (unsigned j = 0; j < i; j++) pthread_join(s->threads[j], NULL);
            rpcool__free(s->threads);
            s->threads = NULL;
            s->nthreads = 0;
            rcp__store(&s->stop, 0);
            break;
        }
        s->nthreads = i + 1;
    }
    pthread_attr_destroy(&at);
    return -r;
}

static int rpcool__ring_server(void *p)
{
    rpcool_server *s = (rpcool_server *)p;
    rcp__fetch_add(&s->ch->sdoor, 1u);
    rcp__futex_wake(&s->ch->sdoor, INT_MAX);
    return 0;
}

RPCOOL_API void rpcool_server_stop(rpcool_server *s)
{
    RPCOOL__HCHECK_VOID(s);
    if (!s) return;
    rcp__store(&s->stop, 1);
    if (s->xtp) s->xtp->stop(s);
    if (s->ptp) s->ptp->stop(s);
    if (rpcool__guarded(rpcool__ring_server, s, -1)) /* a client truncated the channel file */
        rpcool__chan_repair(s);
}

/* rpcool_serve_until_signal: its signals write their number into a pipe (async-signal-safe) */
static int rpcool__sig_wfd = -1;
static void rpcool__sig_note(int sig)
{
    unsigned char b = (unsigned char)sig;
    int e = errno;
    if (write(__atomic_load_n(&rpcool__sig_wfd, __ATOMIC_RELAXED), &b, 1) < 0) {}
    errno = e;
}

RPCOOL_API int rpcool_serve_until_signal(rpcool_server *s, unsigned nthreads)
{
    struct sigaction sa, old_int, old_term;
    struct pollfd pf;
    unsigned char b = 0;
    int p[2], r = 0, none = -1;
    if (!s) return RPCOOL_E_INVAL;
    RPCOOL__HCHECK(s);
    if (pipe2(p, O_CLOEXEC | O_NONBLOCK)) return -errno;
    if (!__atomic_compare_exchange_n(&rpcool__sig_wfd, &none, p[1], 0, __ATOMIC_SEQ_CST,
                                     __ATOMIC_SEQ_CST)) {
        close(p[0]);
        close(p[1]);
        return RPCOOL_E_AGAIN;
    }
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = rpcool__sig_note;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    if (!s->threads) r = rpcool_server_start(s, nthreads ? nthreads : 1);
    pf.fd = p[0];
    pf.events = POLLIN;
    while (!r && !rcp__load(&s->stop)) {
        pf.revents = 0;
        if (poll(&pf, 1, (int)RPCOOL_DEFAULT_PEER_CHECK_MS) > 0 && read(p[0], &b, 1) == 1) {
            r = b;
            rpcool__log(&s->log, RPCOOL_LOG_INFO, "%s: signal %d: stopping", s->name, r);
            break;
        }
    }
    rpcool_server_stop(s);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    __atomic_store_n(&rpcool__sig_wfd, -1, __ATOMIC_SEQ_CST);
    close(p[0]);
    close(p[1]);
    return r;
}

static int rpcool__chan_close(void *p)
{
    rpcool_server *s = (rpcool_server *)p;
    uint32_t n = (uint32_t)((s->map_len - RPCOOL__SLOTS_OFF) / sizeof *s->cs);
    struct flock fl;
    rcp__store(&s->ch->state, (uint32_t)RPCOOL__CH_CLOSED);
    /* then our lock goes: clients believe "closed" only when the lock confirms it (any client
       can write the header) */
    rpcool__lock_op(s->fd, 0, F_OFD_SETLK, F_UNLCK, &fl);
    rcp__full_fence();
    for (uint32_t i = 0; i < n; i++) {
        rcp__fetch_add(&s->cs[i].seq, 1u);
        rcp__futex_wake(&s->cs[i].seq, INT_MAX);
    }
    return 0;
}

static int rpcool__wake_client(void *p)
{
    struct rpcool__conn_hdr *hd = (struct rpcool__conn_hdr *)p;
    rcp__fetch_add(&hd->cdoor, 1u);
    rcp__futex_wake(&hd->cdoor, INT_MAX);
    return 0;
}

/* At close, after the channel is marked closed: clients inside rpcool_disconnect see it and
   leave; wait for them (up to about a second), then free every slot not held by a live
   client. Slots of accepted connections are skipped (done by the caller). Reads the channel
   file: guarded. */
static int rpcool__close_sweep(void *p)
{
    rpcool_server *s = (rpcool_server *)p;
    uint32_t n = (uint32_t)((s->map_len - RPCOOL__SLOTS_OFF) / sizeof *s->cs);
    for (int round = 0; round < 1000; round++) {
        int busy = 0;
        for (uint32_t i = 0; i < n && !busy; i++) {
            uint32_t st = rcp__load(&s->cs[i].state);
            if ((i < s->max_conns && rcp__load(&s->conns[i].state) != RPCOOL__SC_FREE) ||
                st == RPCOOL__CS_FREE)
                continue;
            busy = (st == RPCOOL__CS_CLAIMED || st == RPCOOL__CS_PENDING ||
                    st == RPCOOL__CS_CLOSING) &&
                   rpcool__lock_held(s->fd, 1 + (off_t)i) == 1;
        }
        if (!busy) break;
        usleep(1000);
    }
    for (uint32_t i = 0; i < n; i++)
        if (i >= s->max_conns || rcp__load(&s->conns[i].state) == RPCOOL__SC_FREE)
            rpcool__reclaim_stale(s, i);
    return 0;
}

/* rpcool_server_close with a handler that may not be ended still running: the channel closes
   (clients fail their calls with RPCOOL_E_CLOSED) and its files go, but the server's memory,
   its connection heaps and that thread stay: the handler may still use them. */
static int rpcool__close_stuck(rpcool_server *s)
{
    pthread_mutex_lock(&s->hk_lock);
    for (unsigned i = 0; i < s->nthreads; i++) {
        int left = 1;
        for (struct rpcool__worker *w = s->workers; w; w = w->next)
            if (pthread_equal(w->thread, s->threads[i])) left = 0;
        if (left) pthread_join(s->threads[i], NULL);
        else pthread_detach(s->threads[i]);
    }
    s->nthreads = 0;
    pthread_mutex_unlock(&s->hk_lock);
    if (rpcool__guarded(rpcool__chan_close, s, -1)) rpcool__chan_repair(s);
    unlink(s->path);
    rpcool__log(&s->log, RPCOOL_LOG_ERROR, "%s: closed, but a handler still runs after "
                "close_ms (%u ms): its thread, the connections and the server's memory stay",
                s->name, s->close_ms);
    return RPCOOL_E_TIMEOUT;
}

RPCOOL_API int rpcool_server_close(rpcool_server *s)
{
    if (!s) return RPCOOL_E_INVAL;
    RPCOOL__HCHECK(s);
    if (rpcool__me && rpcool__me->s == s) return RPCOOL_E_INVAL; /* from a handler of s */
    return rpcool__server_close(s);
}

/* close, the handle still open: it goes out of the handle table before its memory is freed */
static int rpcool__server_close(rpcool_server *s)
{
    rpcool__front_close(s);
    rpcool_server_stop(s);
    /* Serving threads (ours, and the caller's in rpcool_serve) leave after their handlers: wait
       close_ms for those, time limits holding meanwhile; then sandboxed handlers are ended; one
       of another mode still running RPCOOL__ABANDON_NS * 5 later is left to its thread. */
    uint64_t end = rcp__now_ns() + (uint64_t)s->close_ms * 1000000u;
    int stuck = 0;
    for (;;) {
        pthread_mutex_lock(&s->hk_lock);
        int busy = s->workers != NULL;
        pthread_mutex_unlock(&s->hk_lock);
        if (!busy) break;
        uint64_t now = rcp__now_ns();
        if (now >= end + 5ull * RPCOOL__ABANDON_NS) {
            stuck = 1;
            break;
        }
        rpcool__watch(s, now, now >= end);
        rpcool_server_stop(s);
        usleep(1000);
    }
    if (stuck) {
        rpcool__handle_take(s);
        return rpcool__close_stuck(s);
    }
    for (unsigned i = 0; i < s->nthreads; i++) pthread_join(s->threads[i], NULL);
    rpcool__free(s->threads);
    s->threads = NULL;
    if (s->xtp) s->xtp->close(s); /* its clients are told (RDMA: a BYE), its state goes */
    if (s->ptp) s->ptp->close(s);
    /* tell clients, wake those asleep, then drop every mapping */
    rpcool__pkeys(s, -1, 1);
    if (rpcool__guarded(rpcool__chan_close, s, -1)) rpcool__chan_repair(s);
    for (uint32_t i = 0; i < s->max_conns; i++) {
        struct rpcool__sconn *sc = &s->conns[i];
        if (rcp__load(&sc->state) == RPCOOL__SC_FREE) continue;
        rpcool__guarded(rpcool__wake_client, sc->hdr, 0); /* the heap may be truncated */
        rpcool__sconn_left(s, sc, RPCOOL_E_CLOSED);
        rpcool__pidfd_drop(s, sc);
        shmheap_close(sc->heap); /* the heap goes with its client (now, if it is dead) */
    }
    if (rpcool__guarded(rpcool__close_sweep, s, -1)) rpcool__chan_repair(s);
    for (int k = 0; k < s->npkeys; k++) shmheap_pkey_free(s->pkeys[k]);
    unlink(s->path); /* while we still hold the lock: nobody can have reopened the name */
    munmap(s->ch, s->map_len);
    rpcool__fd_track(s->fd, 0);
    close(s->fd);
    rpcool__fd_track(s->name_fd, 0);
    close(s->name_fd);
    rpcool__log(&s->log, RPCOOL_LOG_INFO, "%s: closed", s->name);
    rpcool__handle_take(s);
    rpcool__server_free(s);
    return 0;
}

RPCOOL_API int rpcool_server_get_stats(rpcool_server *s, rpcool_server_stats *st)
{
    RPCOOL__HCHECK(s);
    if (!s || !st) return RPCOOL_E_INVAL;
    pthread_mutex_lock(&s->wk_lock); /* the serving threads' own counts, then the departed's */
    uint64_t calls = 0;
    for (struct rpcool__worker *w = s->workers; w; w = w->next)
        calls += rcp__load_relaxed(&w->calls);
    st->calls = calls + rcp__load(&s->st.calls);
    pthread_mutex_unlock(&s->wk_lock);
    st->accepted = rcp__load(&s->st.accepted);
    st->closed = rcp__load(&s->st.closed);
    st->reaped = rcp__load(&s->st.reaped);
    st->faults = rcp__load(&s->st.faults);
    st->bad_entries = rcp__load(&s->st.bad_entries);
    st->ready = rcp__load(&s->st.ready);
    st->over_limit = rcp__load(&s->st.over_limit);
    st->over_budget = rcp__load(&s->st.over_budget);
    st->refused = rcp__load(&s->st.refused);
    st->dropped = rcp__load(&s->st.dropped);
    st->cancelled = rcp__load(&s->st.cancelled);
    st->server_pid = (uint32_t)getpid();
    st->max_conns = s->max_conns;
    st->conns = 0;
    for (uint32_t i = 0; i < s->max_conns; i++)
        if (rcp__load(&s->conns[i].state) != RPCOOL__SC_FREE) st->conns++;
    if (s->xtp && s->xtp->conns) st->conns += (unsigned)s->xtp->conns(s, NULL, 0, 0); /* RDMA */
    if (s->ptp) st->conns += (unsigned)s->ptp->conns(s, NULL, 0, 0);
    return 0;
}

/* >>handler - handler side --------------------------------------------------------------------- */

RPCOOL_API shmheap *rpcool_ctx_heap(rpcool_ctx *ctx) { return ctx->tp->heap(ctx); }

RPCOOL_API const rpcool_peer *rpcool_ctx_peer(const rpcool_ctx *ctx)
{
    return ctx->tp->peer(ctx);
}

RPCOOL_API void *rpcool_ctx_conn_user(const rpcool_ctx *ctx) { return ctx->tp->conn_user(ctx); }

RPCOOL_API int rpcool_ctx_cancelled(const rpcool_ctx *ctx) { return ctx->tp->cancelled(ctx); }

RPCOOL_API void *rpcool_ctx_alloc(rpcool_ctx *ctx, size_t size)
{
    return ctx->tp->alloc(ctx, size);
}

RPCOOL_API void rpcool_ctx_reply(rpcool_ctx *ctx, void *p, size_t len)
{
    ctx->ret = p;
    ctx->ret_len = len;
}
RPCOOL_API unsigned rpcool_ctx_safety(const rpcool_ctx *ctx) { return ctx->flags; }

RPCOOL_API int rpcool_ctx_ok(const rpcool_ctx *ctx, const void *p, size_t len)
{
    if (ctx->tp->in_range(ctx, p, len)) return 1;
    uintptr_t a = (uintptr_t)p, c = (uintptr_t)ctx->copy;
    return ctx->copy && a >= c && a <= c + ctx->copy_len && len <= c + ctx->copy_len - a;
}

RPCOOL_API void rpcool_ctx_fail(rpcool_ctx *ctx, int code)
{
    ctx->aborted = 1;
    ctx->abort_code = code;
    ctx->guard->contain = 0;
#ifdef RPCOOL__UNWIND
    if (ctx->guard->unwind) throw rpcool__unwind{code};
#endif
    siglongjmp(ctx->guard->jb, 1);
}

/* One checked read of len bytes: a call whose checked reads add up to more than its heap holds
   walks a cycle (or reads the same data over and over); a call over its time limit ends at
   its next checked read. One add and two compares. */
static void rpcool__spend(rpcool_ctx *ctx, size_t len)
{
    ctx->spent += len;
    if (RCP__UNLIKELY(ctx->spent > ctx->budget - 1)) /* budget 0: no bound */
        rpcool_ctx_fail(ctx, RPCOOL_E_BUDGET);
    if (ctx->w && RCP__UNLIKELY(rcp__load_relaxed(&ctx->w->expired) == ctx->call_no))
        rpcool_ctx_fail(ctx, RPCOOL_E_DEADLINE);
}

RPCOOL_API const void *rpcool_ctx_need(rpcool_ctx *ctx, const void *p, size_t len)
{
    if (!rpcool_ctx_ok(ctx, p, len)) rpcool_ctx_fail(ctx, RPCOOL_E_BADPTR);
    rpcool__spend(ctx, len);
    return p;
}

/* The checked accessors read the client's heap for the library, in a handler of any mode: a
   fault there ends the call with RPCOOL_E_FAULT instead of killing the server, and a SIGBUS
   also drops the connection. Does not return. */
static void rpcool__accessor_fault(rpcool_ctx *ctx, struct rpcool__guard *g)
{
    rpcool__cur = g->prev;
    rpcool__fault_unblock();
    rcp__fetch_add(&ctx->s->st.faults, 1u);
    if (g->sig == SIGBUS) ctx->tp->drop(ctx, "SIGBUS on its heap (truncated)");
    rpcool_ctx_fail(ctx, RPCOOL_E_FAULT);
}

static const char *rpcool__need_str(rpcool_ctx *ctx, const char *s)
{
    if (!rpcool_ctx_ok(ctx, s, 1)) rpcool_ctx_fail(ctx, RPCOOL_E_BADPTR);
    for (const char *q = s;; q++) {
        if (!rpcool_ctx_ok(ctx, q, 1)) rpcool_ctx_fail(ctx, RPCOOL_E_BADPTR);
        if (!*q) {
            rpcool__spend(ctx, (size_t)(q - s) + 1);
            return s;
        }
    }
}

RPCOOL_API const char *rpcool_ctx_need_str(rpcool_ctx *ctx, const char *s)
{
    struct rpcool__guard g;
    rpcool__guard_init(&g, rpcool__cur, NULL);
    if (sigsetjmp(g.jb, 0)) rpcool__accessor_fault(ctx, &g);
    g.contain = 1;
    rpcool__cur = &g;
    s = rpcool__need_str(ctx, s); /* rpcool_ctx_fail jumps past us: the handler's guard restores */
    rpcool__cur = g.prev;
    return s;
}

/* >>client - client: the shared-memory transport, call slots ----------------------------------- */

/* 0 if the server serves us, else why not (sticky in c->dead, or the transport's word). */
static int rpcool__server_gone(rpcool_conn *c)
{
    int r = rcp__load(&c->dead);
    return r ? r : c->tp->gone(c);
}

/* 0 if the server serves our epoch, else why not. */
static int rpcool__shm_gone(rpcool_conn *c)
{
    int r = 0;
    /* Any client can write the channel header: a changed epoch or a "closed" state is believed
       only when the server's lock confirms it (a closing server marks the channel closed, then
       lets its lock go; a new server makes a new channel). The lock is tested at once then. */
    int odd = rcp__load(&c->ch->epoch) != c->epoch || rcp__load(&c->ch->state) == RPCOOL__CH_CLOSED;
    if (odd && rpcool__lock_held(c->fd, 0) == 0)
        r = rcp__load(&c->ch->state) == RPCOOL__CH_CLOSED ? RPCOOL_E_CLOSED : RPCOOL_E_PEERDEAD;
    else if (rcp__load(&c->cs->state) == RPCOOL__CS_DROPPED) r = RPCOOL_E_DROPPED;
    else if (odd) return 0;
    else {
        /* the lock test is a system call: at most once per peer_check_ms */
        uint64_t now = rcp__now_ns(), last = rcp__load_relaxed(&c->last_check);
        if (now - last < (uint64_t)c->peer_check_ms * 1000000u) return 0;
        rcp__store_relaxed(&c->last_check, now);
        if (rpcool__lock_held(c->fd, 0) == 0) r = RPCOOL_E_PEERDEAD;
    }
    if (r) rcp__store(&c->dead, r);
    return r;
}

static int rpcool__shm_seal(rpcool_conn *c, const struct rpcool__call *call, unsigned *flags,
                            const void **sp, size_t *sn);
static void rpcool__p_ring(rpcool_conn *c);
static void rpcool__p_sleep(rpcool_conn *c, uint64_t ns);

/* Ring the server's doorbell: its futex, or in a pod a datagram to its socket. */
static void rpcool__ring(rpcool_conn *c)
{
    rcp__fetch_add(&c->ch->sdoor, 1u);
    if (c->pod) rpcool__p_ring(c);
    else rcp__futex_wake(&c->ch->sdoor, 1);
}

/* Post the request in slot i (filled): flag it, wake a sleeping server. */
static int rpcool__shm_post(rpcool_conn *c, unsigned i)
{
    uint64_t bit = 1ull << i;
    rpcool__cpu_mark(&c->ch->client_cpus, rpcool__cpu_bit());
    /* seq_cst store, then seq_cst loads: the request is ordered before the look at the request
       bit (against rpcool__unflag) and at the sleepers (against a server's increment before
       its last look), with no separate fence. The bit is usually still set from the last call:
       then this line is only read. */
    __atomic_store_n(&c->hdr->req[i].state, RPCOOL__SL(c->pend[i].gen, RPCOOL__SL_REQ),
                     __ATOMIC_SEQ_CST);
    if (!(__atomic_load_n(&c->hdr->req_bits, __ATOMIC_SEQ_CST) & bit))
        __atomic_fetch_or(&c->hdr->req_bits, bit, __ATOMIC_SEQ_CST);
    rpcool__ready_mark(c->ch, c->index);
    if (__atomic_load_n(&c->ch->ssleepers, __ATOMIC_SEQ_CST)) rpcool__ring(c);
    return 0;
}

/* Send a call: seal its range if asked, fill its request slot, post it. */
static int rpcool__shm_send(rpcool_conn *c, const struct rpcool__call *call)
{
    unsigned i = call->slot, flags = call->flags;
    struct rpcool__req *sl = &c->hdr->req[i];
    const void *sp = NULL;
    size_t sn = 0;
    if (flags & RPCOOL_SEAL) {
        int r = rpcool__shm_seal(c, call, &flags, &sp, &sn);
        if (r) return r;
    }
    sl->fn = call->fn;
    sl->flags = flags;
    sl->arg = (uint64_t)(uintptr_t)call->arg;
    sl->arg_len = call->arg_len;
    sl->seal = (uint64_t)(uintptr_t)sp;
    sl->seal_len = sn;
    return rpcool__shm_post(c, i);
}

static unsigned rpcool__ncpus(void)
{
    static unsigned n; /* racy but idempotent */
    unsigned v = rcp__load_relaxed(&n);
    if (!v) {
        long k = sysconf(_SC_NPROCESSORS_ONLN);
        v = k > 0 ? (unsigned)k : 1u;
        rcp__store_relaxed(&n, v);
    }
    return v;
}

/* Wait until slot i is done: spin, then sleep in slices, checking the server between. The
   clock is read once per 64 spins, never before the first reply could have come. */
static int rpcool__shm_wait(rpcool_conn *c, unsigned i, uint64_t deadline)
{
    struct rpcool__resp *sl = &c->hdr->resp[i];
    const uint32_t done = RPCOOL__SL(c->pend[i].gen, RPCOOL__SL_DONE);
    uint64_t t0 = 0, now = 0;
    unsigned mine = rpcool__cpu_bit();
    int share = (rcp__load_relaxed(&c->ch->server_cpus) >> mine) & 1; /* a server polls here */
    /* the server finds more requests per pass than there are CPUs: their clients cannot all
       poll, the answer comes after theirs, and polling meanwhile only takes a CPU from the
       server and from them (a crowd that polls is unfair: the clients beside the server's
       CPU get it less often): sleep at once, woken in the server's order */
    if (rcp__load_relaxed(&c->ch->crowd) > rpcool__ncpus()) {
        now = rcp__now_ns();
        goto sleep;
    }
    for (unsigned k = 1; rcp__load(&sl->state) != done; k++) {
        if (share) { /* the server needs this CPU to answer: give it at once */
            sched_yield();
            if (k & 15) continue;
        } else {
            rcp__cpu_relax();
            if (k & 63) continue;
        }
        now = rcp__now_ns();
        if (!t0) t0 = now;
        else if (now - t0 >= c->spin_ns || (deadline && now >= deadline)) goto sleep;
        /* slow handler or a server without its own CPU (overcommitted host): share ours */
        if (!share && now - t0 >= 2000) sched_yield();
        share = (rcp__load_relaxed(&c->ch->server_cpus) >> mine) & 1;
    }
    /* answered while we spun; other clients of the channel answered in their sleep need a
       CPU to take theirs: give ours up once, or a spinning client keeps it and is served again
       and again while they wait (a busy pair alone sees none asleep: no system call) */
    if ((int32_t)rcp__load_relaxed(&c->ch->cwaiting) > 0) sched_yield();
    return 0;
sleep:
    for (;;) {
        uint64_t slice = (uint64_t)c->peer_check_ms * 1000000u;
        if (deadline) {
            if (now >= deadline) return RPCOOL_E_TIMEOUT;
            if (deadline - now < slice) slice = deadline - now;
        }
        __atomic_fetch_add(&c->hdr->csleepers, 1u, __ATOMIC_SEQ_CST);
        uint32_t seq = rcp__load(&c->hdr->cdoor);
        rcp__full_fence();
        rcp__fetch_add(&c->ch->cwaiting, 1u);
        if (rcp__load(&sl->state) != done) {
            if (c->pod) rpcool__p_sleep(c, slice); /* a datagram, queued if it came already */
            else rcp__futex_wait(&c->hdr->cdoor, seq, slice);
        }
        rcp__fetch_add(&c->ch->cwaiting, (uint32_t)-1);
        rcp__fetch_add(&c->hdr->csleepers, (uint32_t)-1);
        if (rcp__load(&sl->state) == done) return 0;
        int r = rpcool__server_gone(c);
        if (r) return r;
        /* still waiting: show the call again (another client may have cleared our bits in the
           channel, or the server's sleepers count) and ring; a server at work loses nothing */
        rpcool__ready_mark(c->ch, c->index);
        rpcool__ring(c);
        now = rcp__now_ns();
    }
}

static int rpcool__slot_get(rpcool_conn *c)
{
    uint64_t f = rcp__load(&c->free_bits);
    while (f) {
        unsigned i = (unsigned)__builtin_ctzll(f);
        if (rcp__cas(&c->free_bits, &f, f & ~(1ull << i))) return (int)i;
    }
    return RPCOOL_E_AGAIN;
}

/* Give a slot back. The shared slot keeps its old state: the next call bumps the generation. */
static void rpcool__slot_put(rpcool_conn *c, unsigned i)
{
    c->pend[i].gen = (c->pend[i].gen + 1) & 0x3fffffffu;
    rcp__store(&c->pend[i].pstate, (uint32_t)RPCOOL__P_FREE);
    rcp__fetch_or(&c->free_bits, 1ull << i);
}

/* The kept slot. Taking a slot from free_bits and giving it back are two locked operations,
   about as dear as the rest of a call's own work. So a thread whose synchronous call finds no
   slot kept keeps its slot afterwards (conn->hot names the thread's cell and the slot), and its
   later synchronous calls on that connection take no atomic operation for a slot: the cell's
   busy flag, a plain store, says when the thread uses it. The slot is not lost to others: a
   thread that finds every other slot in flight revokes it (rpcool__hot_revoke): it marks the
   word REVOKING, makes every thread of the process pass a full barrier (membarrier, expedited:
   the owner then needs no fence of its own, as in asymmetric Dekker), and takes the slot if
   the owner's flag is clear, else gives the word back (the owner is in a call: the slot is in
   flight). Without membarrier (an old kernel, a filter) no slot is kept. Under ThreadSanitizer
   the owner's flag store and word load are seq_cst instead (TSan does not see membarrier). */
#define RPCOOL__HOT_REVOKING 1u
#define RPCOOL__NCELLS 256 /* threads that keep slots at once; later ones keep none */
struct rpcool__cell {        /* static, one cache line each: a revoker may read a gone owner's */
    uint32_t busy;           /* 1 while its thread uses a kept slot */
    uint32_t used;           /* under rpcool__cell_lock: a live thread has it */
    char pad[56];
};
static struct rpcool__cell rpcool__cells[RPCOOL__NCELLS] __attribute__((aligned(64)));
static RCP__THREAD_LOCAL struct rpcool__cell *rpcool__my_cell;
static RCP__THREAD_LOCAL int rpcool__no_cell; /* none was free: this thread keeps no slot */
static pthread_mutex_t rpcool__cell_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_key_t rpcool__cell_key;
static int rpcool__hot_ok; /* 0 not tried, 1 membarrier registered, -1 no kept slots */
static pthread_once_t rpcool__hot_once = PTHREAD_ONCE_INIT;

static void rpcool__cell_exit(void *p)
{
    pthread_mutex_lock(&rpcool__cell_lock);
    ((struct rpcool__cell *)p)->used = 0;
    pthread_mutex_unlock(&rpcool__cell_lock);
}

static void rpcool__hot_init(void)
{
    int ok = pthread_key_create(&rpcool__cell_key, rpcool__cell_exit) == 0;
#if !RPCOOL__TSAN
    ok = ok && syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
#endif
    rcp__store(&rpcool__hot_ok, ok ? 1 : -1);
}

/* This thread's cell, made on first use; NULL if slots are not kept. */
static struct rpcool__cell *rpcool__cell(void)
{
    struct rpcool__cell *cl = rpcool__my_cell;
    if (cl || rpcool__no_cell) return cl;
    rpcool__no_cell = 1; /* until one is found */
    pthread_once(&rpcool__hot_once, rpcool__hot_init);
    if (rcp__load(&rpcool__hot_ok) != 1) return NULL;
    pthread_mutex_lock(&rpcool__cell_lock);
    for (int k = 0; k < RPCOOL__NCELLS && !cl; k++)
        if (!rpcool__cells[k].used) {
            cl = &rpcool__cells[k];
            cl->used = 1;
        }
    pthread_mutex_unlock(&rpcool__cell_lock);
    if (!cl) return NULL;
    if (pthread_setspecific(rpcool__cell_key, cl)) {
        rpcool__cell_exit(cl);
        return NULL;
    }
    rpcool__no_cell = 0;
    return rpcool__my_cell = cl;
}

static uint64_t rpcool__hot_word(const struct rpcool__cell *cl, unsigned i)
{
    return (uint64_t)(uintptr_t)cl << 8 | i;
}

/* A synchronous call: the slot this thread keeps on c, marked in use, or -1. */
static int rpcool__hot_take(rpcool_conn *c, struct rpcool__cell *cl)
{
    uint64_t w = rcp__load_relaxed(&c->hot);
    if (!cl || (w >> 8) != (uint64_t)(uintptr_t)cl || rcp__load_relaxed(&cl->busy))
        return -1; /* not ours, or ours in use (a call from a signal handler) */
#if RPCOOL__TSAN
    __atomic_store_n(&cl->busy, 1u, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&c->hot, __ATOMIC_SEQ_CST) == w) return (int)(w & 0xff);
#else
    rcp__store_relaxed(&cl->busy, 1u);
    __atomic_signal_fence(__ATOMIC_SEQ_CST); /* a revoker's membarrier orders the two */
    if (rcp__load_relaxed(&c->hot) == w) return (int)(w & 0xff);
#endif
    rcp__store(&cl->busy, 0u); /* being revoked */
    return -1;
}

/* A call on the kept slot ended: the slot stays with this thread for its next call. */
static void rpcool__hot_done(rpcool_conn *c, struct rpcool__cell *cl, unsigned i)
{
    c->pend[i].gen = (c->pend[i].gen + 1) & 0x3fffffffu;
    rcp__store(&c->pend[i].pstate, (uint32_t)RPCOOL__P_FREE);
    rcp__store(&cl->busy, 0u);
}

/* A call on the kept slot is abandoned (timeout, server gone): the slot stops being kept and
   goes back by the abandoned calls' way (rpcool__reclaim). */
static void rpcool__hot_drop(rpcool_conn *c, struct rpcool__cell *cl, unsigned i)
{
    uint64_t w = rpcool__hot_word(cl, i), cur;
    while ((cur = rcp__load(&c->hot)) == RPCOOL__HOT_REVOKING) sched_yield(); /* it gives it back */
    if (cur == w) rcp__cas(&c->hot, &w, 0ull);
    rcp__store(&cl->busy, 0u);
}

/* A synchronous call on slot i (from free_bits) ended: keep i for this thread if no slot is
   kept on c, else give it back. The slot is made ready before it is named in c->hot: from
   then on a revoker may take it. */
static void rpcool__hot_keep(rpcool_conn *c, struct rpcool__cell *cl, unsigned i)
{
    uint64_t z = 0;
    if (!cl || rcp__load_relaxed(&c->hot) != 0) {
        rpcool__slot_put(c, i);
        return;
    }
    c->pend[i].gen = (c->pend[i].gen + 1) & 0x3fffffffu;
    rcp__store(&c->pend[i].pstate, (uint32_t)RPCOOL__P_FREE);
    if (!rcp__cas(&c->hot, &z, rpcool__hot_word(cl, i))) rcp__fetch_or(&c->free_bits, 1ull << i);
}

/* Every slot of free_bits is in flight: take the kept slot if its thread is not using it. */
static int rpcool__hot_revoke(rpcool_conn *c)
{
    uint64_t w = rcp__load(&c->hot);
    if (w <= RPCOOL__HOT_REVOKING || !rcp__cas(&c->hot, &w, (uint64_t)RPCOOL__HOT_REVOKING))
        return -1;
    const struct rpcool__cell *cl = (const struct rpcool__cell *)(uintptr_t)(w >> 8);
#if !RPCOOL__TSAN
    /* a forked child is registered anew (the registration belongs to the address space) */
    if (syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) &&
        (errno != EPERM ||
         syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) ||
         syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0))) {
        rcp__store(&c->hot, w); /* cannot tell: leave it */
        return -1;
    }
#endif
    if (__atomic_load_n(&cl->busy, __ATOMIC_SEQ_CST)) {
        rcp__store(&c->hot, w);
        return -1;
    }
    rcp__store(&c->hot, 0ull);
    return (int)(w & 0xff);
}

/* >>seal - client: the seal table (RPCOOL_SEAL) ------------------------------------------------ */

/* A call seals its range read-only unless a range already sealed covers it (a repeated
   argument under batched release costs no system call); a finished call drops its use; after
   seal_batch finished sealed calls, or on rpcool_release, every range without users is made
   writable again in as few mprotect calls as merging allows. A range that overlaps one still
   in use stays sealed. All under seal_lock; relaxed calls never touch it. */

/* Unseal the idle ranges. Under seal_lock. */
static int rpcool__release_idle(rpcool_conn *c)
{
    size_t n = 0, keep = 0;
    int r;
    for (size_t i = 0; i < c->nseals; i++) {
        struct rpcool__seal *e = &c->seals[i];
        int idle = e->users == 0;
        for (size_t j = 0; idle && j < c->nseals; j++) {
            const struct rpcool__seal *u = &c->seals[j];
            if (u->users && (const char *)u->p < (const char *)e->p + e->len &&
                (const char *)e->p < (const char *)u->p + u->len)
                idle = 0; /* shares pages with a call in flight: later */
        }
        if (idle) {
            c->release[n].p = e->p;
            c->release[n++].len = e->len;
        } else {
            c->seals[keep++] = *e;
        }
    }
    c->seal_done = 0;
    if (!n) return 0;
    r = n == 1 ? shmheap_unseal(c->heap, c->release[0].p, c->release[0].len)
               : shmheap_unseal_batch(c->heap, c->release, n);
    rcp__store_relaxed(&c->nseals, keep);
    return r;
}

/* Seal [p, p+len) for a call; *key is the table entry the call now uses. */
static int rpcool__seal(rpcool_conn *c, const void *p, size_t len, shmheap_range *key)
{
    int r = 0;
    pthread_mutex_lock(&c->seal_lock);
    for (size_t i = 0; i < c->nseals; i++) {
        struct rpcool__seal *e = &c->seals[i];
        if ((const char *)p >= (const char *)e->p && len <= e->len &&
            (size_t)((const char *)p - (const char *)e->p) <= e->len - len) {
            e->users++; /* still read-only from an earlier call */
            key->p = e->p;
            key->len = e->len;
            pthread_mutex_unlock(&c->seal_lock);
            return 0;
        }
    }
    if (c->nseals == c->seal_cap) r = rpcool__release_idle(c); /* at most 64 are in use */
    if (!r && c->nseals == c->seal_cap) r = RPCOOL_E_AGAIN;
    if (!r) r = shmheap_seal(c->heap, p, len);
    if (!r) {
        struct rpcool__seal *e = &c->seals[c->nseals];
        e->p = key->p = p;
        e->len = key->len = len;
        e->users = 1;
        rcp__store_relaxed(&c->nseals, c->nseals + 1);
    }
    pthread_mutex_unlock(&c->seal_lock);
    return r;
}

/* A call that used seal entry key finished: drop its use, release the batch when it is full. */
static int rpcool__unseal(rpcool_conn *c, const void *p, size_t len)
{
    int r = 0;
    pthread_mutex_lock(&c->seal_lock);
    for (size_t i = 0; i < c->nseals; i++) {
        struct rpcool__seal *e = &c->seals[i];
        if (e->users && e->p == p && e->len == len) {
            e->users--;
            break;
        }
    }
    if (++c->seal_done >= c->seal_batch) r = rpcool__release_idle(c);
    pthread_mutex_unlock(&c->seal_lock);
    return r;
}

static void rpcool__drop_orphans(rpcool_conn *c);

RPCOOL_API int rpcool_release(rpcool_conn *c)
{
    RPCOOL__HCHECK(c);
    if (!c) return RPCOOL_E_INVAL;
    if (rcp__load_relaxed(&c->nseals) && rpcool__server_gone(c)) rpcool__drop_orphans(c);
    pthread_mutex_lock(&c->seal_lock);
    int r = rpcool__release_idle(c);
    pthread_mutex_unlock(&c->seal_lock);
    return r;
}

/* >>call - client: calls ----------------------------------------------------------------------- */

static int rpcool__done(rpcool_conn *c, unsigned i)
{
    return rcp__load(&c->hdr->resp[i].state) == RPCOOL__SL(c->pend[i].gen, RPCOOL__SL_DONE);
}

/* Take the reply of a done slot and give the slot back. */
static int rpcool__harvest_ex(rpcool_conn *c, unsigned i, void **ret, size_t *ret_len, int keep)
{
    struct rpcool__resp *sl = &c->hdr->resp[i];
    struct rpcool__pend *pd = &c->pend[i];
    int status = sl->status;
    void *rp = (void *)(uintptr_t)sl->ret;
    size_t rl = (size_t)sl->ret_len;
    if (rp && !shmheap_contains(c->heap, rp, rl)) {
        status = RPCOOL_E_BADPTR; /* never hand the caller a pointer out of its heap */
        rp = NULL;
    }
    if (!rp) rl = 0; /* no length without a block */
    if (pd->seal_p) {
        int r = rpcool__unseal(c, pd->seal_p, pd->seal_len);
        if (r && status >= 0) status = r;
        pd->seal_p = NULL;
    }
    if (ret) {
        *ret = rp;
        if (ret_len) *ret_len = rl;
    } else if (rp) {
        c->tp->drop_reply(c, rp);
    }
    if (!keep) rpcool__slot_put(c, i); /* else the caller gives it back or keeps it */
    return status;
}

static int rpcool__harvest(rpcool_conn *c, unsigned i, void **ret, size_t *ret_len)
{
    return rpcool__harvest_ex(c, i, ret, ret_len, 0);
}

/* Seal a call's range on shared memory (RPCOOL_SEAL): below a page the server copies it
   instead (*flags gains RPCOOL__SEAL_COPY); else the pages go read-only, and the call holds
   its seal entry (c->pend[slot].seal_p) until it is harvested. *sp, *sn: the range the server
   checks. */
static int rpcool__shm_seal(rpcool_conn *c, const struct rpcool__call *call, unsigned *flags,
                            const void **sp, size_t *sn)
{
    struct rpcool__pend *pd = &c->pend[call->slot];
    *sp = call->seal_p ? call->seal_p : call->arg;
    *sn = call->seal_p ? call->seal_len : call->arg_len;
    uintptr_t pg = (uintptr_t)rpcool__page_size();
    if (*sp && *sn && *sn < pg) {
        /* less than a page: the server copies it instead (RPCool's rule, copy below a page and
           seal above); no mprotect, and the sender cannot change what the handler reads */
        *flags |= RPCOOL__SEAL_COPY;
        return 0;
    }
    size_t usable = shmheap_usable_size(c->heap, *sp);
    if (!*sp || !*sn || ((uintptr_t)*sp & (pg - 1)) ||
        (usable && usable < ((*sn + pg - 1) & ~(size_t)(pg - 1))))
        return RPCOOL_E_INVAL; /* sealing would catch unrelated data on the same pages */
    shmheap_range key;
    int r = rpcool__seal(c, *sp, *sn, &key);
    if (r) return r;
    pd->seal_p = key.p;
    pd->seal_len = key.len;
    return 0;
}

/* Check a call and hand it to the transport as a call record. */
static int rpcool__post(rpcool_conn *c, unsigned i, unsigned fn, const void *arg, size_t len,
                        const rpcool_call_opts *o, unsigned discard)
{
    struct rpcool__call call;
    unsigned flags = c->safety | (o ? o->safety : 0);
    if (fn >= RPCOOL_MAX_HANDLERS || (flags & ~(unsigned)RPCOOL__KNOWN_FLAGS))
        return RPCOOL_E_INVAL;
    if ((arg || len) && !shmheap_contains(c->heap, arg, len)) return RPCOOL_E_BADPTR;
    c->pend[i].seal_p = NULL;
    call.slot = i;
    call.gen = c->pend[i].gen;
    call.fn = fn;
    call.flags = flags | discard;
    call.arg = arg;
    call.arg_len = len;
    call.seal_p = o ? o->seal_p : NULL;
    call.seal_len = o && o->seal_p ? o->seal_len : 0;
    call.ext = o ? o->extents : NULL;
    call.next = o && o->extents ? o->nextents : 0;
    call.deadline = c->pend[i].deadline;
    return c->tp->post(c, &call);
}

static uint64_t rpcool__deadline(rpcool_conn *c, const rpcool_call_opts *o)
{
    unsigned ms = o && o->timeout_ms ? o->timeout_ms : c->timeout_ms;
    return ms ? rcp__now_ns() + (uint64_t)ms * 1000000u : 0;
}

/* Drop a call's use of its seal entry, if it has one; the range is made writable by the next
   release of idle ranges. */
static void rpcool__seal_drop(rpcool_conn *c, struct rpcool__pend *pd)
{
    if (!pd->seal_p) return;
    pthread_mutex_lock(&c->seal_lock);
    for (size_t k = 0; k < c->nseals; k++) {
        struct rpcool__seal *e = &c->seals[k];
        if (e->users && e->p == pd->seal_p && e->len == pd->seal_len) {
            e->users--;
            break;
        }
    }
    pthread_mutex_unlock(&c->seal_lock);
    pd->seal_p = NULL;
}

/* A call we stop waiting for (why: the wait's error): the slot stays abandoned until the server
   answers (the reply is then freed, the seal dropped). A request is never taken back: a server
   thread claims it in its private memory, so the client cannot tell "not yet claimed" without
   a shared claim word that would cost every call a cache-line transfer. A call that timed out
   may still run. When the server is gone (it died, closed the channel or dropped us: no
   handler runs for us any more) nobody reads the argument: its seal goes at once. */
static void rpcool__abandon_why(rpcool_conn *c, unsigned i, int why)
{
    if (why != RPCOOL_E_TIMEOUT) rpcool__seal_drop(c, &c->pend[i]);
    rcp__fetch_add(&c->abandoned, 1u); /* the next call reclaims it once answered */
    rcp__store(&c->pend[i].pstate, (uint32_t)RPCOOL__P_ABANDONED);
}

static __attribute__((unused)) void rpcool__abandon(rpcool_conn *c, unsigned i)
{
    rpcool__abandon_why(c, i, RPCOOL_E_TIMEOUT); /* as after a timeout: the seal stays */
}

/* The server is gone: no abandoned call will be answered; drop their seals. */
static void rpcool__drop_orphans(rpcool_conn *c)
{
    for (unsigned i = 0; i < RPCOOL__NSLOTS; i++) {
        uint32_t exp = RPCOOL__P_ABANDONED;
        if (rcp__load_relaxed(&c->pend[i].pstate) != RPCOOL__P_ABANDONED || !c->pend[i].seal_p)
            continue;
        if (rcp__cas(&c->pend[i].pstate, &exp, (uint32_t)RPCOOL__P_TAKEN)) {
            rpcool__seal_drop(c, &c->pend[i]);
            rcp__store(&c->pend[i].pstate, (uint32_t)RPCOOL__P_ABANDONED);
        }
    }
}

/* Finish abandoned slots whose replies came. */
static void rpcool__reclaim(rpcool_conn *c)
{
    c->tp->poll(c);
    for (unsigned i = 0; i < RPCOOL__NSLOTS; i++) {
        uint32_t exp = RPCOOL__P_ABANDONED;
        if (rcp__load_relaxed(&c->pend[i].pstate) != RPCOOL__P_ABANDONED || !rpcool__done(c, i))
            continue;
        if (rcp__cas(&c->pend[i].pstate, &exp, (uint32_t)RPCOOL__P_TAKEN)) {
            rpcool__harvest(c, i, NULL, NULL);
            rcp__fetch_add(&c->abandoned, (uint32_t)-1);
        }
    }
}

RPCOOL_API int rpcool_call_ex(rpcool_conn *c, unsigned fn, const void *arg, size_t len,
                              const rpcool_call_opts *opts, void **ret, size_t *ret_len)
{
    RPCOOL__HCHECK(c);
    if (!c) return RPCOOL_E_INVAL;
    if (ret) *ret = NULL;
    if (ret_len) *ret_len = 0;
    /* a timed-out or cancelled call's slot, reply and seal come back once it is answered */
    if (RCP__UNLIKELY(rcp__load_relaxed(&c->abandoned))) rpcool__reclaim(c);
    uint64_t deadline = rpcool__deadline(c, opts);
    int i, r;
    struct rpcool__cell *cl = rpcool__cell();
    int hot = (i = rpcool__hot_take(c, cl)) >= 0;
    if (!hot) {
        /* 64 calls in flight: wait for one to end (a kept slot is asked for now and then: each
           try makes every thread of the process pass a barrier) */
        for (unsigned k = 0; (i = rpcool__slot_get(c)) < 0; k++) {
            if (!(k & 63) && (i = rpcool__hot_revoke(c)) >= 0) break;
            rpcool__reclaim(c);
            if ((r = rpcool__server_gone(c))) return r;
            if (deadline && rcp__now_ns() >= deadline) return RPCOOL_E_TIMEOUT;
            sched_yield();
        }
    }
    rcp__store_relaxed(&c->pend[i].pstate, (uint32_t)RPCOOL__P_SYNC); /* reclaim reads it */
    c->pend[i].deadline = deadline; /* a transport may wait for room to send up to it */
    if ((r = rpcool__post(c, (unsigned)i, fn, arg, len, opts, ret ? 0u : RPCOOL__DISCARD))) {
        if (hot) rpcool__hot_done(c, cl, (unsigned)i);
        else rpcool__slot_put(c, (unsigned)i);
        return r;
    }
    if ((r = c->tp->wait(c, (unsigned)i, deadline))) {
        if (hot) rpcool__hot_drop(c, cl, (unsigned)i);
        rpcool__abandon_why(c, (unsigned)i, r);
        return r;
    }
    r = rpcool__harvest_ex(c, (unsigned)i, ret, ret_len, 1);
    if (hot) rpcool__hot_done(c, cl, (unsigned)i);
    else rpcool__hot_keep(c, cl, (unsigned)i);
    return r;
}

RPCOOL_API int rpcool_call(rpcool_conn *c, unsigned fn, const void *arg, size_t len, void **ret,
                           size_t *ret_len)
{
    return rpcool_call_ex(c, fn, arg, len, NULL, ret, ret_len);
}

RPCOOL_API int rpcool_call_async(rpcool_conn *c, unsigned fn, const void *arg, size_t len,
                                 const rpcool_call_opts *opts, rpcool_callback *cb, void *user,
                                 uint64_t *id)
{
    RPCOOL__HCHECK(c);
    if (!c || (!cb && !id)) return RPCOOL_E_INVAL;
    int r = rpcool__server_gone(c);
    if (r) return r;
    if (RCP__UNLIKELY(rcp__load_relaxed(&c->abandoned))) rpcool__reclaim(c);
    int i = rpcool__slot_get(c);
    if (i < 0) {
        rpcool__reclaim(c);
        if ((i = rpcool__slot_get(c)) < 0 && (i = rpcool__hot_revoke(c)) < 0)
            return RPCOOL_E_AGAIN;
    }
    struct rpcool__pend *pd = &c->pend[i];
    pd->cb = cb;
    pd->user = user;
    pd->deadline = rpcool__deadline(c, opts); /* counted from the call, as in rpcool_call_ex */
    uint64_t myid = ((uint64_t)pd->gen << 8) | (unsigned)i;
    rcp__store(&pd->pstate, (uint32_t)RPCOOL__P_ASYNC);
    if ((r = rpcool__post(c, (unsigned)i, fn, arg, len, opts, 0))) {
        rpcool__slot_put(c, (unsigned)i);
        return r;
    }
    if (id) *id = myid;
    return 0;
}

/* The slot of an id whose call is still ours to finish, or an error. */
static int rpcool__slot_of(rpcool_conn *c, uint64_t id)
{
    unsigned i = (unsigned)(id & 0xff);
    if (i < RPCOOL__NSLOTS && c->cancelled[i] == id + 1) return RPCOOL_E_CANCELLED;
    if (i >= RPCOOL__NSLOTS || c->pend[i].gen != (uint32_t)(id >> 8) ||
        rcp__load(&c->pend[i].pstate) != RPCOOL__P_ASYNC || c->pend[i].cb)
        return RPCOOL_E_INVAL;
    return (int)i;
}

RPCOOL_API int rpcool_poll(rpcool_conn *c, uint64_t id, void **ret, size_t *ret_len)
{
    RPCOOL__HCHECK(c);
    if (!c) return RPCOOL_E_INVAL;
    int i = rpcool__slot_of(c, id);
    if (i < 0) return i;
    c->tp->poll(c);
    if (!rpcool__done(c, (unsigned)i)) {
        int r = rpcool__server_gone(c);
        if (!r && c->pend[i].deadline && rcp__now_ns() >= c->pend[i].deadline) r = RPCOOL_E_TIMEOUT;
        if (!r) return RPCOOL_E_AGAIN;
        uint32_t exp = RPCOOL__P_ASYNC;
        if (rcp__cas(&c->pend[i].pstate, &exp, (uint32_t)RPCOOL__P_TAKEN))
            rpcool__abandon_why(c, (unsigned)i, r);
        return r;
    }
    uint32_t exp = RPCOOL__P_ASYNC;
    if (!rcp__cas(&c->pend[i].pstate, &exp, (uint32_t)RPCOOL__P_TAKEN)) return RPCOOL_E_INVAL;
    return rpcool__harvest(c, (unsigned)i, ret, ret_len);
}

RPCOOL_API int rpcool_wait(rpcool_conn *c, uint64_t id, void **ret, size_t *ret_len)
{
    RPCOOL__HCHECK(c);
    if (!c) return RPCOOL_E_INVAL;
    int i = rpcool__slot_of(c, id);
    if (i < 0) return i;
    int r = c->tp->wait(c, (unsigned)i, c->pend[i].deadline);
    if (r) {
        uint32_t exp = RPCOOL__P_ASYNC;
        if (rcp__cas(&c->pend[i].pstate, &exp, (uint32_t)RPCOOL__P_TAKEN))
            rpcool__abandon_why(c, (unsigned)i, r);
        return r;
    }
    return rpcool_poll(c, id, ret, ret_len);
}

RPCOOL_API int rpcool_cancel(rpcool_conn *c, uint64_t id)
{
    RPCOOL__HCHECK(c);
    unsigned i = (unsigned)(id & 0xff);
    if (!c || i >= RPCOOL__NSLOTS || c->pend[i].gen != (uint32_t)(id >> 8)) return RPCOOL_E_INVAL;
    if (!c->tp->cancel) return RPCOOL_E_NOTSUP;
    uint32_t exp = RPCOOL__P_ASYNC;
    if (!rcp__cas(&c->pend[i].pstate, &exp, (uint32_t)RPCOOL__P_TAKEN)) return RPCOOL_E_INVAL;
    if (rpcool__done(c, i)) { /* finished already: nothing to stop */
        rpcool__harvest(c, i, NULL, NULL);
        return 1;
    }
    c->cancelled[i] = id + 1; /* polling or waiting on it now says so */
    c->tp->cancel(c, i);
    rpcool__abandon(c, i); /* as a timed-out call: its handler may still read the argument */
    return 0;
}

static void rpcool__shm_cancel(rpcool_conn *c, unsigned i)
{
    rcp__store(&c->hdr->req[i].cancel, RPCOOL__SL(c->pend[i].gen, RPCOOL__SL_REQ));
}

RPCOOL_API int rpcool_progress(rpcool_conn *c)
{
    RPCOOL__HCHECK(c);
    if (!c) return RPCOOL_E_INVAL;
    int n = 0, waiting = 0;
    uint64_t now = 0;
    rpcool__reclaim(c);
    for (unsigned i = 0; i < RPCOOL__NSLOTS; i++) {
        struct rpcool__pend *pd = &c->pend[i];
        if (rcp__load(&pd->pstate) != RPCOOL__P_ASYNC || !pd->cb) continue;
        if (!rpcool__done(c, i)) {
            if (pd->deadline && (now ? now : (now = rcp__now_ns())) >= pd->deadline) {
                uint32_t exp = RPCOOL__P_ASYNC; /* timed out: the callback gets RPCOOL_E_TIMEOUT */
                if (!rcp__cas(&pd->pstate, &exp, (uint32_t)RPCOOL__P_TAKEN)) continue;
                rpcool_callback *cb = pd->cb;
                void *user = pd->user;
                rpcool__abandon_why(c, i, RPCOOL_E_TIMEOUT);
                cb(c, RPCOOL_E_TIMEOUT, NULL, 0, user);
                n++;
                continue;
            }
            waiting = 1;
            continue;
        }
        uint32_t exp = RPCOOL__P_ASYNC;
        if (!rcp__cas(&pd->pstate, &exp, (uint32_t)RPCOOL__P_TAKEN)) continue;
        rpcool_callback *cb = pd->cb;
        void *user = pd->user, *rp = NULL;
        size_t rl = 0;
        int st = rpcool__harvest(c, i, &rp, &rl);
        cb(c, st, rp, rl, user);
        n++;
    }
    if (waiting && n == 0) {
        int r = rpcool__server_gone(c);
        if (r) return r;
    }
    return n;
}

/* >>connect - client: connect, disconnect, heap ------------------------------------------------ */

/* Open and map the channel the record d names, and check that its server serves it: 0,
   RPCOOL_E_NOCHANNEL (not that channel, or not served: worth another look) or another error.
   Sets c->fd (closed again on failure). */
static int rpcool__chan_map(rpcool_conn *c, const struct rpcool__rdv *d)
{
    char proc[64];
    struct stat st;
    void *m;
    int r = RPCOOL_E_NOCHANNEL, seals;
    snprintf(proc, sizeof proc, "/proc/%u/fd/%d", d->server_pid, d->fd);
    /* the server's descriptor: needs the right to look into the server (same user) */
    c->fd = open(proc, O_RDWR | O_CLOEXEC);
    if (c->fd < 0) return errno == ENOENT ? RPCOOL_E_NOCHANNEL : -errno;
    if (fstat(c->fd, &st) || (uint64_t)st.st_ino != d->ino) goto fail_close; /* pid or fd reused */
    seals = fcntl(c->fd, F_GET_SEALS);
    c->map_len = rpcool__chan_bytes(d->max_conns);
    if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW) ||
        (size_t)st.st_size < c->map_len) {
        r = RPCOOL_E_PROTO; /* a file anyone could truncate under us: not a channel */
        goto fail_close;
    }
    m = mmap(NULL, c->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, c->fd, 0);
    if (m == MAP_FAILED) {
        r = -errno;
        goto fail_close;
    }
    madvise(m, c->map_len, MADV_DONTFORK); /* as the server's: keeps our lock byte ours */
    c->ch = (struct rpcool__chan_hdr *)m;
    c->epoch = d->epoch;
    if (rcp__load(&c->ch->magic) != RPCOOL__CH_MAGIC || c->ch->version != RPCOOL__VERSION ||
        rcp__load(&c->ch->epoch) != d->epoch || rcp__load(&c->ch->state) != RPCOOL__CH_OPEN ||
        rpcool__lock_held(c->fd, 0) != 1) {
        munmap(m, c->map_len);
        goto fail_close;
    }
    return 0;
fail_close:
    close(c->fd);
    c->fd = -1;
    return r;
}

/* Find the channel through its name file. A name file that is not a valid record (being
   rewritten, or damaged by a client) while a live server holds the name is looked at again
   until timeout_ms. */
static int rpcool__chan_find(rpcool_conn *c, const char *channel, unsigned timeout_ms)
{
    char path[RPCOOL__NAME_MAX + 32];
    struct rpcool__rdv d;
    uint64_t deadline = rcp__now_ns() + (uint64_t)timeout_ms * 1000000u;
    int r;
    rpcool__path(path, sizeof path, channel);
    int nfd = open(path, O_RDONLY | O_CLOEXEC);
    if (nfd < 0) return errno == ENOENT ? RPCOOL_E_NOCHANNEL : -errno;
    for (;;) {
        r = RPCOOL_E_NOCHANNEL;
        if (pread(nfd, &d, sizeof d, 0) == (ssize_t)sizeof d && d.magic == RPCOOL__RDV_MAGIC &&
            d.version == RPCOOL__VERSION && d.max_conns > 0 && d.max_conns <= RPCOOL_MAX_CONNS &&
            d.fd >= 0)
            r = rpcool__chan_map(c, &d);
        if (r != RPCOOL_E_NOCHANNEL || rpcool__lock_held(nfd, 0) != 1 || rcp__now_ns() >= deadline)
            break;
        usleep(1000);
    }
    close(nfd);
    return r;
}

static __attribute__((unused)) int rpcool__chan_attach(rpcool_conn *c, const char *channel)
{
    return rpcool__chan_find(c, channel, RPCOOL_DEFAULT_CONNECT_TIMEOUT_MS);
}

/* A channel slot: its lock byte first (so a claimed slot always has a live owner), then the
   slot itself. */
static __attribute__((unused)) int rpcool__slot_claim(rpcool_conn *c)
{
    struct rpcool__chan_slot *slots =
        (struct rpcool__chan_slot *)((char *)c->ch + RPCOOL__SLOTS_OFF);
    uint32_t n = c->ch->max_conns;
    if ((size_t)n > (c->map_len - RPCOOL__SLOTS_OFF) / sizeof *slots) return RPCOOL_E_PROTO;
    for (uint32_t i = 0; i < n; i++) {
        if (rcp__load(&slots[i].state) != RPCOOL__CS_FREE || rpcool__lock_try(c->fd, 1 + (off_t)i))
            continue;
        uint32_t exp = RPCOOL__CS_FREE;
        if (rcp__cas(&slots[i].state, &exp, (uint32_t)RPCOOL__CS_CLAIMED)) {
            c->index = i;
            c->cs = &slots[i];
            return 0;
        }
        struct flock fl;
        rpcool__lock_op(c->fd, 1 + (off_t)i, F_OFD_SETLK, F_UNLCK, &fl);
    }
    return RPCOOL_E_NOSLOT;
}

/* Is the channel's name held by a live server? */
static int rpcool__name_held(const char *channel)
{
    char path[RPCOOL__NAME_MAX + 32];
    rpcool__path(path, sizeof path, channel);
    int nfd = open(path, O_RDONLY | O_CLOEXEC);
    if (nfd < 0) return 0;
    int r = rpcool__lock_held(nfd, 0) == 1;
    close(nfd);
    return r;
}

/* Ask the channel's acceptor for a connection (see the front door, >>server): its answer, and
   in fds the channel (with our slot's lock byte taken) and the heap. A socket with no server
   behind it is looked at again while a live server holds the name, until timeout_ms. fds:
   the channel, the heap, a hold on the heap's range in the pod. */
static int rpcool__front_ask(const char *channel, size_t heap_size, unsigned timeout_ms,
                             int wait_ready, struct rpcool__crep *rp, int fds[3])
{
    struct sockaddr_un a;
    struct rpcool__creq rq;
    uint64_t deadline = rcp__now_ns() + (uint64_t)timeout_ms * 1000000u;
    int sk, r = 0, nf = 0;
    ssize_t n;
    fds[0] = fds[1] = fds[2] = -1;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    rpcool__sock_path(a.sun_path, sizeof a.sun_path, channel);
    for (;;) {
        if ((sk = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0)) < 0) return -errno;
        if (connect(sk, (struct sockaddr *)&a, sizeof a) == 0) {
            r = 0; /* not the errno of an earlier try: that reached callers as "unknown error" */
            break;
        }
        r = errno;
        close(sk);
        if (r != ENOENT && r != ECONNREFUSED && r != EAGAIN) return -r;
        if ((!wait_ready && !rpcool__name_held(channel)) || rcp__now_ns() >= deadline)
            return RPCOOL_E_NOCHANNEL;
        usleep(wait_ready ? 5000 : 1000);
    }
    memset(&rq, 0, sizeof rq);
    rq.magic = RPCOOL__CREQ_MAGIC;
    rq.version = RPCOOL__VERSION;
    rq.heap_size = heap_size;
    rq.pid = (uint32_t)getpid();
    if (send(sk, &rq, sizeof rq, MSG_NOSIGNAL) != (ssize_t)sizeof rq) {
        r = RPCOOL_E_NOCHANNEL; /* the server went */
        goto out;
    }
    for (;;) {
        uint64_t now = rcp__now_ns();
        struct pollfd pf = {sk, POLLIN, 0};
        int pr = poll(&pf, 1, now < deadline ? (int)((deadline - now) / 1000000u) + 1 : 0);
        if (pr == 1) break;
        if (pr < 0 && errno == EINTR) continue;
        r = RPCOOL_E_TIMEOUT;
        goto out;
    }
    {
        struct iovec iov = {rp, sizeof *rp};
        union {
            struct cmsghdr h;
            char b[CMSG_SPACE(4 * sizeof(int))];
        } cm;
        struct msghdr mh;
        rpcool__msg_init(&mh, &iov, cm.b, sizeof cm.b);
        n = recvmsg(sk, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
        for (struct cmsghdr *ch = n >= 0 ? CMSG_FIRSTHDR(&mh) : NULL; ch;
             ch = CMSG_NXTHDR(&mh, ch)) {
            if (ch->cmsg_level != SOL_SOCKET || ch->cmsg_type != SCM_RIGHTS) continue;
            size_t k = (ch->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t j = 0; j < k; j++) {
                int fd;
                memcpy(&fd, CMSG_DATA(ch) + j * sizeof(int), sizeof fd);
                if (nf < 3) fds[nf++] = fd;
                else close(fd);
            }
        }
    }
    if (n <= 0) r = RPCOOL_E_NOCHANNEL; /* closed without an answer: the server closes */
    else if (n != (ssize_t)sizeof *rp || rp->magic != RPCOOL__CREP_MAGIC ||
             rp->version != RPCOOL__VERSION || rp->status > 0)
        r = RPCOOL_E_PROTO;
    else if (rp->status) r = rp->status;
    else if (nf != 3) r = RPCOOL_E_PROTO;
out:
    if (r)
        for (int j = 0; j < nf; j++) close(fds[j]), fds[j] = -1;
    close(sk);
    return r;
}

/* The channel's mapping for a connection whose channel descriptor is fd (stat st): the one
   this process has already (another connection to the same channel), else a new one. A
   mapping keeps the open file description it was made from, with any lock on it: so
   rpcool_disconnect releases its slot's lock byte explicitly instead of by closing, and a
   child does not inherit channel mappings (MADV_DONTFORK). NULL with *err on failure. */
static void *rpcool__chmap_get(int fd, const struct stat *st, size_t len, int *err)
{
    struct rpcool__chmap *e, *n;
    void *m;
    pthread_once(&rpcool__fork_once, rpcool__fork_init);
    pthread_mutex_lock(&rpcool__chmaps_lock);
    for (e = rpcool__chmaps; e; e = e->next)
        if (e->dev == (uint64_t)st->st_dev && e->ino == (uint64_t)st->st_ino && e->len == len)
            break;
    if (e) {
        e->refs++;
        pthread_mutex_unlock(&rpcool__chmaps_lock);
        return e->m;
    }
    pthread_mutex_unlock(&rpcool__chmaps_lock);
    m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        *err = -errno;
        return NULL;
    }
    madvise(m, len, MADV_DONTFORK); /* as the server's: keeps our lock bytes ours */
    if (!(n = (struct rpcool__chmap *)rpcool__calloc(1, sizeof *n))) {
        munmap(m, len);
        *err = -ENOMEM;
        return NULL;
    }
    n->dev = (uint64_t)st->st_dev;
    n->ino = (uint64_t)st->st_ino;
    n->len = len;
    n->m = m;
    n->refs = 1;
    pthread_mutex_lock(&rpcool__chmaps_lock);
    n->next = rpcool__chmaps;
    rpcool__chmaps = n;
    pthread_mutex_unlock(&rpcool__chmaps_lock);
    return m;
}

static void rpcool__chmap_put(void *m, size_t len)
{
    struct rpcool__chmap **pp, *e = NULL;
    pthread_mutex_lock(&rpcool__chmaps_lock);
    for (pp = &rpcool__chmaps; *pp; pp = &(*pp)->next)
        if ((*pp)->m == m) {
            e = *pp;
            if (--e->refs == 0) *pp = e->next;
            break;
        }
    pthread_mutex_unlock(&rpcool__chmaps_lock);
    if (e && e->refs) return;
    munmap(m, len);
    rpcool__free(e);
}

/* Take what the acceptor gave: map the channel (a sealed memfd of the server's epoch) and the
   heap, and find our connection header in it. On failure both descriptors are closed, so our
   slot's lock goes and the server reclaims the connection as a dead client's. */
static int rpcool__conn_take(rpcool_conn *c, const struct rpcool__crep *rp, int fds[3])
{
    struct stat st;
    struct rpcool__conn_hdr *hd;
    void *m;
    int seals, r = RPCOOL_E_PROTO;
    c->fd = fds[0];
    if (rp->max_conns == 0 || rp->max_conns > RPCOOL_MAX_CONNS || rp->slot >= rp->max_conns)
        goto fail;
    c->map_len = rpcool__chan_bytes(rp->max_conns);
    seals = fcntl(c->fd, F_GET_SEALS);
    if (fstat(c->fd, &st) || seals < 0 ||
        (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW) ||
        (size_t)st.st_size < c->map_len)
        goto fail;
    if (!(m = rpcool__chmap_get(c->fd, &st, c->map_len, &r))) goto fail;
    c->ch = (struct rpcool__chan_hdr *)m;
    c->epoch = rp->epoch;
    /* a client may have scribbled on the header: believe it only with the server's lock */
    if ((rcp__load(&c->ch->magic) != RPCOOL__CH_MAGIC || c->ch->version != RPCOOL__VERSION ||
         rcp__load(&c->ch->epoch) != rp->epoch || rcp__load(&c->ch->state) != RPCOOL__CH_OPEN) &&
        rpcool__lock_held(c->fd, 0) != 1) {
        r = RPCOOL_E_NOCHANNEL;
        goto fail_map;
    }
    c->index = rp->slot;
    c->cs = (struct rpcool__chan_slot *)((char *)m + RPCOOL__SLOTS_OFF) + rp->slot;
    if ((r = shmheap_open_fd(fds[1], &c->hopts, &c->heap))) goto fail_map;
    close(fds[1]);
    fds[1] = -1;
    hd = (struct rpcool__conn_hdr *)(uintptr_t)rp->hdr;
    if (!hd || ((uintptr_t)hd & 127) || !shmheap_contains(c->heap, hd, sizeof *hd) ||
        rcp__load(&hd->magic) != RPCOOL__CONN_MAGIC || hd->version != RPCOOL__VERSION ||
        hd->nslots != RPCOOL__NSLOTS || hd->chan_slot != rp->slot || hd->epoch != rp->epoch) {
        r = RPCOOL_E_PROTO;
        goto fail_heap;
    }
    c->hdr = hd;
    c->pod_fd = fds[2];
    snprintf(c->heap_name, sizeof c->heap_name, "%.100s", shmheap_name(c->heap));
    return 0;
fail_heap:
    shmheap_close(c->heap);
    c->heap = NULL;
fail_map:
    rpcool__chmap_put(c->ch, c->map_len);
    c->ch = NULL;
fail:
    close(fds[0]);
    if (fds[1] >= 0) close(fds[1]);
    close(fds[2]);
    fds[0] = fds[1] = fds[2] = -1;
    c->fd = -1;
    return r;
}

static void rpcool__conn_free(rpcool_conn *c)
{
    rpcool__free(c->seals);
    rpcool__free(c->release);
    pthread_mutex_destroy(&c->seal_lock);
    rpcool__free(c);
}

RPCOOL_API int rpcool_connect(const char *channel, const rpcool_conn_opts *opts, rpcool_conn **out)
{
    rpcool_conn_opts o;
    rpcool_conn *c;
    unsigned connect_ms;
    int r;
    char where[128] = "";
    const char *rname = channel;
    if (!out) return RPCOOL_E_INVAL;
    *out = NULL;
    memset(&o, 0, sizeof o);
    if (opts) o = *opts;
    int rdma = channel ? rpcool__r_parse(channel, where, sizeof where, &rname) : 0;
    int pod = channel && !rdma && !strncmp(channel, "pod:", 4); /* the pod path only */
    if (rdma < 0) return rdma;
    if (pod) rname = channel + 4;
    if (o.transport == RPCOOL_TRANSPORT_RDMA) rdma = 1;
    else if (o.transport == RPCOOL_TRANSPORT_POD) pod = !rdma;
    else if (o.transport != RPCOOL_TRANSPORT_SHM) return RPCOOL_E_INVAL;
    if ((r = rpcool__check_name(rname))) return r;
    if (o.safety & ~(unsigned)RPCOOL__KNOWN_FLAGS) return RPCOOL_E_INVAL;
    if (!(c = (rpcool_conn *)rpcool__calloc(1, sizeof *c))) return -ENOMEM;
    c->tp = rdma ? rpcool__r_client_tp() : pod ? rpcool__p_client_tp() : rpcool__shm_client_tp();
    c->pod_fd = -1;
    c->safety = o.safety;
    c->timeout_ms = o.timeout_ms;
    c->spin_ns = o.spin_ns ? o.spin_ns : RPCOOL_DEFAULT_SPIN_NS;
    c->peer_check_ms = o.peer_check_ms ? o.peer_check_ms : RPCOOL_DEFAULT_PEER_CHECK_MS;
    c->disconnect_ms = o.disconnect_ms ? o.disconnect_ms : RPCOOL_DEFAULT_DISCONNECT_MS;
    c->seal_batch = o.seal_batch ? o.seal_batch : RPCOOL_DEFAULT_SEAL_BATCH;
    c->seal_cap = (size_t)(c->seal_batch < 1024 ? c->seal_batch : 1024) + RPCOOL__NSLOTS;
    c->hopts.pod = o.pod;
    c->hopts.log = o.log;
    c->hopts.log_user = o.log_user;
    c->log = rpcool__logger(o.log, o.log_user);
    c->hopts.size = o.heap_size ? o.heap_size : RPCOOL_DEFAULT_HEAP_SIZE;
    c->free_bits = ~0ull;
    pthread_mutex_init(&c->seal_lock, NULL);
    c->seals = (struct rpcool__seal *)rpcool__calloc(c->seal_cap, sizeof *c->seals);
    c->release = (shmheap_range *)rpcool__calloc(c->seal_cap, sizeof *c->release);
    if (!c->seals || !c->release) {
        r = -ENOMEM;
        goto fail_free;
    }
    connect_ms = o.connect_timeout_ms ? o.connect_timeout_ms : RPCOOL_DEFAULT_CONNECT_TIMEOUT_MS;
    r = c->tp->connect(c, where, rname, &o, connect_ms);
    if (r == RPCOOL_E_NOCHANNEL && !rdma && !pod && rpcool__p_device(&o)) { /* not here: the pod */
        c->tp = rpcool__p_client_tp();
        r = c->tp->connect(c, where, rname, &o, connect_ms);
    }
    if (r) goto fail_free;
    if ((r = rcp__handle_add(c))) {
        c->tp->disconnect(c);
        goto fail_free;
    }
    *out = c;
    return 0;
fail_free:
    rpcool__conn_free(c);
    return r;
}

/* The shared-memory transport's connect: ask the server's front door for a heap and a slot. */
static int rpcool__shm_connect(rpcool_conn *c, const char *where, const char *name,
                               const rpcool_conn_opts *o, unsigned connect_ms)
{
    struct rpcool__crep rp;
    int fds[3];
    (void)where;
    int r = rpcool__front_ask(name, o->heap_size, connect_ms, o->wait_ready, &rp, fds);
    if (r || (r = rpcool__conn_take(c, &rp, fds))) return r;
    rpcool__fd_track(c->fd, 1);
    rpcool__log(&c->log, RPCOOL_LOG_INFO, "connected to %s (slot %u, heap %s)", name, c->index,
                c->heap_name);
    return 0;
}

RPCOOL_API int rpcool_disconnect(rpcool_conn *c)
{
    if (!c) return RPCOOL_E_INVAL;
    RPCOOL__HCHECK(c);
    c->tp->disconnect(c);
    rpcool__handle_take(c);
    rpcool__conn_free(c);
    return 0;
}

/* The shared-memory transport's disconnect: release the seals, tell the server and wait until
   it unmapped our heap (unless it is gone), then unmap everything. */
static void rpcool__shm_disconnect(rpcool_conn *c)
{
    rpcool_release(c);
    rpcool__server_gone(c); /* notes a drop (sticky) before our CLOSING hides it */
    /* tell the server and wait until it unmapped our heap, unless it is gone */
    uint32_t seq = rcp__load(&c->cs->seq);
    rcp__store(&c->cs->state, (uint32_t)RPCOOL__CS_CLOSING);
    rcp__fetch_add(&c->ch->pending, 1u);
    rcp__full_fence();
    rcp__fetch_add(&c->ch->sdoor, 1u);
    rcp__futex_wake(&c->ch->sdoor, 1);
    uint64_t deadline = rcp__now_ns() + (uint64_t)c->disconnect_ms * 1000000u;
    for (uint64_t now = rcp__now_ns(); rcp__load(&c->cs->state) == RPCOOL__CS_CLOSING &&
                                       !rpcool__server_gone(c) && now < deadline;
         now = rcp__now_ns()) {
        uint64_t nap = (uint64_t)c->peer_check_ms * 1000000u;
        rcp__futex_wait(&c->cs->seq, seq, nap < deadline - now ? nap : deadline - now);
        seq = rcp__load(&c->cs->seq);
    }
    shmheap_close(c->heap);
    if (c->pod_fd >= 0) close(c->pod_fd); /* the heap's range in the pod may go */
    rpcool__chmap_put(c->ch, c->map_len);
    rpcool__fd_track(c->fd, 0);
    /* our lock byte goes now, even if the channel stays mapped through this descriptor for
       other connections of ours (see rpcool__chmap_get) */
    struct flock fl;
    rpcool__lock_op(c->fd, 1 + (off_t)c->index, F_OFD_SETLK, F_UNLCK, &fl);
    close(c->fd);
}

RPCOOL_API shmheap *rpcool_heap(rpcool_conn *c)
{
    RPCOOL__HCHECK_PTR(c);
    return c ? c->heap : NULL;
}
RPCOOL_API void *rpcool_alloc(rpcool_conn *c, size_t size)
{
    RPCOOL__HCHECK_PTR(c);
    return c ? shmheap_malloc(c->heap, size) : NULL;
}
RPCOOL_API int rpcool_free(rpcool_conn *c, void *p)
{
    RPCOOL__HCHECK(c);
    if (!p) return 0;
    if (!c) return RPCOOL_E_INVAL;
    if (c->tp->free(c, p)) return 0; /* a block of the transport's own (a reply region) */
    if (!shmheap_contains(c->heap, p, 1)) return SHMHEAP_E_FOREIGN; /* before any seal work */
    /* a block still sealed by a finished call: release first */
    if (rcp__load_relaxed(&c->nseals)) {
        pthread_mutex_lock(&c->seal_lock);
        for (size_t i = 0; i < c->nseals; i++)
            if ((const char *)p >= (const char *)c->seals[i].p &&
                (const char *)p < (const char *)c->seals[i].p + c->seals[i].len) {
                rpcool__release_idle(c);
                break;
            }
        /* Still sealed: the call holding it never finished (it timed out, or the server died).
           The caller gives the block up and with it that seal: shmheap_free writes to the block,
           which faulted on the read-only page. The call's harvest, if its reply ever comes,
           finds no entry to drop. */
        for (size_t i = 0; i < c->nseals; i++)
            if ((const char *)p >= (const char *)c->seals[i].p &&
                (const char *)p < (const char *)c->seals[i].p + c->seals[i].len) {
                shmheap_unseal(c->heap, c->seals[i].p, c->seals[i].len);
                c->seals[i--] = c->seals[c->nseals - 1];
                rcp__store_relaxed(&c->nseals, c->nseals - 1);
            }
        pthread_mutex_unlock(&c->seal_lock);
    }
    return shmheap_free(c->heap, p);
}
RPCOOL_API void *rpcool_alloc_pages(rpcool_conn *c, size_t size)
{
    RPCOOL__HCHECK_PTR(c);
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    if (!c || size > SIZE_MAX - pg) return NULL;
    return shmheap_aligned_alloc(c->heap, pg, (size + pg - 1) & ~(pg - 1));
}
RPCOOL_API char *rpcool_strdup(rpcool_conn *c, const char *s)
{
    RPCOOL__HCHECK_PTR(c);
    if (!c || !s) return NULL;
    size_t n = strlen(s) + 1;
    char *p = (char *)shmheap_malloc(c->heap, n);
    if (p) memcpy(p, s, n);
    return p;
}

/* >>shm - the shared-memory transport: a slot's call, the server's operations, the tables ------ */

/* Serve request gen of slot i of a connection, claimed by this thread: its request line read
   once (the client may change it at any moment), then the one dispatch of every transport. */
static void rpcool__serve_slot(struct rpcool__worker *w, struct rpcool__sconn *sc, unsigned i,
                               uint32_t gen)
{
    const struct rpcool__req *sl = &sc->hdr->req[i];
    struct rpcool__incoming in;
    in.fn = rcp__load_relaxed(&sl->fn);
    in.flags = rcp__load_relaxed(&sl->flags);
    in.arg = (void *)(uintptr_t)rcp__load_relaxed(&sl->arg);
    in.arg_len = (size_t)rcp__load_relaxed(&sl->arg_len);
    in.seal = (const void *)(uintptr_t)rcp__load_relaxed(&sl->seal);
    in.seal_len = (size_t)rcp__load_relaxed(&sl->seal_len);
    in.slot = i;
    in.gen = gen;
    in.conn = sc;
    in.cookie = (uintptr_t)&w->blk; /* the blocks its handler allocates */
    in.budget = sc->size;
    in.pkey = sc->pkey;
    in.logged = &sc->logged;
    in.pid = sc->pid;
    in.who = sc->heap_name;
    rpcool__dispatch(w, rpcool__shm_server_tp(), &in);
}

/* Serve a connection no more and reclaim its heap once drained (see FAILURES: dropped). */
static void rpcool__condemn(rpcool_server *s, struct rpcool__sconn *sc, const char *why)
{
    rcp__store(&sc->dead, 1);
    rcp__store(&sc->condemned, 1u);
    rpcool__log(&s->log, RPCOOL_LOG_WARN, "%s: %s: dropping the connection", sc->heap_name, why);
}

static void rpcool__p_wake(const struct rpcool__pwake *pw);

/* Answer slot i: the response line, written last its state; a sleeping client is woken (by its
   futex, or in a pod by a datagram to its socket). */
static void rpcool__complete(const struct rpcool__sconn *sc, unsigned i, uint32_t gen, int status,
                             void *ret, size_t ret_len)
{
    struct rpcool__conn_hdr *hd = sc->hdr;
    struct rpcool__resp *sl = &hd->resp[i];
    sl->ret = (uint64_t)(uintptr_t)ret;
    sl->ret_len = ret_len;
    sl->status = status;
    rcp__store(&sl->state, RPCOOL__SL(gen, RPCOOL__SL_DONE));
    rcp__full_fence();
    if (rcp__load(&hd->csleepers)) {
        rcp__fetch_add(&hd->cdoor, 1u);
        if (sc->pw) rpcool__p_wake(sc->pw);
        else rcp__futex_wake(&hd->cdoor, INT_MAX);
    }
}

struct rpcool__free_args {
    shmheap *h;
    void **blk;
    unsigned n;
};

static int rpcool__free_fn(void *p)
{
    struct rpcool__free_args *a = (struct rpcool__free_args *)p;
    for (unsigned k = 0; k < a->n; k++) shmheap_free(a->h, a->blk[k]);
    return 0;
}

static struct rpcool__sconn *rpcool__shm_conn(const rpcool_ctx *ctx)
{
    return (struct rpcool__sconn *)ctx->conn;
}

/* The blocks of a call (ctx->cookie: the serving thread's record, or its deferred token's). */
static struct rpcool__blocks *rpcool__shm_blocks(const rpcool_ctx *ctx)
{
    return (struct rpcool__blocks *)ctx->cookie;
}

struct rpcool__alloc_args {
    shmheap *h;
    size_t size;
    void *p;
    int err;
};

static int rpcool__alloc_fn(void *p)
{
    struct rpcool__alloc_args *a = (struct rpcool__alloc_args *)p;
    a->p = shmheap_malloc(a->h, a->size);
    a->err = errno;
    return 0;
}

/* Remember a block the running handler (or a deferred call) allocated (see
   rpcool__blocks_settle). */
static int rpcool__block_add(struct rpcool__blocks *b, void *p)
{
    int rc = 0;
    if (b->lock) pthread_mutex_lock(b->lock);
    if (b->n == b->cap) {
        unsigned cap = b->cap ? 2 * b->cap : 16;
        void **nb = (void **)rpcool__calloc(cap, sizeof *nb);
        if (!nb) rc = -ENOMEM;
        else {
            if (b->n) memcpy(nb, b->p, b->n * sizeof *nb);
            rpcool__free(b->p);
            b->p = nb;
            b->cap = cap;
        }
    }
    if (!rc) b->p[b->n++] = p;
    if (b->lock) pthread_mutex_unlock(b->lock);
    return rc;
}

/* The blocks the handler allocated belong to its reply: a call that keeps no reply (failed,
   none, or discarded) frees them all. 1 if freeing faulted (a truncated heap). */
static int rpcool__blocks_settle(struct rpcool__sconn *sc, struct rpcool__blocks *b, int keep)
{
    if (b->lock) pthread_mutex_lock(b->lock);
    struct rpcool__free_args f = {sc->heap, b->p, keep ? 0u : b->n};
    b->n = 0;
    int fault = f.n && rpcool__guarded(rpcool__free_fn, &f, 1);
    if (b->lock) pthread_mutex_unlock(b->lock);
    return fault;
}

/* A reply block in the client's heap. */
static void *rpcool__shm_alloc(rpcool_ctx *ctx, size_t size)
{
    struct rpcool__sconn *sc = rpcool__shm_conn(ctx);
    struct rpcool__blocks *b = rpcool__shm_blocks(ctx);
    /* The library's own access to the client's heap, with faults contained whatever the
       handler's mode: a fault there (a SIGBUS for memory the kernel cannot provide) makes this
       fail and drops the client; it does not kill the server. */
    struct rpcool__alloc_args a = {sc->heap, size, NULL, 0};
    if (rpcool__guarded(rpcool__alloc_fn, &a, 1)) {
        rcp__fetch_add(&ctx->s->st.faults, 1u);
        rpcool__condemn(ctx->s, sc, "a fault on its heap (truncated?) in rpcool_ctx_alloc");
        errno = EFAULT;
        return NULL;
    }
    void *p = a.p;
    errno = a.err;
    /* The client held its heap's mutex for all of lock_timeout_ms, or wrote a holder into it that
       never lets go: serve it no more (as after a fault on its heap). Otherwise every request it
       queued would park a serving thread for that long, and a flood of them would starve every
       other client. Its heap goes when drained, as after a fault: once dropped, the client's
       death would no longer be noticed. */
    if (!p && errno == ETIMEDOUT) rpcool__condemn(ctx->s, sc, "its heap's mutex stays taken");
    if (p && b && rpcool__block_add(b, p)) { /* no room to remember it: give it back */
        shmheap_free(sc->heap, p);
        errno = ENOMEM;
        p = NULL;
    }
    return p;
}

static int rpcool__shm_in_range(const rpcool_ctx *ctx, const void *p, size_t len)
{
    return shmheap_contains(rpcool__shm_conn(ctx)->heap, p, len);
}

static shmheap *rpcool__shm_heap(rpcool_ctx *ctx) { return rpcool__shm_conn(ctx)->heap; }

static const rpcool_peer *rpcool__shm_peer(const rpcool_ctx *ctx)
{
    return &rpcool__shm_conn(ctx)->peer;
}

static void *rpcool__shm_conn_user(const rpcool_ctx *ctx) { return rpcool__shm_conn(ctx)->cuser; }

static int rpcool__shm_cancelled(const rpcool_ctx *ctx)
{
    return rcp__load_relaxed(&rpcool__shm_conn(ctx)->hdr->req[ctx->slot].cancel) ==
           RPCOOL__SL(ctx->gen, RPCOOL__SL_REQ);
}

static void rpcool__shm_drop(rpcool_ctx *ctx, const char *why)
{
    rpcool__condemn(ctx->s, rpcool__shm_conn(ctx), why);
}

/* A deferred call begins: the blocks its handler allocated so far, and those to come, go with
   the token (freed if the call fails or has no reply); the heap stays while it lives. */
static int rpcool__shm_hold(rpcool_ctx *ctx, int delta)
{
    if (delta > 0) {
        struct rpcool__blocks *from = rpcool__shm_blocks(ctx), *to = &ctx->dfr->blk;
        if (from->n) {
            to->p = (void **)rpcool__calloc(from->n, sizeof *to->p);
            if (!to->p) return -ENOMEM;
            memcpy(to->p, from->p, from->n * sizeof *to->p);
            to->n = to->cap = from->n;
            from->n = 0;
        }
        ctx->cookie = (uintptr_t)to;
    }
    rcp__fetch_add(&rpcool__shm_conn(ctx)->ndeferred, (uint32_t)delta);
    return 0;
}

struct rpcool__reply_args {
    rpcool_ctx *ctx;
    int status;
    void *p;
    size_t len;
};

static int rpcool__shm_complete_fn(void *arg)
{
    struct rpcool__reply_args *a = (struct rpcool__reply_args *)arg;
    rpcool__complete(rpcool__shm_conn(a->ctx), a->ctx->slot, a->ctx->gen, a->status, a->p,
                     a->len);
    return 0;
}

/* The answer goes to the response line. The serving thread writes it under its own recovery
   point (a fault there drops the connection it is in); a deferred reply, from any thread,
   under one of its own: faults contained, as in rpcool_ctx_alloc. */
static int rpcool__shm_reply(rpcool_ctx *ctx, int status, void *p, size_t len)
{
    struct rpcool__sconn *sc = rpcool__shm_conn(ctx);
    struct rpcool__blocks *b = rpcool__shm_blocks(ctx);
    int keep = status >= 0 && p && !(ctx->wflags & RPCOOL__DISCARD), fault = 0;
    if (!keep) {
        p = NULL;
        len = 0;
    }
    if (RCP__UNLIKELY(b->lock || b->n)) fault = rpcool__blocks_settle(sc, b, keep);
    if (RCP__UNLIKELY(fault)) {
        rcp__fetch_add(&ctx->s->st.faults, 1u);
        rpcool__condemn(ctx->s, sc, "a fault on its heap (truncated?) freeing a call's blocks");
    }
    if (!ctx->dfr) {
        rpcool__complete(sc, ctx->slot, ctx->gen, status, p, len);
        return fault;
    }
    struct rpcool__reply_args a = {ctx, status, p, len};
    if (fault) return 1;
    if (!rpcool__guarded(rpcool__shm_complete_fn, &a, 1)) return 0;
    rcp__fetch_add(&ctx->s->st.faults, 1u);
    rpcool__condemn(ctx->s, sc, "a fault on its heap in rpcool_deferred_reply");
    return 1;
}

static void rpcool__shm_poll(rpcool_conn *c) { (void)c; } /* replies are in place */
static void rpcool__shm_drop_reply(rpcool_conn *c, void *p) { shmheap_free(c->heap, p); }
static int rpcool__shm_free(rpcool_conn *c, void *p) { (void)c, (void)p; return 0; }

/* The client's side (its operations at >>client, >>call and >>connect; post is
   rpcool__shm_send, rpcool__shm_post being the step that publishes a filled slot). */
static const struct rpcool__client_tp rpcool__shm_client = {
    .name = "shm", .flags = 0, .connect = rpcool__shm_connect, .post = rpcool__shm_send,
    .wait = rpcool__shm_wait, .poll = rpcool__shm_poll, .gone = rpcool__shm_gone,
    .drop_reply = rpcool__shm_drop_reply, .free = rpcool__shm_free,
    .disconnect = rpcool__shm_disconnect, .cancel = rpcool__shm_cancel};
/* The server's own transport: the listener operations are rpcool_server_* themselves. */
static const struct rpcool__server_tp rpcool__shm_server = {
    .name = "shm", .flags = 0, .open = NULL, .start = NULL, .stop = NULL, .close = NULL,
    .conns = NULL, .alloc = rpcool__shm_alloc, .in_range = rpcool__shm_in_range,
    .heap = rpcool__shm_heap, .peer = rpcool__shm_peer, .conn_user = rpcool__shm_conn_user,
    .cancelled = rpcool__shm_cancelled, .drop = rpcool__shm_drop, .hold = rpcool__shm_hold,
    .reply = rpcool__shm_reply};
static const struct rpcool__client_tp *rpcool__shm_client_tp(void) { return &rpcool__shm_client; }
static const struct rpcool__server_tp *rpcool__shm_server_tp(void) { return &rpcool__shm_server; }

#ifdef RPCOOL__RDMA
#include "impl/rpcool/rdma.h"
#endif
#include "impl/rpcool/pod.h" /* the pod transport (>>p-dev >>p-server >>p-client >>p-tables) */
#include "impl/rpcool/defer.h" /* deferred replies (>>defer) */
#include "impl/rpcool/export.h" /* shared data (>>export >>x-remote) */
#ifdef RPCOOL_WITH_PROTOBUF_C
#define RPCOOL_PBC_IMPLEMENTATION
#include "impl/rpcool/pbc.h" /* protobuf-c services (>>pbc) */
#endif

/* >>builders - data builders ------------------------------------------------------------------- */

RPCOOL_API int rpcool_arena_init(rpcool_arena *a, shmheap *h, size_t bytes)
{
    if (!a || !h) return RPCOOL_E_INVAL;
    a->heap = h;
    a->base = a->cur = a->end = NULL;
    if (!bytes) return 0;
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    bytes = (bytes + pg - 1) & ~(pg - 1);
    void *p;
    int r = shmheap_alloc(h, bytes, pg, &p);
    if (r) return r;
    a->base = a->cur = (char *)p;
    a->end = a->base + bytes;
    return 0;
}

RPCOOL_API void *rpcool_arena_alloc(rpcool_arena *a, size_t size, size_t align)
{
    if (!a || !a->heap || (align & (align - 1))) return NULL;
    if (align == 0) align = 16;
    if (!a->base) return shmheap_aligned_alloc(a->heap, align, size ? size : 1);
    if (a->cur < a->base || a->cur > a->end) return NULL;
    uintptr_t p = ((uintptr_t)a->cur + align - 1) & ~(uintptr_t)(align - 1);
    if (p > (uintptr_t)a->end || size > (uintptr_t)a->end - p) return NULL;
    a->cur = (char *)p + size;
    return (void *)p;
}

RPCOOL_API size_t rpcool_arena_used(const rpcool_arena *a)
{
    return a ? (size_t)(a->cur - a->base) : 0;
}
RPCOOL_API void rpcool_arena_reset(rpcool_arena *a) { if (a) a->cur = a->base; }
RPCOOL_API void rpcool_arena_destroy(rpcool_arena *a)
{
    if (!a) return;
    if (a->base) shmheap_free(a->heap, a->base);
    a->base = a->cur = a->end = NULL;
}

/* Free a block only when the arena allocates straight from the heap. */
static void rpcool__arena_free(rpcool_arena *a, void *p)
{
    if (!a->base && p) shmheap_free(a->heap, p);
}

RPCOOL_API char *rpcool_arena_strndup(rpcool_arena *a, const char *s, size_t n)
{
    char *p = (char *)rpcool_arena_alloc(a, n + 1, 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = 0;
    }
    return p;
}
RPCOOL_API char *rpcool_arena_strdup(rpcool_arena *a, const char *s)
{
    return rpcool_arena_strndup(a, s, strlen(s));
}

RPCOOL_API rpcool_array *rpcool_array_new(rpcool_arena *a, size_t elem, size_t cap)
{
    if (!elem) return NULL;
    rpcool_array *arr = (rpcool_array *)rpcool_arena_alloc(a, sizeof *arr, 16);
    if (!arr) return NULL;
    arr->len = 0;
    arr->elem = elem;
    arr->cap = cap ? cap : 4;
    arr->items = rpcool_arena_alloc(a, arr->cap * elem, 16);
    if (!arr->items) {
        rpcool__arena_free(a, arr);
        return NULL;
    }
    return arr;
}

RPCOOL_API void *rpcool_array_push(rpcool_arena *a, rpcool_array *arr, const void *elem)
{
    if (arr->len == arr->cap) {
        void *n = rpcool_arena_alloc(a, (size_t)(arr->cap * 2 * arr->elem), 16);
        if (!n) return NULL;
        memcpy(n, arr->items, (size_t)(arr->len * arr->elem));
        rpcool__arena_free(a, arr->items);
        arr->items = n;
        arr->cap *= 2;
    }
    void *slot = (char *)arr->items + arr->len * arr->elem;
    memcpy(slot, elem, (size_t)arr->elem);
    arr->len++;
    return slot;
}

RPCOOL_API uint64_t rpcool_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    while (*s) h = (h ^ (unsigned char)*s++) * 1099511628211ull;
    return h ? h : 1;
}

RPCOOL_API rpcool_map *rpcool_map_new(rpcool_arena *a, size_t cap)
{
    size_t c = 8;
    while (c < cap * 2) c *= 2;
    rpcool_map *m = (rpcool_map *)rpcool_arena_alloc(a, sizeof *m, 16);
    if (!m) return NULL;
    m->len = 0;
    m->cap = c;
    m->e = (rpcool_map_entry *)rpcool_arena_alloc(a, c * sizeof *m->e, 16);
    if (!m->e) {
        rpcool__arena_free(a, m);
        return NULL;
    }
    memset(m->e, 0, c * sizeof *m->e);
    return m;
}

static rpcool_map_entry *rpcool__map_find(rpcool_map_entry *e, uint64_t cap, const char *key,
                                          uint64_t h)
{
    for (uint64_t i = h & (cap - 1);; i = (i + 1) & (cap - 1))
        if (!e[i].key || (e[i].hash == h && !strcmp(e[i].key, key))) return &e[i];
}

RPCOOL_API int rpcool_map_put(rpcool_arena *a, rpcool_map *m, const char *key, uint64_t val,
                              uint64_t *old)
{
    uint64_t h = rpcool_hash(key);
    if (old) *old = 0;
    if ((m->len + 1) * 4 > m->cap * 3) { /* grow at 75% */
        uint64_t nc = m->cap * 2;
        rpcool_map_entry *ne =
            (rpcool_map_entry *)rpcool_arena_alloc(a, (size_t)nc * sizeof *ne, 16);
        if (!ne) return SHMHEAP_E_FULL;
        memset(ne, 0, (size_t)nc * sizeof *ne);
        for (uint64_t i = 0; i < m->cap; i++)
            if (m->e[i].key) *rpcool__map_find(ne, nc, m->e[i].key, m->e[i].hash) = m->e[i];
        rpcool__arena_free(a, m->e);
        m->e = ne;
        m->cap = nc;
    }
    rpcool_map_entry *e = rpcool__map_find(m->e, m->cap, key, h);
    if (e->key) {
        if (old) *old = e->val;
        e->val = val;
        return 0;
    }
    char *k = rpcool_arena_strdup(a, key);
    if (!k) return SHMHEAP_E_FULL;
    e->hash = h;
    e->val = val;
    e->key = k;
    m->len++;
    return 0;
}

RPCOOL_API int rpcool_map_get(const rpcool_map *m, const char *key, uint64_t *val)
{
    rpcool_map_entry *e = rpcool__map_find(m->e, m->cap, key, rpcool_hash(key));
    if (!e->key) return 0;
    if (val) *val = e->val;
    return 1;
}

static int rpcool__map_get_checked(rpcool_ctx *ctx, const rpcool_map *m, const char *key,
                                   uint64_t *val);

RPCOOL_API int rpcool_map_get_checked(rpcool_ctx *ctx, const rpcool_map *m, const char *key,
                                      uint64_t *val)
{
    struct rpcool__guard g; /* as in rpcool_ctx_need_str */
    rpcool__guard_init(&g, rpcool__cur, NULL);
    if (sigsetjmp(g.jb, 0)) rpcool__accessor_fault(ctx, &g);
    g.contain = 1;
    rpcool__cur = &g;
    int r = rpcool__map_get_checked(ctx, m, key, val);
    rpcool__cur = g.prev;
    return r;
}

static int rpcool__map_get_checked(rpcool_ctx *ctx, const rpcool_map *m, const char *key,
                                   uint64_t *val)
{
    m = (const rpcool_map *)rpcool_ctx_need(ctx, m, sizeof *m);
    uint64_t cap = m->cap, h = rpcool_hash(key);
    if (!cap || (cap & (cap - 1)) || cap > (uint64_t)SIZE_MAX / sizeof *m->e)
        rpcool_ctx_fail(ctx, RPCOOL_E_BADPTR);
    const rpcool_map_entry *e = m->e;
    if (!rpcool_ctx_ok(ctx, e, (size_t)cap * sizeof *e)) rpcool_ctx_fail(ctx, RPCOOL_E_BADPTR);
    /* the budget counts what is read: each entry probed, each key compared */
    for (uint64_t n = 0, i = h & (cap - 1); n < cap; n++, i = (i + 1) & (cap - 1)) {
        rpcool__spend(ctx, sizeof *e);
        const char *k = e[i].key;
        if (!k) return 0;
        if (e[i].hash == h && !strcmp(rpcool__need_str(ctx, k), key)) {
            if (val) *val = e[i].val;
            return 1;
        }
    }
    return 0; /* a full table (never made by rpcool_map_put): not found */
}

#endif /* RPCOOL_IMPLEMENTATION */

/*
MIT License

Copyright (c) 2026 the rpcool authors

Permission is hereby granted, free of charge, to any person obtaining a copy of this software and
associated documentation files (the "Software"), to deal in the Software without restriction,
including without limitation the rights to use, copy, modify, merge, publish, distribute,
sublicense, and/or sell copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all copies or
substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING BUT
NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND
NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM,
DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM, OUT
OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
*/
