/* What the headers do to files in /dev/shm and on full file systems: a pod name (opts.pod,
   $SHMHEAP_POD) that names another object is refused and the object left alone; a heap on a
   full tmpfs gives SHMHEAP_E_FULL (NULL, ENOMEM), never SIGBUS; a channel's files get the mode
   asked for whatever the umask; a server stopped by SIGTERM through rpcool_serve_until_signal
   leaves nothing in /dev/shm. */
#define RPCOOL_IMPLEMENTATION
#include "rpcool.h"
#include "t.h"
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define FILE_TEXT "not a pod: somebody's data\n"

/* /dev/shm/NAME holds FILE_TEXT with mode 0600: 1 if it still does */
static int untouched(const char *name)
{
    char path[128], buf[64] = {0};
    struct stat st;
    snprintf(path, sizeof path, "/dev/shm/%s", name);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    int ok = n == (ssize_t)strlen(FILE_TEXT) && !strcmp(buf, FILE_TEXT) && !fstat(fd, &st) &&
             (st.st_mode & 0777) == 0600 && st.st_size == n;
    close(fd);
    return ok;
}

static void foreign_file(const char *name)
{
    char path[128];
    snprintf(path, sizeof path, "/dev/shm/%s", name);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    if (fd < 0) return;
    fchmod(fd, 0600);
    CHECK_EQ(write(fd, FILE_TEXT, strlen(FILE_TEXT)), (long long)strlen(FILE_TEXT));
    close(fd);
}

static int pod_env_child(void *arg)
{
    const char *pod = (const char *)arg;
    shmheap *h = NULL;
    setenv("SHMHEAP_POD", pod, 1);
    return shmheap_create(t_uniq("nopod-env"), NULL, &h) == SHMHEAP_E_NOTPOD ? 0 : 1;
}

static void pod_name_not_a_pod(void)
{
    const char *pod = t_uniq("notapod");
    char heap[64];
    snprintf(heap, sizeof heap, "%s", t_uniq("nopod-heap"));
    foreign_file(pod);
    shmheap_opts o = {.size = 4 << 20, .pod = pod};
    shmheap *h = NULL;
    CHECK_EQ(shmheap_create(heap, &o, &h), SHMHEAP_E_NOTPOD);
    CHECK(h == NULL);
    CHECK(!t_shm_exists(heap)); /* nothing made */
    CHECK(untouched(pod));
    CHECK_EQ(shmheap_open(heap, &o, &h), SHMHEAP_E_NOTFOUND); /* by name: no heap there */
    CHECK_EQ(t_in_child(pod_env_child, (void *)pod), 0);
    CHECK(untouched(pod));
    /* a heap's own object is no pod either */
    shmheap *other = t_heap(heap, 4 << 20);
    shmheap_opts o2 = {.size = 4 << 20, .pod = heap};
    CHECK_EQ(shmheap_create(t_uniq("nopod-2"), &o2, &h), SHMHEAP_E_NOTPOD);
    CHECK(other && shmheap_check(other, NULL) == 0);
    t_rm(other, heap);
    char path[128];
    snprintf(path, sizeof path, "/dev/shm/%s", pod);
    unlink(path);
}

/* In a private mount namespace, an 8 MiB tmpfs: a 64 MiB heap there is made (sparse), and
   filling it ends in NULL/ENOMEM (large and small blocks), never SIGBUS. 77: cannot mount. */
static int full_tmpfs_child(void *arg)
{
    (void)arg;
    char dir[] = "/tmp/rcp-tmpfs-XXXXXX", name[96];
    if (unshare(CLONE_NEWNS) || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL)) return 77;
    if (!mkdtemp(dir)) return 77;
    if (mount("tmpfs", dir, "tmpfs", 0, "size=8m")) {
        rmdir(dir);
        return 77;
    }
    snprintf(name, sizeof name, "file:%s/heap", dir);
    shmheap_opts o = {.size = 64 << 20};
    shmheap *h = NULL;
    int r = shmheap_create(name, &o, &h), rc = 0;
    if (r) {
        fprintf(stderr, "create: %s\n", shmheap_strerror(r));
        rc = 1;
    }
    size_t got = 0, n = 0;
    for (void *p; !rc && (p = shmheap_malloc(h, 48 << 10)); got += 48 << 10, n++)
        memset(p, 1, 48 << 10);
    if (!rc && errno != ENOMEM) rc = 2;
    if (!rc && (got < (4 << 20) || got > (8 << 20))) rc = 3; /* most of the 8 MiB, not more */
    void *q = NULL;
    if (!rc && shmheap_alloc(h, 1 << 20, 0, &q) != SHMHEAP_E_FULL) rc = 4;
    for (void *p; !rc && (p = shmheap_malloc(h, 1000)); got += 1000) memset(p, 2, 1000);
    if (!rc && errno != ENOMEM) rc = 5;
    if (!rc && shmheap_check(h, NULL)) rc = 6;
    if (h) shmheap_close(h);
    shmheap_unlink(name, NULL);
    umount(dir);
    rmdir(dir);
    if (rc) fprintf(stderr, "full tmpfs: step %d, %zu bytes in %zu blocks\n", rc, got, n);
    return rc;
}

