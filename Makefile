# rpcool - one Makefile. `make` builds examples and tests; `make demo`, `make test`,
# `make test-host`, `make test-vm`, `make bench`, `make clean`, `make config` (what the probes
# found), `make install` / `make uninstall` (PREFIX, DESTDIR: mk/install.mk).
# Conventions (so new parts need no edits here):
#   examples/NAME.c        -> build/ex/NAME         plain cc -O2 -pthread, as a user would
#   tools/NAME.c           -> build/bin/NAME        the same (rpcoolctl)
#   tests/test_NAME.c      -> build/t/test_NAME      ASan+UBSan (tests/test_NAME.cc: C++17; "// CXX-STRICT":
#                                                    without -Wno-missing-field-initializers); a "// TSAN" line also builds
#                                                    build/t/test_NAME.tsan with ThreadSanitizer,
#                                                    a "// VALGRIND" line build/vg/test_NAME
#   a "// LIBS: -lfoo" line in a source adds link flags; "// VM" marks a test for the VM tier only
#   bench/bench_*.sh       run in order by `make bench`
#   tests/vm/NAME.c, and bench/NAME.c with a "// VM" line -> build/vm/bin/NAME for the VM guests (mk/vm.mk)
#   mk/*.mk                extra rules of a component
CC      ?= cc
CXX     ?= c++
BUILD   ?= build
WARN    = -Wall -Wextra -Werror
CFLAGS  ?= -O2 -g
SAN     = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
TSAN    = -fsanitize=thread
HEADERS = $(wildcard *.h) $(wildcard impl/*.h) $(wildcard impl/rpcool/*.h)

# Optional packages, probed by building and linking a small program (mk/probe_*.c); `make
# config` prints what was found. HAVE_VERBS: rdma-core's headers and libibverbs
# (libibverbs-dev). Without them the headers compile their RDMA parts out (KRCONN_NO_RDMA and the
# like, automatic) and -libverbs is dropped from link lines: the examples still build with plain
# cc and `make demo` needs no extra package. HAVE_PBC: protobuf-c's headers, library and protoc-c
# (libprotobuf-c-dev, protobuf-c-compiler). Without them the examples that need it (a "// PROTO:"
# line) are left out of `make examples`. `make HAVE_VERBS= HAVE_PBC=` builds as if both were absent.
probe = $(shell t=$$(mktemp) && $(CC) $(1) -o $$t $(2) >/dev/null 2>&1 && echo 1; rm -f $$t)
HAVE_VERBS := $(call probe,mk/probe_verbs.c,-libverbs)
HAVE_PBC   := $(if $(shell command -v protoc-c),$(call probe,mk/probe_pbc.c,-lprotobuf-c))
libs_of = $(if $(HAVE_VERBS),$(shell sed -n 's|^// LIBS: ||p' $(1)),$(filter-out -libverbs,$(shell sed -n 's|^// LIBS: ||p' $(1))))

EXAMPLE_SRC = $(if $(HAVE_PBC),$(wildcard examples/*.c),$(shell grep -L '^// PROTO:' examples/*.c))
EXAMPLES    = $(EXAMPLE_SRC:examples/%.c=$(BUILD)/ex/%)
TOOLS       = $(patsubst tools/%.c,$(BUILD)/bin/%,$(wildcard tools/*.c))
TEST_SRC    = $(shell grep -L '^// VM' tests/test_*.c 2>/dev/null)
TESTS       = $(TEST_SRC:tests/%.c=$(BUILD)/t/%) $(patsubst tests/%.cc,$(BUILD)/t/%,$(wildcard tests/test_*.cc))
TSAN_TESTS  = $(patsubst tests/%.c,$(BUILD)/t/%.tsan,$(shell grep -l '^// TSAN' $(TEST_SRC) /dev/null 2>/dev/null))
VG_TESTS    = $(patsubst tests/%.c,$(BUILD)/vg/%,$(shell grep -l '^// VALGRIND' $(TEST_SRC) /dev/null 2>/dev/null))

.PHONY: all examples tools tests demo demo-run test test-host test-vm bench clean compile-check config
all: examples tools tests

examples: $(EXAMPLES)
tools: $(TOOLS)
tests: $(TESTS) $(TSAN_TESTS) $(VG_TESTS)

$(BUILD)/ex/%: examples/%.c $(HEADERS)
	@mkdir -p $(@D)
	$(CC) -O2 -pthread -I. $(WARN) $< -o $@ $(call libs_of,$<)

$(BUILD)/bin/%: tools/%.c $(HEADERS)
	@mkdir -p $(@D)
	$(CC) -O2 -pthread -I. $(WARN) $< -o $@

$(BUILD)/t/%: tests/%.c $(HEADERS) $(wildcard tests/*.h)
	@mkdir -p $(@D)
	$(CC) -std=c11 $(CFLAGS) $(WARN) $(SAN) -pthread -I. $< -o $@ $(call libs_of,$<)

# tests/test_NAME.cc: the implementations compiled as C++17 (ASan+UBSan), with
# -Wno-missing-field-initializers (tests/t.h fills options with C's designated initialisers)
# unless a "// CXX-STRICT" line says the file takes the manuals' C++ way (`T o{};`)
$(BUILD)/t/%: tests/%.cc $(HEADERS) $(wildcard tests/*.h)
	@mkdir -p $(@D)
	$(CXX) -std=c++17 $(CFLAGS) $(WARN) $(if $(shell grep -l '^// CXX-STRICT' $<),,-Wno-missing-field-initializers) \
	    $(SAN) -pthread -I. $< -o $@ $(call libs_of,$<)

$(BUILD)/t/%.tsan: tests/%.c $(HEADERS) $(wildcard tests/*.h)
	@mkdir -p $(@D)
	$(CC) -std=c11 $(CFLAGS) $(WARN) $(TSAN) -DT_TSAN=1 -pthread -I. $< -o $@ $(call libs_of,$<)

$(BUILD)/vg/%: tests/%.c $(HEADERS) $(wildcard tests/*.h)
	@mkdir -p $(@D)
	$(CC) -std=c11 -O1 -g $(WARN) -pthread -I. $< -o $@ $(call libs_of,$<)

# `make demo`: the Debian packages it needs (tests/deps.sh demo; DEPS_NO_OPTIONAL=1: none of the
# optional ones), then demo-run in a new make, whose probes see what was just installed: the
# examples and rpcoolctl, then examples/demo.sh, which ends with its verdict line.
demo:
	@DEMO_START=$$(date +%s); export DEMO_START; \
	sh tests/deps.sh demo || { echo "demo: FAILED at the packages it needs (above)"; exit 1; }; \
	$(MAKE) -s --no-print-directory demo-run

demo-run:
	@echo "== building the examples and rpcoolctl with plain cc -O2 into build/ex and build/bin"
	@echo "   (each program compiles the implementation of the headers it uses)"
	@$(MAKE) -s --no-print-directory examples tools || { echo "demo: FAILED at building the examples"; exit 1; }
	@DEMO_HAVE_VERBS=$(HAVE_VERBS) DEMO_HAVE_PBC=$(HAVE_PBC) sh examples/demo.sh $(BUILD)/ex

test:
	@sh tests/deps.sh host
	@sh tests/run.sh all

test-host:
	@sh tests/deps.sh host
	@sh tests/run.sh host

test-vm:
	@sh tests/run.sh vm

bench:
	@sh tests/deps.sh bench
	@sh bench/run.sh

clean:
	rm -rf $(BUILD)

config:
	@echo "rdma-core (libibverbs-dev): $(if $(HAVE_VERBS),yes,no)"
	@echo "protobuf-c (libprotobuf-c-dev, protobuf-c-compiler): $(if $(HAVE_PBC),yes,no)"

-include $(wildcard mk/*.mk)
