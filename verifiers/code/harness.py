"""Call harnesses for the languages other than Python: one program per submission that calls one function per run.

The harness is the candidate's source plus a `main` of ours (the candidate's own `main`, if any, renamed out
of the way). Each run reads its stdin: a fresh random marker, the function's name, then its arguments (the
token format of signature.py for C, C++, Java, Go and Rust; JSON for JavaScript). It moves the candidate's
stdout to stderr where the language allows, calls the function, and writes one line `<marker> ok <value>`
(tokens, or JSON) on the real stdout. The judge parses that line and compares plain data in its own process:
expected values never enter the sandbox. A candidate that learns the marker and prints a line of its own
gains nothing it could not get by returning that value, and a second line makes the call a wrong answer.
"""

from __future__ import annotations

import re

from proctor.verifiers.code.signature import Signature, Type

# The headers a LeetCode C++ answer assumes (not <bits/stdc++.h>, which takes twice as long to compile).
CPP_HEADERS = (
    "iostream",
    "vector",
    "string",
    "algorithm",
    "map",
    "set",
    "unordered_map",
    "unordered_set",
    "queue",
    "stack",
    "deque",
    "numeric",
    "climits",
    "cmath",
    "sstream",
    "functional",
    "utility",
    "cstring",
    "iterator",
    "cstdio",
    "cstdlib",
    "tuple",
    "array",
    "bitset",
    "list",
    "memory",
    "unistd.h",
)
CPP_PRELUDE = (
    "".join(f"#include <{h}>\n" for h in CPP_HEADERS)
    + "using namespace std;\n#define main proctor_candidate_main\n"
)
C_PRELUDE = (
    "#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n#include <stdbool.h>\n#include <stdint.h>\n"
    "#include <math.h>\n#include <limits.h>\n#include <ctype.h>\n#include <unistd.h>\n"
    "#define main proctor_candidate_main\n"
)

# A 32-bit float result is written as the shortest digits that read back as that float (0.1f as "0.1"), not
# as the double it widens to (0.10000000149011612), which no expected value written as 0.1 would equal.
FLOAT32 = ("float", "Float", "float32", "f32")

# -- C++ --------------------------------------------------------------------------------------------------

CPP_HARNESS = r"""
#undef main
namespace proctor_h {
static std::vector<std::string> T;
static size_t P = 0;
static std::string O;
static const std::string& tok() {
    if (P >= T.size()) { fprintf(stderr, "harness: missing input\n"); exit(3); }
    return T[P++];
}
static void rd(int& v) { v = (int)std::stoll(tok()); }
static void rd(long& v) { v = std::stol(tok()); }
static void rd(long long& v) { v = std::stoll(tok()); }
static void rd(double& v) { v = std::stod(tok()); }
static void rd(float& v) { v = std::stof(tok()); }
static void rd(bool& v) { v = tok() == "1"; }
static void rd(char& v) { v = (char)std::stoi(tok()); }
static void rd(std::string& v) {
    const std::string& t = tok();
    v.clear();
    for (size_t i = 1; i + 1 < t.size(); i += 2) v.push_back((char)std::stoi(t.substr(i, 2), nullptr, 16));
}
template <class E> static void rd(std::vector<E>& v) {
    long long n = std::stoll(tok());
    v.clear();
    for (long long i = 0; i < n; i++) { E x; rd(x); v.push_back(x); }
}
static void put(const std::string& s) { O += s; O += ' '; }
static void wr(int v) { put(std::to_string(v)); }
static void wr(long v) { put(std::to_string(v)); }
static void wr(long long v) { put(std::to_string(v)); }
static void wr(double v) { char b[40]; snprintf(b, sizeof b, "%.17g", v); put(b); }
static void wr(float v) {
    char b[40];
    for (int p = 1; p <= 9; p++) { snprintf(b, sizeof b, "%.*g", p, (double)v); if (strtof(b, nullptr) == v) break; }
    put(b);
}
static void wr(bool v) { put(v ? "1" : "0"); }
static void wr(char v) { put(std::to_string((int)(unsigned char)v)); }
static void wr(const std::string& v) {
    static const char* hex = "0123456789abcdef";
    std::string t = "x";
    for (unsigned char c : v) { t += hex[c >> 4]; t += hex[c & 15]; }
    put(t);
}
template <class E> static void wr(const std::vector<E>& v) {
    put(std::to_string(v.size()));
    for (size_t i = 0; i < v.size(); i++) { E x = v[i]; wr(x); }
}
}  // namespace proctor_h

int main() {
    std::string all((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    {
        std::istringstream in(all);
        std::string t;
        while (in >> t) proctor_h::T.push_back(t);
    }
    std::cin.clear();
    fflush(stdout);
    int proctor_out = dup(1);
    dup2(2, 1);  // the candidate's prints go to stderr; the record goes to the real stdout
    const std::string marker = proctor_h::tok();
    const std::string name = proctor_h::tok();
    using proctor_h::rd;
    using proctor_h::wr;
    if (false) {
    }
@@DISPATCH@@
    else {
        fprintf(stderr, "harness: no function %s\n", name.c_str());
        return 4;
    }
    std::cout.flush();
    fflush(stdout);
    std::string line = marker + " ok " + proctor_h::O + "\n";
    const char* data = line.data();
    size_t left = line.size();
    while (left) {
        ssize_t n = write(proctor_out, data, left);
        if (n <= 0) return 5;
        data += n;
        left -= (size_t)n;
    }
    return 0;
}
"""


