"""A real sshd on 127.0.0.1 for end-to-end tests: keys made in a temp dir, stopped by PID."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import wait_for_port

SSHD = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)


@dataclass
class Sshd:
    port: int
    dir: Path
    key: Path            # the client's private key
    client_config: Path  # an ssh -F file: Host 'testbox' → this server
    pid: int

    def ssh(self, *remote):
        return ["ssh", "-F", str(self.client_config), "testbox", *remote]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_sshd(root: Path, *, accept_env: str = "", env: dict | None = None) -> Sshd:
    """sshd for the current user; its sessions get HOME = this test's sandboxed $HOME (never the real
    home from the password database) plus any `env` (e.g. a PATH with a stand-in python3 first)."""
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o700)
    for name in ("host", "client"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(root / name)], check=True)
    auth = root / "authorized_keys"
    shutil.copy(root / "client.pub", auth)
    os.chmod(auth, 0o600)
    port = _free_port()
    session_env = {"HOME": os.environ["HOME"], **(env or {})}
    user = os.environ.get("USER") or __import__("pwd").getpwuid(os.getuid()).pw_name
    (root / "sshd_config").write_text(f"""\
Port {port}
ListenAddress 127.0.0.1
HostKey {root / 'host'}
PidFile {root / 'sshd.pid'}
AuthorizedKeysFile {auth}
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
AllowUsers {user}
{f'AcceptEnv {accept_env}' if accept_env else ''}
SetEnv {' '.join(f'"{k}={v}"' for k, v in session_env.items())}
""")
    known = root / "known_hosts"
    known.write_text(f"[127.0.0.1]:{port} " + (root / "host.pub").read_text().split(" ", 2)[0] + " "
                     + (root / "host.pub").read_text().split(" ", 2)[1] + "\n")
    client = root / "ssh_config"
    client.write_text(f"""\
Host testbox
  HostName 127.0.0.1
  Port {port}
  User {user}
  IdentityFile {root / 'client'}
  IdentitiesOnly yes
  UserKnownHostsFile {known}
  StrictHostKeyChecking yes
  BatchMode yes
  ConnectTimeout 5
""")
    os.makedirs("/run/sshd", exist_ok=True)
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(root / "sshd_config")],
                            stdout=subprocess.DEVNULL, stderr=open(root / "sshd.log", "wb"))
    try:
        wait_for_port(port, proc, timeout=10)
    except RuntimeError:
        raise RuntimeError("sshd did not start: " + (root / "sshd.log").read_text()) from None
    return Sshd(port=port, dir=root, key=root / "client", client_config=client, pid=proc.pid)


def stop_sshd(server: Sshd) -> None:
    try:
        os.kill(server.pid, signal.SIGTERM)
        os.waitpid(server.pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass
