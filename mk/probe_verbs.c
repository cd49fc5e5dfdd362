/* mk/probe_verbs.c - the Makefile's HAVE_VERBS probe: it builds and links only where rdma-core's
   headers and libibverbs are installed (Debian: libibverbs-dev). */
#include <infiniband/verbs.h>
int main(void) { return ibv_get_device_list(0) != 0; }
