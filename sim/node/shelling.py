"""A tiny POSIX-like shell for simulated containers: a command line in, stdout, stderr and an exit code out.

In: a :class:`Filesystem` (one container's files, shared with the other
containers of its pod for emptyDirs), a :class:`Context` (the container's own
command line and the hostfile a launcher's ``ssh`` processes follow), and the
argv of an exec (``["sh", "-c", "echo hi > /tmp/x && cat /tmp/x"]``) or of an
init container. Out: :class:`Result` — what the command printed, its exit
code and the (virtual) seconds it slept. Pure: no I/O, no clock; the caller
waits out ``Result.slept`` if it wants real time to pass.

The language (docs/sim.md, "exec"): lists with ``;``, ``&&``, ``||`` and
newlines; pipelines ``a | b``; redirections ``>``, ``>>``, ``2>``, ``2>>``,
``2>&1``, ``>&2``, ``<``; single and double quotes, backslash escapes; ``$1``..``$9``,
``$@``, ``$*``, ``$#``, ``$?``, ``$0`` and ``${N}``; comments. Commands:
``echo [-n]``, ``cat``, ``cp``, ``chmod``, ``mkdir [-p]``, ``rm [-f] [-r]``,
``test``/``[`` (``-f -e -d -s -n -z = !=``), ``true``, ``false``, ``exit``,
``sleep``, ``ls``, ``timeout``, ``sh``/``bash`` (``FILE args`` or ``-c``),
``grep [-v] [-q] [-c] [-F] [-E] PATTERN [FILE…]``, ``ps [-ef|aux]``, ``export``,
``set``, ``hostname``, ``pwd``, ``cd``. Anything else: ``sh: NAME: not found``,
exit 127.
"""

from __future__ import annotations

import dataclasses
import functools
import posixpath
import re
from collections.abc import Callable, Iterable, Sequence

MAX_SLEEP = 5.0
"""Seconds of sleep one exec may add up to; longer sleeps are cut short (an exec is an RPC, not a job)."""

MAX_DEPTH = 16
"""Nested ``sh`` invocations allowed before the shell gives up (a script that runs itself)."""

MAX_OUTPUT = 1 << 20
"""Bytes a single exec may print; more is dropped."""

ROOT_DIRS = ("/bin", "/dev", "/etc", "/home", "/root", "/tmp", "/usr/bin", "/var/log", "/var/tmp")

SSH_ATTACH = "ssh -o PasswordAuthentication=no -o StrictHostKeyChecking=no"
"""How an MPI/Horovod launcher reaches a worker: the command line of its per-host processes."""


# --------------------------------------------------------------------------
# The filesystem
# --------------------------------------------------------------------------


@dataclasses.dataclass
class File:
    data: bytes
    mode: int = 0o644


