# SPDX-License-Identifier: MIT
# mk/install.mk - make install, make uninstall (included by the Makefile)
#
#   make install [PREFIX=/usr/local] [DESTDIR=]
#
# Each directory below can be set on its own; the defaults follow PREFIX.
# SYSCONFDIR does not: kvmemd reads /etc/kvmem/kvmemd.conf, and the service
# unit names $(SYSCONFDIR)/kvmem/kvmemd.conf. An existing configuration
# file is left as it is. After installing into the running system:
# systemd-sysusers, systemd-tmpfiles --create, ldconfig, systemctl
# daemon-reload (README.md, Installing).

PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
SBINDIR ?= $(PREFIX)/sbin
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
MANDIR ?= $(PREFIX)/share/man
SYSCONFDIR ?= /etc
UNITDIR ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
TMPFILESDIR ?= $(PREFIX)/lib/tmpfiles.d
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
# Where Debian's python3 looks for packages of the system and of /usr/local.
PYTHONDIR ?= $(PREFIX)/lib/python3/dist-packages
DOCDIR ?= $(PREFIX)/share/doc/kvmem

SBIN_PROGS := $(DAEMON_BIN) $(B)/tools/kvmemctl
BIN_PROGS := $(filter-out $(SBIN_PROGS),$(TOOL_BINS))
HEADERS := $(wildcard libkvmem/include/kvmem/*.h)
PYTHON_MODULES := $(filter-out %/_install.py,$(wildcard python/kvmem/*.py))
# Written at install time: the LIBDIR the installed package loads
# libkvmem.so.0 from, wherever the loader's path does not reach.
PYTHON_INSTALL := $(DESTDIR)$(PYTHONDIR)/kvmem/_install.py
MAN_PAGES := $(wildcard man/*.[1-8])
UNITS := $(B)/systemd/kvmemd.service systemd/kvmemd.socket \
	 systemd/kvmemd-admin.socket $(B)/systemd/kvmem-exporter.service \
	 systemd/kvmem-exporter.socket
PC := $(B)/libkvmem/kvmem.pc
CONF := $(DESTDIR)$(SYSCONFDIR)/kvmem/kvmemd.conf

# man/kvmemd.8 goes to $(MANDIR)/man8/kvmemd.8
man_dest = $(DESTDIR)$(MANDIR)/man$(patsubst .%,%,$(suffix $(1)))/$(notdir $(1))

# Inside $(PREFIX), kvmem.pc names its directories from ${prefix}, so
# pkg-config --define-prefix can move it.
INSTALL_SUBST := -e 's|@VERSION@|$(VERSION)|g' \
		 -e 's|@PREFIX@|$(PREFIX)|g' \
		 -e 's|@LIBDIR@|$(patsubst $(PREFIX)/%,$${prefix}/%,$(LIBDIR))|g' \
		 -e 's|@INCLUDEDIR@|$(patsubst $(PREFIX)/%,$${prefix}/%,$(INCLUDEDIR))|g' \
		 -e 's|@SBINDIR@|$(SBINDIR)|g' \
		 -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g'

.PHONY: install uninstall FORCE

# The filled templates depend on the paths: this file changes when they do.
$(B)/.install-paths: FORCE
	@mkdir -p $(@D)
	@printf '%s\n' "$(INSTALL_SUBST)" | cmp -s - $@ || \
		printf '%s\n' "$(INSTALL_SUBST)" > $@

$(B)/systemd/kvmemd.service $(B)/systemd/kvmem-exporter.service $(PC): \
		$(B)/%: %.in $(B)/.install-paths
	$(call msg,GEN,$@)
	@mkdir -p $(@D)
	$(Q)sed $(INSTALL_SUBST) $< > $@.tmp && mv $@.tmp $@

install: all $(UNITS) $(PC)
	$(call msg,INSTALL,$(DESTDIR)$(PREFIX))
	$(Q)install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(SBINDIR) \
		$(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR)/kvmem \
		$(DESTDIR)$(PKGCONFIGDIR) $(DESTDIR)$(UNITDIR) \
		$(DESTDIR)$(SYSUSERSDIR) $(DESTDIR)$(TMPFILESDIR) \
		$(DESTDIR)$(PYTHONDIR)/kvmem $(DESTDIR)$(DOCDIR)/examples \
		$(dir $(CONF)) $(sort $(dir $(foreach m,$(MAN_PAGES),$(call man_dest,$(m)))))
	$(Q)install -m 0755 $(BIN_PROGS) $(DESTDIR)$(BINDIR)/
	$(Q)install -m 0755 $(SBIN_PROGS) $(DESTDIR)$(SBINDIR)/
	$(Q)install -m 0755 $(LIB_SO) $(DESTDIR)$(LIBDIR)/
	$(Q)ln -sf libkvmem.so.$(VERSION) \
		$(DESTDIR)$(LIBDIR)/libkvmem.so.$(SOVERSION)
	$(Q)ln -sf libkvmem.so.$(SOVERSION) $(DESTDIR)$(LIBDIR)/libkvmem.so
	$(Q)install -m 0644 $(LIB_A) $(DESTDIR)$(LIBDIR)/
	$(Q)install -m 0644 $(HEADERS) $(DESTDIR)$(INCLUDEDIR)/kvmem/
	$(Q)install -m 0644 $(PC) $(DESTDIR)$(PKGCONFIGDIR)/
	$(Q)install -m 0644 $(PYTHON_MODULES) python/kvmem/py.typed \
		$(DESTDIR)$(PYTHONDIR)/kvmem/
	$(Q)printf '"""Written by make install."""\n\nLIBDIR = "%s"\n' \
		'$(LIBDIR)' > $(PYTHON_INSTALL) && chmod 0644 $(PYTHON_INSTALL)
	$(Q)install -m 0644 $(UNITS) $(DESTDIR)$(UNITDIR)/
	$(Q)install -m 0644 systemd/kvmem.sysusers.conf \
		$(DESTDIR)$(SYSUSERSDIR)/kvmem.conf
	$(Q)install -m 0644 systemd/kvmem.tmpfiles.conf \
		$(DESTDIR)$(TMPFILESDIR)/kvmem.conf
	$(Q)install -m 0644 systemd/kvmemd-store.conf \
		ops/prometheus/kvmem-alerts.yml \
		ops/grafana/kvmem-dashboard.json $(DESTDIR)$(DOCDIR)/examples/
	$(Q)$(foreach m,$(MAN_PAGES),install -m 0644 $(m) $(call man_dest,$(m)) &&) true
	$(Q)if [ -e $(CONF) ]; then \
		echo "  KEEP    $(CONF)"; \
	else \
		install -m 0644 etc/kvmemd.conf $(CONF); \
	fi

# The configuration file stays: it may hold the administrator's settings.
uninstall:
	$(call msg,RM,$(DESTDIR)$(PREFIX))
	$(Q)rm -f $(addprefix $(DESTDIR)$(BINDIR)/,$(notdir $(BIN_PROGS))) \
		$(addprefix $(DESTDIR)$(SBINDIR)/,$(notdir $(SBIN_PROGS))) \
		$(DESTDIR)$(LIBDIR)/libkvmem.so.$(VERSION) \
		$(DESTDIR)$(LIBDIR)/libkvmem.so.$(SOVERSION) \
		$(DESTDIR)$(LIBDIR)/libkvmem.so $(DESTDIR)$(LIBDIR)/libkvmem.a \
		$(addprefix $(DESTDIR)$(INCLUDEDIR)/kvmem/,$(notdir $(HEADERS))) \
		$(DESTDIR)$(PKGCONFIGDIR)/kvmem.pc \
		$(addprefix $(DESTDIR)$(PYTHONDIR)/kvmem/,$(notdir $(PYTHON_MODULES))) \
		$(DESTDIR)$(PYTHONDIR)/kvmem/py.typed $(PYTHON_INSTALL) \
		$(addprefix $(DESTDIR)$(UNITDIR)/,$(notdir $(UNITS))) \
		$(DESTDIR)$(SYSUSERSDIR)/kvmem.conf \
		$(DESTDIR)$(TMPFILESDIR)/kvmem.conf \
		$(addprefix $(DESTDIR)$(DOCDIR)/examples/,kvmemd-store.conf \
			kvmem-alerts.yml kvmem-dashboard.json) \
		$(foreach m,$(MAN_PAGES),$(call man_dest,$(m)))
	$(Q)rmdir $(DESTDIR)$(INCLUDEDIR)/kvmem 2>/dev/null || true
	$(Q)rm -rf $(DESTDIR)$(PYTHONDIR)/kvmem/__pycache__
	$(Q)rmdir $(DESTDIR)$(PYTHONDIR)/kvmem 2>/dev/null || true
	$(Q)rmdir $(DESTDIR)$(DOCDIR)/examples $(DESTDIR)$(DOCDIR) \
		2>/dev/null || true
