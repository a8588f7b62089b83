# PeerVoice: build, run, test and install peervoiced (GNU make 4.3, Debian 12).
#
#   make [build]        debug build (after `deps`)
#   make run ARGS=...   build, then run .build/debug/peervoiced on your session bus (scripts/run.sh)
#   make test           build the tests and run every suite, serially (TEST_FILTER=regex to narrow),
#                       the fuzzers briefly, and the Bluetooth VMs
#   make soak           a SOAK_SECONDS (600) call at 5 % loss: latency, memory, underruns
#   make fuzz           each fuzz target FUZZ_SECONDS (600)
#   make test-bluetooth-vm  real BlueZ in two QEMU VMs: discover, pair, restart bluetoothd
#   make test-bluetooth     PeerVoice over real BlueZ in two QEMU VMs (tests/bluetooth-vm/peervoice-*.sh)
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
	libpipewire-0.3-dev \
	libwebrtc-audio-processing-dev

# Debian packages the tests (and `make run`) need besides PACKAGES: dbus-daemon for the private
# buses, libglib2.0-bin for gdbus, python3-gi for the benchmarks (bench/); pipewire, pipewire-bin
# (pw-cli, pw-link, pw-play, pw-record, pw-dump, pw-metadata) and wireplumber for the private
# headless PipeWire of scripts/pipewire-session.sh (pw-loopback builds the tests' acoustic path);
# libspa-0.2-modules for module-echo-cancel's webrtc backend (AudioProcessing tests and bench-echo);
# python3-dbusmock for the stand-in notification server and desktop portal of DesktopTests.
TEST_PACKAGES := \
	dbus-daemon \
	libglib2.0-bin \
	python3-gi \
	pipewire \
	pipewire-bin \
	wireplumber \
	libspa-0.2-modules \
	python3-dbusmock

# busctl comes from `systemd`, which is normally installed; pull it in only when busctl is missing.
BUSCTL_PACKAGE = $(if $(shell command -v busctl 2>/dev/null),,systemd)

# Debian packages of the two-VM Bluetooth tests (tests/bluetooth-vm/, `make test-bluetooth-vm`),
# installed like the others without recommends (~500 MB, about a minute): QEMU (TCG; no KVM
# needed), Debian's kernel (its vmlinuz and modules boot the VMs), busybox-static (initramfs),
# BlueZ (bluetoothd, bluetoothctl, btattach, btmon), bluez-test-tools (btvirt, the emulated
# controllers), python3 (the H:4 relay), kmod (modprobe), xz-utils (unpacks the kernel once).
# The VMs also run the host's dbus-daemon and busctl.
VM_PACKAGES := \
	qemu-system-x86 \
	linux-image-amd64 \
	busybox-static \
	bluez \
	bluez-test-tools \
	python3 \
	kmod \
	xz-utils \
	dbus-daemon

GEN_DIR := .build/peervoice-gen

.PHONY: build deps run test install uninstall clean bench-messages

deps:
	scripts/deps.sh $(PACKAGES) $(TEST_PACKAGES) $(BUSCTL_PACKAGE)

build: deps
	$(SWIFT) build $(SWIFT_FLAGS)

run: build
	scripts/run.sh $(ARGS)

# Serial on purpose (no --parallel): each suite starts its own private dbus-daemon.
# Every suite: unit and service tests (private buses, PipeWire), each fuzz target for
# FUZZ_SMOKE_SECONDS, then PeerVoice over real BlueZ in the two VMs. TEST_FILTER narrows the first
# part and skips the rest.
test: deps
	$(SWIFT) build --build-tests $(SWIFT_FLAGS)
	$(SWIFT) test $(SWIFT_FLAGS) $(if $(TEST_FILTER),--filter '$(TEST_FILTER)')
	$(if $(TEST_FILTER),,$(MAKE) --no-print-directory fuzz-smoke)
	$(if $(TEST_FILTER),,$(MAKE) --no-print-directory test-bluetooth)

# The long version of VoiceTests.testACallWithFivePercentLossStaysBoundedOverTime (40 s in `make test`).
SOAK_SECONDS ?= 600
.PHONY: soak
soak: deps
	$(SWIFT) build --build-tests $(SWIFT_FLAGS)
	PEERVOICE_SOAK_SECONDS=$(SOAK_SECONDS) $(SWIFT) test $(SWIFT_FLAGS) --filter 'VoiceTests.testACallWithFivePercentLossStaysBoundedOverTime'

