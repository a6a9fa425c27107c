"""The simulated containers' shell (sim/node/shelling.py): what a command prints and how it exits."""

from __future__ import annotations

import pytest

from sim.node import shelling

ATTACH = shelling.SSH_ATTACH


def _shell(files: dict[str, str] | None = None, hostfile: str | None = None) -> shelling.Shell:
    fs = shelling.Filesystem.root()
    for path, text in (files or {}).items():
        fs.write(path, text.encode())
    return shelling.Shell(fs, shelling.Context(command_line="sleep 365d", hostfile=hostfile, hostname="launcher"))


def _run(script: str, files: dict[str, str] | None = None, hostfile: str | None = None) -> shelling.Result:
    return _shell(files, hostfile).run(["sh", "-c", script])


@pytest.mark.parametrize(("script", "stdout", "stderr", "code"), [
    pytest.param("echo hi", "hi\n", "", 0, id="echo"),
    pytest.param("echo -n hi", "hi", "", 0, id="echo-n"),
    pytest.param("echo 'a  b' \"c  d\"   e", "a  b c  d e\n", "", 0, id="quotes-keep-spaces"),
    pytest.param("echo 'it''s' \"\\\"q\\\"\"", "its \"q\"\n", "", 0, id="adjacent-quotes-and-escapes"),
    pytest.param("echo hi > /tmp/x && cat /tmp/x", "hi\n", "", 0, id="redirect-then-cat"),
    pytest.param("echo a > /tmp/x; echo b >> /tmp/x; cat /tmp/x", "a\nb\n", "", 0, id="append"),
    pytest.param("false && echo no; echo yes", "yes\n", "", 0, id="and-skips-after-failure"),
    pytest.param("false || echo rescued", "rescued\n", "", 0, id="or"),
    pytest.param("true && false", "", "", 1, id="status-of-last"),
    pytest.param("exit 3", "", "", 3, id="exit"),
    pytest.param("echo before; exit 4; echo after", "before\n", "", 4, id="exit-stops-the-script"),
    pytest.param("nosuch arg", "", "sh: nosuch: not found\n", 127, id="unknown-command"),
    pytest.param("cat /nope", "", "cat: /nope: No such file or directory\n", 1, id="cat-missing"),
    pytest.param("echo out; echo err >&2", "out\n", "err\n", 0, id="to-stderr"),
    pytest.param("cat /nope 2>&1", "cat: /nope: No such file or directory\n", "", 1, id="stderr-to-stdout"),
    pytest.param("cat /nope 2>/dev/null; echo $?", "1\n", "", 0, id="status-variable"),
    pytest.param("printf '%s:%s\\n' a 1 b 2", "a:1\nb:2\n", "", 0, id="printf-repeats-format"),
    pytest.param("mkdir /a/b", "", "mkdir: can't create directory '/a/b': No such file or directory\n", 1,
                 id="mkdir-without-p"),
    pytest.param("mkdir -p /a/b && echo x > /a/b/f && ls /a /a/b", "b\nf\n", "", 0, id="mkdir-p"),
    pytest.param("rm /nope", "", "rm: can't remove '/nope': No such file or directory\n", 1, id="rm-missing"),
    pytest.param("rm -f /nope", "", "", 0, id="rm-f-missing"),
    pytest.param("echo x > /tmp/f && rm /tmp/f && test -e /tmp/f", "", "", 1, id="rm"),
    pytest.param("test -e /dev/null && test -d /etc && [ ! -e /nope ] && echo ok", "ok\n", "", 0, id="test"),
    pytest.param("[ a = a ] && [ 1 -lt 2 ] && echo ok", "ok\n", "", 0, id="bracket-compare"),
    pytest.param("echo x > /nodir/f", "", "sh: can't create /nodir/f: nonexistent directory\n", 1,
                 id="redirect-into-missing-dir"),
    pytest.param("printf 'a\\nb\\nab\\n' | grep a", "a\nab\n", "", 0, id="pipe-grep"),
    pytest.param("printf 'a\\nb\\n' | grep -v a", "b\n", "", 0, id="grep-v"),
    pytest.param("printf 'a\\nb\\n' | grep -c .", "2\n", "", 0, id="grep-c"),
    pytest.param("echo a | grep z", "", "", 1, id="grep-no-match"),
    pytest.param("sleep 2 && echo woke", "woke\n", "", 0, id="sleep"),
    pytest.param("timeout 1 sleep 3; echo $?", "124\n", "", 0, id="timeout-expires"),
    pytest.param("timeout 5 sh -c 'echo in; exit 2'", "in\n", "", 2, id="timeout-passes-status"),
    pytest.param("sh -c 'echo $0 $1 $#' name one", "name one 1\n", "", 0, id="sh-c-args"),
    pytest.param("X=1; export Y=2; echo $X$Y", "12\n", "", 0, id="variables"),
    pytest.param("hostname", "launcher\n", "", 0, id="hostname"),
    pytest.param("echo 'unterminated", "", "sh: unterminated quoted string\n", 2, id="syntax-error"),
    pytest.param("&& echo", "", "sh: syntax error near unexpected token `&&'\n", 2, id="leading-and"),
    pytest.param("# a comment\necho one # trailing\n\necho two", "one\ntwo\n", "", 0, id="comments-and-lines"),
])
def test_a_command_prints_and_exits_as_sh_does(script: str, stdout: str, stderr: str, code: int) -> None:
    result = _run(script)
    assert (result.stdout.decode(), result.stderr.decode(), result.exit_code) == (stdout, stderr, code)


