# SPDX-License-Identifier: MIT
# kvmem - the one entry point: make, make test, make run, make clean
#
#   make            libkvmem.so/.a (with the GPU kernels' fatbin when nvcc
#                   is found) and the tools
#   make examples   the programs of examples/, in build/examples
#   make test       build and run every Check suite (SAN=1: ASan + UBSan);
#                   the GPU kernels run on the CPU there (tests/simt)
#   make check      the quick loop: make test's suites less the emulated
#                   GPU benchmarks (Check tag "slow"), the Python package,
#                   the README's commands and make install; no fuzzing
#   make run        run kvmemd in the foreground on built-in defaults, its
#                   state in $(BUILD)/state (RUN_FLAGS= adds options)
#   make fuzz       run each libFuzzer target FUZZ_TIME seconds (default
#                   600; make test runs them FUZZ_SMOKE_TIME = 5 s each)
#   make install    PREFIX=/usr/local, DESTDIR=, ... (mk/install.mk)
#   V=1             show the commands
#   WERROR=0        do not turn warnings into errors
#   BUILD=DIR       build there instead of build/
#
# Objects go to build/ (build/san/ with SAN=1) so the two never mix; the
# kernels' fatbin, which has no sanitizer, is built once, in build/kernels.
# Jobs run in parallel, one per CPU (-jN on the command line wins).

VERSION := 0.1.0
SOVERSION := 0

# Not in sub-makes: they share the top make's jobs.
ifeq ($(MAKELEVEL),0)
MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 1)
endif
# make clean all: one goal after the other.
ifneq ($(filter clean,$(MAKECMDGOALS)),)
.NOTPARALLEL:
endif

SAN ?= 0
WERROR ?= 1
BUILD ?= build
V ?= 0

# SAN=1 also turns on kvmemd's debug checks (KVMEMD_DEBUG: every move of
# a session's arena recounts its tables).
ifeq ($(SAN),1)
B := $(BUILD)/san
SANFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all \
	    -fno-omit-frame-pointer
DEBUGFLAGS := -DKVMEMD_DEBUG
else
B := $(BUILD)
SANFLAGS :=
DEBUGFLAGS :=
endif

ifeq ($(V),1)
Q :=
msg = @true
else
Q := @
msg = @printf '  %-7s %s\n' $(1) $(2)
endif

CFLAGS ?= -O2 -g
WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
	-Wpointer-arith -Wformat=2 -Wundef -Wvla
ifeq ($(WERROR),1)
WARN += -Werror
endif
KCFLAGS := -std=gnu11 -D_GNU_SOURCE -Ilibkvmem/include -Ilibkvmem -Ikernels \
	   -MMD -MP $(WARN) $(SANFLAGS) $(DEBUGFLAGS) $(CFLAGS)
KLDFLAGS := $(SANFLAGS) $(LDFLAGS)

# Files that need instruction-set flags of their own; the code in them is
# only reached after a runtime CPU check.
CFLAGS_libkvmem/ecc_avx2.c := -mavx2
AVX512 := -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512vbmi \
	  -mavx512vnni -mgfni
CFLAGS_libkvmem/ecc_avx512.c := $(AVX512)
CFLAGS_libkvmem/attend_avx512.c := $(AVX512)
CFLAGS_libkvmem/crc32c_sse42.c := -msse4.2
CFLAGS_libkvmem/attend_avx2.c := -mavx2 -mfma -mf16c
CFLAGS_daemon/admin.c := -DKVMEM_VERSION='"$(VERSION)"'
CFLAGS_libkvmem/version.c := -DKVMEM_VERSION='"$(VERSION)"'
CFLAGS_daemon/main.c := -DKVMEM_VERSION='"$(VERSION)"'
CFLAGS_tools/kvmemctl.c := -DKVMEMCTL_VERSION='"$(VERSION)"'