static void heap_on_full_tmpfs(void)
{
    int st = t_in_child(full_tmpfs_child, NULL);
    if (st == 77) {
        t_skip("heap_on_full_tmpfs", "cannot mount a tmpfs in a private mount namespace");
        return;
    }
    CHECKF(st == 0, "child status %d (%s)", st, st == 128 + SIGBUS ? "SIGBUS" : "see above");
}

static mode_t mode_of(const char *path)
{
    struct stat st;
    return stat(path, &st) ? (mode_t)-1 : st.st_mode & 0777;
}

static void channel_files_get_the_mode(void)
{
    const char *name = t_uniq("mode");
    char path[160], sock[170];
    mode_t old = umask(022);
    rpcool_server_opts so = {.mode = 0666};
    rpcool_server *s = NULL;
    CHECK_EQ(rpcool_server_open(name, &so, &s), 0);
    snprintf(path, sizeof path, "/dev/shm/rpcool.%s", name);
    snprintf(sock, sizeof sock, "%s.sock", path);
    CHECKF(mode_of(path) == 0666, "name file %o", (unsigned)mode_of(path));
    CHECKF(mode_of(sock) == 0666, "socket %o", (unsigned)mode_of(sock));
    rpcool_server_close(s);
    rpcool_server_opts so2 = {.mode = 0640};
    CHECK_EQ(rpcool_server_open(name, &so2, &s), 0);
    CHECKF(mode_of(path) == 0640 && mode_of(sock) == 0640, "%o %o", (unsigned)mode_of(path),
           (unsigned)mode_of(sock));
    rpcool_server_close(s);
    umask(old);
}

static int dummy(rpcool_ctx *ctx, void *arg, size_t len, void *user)
{
    (void)ctx, (void)arg, (void)len, (void)user;
    return 3;
}

static void sigterm_leaves_nothing(void)
{
    const char *name = t_uniq("sigterm");
    char path[160], sock[170];
    snprintf(path, sizeof path, "/dev/shm/rpcool.%s", name);
    snprintf(sock, sizeof sock, "%s.sock", path);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        rpcool_server *s = NULL;
        if (rpcool_server_open(name, NULL, &s)) _exit(100);
        rpcool_server_add_handler(s, 1, dummy, NULL, 0);
        int sig = rpcool_serve_until_signal(s, 2);
        int r = rpcool_server_close(s);
        _exit(sig == SIGTERM && r == 0 ? 0 : 101);
    }
    rpcool_conn *c = t_connect_retry(name, NULL);
    CHECK(c != NULL);
    if (c) {
        CHECK_EQ(rpcool_call(c, 1, NULL, 0, NULL, NULL), 3);
        CHECK_EQ(rpcool_disconnect(c), 0);
    }
    c = t_connect_retry(name, NULL); /* one still connected when the signal comes */
    kill(pid, SIGTERM);
    int st = 0;
    waitpid(pid, &st, 0);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "server status %d", st);
    CHECK(c && rpcool_call(c, 1, NULL, 0, NULL, NULL) < 0); /* the channel is closed */
    if (c) rpcool_disconnect(c);
    CHECK(access(path, F_OK) != 0);
    CHECK(access(sock, F_OK) != 0);
    CHECK_EQ(t_channel_heaps(name, 0), 0);
    /* one at a time per process; a closed server is a bad handle */
    rpcool_server *s = NULL;
    CHECK_EQ(rpcool_server_open(name, NULL, &s), 0);
    CHECK_EQ(rpcool_server_close(s), 0);
    CHECK_EQ(rpcool_serve_until_signal(s, 1), RPCOOL_E_BADHANDLE);
}

int main(int argc, char **argv)
{
    t_init(argc, argv);
    RUN(pod_name_not_a_pod);
    RUN(heap_on_full_tmpfs);
    RUN(channel_files_get_the_mode);
    RUN(sigterm_leaves_nothing);
    return T_DONE();
}
