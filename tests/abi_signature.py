"""The frozen public C ABI: read abi.h and abi.pxd, measure the layout with the C compiler.

tests/core/test_abi.py compares signature() with tests/data/abi_signature.json, so an accidental change
to a struct, an enum value or the fk_api table fails CI.  After a deliberate change (and an
FK_ABI_VERSION bump when it is not an append to an enum) regenerate the file with

    python tests/abi_signature.py --write

The header is parsed with a few regular expressions: it is ours and keeps to simple C (no nested
braces, one typedef per declaration), which the parser checks rather than assumes.  The layout
numbers (sizeof, alignment, offsetof, enum values) come from compiling a generated C program, so
they are what a real extension sees.  pxd_model() reads abi.pxd the same way, so the test can
check that the Cython mirror declares exactly what the header defines.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if __name__ == "__main__":
    sys.path.insert(1, str(ROOT))     # run as a script from a checkout: the checkout's build

import fuel_kernel  # noqa: E402

# the files of the fuel_kernel under test (a checkout's build or an installed package)
PACKAGE = Path(fuel_kernel.__file__).resolve().parent
HEADER = Path(fuel_kernel.get_include()) / "fuel_kernel" / "abi.h"
PXD = PACKAGE / "abi.pxd"
FROZEN = Path(__file__).resolve().parent / "data" / "abi_signature.json"
REGENERATE = "python tests/abi_signature.py --write"


def normalize(text):
    """One spelling per declaration: single spaces, `T *name`, no space inside brackets."""
    text = re.sub(r"\s+", " ", text).strip()
    text = re.sub(r"\s*\*\s*", " *", text)
    text = re.sub(r"\(\s+", "(", text)
    text = re.sub(r"\s+\)", ")", text)
    text = re.sub(r"\s*,\s*", ", ", text)
    text = re.sub(r"\s*\[\s*", "[", text)
    return text.replace("( *", "(*")


def read_expanded(path):
    """The text of abi.h or abi.pxd with the generated files it includes pasted in their place
    (abi.h's `#include "fuel_kernel/abi_enums.h"`, abi.pxd's `include "abi_enums.pxi"`: the enums
    tools/generate_abi.py writes from fuel_kernel/spec.py), so the model sees what a compiler sees."""
    path = Path(path)

    def paste(match):
        # a C include is relative to the include dir (above fuel_kernel/), a Cython one to the pxd
        base = path.parent.parent if match.group(1).startswith("#") else path.parent
        target = base / match.group(2)
        return read_expanded(target) if target.exists() else match.group(0)

    return re.sub(r'^(#\s*include|include) "([^"]+)"[ \t]*$', paste, path.read_text(), flags=re.M)


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


# ---- the header ----------------------------------------------------------------------------------
def split_members(body):
    """[(name, declaration)] for the members of a struct or union body."""
    members = []
    for decl in (d.strip() for d in body.split(";")):
        if not decl:
            continue
        pointer = re.match(r"^(.*)\(\s*\*\s*(\w+)\s*\)\s*\((.*)\)$", decl, re.S)
        if pointer:                                   # a function-pointer member
            members.append((pointer.group(2), normalize(decl)))
            continue
        first, *rest = decl.split(",")
        m = re.match(r"^(.*?[\s*])(\w+)((?:\[[^\]]*\])*)$", first.strip(), re.S)
        if not m:
            raise ValueError(f"abi.h: cannot parse member declaration {decl!r}")
        base = m.group(1).replace("*", "").strip()
        members.append((m.group(2), normalize(m.group(1) + m.group(2) + m.group(3))))
        for declarator in rest:
            d = re.match(r"^\s*(\**)\s*(\w+)((?:\[[^\]]*\])*)\s*$", declarator)
            if not d:
                raise ValueError(f"abi.h: cannot parse declarator {declarator!r} in {decl!r}")
            members.append((d.group(2), normalize(f"{base} {d.group(1)}{d.group(2)}{d.group(3)}")))
    return members


def header_model(path=HEADER):
    """What abi.h declares: constants, enums, structs/unions with their members, the opaque types,
    function-pointer typedefs, inline functions and string macros."""
    text = strip_comments(read_expanded(path))
    model = {"abi_version": None, "constants": {}, "strings": {}, "enums": {}, "structs": {},
             "opaque": [], "typedefs": {}, "functions": {}}
    for name, value in re.findall(r"^\s*#define\s+(FK_\w+)\s+(\S.*?)\s*$", text, re.M):
        if re.fullmatch(r"-?\d+u?", value):
            model["constants"][name] = int(value.rstrip("u"))
        elif value.startswith('"'):
            model["strings"][name] = value.strip('"')
    model["abi_version"] = model["constants"].pop("FK_ABI_VERSION")
    for body, name in re.findall(r"typedef\s+enum\s*\{([^{}]*)\}\s*(\w+)\s*;", text):
        model["enums"][name] = [m.split("=")[0].strip() for m in body.split(",") if m.strip()]
    for body in re.findall(r"(?<!typedef )\benum\s*\{([^{}]*)\}\s*;", text):
        members = [m.split("=")[0].strip() for m in body.split(",") if m.strip()]
        model["enums"]["enum " + members[0]] = members
    for kind, body, name in re.findall(r"typedef\s+(struct|union)\s*\{([^{}]*)\}\s*(\w+)\s*;", text):
        model["structs"][name] = {"kind": kind, "members": split_members(body)}
    model["opaque"] = sorted(re.findall(r"typedef\s+struct\s+(\w+)\s+\1\s*;", text))
    for decl in re.findall(r"typedef\s+[^;{}]*?\(\s*\*\s*\w+\s*\)\s*\([^;{}]*\)\s*;", text):
        name = re.search(r"\(\s*\*\s*(\w+)\s*\)", decl).group(1)
        model["typedefs"][name] = normalize(decl.rstrip(";"))
    for decl in re.findall(r"static\s+inline\s+[^;{}=]*?\bfk_\w+\s*\([^;{}]*\)\s*\{", text):
        name = re.search(r"\b(fk_\w+)\s*\(", decl).group(1)
        model["functions"][name] = normalize(decl.rstrip("{"))
    typedef_count = len(re.findall(r"\btypedef\b", text))
    found = len(model["structs"]) + len(model["opaque"]) + len(model["typedefs"]) + \
        sum(1 for e in model["enums"] if not e.startswith("enum "))
    if found != typedef_count:
        raise ValueError(f"abi.h has {typedef_count} typedefs but the parser understood {found}: "
                         "extend tests/abi_signature.py for the new construct")
    return model


def compiler():
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    return cc.split()


def measure(model, include_dir=HEADER.parent.parent):
    """sizeof/alignof/offsetof of every struct and member and the value of every enum member and
    constant, from a C program compiled against the header."""
    lines = ["#include <stddef.h>", "#include <stdio.h>", "#define FK_BUILDING_CORE 1",
             '#include "fuel_kernel/abi.h"', "int main(void) {"]
    for name in model["constants"]:
        lines.append(f'printf("C {name} %lld\\n", (long long)({name}));')
    lines.append('printf("C FK_ABI_VERSION %lld\\n", (long long)FK_ABI_VERSION);')
    lines.append('printf("P %zu\\n", sizeof(void *));')
    for members in model["enums"].values():
        for member in members:
            lines.append(f'printf("E {member} %lld\\n", (long long)({member}));')
    for name, struct in model["structs"].items():
        lines.append(f'printf("S {name} %zu %zu\\n", sizeof({name}), _Alignof({name}));')
        for member, _ in struct["members"]:
            lines.append(f'printf("F {name} {member} %zu %zu\\n", offsetof({name}, {member}), '
                         f'sizeof((({name} *)0)->{member}));')
    lines += ["return 0;", "}"]
    with tempfile.TemporaryDirectory() as tmp:
        source, exe = os.path.join(tmp, "measure.c"), os.path.join(tmp, "measure")
        Path(source).write_text("\n".join(lines) + "\n")
        subprocess.run(compiler() + ["-std=gnu11", "-I", str(include_dir), source, "-o", exe],
                       check=True, capture_output=True, text=True)
        output = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
    values = {"C": {}, "E": {}, "S": {}, "F": {}, "P": None}
    for line in output.splitlines():
        tag, *rest = line.split()
        if tag == "P":
            values["P"] = int(rest[0])
        elif tag in ("C", "E"):
            values[tag][rest[0]] = int(rest[1])
        elif tag == "S":
            values["S"][rest[0]] = (int(rest[1]), int(rest[2]))
        else:
            values["F"][(rest[0], rest[1])] = (int(rest[2]), int(rest[3]))
    return values


def signature(path=HEADER):
    """The frozen form: everything an extension compiled against abi.h depends on."""
    model = header_model(path)
    values = measure(model, Path(path).parent.parent)
    structs = {}
    for name, struct in model["structs"].items():
        size, align = values["S"][name]
        structs[name] = {"kind": struct["kind"], "size": size, "align": align, "members": [
            {"name": m, "decl": decl, "offset": values["F"][(name, m)][0], "size": values["F"][(name, m)][1]}
            for m, decl in struct["members"]]}
    return {
        "abi_version": values["C"]["FK_ABI_VERSION"],
        "pointer_size": values["P"],
        "constants": {name: values["C"][name] for name in model["constants"]},
        "strings": model["strings"],
        "enums": {name: {m: values["E"][m] for m in members} for name, members in model["enums"].items()},
        "structs": structs,
        "opaque": model["opaque"],
        "typedefs": model["typedefs"],
        "inline_functions": model["functions"],
    }


# ---- comparison ------------------------------------------------------------------------------------
def compare(frozen, current):
    """(breaking, compatible): lists of human-readable differences.  Appending enum members (and
    the *_COUNT sentinel moving with them) or adding a new struct/constant is compatible; any other
    change breaks extensions compiled against the old header."""
    breaking, compatible = [], []
    for key in ("pointer_size",):
        if frozen[key] != current[key]:
            breaking.append(f"{key}: {frozen[key]} -> {current[key]}")
    for section in ("constants", "strings", "typedefs", "inline_functions"):
        old, new = frozen[section], current[section]
        for name in old:
            if name not in new:
                breaking.append(f"{section}: {name} removed")
            elif old[name] != new[name]:
                breaking.append(f"{section}: {name} changed: {old[name]!r} -> {new[name]!r}")
        compatible += [f"{section}: {name} added" for name in new if name not in old]
    for name, members in frozen["enums"].items():
        now = current["enums"].get(name)
        if now is None:
            breaking.append(f"enum {name} removed")
            continue
        for member, value in members.items():
            if member not in now:
                breaking.append(f"enum {name}: {member} removed")
            elif now[member] != value:
                change = f"enum {name}: {member} {value} -> {now[member]}"
                (compatible if member.endswith("_COUNT") and now[member] > value else breaking).append(change)
        taken = {v for m, v in members.items() if not m.endswith("_COUNT")}
        for member, value in now.items():
            if member not in members:
                (breaking if value in taken and not member.endswith("_COUNT") else compatible).append(
                    f"enum {name}: {member} = {value} added")
    compatible += [f"enum {name} added" for name in current["enums"] if name not in frozen["enums"]]
    for name, struct in frozen["structs"].items():
        now = current["structs"].get(name)
        if now is None:
            breaking.append(f"{struct['kind']} {name} removed")
            continue
        for field in ("kind", "size", "align"):
            if struct[field] != now[field]:
                breaking.append(f"{name}: {field} {struct[field]} -> {now[field]}")
        old_members = {m["name"]: m for m in struct["members"]}
        new_members = {m["name"]: m for m in now["members"]}
        for member, old in old_members.items():
            new = new_members.get(member)
            if new is None:
                breaking.append(f"{name}.{member} removed")
            elif new != old:
                breaking.append(f"{name}.{member}: {old['decl']} @{old['offset']}+{old['size']} -> "
                                f"{new['decl']} @{new['offset']}+{new['size']}")
        breaking += [f"{name}.{member} added" for member in new_members if member not in old_members]
    compatible += [f"struct {name} added" for name in current["structs"] if name not in frozen["structs"]]
    if frozen["opaque"] != current["opaque"]:
        breaking.append(f"opaque types: {frozen['opaque']} -> {current['opaque']}")
    return breaking, compatible


# ---- the Cython mirror ---------------------------------------------------------------------------
def pxd_model(path=PXD):
    """What abi.pxd declares inside its `cdef extern from "fuel_kernel/abi.h"` blocks."""
    model = {"enums": {}, "structs": {}, "typedefs": {}, "functions": {}, "names": []}
    lines = read_expanded(path).splitlines()
    in_extern, block, joined = False, None, []
    for raw in lines:                                  # join continuation lines of a declaration
        if joined and raw.strip() and joined[-1].count("(") > joined[-1].count(")"):
            joined[-1] += " " + raw.strip()
        else:
            joined.append(raw.split("#")[0].rstrip() if not raw.lstrip().startswith("#") else "")
    for line in joined:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        text = line.strip()
        if indent == 0:
            in_extern = text.startswith('cdef extern from "fuel_kernel/abi.h"')
            block = None
            continue
        if not in_extern:
            continue
        if indent == 4:
            block = None
            m = re.match(r"ctypedef enum (\w+):$", text)
            if m or text == "enum:":
                block = ("enum", m.group(1) if m else None)
                continue
            m = re.match(r"ctypedef (struct|union) (\w+):$", text)
            if m:
                block = ("struct", m.group(2))
                model["structs"][m.group(2)] = {"kind": m.group(1), "members": []}
                continue
            m = re.match(r"ctypedef (.*)\(\s*\*\s*(\w+)\s*\)\s*\((.*)\)(.*)$", text)
            if m:
                model["typedefs"][m.group(2)] = {"ret": normalize(m.group(1)), "params": param_types(m.group(3)),
                                                 "tail": m.group(4).strip()}
                continue
            m = re.match(r"^(.*?[\s*])(\w+)\s*\((.*)\)(.*)$", text)
            if m:
                model["functions"][m.group(2)] = {"ret": normalize(m.group(1)), "params": param_types(m.group(3)),
                                                  "tail": m.group(4).strip()}
                continue
            m = re.match(r"^(.*?[\s*])(\w+)$", text)
            if m:
                model["names"].append(m.group(2))
                continue
            raise ValueError(f"abi.pxd: cannot parse {text!r}")
        if block and block[0] == "enum":
            members = [m.strip() for m in text.split(",") if m.strip()]
            if block[1] is None:
                model["enums"].setdefault(None, []).extend(members)
            else:
                model["enums"].setdefault(block[1], []).extend(members)
        elif block and block[0] == "struct" and text != "pass":
            model["structs"][block[1]]["members"].append(normalize(text))
    return model


def param_types(params):
    """The parameter types of a prototype, names dropped: `const fk_key *key` -> `const fk_key *`."""
    params = params.strip()
    if params in ("", "void"):
        return []
    types = []
    for p in (p.strip() for p in params.split(",")):
        if p == "...":
            types.append(p)
            continue
        m = re.match(r"^(.*?[\s*])(\w+)$", p)
        types.append(normalize(m.group(1)) if m and m.group(1).strip() not in ("", "const", "unsigned")
                     else normalize(p))
    return types


def header_prototype(decl):
    """(return type, parameter types) of `ret (*name)(params)` or `static inline ret name(params)`."""
    m = re.match(r"^(?:typedef )?(.*?)\(\s*\*\s*\w+\s*\)\s*\((.*)\)$", decl) or \
        re.match(r"^(?:static inline )?(.*?[\s*])\w+\s*\((.*)\)$", decl)
    return normalize(m.group(1)), param_types(m.group(2))


def mirror_problems(header=HEADER, pxd=PXD):
    """Every way abi.pxd fails to mirror abi.h one-to-one (an empty list when it does)."""
    h, p = header_model(header), pxd_model(pxd)
    constants = {name: str(value) for name, value in h["constants"].items()}
    problems = []
    declared_enum_members = {m for members in p["enums"].values() for m in members}
    for name, members in h["enums"].items():
        if name.startswith("enum "):
            missing = [m for m in members if m not in declared_enum_members]
        else:
            missing = [m for m in members if m not in p["enums"].get(name, [])]
        problems += [f"enum member {m} ({name}) is not declared in abi.pxd" for m in missing]
    all_header_members = {m for members in h["enums"].values() for m in members} | set(h["constants"]) | {"FK_ABI_VERSION"}
    problems += [f"abi.pxd declares enum member {m} that abi.h does not define"
                 for m in declared_enum_members if m not in all_header_members]
    for name, struct in h["structs"].items():
        if name == "fk_api":
            continue                                  # reached through the fk_* macros below
        mirror = p["structs"].get(name)
        if mirror is None:
            problems.append(f"{struct['kind']} {name} is not declared in abi.pxd")
            continue
        expected = []
        for _, decl in struct["members"]:
            for constant, value in constants.items():
                decl = re.sub(rf"\b{constant}\b", value, decl)
            expected.append(decl)
        if expected != mirror["members"]:
            problems.append(f"{name}: abi.h members {expected} but abi.pxd declares {mirror['members']}")
    for name in h["opaque"]:
        if name not in p["structs"]:
            problems.append(f"opaque type {name} is not declared in abi.pxd")
    for name, decl in h["typedefs"].items():
        ret, params = header_prototype(decl)
        mirror = p["typedefs"].get(name)
        if mirror is None or (mirror["ret"], mirror["params"]) != (ret, params):
            problems.append(f"typedef {name}: abi.h {decl!r}, abi.pxd {mirror}")
        elif mirror["tail"] != "noexcept nogil":
            problems.append(f"typedef {name} must be declared `noexcept nogil` in abi.pxd")
    api = dict(h["structs"]["fk_api"]["members"])
    expected_functions = {f"fk_{m}": decl for m, decl in api.items() if "(*" in decl}
    expected_functions.update(h["functions"])
    for name, decl in expected_functions.items():
        ret, params = header_prototype(decl)
        mirror = p["functions"].get(name)
        if mirror is None:
            problems.append(f"function {name} is not declared in abi.pxd")
        elif (mirror["ret"], mirror["params"]) != (ret, params):
            problems.append(f"function {name}: abi.h returns {ret} and takes {params}, abi.pxd "
                            f"returns {mirror['ret']} and takes {mirror['params']}")
    extra = set(p["functions"]) - set(expected_functions) - {"fk_import_api"}
    problems += [f"abi.pxd declares function {name} that abi.h does not provide" for name in sorted(extra)]
    problems += [f"abi.pxd declares {name} that abi.h does not define" for name in p["names"]
                 if name not in h["strings"]]
    problems += [f"string macro {name} is not declared in abi.pxd" for name in h["strings"] if name not in p["names"]]
    return problems


# ---- an extension that touches every declaration -------------------------------------------------
def usage_pyx(pxd=PXD):
    """Cython source that cimports fuel_kernel.abi and uses every name it declares: every enum
    member as a value, every struct member by address, every fk_api function in a call with
    arguments of the declared types (in a function that is compiled, never run)."""
    p = pxd_model(pxd)
    out = ["# cython: language_level=3",
           "# Generated by tests/abi_signature.py: every declaration of abi.pxd, used from outside.",
           "from fuel_kernel.abi cimport *", "", "fk_import_api()", "",
           "def enum_values():", "    return {"]
    for members in p["enums"].values():
        out += [f"        {m!r}: <long long>{m}," for m in members]
    out += ["    }", "", "def string_macros():", "    return {"]
    out += [f"        {n!r}: <bytes>{n}," for n in p["names"]]
    out += ["    }", "", "def member_offsets():", "    offsets = {}"]
    for name, struct in p["structs"].items():
        if not struct["members"]:
            continue
        out.append(f"    cdef {name} v_{name}")
        fields = [re.match(r"^.*?(\w+)(?:\[\d+\])*$", m).group(1) for m in struct["members"]]
        items = ", ".join(f"{f!r}: <size_t>(<char *>&v_{name}.{f} - <char *>&v_{name})" for f in fields)
        out.append(f"    offsets[{name!r}] = {{{items}}}")
    out += ["    return offsets", "", "cdef void never_called() noexcept nogil:"]
    declared = []
    for name, fn in p["functions"].items():
        if name == "fk_import_api":
            continue
        args = []
        for i, t in enumerate(fn["params"]):
            if t == "...":
                args += ["1", 'b"two"']
                continue
            var = f"a_{name}_{i}"
            declared.append(f"    cdef {t} {var} = {'NULL' if '*' in t or t.endswith('_fn') else '0'}" if t != "const char *"
                            else f'    cdef const char *{var} = b"%d %s"')
            args.append(var)
        call = f"{name}({', '.join(args)})"
        out_line = f"    {call}"
        if fn["ret"] not in ("void",):
            declared.append(f"    cdef {fn['ret']} r_{name}")
            out_line = f"    r_{name} = {call}"
        declared.append(out_line)
    out += [line for line in declared if line.lstrip().startswith("cdef")]
    out += [line for line in declared if not line.lstrip().startswith("cdef")]
    out += ["", "def never_called_address():",
            "    return <size_t><void *>never_called", "",
            "def thread_local_error(int status, int number, bytes word):",
            "    cdef int got",
            "    cdef bytes message",
            "    cdef const char *text = word",
            "    with nogil:",
            '        fk_set_error(status, "number %d, word %s", number, text)',
            "        got = fk_error_status()",
            "    message = fk_error_message()",
            "    fk_clear_error()",
            "    return got, message, fk_error_status()", "",
            "def key_bytes(int kind, uint32_t key_id, bytes n_and_dtypes, int backend):",
            "    cdef fk_dtypes dts",
            "    cdef fk_key key",
            "    dts.n = n_and_dtypes[0]",
            "    for i in range(8):",
            "        dts.v[i] = n_and_dtypes[1 + i]",
            "    key = fk_key_make(kind, key_id, &dts, backend)",
            "    return (<char *>&key)[:sizeof(fk_key)]", ""]
    return "\n".join(out)


def main(argv=None):
    import argparse
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"rewrite {FROZEN.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    current = signature()
    if args.write:
        FROZEN.parent.mkdir(exist_ok=True)
        FROZEN.write_text(json.dumps(current, indent=1) + "\n")
        print(f"wrote {FROZEN.relative_to(ROOT)} (ABI version {current['abi_version']})")
        return 0
    print(json.dumps(current, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