def _cpp_call(signature: Signature) -> str:
    lines = [f'    else if (name == "{signature.name}") {{']
    names = []
    for index, param in enumerate(signature.params):
        lines.append(f"        {param.type.text} a{index}; rd(a{index});")
        names.append(f"a{index}")
    target = signature.name
    if signature.owner and not signature.static:
        target = f"{signature.owner}().{signature.name}"
    elif signature.owner:
        target = f"{signature.owner}::{signature.name}"
    lines.append(f"        auto r = {target}({', '.join(names)});")
    lines.append("        wr(r);")
    lines.append("    }")
    return "\n".join(lines)


def cpp_program(source: str, signatures: list[Signature]) -> str:
    """The candidate's C++ source with a harness main that dispatches to `signatures`."""
    dispatch = "\n".join(_cpp_call(s) for s in signatures)
    return CPP_PRELUDE + source + "\n" + CPP_HARNESS.replace("@@DISPATCH@@", dispatch)


# -- C ----------------------------------------------------------------------------------------------------

C_HARNESS = r"""
#undef main
static char* proctor_in;
static char* proctor_at;
static char* proctor_o;
static size_t proctor_ol, proctor_oc;
static char* proctor_ptok(void) {
    while (*proctor_at && isspace((unsigned char)*proctor_at)) proctor_at++;
    if (!*proctor_at) { fprintf(stderr, "harness: missing input\n"); exit(3); }
    char* start = proctor_at;
    while (*proctor_at && !isspace((unsigned char)*proctor_at)) proctor_at++;
    if (*proctor_at) *proctor_at++ = 0;
    return start;
}
static long long proctor_pint(void) { return strtoll(proctor_ptok(), NULL, 10); }
static double proctor_pdbl(void) { return strtod(proctor_ptok(), NULL); }
static char* proctor_pstr(void) {
    char* t = proctor_ptok() + 1;
    size_t n = strlen(t) / 2;
    char* s = malloc(n + 1);
    for (size_t i = 0; i < n; i++) { unsigned v; sscanf(t + 2 * i, "%2x", &v); s[i] = (char)v; }
    s[n] = 0;
    return s;
}
static void proctor_pput(const char* s) {
    size_t n = strlen(s);
    if (proctor_ol + n + 2 > proctor_oc) {
        proctor_oc = 2 * (proctor_ol + n + 2);
        proctor_o = realloc(proctor_o, proctor_oc);
    }
    memcpy(proctor_o + proctor_ol, s, n);
    proctor_ol += n;
    proctor_o[proctor_ol++] = ' ';
    proctor_o[proctor_ol] = 0;
}
static void proctor_pw_i(long long v) { char b[32]; snprintf(b, sizeof b, "%lld", v); proctor_pput(b); }
static void proctor_pw_d(double v) { char b[40]; snprintf(b, sizeof b, "%.17g", v); proctor_pput(b); }
static void proctor_pw_f(float v) {
    char b[40];
    for (int p = 1; p <= 9; p++) { snprintf(b, sizeof b, "%.*g", p, (double)v); if (strtof(b, NULL) == v) break; }
    proctor_pput(b);
}
static void proctor_pw_b(bool v) { proctor_pput(v ? "1" : "0"); }
static void proctor_pw_c(char v) { proctor_pw_i((unsigned char)v); }
static void proctor_pw_s(const char* v) {
    if (!v) v = "";
    size_t n = strlen(v);
    char* t = malloc(2 * n + 2);
    t[0] = 'x';
    for (size_t i = 0; i < n; i++) snprintf(t + 1 + 2 * i, 3, "%02x", (unsigned char)v[i]);
    t[2 * n + 1] = 0;
    proctor_pput(t);
    free(t);
}

int main(void) {
    size_t size = 0, cap = 1 << 16;
    proctor_in = malloc(cap);
    for (;;) {
        size_t n = fread(proctor_in + size, 1, cap - size - 1, stdin);
        size += n;
        if (n == 0) break;
        if (cap - size < 2) { cap *= 2; proctor_in = realloc(proctor_in, cap); }
    }
    proctor_in[size] = 0;
    proctor_at = proctor_in;
    proctor_oc = 1 << 12;
    proctor_o = malloc(proctor_oc);
    proctor_o[0] = 0;
    fflush(stdout);
    int proctor_out = dup(1);
    dup2(2, 1);
    const char* marker = proctor_ptok();
    const char* name = proctor_ptok();
    if (0) {
    }
@@DISPATCH@@
    else {
        fprintf(stderr, "harness: no function %s\n", name);
        return 4;
    }
    fflush(stdout);
    size_t total = strlen(marker) + proctor_ol + 8;
    char* line = malloc(total);
    snprintf(line, total, "%s ok %s\n", marker, proctor_o);
    size_t left = strlen(line);
    const char* data = line;
    while (left) {
        ssize_t n = write(proctor_out, data, left);
        if (n <= 0) return 5;
        data += n;
        left -= (size_t)n;
    }
    return 0;
}
"""

