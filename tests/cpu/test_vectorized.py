"""The compute-bound loops built per ISA (FK_ISA_COMPUTE's target clones) really are vector code.

A loop the compiler fails to vectorize still returns the right bits, so no oracle test notices;
it only runs 8-25 times slower (GCC 13 once turned LOG's and GELU_ERF's special-value selects into
branches).  Every x86-64-v4 clone of a float loop in the built extensions must use 512-bit registers
and every x86-64-v3 clone 256-bit ones, read from the disassembly with binutils' objdump.
"""
import os
import pathlib
import re
import shutil
import subprocess

import pytest

import fuel_kernel as fk

OBJDUMP = shutil.which("objdump")
SANITIZED = os.environ.get("FUEL_KERNEL_SANITIZED", "") not in ("", "0")
LEVEL_REGISTER = {"arch_x86_64_v4": "zmm", "arch_x86_64_v3": "ymm"}
# float loops only: integer division, remainder and power and 64-bit integer products have no
# vector instructions below AVX-512, so those clones are scalar by nature
FLOAT_LOOP = re.compile(r"_(F16|BF16|F32|F64|f32|f64|float|double)(_|$)")
FUNCTION = re.compile(r"^[0-9a-f]+ <(?P<name>[^>]+)\.(?P<level>arch_x86_64_v[34])>:$")


def clone_bodies(shared_object):
    """(name, level, body lines) of every per-ISA clone in one extension's disassembly."""
    text = subprocess.run([OBJDUMP, "-d", "--no-show-raw-insn", str(shared_object)], check=True,
                          capture_output=True, text=True).stdout
    clones, body = [], None
    for line in text.splitlines():
        match = FUNCTION.match(line)
        if match:
            body = []
            clones.append((match["name"], match["level"], body))
        elif not line.strip():
            body = None
        elif body is not None:
            body.append(line)
    return clones


def extensions():
    root = pathlib.Path(fk.__file__).parent
    return sorted(root.glob("*.so")) + sorted((root / "cpu").glob("*.so"))


@pytest.mark.skipif(OBJDUMP is None, reason="binutils' objdump is not installed")
@pytest.mark.skipif(SANITIZED, reason="a sanitizer build instruments the loops, which keeps them scalar")
def test_every_isa_clone_uses_its_vector_width():
    clones, scalar = 0, []
    for shared_object in extensions():
        for name, level, body in clone_bodies(shared_object):
            if not FLOAT_LOOP.search(name):
                continue
            instructions = [line for line in body if "\t" in line]
            if len(instructions) <= 2 and any("jmp" in line for line in instructions):
                continue                                # folded into an identical clone
            clones += 1
            if not any(LEVEL_REGISTER[level] in line for line in body):
                scalar.append(f"{shared_object.name}: {name}.{level}")
    if clones == 0:
        pytest.skip("the extensions were built without GCC's target clones")
    assert not scalar, "clones left scalar by the compiler:\n" + "\n".join(scalar)
