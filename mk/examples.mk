# SPDX-License-Identifier: MIT
# mk/examples.mk - make examples: the programs of examples/ (included by
# the Makefile)
#
# Built as a program outside the tree builds against it: with the flags
# pkg-config gives for kvmem-uninstalled.pc (PKG_CONFIG_PATH naming the
# build directory), the commands examples/README.md shows, plus warnings
# and this build's sanitizers, whose library they link. Into $(B)/examples;
# the C++ session is session-cc there, beside the C one. The test runner
# needs them (tests/check_examples.c): make builds them before it.

EXAMPLE_BINS := $(B)/examples/embedded-attention $(B)/examples/session \
		$(B)/examples/prefix-sharing $(B)/examples/session-cc
EXAMPLE_WARN := -Wall -Wextra -Wpedantic $(if $(filter 1,$(WERROR)),-Werror)
EXAMPLE_PC = PKG_CONFIG_PATH=$(abspath $(B)) pkg-config
EXAMPLE_DEPS := $(LIB_SO) $(B)/kvmem-uninstalled.pc

.PHONY: examples
examples: $(EXAMPLE_BINS)

$(B)/examples/%: examples/%.c $(EXAMPLE_DEPS)
	$(call msg,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) -std=c11 -O2 -g $(EXAMPLE_WARN) $(SANFLAGS) -MMD -MP \
		-o $@ $< $$($(EXAMPLE_PC) --cflags --libs kvmem) -lm

$(B)/examples/session-cc: examples/session.cc $(EXAMPLE_DEPS)
	$(call msg,CXX,$@)
	@mkdir -p $(@D)
	$(Q)$(CXX) -std=c++17 -O2 -g $(EXAMPLE_WARN) $(SANFLAGS) -MMD -MP \
		-o $@ $< $$($(EXAMPLE_PC) --cflags --libs kvmem)
