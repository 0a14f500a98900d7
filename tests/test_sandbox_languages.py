"""The seven languages, compiled once and run many times in the default sandbox backend (nsjail).

Real compilers, real jails. Compiled programs are shared by the tests through module-scoped fixtures, since
compilers are slow on a shared machine.
"""

from __future__ import annotations

import pytest

from proctor.sandboxes.job import Backend, Job, Result, RunLimits, RunVerdict
from proctor.sandboxes.languages import (
    LANGUAGES,
    get_language,
    go_memlimit_mb,
    java_classes,
    java_heap_mb,
    node_heap_mb,
)
from proctor.sandboxes.program import NotCompiled, Submission

LIMITS = RunLimits(cpu_s=5.0, memory_mb=256)
COMPILED = [name for name, language in LANGUAGES.items() if language.compiled]

# Read two integers, print their sum.
SUM = {
    "python": "import sys\na, b = map(int, sys.stdin.read().split())\nprint(a + b)\n",
    "c": '#include <stdio.h>\nint main(void){long long a,b;if(scanf("%lld %lld",&a,&b)!=2)return 3;'
    'printf("%lld\\n",a+b);return 0;}\n',
    "cpp": "#include <iostream>\nint main(){long long a,b;std::cin>>a>>b;std::cout<<a+b<<'\\n';}\n",
    "java": "import java.util.*;\n// public class Decoy in a comment must not name the file\n"
    "class Helper { static long add(long a, long b) { return a + b; } }\n"
    "class Solution {\n  static class Pair { long a, b; }\n  public static void main(String[] args) {\n"
    "    Scanner in = new Scanner(System.in);\n    long a = in.nextLong(), b = in.nextLong();\n"
    "    System.out.println(Helper.add(a, b));\n  }\n}\n",
    "javascript": 'const [a, b] = require("fs").readFileSync(0, "utf8").trim().split(/\\s+/).map(BigInt);\n'
    "console.log((a + b).toString());\n",
    "go": 'package main\n\nimport "fmt"\n\nfunc main() {\n\tvar a, b int64\n\tfmt.Scan(&a, &b)\n'
    "\tfmt.Println(a + b)\n}\n",
    "rust": "use std::io::Read;\nfn main() {\n    let mut s = String::new();\n"
    "    std::io::stdin().read_to_string(&mut s).unwrap();\n"
    "    let v: Vec<i64> = s.split_whitespace().map(|x| x.parse().unwrap()).collect();\n"
    '    println!("{}", v[0] + v[1]);\n}\n',
}

BROKEN = {
    "c": "int main(void) { return undefined_name; }\n",
    "cpp": "int main() { std::vector<int> v; }\n",
    "java": 'public class Main { public static void main(String[] a) { int x = "text"; } }\n',
    "go": 'package main\n\nimport "fmt"\n\nfunc main() {\n\tfmt.Println(undefinedName)\n}\n',
    "rust": 'fn main() { let x: i32 = "text"; }\n',
}
# The compiler's own words for each broken program.
BROKEN_SAYS = {
    "c": "undefined_name",
    "cpp": "vector",
    "java": "incompatible types",
    "go": "undefined",
    "rust": "mismatched types",
}

CRASH = {
    "python": "raise ValueError('boom')\n",
    "c": "#include <stddef.h>\nint main(void){volatile int *p = NULL; *p = 1; return 0;}\n",
    "cpp": '#include <stdexcept>\nint main(){ throw std::runtime_error("boom"); }\n',
    "java": 'public class Main { public static void main(String[] a) { throw new IllegalStateException("boom"); } }\n',
    "javascript": 'throw new Error("boom");\n',
    "go": 'package main\n\nfunc main() {\n\tpanic("boom")\n}\n',
    "rust": 'fn main() { panic!("boom"); }\n',
}


