/* SPDX-License-Identifier: MIT */
/* workload.h - the payloads that rpcool's bench and the peers must build identically,
   so their figures compare the transport, not the data. Header-only, all static.
   See bench/README.md for the full description and the iteration counts.

   1. Tree (pointer-rich document), the native twin of bench/tree.proto's Node:
        struct bench_node { id, value, name -> "node-%010llu", n_children, children -> [] }
      Node i (0..n-1) has id i, value 7*i+1, name "node-" + i as 10 zero-padded digits
      (15 chars + NUL), and children 4i+1..4i+4 that are < n (a complete 4-ary tree in
      BFS order). Each node, its name and its children array are separate allocations,
      as protobuf-c's unpacked messages are. The server answers with bench_tree_sum()
      and the node count; sizes 1, 16, 256, 4096 nodes.

   2. Key-value: 4096 keys; key i is "key-" + i as 12 zero-padded digits (16 bytes) padded
      with '#' to 16, 32, 48 or 64 bytes (16 + 16 * (i % 4)); values of 64, 256 or 1024
      bytes; round trip r touches key bench_kv_index(r). */
#ifndef BENCH_WORKLOAD_H
#define BENCH_WORKLOAD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define BENCH_TREE_FANOUT 4
#define BENCH_TREE_NAME_LEN 15   /* without the NUL */

struct bench_node {
    uint64_t id;
    int64_t value;
    char *name;
    size_t n_children;
    struct bench_node **children;
};

typedef void *(*bench_alloc_fn)(void *ctx, size_t size);

/* name must hold BENCH_TREE_NAME_LEN + 1 bytes */
static inline void bench_tree_name(uint64_t id, char *name)
{
    snprintf(name, BENCH_TREE_NAME_LEN + 1, "node-%010llu",
             (unsigned long long)(id % 10000000000ull));
}

static inline void bench_tree_fill(struct bench_node *node, uint64_t id)
{
    node->id = id;
    node->value = (int64_t)(7 * id + 1);
    bench_tree_name(id, node->name);
}

static inline size_t bench_tree_nchildren(uint64_t id, size_t n)
{
    size_t first = BENCH_TREE_FANOUT * id + 1;
    if (first >= n)
        return 0;
    return n - first < BENCH_TREE_FANOUT ? n - first : BENCH_TREE_FANOUT;
}

/* Builds the subtree rooted at node id of the n-node tree with alloc (malloc, a shared
   heap, ...), depth first; NULL when an allocation fails (what was allocated is left to
   the allocator). Allocations per node: the node, its name, its children array if any. */
static inline struct bench_node *bench_tree_build_at(uint64_t id, size_t n, bench_alloc_fn alloc,
                                                     void *ctx)
{
    struct bench_node *node = (struct bench_node *)alloc(ctx, sizeof *node);
    if (!node || !(node->name = (char *)alloc(ctx, BENCH_TREE_NAME_LEN + 1)))
        return NULL;
    bench_tree_fill(node, id);
    node->n_children = bench_tree_nchildren(id, n);
    node->children = NULL;
    if (!node->n_children)
        return node;
    node->children = (struct bench_node **)alloc(ctx, node->n_children * sizeof *node->children);
    if (!node->children)
        return NULL;
    for (size_t c = 0; c < node->n_children; c++)
        if (!(node->children[c] = bench_tree_build_at(BENCH_TREE_FANOUT * id + 1 + c, n, alloc, ctx)))
            return NULL;
    return node;
}

static inline struct bench_node *bench_tree_build(size_t n, bench_alloc_fn alloc, void *ctx)
{
    return n ? bench_tree_build_at(0, n, alloc, ctx) : NULL;
}

/* What the server computes from the tree it received: every field of every node is read. */
static inline uint64_t bench_tree_node_sum(uint64_t id, int64_t value, const char *name)
{
    uint64_t s = 3 * id + (uint64_t)value;
    for (const char *p = name; *p; p++)
        s += (unsigned char)*p;
    return s;
}

static inline uint64_t bench_tree_sum(const struct bench_node *node, uint64_t *count)
{
    uint64_t s = bench_tree_node_sum(node->id, node->value, node->name);
    ++*count;
    for (size_t c = 0; c < node->n_children; c++)
        s += bench_tree_sum(node->children[c], count);
    return s;
}

/* The sum a correct server returns for an n-node tree, without building it. */
static inline uint64_t bench_tree_expected_sum(size_t n)
{
    uint64_t s = 0;
    char name[BENCH_TREE_NAME_LEN + 1];
    for (uint64_t i = 0; i < n; i++) {
        bench_tree_name(i, name);
        s += bench_tree_node_sum(i, (int64_t)(7 * i + 1), name);
    }
    return s;
}

#define BENCH_KV_KEYS 4096
#define BENCH_KV_KEY_MAX 64
#define BENCH_KV_VALUE_MAX 1024

/* Writes key i into buf (at least BENCH_KV_KEY_MAX bytes, no NUL); returns its length. */
static inline size_t bench_kv_key(uint64_t i, char *buf)
{
    size_t len = 16 + 16 * (size_t)(i % 4);
    char head[17];
    snprintf(head, sizeof head, "key-%012llu", (unsigned long long)(i % 1000000000000ull));
    memcpy(buf, head, 16);
    memset(buf + 16, '#', len - 16);
    return len;
}

/* Value for key i written in round r: size bytes of letters. */
static inline void bench_kv_value(uint64_t i, uint64_t r, size_t size, char *buf)
{
    for (size_t j = 0; j < size; j++)
        buf[j] = (char)('a' + (i + r + j) % 26);
}

/* Key touched by round trip r: a fixed permutation of 0..BENCH_KV_KEYS-1. */
static inline uint64_t bench_kv_index(uint64_t r)
{
    return (r * 2654435761u) % BENCH_KV_KEYS;
}

#endif /* BENCH_WORKLOAD_H */
