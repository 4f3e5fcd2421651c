"""The dev kit's Redis: Debian's ``redis-server`` on 127.0.0.1, the Celery executor's broker.

Nothing is persisted (a broker of queued task messages for one test or demo). It asks for a
password, kept in its configuration file (mode 0600), never on its command line.
"""

from __future__ import annotations

import shutil
import socket
from dataclasses import dataclass, field

from onceflow_devkit.services.process import ManagedProcess, ServiceError, pick_port, write_private

DEFAULT_PORT = 56379
PASSWORD = "onceflow-redis-secret"  # the embedded stack's; never a production credential
INSTALL_HINT = "install Debian's package (apt-get install redis-server)"


@dataclass(frozen=True)
class RedisServer:
    host: str
    port: int
    password: str = field(default=PASSWORD, repr=False)

    def url(self, db: int = 0) -> str:
        """The server as a Celery broker URL: it holds the password."""
        return f"redis://:{self.password}@{self.host}:{self.port}/{db}"

    def ping(self) -> bool:
        with socket.create_connection((self.host, self.port), timeout=2) as conn:
            conn.sendall(f"AUTH {self.password}\r\nPING\r\n".encode())
            answer = b""
            while answer.count(b"\r\n") < 2:
                chunk = conn.recv(64)
                if not chunk:
                    return False
                answer += chunk
            return answer == b"+OK\r\n+PONG\r\n"


def _quoted(value: str) -> str:
    """``value`` as one argument of redis.conf, whatever spaces or quotes it holds."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def start_redis(proc: ManagedProcess, die_with_parent: bool = False, port: int | None = None) -> RedisServer:
    """A Redis server in ``proc``'s directory, on 127.0.0.1."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise ServiceError(f"redis-server was not found: {INSTALL_HINT}")
    port = port or pick_port(DEFAULT_PORT)
    server = RedisServer("127.0.0.1", port)
    proc.directory.mkdir(parents=True, exist_ok=True)
    config = proc.directory / "redis.conf"
    write_private(config, f'bind 127.0.0.1\nport {port}\nrequirepass {_quoted(server.password)}\nsave ""\nappendonly no\n'
                  f"dir {_quoted(str(proc.data_dir))}\ndaemonize no\nprotected-mode yes\n"
                  # Redis writes its process title over its environment, where ManagedProcess finds its marker.
                  "set-proc-title no\n")
    proc.start([binary, str(config)], port=port, ready=server.ping, timeout=30, die_with_parent=die_with_parent)
    return server
