/* rpcool_pbc.c - a protobuf-c service (examples/proto/rpcool_pbc.proto) served over rpcool as
 * it is.
 *
 *   protoc-c --proto_path=examples/proto --c_out=examples/proto examples/proto/rpcool_pbc.proto
 *   cc -O2 -pthread -I. examples/rpcool_pbc.c -o pbc -lprotobuf-c && ./pbc [calls]
 *
 * The idea: the service functions below are plain protobuf-c code (replies built on the stack,
 * pointing at literals and into the input); rpcool_pbc_serve serves them, and the generated
 * stubs call them through rpcool_pbc_client_new's ProtobufCService. A message is passed as a
 * pointer into the connection heap: no pack, no unpack. The server runs as a program of its
 * own (this one, exec'd with "serve"): its descriptors lie elsewhere, which rpcool handles. */
// LIBS: -lprotobuf-c
// PROTO: proto/rpcool_pbc.proto
#define RPCOOL_WITH_PROTOBUF_C 1
#define RPCOOL_IMPLEMENTATION
#include "rpcool.h"
#include "proto/rpcool_pbc.pb-c.c"
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- the service: nothing here knows about rpcool */
static void book_find(PhoneBook_Service *svc, const Query *q, Book_Closure done, void *data)
{
    (void)svc;
    static const char *names[] = {"ada", "alan", "barbara", "grace", "alonzo"};
    Entry e[5], *pe[5];
    char phones[5][16];
    char *tags[] = {(char *)"friend", (char *)q->prefix}; /* a literal and the input's string */
    Book b = BOOK__INIT;
    for (int i = 0; i < 5; i++) {
        if (strncmp(names[i], q->prefix, strlen(q->prefix))) continue;
        entry__init(&e[b.n_entries]);
        e[b.n_entries].name = (char *)names[i];
        snprintf(phones[b.n_entries], sizeof phones[0], "+1-555-01%02d", i);
        e[b.n_entries].phone = phones[b.n_entries];
        e[b.n_entries].n_tags = 2;
        e[b.n_entries].tags = tags;
        pe[b.n_entries] = &e[b.n_entries];
        b.n_entries++;
    }
    b.entries = pe;
    done(&b, data); /* everything on the stack: rpcool copies what the caller needs */
}

static void book_count(PhoneBook_Service *svc, const Book *b, Query_Closure done, void *data)
{
    (void)svc;
    char text[32];
    snprintf(text, sizeof text, "%zu entries", b->n_entries);
    Query q = QUERY__INIT;
    q.prefix = text;
    done(&q, data);
}

static PhoneBook_Service book = PHONE_BOOK__INIT(book_);

/* ---- the client's closures */
static void print_book(const Book *b, void *data)
{
    (void)data;
    if (!b) { printf("  call failed\n"); return; }
    for (size_t i = 0; i < b->n_entries; i++)
        printf("  %-8s %s [%s, %s]\n", b->entries[i]->name, b->entries[i]->phone,
               b->entries[i]->tags[0], b->entries[i]->tags[1]);
}

static void keep_count(const Query *q, void *data) { *(int *)data = q ? atoi(q->prefix) : -1; }

/* A plain handler beside the service: the client's last call stops the server, which then
   closes its channel (nothing is left in /dev/shm). */
static int quit(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx, (void)arg, (void)len;
    rpcool_server_stop((rpcool_server *)user);
    return 0;
}

int main(int argc, char **argv)
{
    enum { FN_BOOK = 1, FN_QUIT = 2 };
    char name[64];
    int rc;
    if (argc == 3 && !strcmp(argv[1], "serve")) { /* the server: the service, unchanged */
        rpcool_server *s;
        if ((rc = rpcool_server_open(argv[2], NULL, &s))) goto fail;
        rpcool_pbc_serve(s, FN_BOOK, &book.base, RPCOOL_SANDBOX); /* every pointer checked */
        rpcool_server_add_handler(s, FN_QUIT, quit, s, 0);
        rc = rpcool_serve(s); /* until FN_QUIT */
        rpcool_server_close(s);
        return rc ? 1 : 0;
    }
    long calls = argc > 1 ? atol(argv[1]) : 100000;
    snprintf(name, sizeof name, "pbc-example-%d", (int)getpid());
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        execl("/proc/self/exe", argv[0], "serve", name, (char *)NULL);
        _exit(127);
    }
    rpcool_conn *c = NULL;
    rc = RPCOOL_E_NOCHANNEL;
    for (int i = 0; i < 500 && rc; i++)
        if ((rc = rpcool_connect(name, NULL, &c))) usleep(10000);
    if (rc) goto fail;
    ProtobufCService *svc;
    if ((rc = rpcool_pbc_client_new(c, &phone_book__descriptor, FN_BOOK, &svc))) goto fail;

    Query q = QUERY__INIT; /* on the stack: copied into the connection heap for the call */
    q.prefix = (char *)"al";
    printf("Find(\"al\"), a generated stub over rpcool:\n");
    phone_book__find(svc, &q, print_book, NULL);

    /* built in the connection heap through its allocator: passed by pointer, nothing copied */
    ProtobufCAllocator heap;
    rpcool_pbc_allocator_init(&heap, c);
    Book *b = (Book *)heap.alloc(heap.allocator_data, sizeof *b);
    book__init(b);
    b->n_entries = 1000;
    b->entries = (Entry **)heap.alloc(heap.allocator_data, sizeof *b->entries * 1000);
    for (size_t i = 0; i < 1000; i++) {
        b->entries[i] = (Entry *)heap.alloc(heap.allocator_data, sizeof(Entry));
        entry__init(b->entries[i]);
        b->entries[i]->name = rpcool_strdup(c, "someone");
    }
    int n = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < calls / 100 + 1; i++) phone_book__count(svc, b, keep_count, &n);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double us = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) /
                1e3 / (double)(calls / 100 + 1);
    printf("Count(a book of %d entries in the heap, sandboxed): %.1f us per call\n", n, us);
    for (size_t i = 0; i < 1000; i++) {
        rpcool_free(c, b->entries[i]->name);
        rpcool_free(c, b->entries[i]);
    }
    rpcool_free(c, b->entries);
    rpcool_free(c, b);
    protobuf_c_service_destroy(svc);
    rpcool_call(c, FN_QUIT, NULL, 0, NULL, NULL);
    rpcool_disconnect(c);
    waitpid(pid, NULL, 0);
    return n == 1000 ? 0 : 1;
fail:
    fprintf(stderr, "rpcool_pbc: %s\n", rpcool_strerror(rc));
    return 1;
}
