"""The persistent interpreter of `tool.math_python_persistent`: runs inside the jail as `python3 -I repl.py`.

Standard library only (the jail's python3 runs this file as a script; nothing from Proctor is importable
there). The host sends length-prefixed JSON frames on stdin, `{"op": "run", "code": str, "max_bytes": int}`
or `{"op": "exit"}`; each `run` executes the code in one namespace kept for the whole session (like a notebook:
the value of a last bare expression is printed) and answers `{"output": str, "error": bool, "truncated":
bool}` on a private duplicate of stdout. While a cell runs, file descriptors 1 and 2 point at a capture file,
so what the code (or a child process) prints never reaches the frame channel by accident.

The code runs in this process, so it can do anything this process can: it may forge or garble replies. The
host therefore trusts nothing here but the frames' shape; a reply that breaks the protocol after code ran is
the program's failure (an observation), and CPU time, memory and wall time are measured and enforced from the
outside (the jail's cgroup and the host's clock).
"""

import ast
import json
import os
import struct
import sys
import traceback

HEADER = struct.Struct(">I")


def read_frame(stream):
    head = stream.read(HEADER.size)
    if len(head) < HEADER.size:
        return None
    (size,) = HEADER.unpack(head)
    body = stream.read(size)
    return json.loads(body)


def write_frame(fd, message):
    body = json.dumps(message, separators=(",", ":")).encode()
    data = HEADER.pack(len(body)) + body
    while data:
        data = data[os.write(fd, data) :]


def run_cell(code, namespace):
    tree = ast.parse(code, "<cell>", "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    exec(compile(tree, "<cell>", "exec"), namespace)
    if last is not None:
        value = eval(compile(last, "<cell>", "eval"), namespace)
        if value is not None:
            print(repr(value))


def print_cell_error(exc):
    """The traceback from the cell's own frames on (this file's frames are not the model's business)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != "<cell>":
        tb = tb.tb_next
    sys.stderr.write("".join(traceback.format_exception(type(exc), exc, tb)))


def main():
    frames_out = os.dup(1)
    requests = sys.stdin.buffer
    capture_path = os.path.join(os.environ.get("TMPDIR", "/tmp"), ".repl_output")
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    write_frame(frames_out, {"ready": True})
    while True:
        request = read_frame(requests)
        if request is None or request.get("op") == "exit":
            return
        max_bytes = int(request.get("max_bytes", 65536))
        capture = os.open(capture_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        saved = os.dup(1), os.dup(2)
        os.dup2(capture, 1)
        os.dup2(capture, 2)
        error = False
        try:
            run_cell(request.get("code", ""), namespace)
        except BaseException as exc:  # the cell's failure is its output; the interpreter goes on
            error = True
            print_cell_error(exc)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
        size = os.lseek(capture, 0, os.SEEK_END)
        os.lseek(capture, 0, os.SEEK_SET)
        data = os.read(capture, max_bytes) if max_bytes > 0 else b""
        os.close(capture)
        output = data.decode("utf-8", "replace")
        write_frame(frames_out, {"output": output, "error": error, "truncated": size > len(data)})


if __name__ == "__main__":
    main()
