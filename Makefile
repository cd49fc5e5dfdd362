# rpcool - one Makefile. `make` builds examples and tests; `make demo`, `make test`,
# `make test-host`, `make test-vm`, `make bench`, `make clean`.
# Conventions (so new parts need no edits here):
#   examples/NAME.c        -> build/ex/NAME         plain cc -O2 -pthread, as a user would
#   tools/NAME.c           -> build/bin/NAME        the same (rpcoolctl)
#   tests/test_NAME.c      -> build/t/test_NAME      ASan+UBSan (tests/test_NAME.cc: C++17); a "// TSAN" line also builds
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

# Without rdma-core's headers (libibverbs-dev) the headers compile their RDMA parts out
# (KRCONN_NO_RDMA and the like, automatic), so -libverbs is dropped from the link line: the
# examples still build with plain cc and `make demo` needs no extra package.
HAVE_VERBS := $(shell echo '\#include <infiniband/verbs.h>' | $(CC) -E -x c - >/dev/null 2>&1 && echo 1)
libs_of = $(if $(HAVE_VERBS),$(shell sed -n 's|^// LIBS: ||p' $(1)),$(filter-out -libverbs,$(shell sed -n 's|^// LIBS: ||p' $(1))))

# Without protobuf-c (libprotobuf-c-dev, protobuf-c-compiler) the examples that need it (a
# "// PROTO:" line) are left out of `make examples`: the others still build with plain cc.
HAVE_PBC := $(shell command -v protoc-c >/dev/null 2>&1 && echo '\#include <protobuf-c/protobuf-c.h>' | \
	$(CC) -E -x c - >/dev/null 2>&1 && echo 1)
EXAMPLE_SRC = $(if $(HAVE_PBC),$(wildcard examples/*.c),$(shell grep -L '^// PROTO:' examples/*.c))
EXAMPLES    = $(EXAMPLE_SRC:examples/%.c=$(BUILD)/ex/%)
TOOLS       = $(patsubst tools/%.c,$(BUILD)/bin/%,$(wildcard tools/*.c))
TEST_SRC    = $(shell grep -L '^// VM' tests/test_*.c 2>/dev/null)
TESTS       = $(TEST_SRC:tests/%.c=$(BUILD)/t/%) $(patsubst tests/%.cc,$(BUILD)/t/%,$(wildcard tests/test_*.cc))
TSAN_TESTS  = $(patsubst tests/%.c,$(BUILD)/t/%.tsan,$(shell grep -l '^// TSAN' $(TEST_SRC) /dev/null 2>/dev/null))
VG_TESTS    = $(patsubst tests/%.c,$(BUILD)/vg/%,$(shell grep -l '^// VALGRIND' $(TEST_SRC) /dev/null 2>/dev/null))

.PHONY: all examples tools tests demo test test-host test-vm bench clean compile-check
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

# tests/test_NAME.cc: the implementations compiled as C++17 (ASan+UBSan)
$(BUILD)/t/%: tests/%.cc $(HEADERS) $(wildcard tests/*.h)
	@mkdir -p $(@D)
	$(CXX) -std=c++17 $(CFLAGS) $(WARN) -Wno-missing-field-initializers $(SAN) -pthread -I. $< -o $@ \
	    $(call libs_of,$<)

$(BUILD)/t/%.tsan: tests/%.c $(HEADERS) $(wildcard tests/*.h)
	@mkdir -p $(@D)
	$(CC) -std=c11 $(CFLAGS) $(WARN) $(TSAN) -DT_TSAN=1 -pthread -I. $< -o $@ $(call libs_of,$<)

$(BUILD)/vg/%: tests/%.c $(HEADERS) $(wildcard tests/*.h)
	@mkdir -p $(@D)
	$(CC) -std=c11 -O1 -g $(WARN) -pthread -I. $< -o $@ $(call libs_of,$<)

demo:
	@sh tests/deps.sh demo
	@echo "== building the examples and rpcoolctl with plain cc -O2 (build/ex, build/bin): 20-30 s"
	@$(MAKE) -s examples tools
	@sh examples/demo.sh $(BUILD)/ex

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

-include $(wildcard mk/*.mk)