class Filesystem:
    """Files and directories by absolute path. Copy-free sharing: mounts are separate Filesystems.

    A container sees its own root plus the volumes mounted into it; ``mounts``
    maps a mount path to the (shared) Filesystem of the volume, so an emptyDir
    written by an init container is read by the main container.
    """

    def __init__(self) -> None:
        self.files: dict[str, File] = {}
        self.dirs: set[str] = {"/"}
        self.mounts: dict[str, tuple[Filesystem, str]] = {}
        """Mount path → (the volume's filesystem, the subPath inside it, "" for all of it)."""

    @classmethod
    def root(cls) -> Filesystem:
        """A container's root: the directories every image has, and /dev/null."""
        fs = cls()
        for path in ROOT_DIRS:
            fs.makedirs(path)
        fs.write("/dev/null", b"", 0o666)
        return fs

    # -- resolution: a path → (filesystem, path inside it) --

    def _locate(self, path: str) -> tuple[Filesystem, str]:
        path = normalise(path)
        best = ""
        for mount in self.mounts:
            if (path == mount or path.startswith(mount.rstrip("/") + "/")) and len(mount) > len(best):
                best = mount
        if not best:
            return self, path
        volume, sub_path = self.mounts[best]
        return volume._locate(normalise("/" + sub_path + path[len(best):]))

    def mount(self, path: str, volume: Filesystem, sub_path: str = "") -> None:
        """Mount ``volume`` (or its ``sub_path``, a directory or a file) at ``path``."""
        path = normalise(path)
        self.mounts[path] = (volume, sub_path.strip("/"))
        self.makedirs(posixpath.dirname(path))
        if sub_path and not volume.is_file(sub_path):
            volume.makedirs("/" + sub_path)

    # -- queries --

    def is_file(self, path: str) -> bool:
        fs, inner = self._locate(path)
        return inner in fs.files

    def is_dir(self, path: str) -> bool:
        path = normalise(path)
        if path in self.mounts:
            return True
        fs, inner = self._locate(path)
        return inner in fs.dirs

    def exists(self, path: str) -> bool:
        return self.is_file(path) or self.is_dir(path)

    def read(self, path: str) -> bytes:
        fs, inner = self._locate(path)
        return fs.files[inner].data

    def mode(self, path: str) -> int:
        fs, inner = self._locate(path)
        return fs.files[inner].mode if inner in fs.files else 0o755

    def listdir(self, path: str) -> list[str]:
        path = normalise(path)
        fs, inner = self._locate(path)
        prefix = inner.rstrip("/") + "/"
        names = {p[len(prefix):].split("/")[0] for p in (*fs.files, *fs.dirs) if p.startswith(prefix) and p != inner}
        names |= {m[len(path.rstrip("/")) + 1:].split("/")[0] for m in self.mounts
                  if m.startswith(path.rstrip("/") + "/")}
        return sorted(n for n in names if n)

    # -- changes --

    def makedirs(self, path: str) -> None:
        path = normalise(path)
        fs, inner = self._locate(path)
        while inner not in fs.dirs:
            fs.dirs.add(inner)
            inner = posixpath.dirname(inner)

    def write(self, path: str, data: bytes, mode: int | None = None, *, append: bool = False) -> None:
        fs, inner = self._locate(path)
        current = fs.files.get(inner)
        if current is not None:
            current.data = current.data + data if append else data
            if mode is not None:
                current.mode = mode
            return
        fs.files[inner] = File(data, 0o644 if mode is None else mode)
        fs.makedirs(posixpath.dirname(inner))

    def chmod(self, path: str, mode: int) -> None:
        fs, inner = self._locate(path)
        if inner in fs.files:
            fs.files[inner].mode = mode

    def remove(self, path: str, recursive: bool = False) -> None:
        fs, inner = self._locate(path)
        if inner in fs.files:
            del fs.files[inner]
            return
        if recursive and inner in fs.dirs:
            prefix = inner.rstrip("/") + "/"
            for name in [p for p in fs.files if p.startswith(prefix)]:
                del fs.files[name]
            fs.dirs -= {d for d in fs.dirs if d == inner or d.startswith(prefix)}
            fs.dirs.add("/")


def normalise(path: str, cwd: str = "/") -> str:
    return posixpath.normpath(posixpath.join(cwd, path)).replace("//", "/") or "/"


# --------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------

Part = tuple[str, str, bool]
"""One piece of a word: ("lit", text, quoted) or ("var", name, quoted)."""


@dataclasses.dataclass
class Word:
    parts: list[Part]


@dataclasses.dataclass
class Redirect:
    op: str
    """>, >>, 2>, 2>>, 2>&1, >&2 or <."""
    target: Word | None


@dataclasses.dataclass
class Command:
    words: list[Word]
    redirects: list[Redirect]


@dataclasses.dataclass
class Pipeline:
    commands: list[Command]


Script = list[tuple[str, Pipeline]]
"""(the operator before it — ";", "&&" or "||" — , pipeline); the first has ";"."""


class ShellSyntaxError(ValueError):
    pass


_OPERATORS = ("2>&1", "1>&2", ">&2", "&&", "||", ">>", "2>>", "2>", ";", "|", ">", "<", "\n")
_VAR = re.compile(r"\$(?:\{(\w+|[@*#?])\}|([0-9@*#?])|([A-Za-z_]\w*))")


def _tokens(text: str) -> list[Word | str]:
    """Words and operators; quotes and escapes resolved into quoted parts."""
    out: list[Word | str] = []
    i, n = 0, len(text)
    parts: list[Part] | None = None

    def end_word() -> None:
        nonlocal parts
        if parts is not None:
            out.append(Word(parts))
            parts = None

    while i < n:
        char = text[i]
        if parts is None and char == "#":
            while i < n and text[i] != "\n":
                i += 1
            continue
        if char in " \t":
            end_word()
            i += 1
            continue
        if char == "\\" and i + 1 < n and text[i + 1] == "\n":
            i += 2
            continue
        operator = next((op for op in _OPERATORS if text.startswith(op, i)), None)
        if operator is not None and not (operator.startswith("2") and parts is not None):
            end_word()
            out.append(operator)
            i += len(operator)
            continue
        if parts is None:
            parts = []
        if char == "'":
            close = text.find("'", i + 1)
            if close < 0:
                raise ShellSyntaxError("unterminated quoted string")
            parts.append(("lit", text[i + 1:close], True))
            i = close + 1
        elif char == '"':
            i += 1
            buf = ""
            while True:
                if i >= n:
                    raise ShellSyntaxError("unterminated quoted string")
                c = text[i]
                if c == '"':
                    i += 1
                    break
                if c == "\\" and i + 1 < n and text[i + 1] in '"\\$`':
                    buf += text[i + 1]
                    i += 2
                    continue
                match = _VAR.match(text, i) if c == "$" else None
                if match:
                    if buf:
                        parts.append(("lit", buf, True))
                        buf = ""
                    parts.append(("var", match[1] or match[2] or match[3], True))
                    i = match.end()
                    continue
                buf += c
                i += 1
            parts.append(("lit", buf, True))
        elif char == "\\":
            if i + 1 < n:
                parts.append(("lit", text[i + 1], True))
            i += 2
        elif char == "$" and _VAR.match(text, i):
            match = _VAR.match(text, i)
            assert match is not None
            parts.append(("var", match[1] or match[2] or match[3], False))
            i = match.end()
        else:
            parts.append(("lit", char, False))
            i += 1
    end_word()
    return out


