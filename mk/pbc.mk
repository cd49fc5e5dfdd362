# protobuf-c: NAME.proto in examples/ and tests/ -> NAME.pb-c.c and NAME.pb-c.h beside it
# (protoc-c, Debian's protobuf-c-compiler), generated before the programs that include them.
PBC_PROTOS = $(wildcard examples/*.proto tests/*.proto)
PBC_GEN    = $(PBC_PROTOS:.proto=.pb-c.c)

%.pb-c.c %.pb-c.h: %.proto
	protoc-c --proto_path=$(<D) --c_out=$(<D) $<

# a program that includes generated code names it in a "// PROTO: NAME.proto" line
pbc_needs = $(addprefix $(dir $(1)),$(patsubst %.proto,%.pb-c.c,$(shell sed -n 's|^// PROTO: ||p' $(1))))
$(foreach s,$(shell grep -l '^// PROTO:' examples/*.c tests/test_*.c 2>/dev/null),\
  $(eval $(patsubst examples/%.c,$(BUILD)/ex/%,$(patsubst tests/%.c,$(BUILD)/t/%,$(s))) \
    $(patsubst tests/%.c,$(BUILD)/t/%.tsan,$(s)): $(call pbc_needs,$(s))))
