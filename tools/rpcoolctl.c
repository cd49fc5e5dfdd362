/* tools/rpcoolctl.c - what rpcool has running on this host: the pod's heaps, every channel (live
   or stale) with its server's stats and connections, the exports' liveness files, and with
   --pod the channels of a pod device; --clean removes what dead servers left.
       rpcoolctl [--json] [--clean] [--watch SECONDS] [--pod DEVICE] [CHANNEL...]
   Built by `make` (build/bin/rpcoolctl) with plain cc. It reads only what its user may read:
   the pod directory and the channels' name files as they are, and the stats each server gives
   at its socket to callers of its own uid (or root). Its text and JSON layouts are a documented
   schema (tools/rpcoolctl.md): change them only with that text and its test. */
#define RPCOOL_IMPLEMENTATION
#include "rpcool.h"
#include <dirent.h>
#include <stdio.h>
#include <sys/mman.h>
#include <time.h>

#define MAXCH 512   /* channels listed */
#define MAXCONNS 64 /* connections listed per channel */
#define MAXX 512    /* exports' liveness files listed */
#define SCHEMA 1    /* the JSON layout's version ("schema") */
#define EXIT_CLEAN 1   /* --clean could not remove something */
#define EXIT_USAGE 2   /* a usage error: an unknown option, a malformed channel name */
#define EXIT_MISSING 3 /* a channel named is not on this host */

struct chan {
    char name[RPCOOL__NAME_MAX + 1];
    int has_name, has_sock;
    const char *state;  /* "live", "stale", "unknown" (the name file may not be read) */
    uint32_t pid;       /* the server's pid, from the name file (0: unknown) */
    uint32_t owner;     /* the name file's (or socket's) owner */
    int stats;          /* rpcool_channel_stats's result (live only) */
    rpcool_server_stats st;
    rpcool_conn_stats conns[MAXCONNS];
    unsigned nconns;
    const char *cleaned; /* --clean: what happened, or NULL */
};

static struct chan chans[MAXCH];
static unsigned nchans;
static int json, clean;

/* An export's liveness file, /dev/shm/rpcool.x.<heap address>.<record offset> (rpcool.h section
   13): every handle holds a read lock on its byte 0, the exporter a write lock on byte 1. */
struct xfile {
    char file[80];
    unsigned long long heap, record;
    int users, exporter; /* 1 held, 0 not, -1 unknown (the file may not be read) */
};
static struct xfile xfiles[MAXX];
static unsigned nx;

static int wanted(int argc, char **argv, int first, const char *name)
{
    if (first >= argc) return 1;
    for (int k = first; k < argc; k++)
        if (!strcmp(argv[k], name)) return 1;
    return 0;
}

static struct chan *chan_of(const char *name)
{
    for (unsigned k = 0; k < nchans; k++)
        if (!strcmp(chans[k].name, name)) return &chans[k];
    if (nchans == MAXCH || rpcool__check_name(name)) return NULL;
    struct chan *c = &chans[nchans++];
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", name);
    return c;
}

static int chan_found(const char *name)
{
    for (unsigned k = 0; k < nchans; k++)
        if (!strcmp(chans[k].name, name)) return 1;
    return 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const struct chan *)a)->name, ((const struct chan *)b)->name);
}

static int by_file(const void *a, const void *b)
{
    return strcmp(((const struct xfile *)a)->file, ((const struct xfile *)b)->file);
}

/* 1 if byte at of fd is locked by another open file description, 0 if not, -1 unknown. */
static int byte_held(int fd, off_t at)
{
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = at;
    fl.l_len = 1;
    if (fcntl(fd, F_OFD_GETLK, &fl)) return -1;
    return fl.l_type != F_UNLCK;
}

/* rpcool.NAME is an export's liveness file when NAME is x.<hex>.<hex> and the file is not a
   channel's name file (which holds the channel's record, RPCOOL__RDV_MAGIC first). */
