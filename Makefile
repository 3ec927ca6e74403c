# Thin wrapper over CMake + CTest. The two commands a user needs:
#   make demo    install deps, build, generate a synthetic cluster and workload,
#                compare the scheduling policies on it (table + SVG plot)
#   make check   install deps, build with -Werror, run unit + black-box tests
#                and the real-Kubernetes e2e suite, build again at -O3 (whose
#                warnings -O2 does not give), run the tests again under ASan +
#                UBSan, then the fuzzers briefly, then the image's checks
#   make image   the container image from Debian packages, no Docker:
#                $(BUILD)/image/gpusched-image.tar (docs/deploy.md)
BUILD ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
RELEASE_BUILD ?= build-release
JOBS ?= $(shell nproc)
DEMO_DIR ?= $(BUILD)/demo

.PHONY: all deps build demo check test release asan fuzz bench clean e2e

all: build

deps:
	@scripts/deps

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	@mkdir -p $(DEMO_DIR)
	$(BUILD)/gpusched gen-trace --out $(DEMO_DIR) --seed 1
	$(BUILD)/gpusched simulate --nodes $(DEMO_DIR)/nodes.csv --pods $(DEMO_DIR)/pods.csv \
	    --policy random,dotprod,clustering,packing,bestfit,fgd,cpufrag \
	    --seeds 42-46 --plot $(DEMO_DIR)/unallocated.svg --json $(DEMO_DIR)/results.json
	@echo "plot: $(DEMO_DIR)/unallocated.svg  results: $(DEMO_DIR)/results.json"

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# compile only: gcc at -O3 sees more (a use after free in ext/bindq.c, once)
release: deps
	cmake -S . -B $(RELEASE_BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build $(RELEASE_BUILD) -j $(JOBS)

asan: deps
	CC=clang cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DGPUSCHED_SANITIZE=ON >/dev/null
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j $(JOBS)

fuzz: deps
	CC=clang cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=Debug -DGPUSCHED_SANITIZE=ON -DGPUSCHED_FUZZ=ON >/dev/null
	cmake --build $(FUZZ_BUILD) -j $(JOBS)
	scripts/run-fuzzers $(FUZZ_BUILD) $${FUZZ_SECONDS:-20}

check: test release asan fuzz image-check

# only the end-to-end suite (a real Kubernetes, docs/e2e.md); `make test` runs it too
e2e: build
	cd $(BUILD) && ctest -R '^e2e$$' --output-on-failure

bench: build
	scripts/run-bench $(BUILD)

.PHONY: image image-check
image: build
	scripts/make-image $(BUILD)

# runs the image's binary (chroot, runc), checks layout, CA bundle, digests
image-check: image
	GPUSCHED_BIN=$(BUILD)/gpusched GPUSCHED_BUILD_DIR=$(BUILD) /usr/bin/python3 -m pytest \
	    -q -rs -p no:cacheprovider tests/image

clean:
	rm -rf $(BUILD) $(RELEASE_BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
