/* mk/probe_pbc.c - the Makefile's HAVE_PBC probe: it builds and links only where protobuf-c's
   headers and library are installed (Debian: libprotobuf-c-dev). */
#include <protobuf-c/protobuf-c.h>
int main(void) { return protobuf_c_version()[0] == 0; }