static int is_export_file(const char *n, struct xfile *x)
{
    unsigned long long heap, rec;
    int end = 0;
    if (strncmp(n, "x.", 2) || sscanf(n + 2, "%llx.%llx%n", &heap, &rec, &end) != 2 ||
        n[2 + end] || strspn(n + 2, "0123456789abcdef.") != strlen(n + 2))
        return 0;
    char p[RPCOOL__NAME_MAX + 40];
    rpcool__path(p, sizeof p, n);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    struct rpcool__rdv r;
    if (fd >= 0 && pread(fd, &r, sizeof r, 0) == (ssize_t)sizeof r && r.magic == RPCOOL__RDV_MAGIC) {
        close(fd);
        return 0;
    }
    snprintf(x->file, sizeof x->file, "rpcool.%s", n);
    x->heap = heap;
    x->record = rec;
    x->users = fd >= 0 ? byte_held(fd, 0) : -1;
    x->exporter = fd >= 0 ? byte_held(fd, 1) : -1;
    if (fd >= 0) close(fd);
    return 1;
}

/* Every channel of /dev/shm: rpcool.NAME (its name file) and rpcool.NAME.sock (its socket);
   with no channel named, also the exports' liveness files. */
static void find_channels(int argc, char **argv, int first)
{
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    nchans = nx = 0;
    while (d && (e = readdir(d))) {
        if (strncmp(e->d_name, "rpcool.", 7)) continue;
        char n[300];
        snprintf(n, sizeof n, "%s", e->d_name + 7);
        size_t l = strlen(n);
        int sock = l > 5 && !strcmp(n + l - 5, ".sock");
        if (sock) n[l - 5] = '\0';
        if (!sock && nx < MAXX && is_export_file(n, &xfiles[nx])) {
            nx += first >= argc; /* listed when no channel is named */
            continue;
        }
        struct chan *c = wanted(argc, argv, first, n) ? chan_of(n) : NULL;
        if (!c) continue;
        if (sock) c->has_sock = 1;
        else c->has_name = 1;
    }
    if (d) closedir(d);
    qsort(chans, nchans, sizeof chans[0], by_name);
    qsort(xfiles, nx, sizeof xfiles[0], by_file);
}

/* The channels named that are not on this host: said on stderr (and in JSON, "missing"). */
static int missing(int argc, char **argv, int first)
{
    int n = 0;
    for (int k = first; k < argc; k++) {
        if (chan_found(argv[k])) continue;
        if (!json) fprintf(stderr, "rpcoolctl: %s: no such channel (no /dev/shm/rpcool.%s)\n",
                           argv[k], argv[k]);
        n++;
    }
    return n;
}

/* Live or stale: the server holds byte 0 of the name file while it lives. */
static void look_at(struct chan *c)
{
    char p[RPCOOL__NAME_MAX + 40];
    struct stat st;
    c->state = "stale"; /* a socket with no name file: the server has gone */
    rpcool__sock_path(p, sizeof p, c->name);
    if (stat(p, &st) == 0) c->owner = (uint32_t)st.st_uid;
    if (c->has_name) {
        rpcool__path(p, sizeof p, c->name);
        if (stat(p, &st) == 0) c->owner = (uint32_t)st.st_uid;
        int fd = open(p, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            c->state = "unknown";
        } else {
            struct rpcool__rdv r;
            if (pread(fd, &r, sizeof r, 0) == (ssize_t)sizeof r && r.magic == RPCOOL__RDV_MAGIC)
                c->pid = r.server_pid;
            c->state = rpcool__lock_held(fd, 0) == 1 ? "live" : "stale";
            close(fd);
        }
    }
    if (!strcmp(c->state, "stale")) return;
    c->stats = rpcool_channel_stats(c->name, 1000, &c->st, c->conns, MAXCONNS, &c->nconns);
    if (c->stats == 0) {
        c->state = "live";
        c->pid = c->st.server_pid;
    }
}