_C_TYPES = {"i32": "int", "i64": "long long", "f64": "double", "bool": "bool", "byte": "char", "str": "char*"}
_C_READ = {
    "i32": "(int)proctor_pint()",
    "i64": "proctor_pint()",
    "f64": "proctor_pdbl()",
    "bool": "proctor_pint() != 0",
    "byte": "(char)proctor_pint()",
    "str": "proctor_pstr()",
}
_C_WRITE = {
    "i32": "proctor_pw_i",
    "i64": "proctor_pw_i",
    "f64": "proctor_pw_d",
    "bool": "proctor_pw_b",
    "byte": "proctor_pw_c",
    "str": "proctor_pw_s",
}


def _c_writer(declared: str, kind: str) -> str:
    """The writer for a C value: a float prints its own shortest digits (see FLOAT32)."""
    return "proctor_pw_f" if declared == "float" else _C_WRITE[kind]


def _c_base(text: str) -> str:
    """A C pointer type less one `*` and const: `const int*` -> `int`."""
    without = re.sub(r"\bconst\b", " ", text)
    index = without.rfind("*")
    return " ".join(without[:index].split()) if index >= 0 else " ".join(without.split())


def _c_call(signature: Signature) -> str:
    lines = [f'    else if (!strcmp(name, "{signature.name}")) {{']
    names = []
    for index, param in enumerate(signature.params):
        kind = param.type
        if kind.kind == "list":
            assert kind.elem is not None
            base = _c_base(kind.text)
            lines.append(f"        int n{index} = (int)proctor_pint();")
            lines.append(f"        {base}* a{index} = malloc(sizeof({base}) * (n{index} + 1));")
            lines.append(
                f"        for (int i = 0; i < n{index}; i++) a{index}[i] = {_C_READ[kind.elem.kind]};"
            )
            names += [f"a{index}", f"n{index}"]
        else:
            declared = " ".join(re.sub(r"\bconst\b", " ", kind.text).split())
            lines.append(f"        {declared} a{index} = {_C_READ[kind.kind]};")
            names.append(f"a{index}")
    result = signature.result
    if signature.sized_result:
        assert result.elem is not None
        lines.append("        int rs = 0;")
        names.append("&rs")
        lines.append(f"        {_c_base(result.text)}* r = {signature.name}({', '.join(names)});")
        lines.append("        proctor_pw_i(rs);")
        lines.append(
            f"        for (int i = 0; i < rs; i++) {_c_writer(_c_base(result.text), result.elem.kind)}(r[i]);"
        )
    else:
        declared = " ".join(re.sub(r"\bconst\b", " ", result.text).split())
        lines.append(f"        {declared} r = {signature.name}({', '.join(names)});")
        lines.append(f"        {_c_writer(declared, result.kind)}(r);")
    lines.append("    }")
    return "\n".join(lines)


