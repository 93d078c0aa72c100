"""A fork server for the CLI and worker processes the tests (and the bench, when the tests
run it: bench/common.py) start: each is still a process
of its own -- its own pid, environment, working directory, descriptors, exit status and
signals, killed with SIGKILL as a real one is -- but forked from a Python that has
imported archiver and its heavy libraries once, instead of a fresh interpreter importing
them again (most of a short command's CPU, for each of the suite's processes).

What a fresh `python -m archiver` has that a fork does not, and what is done about it:
- variables read as an interpreter or a C library starts (PYTHON*, ARROW_*, MALLOC_*,
  GLIBC_TUNABLES, LD_*, TZ, the locale's): a process asked for with any of them other
  than the server's is started the ordinary way (`start_time`);
- caches of the environment: tempfile's directory is forgotten in the child;
- threads: the server refuses to start if importing left one it does not know to be
  fork-safe (jemalloc's, which re-arms itself after a fork), and the child runs
  `threading._shutdown` and the atexit handlers before it exits, as an interpreter does;
- the hash seed is the server's in every child (no test depends on set order across
  processes).
The installed entry point and a fresh interpreter's imports are tested apart
(tests/integration/test_wheel.py, tests/unit/test_imports.py). ARCHIVER_TEST_FORKSERVER=0 starts
every process the ordinary way.

The server is `python -m archiver.testing.forkserver SOCKET`, one per process that asks
(a pytest process, a bench run), gone when that process is (its stdin closes)."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path
from typing import IO, Any

START_TIME_PREFIXES = ("PYTHON", "ARROW_", "MALLOC_", "GLIBC_", "LD_", "LC_")
START_TIME_NAMES = {"TZ", "LANG", "LANGUAGE"}
SAFE_THREADS = {"jemalloc_bg_thd"}  # pyarrow's allocator's; jemalloc handles fork itself
HEADER = struct.Struct("!I")
ROOT = Path(__file__).resolve().parents[2]  # the checkout


def start_time(env: dict[str, str]) -> dict[str, str]:
    """The variables of `env` a process reads only as it starts."""
    return {
        k: v for k, v in env.items() if k.startswith(START_TIME_PREFIXES) or k in START_TIME_NAMES
    }


# -- the server ---------------------------------------------------------------------


def _preload() -> None:
    """What nearly every archiver process imports, in the order `archiver.cli.main` and a
    bulk connection import it (the allocator settings before pyarrow loads; adbc without
    polars)."""
    from archiver import memory

    memory.settle()
    import asyncpg  # noqa: F401
    import azure.storage.blob  # noqa: F401
    import pyarrow.parquet  # noqa: F401

    import archiver.cli
    import archiver.kinds.registry
    import archiver.worker
    from archiver import bulk

    with bulk._absent("polars"):
        import adbc_driver_postgresql.dbapi  # noqa: F401

    import platform

    # what a process publishing to Iceberg imports (pyiceberg, pydantic, SQLAlchemy): more
    # CPU than the rest of this together, in every such process of a run
    import archiver.iceberg.catalog
    import archiver.iceberg.publish

    platform.platform()  # cached: azure-core's user agent asks it, and it runs `uname -p`

    del archiver


def _threads() -> list[str]:
    """The names of this process's threads but its main one and the known fork-safe."""
    tasks = Path("/proc/self/task")
    others = [t for t in os.listdir(tasks) if t != str(os.getpid())]
    names = [(tasks / t / "comm").read_text().strip() for t in others]
    return [n for n in names if n not in SAFE_THREADS]