class Counting:
    """The real backend, with a record of the command names of every job it ran (to count compiles)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.name = backend.name
        self.jobs: list[list[str]] = []

    def available(self) -> tuple[bool, str]:
        return self.backend.available()

    def run(self, job: Job) -> Result:
        self.jobs.append([command.name for command in job.commands])
        return self.backend.run(job)


@pytest.fixture(scope="module")
def programs(backend: Backend):
    """The sum program compiled once per language, each behind its own job counter."""
    made = {}
    for name, source in SUM.items():
        counter = Counting(backend)
        submission = Submission(name, source, limits=LIMITS, backend=counter)
        outcome = submission.compile()
        assert outcome.ok, (name, outcome)
        made[name] = (submission, counter)
    yield made
    for submission, _ in made.values():
        submission.close()


@pytest.mark.parametrize("language", list(SUM))
def test_stdin_to_stdout(programs, language: str) -> None:
    submission, _ = programs[language]
    first = submission.run("3 4\n")
    assert first.verdict is RunVerdict.ok, first
    assert first.stdout == "7\n"
    second = submission.run("-5 1000000000000\n")
    assert second.stdout == "999999999995\n", second


@pytest.mark.parametrize("language", COMPILED)
def test_compiles_once_and_runs_many(programs, language: str) -> None:
    submission, counter = programs[language]
    before = len(counter.jobs)
    results = submission.run_many([f"{i} {i * 10}" for i in range(6)], batch=4)
    assert [r.stdout for r in results] == [f"{i * 11}\n" for i in range(6)]
    assert all(r.verdict is RunVerdict.ok for r in results)
    assert submission.run("1 1").stdout == "2\n"
    # Two batches (4 + 2 tests in one job each) and a single run: the compiled files travel, no compiler runs.
    assert counter.jobs[before:] == [["test0", "test1", "test2", "test3"], ["test4", "test5"], ["run"]]
    assert [names for names in counter.jobs if "compile" in names] == [["compile"]]
    assert counter.jobs[0] == ["compile"]


@pytest.mark.parametrize("language", COMPILED)
def test_compile_error_is_its_own_outcome(backend: Backend, language: str) -> None:
    with Submission(language, BROKEN[language], backend=backend) as submission:
        outcome = submission.compile()
        assert outcome.status == "compile_error", outcome
        assert BROKEN_SAYS[language] in outcome.message
        assert outcome.result is not None and outcome.result.verdict is RunVerdict.runtime_error
        with pytest.raises(NotCompiled) as raised:
            submission.run("")
        assert raised.value.outcome.status == "compile_error"


@pytest.mark.parametrize("language", list(CRASH))
def test_runtime_error(backend: Backend, language: str) -> None:
    with Submission(language, CRASH[language], limits=LIMITS, backend=backend) as submission:
        assert submission.compile().ok
        result = submission.run("")
    assert result.verdict is RunVerdict.runtime_error, result
    if language == "c":
        assert result.signal == 11
    else:
        assert "boom" in result.stderr


def test_python_cold_runs_a_fresh_interpreter(backend: Backend) -> None:
    with Submission("python", SUM["python"], backend=backend, warm=False) as submission:
        assert not submission.warm
        assert [r.stdout for r in submission.run_many(["1 2", "3 4"])] == ["3\n", "7\n"]


def test_run_many_stops_on_the_first_failure(programs) -> None:
    submission, _ = programs["c"]
    results = submission.run_many(["1 2", "oops", "3 4"], stop_on_failure=True)
    assert [r.verdict for r in results] == [RunVerdict.ok, RunVerdict.runtime_error]
    results = submission.run_many(["1 2", "oops", "3 4"])
    assert [r.verdict for r in results] == [RunVerdict.ok, RunVerdict.runtime_error, RunVerdict.ok]


HEAP = {
    "java": "public class Main { public static void main(String[] a) {\n"
    "  System.out.println(Runtime.getRuntime().maxMemory() / (1024 * 1024)); } }\n",
    "javascript": 'console.log(Math.floor(require("v8").getHeapStatistics().heap_size_limit / 1048576));\n',
    "go": 'package main\n\nimport (\n\t"fmt"\n\t"os"\n)\n\nfunc main() {\n\tfmt.Println(os.Getenv("GOMEMLIMIT"))\n}\n',
}
HOG = {
    "java": "import java.util.*;\npublic class Main { public static void main(String[] a) {\n"
    "  List<long[]> keep = new ArrayList<>(); while (true) keep.add(new long[1 << 20]); } }\n",
    "javascript": "const keep = []; while (true) keep.push(new Array(1 << 20).fill(1.5));\n",
    "go": "package main\n\nvar keep [][]byte\n\nfunc main() {\n\tfor {\n\t\tb := make([]byte, 1<<24)\n"
    "\t\tfor i := range b {\n\t\t\tb[i] = 1\n\t\t}\n\t\tkeep = append(keep, b)\n\t}\n}\n",
}


@pytest.mark.parametrize("language", list(HEAP))
def test_managed_runtimes_start_under_the_memory_limit(backend: Backend, language: str) -> None:
    # An address-space rlimit would stop these before main(); the cgroup plus runtime flags lets them start
    # with a heap sized from the limit, and a program that outgrows it is a memory_limit, not a crash.
    limits = RunLimits(cpu_s=5.0, memory_mb=128)
    with Submission(language, HEAP[language], limits=limits, backend=backend) as submission:
        assert submission.compile().ok
        result = submission.run("")
    assert result.verdict is RunVerdict.ok, result
    if language == "go":
        assert result.stdout.strip() == f"{go_memlimit_mb(128)}MiB"
    else:
        heap = int(result.stdout)
        expected = java_heap_mb(128) if language == "java" else node_heap_mb(128)
        assert expected // 2 <= heap <= 128
    with Submission(language, HOG[language], limits=limits, backend=backend) as submission:
        assert submission.compile().ok
        hog = submission.run("")
    assert hog.verdict is RunVerdict.memory_limit, hog


def test_java_file_and_main_class() -> None:
    assert java_classes("public class Foo { public static void main(String[] a) {} }") == ("Foo", "Foo")
    assert java_classes(SUM["java"]) == ("Main", "Solution")
    text = "/* public class Nope {} */\nfinal class A {}\npublic final class B { static void main(String[] a){} }"
    assert java_classes(text) == ("B", "B")
    assert java_classes("int x;") == ("Main", "Main")


def test_language_names() -> None:
    assert get_language("C++").name == "cpp"
    assert get_language("js").name == "javascript"
    assert get_language("py").name == "python"
    with pytest.raises(KeyError, match="python, c, cpp, java, javascript, go, rust"):
        get_language("cobol")
    for language in LANGUAGES.values():
        assert all(path.startswith("/usr/bin/") for path in language.binaries), language.name
