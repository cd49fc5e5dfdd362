# protobuf-c: NAME.proto -> NAME.pb-c.c and NAME.pb-c.h beside it (protoc-c, Debian's
# protobuf-c-compiler), generated before the programs that include them.

%.pb-c.c %.pb-c.h: %.proto
	protoc-c --proto_path=$(<D) --c_out=$(<D) $<

# a program that includes generated code names it in a "// PROTO: NAME.proto" line
pbc_needs = $(addprefix $(dir $(1)),$(patsubst %.proto,%.pb-c.c,$(shell sed -n 's|^// PROTO: ||p' $(1))))
pbc_target = $(patsubst examples/%.c,$(BUILD)/ex/%,$(patsubst tests/%.c,$(BUILD)/t/%,\
  $(patsubst tests/vm/%.c,$(BUILD)/vm/bin/%,$(1))))
$(foreach s,$(shell grep -l '^// PROTO:' examples/*.c tests/test_*.c tests/vm/*.c 2>/dev/null),\
  $(eval $(call pbc_target,$(s)) $(patsubst tests/%.c,$(BUILD)/t/%.tsan,$(s)): \
    $(call pbc_needs,$(s))))