/* --clean: a stale channel's name file and socket go, under the name's lock (taken here: a live
   server holds it, so a live channel is never touched). Held a moment after the unlinks, so a
   server opening the old name file meanwhile fails (RPCOOL_E_NAMETAKEN) instead of serving an
   unlinked one. */
static void clean_one(struct chan *c)
{
    char p[RPCOOL__NAME_MAX + 40], s[RPCOOL__NAME_MAX + 40];
    rpcool__path(p, sizeof p, c->name);
    rpcool__sock_path(s, sizeof s, c->name);
    if (strcmp(c->state, "stale")) return;
    if (!c->has_name) { /* a socket alone: nobody can serve it (a server takes the name first) */
        c->cleaned = unlink(s) == 0 ? "removed" : errno == ENOENT ? "gone" : "not permitted";
        return;
    }
    int fd = open(p, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        c->cleaned = errno == ENOENT ? "gone" : "not permitted";
        return;
    }
    if (rpcool__lock_try(fd, 0)) {
        c->cleaned = "kept (a server took the name)";
    } else {
        int a = unlink(s), b = unlink(p);
        c->cleaned = (a && errno != ENOENT) || b ? "not permitted" : "removed";
        usleep(50000);
    }
    close(fd);
}

/* ---- output --------------------------------------------------------------------------- */

static void jstr(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') printf("\\%c", ch);
        else if (ch < 0x20 || ch >= 0x7f) printf("\\u%04x", ch);
        else putchar(ch);
    }
    putchar('"');
}

static void size_text(char *out, size_t n, uint64_t b)
{
    if (b >= (1ull << 30)) snprintf(out, n, "%.1f GiB", (double)b / (1ull << 30));
    else if (b >= (1ull << 20)) snprintf(out, n, "%.1f MiB", (double)b / (1ull << 20));
    else snprintf(out, n, "%.1f KiB", (double)b / 1024);
}

/* The pod directory, read as it is: every heap's range and size, whether anything still holds
   it (a heap on a descriptor: a process has it open; a named heap: its file exists) and, for a
   named heap, the bytes its file uses. */
static void show_heaps(void)
{
    const char *pod = getenv("SHMHEAP_POD");
    char p[NAME_MAX + 16];
    if (!pod || !*pod) pod = SHMHEAP__POD_DEFAULT;
    snprintf(p, sizeof p, "/dev/shm/%s", pod);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    struct shmheap__pod *d = NULL;
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0 && (size_t)st.st_size >= sizeof *d) {
        void *m = mmap(NULL, sizeof *d, PROT_READ, MAP_SHARED, fd, 0);
        if (m != MAP_FAILED) d = (struct shmheap__pod *)m;
    }
    if (json) {
        printf("\"pod\":");
        jstr(pod);
        printf(",\"pod_readable\":%s,\"heaps\":[", d ? "true" : "false");
    } else if (!d) {
        printf("pod %s: %s\n", pod, fd < 0 ? strerror(errno) : "not a pod directory");
    }
    unsigned n = 0;
    for (int i = 0; d && i < SHMHEAP__POD_N; i++) {
        const struct shmheap__pod_ent *e = &d->e[i];
        uint64_t base = e->base, size = e->size;
        if (!base) continue;
        char key[sizeof e->key + 1];
        memcpy(key, e->key, sizeof e->key);
        key[sizeof e->key] = '\0';
        int held = 0;
        long long used = -1;
        if (!strncmp(key, "fd:", 3)) {
            held = shmheap__pod_lock(fd, i, F_WRLCK, F_OFD_GETLK) == 1;
        } else if (!strncmp(key, "shm:", 4)) {
            char q[NAME_MAX + 16];
            struct stat hs;
            snprintf(q, sizeof q, "/dev/shm/%s", key + 4);
            if ((held = stat(q, &hs) == 0)) used = (long long)hs.st_blocks * 512;
        }
        if (json) {
            printf("%s{\"key\":", n ? "," : "");
            jstr(key);
            printf(",\"base\":\"0x%llx\",\"end\":\"0x%llx\",\"size\":%llu,\"used\":%lld,"
                   "\"held\":%s}", (unsigned long long)base, (unsigned long long)(base + size),
                   (unsigned long long)size, used, held ? "true" : "false");
        } else {
            char sz[32], us[32] = "-";
            size_text(sz, sizeof sz, size);
            if (used >= 0) size_text(us, sizeof us, (uint64_t)used);
            if (!n) {
                printf("heaps of pod %s (window 0x%llx-0x%llx):\n", pod,
                       (unsigned long long)d->lo, (unsigned long long)d->hi);
                printf("  %-14s  %-14s  %9s  %9s  %-5s  %s\n", "BASE", "END", "SIZE", "USED",
                       "STATE", "KEY");
            }
            printf("  0x%-12llx  0x%-12llx  %9s  %9s  %-5s  %s\n", (unsigned long long)base,
                   (unsigned long long)(base + size), sz, us, held ? "held" : "dead", key);
        }
        n++;
    }
    if (json) printf("]");
    else if (d && !n) printf("heaps of pod %s: none\n", pod);
    if (d) munmap(d, sizeof *d);
    if (fd >= 0) close(fd);
}

