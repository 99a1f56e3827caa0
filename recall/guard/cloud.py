"""The guard's allow-lists for aws, az, gcloud, sudo, true and tcp: each one's exact read-only argv shapes and rule ids."""
from __future__ import annotations

import re

from .parse import _Deny, _deny_map, _Flags, _is_host, _only, _options, _parse, _port_ok, _positionals

CLOUD_RULES: dict = {
    "aws.sts": "allow: aws sts get-caller-identity [--profile X] [--region X] [--output json|text|table] "
               "[--query Q] [--no-cli-pager] [--cli-connect-timeout N]",
    "aws.s3-ls": "allow: aws s3 ls [s3://BUCKET[/PREFIX]] with the same options",
    "az.account-show": "allow: az account show [--subscription X] [--query Q] [--output|-o json|tsv|table]",
    "gcloud.list": "allow: gcloud auth list, config list, GROUP list|describe under read-only groups "
                   "(projects, compute instances …) with --project --format --filter --limit",
    "sudo.k": "allow: sudo -k true, exactly",
    "sudo.n": "allow: sudo -n true, exactly",
    "sudo.v": "allow: sudo -v, exactly",
    "true.run": "allow: true, alone",
    "tcp.connect": "allow: tcp HOST:PORT (recall's builtin TCP connect)",
    "aws.command": "deny: any aws command other than sts get-caller-identity or s3 ls",
    "aws.endpoint": "deny: --endpoint-url sends the signed request elsewhere",
    "aws.debug": "deny: --debug logs request details",
    "aws.flag": "deny: aws option not on the allow-list",
    "aws.value": "deny: bad aws option value",
    "az.command": "deny: any az command other than account show",
    "az.flag": "deny: az option not on the allow-list",
    "az.value": "deny: bad az option value",
    "gcloud.command": "deny: gcloud command other than auth list, config list, or list|describe of a read-only group",
    "gcloud.flag": "deny: gcloud option not on the allow-list (--log-http, --impersonate-service-account …)",
    "gcloud.value": "deny: bad gcloud option value",
    "true.args": "deny: true takes no arguments",
    "tcp.args": "deny: tcp takes exactly one HOST:PORT",
    "tcp.target": "deny: not HOST:PORT or [IPv6]:PORT",
    "tcp.port": "deny: port outside 1-65535",
}

_AWS = _Flags(
    "aws", frozenset({"--profile", "--region", "--output", "--query", "--cli-connect-timeout",
                      "--cli-read-timeout"}), frozenset({"--no-cli-pager"}), {},
    {**_deny_map("aws.endpoint", "--endpoint-url", "--endpoint-url sends the signed request to another host"),
     **_deny_map("aws.debug", "--debug", "--debug logs request details and is not a proof"),
     **_deny_map("aws.flag", "--no-verify-ssl --ca-bundle --no-sign-request",
                 "options that weaken or skip TLS or signing are not allowed")},
    long_equals=True, short_equals=True)
_S3_URI = re.compile(r"^s3://[a-z0-9][a-z0-9.-]{1,62}(/[A-Za-z0-9!_.*'()/=-]*)?$")


def _aws(argv: list[str]) -> tuple[str, str]:
    items = _parse(_AWS, argv[1:])
    pos, opts = _positionals(items), _options(items)
    if opts.get("--output", "json") not in ("json", "text", "table"):
        raise _Deny("aws.value", "--output must be json, text or table")
    if not re.match(r"^[a-z0-9-]+$", opts.get("--region", "x")):
        raise _Deny("aws.value", "--region must look like us-east-1")
    for name in ("--cli-connect-timeout", "--cli-read-timeout"):
        if not opts.get(name, "1").isdigit():
            raise _Deny("aws.value", f"{name} must be a number of seconds")
    if pos == ["sts", "get-caller-identity"]:
        return "aws.sts", "aws sts get-caller-identity only reads the caller's identity"
    if pos[:2] == ["s3", "ls"] and len(pos) <= 3:
        if pos[2:] and not _S3_URI.match(pos[2]):
            raise _Deny("aws.value", f"{pos[2]!r} is not an s3://BUCKET[/PREFIX] URI")
        return "aws.s3-ls", "aws s3 ls only lists buckets or keys"
    raise _Deny("aws.command", "only `aws sts get-caller-identity` and `aws s3 ls [s3://BUCKET/PREFIX]` "
                               "are read-only proofs")


_AZ = _Flags(
    "az", frozenset({"--subscription", "--output", "--query"}), frozenset(), {"o": "--output"},
    _deny_map("az.flag", "--debug --verbose", "only --subscription, --query and --output are allowed"),
    long_equals=True, short_equals=True)


