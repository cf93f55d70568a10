"""Run a real ZooKeeper (Debian's `zookeeper` package) as a child process: standalone or a local ensemble.

Tests, the demo and developers start ZooKeeper the same way: a zoo.cfg under a data directory, the
server on a loopback port, readiness checked with the `srvr` four-letter word (it reports a `Mode:`
only once the node serves; `ruok` says imok even without a quorum), SIGTERM to stop.

    python -m pipeline.zk.server --data-dir var/zookeeper --port 2181
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from pipeline.service import stop_on_signals, write_owner_only

JAR_DIR = Path("/usr/share/java")
SERVER_MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"
QUORUM_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
# ZooKeeper ignores an autopurge.snapRetainCount below 3.
MIN_SNAPSHOTS_KEPT = 3


class ZooKeeperError(RuntimeError):
    """ZooKeeper is not installed, did not start, or did not become ready in time."""


def classpath() -> str:
    """The server's classpath from Debian's jars (slf4j-simple so that it logs to stderr)."""
    jar = JAR_DIR / "zookeeper.jar"
    if not jar.exists():
        raise ZooKeeperError(f"{jar} not found: install Debian's zookeeper package (`make setup` does)")
    parts = [jar]
    simple = JAR_DIR / "slf4j-simple.jar"
    if simple.exists():
        parts.append(simple)
    return ":".join(map(str, parts))


_HANDED_OUT: set[int] = set()
_HANDED_OUT_LOCK = threading.Lock()


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS finds free on ``host`` now, never one this process was given before (the OS may offer a
    just-released port again, and the server that asked for the first one may not have bound it yet)."""
    with _HANDED_OUT_LOCK:
        for _ in range(100):
            with socket.socket() as sock:
                sock.bind((host, 0))
                port = sock.getsockname()[1]
            if port not in _HANDED_OUT:
                _HANDED_OUT.add(port)
                return port
    raise RuntimeError(f"the OS kept offering ports this process was given before on {host}")