static void show_channel(const struct chan *c)
{
    const rpcool_server_stats *s = &c->st;
    if (json) {
        printf("{\"name\":");
        jstr(c->name);
        printf(",\"state\":\"%s\",\"server_pid\":%u,\"owner_uid\":%u,\"name_file\":%s,"
               "\"socket\":%s", c->state, c->pid, c->owner, c->has_name ? "true" : "false",
               c->has_sock ? "true" : "false");
        if (c->cleaned) printf(",\"clean\":\"%s\"", c->cleaned);
        if (!strcmp(c->state, "stale")) {
            printf("}");
            return;
        }
        if (c->stats) {
            printf(",\"stats_error\":");
            jstr(c->stats == -EACCES ? "not permitted" : rpcool_strerror(c->stats));
            printf("}");
            return;
        }
        printf(",\"stats\":{\"calls\":%llu,\"accepted\":%llu,\"closed\":%llu,\"reaped\":%llu,"
               "\"faults\":%llu,\"bad_entries\":%llu,\"conns\":%u,\"ready\":%u,"
               "\"over_limit\":%llu,\"over_budget\":%llu,\"refused\":%llu,\"dropped\":%llu,"
               "\"cancelled\":%llu,\"max_conns\":%u},\"conns\":[",
               (unsigned long long)s->calls, (unsigned long long)s->accepted,
               (unsigned long long)s->closed, (unsigned long long)s->reaped,
               (unsigned long long)s->faults, (unsigned long long)s->bad_entries, s->conns,
               s->ready, (unsigned long long)s->over_limit, (unsigned long long)s->over_budget,
               (unsigned long long)s->refused, (unsigned long long)s->dropped,
               (unsigned long long)s->cancelled, s->max_conns);
        for (unsigned k = 0; k < c->nconns && k < MAXCONNS; k++) {
            const rpcool_peer *p = &c->conns[k].peer;
            printf("%s{\"transport\":\"%s\",\"slot\":%u,\"pid\":%d,\"uid\":%u,\"gid\":%u,"
                   "\"authenticated\":%s,\"inflight\":%u,\"pod\":", k ? "," : "",
                   p->transport == RPCOOL_TRANSPORT_RDMA ? "rdma" : "shm", p->slot, (int)p->pid,
                   p->uid, p->gid, p->authenticated ? "true" : "false", c->conns[k].inflight);
            jstr(p->pod);
            printf(",\"addr\":");
            jstr(p->addr);
            printf("}");
        }
        printf("]}");
        return;
    }
    char pid[16] = "-", conns[24] = "-", note[160] = "";
    if (c->pid) snprintf(pid, sizeof pid, "%u", c->pid);
    int has_stats = !strcmp(c->state, "live") && !c->stats;
    if (!strcmp(c->state, "stale"))
        snprintf(note, sizeof note, "its server is gone%s",
                 c->cleaned ? "" : "; rpcoolctl --clean removes it");
    else if (!strcmp(c->state, "unknown"))
        snprintf(note, sizeof note, "name file of uid %u: not readable by this user", c->owner);
    else if (c->stats == -EACCES)
        snprintf(note, sizeof note, "stats not permitted (the server answers uid %u and root)",
                 c->owner);
    else if (c->stats == RPCOOL_E_PROTO)
        snprintf(note, sizeof note, "stats not answered (a server of another rpcool version)");
    else if (c->stats)
        snprintf(note, sizeof note, "stats: %s", rpcool_strerror(c->stats));
    if (c->cleaned)
        snprintf(note + strlen(note), sizeof note - strlen(note), "%s[clean: %s]",
                 *note ? "  " : "", c->cleaned);
    if (has_stats) snprintf(conns, sizeof conns, "%u/%u", s->conns, s->max_conns);
    printf("  %-24s %-7s %-8s %-9s", c->name, c->state, pid, conns);
    if (has_stats)
        printf(" %9llu %7llu %7llu %7llu %7llu %9llu %7llu", (unsigned long long)s->calls,
               (unsigned long long)s->faults, (unsigned long long)s->reaped,
               (unsigned long long)s->dropped, (unsigned long long)s->refused,
               (unsigned long long)s->cancelled, (unsigned long long)s->bad_entries);
    else
        printf(" %9s %7s %7s %7s %7s %9s %7s", "-", "-", "-", "-", "-", "-", "-");
    printf("%s%s\n", *note ? "  " : "", note);
    if (!has_stats || !c->nconns) return;
    printf("      %-9s %-5s %-8s %-6s %-6s %-8s %s\n", "TRANSPORT", "SLOT", "PID", "UID", "GID",
           "INFLIGHT", "PEER");
    for (unsigned k = 0; k < c->nconns && k < MAXCONNS; k++) {
        const rpcool_peer *p = &c->conns[k].peer;
        if (p->transport == RPCOOL_TRANSPORT_RDMA)
            printf("      %-9s %-5s %-8d %-6u %-6u %-8u %s pod id \"%s\" (claimed, "
                   "unauthenticated)\n", "rdma", "-", (int)p->pid, p->uid, p->gid,
                   c->conns[k].inflight, p->addr, p->pod);
        else
            printf("      %-9s %-5u %-8d %-6u %-6u %-8u %s\n", "shm", p->slot, (int)p->pid,
                   p->uid, p->gid, c->conns[k].inflight,
                   p->authenticated ? "-" : "(pid claimed)");
    }
    if (c->nconns > MAXCONNS) printf("      ... %u more\n", c->nconns - MAXCONNS);
}

