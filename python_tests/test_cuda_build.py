"""The CUDA build's outputs, checked without a GPU.

`make` (GOBN_CUDA=1, the default) compiles kernels/cuda/batchnorm.cu with
tools/cuda_fatbin.py into kernels/cuda/gobn.fatbin, which the library
embeds, beside build/cuda/manifest.json and build/cuda/ptxas.txt. These tests
read those files:

- the fatbin holds exactly one cubin (SASS) per architecture TensorFlow
  2.21.0's GPU wheel was built for, PTX for the newest, and nothing else,
  each with every kernel; the container format is parsed here, not trusted
  to nvFatbin;
- ptxas gave no kernel a spill or a stack frame, on any architecture;
- the fatbin is the one built from the sources as they are now;
- build/libgobn.so links no CUDA library (it finds the driver at run time).

A library built with GOBN_CUDA=0 has no fatbin: the tests skip, saying so.
The mode is $GOBN_CUDA when set (make exports it), else whether the
library's Go build info (go version -m) has -tags=cuda.
"""

import hashlib
import json
import os
import re
import shutil
import struct
import subprocess

import pytest

from support import REPO_ROOT as REPO
from tools import cuda_fatbin
FATBIN = os.path.join(REPO, "kernels", "cuda", "gobn.fatbin")
SOURCE = "kernels/cuda/batchnorm.cu"
BUILD = os.path.join(REPO, "build", "cuda")
MANIFEST = os.path.join(BUILD, "manifest.json")
PTXAS = os.path.join(BUILD, "ptxas.txt")

# build_info['cuda_compute_capabilities'] of the official tensorflow==2.21.0
# wheel (tensorflow-2.21.0-cp311-cp311-manylinux_2_27_x86_64.whl,
# tensorflow/python/platform/build_info.py; CUDA 12.5.1). Written out here,
# apart from tools/cuda_fatbin.py's CUDA_COMPUTE_CAPABILITIES, so that a
# change to either is caught.
TENSORFLOW_2_21_CUDA_COMPUTE_CAPABILITIES = ["sm_60", "sm_70", "sm_80", "sm_89", "compute_90"]


# The library make built (this file reads the build's outputs).
LIBRARY = os.path.join(REPO, "build", "libgobn.so")


