/* The call-semantics suite (tests/call_semantics.h) on shared memory: the server in a child
   process, the suite's checks from this one. tests/vm/test_rpcool_rdma.c runs the same suite
   over RDMA. */
#define RPCOOL_IMPLEMENTATION
#include "rpcool.h"
#include "t.h"
#include "call_semantics.h"
#include <sys/wait.h>

int main(int argc, char **argv)
{
    t_init(argc, argv);
    const char *name = t_uniq("sem");
    int p[2];
    pid_t pid = t_fork_pipe(p);
    if (pid == 0) _exit(cs_serve(name, NULL, p[1]));
    if (pid < 0 || t_ready_wait(p[0])) {
        t_begin("cs_server");
        CHECKF(0, "the suite's server did not start");
        t_end();
        t_kill_wait(pid);
        return T_DONE();
    }
    cs_suite(name);
    int ws = 0;
    waitpid(pid, &ws, 0);
    t_begin("cs_server_closed");
    CHECKF(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "the suite's server ended with %#x", ws);
    t_end();
    return T_DONE();
}
