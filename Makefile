# gobn: one Makefile for every command the README shows. `make help` prints
# the list below, one line a target.
#
#   make all         build build/libgobn.so; the default (creates .venv with the pinned TensorFlow)
#   make demo        run every op beside stock TensorFlow: max error and speed ratio
#   make test        everything: lint, vet, gotest, race, fuzz-short, pytest
#   make lint        fail on unformatted Go (gofmt) and on Python lint errors (ruff, ruff.toml)
#   make vet         go vet, also with the library's build tags (-tags cuda when GOBN_CUDA=1)
#   make gotest      the Go tests with the portable loops, then gotest-shipped
#   make gotest-shipped  the Go tests of what the library ships: GOEXPERIMENT=simd and its build tags
#   make race        the Go tests of kernels and capi under the race detector, -short
#   make fuzz-short  each Go fuzz target briefly (make test's budget)
#   make fuzz        each Go fuzz target, FUZZ_SCALE (default 20) times make test's budget
#   make pytest      the Python tests (python_tests) against build/libgobn.so and the wheel
#   make wheel       dist/gobn-<version>-py3-none-manylinux_<glibc>_<arch>.whl: the package with libgobn.so
#   make compat      the wheel's smoke and XLA tests in a fresh environment of each supported TensorFlow (bench/compat.json); slow: it installs a venv per release from PyPI into build/compat, about 3 min and 1.6 GB of disk each
#   make generate    regenerate what is written from opdef and the kinds' kernels: capi's binders and registry, ops/ops_gen.go, python/gobn/_opdefs_gen.py, docs/design.md's table of the ops, kernels/cuda's C headers and check calls
#   make env         print the exports a Go (tfgo) program needs: eval "$(make -s env)"
#   make golden      stock TensorFlow golden files into build/golden, then check gobn on them
#   make bench       benchmark against stock TensorFlow (bench/results.json, bench/ratios.png)
#   make bench-multiworker  gobn's synchronized batch norm against Keras' on 2 worker processes (docs/multiworker.md)
#   make multiworker the example examples/multiworker: train on WORKERS (default 2) local worker processes
#   make bench-models  ResNet50 and MobileNetV2 training steps, stock against gobn: Keras 3 with convert, tf_keras with enable() (docs/models.md)
#   make bench-fusion  the batch-norm gradient fused with its ReLU's against the pairs it replaces, per call (bench/fusion.json)
#   make bench-workers  the Go kernels on one worker, on two and as planned, in chains, either side of the plan's crossovers (bench/workers.txt)
#   make bench-torch  gobn beside PyTorch's CPU batch-norm backward at 1 thread and every core (bench/torch.json; PyTorch in .venv-torch, ~5.4 GB)
#   make gpu-bundle  build/gpu: the CUDA path's check, for a GPU machine without Go or TensorFlow
#   make gpu-tf-check  the device tests with TensorFlow's GPU build on GPU:0, a call's time, model steps (bench/gpu_tf.json)
#   make gpu-run     build/gpurun: what the prepared run on a lent GPU machine carries, then its calls (tools/gpurun.py, docs/gpu.md)
#   make clean       remove build outputs
#   make help        print this list
#
# GOBN_CUDA=1 (the default) builds the CUDA path too: kernels/cuda compiled
# with NVRTC from the pinned wheels into kernels/cuda/gobn.fatbin, and the
# library built with -tags cuda. make GOBN_CUDA=0 builds and tests without it.

PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
LIB := build/libgobn.so
# The TensorFlow Go bindings link -ltensorflow; the wheel ships that C API as
# libtensorflow_cc.so.2, so build/tflib/libtensorflow.so names it.
TFLIBDIR := build/tflib
TFLIB := $(TFLIBDIR)/libtensorflow.so

.PHONY: all wheel compat bench bench-multiworker bench-models bench-fusion bench-torch bench-workers multiworker demo test lint gotest gotest-shipped pytest vet race fuzz fuzz-short generate env golden clean gpu-bundle gpu-tf-check gpu-run help FORCE
all: $(LIB)