def _child(request: dict[str, Any], fds: list[int], closing: list[socket.socket]) -> None:
    """In the forked child: become `python -m archiver ARGS` (its descriptors 0-2 the
    request's, no other open, as subprocess's close_fds leaves them); never returns."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for s in closing:
            s.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None
        main = ROOT / "archiver" / "__main__.py"
        sys.argv = [str(main), *request["args"]]
        code = _run()
    finally:
        os._exit(code)


def _run() -> int:
    import runpy

    code: Any = 0
    try:
        runpy.run_module("archiver", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code
    except KeyboardInterrupt:
        traceback.print_exc()
        _finish()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)  # as Python exits on an uncaught one
    except BaseException:
        traceback.print_exc()
        code = 1
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    _finish()
    return int(code) & 0xFF


def _finish() -> None:
    """What an interpreter does as it exits: wait for its threads, run the atexit
    handlers, flush its streams."""
    try:
        threading._shutdown()  # type: ignore[attr-defined]
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()


def _receive(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
    (size,) = HEADER.unpack_from(data)
    data = data[HEADER.size :]
    while len(data) < size:
        more = conn.recv(size - len(data))
        if not more:
            raise EOFError("the client went away mid-request")
        data += more
    return json.loads(data), list(fds)


def serve(path: str) -> None:
    _preload()
    if unknown := _threads():
        sys.exit(f"forkserver: importing left threads a fork would lose: {unknown}")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: dict[int, socket.socket] = {}
    print("ready", flush=True)
    while True:
        readable, _, _ = select.select([listener, wake_r, sys.stdin], [], [])
        if sys.stdin in readable and not os.read(sys.stdin.fileno(), 1):
            for pid in children:  # the pytest process is gone: so is everything it started
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            return
        if wake_r in readable:
            os.read(wake_r, 512)
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            conn = children.pop(pid)
            with contextlib.suppress(OSError):
                conn.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
            conn.close()
        if listener in readable:
            conn, _ = listener.accept()
            try:
                request, fds = _receive(conn)
            except (OSError, EOFError, ValueError):
                conn.close()
                continue
            sys.stdout.flush()
            pid = os.fork()
            if pid == 0:
                _child(request, fds, [listener, conn, *children.values()])
            for fd in fds:
                os.close(fd)
            children[pid] = conn
            conn.sendall(f"pid {pid}\n".encode())


# -- the client ---------------------------------------------------------------------


class Forked:
    """A process the server forked, as much of `subprocess.Popen` as the tests use."""

    def __init__(self, args: list[str], conn: socket.socket) -> None:
        self.args = args
        self.returncode: int | None = None
        self._conn = conn
        self._said = b""
        said = self._line(None)
        assert said is not None and said.startswith("pid "), said
        self.pid = int(said.split()[1])

    def _line(self, timeout: float | None) -> str | None:
        """The server's next line about this process; None if none came in `timeout`."""
        while b"\n" not in self._said:
            ready, _, _ = select.select([self._conn], [], [], timeout)
            if not ready:
                return None
            more = self._conn.recv(256)
            if not more:  # the server died, and its children with it
                raise RuntimeError(f"forkserver: lost {self.args}")
            self._said += more
        line, self._said = self._said.split(b"\n", 1)
        return line.decode()

    def _collect(self, timeout: float | None) -> int | None:
        if self.returncode is None and (line := self._line(timeout)) is not None:
            kind, code = line.split()
            assert kind == "exit", kind
            self.returncode = int(code)
            self._conn.close()
        return self.returncode

    def poll(self) -> int | None:
        return self._collect(0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._collect(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Server:
    """This pytest process's fork server, started on first use."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[str] | None = None
        self._env: dict[str, str] = {}
        self._path = ""
        self._lock = threading.Lock()

    def _started(self) -> str:
        with self._lock:
            if self._proc is None:
                folder = tempfile.mkdtemp(prefix="archiver-forkserver-")
                atexit.register(shutil.rmtree, folder, True)
                self._path = os.path.join(folder, "socket")
                self._env = dict(os.environ)
                self._proc = subprocess.Popen(
                    [sys.executable, "-m", "archiver.testing.forkserver", self._path],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                    cwd=ROOT,
                )
                atexit.register(self._stop)
                assert self._proc.stdout is not None
                said = self._proc.stdout.readline().strip()
                if said != "ready":
                    raise RuntimeError(
                        f"the tests' fork server did not start (exit {self._proc.wait()}): "
                        "see its stderr above; ARCHIVER_TEST_FORKSERVER=0 runs without it"
                    )
            return self._path

    def _stop(self) -> None:
        """As this process exits: the server's stdin closed (it ends, and kills what it
        still runs), then waited for."""
        proc = self._proc
        if proc is None:
            return
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)

    def serves(self, args: list[str], env: dict[str, str]) -> bool:
        """Whether the process `args` asks for can be forked from the server."""
        if os.environ.get("ARCHIVER_TEST_FORKSERVER", "1") == "0":
            return False
        if args[:3] != [sys.executable, "-m", "archiver"]:
            return False
        self._started()
        return start_time(env) == start_time(self._env)

    def start(
        self, args: list[str], env: dict[str, str], cwd: Path, stdout: int, stderr: int
    ) -> Forked:
        """`args` forked, its stdin /dev/null, its stdout and stderr these descriptors."""
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(self._started())
        body = json.dumps({"args": args[3:], "env": env, "cwd": str(cwd)}).encode()
        stdin = os.open(os.devnull, os.O_RDONLY)
        try:
            socket.send_fds(conn, [HEADER.pack(len(body)) + body], [stdin, stdout, stderr])
        finally:
            os.close(stdin)
        return Forked(args, conn)

    def run(
        self, args: list[str], env: dict[str, str], cwd: Path, timeout: float | None
    ) -> subprocess.CompletedProcess[str]:
        """`args` forked and run to its end, its output captured as `subprocess.run`
        with `capture_output=True, text=True` captures it."""
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            proc = self.start(args, env, cwd, out.fileno(), err.fileno())
            try:
                code = proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise
            return subprocess.CompletedProcess(args, code, _text(out), _text(err))


def _text(file: IO[bytes]) -> str:
    """What a process wrote to `file`, as `text=True` reads it (universal newlines)."""
    file.seek(0)
    return file.read().decode().replace("\r\n", "\n").replace("\r", "\n")


Process = subprocess.Popen[Any] | Forked  # a process started: forked, or not
SERVER = Server()


def start(
    args: list[str], env: dict[str, str], cwd: Path, stdout: int, stderr: int, *, fork: bool = True
) -> Process:
    """`args` started, its stdout and stderr these descriptors: forked where the server
    serves it (and `fork`), else a process of its own."""
    if fork and SERVER.serves(args, env):
        return SERVER.start(args, env, cwd, stdout, stderr)
    return subprocess.Popen(args, env=env, cwd=cwd, stdout=stdout, stderr=stderr)


def run(
    args: list[str],
    env: dict[str, str],
    cwd: Path,
    timeout: float | None = None,
    *,
    fork: bool = True,
) -> subprocess.CompletedProcess[str]:
    """`args` run to its end, its output captured as text: forked where the server serves
    it (and `fork`), else a process of its own."""
    if fork and SERVER.serves(args, env):
        return SERVER.run(args, env, cwd, timeout)
    return subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


if __name__ == "__main__":
    serve(sys.argv[1])
