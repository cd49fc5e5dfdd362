/* examples/shmheap_list.c - two processes share a linked list by plain pointer.
   The writer builds a list in a shared heap and names it with a root; the reader, a separate
   process that opens the heap by name, finds the root and walks the same pointers.
       cc -O2 -pthread shmheap_list.c -o shmheap_list && ./shmheap_list */
#define SHMHEAP_IMPLEMENTATION
#include "shmheap.h"
#include <stdio.h>
#include <sys/wait.h>

struct item { int value; char label[12]; struct item *next; };

static int reader(const char *heap_name)
{
    shmheap *h;
    int rc = shmheap_open(heap_name, NULL, &h);
    if (rc) { fprintf(stderr, "reader: %s\n", shmheap_strerror(rc)); return 1; }
    long sum = 0, n = 0;
    for (struct item *it = (struct item *)shmheap_root_get(h, "items"); it; it = it->next) {
        sum += it->value; /* a plain pointer, valid here because the heap is at the same address */
        n++;
    }
    printf("reader (pid %d): heap at %p, walked %ld items, sum %ld\n", (int)getpid(), shmheap_base(h), n, sum);
    shmheap_close(h);
    return 0;
}

int main(int argc, char **argv)
{
    char name[64];
    if (argc == 3 && !strcmp(argv[1], "--read")) return reader(argv[2]);
    if (argc != 1) {
        fprintf(stderr, "usage: %s            (writer: builds a list, runs a reader on it)\n"
                        "       %s --read HEAP (reader: walks the list of an existing heap)\n", argv[0], argv[0]);
        return 2;
    }
    snprintf(name, sizeof name, "example-list-%d", (int)getpid());
    shmheap *h;
    int rc = shmheap_create(name, NULL, &h);
    if (rc) { fprintf(stderr, "create: %s\n", shmheap_strerror(rc)); return 1; }
    struct item *head = NULL;
    for (int i = 1; i <= 1000; i++) {
        struct item *it = (struct item *)shmheap_malloc(h, sizeof *it);
        if (!it) { fprintf(stderr, "heap full\n"); return 1; }
        it->value = i;
        snprintf(it->label, sizeof it->label, "item %d", i);
        it->next = head;
        head = it;
    }
    shmheap_root_set(h, "items", head);
    printf("writer (pid %d): heap %s at %p, built 1000 items\n", (int)getpid(), name, shmheap_base(h));
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) { /* a new program: it shares nothing with the writer but the heap's name */
        execl("/proc/self/exe", argv[0], "--read", name, (char *)NULL);
        _exit(127);
    }
    int st;
    waitpid(pid, &st, 0);
    shmheap_stats s;
    rc = shmheap_check(h, &s);
    printf("writer: heap %s, %zu live blocks, %zu bytes in use\n", rc ? "DAMAGED" : "consistent", s.live_blocks, s.used_bytes);
    shmheap_close(h);
    shmheap_unlink(name, NULL);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 && rc == 0 ? 0 : 1;
}