_ASSIGNMENT = re.compile(r"[A-Za-z_]\w*=.*", re.S)


def _is_assignment(word: Word) -> bool:
    """``NAME=value`` before a command (or alone)."""
    leading = ""
    for kind, text, quoted in word.parts:
        if kind != "lit" or quoted:
            break
        leading += text
    return re.match(r"[A-Za-z_]\w*=", leading) is not None


def parse(text: str) -> Script:
    """A command line or script → its pipelines with the operators between them."""
    script: Script = []
    joiner = ";"
    commands: list[Command] = []
    words: list[Word] = []
    redirects: list[Redirect] = []
    tokens = _tokens(text)
    i = 0

    def end_command(required: bool) -> None:
        nonlocal words, redirects
        if not words and not redirects:
            if required:
                raise ShellSyntaxError("syntax error: a command is missing")
            return
        commands.append(Command(words, redirects))
        words, redirects = [], []

    while i < len(tokens):
        token = tokens[i]
        i += 1
        if isinstance(token, Word):
            words.append(token)
        elif token in (">", ">>", "2>", "2>>", "<"):
            if i >= len(tokens) or not isinstance(tokens[i], Word):
                raise ShellSyntaxError(f"syntax error near unexpected token `{token}'")
            target = tokens[i]
            assert isinstance(target, Word)
            redirects.append(Redirect(token, target))
            i += 1
        elif token in ("2>&1", "1>&2", ">&2"):
            redirects.append(Redirect(">&2" if token == "1>&2" else token, None))
        elif token == "|":
            end_command(required=True)
        else:  # ; && || newline
            if not words and not redirects and not commands:
                if token in ("&&", "||"):
                    raise ShellSyntaxError(f"syntax error near unexpected token `{token}'")
                continue  # an empty line or a stray ;
            end_command(required=bool(commands))
            script.append((joiner, Pipeline(commands)))
            commands = []
            joiner = ";" if token == "\n" else token
    end_command(required=bool(commands))
    if commands:
        script.append((joiner, Pipeline(commands)))
    elif joiner in ("&&", "||", "|"):
        raise ShellSyntaxError("syntax error: unexpected end of file")
    return script


@functools.lru_cache(maxsize=256)
def _parsed(text: str) -> Script:
    """``parse``, once per script text: every pod of a job runs the same init script, and judging it
    (``Shell.understands``) only reads the parse."""
    return parse(text)


# --------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Result:
    stdout: bytes
    stderr: bytes
    exit_code: int
    slept: float = 0.0
    """Virtual seconds the command slept (at most MAX_SLEEP)."""


@dataclasses.dataclass(frozen=True)
class Context:
    """What a container's processes look like to ``ps``."""

    command_line: str = "sh"
    """PID 1: the container's command and args."""
    hostfile: str | None = None
    """A launcher's hostfile: one attach process per host listed there (read at each ``ps``)."""
    attach: str = SSH_ATTACH
    """The command line of those processes, before the host name."""
    hostname: str = "localhost"


class _Exit(Exception):
    def __init__(self, code: int) -> None:
        self.code = code


class _Budget:
    """What one exec may still spend: sleep seconds and output bytes."""

    def __init__(self, sleep: float) -> None:
        self.sleep = sleep
        self.slept = 0.0


@dataclasses.dataclass
class _Frame:
    args: list[str]
    name: str
    status: int = 0
    env: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class _IO:
    stdin: bytes
    out: bytearray
    err: bytearray


