# mk/vm.mk - the VM tier's test programs (tests/vm/*.c -> build/vm/bin/NAME), built for the
# guest by tests/vm/run.sh with `make vm-bins`; `make test-vm` runs the tier.
VM_SRC  = $(wildcard tests/vm/*.c)
VM_BINS = $(VM_SRC:tests/vm/%.c=$(BUILD)/vm/bin/%)

.PHONY: vm-bins vm-compile-check
vm-bins: $(VM_BINS)

$(BUILD)/vm/bin/%: tests/vm/%.c $(wildcard tests/vm/*.h) tests/t.h $(HEADERS)
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
$(BUILD)/vm/bin/ex_krconn_manual: krconn.h $(wildcard impl/*.h)
	@mkdir -p $(@D)
	sed -n '/^   3\. EXAMPLE/,/^   4\. /p' krconn.h | \
	    sed -n 's/^       //p' >$(BUILD)/vm/ex_krconn_manual.c
	$(CC) -std=c11 $(CFLAGS) $(WARN) -pthread -I. $(BUILD)/vm/ex_krconn_manual.c -o $@ -libverbs