LIB_SRCS := libkvmem/cpu.c libkvmem/ecc.c libkvmem/ecc_portable.c \
	    libkvmem/ecc_avx2.c libkvmem/ecc_avx512.c libkvmem/crc32c.c \
	    libkvmem/crc32c_sse42.c libkvmem/inject.c libkvmem/quant.c \
	    libkvmem/page.c libkvmem/rotate.c libkvmem/vq.c libkvmem/cache.c \
	    libkvmem/attend.c \
	    libkvmem/attend_portable.c libkvmem/attend_avx2.c \
	    libkvmem/attend_avx512.c libkvmem/client.c libkvmem/cuda.c \
	    libkvmem/cuda_driver.c libkvmem/pool.c libkvmem/sha256.c \
	    libkvmem/prefix-key.c libkvmem/version.c
# The fatbin first: nvcc, the longest step, starts before the C files.
LIB_PIC_OBJS := $(B)/kernels/fatbin.o $(LIB_SRCS:%.c=$(B)/pic/%.o)
LIB_OBJS := $(B)/kernels/fatbin.o $(LIB_SRCS:%.c=$(B)/%.o)

LIB_SO := $(B)/libkvmem.so.$(VERSION)
LIB_A := $(B)/libkvmem.a

TOOLS := kvmem-ecc kvmem-bench kvmem-eval kvmemctl
TOOL_BINS := $(TOOLS:%=$(B)/tools/%)
BENCH_SRCS := tools/kvmem-bench.c tools/bench.c tools/bench-codec.c \
	      tools/bench-ber.c tools/bench-attend.c tools/bench-attend-gpu.c \
	      tools/bench-ring.c tools/bench-fill.c tools/bench-offload.c \
	      tools/bench-attach.c tools/bench-archive.c tools/bench-prefix.c \
	      tools/bench-hangup.c tools/bench-record.c tools/bench-reboot.c \
	      tools/bench-remote.c tools/bench-tier.c \
	      tools/json.c tools/own-kvmemd.c tools/redis-cluster.c

CTL_SRCS := tools/kvmemctl.c tools/ctl.c tools/ctl-ras.c tools/ctl-metrics.c \
	    tools/ctl-http.c tools/json.c

DAEMON_SRCS := daemon/main.c daemon/config.c daemon/log.c daemon/pool.c \
	       daemon/worker.c daemon/session.c daemon/server.c daemon/ras.c \
	       daemon/admin.c daemon/json.c daemon/store.c daemon/tier.c \
	       daemon/tier-gpu.c \
	       daemon/archive.c daemon/user.c daemon/prefix.c daemon/resume.c \
	       daemon/notify.c daemon/policy.c daemon/arena.c \
	       daemon/patrol.c daemon/inject.c daemon/share.c daemon/record.c \
	       daemon/prefix-save.c daemon/prefix-disk.c daemon/statefile.c \
	       daemon/remote.c daemon/remote-record.c daemon/remote-redis.c \
	       daemon/rcluster.c
DAEMON_BIN := $(B)/daemon/kvmemd
# The configuration parser, the backing store (with the log it writes to),
# a session's arena, the Redis Cluster client and kvmemctl's JSON reader
# are unit-tested in the runner as well, kvmem-bench attend runs there
# with --gpu on the fake driver, and the suites of the shared tier start
# their clusters as kvmem-bench remote does.
TEST_DAEMON_OBJS := $(B)/daemon/config.o $(B)/daemon/store.o \
		    $(B)/daemon/log.o $(B)/daemon/arena.o $(B)/daemon/rcluster.o
TEST_TOOL_OBJS := $(B)/tools/json.o $(B)/tools/bench.o \
		  $(B)/tools/bench-attend.o $(B)/tools/bench-attend-gpu.o \
		  $(B)/tools/redis-cluster.o

