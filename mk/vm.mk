# mk/vm.mk - the VM tier's test programs (tests/vm/*.c -> build/vm/bin/NAME) and the VM
# benchmarks (the bench/*.c marked "// VM" -> build/vm/bin/NAME), built for the guest by
# tests/vm/run.sh with `make vm-bins`; `make test-vm` runs the tier.
VM_SRC  = $(wildcard tests/vm/*.c)
VM_BINS = $(VM_SRC:tests/vm/%.c=$(BUILD)/vm/bin/%)
VM_BENCH_SRC  = $(shell grep -l '^// VM' bench/*.c /dev/null 2>/dev/null)
VM_BENCH_BINS = $(VM_BENCH_SRC:bench/%.c=$(BUILD)/vm/bin/%)

.PHONY: vm-bins vm-compile-check
vm-bins: $(VM_BINS) $(VM_BENCH_BINS)

$(BUILD)/vm/bin/%: bench/%.c bench/hist.h $(wildcard tests/vm/*.h) $(HEADERS)
	@mkdir -p $(@D)
	$(CC) -std=c11 $(CFLAGS) $(WARN) -pthread -I. $< -o $@ $(call libs_of,$<)

# (examples/*.c too: tests/vm/ex_*.c and test_kv_pods.c include an example)
$(BUILD)/vm/bin/%: tests/vm/%.c $(wildcard tests/vm/*.h) tests/t.h $(HEADERS) $(wildcard examples/*.c)
	@mkdir -p $(@D)
	$(CC) -std=c11 $(CFLAGS) $(WARN) -pthread -I. $< -o $@ $(call libs_of,$<)

# impl/verbs.h and impl/cxl.h with every function referenced (tests/vm/compile_impl.inc), and
# shmheap.h with SHMHEAP_WITH_CXL (its "cxl:" path), optimised: as C11 and as C++17.
vm-compile-check:
	@sh tests/vm/compile_check.sh "$(CC)" "$(CXX)" "$(BUILD)/vm/cc"

# A "// VM-ASAN" line in a tests/vm source also builds NAME.asan with ASan+UBSan for the guest.
VM_ASAN_BINS = $(patsubst tests/vm/%.c,$(BUILD)/vm/bin/%.asan,$(shell grep -l '^// VM-ASAN' $(VM_SRC) /dev/null 2>/dev/null))
vm-bins: $(VM_ASAN_BINS)

$(BUILD)/vm/bin/%.asan: tests/vm/%.c tests/vm/vmt.h tests/t.h $(HEADERS)
	@mkdir -p $(@D)
	$(CC) -std=c11 $(CFLAGS) $(WARN) $(SAN) -pthread -I. $< -o $@ $(call libs_of,$<)

# A "// VM-TSAN" line also builds NAME.tsan with ThreadSanitizer (-DT_TSAN=1) for the guest.
VM_TSAN_BINS = $(patsubst tests/vm/%.c,$(BUILD)/vm/bin/%.tsan,$(shell grep -l '^// VM-TSAN' $(VM_SRC) /dev/null 2>/dev/null))
vm-bins: $(VM_TSAN_BINS)

$(BUILD)/vm/bin/%.tsan: tests/vm/%.c tests/vm/vmt.h tests/t.h $(HEADERS)
	@mkdir -p $(@D)
	$(CC) -std=c11 $(CFLAGS) $(WARN) $(TSAN) -DT_TSAN=1 -pthread -I. $< -o $@ $(call libs_of,$<)

# krconn.h's manual example (section 3), cut out of the header; the krconn role runs it.
vm-bins: $(BUILD)/vm/bin/ex_krconn_manual
$(BUILD)/vm/bin/ex_krconn_manual: krconn.h $(wildcard impl/*.h) $(wildcard impl/rpcool/*.h)
	@mkdir -p $(@D)
	sed -n '/^   3\. EXAMPLE/,/^   4\. /p' krconn.h | \
	    sed -n 's/^       //p' >$(BUILD)/vm/ex_krconn_manual.c
	$(CC) -std=c11 $(CFLAGS) $(WARN) -pthread -I. $(BUILD)/vm/ex_krconn_manual.c -o $@ -libverbs

# The pair-of-guests benchmark (tests/vm/run.sh rpcbench, bench/bench_rdma_pair.sh): bench tools
# built into build/vm/bench/, which only that mode packs into the initramfs. rpcool_bench is
# built with rpcool's RDMA transport (-DRPCOOL_WITH_RDMA -libverbs).
# peer_grpc is a separate target: run.sh carries on without it when gRPC does not build.
VMB = $(BUILD)/vm/bench
.PHONY: vm-bench-bins vm-bench-grpc
vm-bench-bins: $(VMB)/rpcool_bench $(VMB)/peer_pbtree $(VMB)/pbc_bench

# RPCBENCH_BASE=COMMIT (a commit of this repository): that commit's rpcool_bench is built too,
# as build/vm/bench/rpcool_bench_base, and the pair run alternates its RDMA no-op with this
# tree's (rpcool_rdma_ab/... rows). Without it no such binary is left for the guests.
RPCBENCH_BASE ?=
ifneq ($(RPCBENCH_BASE),)
vm-bench-bins: $(VMB)/rpcool_bench_base
.PHONY: $(VMB)/rpcool_bench_base
$(VMB)/rpcool_bench_base:
	@mkdir -p $(@D) && rm -rf $(BUILD)/vm/base-src && mkdir -p $(BUILD)/vm/base-src
	git archive $(RPCBENCH_BASE) | tar -x -C $(BUILD)/vm/base-src
	$(CC) -O2 -pthread -I$(BUILD)/vm/base-src -I$(BUILD)/vm/base-src/bench -DRPCOOL_WITH_RDMA=1 \
	    $(BUILD)/vm/base-src/bench/rpcool_bench.c -o $@ -libverbs
else
vm-bench-bins: vm-bench-no-base
.PHONY: vm-bench-no-base
vm-bench-no-base:
	@rm -f $(VMB)/rpcool_bench_base
endif

$(VMB)/rpcool_bench: bench/rpcool_bench.c bench/peer.h bench/hist.h bench/workload.h $(HEADERS)
	@mkdir -p $(@D)
	$(CC) -O2 -pthread -I. -Ibench $(WARN) -DRPCOOL_WITH_RDMA=1 $< -o $@ -libverbs

$(VMB)/gen/tree.pb-c.c: bench/tree.proto
	@mkdir -p $(@D)
	protoc-c --proto_path=bench --c_out=$(@D) $<

$(VMB)/peer_pbtree: bench/peer_pbtree.c bench/peer.h bench/hist.h bench/workload.h \
		$(VMB)/gen/tree.pb-c.c
	$(CC) -O2 -pthread $(WARN) -I$(VMB)/gen $< $(VMB)/gen/tree.pb-c.c -o $@ -lprotobuf-c

vm-bench-grpc: $(VMB)/peer_grpc

$(VMB)/gen/echo.grpc.pb.cc: bench/echo.proto
	@mkdir -p $(@D)
	protoc --proto_path=bench --cpp_out=$(@D) --grpc_out=$(@D) \
		--plugin=protoc-gen-grpc=$$(command -v grpc_cpp_plugin) $<

# generated gRPC code is compiled without -Werror: its warnings are not ours
VMB_GRPC_CXX = $(CXX) -std=c++17 -O2 $$(pkg-config --cflags grpc++ protobuf) -I$(VMB)/gen
$(VMB)/peer_grpc: bench/peer_grpc.cc bench/peer.h bench/hist.h $(VMB)/gen/echo.grpc.pb.cc
	$(VMB_GRPC_CXX) -pthread $(WARN) -c $< -o $(VMB)/gen/peer_grpc.o
	$(VMB_GRPC_CXX) -c $(VMB)/gen/echo.pb.cc -o $(VMB)/gen/echo.pb.o
	$(VMB_GRPC_CXX) -c $(VMB)/gen/echo.grpc.pb.cc -o $(VMB)/gen/echo.grpc.pb.o
	$(CXX) -pthread $(VMB)/gen/peer_grpc.o $(VMB)/gen/echo.pb.o $(VMB)/gen/echo.grpc.pb.o -o $@ \
		$$(pkg-config --libs grpc++ protobuf)

# a protobuf-c service over rpcool between pods against pack + TCP + unpack (bench/pbc_bench.c)
$(VMB)/gen/pbc.pb-c.c: bench/pbc.proto
	@mkdir -p $(@D)
	protoc-c --proto_path=bench --c_out=$(@D) $<

$(VMB)/pbc_bench: bench/pbc_bench.c bench/hist.h $(HEADERS) $(VMB)/gen/pbc.pb-c.c
	$(CC) -O2 -pthread -I. -Ibench -I$(VMB)/gen $(WARN) -DRPCOOL_WITH_RDMA=1 $< \
		$(VMB)/gen/pbc.pb-c.c -o $@ -lprotobuf-c -libverbs