def c_program(source: str, signatures: list[Signature]) -> str:
    """The candidate's C source with a harness main that dispatches to `signatures`."""
    dispatch = "\n".join(_c_call(s) for s in signatures)
    return C_PRELUDE + source + "\n" + C_HARNESS.replace("@@DISPATCH@@", dispatch)


# -- Java -------------------------------------------------------------------------------------------------

JAVA_CLASS = "ProctorHarness"
JAVA_PRELUDE = "import java.util.*;\nimport java.util.stream.*;\n"
JAVA_HARNESS = r"""
final class ProctorHarness {
    static String[] T;
    static int P = 0;
    static final StringBuilder O = new StringBuilder();
    static String tok() {
        if (P >= T.length) throw new IllegalStateException("harness: missing input");
        return T[P++];
    }
    static int ri() { return Integer.parseInt(tok()); }
    static long rl() { return Long.parseLong(tok()); }
    static double rd() { return Double.parseDouble(tok()); }
    static boolean rb() { return tok().equals("1"); }
    static char rc() { return (char) Integer.parseInt(tok()); }
    static String rs() {
        String t = tok();
        byte[] b = new byte[(t.length() - 1) / 2];
        for (int i = 0; i < b.length; i++) b[i] = (byte) Integer.parseInt(t.substring(1 + 2 * i, 3 + 2 * i), 16);
        return new String(b, java.nio.charset.StandardCharsets.UTF_8);
    }
    static void w(String t) { O.append(t).append(' '); }
    static void wi(long v) { w(Long.toString(v)); }
    static void wd(double v) { w(Double.toString(v)); }
    static void wf(float v) { w(Float.toString(v)); }
    static void wb(boolean v) { w(v ? "1" : "0"); }
    static void wc(char v) { w(Integer.toString(v)); }
    static void ws(String v) {
        StringBuilder t = new StringBuilder("x");
        for (byte c : v.getBytes(java.nio.charset.StandardCharsets.UTF_8)) t.append(String.format("%02x", c & 0xff));
        w(t.toString());
    }
@@METHODS@@
    public static void main(String[] args) throws Exception {
        T = new String(System.in.readAllBytes(), java.nio.charset.StandardCharsets.ISO_8859_1).trim().split("\\s+");
        java.io.PrintStream out = new java.io.PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), false);
        System.out.flush();
        System.setOut(System.err);
        String marker = tok();
        String name = tok();
        switch (name) {
@@DISPATCH@@
            default:
                System.err.println("harness: no function " + name);
                System.exit(4);
        }
        System.err.flush();
        out.print(marker + " ok " + O + "\n");
        out.flush();
    }
}
"""
_JAVA_READ = {"i32": "ri()", "i64": "rl()", "f64": "rd()", "bool": "rb()", "char": "rc()", "str": "rs()"}
_JAVA_WRITE = {"i32": "wi", "i64": "wi", "f64": "wd", "bool": "wb", "char": "wc", "str": "ws"}


class _JavaTypes:
    """Generates one reader and one writer method per distinct list type."""

    def __init__(self) -> None:
        self.methods: list[str] = []
        self.readers: dict[str, str] = {}
        self.writers: dict[str, str] = {}

    def read(self, kind: Type) -> str:
        if kind.elem is None:
            expression = _JAVA_READ[kind.kind]
            return f"(float) {expression}" if kind.text in ("float", "Float") else expression
        if kind.text not in self.readers:
            name = f"r{len(self.readers)}"
            self.readers[kind.text] = name
            inner = self.read(kind.elem)
            if kind.flavor == "array":
                first = kind.text.index("[")
                make = f"new {kind.text[:first]}[n]{kind.text[first + 2 :]}"
                body = f"{kind.text} v = {make}; for (int i = 0; i < n; i++) v[i] = {inner};"
            else:
                body = f"{kind.text} v = new ArrayList<>(); for (int i = 0; i < n; i++) v.add({inner});"
            self.methods.append(f"    static {kind.text} {name}() {{ int n = ri(); {body} return v; }}")
        return f"{self.readers[kind.text]}()"

    def write(self, kind: Type) -> str:
        if kind.elem is None:
            return "wf" if kind.text in FLOAT32 else _JAVA_WRITE[kind.kind]
        if kind.text not in self.writers:
            name = f"w{len(self.writers)}"
            self.writers[kind.text] = name
            inner = self.write(kind.elem)
            size = "v.length" if kind.flavor == "array" else "v.size()"
            self.methods.append(
                f"    static void {name}({kind.text} v) {{ wi({size}); for ({kind.elem.text} x : v) {inner}(x); }}"
            )
        return self.writers[kind.text]