class Shell:
    """Runs commands against one container's filesystem; ``run(argv)`` → Result."""

    def __init__(self, fs: Filesystem, context: Context = Context()) -> None:
        self.fs = fs
        self.context = context
        self.cwd = "/"
        self._commands: dict[str, Callable[[list[str], _IO, _Frame, _Budget, int], int]] = {
            "echo": self._echo, "printf": self._printf, "cat": self._cat, "cp": self._cp, "chmod": self._chmod, "mkdir": self._mkdir,
            "rm": self._rm, "test": self._test, "[": self._bracket, "true": lambda *_: 0, "false": lambda *_: 1,
            ":": lambda *_: 0, "exit": self._exit, "sleep": self._sleep, "ls": self._ls, "timeout": self._timeout,
            "sh": self._sh, "bash": self._sh, "grep": self._grep, "ps": self._ps, "export": self._export,
            "set": lambda *_: 0, "hostname": self._hostname, "pwd": self._pwd, "cd": self._cd,
        }
        self._running: list[str] = []
        """Command lines of the exec in progress (for ps: the shell, the pipeline's members)."""

    def understands(self, argv: Sequence[str]) -> bool:
        """Whether every command ``argv`` runs is one this shell simulates: the program
        itself, and for ``sh -c SCRIPT`` each command word of the script (a ``for`` loop,
        ``nslookup`` … are not). Words built from variables are not judged."""
        if not argv:
            return False
        args = list(argv)
        if args[0] in ("sh", "bash"):
            rest = [a for a in args[1:] if a not in ("-e", "-x", "-ex", "-xe", "-l")]
            if len(rest) >= 2 and rest[0] == "-c":
                try:
                    script = _parsed(rest[1])
                except ShellSyntaxError:
                    return False
                for _, pipeline in script:
                    for command in pipeline.commands:
                        words = [w for w in command.words if not _is_assignment(w)]
                        if not words or any(kind != "lit" for kind, _, _ in words[0].parts):
                            continue
                        name = "".join(text for _, text, _ in words[0].parts)
                        if posixpath.basename(name) not in self._commands:
                            return False
                return True
        return posixpath.basename(args[0]) in self._commands

    def run(self, argv: Sequence[str], stdin: bytes = b"", max_sleep: float = MAX_SLEEP) -> Result:
        """Run one exec's argv (``["sh", "-c", "…"]``, ``["cat", "/etc/x"]`` …)."""
        budget = _Budget(max_sleep)
        io = _IO(stdin, bytearray(), bytearray())
        self._running = [" ".join(argv)]
        frame = _Frame(list(argv[1:]), argv[0] if argv else "sh")
        try:
            code = self._call(list(argv), io, frame, budget, 0)
        except _Exit as exc:
            code = exc.code
        return Result(bytes(io.out[:MAX_OUTPUT]), bytes(io.err[:MAX_OUTPUT]), code, budget.slept)

    # -- evaluation --

    def _run_script(self, text: str, io: _IO, frame: _Frame, budget: _Budget, depth: int) -> int:
        try:
            script = parse(text)
        except ShellSyntaxError as exc:
            io.err += f"sh: {exc}\n".encode()
            return 2
        status = 0
        for joiner, pipeline in script:
            if joiner == "&&" and status != 0:
                continue
            if joiner == "||" and status == 0:
                continue
            status = self._pipeline(pipeline, io, frame, budget, depth)
            frame.status = status
        return status

    def _pipeline(self, pipeline: Pipeline, io: _IO, frame: _Frame, budget: _Budget, depth: int) -> int:
        stdin = io.stdin
        status = 0
        expanded = [self._expand(c.words, frame) for c in pipeline.commands]
        saved = list(self._running)
        self._running += [" ".join(argv) for argv in expanded if argv]
        try:
            for index, (command, argv) in enumerate(zip(pipeline.commands, expanded)):
                last = index == len(pipeline.commands) - 1
                inner = _IO(stdin, bytearray(), io.err if last else bytearray())
                status = self._command(command, argv, inner, frame, budget, depth)
                if last:
                    io.out += inner.out
                else:
                    io.err += inner.err
                    stdin = bytes(inner.out)
        finally:
            self._running = saved
        return status

    def _expand(self, words: list[Word], frame: _Frame) -> list[str]:
        """Words → fields: variables substituted, unquoted ones split on whitespace, "$@" one field per arg."""
        fields: list[str] = []
        for word in words:
            current: str | None = None
            for kind, text, quoted in word.parts:
                if kind == "lit":
                    current = (current or "") + text
                elif text == "@" and quoted:
                    if frame.args:
                        current = (current or "") + frame.args[0]
                        for arg in frame.args[1:]:
                            fields.append(current)
                            current = arg
                elif quoted:
                    current = (current or "") + self._variable(text, frame)
                else:
                    value = self._variable(text, frame)
                    pieces = value.split()
                    if not pieces:
                        continue
                    if value[0].isspace() and current is not None:
                        fields.append(current)
                        current = None
                    current = (current or "") + pieces[0]
                    for piece in pieces[1:]:
                        fields.append(current)
                        current = piece
                    if value[-1].isspace():
                        fields.append(current)
                        current = None
            if current is not None:
                fields.append(current)
        return fields

    def _variable(self, name: str, frame: _Frame) -> str:
        if name.isdigit():
            index = int(name)
            if index == 0:
                return frame.name
            return frame.args[index - 1] if index <= len(frame.args) else ""
        if name in ("@", "*"):
            return " ".join(frame.args)
        if name == "#":
            return str(len(frame.args))
        if name == "?":
            return str(frame.status)
        if name == "HOSTNAME":
            return frame.env.get(name, self.context.hostname)
        return frame.env.get(name, "")

    def _command(self, command: Command, argv: list[str], io: _IO, frame: _Frame, budget: _Budget,
                 depth: int) -> int:
        out, err = io.out, io.err
        targets: list[tuple[str, bool, bool]] = []  # (path, append, stderr)
        to_stdout = to_stderr = False
        for redirect in command.redirects:
            if redirect.op == "2>&1":
                to_stdout = True
                continue
            if redirect.op == ">&2":
                to_stderr = True
                continue
            words = self._expand([redirect.target], frame) if redirect.target else []
            if len(words) != 1:
                io.err += b"sh: ambiguous redirect\n"
                return 1
            path = normalise(words[0], self.cwd)
            if redirect.op == "<":
                if not self.fs.is_file(path):
                    io.err += f"sh: can't open {words[0]}: no such file\n".encode()
                    return 1
                io.stdin = self.fs.read(path)
                continue
            if self.fs.is_dir(path):
                io.err += f"sh: can't create {words[0]}: Is a directory\n".encode()
                return 1
            if not self.fs.is_dir(posixpath.dirname(path)):
                io.err += f"sh: can't create {words[0]}: nonexistent directory\n".encode()
                return 1
            append = redirect.op in (">>", "2>>")
            if not append and path != "/dev/null":
                self.fs.write(path, b"")
            targets.append((path, append, redirect.op.startswith("2")))
        inner = _IO(io.stdin, bytearray(), bytearray())
        try:
            status = self._call(argv, inner, frame, budget, depth) if argv else 0
        finally:
            stdout_target = next((t for t in reversed(targets) if not t[2]), None)
            stderr_target = next((t for t in reversed(targets) if t[2]), None)
            if to_stderr and stdout_target is None:
                err += inner.out
                inner.out = bytearray()
            if to_stdout and stderr_target is None:
                if stdout_target is not None:
                    stderr_target = stdout_target
                else:
                    out += inner.err
                    inner.err = bytearray()
            for target, data, sink in ((stdout_target, inner.out, out), (stderr_target, inner.err, err)):
                if target is None:
                    sink += data
                elif target[0] != "/dev/null":
                    self.fs.write(target[0], bytes(data), append=True)
        return status

    def _call(self, argv: list[str], io: _IO, frame: _Frame, budget: _Budget, depth: int) -> int:
        name = argv[0]
        if "=" in name and not name.startswith("=") and _ASSIGNMENT.fullmatch(name):
            key, _, value = name.partition("=")
            frame.env[key] = value
            return self._call(argv[1:], io, frame, budget, depth) if len(argv) > 1 else 0
        handler = self._commands.get(posixpath.basename(name) if name.startswith("/bin/") or name.startswith(
            "/usr/bin/") else name)
        if handler is None:
            path = normalise(name, self.cwd)
            if "/" in name and self.fs.is_file(path):
                return self._script_file(path, argv[1:], name, io, budget, depth)
            io.err += f"sh: {name}: not found\n".encode()
            return 127
        return handler(argv[1:], io, frame, budget, depth)

    def _script_file(self, path: str, args: list[str], name: str, io: _IO, budget: _Budget, depth: int) -> int:
        if depth >= MAX_DEPTH:
            io.err += b"sh: too many nested shells\n"
            return 2
        text = self.fs.read(path).decode(errors="replace")
        try:
            return self._run_script(text, io, _Frame(args, name), budget, depth + 1)
        except _Exit as exc:
            return exc.code

    # -- commands --

    def _echo(self, args: list[str], io: _IO, *_: object) -> int:
        newline = True
        while args and args[0] in ("-n", "-e", "-ne", "-en", "-E"):
            if "n" in args[0]:
                newline = False
            args = args[1:]
        io.out += (" ".join(args) + ("\n" if newline else "")).encode()
        return 0

    def _printf(self, args: list[str], io: _IO, *_: object) -> int:
        if not args:
            io.err += b"printf: usage: printf FORMAT [ARGUMENT]...\n"
            return 2
        form, values = args[0], list(args[1:])
        while True:
            index = 0

            def substitute(match: re.Match[str]) -> str:
                nonlocal index
                if match[0] == "%%":
                    return "%"
                value = values[index] if index < len(values) else ""
                index += 1
                return value
            text = re.sub(r"%%|%[-0-9.]*[sdbq]", substitute, form)
            io.out += _escapes(text).encode()
            values = values[index:]
            if not values or index == 0:
                return 0

    def _cat(self, args: list[str], io: _IO, *_: object) -> int:
        files = [a for a in args if a != "-" and not (a.startswith("-") and len(a) > 1)]
        if not files:
            io.out += io.stdin
            return 0
        status = 0
        for name in files:
            path = normalise(name, self.cwd)
            if self.fs.is_file(path):
                io.out += self.fs.read(path)
            elif self.fs.is_dir(path):
                io.err += f"cat: {name}: Is a directory\n".encode()
                status = 1
            else:
                io.err += f"cat: {name}: No such file or directory\n".encode()
                status = 1
        return status

    def _cp(self, args: list[str], io: _IO, *_: object) -> int:
        names = [a for a in args if not a.startswith("-")]
        if len(names) < 2:
            io.err += b"cp: missing destination file operand\n"
            return 1
        *sources, target = names
        target_path = normalise(target, self.cwd)
        if len(sources) > 1 and not self.fs.is_dir(target_path):
            io.err += f"cp: target '{target}' is not a directory\n".encode()
            return 1
        status = 0
        for source in sources:
            path = normalise(source, self.cwd)
            if not self.fs.is_file(path):
                what = "-r not specified; omitting directory" if self.fs.is_dir(path) else "No such file or directory"
                io.err += f"cp: cannot stat '{source}': {what}\n".encode()
                status = 1
                continue
            destination = posixpath.join(target_path, posixpath.basename(path)) if self.fs.is_dir(target_path) \
                else target_path
            if not self.fs.is_dir(posixpath.dirname(destination)):
                io.err += f"cp: cannot create regular file '{target}': No such file or directory\n".encode()
                status = 1
                continue
            self.fs.write(destination, self.fs.read(path), self.fs.mode(path) if not self.fs.is_file(destination)
                          else None)
        return status

    def _chmod(self, args: list[str], io: _IO, *_: object) -> int:
        args = [a for a in args if a not in ("-R", "-f")]
        if len(args) < 2:
            io.err += b"chmod: missing operand\n"
            return 1
        spec, *names = args
        status = 0
        for name in names:
            path = normalise(name, self.cwd)
            if not self.fs.exists(path):
                io.err += f"chmod: cannot access '{name}': No such file or directory\n".encode()
                status = 1
                continue
            mode = _mode(spec, self.fs.mode(path))
            if mode is None:
                io.err += f"chmod: invalid mode: '{spec}'\n".encode()
                return 1
            self.fs.chmod(path, mode)
        return status

    def _mkdir(self, args: list[str], io: _IO, *_: object) -> int:
        parents = any(a.startswith("-") and "p" in a for a in args)
        status = 0
        for name in (a for a in args if not a.startswith("-")):
            path = normalise(name, self.cwd)
            if parents:
                self.fs.makedirs(path)
            elif self.fs.exists(path):
                io.err += f"mkdir: can't create directory '{name}': File exists\n".encode()
                status = 1
            elif not self.fs.is_dir(posixpath.dirname(path)):
                io.err += f"mkdir: can't create directory '{name}': No such file or directory\n".encode()
                status = 1
            else:
                self.fs.makedirs(path)
        return status

    def _rm(self, args: list[str], io: _IO, *_: object) -> int:
        flags = "".join(a[1:] for a in args if a.startswith("-"))
        status = 0
        for name in (a for a in args if not a.startswith("-")):
            path = normalise(name, self.cwd)
            if self.fs.is_dir(path) and "r" not in flags and "R" not in flags:
                io.err += f"rm: '{name}' is a directory\n".encode()
                status = 1
            elif not self.fs.exists(path):
                if "f" not in flags:
                    io.err += f"rm: can't remove '{name}': No such file or directory\n".encode()
                    status = 1
            else:
                self.fs.remove(path, recursive=True)
        return status

    def _test(self, args: list[str], io: _IO, *_: object) -> int:
        negate = False
        if args and args[0] == "!":
            negate, args = True, args[1:]
        result: bool
        if not args:
            result = False
        elif len(args) == 1:
            result = args[0] != ""
        elif len(args) == 2:
            op, operand = args
            path = normalise(operand, self.cwd)
            checks: dict[str, Callable[[], bool]] = {
                "-f": lambda: self.fs.is_file(path), "-e": lambda: self.fs.exists(path),
                "-d": lambda: self.fs.is_dir(path), "-r": lambda: self.fs.exists(path),
                "-s": lambda: self.fs.is_file(path) and bool(self.fs.read(path)),
                "-x": lambda: self.fs.is_file(path) and bool(self.fs.mode(path) & 0o111),
                "-n": lambda: operand != "", "-z": lambda: operand == "",
            }
            if op not in checks:
                io.err += f"sh: test: {op}: unknown operand\n".encode()
                return 2
            result = checks[op]()
        elif len(args) == 3 and args[1] in ("=", "==", "!=", "-eq", "-ne", "-lt", "-gt", "-le", "-ge"):
            left, op, right = args
            if op in ("=", "=="):
                result = left == right
            elif op == "!=":
                result = left != right
            else:
                try:
                    a, b = int(left), int(right)
                except ValueError:
                    io.err += b"sh: test: bad number\n"
                    return 2
                result = {"-eq": a == b, "-ne": a != b, "-lt": a < b, "-gt": a > b, "-le": a <= b, "-ge": a >= b}[op]
        else:
            io.err += b"sh: test: too many arguments\n"
            return 2
        return 0 if result != negate else 1

    def _bracket(self, args: list[str], io: _IO, *rest: object) -> int:
        if not args or args[-1] != "]":
            io.err += b"sh: [: missing ]\n"
            return 2
        return self._test(args[:-1], io)

    def _exit(self, args: list[str], io: _IO, frame: _Frame, *_: object) -> int:
        try:
            code = int(args[0]) if args else frame.status
        except ValueError:
            io.err += f"sh: exit: Illegal number: {args[0]}\n".encode()
            code = 2
        raise _Exit(code & 0xFF)

    def _sleep(self, args: list[str], io: _IO, frame: _Frame, budget: _Budget, *_: object) -> int:
        if not args:
            io.err += b"sleep: missing operand\n"
            return 1
        seconds = _seconds(args[0])
        if seconds is None:
            io.err += f"sleep: invalid number '{args[0]}'\n".encode()
            return 1
        spent = min(seconds, max(0.0, budget.sleep - budget.slept))
        budget.slept += spent
        return 0

    def _ls(self, args: list[str], io: _IO, *_: object) -> int:
        names = [a for a in args if not a.startswith("-")] or ["."]
        status = 0
        for name in names:
            path = normalise(name, self.cwd)
            if self.fs.is_file(path):
                io.out += (name + "\n").encode()
            elif self.fs.is_dir(path):
                io.out += "".join(f"{entry}\n" for entry in self.fs.listdir(path)).encode()
            else:
                io.err += f"ls: {name}: No such file or directory\n".encode()
                status = 2
        return status

    def _timeout(self, args: list[str], io: _IO, frame: _Frame, budget: _Budget, depth: int) -> int:
        while args and args[0].startswith("-"):
            args = args[2:] if args[0] in ("-s", "-k", "--signal", "--kill-after") else args[1:]
        if len(args) < 2:
            io.err += b"timeout: missing operand\n"
            return 125
        limit = _seconds(args[0])
        if limit is None:
            io.err += f"timeout: invalid time interval '{args[0]}'\n".encode()
            return 125
        wanted = _Budget(float("inf"))
        try:
            status = self._call(args[1:], io, _Frame(frame.args, frame.name, frame.status, frame.env), wanted, depth)
        except _Exit as exc:
            status = exc.code
        cap = limit if limit > 0 else float("inf")
        budget.slept += min(wanted.slept, cap, max(0.0, budget.sleep - budget.slept))
        if limit > 0 and wanted.slept > limit:
            return 124
        return status

    def _sh(self, args: list[str], io: _IO, frame: _Frame, budget: _Budget, depth: int) -> int:
        if depth >= MAX_DEPTH:
            io.err += b"sh: too many nested shells\n"
            return 2
        while args and args[0] in ("-e", "-x", "-ex", "-xe", "-l"):
            args = args[1:]
        if args and args[0] == "-c":
            if len(args) < 2:
                io.err += b"sh: -c: option requires an argument\n"
                return 2
            name = args[2] if len(args) > 2 else "sh"
            try:
                return self._run_script(args[1], io, _Frame(args[3:], name, env=dict(frame.env)), budget, depth + 1)
            except _Exit as exc:
                return exc.code
        if not args:
            try:
                return self._run_script(io.stdin.decode(errors="replace"), io, _Frame([], "sh"), budget, depth + 1)
            except _Exit as exc:
                return exc.code
        path = normalise(args[0], self.cwd)
        if not self.fs.is_file(path):
            io.err += f"sh: 0: cannot open {args[0]}: No such file\n".encode()
            return 2
        return self._script_file(path, args[1:], args[0], io, budget, depth)

    def _grep(self, args: list[str], io: _IO, *_: object) -> int:
        flags = ""
        rest: list[str] = []
        for arg in args:
            if arg.startswith("-") and len(arg) > 1 and not rest:
                flags += arg[1:]
            else:
                rest.append(arg)
        if not rest:
            io.err += b"Usage: grep [OPTION]... PATTERNS [FILE]...\n"
            return 2
        pattern, *files = rest
        try:
            regex = re.compile(re.escape(pattern) if "F" in flags else _posix_regex(pattern, "E" in flags),
                               re.IGNORECASE if "i" in flags else 0)
        except re.error:
            io.err += b"grep: Invalid regular expression\n"
            return 2
        sources: list[tuple[str, bytes]] = []
        status_missing = False
        for name in files or ["-"]:
            if name == "-":
                sources.append((name, io.stdin))
                continue
            path = normalise(name, self.cwd)
            if not self.fs.is_file(path):
                io.err += f"grep: {name}: No such file or directory\n".encode()
                status_missing = True
                continue
            sources.append((name, self.fs.read(path)))
        matched = 0
        for name, data in sources:
            for line in data.decode(errors="replace").splitlines():
                if (regex.search(line) is not None) != ("v" in flags):
                    matched += 1
                    if "q" not in flags and "c" not in flags:
                        prefix = f"{name}:" if len(files) > 1 else ""
                        io.out += f"{prefix}{line}\n".encode()
        if "c" in flags:
            io.out += f"{matched}\n".encode()
        if status_missing and "s" not in flags:
            return 2
        return 0 if matched else 1

    def _ps(self, args: list[str], io: _IO, *_: object) -> int:
        lines = [(1, 0, self.context.command_line)]
        pid = 7
        if self.context.hostfile and self.fs.is_file(self.context.hostfile):
            for host in hosts(self.fs.read(self.context.hostfile).decode(errors="replace")):
                lines.append((pid, 1, f"{self.context.attach} {host}"))
                pid += 1
        pid = max(pid, 100)
        for command_line in self._running:
            lines.append((pid, 0, command_line))
            pid += 1
        io.out += b"UID          PID    PPID  C STIME TTY          TIME CMD\n"
        for number, parent, command_line in lines:
            io.out += f"root    {number:>8} {parent:>7}  0 00:00 ?        00:00:00 {command_line}\n".encode()
        return 0

    def _export(self, args: list[str], io: _IO, frame: _Frame, *_: object) -> int:
        for arg in args:
            key, sep, value = arg.partition("=")
            if sep:
                frame.env[key] = value
        return 0

    def _hostname(self, args: list[str], io: _IO, *_: object) -> int:
        io.out += (self.context.hostname + "\n").encode()
        return 0

    def _pwd(self, args: list[str], io: _IO, *_: object) -> int:
        io.out += (self.cwd + "\n").encode()
        return 0

    def _cd(self, args: list[str], io: _IO, *_: object) -> int:
        path = normalise(args[0] if args else "/", self.cwd)
        if not self.fs.is_dir(path):
            io.err += f"sh: cd: can't cd to {args[0]}: No such file or directory\n".encode()
            return 2
        self.cwd = path
        return 0


