// LIBS: -libverbs
/* tests/test_example_kv_pods.c - the pod A half of examples/rpcool_kv_pods.c, under ASan+UBSan
 * (its pod B half runs in the VM tier: tests/vm/test_kv_pods.c).
 *   kv_pods_local      a server and 3 client processes: puts by call, gets by call and by pointer
 *                      under the export's locks, hot keys all of them write; every answer
 *                      checked, then each client's keys and the hot keys read both ways
 *   kv_pods_bad_entry  an entry changed without its lock (a bad value, then a huge length) is
 *                      skipped and counted by readers, never copied out of bounds; a new put
 *                      of that key works
 *   kv_pods_hostile    malformed requests get error statuses: wrong length, a key pointer
 *                      outside the caller's heap, a key too long, an empty get */
#define KVP_NO_MAIN
#include "../examples/rpcool_kv_pods.c"
#include "t.h"
#include <sys/mman.h>

static void kv_pods_local(void)
{
    enum { N = 3, KEYS = 200, ROUNDS = 3 };
    const char *chan = t_uniq("kvp");
    kvp_counts *cnt = (kvp_counts *)mmap(NULL, 2 * N * sizeof *cnt, PROT_READ | PROT_WRITE,
                                         MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    kvp_server *sv = NULL;
    pid_t pid[N];
    CHECK(cnt != MAP_FAILED);
    if (cnt == MAP_FAILED) return;
    memset(cnt, 0, 2 * N * sizeof *cnt);
    fflush(stdout);
    for (int i = 0; i < N; i++) /* before the server's threads; they wait for the server */
        if ((pid[i] = fork()) == 0) {
            kvp_peer all[N], others[N];
            unsigned round[N];
            kvp_client *c = NULL;
            int no = 0, rc = kvp_local_open(chan, &c);
            for (int p = 0; p < N; p++) {
                all[p] = (kvp_peer){'a', p};
                round[p] = ROUNDS;
                if (p != i) others[no++] = all[p];
            }
            if (!rc) rc = kvp_workload(c, 'a', i, KEYS, ROUNDS, NULL, others, no, &cnt[i], NULL);
            if (!rc) rc = kvp_check(c, &all[i], &round[i], 1, KEYS, &cnt[N + i]);
            kvp_client_close(c);
            _exit(rc ? 1 : 0);
        }
    int rc = kvp_server_open(chan, KEYS * N, 0, &sv);
    CHECK_EQ(rc, 0);
    if (!rc) CHECK_EQ(rpcool_server_start(sv->rpc, 1), 0);
    kvp_counts sum[2];
    memset(sum, 0, sizeof sum);
    for (int i = 0; i < N; i++) {
        int st = 0;
        waitpid(pid[i], &st, 0);
        CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "client %d: status %d", i, st);
        kvp_counts_add(&sum[0], &cnt[i]);
        kvp_counts_add(&sum[1], &cnt[N + i]);
    }
    CHECK_EQ(sum[0].bad, 0);
    CHECK_EQ(sum[1].bad, 0);
    /* each client: per round and key, 2 puts by call, 1 get by call, 3 by pointer */
    uint64_t per = (uint64_t)N * KEYS * ROUNDS;
    CHECK_EQ(sum[0].puts_rpc, 2 * per);
    CHECK_EQ(sum[0].gets_rpc, per);
    CHECK_EQ(sum[0].gets_ptr, 3 * per);
    CHECK(sum[0].others > 0);
    /* final: every client reads its keys and the hot keys, by call and by pointer */
    CHECK_EQ(sum[1].gets_rpc, (uint64_t)N * (KEYS + KVP_HOT));
    CHECK_EQ(sum[1].gets_ptr, sum[1].gets_rpc);
    munmap(cnt, 2 * N * sizeof *cnt);
    kvp_server_close(sv);
}

/* A server of a new channel serving with one thread, and a client of it by call: the client,
   or NULL with a FAIL line and nothing left open. */