def java_program(source: str, signatures: list[Signature]) -> str:
    """The candidate's Java source (package line dropped) with a non-public harness class that has the main."""
    types = _JavaTypes()
    dispatch = []
    for signature in signatures:
        lines = [f'            case "{signature.name}": {{']
        names = []
        for index, param in enumerate(signature.params):
            lines.append(f"                {param.type.text} a{index} = {types.read(param.type)};")
            names.append(f"a{index}")
        target = f"{signature.owner}.{signature.name}"
        if not signature.static:
            target = f"new {signature.owner}().{signature.name}"
        lines.append(f"                {signature.result.text} r = {target}({', '.join(names)});")
        lines.append(f"                {types.write(signature.result)}(r);")
        lines.append("                break;")
        lines.append("            }")
        dispatch.append("\n".join(lines))
    # [ \t]*, not \s*: a line-anchored \s* rescans every following blank line from each line start (quadratic).
    body = re.sub(r"^[ \t]*package\s+[\w.]+\s*;", "", source, count=1, flags=re.M)
    return (
        JAVA_PRELUDE
        + body
        + "\n"
        + JAVA_HARNESS.replace("@@METHODS@@", "\n".join(types.methods)).replace(
            "@@DISPATCH@@", "\n".join(dispatch)
        )
    )


# -- Go ---------------------------------------------------------------------------------------------------

GO_HEADER = """package main

import (
	proctor_bytes "bytes"
	proctor_hex "encoding/hex"
	proctor_io "io"
	proctor_os "os"
	proctor_strconv "strconv"
	proctor_syscall "syscall"
)
"""
GO_HARNESS = """
var proctorT [][]byte
var proctorP int
var proctorO proctor_bytes.Buffer

func proctorTok() string {
	if proctorP >= len(proctorT) {
		panic("harness: missing input")
	}
	proctorP++
	return string(proctorT[proctorP-1])
}
func proctorInt() int64 { v, err := proctor_strconv.ParseInt(proctorTok(), 10, 64); if err != nil { panic(err) }; return v }
func proctorFloat() float64 { v, err := proctor_strconv.ParseFloat(proctorTok(), 64); if err != nil { panic(err) }; return v }
func proctorBool() bool { return proctorTok() == "1" }
func proctorStr() string { v, err := proctor_hex.DecodeString(proctorTok()[1:]); if err != nil { panic(err) }; return string(v) }
func proctorW(t string) { proctorO.WriteString(t); proctorO.WriteByte(' ') }
func proctorWI(v int64) { proctorW(proctor_strconv.FormatInt(v, 10)) }
func proctorWF(v float64) { proctorW(proctor_strconv.FormatFloat(v, 'g', -1, 64)) }
func proctorWF32(v float32) { proctorW(proctor_strconv.FormatFloat(float64(v), 'g', -1, 32)) }
func proctorWB(v bool) { if v { proctorW("1") } else { proctorW("0") } }
func proctorWS(v string) { proctorW("x" + proctor_hex.EncodeToString([]byte(v))) }
@@METHODS@@
func main() {
	data, _ := proctor_io.ReadAll(proctor_os.Stdin)
	proctorT = proctor_bytes.Fields(data)
	out, err := proctor_syscall.Dup(1)
	if err != nil {
		panic(err)
	}
	proctor_syscall.Dup3(2, 1, 0)
	marker := proctorTok()
	name := proctorTok()
	switch name {
@@DISPATCH@@
	default:
		proctor_os.Stderr.WriteString("harness: no function " + name + "\\n")
		proctor_os.Exit(4)
	}
	proctor_os.NewFile(uintptr(out), "record").WriteString(marker + " ok " + proctorO.String() + "\\n")
}
"""
_GO_READ = {
    "int": "int(proctorInt())",
    "int64": "proctorInt()",
    "int32": "int32(proctorInt())",
    "float64": "proctorFloat()",
    "float32": "float32(proctorFloat())",
    "bool": "proctorBool()",
    "string": "proctorStr()",
    "byte": "byte(proctorInt())",
    "rune": "rune(proctorInt())",
}
_GO_WRITE = {
    "i32": "proctorWI(int64(x))",
    "i64": "proctorWI(int64(x))",
    "f64": "proctorWF(float64(x))",
    "bool": "proctorWB(x)",
    "str": "proctorWS(x)",
    "byte": "proctorWI(int64(x))",
    "char": "proctorWI(int64(x))",
}


