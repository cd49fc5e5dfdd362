/* tests/pod_hosts.h - "hosts" of a pod for the host tier: process trees in their own mount, pid
 * and IPC namespaces (each with its own tmpfs on /dev/shm), sharing only what the test gives
 * them (a device file; the network namespace stands for the hosts' network). Needs root.
 * Include t.h first. */
#ifndef POD_HOSTS_H
#define POD_HOSTS_H
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/wait.h>

/* Run fn(arg) as the init (pid 1) of a new "host". Returns the pid (in this namespace) of the
 * process that waits for that init and exits with its status (77, 78: the namespaces or the
 * mounts were refused; 100 + signal: the init died of it). */
static __attribute__((unused)) pid_t host_spawn(int (*fn)(void *), void *arg)
{
    fflush(stdout);
    fflush(stderr);
    pid_t a = fork();
    if (a != 0) return a;
    if (unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC)) _exit(77);
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) ||
        mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=1m,mode=1777"))
        _exit(78);
    pid_t init = fork();
    if (init == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* the test gave up on this host: its tree dies */
        _exit(getpid() == 1 ? fn(arg) : 79);
    }
    int st = 0;
    waitpid(init, &st, 0);
    _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 100 + WTERMSIG(st));
}

/* Why hosts cannot be made here, or NULL. */
static __attribute__((unused)) const char *hosts_skip(void)
{
    if (geteuid() != 0) return "needs root (new mount, pid and IPC namespaces)";
    pid_t p = fork();
    if (p == 0) _exit(unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC) ? 1 : 0);
    int st = -1;
    waitpid(p, &st, 0);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? NULL
                                                  : "unshare(CLONE_NEWNS|NEWPID|NEWIPC) refused";
}

/* Wait for the hosts (pids from host_spawn) for up to ms; kill those still running. Their
 * statuses in st (-1: killed). Returns how many exited with 0. */
static __attribute__((unused)) int hosts_wait(const pid_t *h, int *st, int n, unsigned ms)
{
    struct timespec t0, t;
    int done = 0, ok = 0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int k = 0; k < n; k++) st[k] = -1;
    while (done < n) {
        int s;
        pid_t w = waitpid(-1, &s, WNOHANG);
        for (int k = 0; k < n; k++)
            if (w == h[k]) {
                st[k] = s;
                done++;
                ok += WIFEXITED(s) && WEXITSTATUS(s) == 0;
            }
        if (w > 0) continue;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 > (long)ms) break;
        usleep(10000);
    }
    for (int k = 0; k < n; k++)
        if (st[k] == -1) t_kill_wait(h[k]);
    return ok;
}

#endif /* POD_HOSTS_H */