def cuda_mode():
    """True or False: whether the library was built with GOBN_CUDA=1; None if unknown."""
    env = os.environ.get("GOBN_CUDA")
    if env in ("0", "1"):
        return env == "1"
    go, lib = shutil.which("go"), LIBRARY
    if not go or not os.path.exists(lib):
        return None
    out = subprocess.run([go, "version", "-m", lib], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        return None
    tags = re.search(r"^\s*build\s+-tags=(\S+)", out.stdout, re.M)
    return bool(tags and "cuda" in tags.group(1).split(","))


@pytest.fixture(scope="module")
def manifest():
    mode = cuda_mode()
    if mode is False:
        pytest.skip("built with GOBN_CUDA=0: no CUDA fatbin")
    if not os.path.exists(MANIFEST):
        if mode:
            pytest.fail(f"built with GOBN_CUDA=1, but there is no {os.path.relpath(MANIFEST, REPO)}: run make",
                        pytrace=False)
        pytest.skip("no build/cuda/manifest.json: built with GOBN_CUDA=0")
    with open(MANIFEST) as f:
        return json.load(f)


def arch_number(name):
    return int(re.fullmatch(r"(?:sm|compute)_(\d+)", name).group(1))


# ------------------------------------------------------- the fatbin format

FATBIN_MAGIC = 0xBA55ED50
KIND_PTX, KIND_ELF = 1, 2
FLAG_64BIT, FLAG_DEBUG, FLAG_COMPRESSED = 0x1, 0x2, 0x2000
# The container header: magic, version, header size, size of what follows.
_HEADER = struct.Struct("<IHHQ")
# Each entry's header: kind, version, header size, padded payload size,
# compressed size, options offset, minor, major (the ELF or PTX ISA version),
# arch, name offset, name length, flags, reserved, decompressed size. The
# name (and for PTX the JIT options) follow inside header size.
_ENTRY = struct.Struct("<HHIQIIHHIIIQQQ")


def parse_fatbin(data):
    """Returns the entries of a fatbin as dicts; payload is the padded payload."""
    magic, version, hsize, size = _HEADER.unpack_from(data, 0)
    assert magic == FATBIN_MAGIC, f"magic {magic:#x}"
    assert version == 1 and hsize == _HEADER.size, (version, hsize)
    assert hsize + size == len(data), f"header says {hsize + size} bytes, file has {len(data)}"
    entries, off = [], hsize
    while off < len(data):
        (kind, _, ehsize, psize, csize, _, minor, major, arch, name_off, name_len, flags, _,
         dsize) = _ENTRY.unpack_from(data, off)
        assert ehsize >= _ENTRY.size and off + ehsize + psize <= len(data), f"entry at {off}"
        name = data[off + name_off:off + name_off + name_len].rstrip(b"\0").decode() if name_off else ""
        entries.append({"kind": kind, "arch": arch, "version": (major, minor), "flags": flags,
                        "name": name, "compressed_size": csize, "decompressed_size": dsize,
                        "payload": data[off + ehsize:off + ehsize + psize]})
        off += ehsize + psize
    return entries


STO_CUDA_ENTRY = 0x10


def elf_entry_functions(elf):
    """The kernels (STO_CUDA_ENTRY function symbols) of a cubin."""
    assert elf[:4] == b"\x7fELF" and elf[4] == 2 and elf[5] == 1, "not a 64-bit little-endian ELF"
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", elf, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    names = set()
    for _, stype, _, _, off, size, link, _, _, entsize in sections:
        if stype != 2:  # SHT_SYMTAB
            continue
        stroff = sections[link][4]
        for p in range(off, off + size, entsize):
            st_name, st_info, st_other = struct.unpack_from("<IBB", elf, p)
            if st_info & 0xF == 2 and st_other & STO_CUDA_ENTRY:  # STT_FUNC
                end = elf.index(b"\0", stroff + st_name)
                names.add(elf[stroff + st_name:end].decode())
    return sorted(names)


def elf_sm(elf):
    """The SM a cubin is for, from e_flags (ELF ABI version 7 and older); None if another ABI."""
    if elf[8] > 7:
        return None
    e_flags, = struct.unpack_from("<I", elf, 0x30)
    return e_flags & 0xFF


# ----------------------------------------------------------------- tests


def test_architectures_are_tensorflows(manifest):
    assert list(cuda_fatbin.CUDA_COMPUTE_CAPABILITIES) == TENSORFLOW_2_21_CUDA_COMPUTE_CAPABILITIES
    assert manifest["cuda_compute_capabilities"] == TENSORFLOW_2_21_CUDA_COMPUTE_CAPABILITIES, (
        "the fatbin was built for another list: run make")
    numbers = sorted({arch_number(c) for c in TENSORFLOW_2_21_CUDA_COMPUTE_CAPABILITIES})
    assert manifest["sass_archs"] == [f"sm_{n}" for n in numbers]
    assert manifest["ptx_arch"] == f"compute_{numbers[-1]}"


def test_fatbin_is_built_from_the_sources(manifest):
    assert manifest["source"] == SOURCE, f"the fatbin was built from {manifest['source']}, not {SOURCE}"
    stale = []
    for path, digest in manifest["inputs_sha256"].items():
        full = path if os.path.isabs(path) else os.path.join(REPO, path)
        if not os.path.exists(full):
            stale.append(f"{path} (gone)")
            continue
        with open(full, "rb") as f:
            if hashlib.sha256(f.read()).hexdigest() != digest:
                stale.append(path)
    assert not stale, f"the fatbin predates {stale}: run make"
    with open(FATBIN, "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == manifest["fatbin_sha256"], (
            "kernels/cuda/gobn.fatbin is not the one manifest.json describes: run make")


def test_fatbin_holds_sass_per_arch_and_ptx_for_the_newest(manifest):
    with open(FATBIN, "rb") as f:
        entries = parse_fatbin(f.read())
    sass = [arch_number(a) for a in manifest["sass_archs"]]
    ptx = arch_number(manifest["ptx_arch"])
    found = sorted(("sm" if e["kind"] == KIND_ELF else "compute" if e["kind"] == KIND_PTX else e["kind"],
                    e["arch"]) for e in entries)
    assert found == sorted([("sm", a) for a in sass] + [("compute", ptx)])
    kernels = manifest["kernels"]
    assert kernels, "no kernels"
    for e in entries:
        what = f"{'sm' if e['kind'] == KIND_ELF else 'compute'}_{e['arch']}"
        # Uncompressed (tools/cuda_fatbin.py's FATBIN_OPTIONS): the payloads
        # are read below.
        assert not e["flags"] & FLAG_COMPRESSED, f"{what} is compressed"
        assert e["flags"] & FLAG_64BIT and not e["flags"] & FLAG_DEBUG, f"{what}: flags {e['flags']:#x}"
        if e["kind"] == KIND_ELF:
            assert elf_sm(e["payload"]) in (None, e["arch"]), f"{what}: the cubin is for sm_{elf_sm(e['payload'])}"
            assert elf_entry_functions(e["payload"]) == kernels, what
        else:
            text = e["payload"].rstrip(b"\0").decode()
            assert re.search(rf"^\s*\.target\s+sm_{e['arch']}\b", text, re.M), f"{what}: .target"
            version = re.search(r"^\s*\.version\s+(\d+)\.(\d+)", text, re.M)
            assert version and tuple(map(int, version.groups())) == e["version"], f"{what}: .version"
            assert sorted(re.findall(r"\.entry\s+([A-Za-z_$][\w$]*)\s*\(", text)) == kernels, what


def test_no_spills_and_no_stack_frame(manifest):
    with open(PTXAS) as f:
        records = [json.loads(line) for line in f if line.strip()]
    for arch in manifest["sass_archs"]:
        entries = sorted(r["kernel"] for r in records if r["arch"] == arch and r["entry"])
        assert entries, f"ptxas.txt has no kernel for {arch}"
        assert entries == manifest["kernels"], arch
    assert {r["arch"] for r in records} == set(manifest["sass_archs"])
    # Every function ptxas reported, kernels and noinline device functions.
    bad = [f"{r['arch']} {r['kernel']}: {r['stack']} bytes stack frame, {r['spill_stores']} bytes spill "
           f"stores, {r['spill_loads']} bytes spill loads" for r in records
           if r["spill_stores"] or r["spill_loads"] or r["stack"] or r.get("cumulative_stack")]
    assert not bad, "local memory (see build/cuda/ptxas.txt):\n" + "\n".join(bad)


def test_library_links_no_cuda_library():
    # In both modes: with GOBN_CUDA=1 the library loads the driver only when
    # a GPU op runs, so it loads on a machine without one.
    lib = LIBRARY
    if not os.path.exists(lib):
        pytest.fail(f"{lib} not found: run make", pytrace=False)
    out = subprocess.run(["ldd", lib], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    cuda = [line.strip() for line in out.stdout.splitlines()
            if re.search(r"\blib(cuda|cudart|nvrtc|nvfatbin|nvJitLink|nvptxcompiler)[.\-_]", line)]
    assert not cuda, f"{lib} links {cuda}"