# The virtual environment with the pinned TensorFlow (see requirements.txt).
$(VENV)/.installed: requirements.txt requirements-nodeps.txt
	$(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --quiet --upgrade pip
	$(VPY) -m pip install --quiet -r requirements.txt
	$(VPY) -m pip install --quiet --no-deps -r requirements-nodeps.txt
	touch $@

# TensorFlow's include and library directories, read from tf.sysconfig.
build/tf.mk: $(VENV)/.installed tools/tfflags.py
	mkdir -p build
	$(VPY) -m tools.tfflags > $@.tmp && mv $@.tmp $@

ifneq ($(filter-out clean help gpu-tf-check,$(MAKECMDGOALS)),)
include build/tf.mk
else ifeq ($(MAKECMDGOALS),)
include build/tf.mk
endif

export CGO_ENABLED := 1
export CGO_CFLAGS := -I$(TF_INCLUDE) -O2
export CGO_LDFLAGS := -L$(TF_LIBDIR) -l:libtensorflow_framework.so.2 -Wl,-rpath,$(TF_LIBDIR) -L$(CURDIR)/$(TFLIBDIR)
# The library's own: TensorFlow's framework library, found at run time in the
# process that loads gobn (no rpath).
LIB_LDFLAGS := -L$(TF_LIBDIR) -l:libtensorflow_framework.so.2

GO_SOURCES := $(shell find opdef kernels capi internal/cudaspec -name '*.go' -o -name '*.c' -o -name '*.cc' -o -name '*.h' -o -name '*.s') go.mod go.sum

# The CUDA path. tools/cuda_fatbin.py compiles kernels/cuda/batchnorm.cu
# (with the headers beside it) with NVRTC for every GPU architecture
# TensorFlow's GPU build supports into kernels/cuda/gobn.fatbin, which the Go
# package embeds, and writes build/cuda/manifest.json and build/cuda/ptxas.txt
# for python_tests/test_cuda_build.py. GO_TAGS is the build tags of the
# library, for every go command that should see what it ships.
GOBN_CUDA ?= 1
CUDA_DIR := kernels/cuda
CUDA_FATBIN := $(CUDA_DIR)/gobn.fatbin
ifeq ($(GOBN_CUDA),1)
GO_TAGS := cuda
CUDA_DEPS := $(CUDA_FATBIN)
else ifeq ($(GOBN_CUDA),0)
GO_TAGS :=
CUDA_DEPS :=
else
$(error GOBN_CUDA is 1 or 0, not '$(GOBN_CUDA)')
endif
GO_TAGFLAGS := $(if $(GO_TAGS),-tags $(GO_TAGS))
export GO_TAGS GOBN_CUDA

$(CUDA_FATBIN): $(wildcard $(CUDA_DIR)/*.cu $(CUDA_DIR)/*.cuh $(CUDA_DIR)/*.h) tools/cuda_fatbin.py $(VENV)/.installed
	$(VPY) -m tools.cuda_fatbin $(CUDA_DIR)/batchnorm.cu

# The library's build mode, rewritten only when it changes, so that switching
# GOBN_CUDA rebuilds the library.
BUILD_MODE := build/gobn-mode
$(BUILD_MODE): FORCE
	@mkdir -p build
	@echo 'GOBN_CUDA=$(GOBN_CUDA) GO_TAGS=$(GO_TAGS)' | cmp -s - $@ || echo 'GOBN_CUDA=$(GOBN_CUDA) GO_TAGS=$(GO_TAGS)' > $@
FORCE:

# The soname lets a copy of gobn find one loaded before it (capi/library.c);
# no rpath: TensorFlow has loaded libtensorflow_framework.so.2 before it loads
# gobn, and the loader finds it by that name.
SONAME := libgobn.so
$(LIB): $(GO_SOURCES) build/tf.mk $(CUDA_DEPS) $(BUILD_MODE)
	GOEXPERIMENT=simd CGO_LDFLAGS="$(LIB_LDFLAGS)" go build $(GO_TAGFLAGS) -buildmode=c-shared \
		-ldflags=-extldflags=-Wl,-soname,$(SONAME) -o $@ ./capi
	rm -f build/libgobn.h

# A symlink, remade on every run (cheap): make compares the mtime of its target.
$(TFLIB): build/tf.mk
	mkdir -p $(TFLIBDIR)
	ln -sfn $(TF_LIBDIR)/libtensorflow_cc.so.2 $@

# The shell exports for building and running Go programs against the pinned
# TensorFlow with tfgo, in this checkout or in a module of their own:
# eval "$$(make -s -C <checkout> env)" (docs/tfgo.md). The rpath in
# CGO_LDFLAGS finds TensorFlow's libraries at run time; GOBN_LIBRARY is
# what ops.Load("") loads.
env: $(TFLIB)
	@echo "export CGO_ENABLED=1"
	@echo "export CGO_CFLAGS='$(CGO_CFLAGS)'"
	@echo "export CGO_LDFLAGS='$(CGO_LDFLAGS)'"
	@echo "export GOBN_LIBRARY='$(CURDIR)/$(LIB)'"

generate:
	go generate ./capi ./ops ./cmd/genpy ./cmd/gendocs ./kernels ./kernels/cuda

demo: $(LIB)
	$(VPY) -m examples.demo

vet: build/tf.mk $(CUDA_DEPS)
	go vet ./...
	$(if $(GO_TAGS),go vet $(GO_TAGFLAGS) ./kernels/cuda/... ./capi)

# The portable loops first (go test alone), then what the library ships.
gotest: $(LIB) $(TFLIB)
	go test ./...
	$(MAKE) --no-print-directory gotest-shipped

# Every Go test with the vector loops (GOEXPERIMENT=simd: AVX-512, then AVX2)
# and the build tags of the library (the CUDA path with GOBN_CUDA=1): one go
# test, which CONTRIBUTING.md gives for running without make.
gotest-shipped: $(LIB) $(TFLIB)
	GOEXPERIMENT=simd go test $(GO_TAGFLAGS) ./...

pytest: $(LIB) wheel
	$(VPY) -m pytest -q python_tests

# The Python package with libgobn.so inside, for pip (tools/wheel.py).
wheel: $(LIB)
	$(VPY) -m tools.wheel $(LIB) dist

# The wheel beside each supported TensorFlow release (python/gobn/_supported.py),
# each in a fresh environment under build/compat: its smoke tests
# (python_tests/test_smoke.py) and its XLA tests (python_tests/test_xla.py)
# there, results in bench/compat.json.
# COMPAT_ARGS passes options, e.g. make compat COMPAT_ARGS="--only 2.14.1".
COMPAT_ARGS ?=
compat: wheel
	$(VPY) -m tools.compat $(COMPAT_ARGS)

test: lint vet gotest race fuzz-short pytest

# Generated files that go generate would change fail gotest
# (the generators' tests, through internal/genfile).
lint: $(VENV)/.installed
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt: not formatted:"; echo "$$unformatted"; exit 1; fi
	$(VENV)/bin/ruff check python python_tests tools bench examples

# The race detector over the kernels and the capi layer (TestComputeConcurrent
# runs every op from many goroutines; -short makes it one round).
race: $(LIB)
	go test -race -short ./kernels ./capi
	GOEXPERIMENT=simd go test -race -short ./kernels
	$(if $(GO_TAGS),go test -race -short $(GO_TAGFLAGS) ./kernels/cuda/... ./capi)

# Go fuzz targets, package:Target:execs; go test -fuzz takes one at a time.
# Seed corpora are in <package>/testdata/fuzz/<Target>/. The budgets are
# execution counts (-fuzztime=Nx), not durations: Go 1.26's coordinator can
# fail a target with a bare "context deadline exceeded" when a duration runs
# out while a worker is mid-call (go.dev/issue/75804, fixed in Go 1.27), which
# is not a finding. make test runs each target's count, make fuzz
# FUZZ_SCALE times as many. The kernels' targets run with the vector loops
# the library ships (GOEXPERIMENT=simd).
FUZZ_TARGETS := opdef:FuzzCheckFusedGrad:80000 opdef:FuzzCheckGlobalNormalizationGrad:120000 \
	opdef:FuzzCheckStaticShapes:120000 kernels:FuzzFusedGrad:1500 \
	kernels:FuzzGlobalNormalizationGrad:1500 capi:FuzzCompute:250000 ops:FuzzRewrite:100000
FUZZ_SCALE ?= 20
define run-fuzz
	@mkdir -p build/fuzz
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; rest=$${t#*:}; name=$${rest%%:*}; n=$$(( $${rest#*:} * $(1) )); \
		log=build/fuzz/$$name.log; \
		if GOEXPERIMENT=simd go test -run='^$$' -fuzz="^$$name\$$" -fuzztime=$${n}x ./$$pkg > $$log 2>&1; \
		then echo "fuzz $$pkg $$name $${n}x: $$(grep -o 'execs: [0-9]*' $$log | tail -n 1)"; \
		else cat $$log; exit 1; fi; \
	done
endef
fuzz-short: $(LIB)
	$(call run-fuzz,1)
fuzz: $(LIB)
	$(call run-fuzz,$(FUZZ_SCALE))

# Validates gobn against the TensorFlow in .venv (see tools/golden.py).
golden: $(LIB)
	$(VPY) -m tools.golden gen build/golden
	$(VPY) -m tools.golden check build/golden

# Stock and gobn side by side: bench/results.json, bench/ratios.png, a table.
bench: $(LIB)
	$(VPY) -m bench.calls

clean:
	rm -rf build dist
	rm -f $(CUDA_FATBIN)

# The header of this file, one line a target.
help:
	@sed -n 's/^#   make /make /p' $(firstword $(MAKEFILE_LIST))

# ---------------------------------------------------------------------------
# The GPU check bundle: make gpu-bundle fills build/gpu with what a machine
# with an NVIDIA GPU and PyTorch (no Go, no TensorFlow) needs to check gobn's
# CUDA path: cuda.test (the Go tests of kernels/cuda as a binary: every CUDA
# kernel against gobn's CPU kernels and a float64 reference), libgobncheck.so (cmd/gpucheck:
# the CUDA kernels behind a ctypes ABI, linking no TensorFlow, for timing)
# and the files of tools/gpucheck. There: bash build/gpu/run.sh
# (correctness, compute-sanitizer, speed beside PyTorch's and cuDNN's
# backward; results in $OUT or build/gpu/results). Both are built with
# -tags cuda; GPUCHECK_LDFLAGS is for any link flags that needs (TensorFlow's,
# exported above, are left out).
GPU_BUNDLE := build/gpu
GPUCHECK_LDFLAGS ?=
GPUCHECK_SCRIPTS := $(wildcard tools/gpucheck/*.py) tools/gpucheck/run.sh

$(GPU_BUNDLE)/libgobncheck.so: kernels/cuda/gobn.fatbin $(GO_SOURCES) $(wildcard cmd/gpucheck/*.go)
	@mkdir -p $(GPU_BUNDLE)
	CGO_LDFLAGS="$(GPUCHECK_LDFLAGS)" GOEXPERIMENT=simd go build -tags cuda -buildmode=c-shared \
		-o $@ ./cmd/gpucheck
	rm -f $(GPU_BUNDLE)/libgobncheck.h

$(GPU_BUNDLE)/cuda.test: kernels/cuda/gobn.fatbin $(GO_SOURCES) $(wildcard internal/tolerance/*.go)
	@mkdir -p $(GPU_BUNDLE)
	CGO_LDFLAGS="$(GPUCHECK_LDFLAGS)" GOEXPERIMENT=simd go test -c -tags cuda -o $@ ./kernels/cuda

gpu-bundle: $(GPU_BUNDLE)/libgobncheck.so $(GPU_BUNDLE)/cuda.test $(GPUCHECK_SCRIPTS)
	cp $(GPUCHECK_SCRIPTS) $(GPU_BUNDLE)/
	@du -sh $(GPU_BUNDLE) | sed 's/^/gpu-bundle: /'

# gobn inside TensorFlow's GPU build (docs/gpu.md): on a machine with an
# NVIDIA GPU whose $(GPU_TF_PYTHON) imports TensorFlow's GPU build and
# pytest, with build/libgobn.so built beforehand by make (it is not rebuilt
# here: the GPU machine needs neither Go nor .venv). First the suite's device
# tests on GPU_TF_DEVICE (python_tests/test_device.py, pytest --device;
# GPU_TF_ARGS adds pytest's options, e.g. --matrix full for ResNet-50's
# shapes too), their rows recorded; then a call's time inside TensorFlow,
# stock against gobn on TensorFlow's stream and by the synchronizing rule
# (bench/gpu_calls.py, the record's "stream"; GPU_TF_BENCH_ARGS adds
# its options); then ResNet50 training steps, stock against gobn, each also
# compiled by XLA (bench/models.py --device gpu --xla), for each
# route:layout:batch:precision of GPU_TF_MODELS (GPU_TF_MODELS= skips them;
# GPU_TF_MODELS_ARGS sets the rest); all into GPU_TF_RECORD. Each model
# configuration starts processes of its own and compiles them with XLA.
# python_tests/test_makefile.py runs the target on CPU:0, without the models.
GPU_TF_PYTHON ?= python3
GPU_TF_DEVICE ?= GPU:0
GPU_TF_RECORD ?= bench/gpu_tf.json
GPU_TF_ARGS ?=
GPU_TF_BENCH_ARGS ?=
GPU_TF_MODELS ?= tf_keras:channels_first:32:float32 keras3:channels_last:32:float32 \
	tf_keras:channels_last:128:float32 keras3:channels_last:128:mixed
GPU_TF_MODELS_ARGS ?= --models resnet50 --image 112 --warmup 3 --rounds 5 --steps-per-round 2 --no-float64 --xla
gpu-tf-check:
	$(GPU_TF_PYTHON) -m pytest -q python_tests/test_device.py --device $(GPU_TF_DEVICE) --record $(GPU_TF_RECORD) $(GPU_TF_ARGS)
	$(GPU_TF_PYTHON) -m bench.gpu_calls --device $(GPU_TF_DEVICE) --merge-into $(GPU_TF_RECORD) $(GPU_TF_BENCH_ARGS)
	$(foreach m,$(GPU_TF_MODELS),$(GPU_TF_PYTHON) -m bench.models --device gpu --routes $(word 1,$(subst :, ,$(m))) \
		--data-format $(word 2,$(subst :, ,$(m))) --batch-size $(word 3,$(subst :, ,$(m))) \
		--precision $(word 4,$(subst :, ,$(m))) $(GPU_TF_MODELS_ARGS) --merge-into $(GPU_TF_RECORD) &&) true

# One prepared run on a lent GPU machine (docs/gpu.md, tools/gpurun.py):
# build/gpurun holds what its first call carries beside the tree (the check
# bundle, libgobn.so and cmd/triad's binary, for bench/torch.py where Go is
# not), the bundle's binaries stripped of their symbol tables so that it
# fits beside a part of the kit; then the calls, each with its carry, for
# the TensorFlow GPU kit's parts in GPU_RUN_KIT (its build.sh OUTDIR,
# inside the repository).
GPU_RUN := build/gpurun
GPU_RUN_KIT ?= build/tf-gpu-kit
gpu-run: gpu-bundle $(LIB)
	rm -rf $(GPU_RUN)
	mkdir -p $(GPU_RUN)
	cp -r $(GPU_BUNDLE) $(GPU_RUN)/gpu
	rm -rf $(GPU_RUN)/gpu/results
	strip $(GPU_RUN)/gpu/cuda.test $(GPU_RUN)/gpu/libgobncheck.so
	cp $(LIB) $(GPU_RUN)/libgobn.so
	GOEXPERIMENT=simd go build -ldflags=-s -o $(GPU_RUN)/triad ./cmd/triad
	@du -sh $(GPU_RUN) | sed 's/^/gpu-run: /'
	$(VPY) -m tools.gpurun plan $(GPU_RUN_KIT)

# ---------------------------------------------------------------------------
# Beyond one machine: tf.distribute.MultiWorkerMirroredStrategy on local
# worker processes (127.0.0.1, free ports, TF_CONFIG per worker).
WORKERS ?= 2
multiworker: $(LIB)
	PYTHONPATH=python $(VPY) examples/multiworker/train.py --workers $(WORKERS)

bench-multiworker: $(LIB)
	$(VPY) -m bench.multiworker

# ---------------------------------------------------------------------------
# Existing models on gobn: training-step time of ResNet50 and MobileNetV2,
# stock against gobn by both routes (Keras 3 with gobn.keras.convert, tf_keras
# with gobn.enable()), with oneDNN on and off (docs/models.md; the published
# run is bench/models.json). BENCH_MODELS_ARGS passes options, e.g.
# make bench-models BENCH_MODELS_ARGS="--rounds 20 --batch-size 16".
BENCH_MODELS_ARGS ?=
bench-models: $(LIB)
	$(VPY) -m bench.models $(BENCH_MODELS_ARGS)

# Gobn>FusedBatchNormGradEx against the pairs it replaces (the activation's
# gradient, then gobn's or stock's FusedBatchNormGradV3), per call in
# tf.function chains with oneDNN on (bench/fusion.py; docs/performance.md):
# bench/fusion.json. BENCH_FUSION_ARGS passes options, e.g. --cores 2, or
# --quick for a smoke run.
BENCH_FUSION_ARGS ?=
bench-fusion: $(LIB)
	$(VPY) -m bench.fusion --record bench/fusion.json $(BENCH_FUSION_ARGS)

# ---------------------------------------------------------------------------
# The Go kernels alone on one worker, on two and as the plan has them, in
# chains of calls on the same tensors (kernels' BenchmarkWorkers), with
# GOMAXPROCS at the cores plus two so that the helpers are pinned threads,
# as inside TensorFlow: bench/workers.txt, go test's output.
bench-workers:
	GOEXPERIMENT=simd go test $(GO_TAGFLAGS) -run '^$$' -bench '^BenchmarkWorkers$$' -benchtime 3s \
		-cpu $$(( $$(nproc) + 2 )) ./kernels | tee bench/workers.txt

# ---------------------------------------------------------------------------
# gobn beside PyTorch's CPU batch-norm backward, the library a user would
# pick instead (bench/torch.py; docs/performance.md, "Against PyTorch"):
# PyTorch from PyPI in an environment of its own, TORCH_VENV, made here from
# bench/requirements-torch.txt. It takes about 5.4 GB: PyPI's wheel brings
# its CUDA libraries, without which it does not import, even on a CPU.
# Results in bench/torch.json; BENCH_TORCH_ARGS passes options, e.g.
# make bench-torch BENCH_TORCH_ARGS="--only NCHW --threads 2".
TORCH_VENV ?= .venv-torch
BENCH_TORCH_ARGS ?=
$(TORCH_VENV)/.installed: bench/requirements-torch.txt
	$(PYTHON) -m venv $(TORCH_VENV)
	$(TORCH_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(TORCH_VENV)/bin/python -m pip install --quiet -r bench/requirements-torch.txt
	touch $@

bench-torch: $(LIB) $(TORCH_VENV)/.installed
	$(VPY) -m bench.torch --torch-python $(TORCH_VENV)/bin/python --record bench/torch.json $(BENCH_TORCH_ARGS)
