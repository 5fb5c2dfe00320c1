# Stub design alternatives (stubs/): the interface compiler's C, the runtime,
# the bench driver, the round-trip tests, the fuzz target, and the procedures
# plugged into the reference RPC (stubs/rpc/stubcall.c).
#
#   make stubs         generate build/stubs/*.c from stubs/idl/*.idl and build the programs
#   make test-stubs    round trips (plain and ASan+UBSan), ~15 s of fuzzing, pytest
#   make stubs-bench   `rpcscope stubs bench`: Tables 2-6 for this machine

STUBS_OUT := build/stubs
STUBS_IDL := stubs/idl/chung.idl stubs/idl/calib.idl
STUBS_GEN_C := $(patsubst stubs/idl/%.idl,$(STUBS_OUT)/%_stubs.c,$(STUBS_IDL)) $(STUBS_OUT)/stubreg.c
STUBS_GEN_H := $(patsubst stubs/idl/%.idl,$(STUBS_OUT)/%_stubs.h,$(STUBS_IDL)) $(STUBS_OUT)/stubreg.h
STUBS_RT := stubs/runtime/interp.c stubs/runtime/stubrt.c
STUBS_HDRS := stubs/runtime/interp.h stubs/runtime/stubrt.h $(STUBS_GEN_H)
STUBS_CFLAGS := -O2 -Wall -Wextra -Werror -std=gnu11 -Istubs/runtime -I$(STUBS_OUT)
STUBS_SAN := -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
STUBS_FUZZ_SECONDS ?= 15

# The study's procedures plugged into the reference RPC: stubs/rpc/stubcall.c gives
# rpc/procs.h a procs_table; rpc-server and rpc-client link this library and register it.
# Built like the RPC ($(BUILD), $(ALL_CFLAGS): with or without tracepoints).
RPC_PLUGIN_SRCS := stubs/rpc/stubcall.c $(STUBS_RT) $(STUBS_GEN_C)
RPC_PLUGIN_HDRS := stubs/rpc/stubcall.h $(STUBS_HDRS)
RPC_PLUGIN_CFLAGS := -Istubs/rpc -Istubs/runtime -I$(STUBS_OUT)
RPC_PLUGIN_OBJS := $(patsubst %.c,$(BUILD)/obj/stubs/%.o,$(notdir $(RPC_PLUGIN_SRCS)))
RPC_PLUGIN_LIB := $(BUILD)/libstubcall.a

$(BUILD)/obj/stubs/%.o: stubs/rpc/%.c $(RPC_PLUGIN_HDRS) $(RPC_HDRS)
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(RPC_PLUGIN_CFLAGS) -c -o $@ $<

$(BUILD)/obj/stubs/%.o: stubs/runtime/%.c $(RPC_PLUGIN_HDRS)
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(RPC_PLUGIN_CFLAGS) -c -o $@ $<

$(BUILD)/obj/stubs/%.o: $(STUBS_OUT)/%.c $(RPC_PLUGIN_HDRS)
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(RPC_PLUGIN_CFLAGS) -c -o $@ $<

$(RPC_PLUGIN_LIB): $(RPC_PLUGIN_OBJS)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

.PHONY: stubs test-stubs stubs-bench
all: stubs
stubs: $(STUBS_OUT)/stubbench $(STUBS_OUT)/stubtest

# The compiler rewrites only files whose text changed; touch them so make
# sees them as newer than the interface files either way.
$(STUBS_GEN_C) $(STUBS_GEN_H) &: $(STUBS_IDL) stubs/compiler.py stubs/idl.py
	/usr/bin/python3 stubs/compiler.py -o $(STUBS_OUT) $(STUBS_IDL)
	@touch $(STUBS_GEN_C) $(STUBS_GEN_H)

$(STUBS_OUT)/stub%: stubs/runtime/stub%_main.c $(STUBS_RT) $(STUBS_HDRS) $(STUBS_GEN_C)
	$(CC) $(STUBS_CFLAGS) -o $@ $< $(STUBS_RT) $(STUBS_GEN_C)

$(STUBS_OUT)/asan/stubtest: stubs/runtime/stubtest_main.c $(STUBS_RT) $(STUBS_HDRS) $(STUBS_GEN_C)
	@mkdir -p $(@D)
	$(CC) $(STUBS_CFLAGS) $(STUBS_SAN) -o $@ $< $(STUBS_RT) $(STUBS_GEN_C)

$(STUBS_OUT)/fuzz_interp: stubs/runtime/fuzz_interp.c $(STUBS_RT) $(STUBS_HDRS) $(STUBS_GEN_C)
	clang $(STUBS_CFLAGS) -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	    -o $@ $< $(STUBS_RT) $(STUBS_GEN_C)

test-stubs: stubs $(STUBS_OUT)/asan/stubtest $(STUBS_OUT)/fuzz_interp $(VENV_STAMP)
	$(STUBS_OUT)/stubtest -n 50
	$(STUBS_OUT)/asan/stubtest -n 5
	@rm -rf $(STUBS_OUT)/fuzz-seeds && mkdir -p $(STUBS_OUT)/fuzz-seeds $(STUBS_OUT)/fuzz-corpus
	$(STUBS_OUT)/stubtest -w $(STUBS_OUT)/fuzz-seeds
	set -o pipefail; $(STUBS_OUT)/fuzz_interp -max_total_time=$(STUBS_FUZZ_SECONDS) -max_len=8192 -rss_limit_mb=1024 \
	    $(STUBS_OUT)/fuzz-corpus $(STUBS_OUT)/fuzz-seeds 2>&1 | tail -n 2
	$(PY) -m pytest -q -p no:cacheprovider tests/python/test_stubs.py

stubs-bench: stubs $(VENV_STAMP)
	$(VENV)/bin/rpcscope stubs bench
