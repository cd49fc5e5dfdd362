/* tests/vm/vmt_list.h - the pointer-linked list in a shmheap that the heap tests of the VM tier
 * (test_dax, test_hugetlb) build in one process and walk in another. Include after shmheap.h. */
#ifndef VMT_LIST_H
#define VMT_LIST_H

struct node {
    uint64_t v;
    struct node *next;
};

/* a list of n nodes with the values 0..n-1 at root "list": 0, or -1 if the heap is full */
static inline int vmt_list_make(shmheap *h, int n)
{
    struct node *head = NULL;
    for (int i = n - 1; i >= 0; i--) {
        struct node *x = (struct node *)shmheap_malloc(h, sizeof *x);
        if (!x) return -1;
        x->v = (uint64_t)i;
        x->next = head;
        head = x;
    }
    return shmheap_root_set(h, "list", head) ? -1 : 0;
}

/* sum of the list at root "list" and its length, or -1 if a pointer leaves the heap */
static inline long long vmt_list_walk(shmheap *h, long *count)
{
    long long sum = 0;
    *count = 0;
    for (struct node *n = (struct node *)shmheap_root_get(h, "list"); n; n = n->next) {
        if (!shmheap_contains(h, n, sizeof *n)) return -1;
        sum += (long long)n->v;
        ++*count;
    }
    return sum;
}

#endif /* VMT_LIST_H */
