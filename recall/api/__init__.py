"""The library layer both faces call: one function per CLI verb and MCP tool. Each opens the config
and DB itself, wires the vault, inventory and remotes in, and returns an Answer — its JSON shape
(`to_dict()`), its text, its notices and exit code — every string already through the one door
(vault/door.py). The faces (cli/, mcp_server.py) import nothing else of recall but `errors`."""
from __future__ import annotations

from ..notes.query import MODES
from .answer import Answer, error_text, scrub
from .notes import evaluate, follow, index, init, read, read_header, search, stop_following, watch, watcher
from .secrets import (
    secret_command,
    secret_exec,
    secret_find,
    secret_get,
    secret_key_backup,
    secret_log,
    secret_restore,
    secret_rotate_key,
    secret_set,
    secret_show,
    secret_sync,
)
from .systems import (
    access_exec,
    access_find,
    access_show,
    agent_rules,
    as_caller,
    doctor,
    instructions,
    remote_install,
    verify,
)

__all__ = ["MODES", "Answer", "error_text", "scrub", "init", "index", "watch", "watcher", "search", "read", "read_header", "follow", "stop_following",
           "evaluate", "secret_sync", "secret_set", "secret_key_backup", "secret_find", "secret_show",
           "secret_command", "secret_exec", "secret_get", "secret_log", "secret_restore", "secret_rotate_key",
           "access_find", "access_show", "access_exec", "verify", "remote_install", "instructions", "doctor",
           "agent_rules", "as_caller"]
