"""The library layer both faces call: one function per CLI verb and MCP tool. Each opens the config
and DB itself, wires the vault, inventory and remotes in, and returns an Answer — its JSON shape
(`to_dict()`), its text, its notices and exit code — every string already through the one door
(vault/door.py). The faces (cli/, mcp_server.py) import nothing else of recall but `errors`."""
from __future__ import annotations

import importlib

_NOTES = ("init", "index", "watch", "watcher", "search", "read", "read_header", "follow", "stop_following",
          "evaluate")
_SECRETS = ("secret_sync", "secret_set", "secret_key_backup", "secret_find", "secret_show", "secret_command",
            "secret_exec", "secret_get", "secret_log", "secret_restore", "secret_rotate_key")
_SYSTEMS = ("access_find", "access_show", "access_exec", "verify", "remote_install", "instructions", "doctor",
            "agent_rules", "as_caller", "stopping", "stop_runs")
# where each name lives: a verb imports its own concern only (`secret exec` never loads notes search)
_HOME = {"MODES": "..notes.query", "with_config": "..config", "Answer": ".answer", "error_text": ".answer", "scrub": ".answer",
         "scrub_typed": ".answer",
         **dict.fromkeys(_NOTES, ".notes"), **dict.fromkeys(_SECRETS, ".secrets"),
         **dict.fromkeys(_SYSTEMS, ".systems")}
__all__ = list(_HOME)


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOME[name], __name__), name)
    globals()[name] = value
    return value