def _az(argv: list[str]) -> tuple[str, str]:
    items = _parse(_AZ, argv[1:])
    if _positionals(items) != ["account", "show"]:
        raise _Deny("az.command", "only `az account show` is a read-only proof")
    if _options(items).get("--output", "json") not in ("json", "tsv", "table"):
        raise _Deny("az.value", "--output must be json, tsv or table")
    return "az.account-show", "az account show only reads the subscription"


_GCLOUD = _Flags(
    "gcloud", frozenset({"--project", "--format", "--filter", "--limit", "--account", "--configuration",
                         "--zone", "--region"}), frozenset({"--quiet"}), {"q": "--quiet"},
    _deny_map("gcloud.flag", "--log-http --impersonate-service-account --access-token-file --flags-file "
              "--verbosity --trace-token --credential-file-override",
              "gcloud options that log requests, read flags or tokens from files, or act as someone else"),
    long_equals=True, short_equals=False)
# groups whose list and describe only read metadata; container clusters describe can show client keys
_GCLOUD_GROUPS = {("projects",): "list describe", ("organizations",): "list describe",
                  ("compute", "instances"): "list describe", ("compute", "zones"): "list describe",
                  ("compute", "regions"): "list describe", ("compute", "networks"): "list describe",
                  ("compute", "disks"): "list describe", ("container", "clusters"): "list",
                  ("sql", "instances"): "list describe", ("run", "services"): "list describe",
                  ("functions",): "list describe", ("dns", "managed-zones"): "list describe",
                  ("iam", "service-accounts"): "list describe", ("services",): "list",
                  ("auth",): "list", ("config",): "list"}
_GCLOUD_FORMAT = re.compile(r"^(json|yaml|text|value|table|csv|list|flattened|none|get)\b[^\n]*$")


def _gcloud(argv: list[str]) -> tuple[str, str]:
    items = _parse(_GCLOUD, argv[1:])
    pos, opts = _positionals(items), _options(items)
    if "--format" in opts and not _GCLOUD_FORMAT.match(opts["--format"]):
        raise _Deny("gcloud.value", "--format must be json, yaml, text, value(…), table(…) or csv(…)")
    if not opts.get("--limit", "1").isdigit():
        raise _Deny("gcloud.value", "--limit must be a count")
    for size in (2, 1):
        group, rest = tuple(pos[:size]), pos[size:]
        verbs = _GCLOUD_GROUPS.get(group, "").split()
        if rest[:1] and rest[0] in verbs:
            names = rest[1:]
            if (rest[0] == "list" and names) or (rest[0] == "describe" and len(names) != 1):
                raise _Deny("gcloud.command", f"gcloud {' '.join(group)} list takes no NAME, describe exactly one")
            if group in (("auth",), ("config",)):
                _only("gcloud", opts, {"--format", "--account", "--configuration", "--quiet"}, " ".join(pos))
            return "gcloud.list", f"gcloud {' '.join(pos[:size + 1])} only reads metadata"
    raise _Deny("gcloud.command", f"gcloud {' '.join(pos) or '(nothing)'} is not a read-only proof: use auth "
                                  "list, config list, or list|describe under projects, compute instances …")


SUDO_FORMS = {("-k", "true"): "sudo.k", ("-n", "true"): "sudo.n", ("-v",): "sudo.v"}


def _sudo(argv: list[str]) -> tuple[str, str]:
    rule = SUDO_FORMS[tuple(argv[1:])]          # the package lets only these forms past its wrapper rule
    return rule, f"sudo {' '.join(argv[1:])} proves the password or the cached ticket and runs nothing else"


def _true(argv: list[str]) -> tuple[str, str]:
    if argv[1:]:
        raise _Deny("true.args", "true takes no arguments")
    return "true.run", "true runs nothing"


def _tcp(argv: list[str]) -> tuple[str, str]:
    if len(argv) != 2:
        raise _Deny("tcp.args", "tcp takes exactly one HOST:PORT")
    target = argv[1]
    m = re.match(r"^\[([0-9A-Fa-f:.]+)\]:([^:]*)$", target) or re.match(r"^([^:\[\]]+):([^:]*)$", target)
    if not m or not _is_host(m.group(1)) or (target.startswith("[") and ":" not in m.group(1)):
        raise _Deny("tcp.target", f"{target!r} is not HOST:PORT or [IPv6]:PORT")
    if not _port_ok(m.group(2)):
        raise _Deny("tcp.port", f"port {m.group(2)!r} is not 1-65535")
    return "tcp.connect", "a TCP connect sends nothing"


CLOUD_TOOLS = {"aws": _aws, "az": _az, "gcloud": _gcloud, "sudo": _sudo, "true": _true, "tcp": _tcp}