static const char *held_text(int v) { return v < 0 ? "unknown" : v ? "yes" : "no"; }

static void show_exports(void)
{
    if (json) {
        printf("\"exports\":[");
        for (unsigned k = 0; k < nx; k++) {
            const struct xfile *x = &xfiles[k];
            printf("%s{\"file\":", k ? "," : "");
            jstr(x->file);
            printf(",\"heap_base\":\"0x%llx\",\"record\":\"0x%llx\",\"users\":%s,"
                   "\"exporter\":%s}", x->heap, x->record,
                   x->users < 0 ? "null" : x->users ? "true" : "false",
                   x->exporter < 0 ? "null" : x->exporter ? "true" : "false");
        }
        printf("]");
        return;
    }
    if (!nx) {
        printf("exports: none\n");
        return;
    }
    printf("exports (liveness files):\n  %-40s %-14s  %-10s %-7s %s\n", "FILE", "HEAP", "RECORD",
           "USERS", "EXPORTER");
    for (unsigned k = 0; k < nx; k++) {
        const struct xfile *x = &xfiles[k];
        printf("  %-40s 0x%-12llx  0x%-8llx %-7s %s\n", x->file, x->heap, x->record,
               held_text(x->users), x->exporter < 0 ? "unknown" : x->exporter ? "live" : "gone");
    }
}