def test_sleep_is_virtual_and_bounded() -> None:
    assert _run("sleep 2; sleep 1").slept == 3.0
    assert _run("sleep 3600").slept == shelling.MAX_SLEEP
    assert _run("timeout 1 sleep 30").slept == 1.0


@pytest.mark.parametrize(("argv", "stdout", "code"), [
    pytest.param(["cat", "/etc/mpi/hostfile"], "w-0:1\nw-1:1\n", 0, id="argv-without-a-shell"),
    pytest.param(["sh", "/opt/scale.sh", "w-0:1,w-1:1"], "scaling to w-0:1,w-1:1 (1 args)\n", 0, id="sh-script-args"),
    pytest.param(["sh", "-c", "timeout 10 sh /opt/scale.sh a:1,b:1 extra"], "scaling to a:1,b:1 (2 args)\n", 0,
                 id="scaler-script-under-timeout"),
    pytest.param(["sh", "/opt/fail.sh"], "", 5, id="script-exit"),
    pytest.param(["sh", "/opt/none.sh"], "", 2, id="script-missing"),
    pytest.param(["sh", "-c", "sh /opt/all.sh x 'y z'"], "[x] [y z] x y z\n", 0, id="dollar-at-quoted-and-star"),
])
def test_scripts_run_from_the_filesystem_with_their_arguments(argv: list[str], stdout: str, code: int) -> None:
    shell = _shell({
        "/etc/mpi/hostfile": "w-0:1\nw-1:1\n",
        "/opt/scale.sh": "#!/bin/sh\necho scaling to $1 \"($# args)\"\n",
        "/opt/fail.sh": "exit 5\necho not reached\n",
        "/opt/all.sh": 'printf "[%s] " "$@"; echo $*\n',
    })
    result = shell.run(argv)
    assert (result.stdout.decode(), result.exit_code) == (stdout, code), result.stderr


