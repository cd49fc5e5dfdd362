# mk/install.mk - `make install` and `make uninstall`: the headers as a library of the system.
#   make install [PREFIX=/usr/local] [DESTDIR=/staging/root]
# installs, under $(DESTDIR)$(PREFIX):
#   include/rpcool/      the five headers and impl/ (`#include <rpcool/rpcool.h>`, or
#                        `#include "rpcool.h"` with the flags below, as the manuals write it)
#   bin/rpcoolctl        built as build/bin/rpcoolctl is
#   lib/pkgconfig/       rpcool.pc (shared memory: -I.../include/rpcool -pthread), rpcool-rdma.pc
#                        (adds libibverbs), rpcool-pbc.pc (adds libprotobuf-c)
#   lib/cmake/rpcool/    rpcoolConfig.cmake, rpcoolConfigVersion.cmake: find_package(rpcool),
#                        targets rpcool::rpcool, rpcool::rdma, rpcool::pbc (components rdma, pbc)
# The .pc files name PREFIX as given (relocate with PKG_CONFIG_SYSROOT_DIR); the CMake files find
# the prefix from their own place. `make uninstall` with the same PREFIX and DESTDIR removes
# them again: the files above, include/rpcool/ and lib/cmake/rpcool/ whole.
PREFIX  ?= /usr/local
DESTDIR ?=
RPCOOL_PKG_VERSION := $(shell sed -n 's/^.define RPCOOL_VERSION "\(.*\)"/\1/p' rpcool.h)
INSTALL_HEADERS = $(wildcard shmheap.h rpcool.h krconn.h alock.h nppin.h)
inst_root = $(DESTDIR)$(PREFIX)
inst_subst = sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(RPCOOL_PKG_VERSION)|g'

.PHONY: install uninstall
install: $(BUILD)/bin/rpcoolctl
	install -d $(inst_root)/include/rpcool/impl/rpcool $(inst_root)/bin $(inst_root)/lib/pkgconfig \
	    $(inst_root)/lib/cmake/rpcool
	install -m 644 $(INSTALL_HEADERS) $(inst_root)/include/rpcool/
	install -m 644 $(wildcard impl/*.h) $(inst_root)/include/rpcool/impl/
	install -m 644 $(wildcard impl/rpcool/*.h) $(inst_root)/include/rpcool/impl/rpcool/
	install -m 755 $(BUILD)/bin/rpcoolctl $(inst_root)/bin/rpcoolctl
	for pc in rpcool rpcool-rdma rpcool-pbc; do \
	    $(inst_subst) mk/$$pc.pc.in >$(inst_root)/lib/pkgconfig/$$pc.pc || exit 1; done
	for f in rpcoolConfig rpcoolConfigVersion; do \
	    $(inst_subst) mk/$$f.cmake.in >$(inst_root)/lib/cmake/rpcool/$$f.cmake || exit 1; done

uninstall:
	rm -f $(inst_root)/bin/rpcoolctl $(inst_root)/lib/pkgconfig/rpcool.pc \
	    $(inst_root)/lib/pkgconfig/rpcool-rdma.pc $(inst_root)/lib/pkgconfig/rpcool-pbc.pc
	rm -rf $(inst_root)/include/rpcool $(inst_root)/lib/cmake/rpcool
