"""Setup-step variables: which values a step sets are secret (the one rule: `access exec` masks
them, every display path prints them as `[recall:ENTRY:NAME]`), a step as it is shown, and a command
line as it is stored (`scrub_inline`: the same names hidden)."""
from __future__ import annotations

import functools
import os
import re

# Variable names that hold a secret: whole words between underscores, so PATH, PWD, AUTHOR stay clear.
_SECRET_WORDS = {"TOKEN", "TOKENS", "PASSWORD", "PASSWORDS", "PASSWD", "PASS", "PAT", "APIKEY", "AUTH",
                 "CREDENTIAL", "CREDENTIALS"}
_SECRET_PAIRS = {("API", "KEY"), ("API", "KEYS"), ("ACCESS", "KEY"), ("ACCESS", "KEYS"),
                 ("PRIVATE", "KEY"), ("PRIVATE", "KEYS")}
_SECRET_NAMES = {"SSHPASS", "MYSQL_PWD"}     # well-known names the word rule cannot see
_ASSIGNMENT = re.compile(r"""(?<![\w$])([A-Za-z_][A-Za-z0-9_]*)=("(?:[^"\\]|\\.)*"|'[^']*'|\$\([^)]*\)|[^\s;&|]+)""")


def sensitive_name(name: str) -> bool:
    """Does a variable name look like it holds a secret (`GITHUB_TOKEN`, `API_KEY`, `X_SECRET_V2` …)?"""
    upper = name.upper()
    if "SECRET" in upper or upper in _SECRET_NAMES:
        return True
    words = [w for w in upper.split("_") if w]
    return (any(w in _SECRET_WORDS or w.endswith(("TOKEN", "PASSWORD", "APIKEY")) for w in words)
            or any(pair in _SECRET_PAIRS for pair in zip(words, words[1:])))


def _reference(value: str) -> bool:
    """`$VAR`, `"$VAR"`, `$(cmd)`: not a literal."""
    return value[0] != "'" and value.strip('"').startswith("$")


def hide_values(step: str) -> str:
    """A step as shown to people and agents: `export GITHUB_TOKEN=[hidden]`; `$VAR` / `$(cmd)` stay."""
    def hide(m):
        name, value = m.group(1), m.group(2)
        return f"{name}=[hidden]" if sensitive_name(name) and not _reference(value) else m.group(0)
    return _ASSIGNMENT.sub(hide, step)


# Names whose values are not secrets (secret_setting)
CLEAR_NAMES = {"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM", "TMPDIR",
               "EDITOR", "PAGER", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_DEFAULT_PROFILE",
               "AWS_PAGER", "AWS_SDK_LOAD_CONFIG", "KUBECONFIG", "CLOUDSDK_CORE_PROJECT",
               "GOOGLE_CLOUD_PROJECT", "AZURE_DEFAULTS_GROUP", "AZURE_DEFAULTS_LOCATION", "REGION"}
CLEAR_SUFFIXES = ("_CONTEXT", "_REGION", "_ZONE", "_NAMESPACE", "_PROFILE")
_NUMBER = re.compile(r"[+-]?\d+(\.\d+)?")
_DQ_ESCAPE = re.compile(r'\\([\\"$`])')


def secret_setting(name: str, value: str) -> bool:
    """Is what a setup step sets in `name` a secret (the one rule access exec masks by and every display path
    shows by)? Harmless names, paths and numbers are not; a value too short to mask only if its name says so."""
    from .mask import MIN_SECRET_LEN
    if name in CLEAR_NAMES or name.endswith(CLEAR_SUFFIXES) or name.startswith("LC_"):
        return False
    if _NUMBER.fullmatch(value) or _is_path(value):
        return False
    return len(value) >= MIN_SECRET_LEN or sensitive_name(name)


def _is_path(value: str) -> bool:
    """'/opt/x', '~/.kube/ops', '/a:/b' — each part under a top folder that exists here (so a base64
    token that happens to start with '/' is not taken for a path)."""
    for part in value.split(":"):
        if not re.fullmatch(r"~?/[\w.@+/-]*", part) or "//" in part:
            return False
        if not part.startswith("~") and not os.path.isdir("/" + part[1:].split("/", 1)[0]):
            return False
    return True


def show_step(entry_id: str, step: str) -> str:
    """A step as every display path prints it: each literal access exec would mask becomes
    `NAME=[recall:ENTRY:NAME]`, the label exec's output carries; references and harmless values stay."""
    def hide(m):
        name, value = m.group(1), m.group(2)
        if _reference(value):
            return m.group(0)
        if m.start() and step[m.start() - 1] == "-":          # an option (--token=…), not a variable
            return f"{name}=[hidden]" if sensitive_name(name) else m.group(0)
        literal = value[1:-1] if value[0] == "'" else _DQ_ESCAPE.sub(r"\1", value[1:-1]) if value[0] == '"' else value
        return f"{name}=[recall:{entry_id}:{name}]" if secret_setting(name, literal) else m.group(0)
    return _ASSIGNMENT.sub(hide, step)


@functools.cache
def _inline_patterns() -> list:
    value = r"""(?!['"]?\$)(?:'[^']*'|"[^"]*"|[^\s;&|'"]+)"""
    return [
        (re.compile(r"(://[^/\s:@]+:)[^/\s@]+@"), r"\1[hidden]@"),
        (re.compile(r"(?i)((?:authorization|proxy-authorization):\s*(?:bearer|basic|token)\s+)(?!\$)[^\s'\"]+"),
         r"\1[hidden]"),
        (re.compile(r"(?i)((?:x-api-key|private-token|x-auth-token):\s*)(?!\$)[^\s'\"]+"), r"\1[hidden]"),
        (re.compile(rf"(?i)(--(?:password|passwd|token|api-key|secret)[= ]){value}"), r"\1[hidden]"),
    ]


def scrub_inline(text: str) -> str:
    """A command line as it may be stored (access log, verify results): a literal token written inline —
    `X_TOKEN=abc` (any name `sensitive_name` says holds a secret), `https://u:pw@host`, `Bearer abc`,
    `--password abc` — becomes [hidden]; `$VAR` stays."""
    if not text:
        return text
    text = hide_values(text)
    for pattern, replacement in _inline_patterns():
        text = pattern.sub(replacement, text)
    return text