class _GoTypes:
    """One reader and one writer function per distinct slice type."""

    def __init__(self) -> None:
        self.functions: list[str] = []
        self.readers: dict[str, str] = {}
        self.writers: dict[str, str] = {}

    def read(self, kind: Type) -> str:
        if kind.elem is None:
            return _GO_READ[kind.text]
        if kind.text not in self.readers:
            name = f"proctorR{len(self.readers)}"
            self.readers[kind.text] = name
            inner = self.read(kind.elem)
            self.functions.append(
                f"func {name}() {kind.text} {{ n := int(proctorInt()); v := make({kind.text}, n); "
                f"for i := range v {{ v[i] = {inner} }}; return v }}"
            )
        return f"{self.readers[kind.text]}()"

    def write(self, kind: Type) -> str:
        """A statement writing `x`."""
        if kind.elem is None:
            return "proctorWF32(x)" if kind.text in FLOAT32 else _GO_WRITE[kind.kind]
        if kind.text not in self.writers:
            name = f"proctorW{len(self.writers)}"
            self.writers[kind.text] = name
            inner = self.write(kind.elem)
            self.functions.append(
                f"func {name}(v {kind.text}) {{ proctorWI(int64(len(v))); for _, x := range v {{ {inner} }} }}"
            )
        return f"{self.writers[kind.text]}(x)"


def go_program(source: str, signatures: list[Signature]) -> str:
    """The candidate's Go source in package main (its own main renamed) with a harness main."""
    types = _GoTypes()
    dispatch = []
    for signature in signatures:
        lines = [f'\tcase "{signature.name}":']
        names = []
        for index, param in enumerate(signature.params):
            lines.append(f"\t\ta{index} := {types.read(param.type)}")
            names.append(f"a{index}")
        lines.append(f"\t\tx := {signature.name}({', '.join(names)})")
        lines.append(f"\t\t{types.write(signature.result)}")
        dispatch.append("\n".join(lines))
    body = re.sub(r"^[ \t]*package[ \t]+\w+[ \t]*;?", "", source, count=1, flags=re.M)
    body = re.sub(r"^func\s+main\s*\(", "func proctorCandidateMain(", body, flags=re.M)
    return (
        GO_HEADER
        + body
        + "\n"
        + GO_HARNESS.replace("@@METHODS@@", "\n".join(types.functions)).replace(
            "@@DISPATCH@@", "\n".join(dispatch)
        )
    )


# -- Rust -------------------------------------------------------------------------------------------------

