# SPDX-License-Identifier: MIT
# mk/simt.mk - the CTA executor that runs CUDA kernels on the CPU (tests/simt)
#
# SIMT_OBJS: the executor and its self-test kernels, linked into the test
# runner, with the build's sanitizers (ASan + UBSan for SAN=1).
# SIMT_RACE_BIN: simt-race, kernels broken on purpose, built with
# ThreadSanitizer from objects of its own: TSAN and ASan do not mix, so it
# never gets $(SANFLAGS). Kernel sources compiled as C++ for the executor
# take $(SIMT_CXXFLAGS).

SIMT_CXXFLAGS := -std=gnu++20 -O1 -g -Wall -Wextra \
		 $(if $(filter 1,$(WERROR)),-Werror) -Itests/simt \
		 -Ilibkvmem -Ilibkvmem/include -pthread -MMD -MP
SIMT_OBJS := $(B)/tests/simt/simt.o $(B)/tests/simt/selftest.o
SIMT_RACE_BIN := $(B)/tests/simt-race
SIMT_TSAN_OBJS := $(B)/tests/simt-tsan/race.o $(B)/tests/simt-tsan/simt.o

$(B)/tests/simt/%.o: tests/simt/%.cc | $(DEPS_STAMP)
	$(call msg,CXX,$@)
	@mkdir -p $(@D)
	$(Q)$(CXX) $(SIMT_CXXFLAGS) $(SANFLAGS) -c -o $@ $<

$(B)/tests/simt-tsan/%.o: tests/simt/%.cc | $(DEPS_STAMP)
	$(call msg,CXX,$@)
	@mkdir -p $(@D)
	$(Q)$(CXX) $(SIMT_CXXFLAGS) -fsanitize=thread -c -o $@ $<

$(SIMT_RACE_BIN): $(SIMT_TSAN_OBJS)
	$(call msg,LD,$@)
	$(Q)$(CXX) -fsanitize=thread -pthread -o $@ $^

# check_simt.c runs it.
$(TEST_BIN): | $(SIMT_RACE_BIN)

-include $(SIMT_OBJS:.o=.d) $(SIMT_TSAN_OBJS:.o=.d)