static kvp_client *serve_and_connect(kvp_server **sv)
{
    const char *chan = t_uniq("kvp");
    int rc = kvp_server_open(chan, 100, 0, sv);
    CHECK_EQ(rc, 0);
    if (rc) return NULL;
    CHECK_EQ(rpcool_server_start((*sv)->rpc, 1), 0);
    kvp_client *c = (kvp_client *)calloc(1, sizeof *c);
    if (c && kvp_client_rpc(c, chan, 0)) {
        kvp_client_close(c);
        c = NULL;
    }
    CHECK(c != NULL);
    if (!c) kvp_server_close(*sv);
    return c;
}

static void kv_pods_bad_entry(void)
{
    kvp_server *sv = NULL;
    char got[KVP_VAL_MAX], v1[KVP_VAL_MAX], v2[KVP_VAL_MAX];
    kvp_client *c = serve_and_connect(&sv);
    if (!c) return;
    kvp_value("k1", 1, v1);
    kvp_value("k1", 2, v2);
    CHECK_EQ(kvp_put_rpc(c, "k1", v1), 1);
    CHECK_EQ(kvp_get_rpc(c, "k1", got), 1);
    CHECK(!strcmp(got, v1));
    kvp_bucket *b = &sv->tab->b[kvp_bucket_of("k1", sv->tab->nbuckets)];
    int bad = 0, i = kvp_find(b, "k1", NULL, &bad);
    CHECK(i >= 0);
    if (i < 0) goto out;
    b->e[i].val[3] ^= 1; /* as a writer that ignored the lock could */
    CHECK_EQ(kvp_get_rpc(c, "k1", got), 0);
    CHECK_EQ(kvp_find(b, "k1", NULL, &bad), -1);
    CHECK_EQ(bad, 1);
    b->e[i].val[3] ^= 1;
    b->e[i].vlen = 1u << 30; /* a length far past the entry */
    CHECK_EQ(kvp_get_rpc(c, "k1", got), 0);
    CHECK_EQ(kvp_put_rpc(c, "k1", v2), 1); /* a slot of its own: the bad one is skipped */
    CHECK_EQ(kvp_get_rpc(c, "k1", got), 1);
    CHECK(!strcmp(got, v2));
out:
    kvp_client_close(c);
    kvp_server_close(sv);
}

static void kv_pods_hostile(void)
{
    kvp_server *sv = NULL;
    char got[KVP_VAL_MAX];
    kvp_client *c = serve_and_connect(&sv);
    if (!c) return;
    CHECK_EQ(rpcool_call(c->conn, KVP_PUT, c->rq, 3, NULL, NULL), RPCOOL_E_INVAL);
    strcpy(c->key, "k");
    strcpy(c->val, "v");
    c->rq->key = (const char *)0x10;
    CHECK_EQ(rpcool_call(c->conn, KVP_PUT, c->rq, sizeof *c->rq, NULL, NULL), RPCOOL_E_BADPTR);
    c->rq->key = c->val; /* a key of KVP_KEY_MAX bytes and the NUL: one too many */
    c->rq->val = c->key;
    memset(c->val, 'x', KVP_KEY_MAX);
    c->val[KVP_KEY_MAX] = 0;
    CHECK_EQ(rpcool_call(c->conn, KVP_PUT, c->rq, sizeof *c->rq, NULL, NULL), KVP_TOOLONG);
    c->rq->key = c->key;
    c->rq->val = c->val;
    CHECK_EQ(rpcool_call(c->conn, KVP_GET, c->key, 0, NULL, NULL), RPCOOL_E_INVAL);
    CHECK_EQ(kvp_get_rpc(c, "absent", got), 0);
    /* the server still answers */
    CHECK_EQ(kvp_put_rpc(c, "k", "k|r1|x"), 1);
    kvp_client_close(c);
    kvp_server_close(sv);
}

int main(int argc, char **argv)
{
    t_init(argc, argv);
    (void)kvp_remote_open; /* pod B's half: the VM tier */
    (void)kvp_bench;
    setvbuf(stdout, NULL, _IOLBF, 0);
    RUN(kv_pods_local);
    RUN(kv_pods_bad_entry);
    RUN(kv_pods_hostile);
    return T_DONE();
}