RUST_HARNESS = r"""
#[allow(dead_code)]
mod proctor_harness {
    pub struct R { pub t: Vec<String>, pub p: usize }
    impl R {
        pub fn tok(&mut self) -> String {
            if self.p >= self.t.len() { panic!("harness: missing input"); }
            self.p += 1;
            self.t[self.p - 1].clone()
        }
    }
    pub trait P: Sized { fn rd(r: &mut R) -> Self; fn wr(&self, o: &mut String); }
    fn put(o: &mut String, t: &str) { o.push_str(t); o.push(' '); }
    macro_rules! ints { ($($t:ty),*) => { $(impl P for $t {
        fn rd(r: &mut R) -> Self { r.tok().parse().expect("an integer") }
        fn wr(&self, o: &mut String) { put(o, &self.to_string()); }
    })* } }
    ints!(i32, i64, isize, usize, u32, u64);
    impl P for f64 { fn rd(r: &mut R) -> Self { r.tok().parse().expect("a number") } fn wr(&self, o: &mut String) { put(o, &format!("{:?}", self)); } }
    impl P for f32 { fn rd(r: &mut R) -> Self { r.tok().parse().expect("a number") } fn wr(&self, o: &mut String) { put(o, &format!("{:?}", self)); } }
    impl P for bool { fn rd(r: &mut R) -> Self { r.tok() == "1" } fn wr(&self, o: &mut String) { put(o, if *self { "1" } else { "0" }); } }
    impl P for u8 { fn rd(r: &mut R) -> Self { r.tok().parse::<u32>().expect("a byte") as u8 } fn wr(&self, o: &mut String) { put(o, &self.to_string()); } }
    impl P for char {
        fn rd(r: &mut R) -> Self { char::from_u32(r.tok().parse().expect("a char")).expect("a char") }
        fn wr(&self, o: &mut String) { put(o, &(*self as u32).to_string()); }
    }
    impl P for String {
        fn rd(r: &mut R) -> Self {
            let t = r.tok();
            let b: Vec<u8> = (1..t.len()).step_by(2).map(|i| u8::from_str_radix(&t[i..i + 2], 16).expect("hex")).collect();
            String::from_utf8(b).expect("utf-8")
        }
        fn wr(&self, o: &mut String) {
            let mut t = String::from("x");
            for b in self.as_bytes() { t.push_str(&format!("{:02x}", b)); }
            put(o, &t);
        }
    }
    impl<E: P> P for Vec<E> {
        fn rd(r: &mut R) -> Self { let n: usize = r.tok().parse().expect("a length"); (0..n).map(|_| E::rd(r)).collect() }
        fn wr(&self, o: &mut String) { put(o, &self.len().to_string()); for x in self { x.wr(o); } }
    }
    extern "C" { fn dup(fd: i32) -> i32; fn dup2(a: i32, b: i32) -> i32; }
    pub fn start() -> (R, i32) {
        use std::io::Read;
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s).expect("stdin");
        let out = unsafe { let out = dup(1); dup2(2, 1); out };
        (R { t: s.split_whitespace().map(String::from).collect(), p: 0 }, out)
    }
    pub fn finish(out: i32, marker: &str, o: &str) {
        use std::io::Write;
        use std::os::unix::io::FromRawFd;
        std::io::stdout().flush().ok();
        let mut f = unsafe { std::fs::File::from_raw_fd(out) };
        f.write_all(format!("{} ok {}\n", marker, o).as_bytes()).expect("record");
    }
}

fn main() {
    let (mut proctor_r, proctor_out) = proctor_harness::start();
    let mut proctor_o = String::new();
    let marker = proctor_r.tok();
    let name = proctor_r.tok();
    match name.as_str() {
@@DISPATCH@@
        _ => { eprintln!("harness: no function {}", name); std::process::exit(4); }
    }
    proctor_harness::finish(proctor_out, &marker, &proctor_o);
}
"""


def rust_program(source: str, signatures: list[Signature]) -> str:
    """The candidate's Rust source (its main renamed; `struct Solution;` added for a bare `impl Solution`)
    with a harness main."""
    dispatch = []
    for signature in signatures:
        lines = [f'        "{signature.name}" => {{']
        names = []
        for index, param in enumerate(signature.params):
            lines.append(
                f"            #[allow(unused_mut)] let mut a{index}: {param.type.text} = "
                "proctor_harness::P::rd(&mut proctor_r);"
            )
            names.append(f"{param.borrow}a{index}")
        target = f"{signature.owner}::{signature.name}" if signature.owner else signature.name
        lines.append(f"            let r: {signature.result.text} = {target}({', '.join(names)});")
        lines.append("            proctor_harness::P::wr(&r, &mut proctor_o);")
        lines.append("        }")
        dispatch.append("\n".join(lines))
    body = re.sub(
        r"^([ \t]*(?:pub[ \t]+)?)fn\s+main\s*\(", r"\1fn proctor_candidate_main(", source, flags=re.M
    )
    owners = {s.owner for s in signatures if s.owner}
    for owner in sorted(owners):
        if not re.search(rf"\b(?:struct|enum)\s+{owner}\b", body):
            # Appended, not prepended: a crate's inner attributes (#![...]) must stay first.
            body += f"\n#[allow(dead_code)]\nstruct {owner};\n"
    return body + "\n" + RUST_HARNESS.replace("@@DISPATCH@@", "\n".join(dispatch))