/* The channels of a pod device (rpcool.h section 14), read as they are: --pod DEVICE, else
   $RPCOOL_POD_DEVICE. The device is mapped read-only wherever it lands; nothing in it is
   written and no lease is taken. A server is live while its lease is held and renewed: the
   lease words are read twice, half a lease bound apart. */
#define MAXP 64
struct pchan {
    char name[RCP__POD_NAME_MAX + 1];
    const char *state; /* "live", "opening", "closed" (being closed), "gone" (its server's lease
                          is not held or not renewed) */
    char host[RCP__LEASE_HOST_LEN];
    uint32_t pid;      /* the server's, as its lease slot claims (0: unknown) */
    unsigned conns, max_conns;
};
static struct pchan pchans[MAXP];
static unsigned npc;
static const char *pod_dev;    /* NULL: no pod device named */
static char pod_err[160];      /* why the device could not be read ("" if it was) */

static void find_pod_channels(void)
{
    npc = 0;
    pod_err[0] = '\0';
    if (!pod_dev) return;
    char path[256];
    uint64_t size = 0;
    int fd = -1, rc = rcp__pod_path(pod_dev, path, sizeof path);
    if (!rc && (fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) rc = -errno;
    if (!rc) rc = rcp__pod_fd_size(fd, &size);
    if (!rc && (size < RCP__POD_MIN_SIZE || size > ((uint64_t)1 << 44))) rc = -EINVAL;
    char *m = (char *)MAP_FAILED;
    if (!rc && (m = (char *)mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0)) == MAP_FAILED)
        rc = -errno;
    if (fd >= 0) close(fd);
    if (rc) {
        snprintf(pod_err, sizeof pod_err, "%s", strerror(-rc));
        return;
    }
    struct rcp__pod_hdr h;
    memcpy(&h, m, sizeof h);
    const struct rcp__lease_hdr *lh = (const struct rcp__lease_hdr *)(const void *)(m + h.lease_off);
    if (h.magic != RCP__POD_MAGIC || rcp__pod_check(&h, size) || lh->magic != RCP__LEASE_MAGIC ||
        lh->slot_size != sizeof(struct rcp__lease_slot) ||
        RCP__LEASE_SIZE(lh->nslots) > h.lease_len) {
        snprintf(pod_err, sizeof pod_err, "not a pod device (or one being formatted)");
        munmap(m, (size_t)size);
        return;
    }
    const struct rcp__lease_slot *ls = (const struct rcp__lease_slot *)(const void *)(lh + 1);
    const struct rcp__pod_reg *reg = (const struct rcp__pod_reg *)(const void *)(m + h.reg_off);
    uint64_t word[MAXP];
    uint32_t lslot[MAXP], lepoch[MAXP];
    int any = 0;
    for (uint32_t i = 0; i < h.nreg && npc < MAXP; i++) {
        uint32_t st = rcp__load(&reg[i].state);
        uint64_t tag = rcp__load(&reg[i].owner);
        if (st == RCP__POD_REG_FREE || (st == RCP__POD_REG_CLOSED && !tag))
            continue; /* never used, or closed: its entry is free */
        struct pchan *c = &pchans[npc];
        memset(c, 0, sizeof *c);
        memcpy(c->name, reg[i].name, RCP__POD_NAME_MAX);
        c->name[RCP__POD_NAME_MAX] = '\0';
        lslot[npc] = (uint32_t)(tag & 0xffffu) - 1u;
        lepoch[npc] = (uint32_t)(tag >> 16) & RCP__LEASE_EPOCH_MASK;
        word[npc] = lslot[npc] < lh->nslots ? rcp__load(&ls[lslot[npc]].word) : 0;
        c->state = st == RCP__POD_REG_OPENING ? "opening" : st == RCP__POD_REG_OPEN ? "live"
                                                                                   : "closed";
        if (lslot[npc] < lh->nslots) {
            memcpy(c->host, ls[lslot[npc]].host, sizeof c->host - 1);
            c->pid = ls[lslot[npc]].pid;
        }
        if (rcp__lease_w_state(word[npc]) != RCP__LEASE_HELD ||
            rcp__lease_w_epoch(word[npc]) != lepoch[npc])
            c->state = "gone";
        else any = 1;
        const char *a = m + h.area_off + (uint64_t)i * h.area_size;
        const struct rpcool__chan_hdr *ch = (const struct rpcool__chan_hdr *)(const void *)a;
        uint64_t fit = h.area_size > RPCOOL__SLOTS_OFF
                           ? (h.area_size - RPCOOL__SLOTS_OFF) / sizeof(struct rpcool__chan_slot)
                           : 0;
        uint32_t n = rcp__load(&ch->max_conns);
        c->max_conns = n <= fit ? n : (unsigned)fit;
        const struct rpcool__chan_slot *cs =
            (const struct rpcool__chan_slot *)(const void *)(a + RPCOOL__SLOTS_OFF);
        for (unsigned k = 0; k < c->max_conns; k++)
            c->conns += rcp__load(&cs[k].state) != RPCOOL__CS_FREE;
        npc++;
    }
    if (any) { /* a held lease is renewed every quarter bound: look again after half of one */
        uint32_t b = lh->bound_ms >= RCP__LEASE_MIN_BOUND_MS && lh->bound_ms <= 10000
                         ? lh->bound_ms : RCP__LEASE_DEFAULT_BOUND_MS;
        usleep(b * 500u);
        for (unsigned k = 0; k < npc; k++)
            if (strcmp(pchans[k].state, "gone") && rcp__load(&ls[lslot[k]].word) == word[k])
                pchans[k].state = "gone";
    }
    munmap(m, (size_t)size);
}

