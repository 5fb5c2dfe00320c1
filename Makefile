# rpcscope top-level Makefile.
#
#   make              build the reference RPC with tracepoints (build/trace/)
#   make TRACE=0      build it with tracepoints compiled out (build/notrace/)
#   make TRACE=clock  build it with each step mark one clock read into memory (build/clock/)
#   make peers        the other RPC systems of `rpcscope experiment` (build/peers/bin/: libtirpc, gRPC C++)
#   make bootstrap    install Debian packages and the Python venv (idempotent)
#   make test         bootstrap if needed, then run every test (make lint first), the two-kernel one included
#   make lint         ruff over the Python, clang-format's check over the C (.clang-format)
#   make vm           the VM host's kernel, lttng-modules and initramfs (a store shared by the machine's checkouts; build/vm/vm.json)
#   make test-vm      the two-kernel test on a QEMU guest alone (about 4 minutes)
#   make run          the main job on the local testbed
#   make bench        benchmarks (not tests, rpcscope bench NAME): null-RPC RTT against sockperf;
#                     make bench-capture, make bench-analysis: capture and analysis cost
#                     make bench-event-cost: one kernel event's cost, perf beside ftrace
#   make fuzz-long    long libFuzzer campaigns: PDU parsing, the CTF reader (not part of make test)

SHELL := /bin/bash
.DEFAULT_GOAL := all

TRACE ?= 1
CC ?= gcc
BUILD := build/$(if $(filter 0,$(TRACE)),notrace,$(if $(filter clock,$(TRACE)),clock,trace))
GEN := build/gen
NPROC := $(shell nproc 2>/dev/null || echo 1)
VENV := .venv
VENV_STAMP := $(VENV)/.rpcscope-bootstrap
PY := $(VENV)/bin/python

WARN := -Wall -Wextra -Werror
CFLAGS ?= -O2 -g
BASE_CFLAGS := $(WARN) -std=gnu11 -D_GNU_SOURCE -pthread -Irpc -I$(GEN) -fno-strict-aliasing
ifeq ($(TRACE),0)
TRACE_CFLAGS := -DRPCS_TRACE_ENABLED=0
TRACE_LIBS :=
TP_OBJ :=
else ifeq ($(TRACE),clock)
TRACE_CFLAGS := -DRPCS_TRACE_ENABLED=2
TRACE_LIBS :=
TP_OBJ :=
else
TRACE_CFLAGS := -DRPCS_TRACE_ENABLED=1
TRACE_LIBS := -llttng-ust -ldl
TP_OBJ := $(BUILD)/obj/rpcscope_tp.o
endif
ALL_CFLAGS := $(BASE_CFLAGS) $(TRACE_CFLAGS) $(CFLAGS)
LDLIBS := -pthread $(TRACE_LIBS)