# -- JavaScript -------------------------------------------------------------------------------------------

JS_PRELUDE = r"""const __proctor = (() => {
  const fs = require("fs");
  const text = fs.readFileSync(0, "utf8");
  const cut = text.indexOf("\n");
  const marker = text.slice(0, cut).trim();
  const request = JSON.parse(text.slice(cut + 1));
  const writeSync = fs.writeSync;
  const stringify = JSON.stringify;
  const isArray = Array.isArray;
  const protoOf = Object.getPrototypeOf;
  const keys = Object.keys;
  const objectProto = Object.prototype;
  const isFinite = Number.isFinite;
  const stderrWrite = process.stderr.write.bind(process.stderr);
  // The candidate's prints go to stderr; the record is written straight to fd 1.
  process.stdout.write = (chunk, encoding, callback) => stderrWrite(chunk, encoding, callback);
  const plain = (value, depth) => {
    if (depth > 200) return "nesting deeper than 200";
    if (value === null || typeof value === "boolean" || typeof value === "string") return null;
    if (typeof value === "number") return isFinite(value) ? null : "a non-finite number";
    if (isArray(value)) {
      for (const item of value) { const bad = plain(item, depth + 1); if (bad) return bad; }
      return null;
    }
    if (typeof value === "object" && (protoOf(value) === objectProto || protoOf(value) === null)) {
      for (const key of keys(value)) { const bad = plain(value[key], depth + 1); if (bad) return bad; }
      return null;
    }
    if (typeof value === "object") return (value.constructor && value.constructor.name) || "an object";
    return typeof value;
  };
  const finish = (value) => {
    const bad = plain(value, 0);
    const line = bad ? `${marker} notplain ${stringify(bad)}\n` : `${marker} ok ${stringify(value)}\n`;
    writeSync(1, line);
  };
  return { request, finish };
})();
"""
JS_HARNESS = r"""
;(async () => {
  const table = {@@TABLE@@};
  const request = __proctor.request;
  let target = table[request.name];
  if (request.method_of) {
    const Owner = table[request.method_of];
    const instance = new Owner();
    target = instance[request.name].bind(instance);
  }
  if (typeof target !== "function") {
    process.stderr.write(`harness: no function ${request.name}\n`);
    process.exit(4);
  }
  let value = target(...request.args);
  if (value && typeof value.then === "function") value = await value;
  __proctor.finish(value);
})().catch((error) => {
  process.stderr.write(String(error && error.stack ? error.stack : error) + "\n");
  process.exit(1);
});
"""
_JS_NAME = re.compile(
    # (?:\s*\*)?\s*, not \s*\*?\s*: two runs of spaces around an optional star split a long run n ways.
    r"^(?:async\s+)?(?:function(?:\s*\*)?\s*([A-Za-z_$][\w$]*)|class\s+([A-Za-z_$][\w$]*)|"
    r"(?:const|let|var)\s+([A-Za-z_$][\w$]*)\s*=)",
    re.M,
)


def js_names(source: str) -> list[str]:
    """The top-level functions, classes and bindings of a JavaScript program (lines that start at column 0)."""
    from proctor.verifiers.code.signature import blank

    names = []
    for match in _JS_NAME.finditer(blank(js_source(source))):
        name = next(group for group in match.groups() if group)
        if name != "__proctor" and name not in names:
            names.append(name)
    return names


def js_source(source: str) -> str:
    """The candidate's JavaScript as a CommonJS script: `export` keywords at the start of a line dropped."""
    return re.sub(
        r"^export\s+(?:default\s+)?(?=(?:async\s+)?(?:function|class|const|let|var)\b)",
        "",
        source,
        flags=re.M,
    )


def js_program(source: str, names: list[str]) -> str:
    """The candidate's JavaScript between our prelude (reads the request, moves stdout) and the call."""
    source = js_source(source)
    table = ", ".join(f"{n}: typeof {n} !== 'undefined' ? {n} : undefined" for n in names)
    return JS_PRELUDE + source + "\n" + JS_HARNESS.replace("@@TABLE@@", table)