def hosts(hostfile: str) -> list[str]:
    """The hosts of an MPI/Horovod hostfile: ``host:slots``, ``host slots=N`` or ``host`` per line."""
    found: list[str] = []
    for line in hostfile.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            found.append(line.split()[0].split(":")[0])
    return found


def _escapes(text: str) -> str:
    """printf's backslash escapes."""
    table = {"n": "\n", "t": "\t", "\\": "\\", "r": "\r", "0": "\0", "a": "\a"}
    return re.sub(r"\\(.)", lambda m: table.get(m[1], "\\" + m[1]), text)


def _seconds(text: str) -> float | None:
    match = re.fullmatch(r"(\d+(?:\.\d*)?|\.\d+)([smhd]?)", text)
    if match is None:
        return None
    return float(match[1]) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[match[2]]


def _mode(spec: str, current: int) -> int | None:
    if re.fullmatch(r"[0-7]{1,4}", spec):
        return int(spec, 8)
    result = current
    for clause in spec.split(","):
        match = re.fullmatch(r"([ugoa]*)([-+=])([rwx]*)", clause)
        if match is None:
            return None
        who = match[1] or "a"
        bits = sum({"r": 4, "w": 2, "x": 1}[c] for c in match[3])
        mask = sum(bits << shift for c, shift in (("u", 6), ("g", 3), ("o", 0)) if c in who or "a" in who)
        if match[2] == "+":
            result |= mask
        elif match[2] == "-":
            result &= ~mask
        else:
            clear = sum(7 << shift for c, shift in (("u", 6), ("g", 3), ("o", 0)) if c in who or "a" in who)
            result = (result & ~clear) | mask
    return result


def _posix_regex(pattern: str, extended: bool) -> str:
    """A grep pattern as a Python regex: basic (``\\|``, ``\\+`` are operators) or extended."""
    if extended:
        return pattern
    out = ""
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            out += nxt if nxt in "|+?(){}" else "\\" + nxt
            i += 2
            continue
        out += "\\" + char if char in "|+?(){}" else char
        i += 1
    return out


def command_line(container: dict[str, object]) -> str:
    """A container's PID 1 as ps shows it: command and args, or ``sh`` when the image decides."""
    parts: Iterable[object] = [*(container.get("command") or []), *(container.get("args") or [])]  # type: ignore[misc]
    text = " ".join(str(p) for p in parts)
    return text or "sh"