static void show_pod_channels(void)
{
    if (json) {
        printf("\"pod_device\":");
        if (pod_dev) jstr(pod_dev);
        else printf("null");
        printf(",\"pod_device_error\":");
        if (pod_err[0]) jstr(pod_err);
        else printf("null");
        printf(",\"pod_channels\":[");
        for (unsigned k = 0; k < npc; k++) {
            const struct pchan *c = &pchans[k];
            printf("%s{\"name\":", k ? "," : "");
            jstr(c->name);
            printf(",\"state\":\"%s\",\"host\":", c->state);
            jstr(c->host);
            printf(",\"server_pid\":%u,\"conns\":%u,\"max_conns\":%u}", c->pid, c->conns,
                   c->max_conns);
        }
        printf("]");
        return;
    }
    if (!pod_dev) return;
    if (pod_err[0]) {
        printf("pod device %s: %s\n", pod_dev, pod_err);
        return;
    }
    if (!npc) {
        printf("channels of pod device %s: none\n", pod_dev);
        return;
    }
    printf("channels of pod device %s:\n  %-24s %-7s %-20s %-8s %s\n", pod_dev, "NAME", "STATE",
           "HOST", "PID", "CONNS");
    for (unsigned k = 0; k < npc; k++) {
        const struct pchan *c = &pchans[k];
        char conns[32];
        snprintf(conns, sizeof conns, "%u/%u", c->conns, c->max_conns);
        printf("  %-24s %-7s %-20s %-8u %s\n", c->name, c->state, c->host[0] ? c->host : "-",
               c->pid, conns);
    }
}

