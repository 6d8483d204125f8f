# kbtp build entry points. Every target installs what it needs first, so a fresh clone with
# only Node 20 and npm can run `make run` or `make test`.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
NODE ?= node
UVU := $(NODE) --import tsx node_modules/uvu/bin.js
export NO_COLOR := 1

AS_SOURCES := $(shell find assembly -name '*.ts' 2>/dev/null)
TS_SOURCES := $(shell find host firmware assembly -name '*.ts' 2>/dev/null) $(wildcard firmware/status-page/*)

.PHONY: all deps build wasm ts typecheck lint format bench-build test run demo bench clean help interop compare image image-test soak-tier

all: build

help:
	@echo "make run    install, build and start the appliance on the embedded defaults (KBTP 127.0.0.1:7117, management 127.0.0.1:7118)"
	@echo "make demo   run the engine demo (two worker threads over one pool)"
	@echo "make test   install, build and run every test (uvu)"
	@echo "make bench  install, build and run the benchmarks (results in bench/results/)"
	@echo "make compare  kbtp LOAD/STORE vs Redis GET/SET vs iperf3 on loopback (docs/BENCH.md; installs redis, iperf3)"
	@echo "make interop  build/boot the siw/rxe QEMU guest and run the interop tests (docs/INTEROP.md)"
	@echo "make image  build the bootable appliance disk images/out/kbtp-appliance-$$(ARCH).img/.qcow2 + update bundle (docs/IMAGE.md; ARCH=x86_64|arm64)"
	@echo "make image-test  boot the appliance image in QEMU (TCG) and test it from the host (docs/IMAGE.md; ONLY=regexp picks cases)"
	@echo "make soak-tier  crash torture of the durable tier: ROUNDS (default 200) SIGKILLs of a target under load"
	@echo "make build  compile assembly/ to build/engine.wasm and host/, firmware/ to dist/ (with .d.ts)"
	@echo "make typecheck  type-check everything, tests and benchmarks included (no output)"
	@echo "make lint   Biome: lint rules and (once the tree is formatted) the formatting check"
	@echo "make format rewrite the tree in the project's format (Biome)"
	@echo "make deps   install npm dependencies (npm ci)"
	@echo "make clean  remove build outputs"

deps: node_modules/.deps-stamp

node_modules/.deps-stamp: package.json package-lock.json
	npm ci --no-audit --no-fund
	@touch $@

build: deps wasm ts

wasm: build/engine.wasm

build/engine.wasm: $(AS_SOURCES) asconfig.json node_modules/.deps-stamp
	npx asc assembly/index.ts --config asconfig.json --target release

ts: dist/.ts-stamp

# The package's code only (tsconfig.build.json: host/ and firmware/, declarations, no tests or
# benchmarks); `make typecheck` checks the rest, `bench-build` compiles the benchmarks.
dist/.ts-stamp: $(TS_SOURCES) tsconfig.json tsconfig.build.json node_modules/.deps-stamp
	npx tsc -p tsconfig.build.json
	@# The status page ships as is (no build step): next to the compiled daemon that serves it.
	@mkdir -p dist/firmware && cp -r firmware/status-page dist/firmware/
	@chmod +x dist/host/cli.js
	@# npx finds a project's own bin only in node_modules/.bin: link it there.
	@ln -sf ../../dist/host/cli.js node_modules/.bin/kbtp
	@touch $@

typecheck: deps
	npx tsc -p tsconfig.json

# Biome (biome.json): one dependency for both the linter and the formatter. `check` = lint rules
# + the formatting check (the whole tree was formatted once with `make format`).
# The paths are explicit: images/ holds root-file-system trees (absolute symlinks) Biome must not walk.
# Warnings fail it too, so that none pile up unseen.
BIOME_CHECK ?= check --error-on-warnings
BIOME_PATHS := host firmware bench test assembly biome.json package.json tsconfig.json tsconfig.build.json tsconfig.bench.json asconfig.json
lint: deps
	npx biome $(BIOME_CHECK) $(BIOME_PATHS)

format: deps
	npx biome format --write $(BIOME_PATHS)

bench-build: build
	npx tsc -p tsconfig.bench.json

test: build typecheck lint
	@mkdir -p .cache
	bash test/firmware/deps.sh
	bash test/tier/deps.sh
	$(UVU) test '\.test\.ts$$' --no-color 2>&1 | tee .cache/test.log
	@# The KBTP battery once more over the InfiniBand RC / RoCEv2 binding (draft 9.2).
	KBTP_TEST_TRANSPORT=roce $(UVU) test/kbtp '(statuses|property|direct)\.test\.ts$$' --no-color 2>&1 | tee .cache/test-roce.log
	@# The RC operations once more over the node:dgram UDP link (the fallback where koffi cannot load).
	KBTP_ROCE_UDP=dgram $(UVU) test/rnic '(rc-operations|rc-fuzz)\.test\.ts$$' --no-color 2>&1 | tee .cache/test-roce-dgram.log
	@# The durable tier's CRC32C once more through its fallback (@node-rs/crc32), used where libisal2 is missing.
	KBTP_CRC32C=node-rs $(UVU) test/tier 'checksum\.test\.ts$$' --no-color 2>&1 | tee .cache/test-crc32c-fallback.log
	@awk '/^  Total:/{t+=$$2; n++} /^  Passed:/{p+=$$2} /^  Skipped:/{s+=$$2} END{ if (n<4) {print "0 passed, 1 failed"; exit 1} printf "%d passed, %d failed, %d skipped\n", p, t-p, s }' .cache/test.log .cache/test-roce.log .cache/test-roce-dgram.log .cache/test-crc32c-fallback.log

# Interop with the Linux kernel's soft-iWARP and Soft-RoCE in a QEMU guest: images/guest/build.sh fetches and
# builds the guest from Debian packages (cached in .cache/images/), logs and pcaps go to .cache/interop/.
interop: deps
	images/guest/host-deps.sh run
	@mkdir -p .cache
	images/guest/build.sh > .cache/guest-image.path
	KBTP_GUEST_IMAGE="$$(cat .cache/guest-image.path)" $(UVU) test/interop '\.interop\.ts$$' --no-color 2>&1 | tee .cache/interop.log
	@awk '/^  Total:/{t=$$2} /^  Passed:/{p=$$2} /^  Skipped:/{s=$$2} END{ if (t=="") {print "interop: 0 passed, 1 failed"; exit 1} printf "interop: %d passed, %d failed, %d skipped\n", p, t-p, s; if (t!=p) exit 1 }' .cache/interop.log

# The appliance disk image (docs/IMAGE.md): Debian packages + Node 20 + this build, cached in
# .cache/images/appliance/; the disk, its qcow2 and the update bundle go to images/out/.
ARCH ?= x86_64
image: build
	images/appliance/build.sh --arch $(ARCH)

# Boots the image under QEMU TCG and tests it from the host; logs and pcaps in .cache/image-test/<run>/.
# ONLY=<regexp> runs the first boot and the cases whose names match (e.g. ONLY='power|reset').
image-test: image
	ARCH=$(ARCH) images/appliance/host-deps.sh run
	@mkdir -p .cache
	IMAGE_TEST_ONLY='$(ONLY)' $(UVU) test/image '\.image\.ts$$' --no-color 2>&1 | tee .cache/image-test.log
	@awk '/^  Total:/{t=$$2} /^  Passed:/{p=$$2} /^  Skipped:/{s=$$2} END{ if (t=="") {print "image-test: 0 passed, 1 failed"; exit 1} printf "image-test: %d passed, %d failed, %d skipped\n", p, t-p, s; if (t!=p) exit 1 }' .cache/image-test.log

# Starts the appliance on the embedded defaults (KBTP 127.0.0.1:7117, management and status page
# 127.0.0.1:7118); Ctrl-C drains and stops it.
run: build
	@echo "reach it with: npx kbtp info | echo hi | npx kbtp put 1 | npx kbtp get 1 | npx kbtp free 1"
	@# The durable tier (docs/TIER.md) keeps its files in the checkout's ignored state folder.
	$(NODE) dist/host/cli.js appliance --data-dir "$(CURDIR)/.cache/state/kbtp"

# Crash torture of the durable tier for longer than the test suite does (ROUNDS SIGKILLs, default 200).
soak-tier: build
	$(NODE) --import tsx test/tier/torture.ts --rounds $${ROUNDS:-200}

demo: build
	$(NODE) dist/host/cli.js demo

bench: bench-build
	@mkdir -p bench/results
	$(NODE) --expose-gc dist/bench/engine.js
	$(NODE) dist/bench/sram.js
	$(NODE) dist/bench/rnic.js
	$(NODE) dist/bench/tier.js

# kbtp against Redis and the loopback limit (docs/BENCH.md); installs redis-server, redis-tools and
# iperf3 from Debian when missing, starts them on 127.0.0.1 only and stops them at the end.
compare: bench-build
	bash bench/compare/deps.sh
	@mkdir -p bench/results
	$(NODE) dist/bench/compare/compare.js

clean:
	rm -rf build dist .cache bench/results
