// VM
// LIBS: -libverbs
/* tests/vm/ex_rpcool_kv_pods.c - examples/rpcool_kv_pods.c built for the guests, where the pair
 * role "kvbench" runs it as a user would: `serve` in guest a, `bench HOST` in guest b
 * (tests/vm/init.sh, tests/vm/run.sh kvpods-bench). */
#include "../../examples/rpcool_kv_pods.c"