install: deps
	$(SWIFT) build -c release $(SWIFT_FLAGS)
	mkdir -p $(GEN_DIR)
	sed 's|@bindir@|$(BINDIR)|g' dbus/org.example.PeerVoice.service.in > $(GEN_DIR)/org.example.PeerVoice.service
	sed 's|@bindir@|$(BINDIR)|g' desktop/peervoiced.service.in > $(GEN_DIR)/peervoiced.service
	sed 's|@bindir@|$(BINDIR)|g' desktop/peervoiced.desktop > $(GEN_DIR)/peervoiced.desktop
	bin="$$($(SWIFT) build -c release $(SWIFT_FLAGS) --show-bin-path)"; \
	install -Dm755 "$$bin/peervoiced" "$(DESTDIR)$(BINDIR)/peervoiced"; \
	install -Dm755 "$$bin/peervoicectl" "$(DESTDIR)$(BINDIR)/peervoicectl"
	install -Dm644 dbus/org.example.PeerVoice.xml "$(DESTDIR)$(DATADIR)/dbus-1/interfaces/org.example.PeerVoice.xml"
	install -Dm644 $(GEN_DIR)/org.example.PeerVoice.service "$(DESTDIR)$(DATADIR)/dbus-1/services/org.example.PeerVoice.service"
	install -Dm644 $(GEN_DIR)/peervoiced.service "$(DESTDIR)$(USERUNITDIR)/peervoiced.service"
	install -Dm644 completion/peervoicectl.bash "$(DESTDIR)$(DATADIR)/bash-completion/completions/peervoicectl"
	install -Dm644 $(GEN_DIR)/peervoiced.desktop "$(DESTDIR)$(DATADIR)/applications/peervoiced.desktop"
# Autostart: SYSCONFDIR/xdg/autostart, where SYSCONFDIR is /etc for PREFIX=/usr, else PREFIX/etc
# (set SYSCONFDIR=/etc to have sessions find it under another PREFIX).
	install -Dm644 $(GEN_DIR)/peervoiced.desktop "$(DESTDIR)$(or $(SYSCONFDIR),$(if $(filter /usr,$(PREFIX)),/etc,$(PREFIX)/etc))/xdg/autostart/peervoiced.desktop"

uninstall:
	rm -f "$(DESTDIR)$(BINDIR)/peervoiced" \
	      "$(DESTDIR)$(BINDIR)/peervoicectl" \
	      "$(DESTDIR)$(DATADIR)/dbus-1/interfaces/org.example.PeerVoice.xml" \
	      "$(DESTDIR)$(DATADIR)/dbus-1/services/org.example.PeerVoice.service" \
	      "$(DESTDIR)$(USERUNITDIR)/peervoiced.service" \
	      "$(DESTDIR)$(DATADIR)/bash-completion/completions/peervoicectl" \
	      "$(DESTDIR)$(DATADIR)/applications/peervoiced.desktop" \
	      "$(DESTDIR)$(or $(SYSCONFDIR),$(if $(filter /usr,$(PREFIX)),/etc,$(PREFIX)/etc))/xdg/autostart/peervoiced.desktop"

clean:
	$(SWIFT) package clean
	rm -rf $(GEN_DIR)

# Benchmark, not a test: text-message throughput and latency between two release peervoiced on
# private buses; prints a table, writes bench/results/messages.json, asserts nothing (see
# bench/README.md). BENCH_ARGS go to bench/messages.py, e.g. BENCH_ARGS='--runs 1 -n 1000'.
# Only the peervoiced product is built, so a broken test or tool target does not stop it.
# Debian's /usr/bin/python3 on purpose: python3-gi is installed for it, not for a python3 that
# may come first on PATH (pyenv, a virtualenv).
bench-messages: deps
	$(SWIFT) build -c release --product peervoiced $(SWIFT_FLAGS)
	/usr/bin/python3 bench/messages.py --bin "$$($(SWIFT) build -c release $(SWIFT_FLAGS) --show-bin-path)/peervoiced" $(BENCH_ARGS)

# Smoke test of the two-VM harness with BlueZ's own tools only (no PeerVoice code): A discovers
# and pairs with B, B restarts bluetoothd, A sees B again. Logs and summary.txt go to
# BLUETOOTH_VM_OUT; the unpacked kernel and the initramfs are cached in .build/bluetooth-vm/.
BLUETOOTH_VM_OUT ?= .build/bluetooth-vm/smoke
.PHONY: test-bluetooth-vm
test-bluetooth-vm:
	@start=$$(date +%s); scripts/deps.sh $(VM_PACKAGES) $(BUSCTL_PACKAGE); \
	    echo "test-bluetooth-vm: packages ready in $$(( $$(date +%s) - start ))s"
	tests/bluetooth-vm/run-pair.sh --out $(BLUETOOTH_VM_OUT) --timeout 300 \
	    --guest-a tests/bluetooth-vm/smoke-a.sh --guest-b tests/bluetooth-vm/smoke-b.sh

# PeerVoice over real BlueZ in the two VMs (tests/bluetooth-vm/peervoice-a.sh, peervoice-b.sh): each
# runs .build/debug/peervoiced --default-agent on its own session bus; A discovers B, pairs (both
# people confirm), messages go both ways, A disconnects, A's bluetoothd is killed and restarted,
# they connect again, then a refused pairing makes Connect fail with Rejected. About a minute.
BLUETOOTH_OUT ?= .build/bluetooth-vm/peervoice
.PHONY: test-bluetooth
test-bluetooth: deps
	scripts/deps.sh $(VM_PACKAGES) $(BUSCTL_PACKAGE)
	$(SWIFT) build --product peervoiced $(SWIFT_FLAGS)
	tests/bluetooth-vm/run-pair.sh --out $(BLUETOOTH_OUT) --timeout 400 \
	    --guest-a tests/bluetooth-vm/peervoice-a.sh --guest-b tests/bluetooth-vm/peervoice-b.sh

