# PeerVoice: build, run, test and install peervoiced (GNU make 4.3, Debian 12).
#
#   make [build]        debug build (after `deps`)
#   make run ARGS=...   build, then run .build/debug/peervoiced on your session bus (scripts/run.sh)
#   make test           build the tests and run every suite, serially (TEST_FILTER=regex to narrow)
#   make install        release build, installed under $(DESTDIR)$(PREFIX)
#   make deps           install the Debian packages below that are missing
#   make clean          swift package clean

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := build

SWIFT ?= swift
# Extra flags for every `swift build` / `swift test`, e.g. SWIFT_FLAGS='-j 2'.
SWIFT_FLAGS ?=
# Arguments passed to peervoiced by `make run`.
ARGS ?=
# Regex passed to `swift test --filter` when set, e.g. TEST_FILTER=ServiceTests.
TEST_FILTER ?=

PREFIX ?= /usr/local
DESTDIR ?=
BINDIR = $(PREFIX)/bin
DATADIR = $(PREFIX)/share
# systemd's user-unit search path includes /usr/lib/systemd/user and /usr/local/lib/systemd/user.
USERUNITDIR = $(PREFIX)/lib/systemd/user

# Debian packages needed to build (one list; add packages here).
PACKAGES := \
	libglib2.0-dev \
	pkg-config \
	dbus-daemon \
	libsodium-dev \
	libopus-dev \
	libpipewire-0.3-dev

# Debian packages the tests (and `make run`) need besides PACKAGES: dbus-daemon for the private
# buses, libglib2.0-bin for gdbus.
TEST_PACKAGES := \
	dbus-daemon \
	libglib2.0-bin

# busctl comes from `systemd`, which is normally installed; pull it in only when busctl is missing.
BUSCTL_PACKAGE = $(if $(shell command -v busctl 2>/dev/null),,systemd)

GEN_DIR := .build/peervoice-gen

.PHONY: build deps run test install uninstall clean

deps:
	scripts/deps.sh $(PACKAGES) $(TEST_PACKAGES) $(BUSCTL_PACKAGE)

build: deps
	$(SWIFT) build $(SWIFT_FLAGS)

run: build
	scripts/run.sh $(ARGS)

# Serial on purpose (no --parallel): each suite starts its own private dbus-daemon.
test: deps
	$(SWIFT) build --build-tests $(SWIFT_FLAGS)
	$(SWIFT) test $(SWIFT_FLAGS) $(if $(TEST_FILTER),--filter '$(TEST_FILTER)')

install: deps
	$(SWIFT) build -c release $(SWIFT_FLAGS)
	mkdir -p $(GEN_DIR)
	sed 's|@bindir@|$(BINDIR)|g' dbus/org.example.PeerVoice.service.in > $(GEN_DIR)/org.example.PeerVoice.service
	sed 's|@bindir@|$(BINDIR)|g' desktop/peervoiced.service.in > $(GEN_DIR)/peervoiced.service
	install -Dm755 "$$($(SWIFT) build -c release $(SWIFT_FLAGS) --show-bin-path)/peervoiced" "$(DESTDIR)$(BINDIR)/peervoiced"
	install -Dm644 dbus/org.example.PeerVoice.xml "$(DESTDIR)$(DATADIR)/dbus-1/interfaces/org.example.PeerVoice.xml"
	install -Dm644 $(GEN_DIR)/org.example.PeerVoice.service "$(DESTDIR)$(DATADIR)/dbus-1/services/org.example.PeerVoice.service"
	install -Dm644 $(GEN_DIR)/peervoiced.service "$(DESTDIR)$(USERUNITDIR)/peervoiced.service"

uninstall:
	rm -f "$(DESTDIR)$(BINDIR)/peervoiced" \
	      "$(DESTDIR)$(DATADIR)/dbus-1/interfaces/org.example.PeerVoice.xml" \
	      "$(DESTDIR)$(DATADIR)/dbus-1/services/org.example.PeerVoice.service" \
	      "$(DESTDIR)$(USERUNITDIR)/peervoiced.service"

clean:
	$(SWIFT) package clean
	rm -rf $(GEN_DIR)