TEST_SRCS := $(wildcard tests/*.c)
TEST_BIN := $(B)/tests/kvmem-check

NVCC ?= $(firstword $(wildcard /usr/local/cuda/bin/nvcc) \
	$(shell command -v nvcc 2>/dev/null))
# The PTX of the cost probes (kernels/cost.cu), which scripts/ptx-cost.py
# reads and the ptx_cost suite checks; none without nvcc.
COST_PTX := $(if $(NVCC),$(BUILD)/kernels/cost.ptx)

DEPS_STAMP := $(B)/.deps-ok

# pkg-config runs when a recipe needs it, after the deps step installed it.
CHECK_CFLAGS = $(shell pkg-config --cflags check)
CHECK_LIBS = $(shell pkg-config --libs check)
SYSTEMD_LIBS = $(shell pkg-config --libs libsystemd)

.PHONY: all lib tools daemon test check run clean deps fuzz fuzz-smoke
.DEFAULT_GOAL := all

all: lib tools daemon $(COST_PTX)

lib: $(LIB_SO) $(LIB_A) $(B)/kvmem-uninstalled.pc

tools: $(TOOL_BINS)

daemon: $(DAEMON_BIN)

deps: $(DEPS_STAMP)

$(DEPS_STAMP): scripts/install-deps.sh
	$(Q)scripts/install-deps.sh
	@mkdir -p $(@D) && touch $@

$(B)/pic/%.o: %.c | $(DEPS_STAMP)
	$(call msg,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(KCFLAGS) $(CFLAGS_$<) -fPIC -c -o $@ $<

$(B)/%.o: %.c | $(DEPS_STAMP)
	$(call msg,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(KCFLAGS) $(CFLAGS_$<) -c -o $@ $<

# ---- the CUDA kernels: one fatbin, embedded in libkvmem ----------------
#
# sm_80 and sm_90 code plus sm_90 PTX for newer GPUs, in $(BUILD)/kernels
# whatever SAN is: device code has no sanitizer, and nvcc takes minutes. A
# kernel that spills registers or uses local memory fails the build;
# ptxas's resource report of each kernel is kept in
# $(BUILD)/kernels/resource-usage.txt.
KB := $(BUILD)/kernels
KERNEL_DEPS := $(filter-out kernels/cost.cu, \
		 $(wildcard kernels/*.cu kernels/*.cuh kernels/*.h)) \
	       libkvmem/ecc_word.h libkvmem/quant_word.h \
	       $(wildcard libkvmem/include/kvmem/*.h)
CUDA_GENCODE := -gencode arch=compute_80,code=sm_80 \
		-gencode arch=compute_90,code=sm_90 \
		-gencode arch=compute_90,code=compute_90
NVCC_KFLAGS := -O3 -std=c++17 -Ilibkvmem -Ilibkvmem/include -Ikernels \
	       --resource-usage -Xptxas -warn-spills,-warn-lmem-usage \
	       -Werror all-warnings

ifneq ($(NVCC),)
$(KB)/kvmem.fatbin: $(KERNEL_DEPS)
	@echo "  NVCC    $@ (sm_80, sm_90 and PTX: 2-3 minutes)"
	@mkdir -p $(@D)
	$(Q)$(NVCC) $(NVCC_KFLAGS) $(CUDA_GENCODE) -fatbin -o $@ \
		kernels/kvmem.cu >$(KB)/resource-usage.txt 2>&1 || \
		{ cat $(KB)/resource-usage.txt; rm -f $@; exit 1; }

$(B)/kernels/fatbin.o: kernels/fatbin.S $(KB)/kvmem.fatbin
	$(call msg,AS,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) -c -Wa,-I,$(KB) -o $@ $<

# One architecture's PTX, not in the fatbin.
$(COST_PTX): kernels/cost.cu $(KERNEL_DEPS)
	@echo "  NVCC    $@ (the cost probes' PTX: under a minute)"
	@mkdir -p $(@D)
	$(Q)$(NVCC) -O3 -std=c++17 -Ilibkvmem -Ilibkvmem/include -Ikernels \
		-arch=compute_90 -ptx -o $@ kernels/cost.cu
else
$(B)/kernels/fatbin.o: kernels/fatbin_none.c | $(DEPS_STAMP)
	@echo "NOTE: nvcc not found (set NVCC=): libkvmem is built without GPU kernels"
	@mkdir -p $(@D)
	$(Q)$(CC) $(KCFLAGS) -fPIC -c -o $@ $<
endif

$(LIB_SO): $(LIB_PIC_OBJS) libkvmem/libkvmem.map
	$(call msg,LD,$@)
	$(Q)$(CC) -shared -Wl,-soname,libkvmem.so.$(SOVERSION) \
		-Wl,--version-script=libkvmem/libkvmem.map -Wl,-z,defs \
		-o $@ $(LIB_PIC_OBJS) $(KLDFLAGS) -lpthread -ldl -lm
	$(Q)ln -sf libkvmem.so.$(VERSION) $(B)/libkvmem.so.$(SOVERSION)
	$(Q)ln -sf libkvmem.so.$(SOVERSION) $(B)/libkvmem.so

# pkg-config finds it before an installed kvmem.pc when PKG_CONFIG_PATH
# names the build directory: programs build against the tree.
$(B)/kvmem-uninstalled.pc: libkvmem/kvmem-uninstalled.pc.in Makefile
	$(call msg,GEN,$@)
	@mkdir -p $(@D)
	$(Q)sed -e 's|@SRCDIR@|$(abspath .)|g' \
		-e 's|@BUILDDIR@|$(abspath $(B))|g' \
		-e 's|@VERSION@|$(VERSION)|g' $< > $@.tmp && mv $@.tmp $@

# VERSION is set above: what compiles it in is built again when it changes.
$(B)/libkvmem/version.o $(B)/pic/libkvmem/version.o $(B)/daemon/main.o \
$(B)/daemon/admin.o $(B)/tools/kvmemctl.o: Makefile

$(LIB_A): $(LIB_OBJS)
	$(call msg,AR,$@)
	$(Q)rm -f $@ && $(AR) rcs $@ $^

$(B)/tools/kvmem-ecc: $(B)/tools/kvmem-ecc.o $(LIB_A)
	$(call msg,LD,$@)
	$(Q)$(CC) -o $@ $^ $(KLDFLAGS) -lm

$(B)/tools/kvmem-eval: $(B)/tools/kvmem-eval.o $(B)/tools/own-kvmemd.o $(LIB_A)
	$(call msg,LD,$@)
	$(Q)$(CC) -o $@ $^ $(KLDFLAGS) -lm

$(B)/tools/kvmemctl: $(CTL_SRCS:%.c=$(B)/%.o) $(LIB_A)
	$(call msg,LD,$@)
	$(Q)$(CC) -o $@ $^ $(KLDFLAGS) -lm

# kvmem-bench remote times the cluster with kvmemd's own client.
$(B)/tools/kvmem-bench: $(BENCH_SRCS:%.c=$(B)/%.o) $(B)/daemon/rcluster.o \
			$(LIB_A)
	$(call msg,LD,$@)
	$(Q)$(CC) -o $@ $^ $(KLDFLAGS) -lhiredis -lpthread -lm

$(DAEMON_BIN): $(DAEMON_SRCS:%.c=$(B)/%.o) $(LIB_A)
	$(call msg,LD,$@)
	$(Q)$(CC) -o $@ $^ $(KLDFLAGS) $(SYSTEMD_LIBS) -lhiredis -luring \
		-lpthread -ldl -lm

$(B)/tests/%.o: tests/%.c | $(DEPS_STAMP)
	$(call msg,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(KCFLAGS) $(CHECK_CFLAGS) -c -o $@ $<

# The kernels of kernels/, unchanged, run on host threads for the tests
# (tests/simt): C++, so the runner is linked with $(CXX).
include mk/simt.mk
include mk/examples.mk

CTA_OBJS := $(B)/tests/cuda/simt_kernels.o
CTA_CXXFLAGS := -std=gnu++20 -D_GNU_SOURCE -Itests/simt -Ikernels -Ilibkvmem \
		-Ilibkvmem/include -MMD -MP -Wall -Wextra -Wno-unused-parameter \
		$(if $(filter 1,$(WERROR)),-Werror) -pthread $(SANFLAGS) $(CFLAGS)

$(B)/tests/cuda/%.o: tests/cuda/%.cc | $(DEPS_STAMP)
	$(call msg,CXX,$@)
	@mkdir -p $(@D)
	$(Q)$(CXX) $(CTA_CXXFLAGS) -c -o $@ $<

# The libcuda.so.1 the tests load in place of the driver: kernels launched
# through it run in the runner's executor (tests/cuda/fakecuda.h).
FAKECUDA_SO := $(B)/tests/libfakecuda.so

$(FAKECUDA_SO): tests/cuda/fakecuda.c tests/cuda/fakecuda.h | $(DEPS_STAMP)
	$(call msg,CCLD,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(KCFLAGS) -fPIC -shared -fvisibility=hidden -o $@ $<

# The kernels and their executor again, as a library of their own, for a
# process with none linked in (FAKECUDA_SIMT): the Python tests'
# interpreter, and kvmemd on the fake driver, whose GPU tier checks pages
# there with the kernels. Never sanitized, like the interpreters that load
# it (a sanitized kvmemd takes it as it takes any library built without).
SIMT_SO := $(B)/tests/libkvmem-simt.so
SIMT_PIC_OBJS := $(B)/tests/simt-pic/simt_kernels.o $(B)/tests/simt-pic/simt.o

$(B)/tests/simt-pic/%.o: tests/cuda/%.cc | $(DEPS_STAMP)
	$(call msg,CXX,$@)
	@mkdir -p $(@D)
	$(Q)$(CXX) $(filter-out $(SANFLAGS),$(CTA_CXXFLAGS)) -fPIC -c -o $@ $<

$(B)/tests/simt-pic/%.o: tests/simt/%.cc | $(DEPS_STAMP)
	$(call msg,CXX,$@)
	@mkdir -p $(@D)
	$(Q)$(CXX) $(SIMT_CXXFLAGS) -fPIC -c -o $@ $<

$(SIMT_SO): $(SIMT_PIC_OBJS)
	$(call msg,LD,$@)
	$(Q)$(CXX) -shared -pthread -o $@ $^

$(TEST_BIN): $(TEST_SRCS:%.c=$(B)/%.o) $(TEST_DAEMON_OBJS) $(TEST_TOOL_OBJS) \
	     $(CTA_OBJS) $(SIMT_OBJS) $(LIB_A) | $(LIB_SO) $(FAKECUDA_SO) \
	     $(EXAMPLE_BINS) $(SIMT_SO)
	$(call msg,LD,$@)
	$(Q)$(CXX) -o $@ $^ $(KLDFLAGS) $(CHECK_LIBS) -lhiredis -luring \
		-lpthread -lm

# ---- fuzzing: libFuzzer targets in tests/fuzz/, built with clang -------
#
# The library and the daemon less its event loop (main.c, server.c),
# compiled again with ASan, UBSan and libFuzzer's coverage; see
# scripts/fuzz.sh for the runs.
FUZZ_CC ?= clang
FUZZ_B := $(BUILD)/fuzz
FUZZ_TARGETS := config admin store_hdr hello remote_record
FUZZ_TIME ?= 600
FUZZ_SMOKE_TIME ?= 5
FUZZ_SAN := -fsanitize=address,undefined -fno-sanitize-recover=all \
	    -fno-omit-frame-pointer
FUZZ_CFLAGS := -std=gnu11 -D_GNU_SOURCE -Ilibkvmem/include -Ilibkvmem -Ikernels \
	       -MMD -MP $(WARN) -g -O1 $(FUZZ_SAN) -fsanitize=fuzzer-no-link
FUZZ_SRCS := $(LIB_SRCS) \
	     $(filter-out daemon/main.c daemon/server.c,$(DAEMON_SRCS)) \
	     tools/json.c tests/fuzz/fuzz_daemon.c kernels/fatbin_none.c
FUZZ_OBJS := $(FUZZ_SRCS:%.c=$(FUZZ_B)/%.o)
FUZZ_BINS := $(FUZZ_TARGETS:%=$(FUZZ_B)/fuzz-%)
# Reached through a pattern rule, they would count as intermediate and be
# deleted after each link, to be compiled again for the next run.
.SECONDARY: $(FUZZ_OBJS) $(FUZZ_TARGETS:%=$(FUZZ_B)/tests/fuzz/fuzz_%.o)

$(FUZZ_B)/%.o: %.c | $(DEPS_STAMP)
	$(call msg,FUZZCC,$@)
	@mkdir -p $(@D)
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) $(CFLAGS_$<) -c -o $@ $<

$(FUZZ_B)/fuzz-%: $(FUZZ_B)/tests/fuzz/fuzz_%.o $(FUZZ_OBJS)
	$(call msg,LD,$@)
	$(Q)$(FUZZ_CC) $(FUZZ_SAN) -fsanitize=fuzzer -o $@ $^ \
		$(SYSTEMD_LIBS) -lhiredis -luring -lpthread -ldl -lm

fuzz: $(FUZZ_BINS)
	$(Q)scripts/fuzz.sh $(FUZZ_B) $(FUZZ_TIME) $(FUZZ_TARGETS)

# In make test: a short run of each, or a SKIP where clang has no
# libFuzzer (scripts/install-deps.sh installs it on Debian).
fuzz-smoke: | $(DEPS_STAMP)
	$(Q)if scripts/fuzz.sh --probe $(FUZZ_CC); then \
		$(MAKE) --no-print-directory fuzz FUZZ_TIME=$(FUZZ_SMOKE_TIME); \
	else \
		echo "SKIP: fuzz: $(FUZZ_CC) cannot build libFuzzer targets"; \
	fi

# Check's own timeouts are per test; sanitizers make everything slower.
TEST_ENV := KVMEM_BUILD=$(B) CK_DEFAULT_TIMEOUT=120 KVMEM_SRCDIR=$(CURDIR) \
	    KVMEM_VERSION=$(VERSION)
ifeq ($(SAN),1)
TEST_ENV += CK_TIMEOUT_MULTIPLIER=4 ASAN_OPTIONS=detect_leaks=1 \
	    UBSAN_OPTIONS=print_stacktrace=1
endif

# The fuzz targets carry their own sanitizers: run once, not again for
# SAN=1.
ifeq ($(SAN),1)
test: all $(TEST_BIN)
	$(Q)$(TEST_ENV) $(TEST_BIN)
else
test: all $(TEST_BIN)
	$(Q)$(TEST_ENV) $(TEST_BIN)
	$(Q)$(MAKE) --no-print-directory fuzz-smoke
endif

CHECK_ENV := CK_EXCLUDE_TAGS=slow CK_EXCLUDE_SUITES=python,readme,install

check: all $(TEST_BIN)
	$(Q)$(TEST_ENV) $(CHECK_ENV) $(TEST_BIN)

# On built-in defaults, whoever runs it: no configuration file (not even
# an installed /etc/kvmem/kvmemd.conf) and the state in the build
# directory, never the system's /var/lib/kvmem; RUN_FLAGS adds kvmemd
# options, which win (-c FILE, -d DIR, -o SECTION.KEY=VALUE).
RUN_FLAGS ?=

run: all
	$(DAEMON_BIN) -f -c /dev/null -d $(abspath $(B))/state $(RUN_FLAGS)

clean:
	rm -rf $(BUILD)

include mk/install.mk

-include $(shell find $(B) -name '*.d' 2>/dev/null)