# Jitter buffer against speexdsp's on the same synthetic arrival traces (speexdsp only in the bench).
.PHONY: bench-jitter
bench-jitter:
	scripts/deps.sh libspeexdsp-dev
	bench/jitter/run.sh

# Voice benchmark, not a test (bench/voice/README.md): PeerVoice (two release peervoiced) against a
# GStreamer Opus/RTP baseline, both in one private headless PipeWire, on a clean loopback and
# through a relay adding 30±10 ms jitter and 0/5/10 % loss, at 20 and 10 ms frames. Prints a table
# of medians next to the targets, writes bench/results/voice.json and voice.png; asserts nothing.
# BENCH_ARGS go to bench/voice/run.py, e.g. BENCH_ARGS='--runs 1 --frames 20 --conditions clean'.
# About 15 minutes with the defaults. BENCH_PACKAGES: GStreamer 1.22 (gst-launch, the base and good
# plugins, the PipeWire elements) for the baseline; python3-venv, python3-dev and gcc for the venv
# in .build/ that holds numpy, scipy, pesq (built from source), pystoi and matplotlib from PyPI.
BENCH_PACKAGES := \
	gstreamer1.0-tools \
	gstreamer1.0-plugins-base \
	gstreamer1.0-plugins-good \
	gstreamer1.0-pipewire \
	python3-venv \
	python3-dev \
	gcc
BENCH_VENV := .build/bench-voice-venv
.PHONY: bench-voice bench-venv
bench-voice: deps bench-venv
	$(SWIFT) build -c release --product peervoiced $(SWIFT_FLAGS)
	$(BENCH_VENV)/bin/python bench/voice/run.py \
	    --bin "$$($(SWIFT) build -c release $(SWIFT_FLAGS) --show-bin-path)/peervoiced" $(BENCH_ARGS)

# Echo cancellation benchmark, not a test (bench/echo/README.md): PeerVoice's processing against
# PipeWire's libpipewire-module-echo-cancel on the same acoustic path, each in its own PipeWire:
# ERLE over time, double-talk PESQ-WB, added latency, CPU; medians of 5 runs, about 8 minutes.
# Prints a table, writes bench/results/echo.json and echo.png. BENCH_ARGS go to bench/echo/run.py.
.PHONY: bench-echo
bench-echo: deps bench-venv
	$(SWIFT) build -c release --product peervoiced $(SWIFT_FLAGS)
	$(BENCH_VENV)/bin/python bench/echo/run.py \
	    --bin "$$($(SWIFT) build -c release $(SWIFT_FLAGS) --show-bin-path)/peervoiced" $(BENCH_ARGS)

# The packages and the Python venv the voice benchmarks score with (PESQ, STOI).
bench-venv: deps
	scripts/deps.sh $(BENCH_PACKAGES)
	test -x $(BENCH_VENV)/bin/python || /usr/bin/python3 -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -c 'import numpy, scipy, pesq, pystoi, matplotlib' 2>/dev/null || \
	    $(BENCH_VENV)/bin/pip install -q numpy scipy pesq pystoi matplotlib

# What in-band FEC costs and buys at each packet-loss hint (bench/fec/README.md): libopus as the
# daemon uses it, on the speech fixture, with random loss; prints PESQ-WB per loss and hint, writes
# bench/results/fec.json. About 5 minutes. BENCH_ARGS go to bench/fec/run.py.
.PHONY: bench-fec
bench-fec: bench-venv
	mkdir -p .build/bench-fec
	$(CC) -O2 -Wall bench/fec/fec_codec.c -o .build/bench-fec/fec_codec $$(pkg-config --cflags --libs opus)
	$(BENCH_VENV)/bin/python bench/fec/run.py --codec .build/bench-fec/fec_codec $(BENCH_ARGS)

# Fuzzing (fuzz/README.md): libFuzzer + AddressSanitizer builds, with plain swiftc into .build/fuzz/,
# of the wire decoder, the handshake and record layer (real libsodium) and the jitter buffer.
# `make fuzz` runs each target FUZZ_SECONDS (crashes, leaks and timeouts fail it; reproducers go to
# .build/fuzz/artifacts-TARGET/); `make fuzz-smoke` is the short bounded run of every target.
FUZZ_SECONDS ?= 600
FUZZ_SMOKE_SECONDS ?= 20
SWIFTC ?= swiftc
.PHONY: fuzz fuzz-smoke
fuzz: deps
	SWIFTC='$(SWIFTC)' fuzz/run.sh all $(FUZZ_SECONDS)

fuzz-smoke: deps
	SWIFTC='$(SWIFTC)' fuzz/run.sh all $(FUZZ_SMOKE_SECONDS)

# Instructions spent in crypto on the message path, under valgrind's callgrind.
.PHONY: bench-crypto
bench-crypto: deps
	$(SWIFT) build -c release --product peervoiced $(SWIFT_FLAGS)
	bench/crypto-cost.sh