static int report(int argc, char **argv, int first)
{
    int failed = 0;
    find_channels(argc, argv, first);
    for (unsigned k = 0; k < nchans; k++) {
        look_at(&chans[k]);
        if (clean) {
            clean_one(&chans[k]);
            failed |= chans[k].cleaned && !strcmp(chans[k].cleaned, "not permitted");
        }
    }
    int nmissing = missing(argc, argv, first);
    find_pod_channels();
    if (json) {
        printf("{\"schema\":%d,\"time\":%lld,", SCHEMA, (long long)time(NULL));
        show_heaps();
        printf(",\"channels\":[");
        for (unsigned k = 0; k < nchans; k++) {
            if (k) printf(",");
            show_channel(&chans[k]);
        }
        printf("],");
        show_exports();
        printf(",\"missing\":[");
        for (int k = first, n = 0; k < argc; k++)
            if (!chan_found(argv[k])) {
                if (n++) printf(",");
                jstr(argv[k]);
            }
        printf("],");
        show_pod_channels();
        printf("}\n");
    } else {
        show_heaps();
        if (nchans) printf("channels:\n  %-24s %-7s %-8s %-9s %9s %7s %7s %7s %7s %9s %7s  NOTE\n",
                           "NAME", "STATE", "PID", "CONNS", "CALLS", "FAULTS", "REAPED",
                           "DROPPED", "REFUSED", "CANCELLED", "BAD");
        else printf("channels: none\n");
        for (unsigned k = 0; k < nchans; k++) show_channel(&chans[k]);
        if (first >= argc) show_exports();
        show_pod_channels();
    }
    fflush(stdout);
    return nmissing ? EXIT_MISSING : failed ? EXIT_CLEAN : 0;
}

int main(int argc, char **argv)
{
    int k = 1;
    unsigned watch = 0;
    for (; k < argc && !strncmp(argv[k], "--", 2); k++) {
        int help = !strcmp(argv[k], "--help");
        if (!strcmp(argv[k], "--json")) json = 1;
        else if (!strcmp(argv[k], "--clean")) clean = 1;
        else if (!strcmp(argv[k], "--watch") && k + 1 < argc && atoi(argv[k + 1]) > 0)
            watch = (unsigned)atoi(argv[++k]);
        else if (!strcmp(argv[k], "--pod") && k + 1 < argc && argv[k + 1][0])
            pod_dev = argv[++k];
        else { /* --help: the usage on stdout, exit 0; anything else: on stderr, exit 2 */
            fprintf(help ? stdout : stderr,
                    "usage: %s [--json] [--clean] [--watch SECONDS] [--pod DEVICE] "
                    "[CHANNEL...]\n"
                    "  the pod's heaps and every channel (or those named): live or stale,"
                    " its server's\n  stats and connections. --clean removes what dead "
                    "servers left (never a live\n  channel's); --json one JSON object "
                    "per report; --watch repeats every SECONDS;\n  --pod (else "
                    "$RPCOOL_POD_DEVICE) also lists a pod device's channels.\n", argv[0]);
            return help ? 0 : EXIT_USAGE;
        }
    }
    for (int n = k; n < argc; n++)
        if (rpcool__check_name(argv[n])) {
            fprintf(stderr, "rpcoolctl: %s: malformed channel name (1 to %d of a-z A-Z 0-9 . _ -)"
                    "\n", argv[n], RPCOOL__NAME_MAX);
            return EXIT_USAGE;
        }
    signal(SIGPIPE, SIG_IGN);
    if (!pod_dev && getenv("RPCOOL_POD_DEVICE") && getenv("RPCOOL_POD_DEVICE")[0])
        pod_dev = getenv("RPCOOL_POD_DEVICE");
    if (!watch) return report(argc, argv, k);
    for (;;) {
        if (!json) {
            time_t t = time(NULL);
            char when[64];
            strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime(&t));
            printf("--- %s\n", when);
        }
        report(argc, argv, k);
        sleep(watch);
    }
}