def test_et_operator_launcher_commands() -> None:
    """The init container's copy, a hostfile rewrite by exec, then the scale-in probe sees one worker gone."""
    shell = _shell({"/etc/mpi/hostfile": "w-0:1\nw-1:1\nw-2:1\n"}, hostfile="/etc/edl/hostfile")
    init = shell.run(["sh", "-c", "mkdir -p /etc/edl && cp /etc/mpi/hostfile /etc/edl/hostfile && "
                                  "chmod 600 /etc/edl/hostfile"])
    assert init.exit_code == 0 and shell.fs.mode("/etc/edl/hostfile") == 0o600
    probe = ["sh", "-c", f"ps -ef | grep '{ATTACH}'"]
    before = shell.run(probe).stdout.decode()
    assert [f"{ATTACH} w-{i}" in before for i in range(3)] == [True, True, True]
    rewrite = shell.run(["sh", "-c", "echo 'w-0:1\nw-1:1\n' > /etc/edl/hostfile"])
    assert rewrite.exit_code == 0
    assert shell.run(["cat", "/etc/edl/hostfile"]).stdout == b"w-0:1\nw-1:1\n\n"
    after = shell.run(probe).stdout.decode()
    assert [f"{ATTACH} w-{i}" in after for i in range(3)] == [True, True, False]
    assert f"grep {ATTACH}" in after, "ps lists the grep of its own pipeline, as on a real host"
    lines = shell.run(["ps", "-ef"]).stdout.decode().splitlines()
    assert lines[0].split() == ["UID", "PID", "PPID", "C", "STIME", "TTY", "TIME", "CMD"]
    assert lines[1].split()[1] == "1" and lines[1].endswith("sleep 365d")


def test_mounted_volumes_are_shared_and_sub_paths_pick_one_file() -> None:
    volume = shelling.Filesystem()
    volume.write("/hostfile", b"a:1\n")
    first, second = shelling.Filesystem.root(), shelling.Filesystem.root()
    first.mount("/etc/edl", volume)
    second.mount("/etc/hostfile", volume, "hostfile")
    assert shelling.Shell(first).run(["sh", "-c", "echo b:1 >> /etc/edl/hostfile"]).exit_code == 0
    assert shelling.Shell(second).run(["cat", "/etc/hostfile"]).stdout == b"a:1\nb:1\n"
    assert shelling.Shell(second).run(["ls", "/etc/edl"]).exit_code == 2


@pytest.mark.parametrize(("text", "hosts"), [
    pytest.param("w-0:2\nw-1:2\n", ["w-0", "w-1"], id="horovod"),
    pytest.param("w-0 slots=8\n# comment\n\nw-1 slots=8\n", ["w-0", "w-1"], id="openmpi"),
])
def test_hostfile_hosts(text: str, hosts: list[str]) -> None:
    assert shelling.hosts(text) == hosts


@pytest.mark.parametrize(("spec", "before", "after"), [
    pytest.param("600", 0o644, 0o600, id="octal"),
    pytest.param("+x", 0o644, 0o755, id="plus-x"),
    pytest.param("go-r", 0o644, 0o600, id="minus"),
    pytest.param("u=rwx", 0o644, 0o744, id="equals"),
])
def test_chmod_keeps_the_mode(spec: str, before: int, after: int) -> None:
    shell = _shell()
    shell.fs.write("/f", b"", before)
    assert shell.run(["chmod", spec, "/f"]).exit_code == 0
    assert shell.fs.mode("/f") == after


@pytest.mark.parametrize(("argv", "understood"), [
    pytest.param(["sh", "-c", "cp /a /b && chmod 600 /b"], True, id="cp-and-chmod"),
    pytest.param(["sh", "-c", "X=1 echo $X; A=2"], True, id="assignments"),
    pytest.param(["/bin/cat", "/x"], True, id="a-path-to-a-known-program"),
    pytest.param(["sh", "-c", "err=1;for i in $(seq 3); do if nslookup m; then err=0; fi; done; exit $err"], False,
                 id="a-dns-wait-loop"),
    pytest.param(["nslookup", "x"], False, id="an-unknown-program"),
    pytest.param(["sh", "-c", "echo 'unterminated"], False, id="a-syntax-error"),
])
def test_the_shell_says_whether_it_simulates_a_command(argv: list[str], understood: bool) -> None:
    assert shelling.Shell(shelling.Filesystem()).understands(argv) is understood
