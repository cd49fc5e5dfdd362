// VM
// LIBS: -libverbs
/* tests/vm/ex_krconn_hello.c - examples/krconn_hello.c built for the guest, where the krconn role
 * runs its server and client (tests/vm/init.sh), so the example is run, not only compiled. */
#include "../../examples/krconn_hello.c"
