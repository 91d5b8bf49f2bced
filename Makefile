# gobn: one Makefile for every command the README shows.
#
#   make          build build/libgobn.so (creates .venv with the pinned TensorFlow)
#   make demo     run every op beside stock TensorFlow: max error and speed ratio
#   make test     go vet, Go tests, pytest
#   make clean    remove build outputs

PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
LIB := build/libgobn.so

.PHONY: all demo test gotest pytest vet generate clean
all: $(LIB)

# The virtual environment with the pinned TensorFlow (see requirements.txt).
$(VENV)/.installed: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --quiet --upgrade pip
	$(VPY) -m pip install --quiet -r requirements.txt
	touch $@

# TensorFlow's include and library directories, read from tf.sysconfig.
build/tf.mk: $(VENV)/.installed scripts/tfflags.py
	mkdir -p build
	$(VPY) scripts/tfflags.py > $@.tmp && mv $@.tmp $@

ifneq ($(filter-out clean,$(MAKECMDGOALS)),)
include build/tf.mk
else ifeq ($(MAKECMDGOALS),)
include build/tf.mk
endif

export CGO_ENABLED := 1
export CGO_CFLAGS := -I$(TF_INCLUDE) -O2
export CGO_LDFLAGS := -L$(TF_LIBDIR) -l:libtensorflow_framework.so.2 -Wl,-rpath,$(TF_LIBDIR)

GO_SOURCES := $(shell find opdef kernels capi -name '*.go' -o -name '*.c' -o -name '*.h') go.mod go.sum

$(LIB): $(GO_SOURCES) build/tf.mk
	go build -buildmode=c-shared -o $@ ./capi
	rm -f build/libgobn.h

generate:
	go generate ./capi

demo: $(LIB)
	$(VPY) scripts/demo.py

vet: build/tf.mk
	go vet ./...

gotest: build/tf.mk
	go test ./...

pytest: $(LIB)
	$(VPY) -m pytest -q python_tests

test: vet gotest pytest

clean:
	rm -rf build