# The reference RPC: one library (nothing of the stub study in it), four programs.
RPC_MODULES := util wire marshal procs xport reasm replycache server client bench wakecal clockmark cpuspeed turns
RPC_SRCS := $(addprefix rpc/,$(addsuffix .c,$(RPC_MODULES)))
RPC_HDRS := $(wildcard rpc/*.h) $(GEN)/rpcscope_tp.h
RPC_OBJS := $(patsubst rpc/%.c,$(BUILD)/obj/%.o,$(RPC_SRCS))
RPC_LIB := $(BUILD)/librpcs.a
BINS := $(BUILD)/bin/rpc-server $(BUILD)/bin/rpc-client $(BUILD)/bin/rpc-wakecal $(BUILD)/bin/rpc-cpuspeed

C_TESTS := test_wire test_frag test_marshal test_reasm test_clockmark test_clockring test_turns test_reasm_share test_procs
C_TEST_BINS := $(addprefix $(BUILD)/tests/,$(C_TESTS))

GENERATED := $(GEN)/rpcscope_tp.h $(GEN)/rpcscope_tp.c $(GEN)/rpcscope_kernel.h tracepoints/catalog_gen.py

# The stub study, and its procedures plugged into the RPC: RPC_PLUGIN_LIB, RPC_PLUGIN_CFLAGS
# and RPC_PLUGIN_SRCS, which rpc-server, rpc-client and the PDU fuzz target link.
include stubs/stubs.mk

# The other RPC systems `rpcscope experiment` runs beside the reference one: make peers.
include peers/peers.mk

.PHONY: all generate bootstrap test test-c test-asan test-fuzz test-py run bench fuzz-long clean lint
all: $(GENERATED) $(BINS) $(C_TEST_BINS)

generate: $(GENERATED)

$(GENERATED) &: tracepoints/steps.toml tracepoints/gen_catalog.py
	/usr/bin/python3 tracepoints/gen_catalog.py tracepoints/steps.toml \
	    --c-header $(GEN)/rpcscope_tp.h --c-probe $(GEN)/rpcscope_tp.c --python tracepoints/catalog_gen.py \
	    --c-kernel $(GEN)/rpcscope_kernel.h
	@# The generator leaves unchanged files alone; touch them so make sees them up to date.
	@touch $(GENERATED)

$(BUILD)/obj/%.o: rpc/%.c $(RPC_HDRS)
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

# The provider is built without -Werror: its code is LTTng's macro expansion, not ours.
$(BUILD)/obj/rpcscope_tp.o: $(GEN)/rpcscope_tp.c $(GEN)/rpcscope_tp.h
	@mkdir -p $(@D)
	$(CC) -O2 -g -fPIC -I$(GEN) -c -o $@ $<

$(RPC_LIB): $(RPC_OBJS) $(TP_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/bin/rpc-%: rpc/%_main.c $(RPC_LIB) $(RPC_HDRS)
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(RPC_LIB) $(LDLIBS)

# rpc-server and rpc-client serve and call the stub study's procedures too.
$(BUILD)/bin/rpc-server $(BUILD)/bin/rpc-client: $(BUILD)/bin/rpc-%: rpc/%_main.c $(RPC_PLUGIN_LIB) $(RPC_LIB) \
    $(RPC_HDRS) $(RPC_PLUGIN_HDRS)
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(RPC_PLUGIN_CFLAGS) -o $@ $< $(RPC_PLUGIN_LIB) $(RPC_LIB) $(LDLIBS)

$(BUILD)/tests/%: tests/c/%.c tests/c/check.h $(RPC_LIB) $(RPC_HDRS)
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -Itests/c -o $@ $< $(RPC_LIB) $(LDLIBS)

# ---------------------------------------------------------------- sanitizers and fuzzing
ASAN_DIR := build/asan
ASAN_FLAGS := -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
FUZZ_DIR := build/fuzz
FUZZ_SECONDS ?= 20

$(ASAN_DIR)/%: tests/c/%.c tests/c/check.h $(RPC_SRCS) $(RPC_HDRS)
	@mkdir -p $(@D)
	$(CC) $(BASE_CFLAGS) -DRPCS_TRACE_ENABLED=0 $(ASAN_FLAGS) -Itests/c -o $@ $< $(RPC_SRCS) -pthread

# rpcscope's own CTF reader (analysis/ctfread.c) on damaged traces; its seeds are made from the
# test fixtures (tests/c/make_ctfread_seeds.py).
$(FUZZ_DIR)/fuzz_ctfread: tests/c/fuzz_ctfread.c analysis/ctfread.c analysis/ctfread.h
	@mkdir -p $(@D)
	clang -Wall -Wextra -Werror -std=gnu11 -Ianalysis -O1 -g -fsanitize=fuzzer,address,undefined -o $@ tests/c/fuzz_ctfread.c analysis/ctfread.c

$(FUZZ_DIR)/ctfread_seeds/.made: tests/c/make_ctfread_seeds.py tests/python/fixtures/make_ctf.py $(VENV_STAMP)
	$(PY) tests/c/make_ctfread_seeds.py $(@D)
	@touch $@

$(FUZZ_DIR)/fuzz_pdu: tests/c/fuzz_pdu.c $(RPC_SRCS) $(RPC_PLUGIN_SRCS) $(RPC_HDRS) $(RPC_PLUGIN_HDRS)
	@mkdir -p $(@D)
	clang $(BASE_CFLAGS) $(RPC_PLUGIN_CFLAGS) -DRPCS_TRACE_ENABLED=0 -O1 -g -fsanitize=fuzzer,address,undefined -o $@ \
	    tests/c/fuzz_pdu.c $(RPC_SRCS) $(RPC_PLUGIN_SRCS) -pthread

# ---------------------------------------------------------------- bootstrap, tests, jobs
$(VENV_STAMP): pyproject.toml scripts/bootstrap.sh
	bash scripts/bootstrap.sh
	touch $@

bootstrap:
	bash scripts/bootstrap.sh
	@touch $(VENV_STAMP)

test-c: all
	@set -e; for t in $(C_TEST_BINS); do echo "== $$t"; $$t; done

test-asan: $(addprefix $(ASAN_DIR)/,$(C_TESTS))
	@set -e; for t in $^; do echo "== $$t (ASan+UBSan)"; $$t; done

test-fuzz: $(FUZZ_DIR)/fuzz_pdu $(FUZZ_DIR)/fuzz_ctfread $(FUZZ_DIR)/ctfread_seeds/.made
	@mkdir -p $(FUZZ_DIR)/corpus $(FUZZ_DIR)/ctfread_corpus
	@# Output goes to a log (libFuzzer is chatty); a crash fails the target and shows the log's tail.
	@$(FUZZ_DIR)/fuzz_pdu -max_total_time=$(FUZZ_SECONDS) -max_len=70000 -rss_limit_mb=1024 \
	    $(FUZZ_DIR)/corpus tests/c/fuzz_seeds > $(FUZZ_DIR)/fuzz.log 2>&1 \
	    || { tail -n 40 $(FUZZ_DIR)/fuzz.log; echo "fuzz_pdu found a crash: see $(FUZZ_DIR)/fuzz.log and the crash-* file"; exit 1; }
	@tail -n 1 $(FUZZ_DIR)/fuzz.log
	@$(FUZZ_DIR)/fuzz_ctfread -max_total_time=$(FUZZ_SECONDS) -max_len=80000 -rss_limit_mb=1024 \
	    -artifact_prefix=$(FUZZ_DIR)/ $(FUZZ_DIR)/ctfread_corpus $(FUZZ_DIR)/ctfread_seeds > $(FUZZ_DIR)/fuzz_ctfread.log 2>&1 \
	    || { tail -n 40 $(FUZZ_DIR)/fuzz_ctfread.log; echo "fuzz_ctfread found a crash: see $(FUZZ_DIR)/fuzz_ctfread.log and the crash-* file"; exit 1; }
	@tail -n 1 $(FUZZ_DIR)/fuzz_ctfread.log

test-py: $(VENV_STAMP) all
	$(MAKE) TRACE=0 all
	$(MAKE) TRACE=clock all
	$(PY) -m pytest -q -rs tests/python

# The two-kernel test alone (make test runs it too): a QEMU guest under TCG as the server host, about
# 4 minutes; make vm first (a few minutes the first time on a machine, then about a second: its kernel,
# modules and initramfs are in a store that every checkout on the machine shares).
.PHONY: test-vm
test-vm: $(VENV_STAMP) all
	$(MAKE) TRACE=0 all
	$(MAKE) TRACE=clock all
	$(MAKE) vm
	$(MAKE) test-vm-pytest

# The two-kernel test's pytest alone: the builds and make vm done.
.PHONY: test-vm-pytest
test-vm-pytest: $(VENV_STAMP)
	$(PY) -m pytest -q -rs -p no:cacheprovider tests/python/test_vm_testbed.py

# make lint: ruff over the Python (pyproject.toml [tool.ruff]) and clang-format's check over the C of the
# reference RPC, the analysis's extractor and the stub study (.clang-format). To fix what they find:
#   .venv/bin/ruff check --fix .   (then by hand what it cannot)      clang-format -i FILE...
LINT_C := $(sort $(wildcard rpc/*.[ch] analysis/*.[ch] stubs/runtime/*.[ch] stubs/rpc/*.[ch] peers/common/*.[ch] peers/tirpc/*.c peers/grpc/*.cc))
lint: $(VENV_STAMP)
	$(VENV)/bin/ruff check --no-cache .
	clang-format --dry-run -Werror $(LINT_C)

# ansible-lint, production profile, over ansible/ (playbooks, roles, example inventory).
.PHONY: lint-ansible
lint-ansible: $(VENV_STAMP)
	cd ansible && PATH="$(CURDIR)/$(VENV)/bin:$$PATH" ../$(VENV)/bin/ansible-lint -q

# The builds run one job per CPU. The two-kernel test (its guest one emulated CPU) runs beside the checks
# that take one CPU each (C tests, sanitizers, TEST_FUZZ_SECONDS per fuzz target: make fuzz-long for
# campaigns, the stub study, ansible-lint); then the other Python tests. pytest -rs: every skipped test
# says why (a seed table not found, the VM's timing).
TEST_FUZZ_SECONDS ?= 8
test: $(VENV_STAMP)
	$(MAKE) lint
	$(MAKE) -j$(NPROC) all
	$(MAKE) -j$(NPROC) TRACE=0 all
	$(MAKE) -j$(NPROC) TRACE=clock all
	$(MAKE) -j$(NPROC) peers
	$(MAKE) vm
	$(MAKE) -j2 --output-sync=target test-vm-pytest test-checks
	$(PY) -m pytest -q -rs -p no:cacheprovider --durations=15 --ignore=tests/python/test_vm_testbed.py \
	    --ignore=tests/python/test_stubs.py tests/python

# One after the other; make test runs them beside the two-kernel test. test-stubs runs test_stubs.py.
.PHONY: test-checks
test-checks: $(VENV_STAMP)
	$(MAKE) test-c
	$(MAKE) test-asan
	$(MAKE) test-fuzz FUZZ_SECONDS=$(TEST_FUZZ_SECONDS)
	$(MAKE) test-stubs STUBS_FUZZ_SECONDS=$(TEST_FUZZ_SECONDS)
	$(MAKE) lint-ansible

# The main job (rpcscope/pipeline.py): testbed up, deploy, capture the DCE sizes plus held-out
# ones over UDP and TCP, analyze, round-trip path, model, report, testbed down. RUN_ARGS adds options.
run: $(VENV_STAMP) all
	$(MAKE) TRACE=0 all
	$(MAKE) TRACE=clock all
	$(VENV)/bin/rpcscope run $(RUN_ARGS)

bench: $(VENV_STAMP) all
	$(MAKE) TRACE=0 all
	$(VENV)/bin/rpcscope bench null

# Benchmark of `rpcscope capture` (rpcscope bench capture, not a test): needs root and `rpcscope testbed up`.
.PHONY: bench-capture
bench-capture: $(VENV_STAMP) all
	$(MAKE) TRACE=0 all
	$(VENV)/bin/rpcscope bench capture

# Benchmark (not a test): what one recorded kernel event costs the thread that hits it, perf beside
# ftrace, in one run (collectors/eventcost.py). Needs root, perf and tracefs.
.PHONY: bench-event-cost
bench-event-cost: $(VENV_STAMP)
	$(VENV)/bin/rpcscope bench event-cost

# Benchmark of the analysis (not a test): events/s and peak memory on a run directory,
# by default the newest under runs/ that has traces (make bench-analysis BENCH_RUN=runs/NAME).
.PHONY: bench-analysis
BENCH_RUN ?= $(shell ls -td runs/*/manifest.json 2>/dev/null | head -n 1 | xargs -r dirname)
bench-analysis: $(VENV_STAMP) all
	@test -n "$(BENCH_RUN)" || { echo "bench-analysis: no run under runs/: make run first, or give BENCH_RUN=runs/NAME"; exit 2; }
	$(VENV)/bin/rpcscope bench analysis $(BENCH_RUN)

fuzz-long: $(FUZZ_DIR)/fuzz_pdu $(FUZZ_DIR)/fuzz_ctfread $(FUZZ_DIR)/ctfread_seeds/.made
	@mkdir -p $(FUZZ_DIR)/corpus $(FUZZ_DIR)/ctfread_corpus
	$(FUZZ_DIR)/fuzz_pdu -max_total_time=$${FUZZ_LONG_SECONDS:-3600} -max_len=70000 $(FUZZ_DIR)/corpus tests/c/fuzz_seeds
	$(FUZZ_DIR)/fuzz_ctfread -max_total_time=$${FUZZ_LONG_SECONDS:-3600} -max_len=80000 -artifact_prefix=$(FUZZ_DIR)/ \
	    $(FUZZ_DIR)/ctfread_corpus $(FUZZ_DIR)/ctfread_seeds

clean:
	rm -rf build tracepoints/catalog_gen.py

include analysis/analysis.mk

# The VM host (rpcscope testbed up --server vm): make vm.
include testbed/vm/vm.mk