def four_letter_word(host: str, port: int, word: str, timeout: float = 1.0) -> str:
    """Send a four-letter command (srvr, stat, mntr, ...) and return the answer ("" when unreachable)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(word.encode())
            chunks = []
            while True:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                chunks.append(chunk)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


class ZooKeeperServer:
    """One ZooKeeper server process with its own data directory, on a loopback port."""

    def __init__(self, data_dir: str | Path, port: int | None = None, *, host: str = "127.0.0.1",
                 tick_ms: int = 2000, server_id: int | None = None, peers: list[tuple[int, int, int]] | None = None,
                 heap_mb: int = 256, session_timeout_range_ms: tuple[int, int] | None = None,
                 autopurge: tuple[int, int] | None = None) -> None:
        """``session_timeout_range_ms``: ZooKeeper's minSessionTimeout and maxSessionTimeout (default: 2 and 20
        ticks); a short tick with a wide range expires sessions close to their timeout without bounding them.
        ``autopurge``: (snapshots kept, purge interval in hours), ZooKeeper's autopurge.snapRetainCount and
        autopurge.purgeInterval: older snapshots and transaction logs are deleted (default: kept forever)."""
        self.data_dir = Path(data_dir)
        self.host = host
        self.port = port if port is not None else free_port(host)
        self.tick_ms = tick_ms
        self.server_id = server_id
        # (server id, peer port, election port) of every ensemble member, this one included.
        self.peers = peers
        self.heap_mb = heap_mb
        self.session_timeout_range_ms = session_timeout_range_ms
        if autopurge is not None and (autopurge[0] < MIN_SNAPSHOTS_KEPT or autopurge[1] < 1):
            raise ValueError(f"autopurge keeps at least {MIN_SNAPSHOTS_KEPT} snapshots and runs every 1 or more "
                             f"hours, not {autopurge}")
        self.autopurge = autopurge
        self.process: subprocess.Popen | None = None
        self.log_path = self.data_dir / "zookeeper.log"

    @property
    def connect_string(self) -> str:
        return f"{self.host}:{self.port}"

    def _write_config(self) -> Path:
        data = self.data_dir / "data"
        data.mkdir(parents=True, exist_ok=True)
        lines = [
            f"tickTime={self.tick_ms}",
            f"dataDir={data}",
            f"clientPort={self.port}",
            f"clientPortAddress={self.host}",
            "maxClientCnxns=0",
            "4lw.commands.whitelist=ruok,srvr,stat,mntr,conf",
            "admin.enableServer=false",
        ]
        if self.session_timeout_range_ms is not None:
            low, high = self.session_timeout_range_ms
            lines += [f"minSessionTimeout={low}", f"maxSessionTimeout={high}"]
        if self.autopurge is not None:
            kept, hours = self.autopurge
            lines += [f"autopurge.snapRetainCount={kept}", f"autopurge.purgeInterval={hours}"]
        if self.peers:
            lines += ["initLimit=10", "syncLimit=5"]
            lines += [f"server.{sid}={self.host}:{peer}:{election}" for sid, peer, election in self.peers]
            (data / "myid").write_text(f"{self.server_id}\n")
        config = self.data_dir / "zoo.cfg"
        config.write_text("\n".join(lines) + "\n")
        return config

    def command(self) -> list[str]:
        """The Java command line of this server (its zoo.cfg written first)."""
        config = self._write_config()
        main = QUORUM_MAIN if self.peers else SERVER_MAIN
        return ["java", f"-Xmx{self.heap_mb}m", "-cp", classpath(), main, str(config)]

    def start(self, wait: bool = True, timeout: float = 30.0) -> "ZooKeeperServer":
        if self.process is not None and self.process.poll() is None:
            return self
        command = self.command()
        log = open(self.log_path, "ab")
        try:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True)
        except FileNotFoundError:
            raise ZooKeeperError("java not found: install Debian's zookeeper package (it brings a JRE)") from None
        finally:
            log.close()
        if wait:
            self.wait_ready(timeout)
        return self

    def mode(self) -> str | None:
        """standalone, leader or follower once the server serves clients; None before."""
        for line in four_letter_word(self.host, self.port, "srvr").splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return None

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise ZooKeeperError(f"ZooKeeper on port {self.port} exited with {self.process.returncode}: "
                                     f"{self.log_tail()}")
            if self.mode() is not None:
                return
            time.sleep(0.05)
        raise ZooKeeperError(f"ZooKeeper on port {self.port} not ready after {timeout:.0f}s: {self.log_tail()}")

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM and wait; SIGKILL if it does not exit in time."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.process = None

    def __enter__(self) -> "ZooKeeperServer":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class ZooKeeperEnsemble:
    """A local ensemble of ``size`` ZooKeeper servers on loopback ports (a quorum needs a majority)."""

    def __init__(self, base_dir: str | Path, size: int = 3, *, tick_ms: int = 500) -> None:
        ports = [(free_port(), free_port(), free_port()) for _ in range(size)]
        peers = [(i + 1, peer, election) for i, (_, peer, election) in enumerate(ports)]
        self.servers = [
            ZooKeeperServer(Path(base_dir) / f"zk{i + 1}", client, tick_ms=tick_ms, server_id=i + 1, peers=peers)
            for i, (client, _, _) in enumerate(ports)
        ]

    @property
    def connect_string(self) -> str:
        return ",".join(s.connect_string for s in self.servers)

    def start(self, timeout: float = 60.0) -> "ZooKeeperEnsemble":
        for server in self.servers:
            server.start(wait=False)
        for server in self.servers:
            server.wait_ready(timeout)
        return self

    def find_leader(self) -> ZooKeeperServer | None:
        """The running server that is leader now, or None (e.g. during an election)."""
        for server in self.servers:
            if server.running and server.mode() == "leader":
                return server
        return None

    def leader(self) -> ZooKeeperServer:
        leader = self.find_leader()
        if leader is None:
            raise ZooKeeperError("the ensemble has no leader")
        return leader

    def stop(self) -> None:
        for server in self.servers:
            server.stop()

    def __enter__(self) -> "ZooKeeperEnsemble":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def parse_peers(text: str) -> list[tuple[int, int, int]]:
    """``ID:PEER_PORT:ELECTION_PORT,...`` (every member of the ensemble, this one included)."""
    peers = []
    for item in text.split(","):
        parts = item.strip().split(":")
        if len(parts) != 3 or not all(part.isascii() and part.isdigit() for part in parts):
            raise argparse.ArgumentTypeError(f"{item!r} is not ID:PEER_PORT:ELECTION_PORT")
        server_id, peer, election = map(int, parts)
        peers.append((server_id, peer, election))
    return peers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.zk.server",
                                     description="Run a ZooKeeper server (standalone, or one member of an ensemble "
                                                 "with --server-id and --peers) in the foreground until SIGTERM or "
                                                 "Ctrl-C.")
    parser.add_argument("--data-dir", required=True, type=Path)
    parser.add_argument("--port", type=int, default=2181)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--tick-ms", type=int, default=2000)
    parser.add_argument("--heap-mb", type=int, default=256)
    parser.add_argument("--server-id", type=int, help="this member's id in --peers")
    parser.add_argument("--peers", type=parse_peers, metavar="ID:PEER_PORT:ELECTION_PORT,...",
                        help="every member of the ensemble (on --host), this one included")
    parser.add_argument("--snapshots-kept", type=int, metavar="N",
                        help=f"autopurge: keep the newest N (>= {MIN_SNAPSHOTS_KEPT}) snapshots and the transaction "
                             "logs they need, delete the rest every --purge-interval-hours (default: keep all)")
    parser.add_argument("--purge-interval-hours", type=int, default=1, metavar="H",
                        help="how often autopurge runs (default 1)")
    parser.add_argument("--exec", action="store_true", dest="exec_java",
                        help="replace this process by the Java server (for a supervisor: its signals then reach "
                             "ZooKeeper itself); the log goes to standard output")
    args = parser.parse_args(argv)
    write_owner_only()
    if (args.server_id is None) != (args.peers is None):
        parser.error("--server-id and --peers go together")
    if args.peers is not None and args.server_id not in {peer[0] for peer in args.peers}:
        parser.error(f"--server-id {args.server_id} is not among --peers")
    autopurge = None if args.snapshots_kept is None else (args.snapshots_kept, args.purge_interval_hours)
    try:
        server = ZooKeeperServer(args.data_dir, args.port, host=args.host, tick_ms=args.tick_ms,
                                 server_id=args.server_id, peers=args.peers, heap_mb=args.heap_mb, autopurge=autopurge)
    except ValueError as exc:
        parser.error(str(exc))
    if args.exec_java:
        try:
            command = server.command()
        except ZooKeeperError as exc:
            print(f"zookeeper: {exc}", file=sys.stderr)
            return 1
        sys.stdout.flush()
        try:
            os.execvp(command[0], command)
        except OSError as exc:
            print(f"zookeeper: cannot run java: {exc}", file=sys.stderr)
            return 1
    stop = stop_on_signals()
    try:
        server.start()
    except ZooKeeperError as exc:
        print(f"zookeeper: {exc}", file=sys.stderr)
        server.stop()
        return 1
    print(f"ZooKeeper serving on {server.connect_string} (data in {args.data_dir}, log {server.log_path})",
          file=sys.stderr, flush=True)
    while not stop.is_set() and server.running:
        try:
            server.process.wait(1.0)
        except subprocess.TimeoutExpired:
            continue
    server.stop()
    return 0 if stop.is_set() else 1


if __name__ == "__main__":
    sys.exit(main())
