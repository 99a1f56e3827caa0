"""The per-tool allow-lists of the guard: each tool's exact read-only argv shapes, and the rule
ids it can decide with. `guard.py` lexes and splits the command first; this module only ever
sees a clean argv whose argv[0] is the tool.
"""
from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
TYPE_CHECKING = False
if TYPE_CHECKING:                  # annotations only: typing costs ms at start-up
    from typing import Dict, FrozenSet, List, Optional, Tuple
from urllib.parse import urlsplit

TOOL_RULES: dict = {
    # allowed shapes
    "aws.sts": "allow: aws sts get-caller-identity [--profile X] [--region X] [--output json|text|table]",
    "kubectl.get": "allow: kubectl [globals] get TYPE[,TYPE] [NAME…] [-o json|yaml|wide|name] [-A] [-l SEL]",
    "kubectl.version": "allow: kubectl [globals] version [--client] [-o json|yaml]",
    "kubectl.cluster-info": "allow: kubectl [globals] cluster-info",
    "kubectl.auth-can-i": "allow: kubectl [globals] auth can-i VERB RESOURCE",
    "curl.get": "allow: curl GET of one http(s) URL with -sSfLIkg -o /dev/null -w -H -m --connect-timeout",
    "ssh.probe": "allow: ssh [-p PORT] [-i KEY] [-l USER] [-q] [-T] [-4|-6] HOST hostname|true",
    "sudo.k": "allow: sudo -k true, exactly",
    "az.account-show": "allow: az account show --subscription X [--output|-o json|tsv|table]",
    "tcp.connect": "allow: tcp HOST:PORT (recall's builtin TCP connect)",
    # per-tool denials
    "aws.command": "deny: any aws command other than sts get-caller-identity",
    "aws.endpoint": "deny: --endpoint-url sends the signed request elsewhere",
    "aws.debug": "deny: --debug logs request details",
    "aws.flag": "deny: aws option not on the allow-list",
    "aws.value": "deny: bad aws option value",
    "kubectl.command": "deny: kubectl subcommand other than get, version, cluster-info, auth can-i",
    "kubectl.args": "deny: wrong arguments for the kubectl subcommand",
    "kubectl.watch": "deny: -w/--watch/--watch-only never end",
    "kubectl.raw": "deny: --raw reaches any API path",
    "kubectl.identity": "deny: flags that change who or where kubectl talks to (--kubeconfig, --as, --token…)",
    "kubectl.output": "deny: -o other than json|yaml|wide|name (jsonpath/go-template read fields)",
    "kubectl.secret": "deny: get secrets, in any spelling",
    "kubectl.dump": "deny: cluster-info dump",
    "kubectl.flag": "deny: kubectl option not on the allow-list",
    "kubectl.value": "deny: bad kubectl option value",
    "curl.method": "deny: -X/--request other than GET",
    "curl.data": "deny: sends a body (-d, --data*, --json, -F, -T…)",
    "curl.output": "deny: writes a file (-O, -o other than /dev/null, -D, -c, --trace…)",
    "curl.config": "deny: -K/--config reads options from a file",
    "curl.route": "deny: --proxy, --resolve, --connect-to, --unix-socket reroute the request",
    "curl.credential": "deny: credentials in argv or from netrc/cookies (-u, --oauth2-bearer, -n, -b)",
    "curl.header": "deny: @file headers, malformed headers, method-override headers",
    "curl.write-out": "deny: -w @file or %output{…} (reads or writes files)",
    "curl.insecure": "deny: -k with a credential (the secret would cross unverified TLS)",
    "curl.redirect": "deny: -L with a credential (custom headers follow redirects to other hosts)",
    "curl.url": "deny: not exactly one plain URL (count, userinfo, fragment, curl globbing)",
    "curl.scheme": "deny: scheme other than http or https",
    "curl.host": "deny: with a credential, the URL host is not the secret's or entry's own",
    "curl.flag": "deny: curl option not on the allow-list (curl has no --opt=value form)",
    "curl.value": "deny: bad curl option value",
    "ssh.option": "deny: -o/-F (ProxyCommand, LocalCommand run local commands)",
    "ssh.forward": "deny: forwarding and jumping (-L -R -D -W -J -w -A -X -Y)",
    "ssh.command": "deny: remote command other than exactly hostname or true (none = login shell)",
    "ssh.args": "deny: no HOST, a HOST that is not [USER@]HOST, or -4 with -6",
    "ssh.flag": "deny: ssh option not on the allow-list",
    "ssh.value": "deny: bad ssh option value",
    "az.command": "deny: any az command other than account show",
    "az.subscription": "deny: az account show without --subscription",
    "az.flag": "deny: az option not on the allow-list",
    "az.value": "deny: bad az option value",
    "tcp.args": "deny: tcp takes exactly one HOST:PORT",
    "tcp.target": "deny: not HOST:PORT or [IPv6]:PORT",
    "tcp.port": "deny: port outside 1-65535",
}


class _Deny(Exception):
    def __init__(self, rule: str, reason: str):
        super().__init__(reason)
        self.rule, self.reason = rule, reason


# ---------------------------------------------------------------- option parsing

@dataclass(frozen=True)
class _Flags:
    """One tool's option grammar: which names take values, short letters, and named denials."""

    tool: str
    values: FrozenSet[str]
    bools: FrozenSet[str]
    short: Dict[str, str]                 # letter -> canonical name
    denied: Dict[str, Tuple[str, str]]    # canonical name -> (rule, reason)
    long_equals: bool                     # accepts --opt=value (argparse, pflag; not curl)
    short_equals: bool                    # -o=value means "value" (argparse, pflag; not getopt)


def _deny_map(rule: str, names: str, reason: str) -> dict:
    return {n: (rule, reason) for n in names.split()}


def _take_value(spec: _Flags, name: str, value: Optional[str]) -> str:
    if not value or value.startswith("-"):
        raise _Deny(f"{spec.tool}.value", f"{name} needs a value that does not start with '-'")
    return value


def _parse(spec: _Flags, args: List[str], stop_at: Optional[int] = None) -> List[Tuple[str, Optional[str]]]:
    """Split args into ordered items: (option name, value|None) or ("", positional).

    After `stop_at` positionals, everything left is positional (ssh's remote command)."""
    items: List[Tuple[str, Optional[str]]] = []
    unknown = f"{spec.tool}.flag"
    i = 0
    while i < len(args):
        tok = args[i]
        i += 1
        if stop_at is not None and len(_positionals(items)) >= stop_at and not tok.startswith("-"):
            items.extend(("", rest) for rest in args[i - 1:])
            break
        if not tok.startswith("-"):
            items.append(("", tok))
            continue
        if tok in ("-", "--"):
            raise _Deny(unknown, f"{tok!r} is not accepted by the {spec.tool} allow-list")
        if tok.startswith("--"):
            name, eq, value = tok.partition("=")
            if name in spec.denied:
                raise _Deny(*spec.denied[name])
            if name in spec.bools and not eq:
                items.append((name, None))
                continue
            if name not in spec.values:
                raise _Deny(unknown, f"{spec.tool} option {tok!r} is not on the allow-list")
            if eq and not spec.long_equals:
                raise _Deny(unknown, f"{spec.tool} has no --opt=value form: {tok!r}")
            if not eq:
                value = args[i] if i < len(args) else None
                i += 1
            items.append((name, _take_value(spec, name, value)))
            continue
        for j in range(1, len(tok)):
            name = spec.short.get(tok[j], "")
            if name in spec.denied:
                raise _Deny(*spec.denied[name])
            if name in spec.bools:
                items.append((name, None))
                continue
            if name not in spec.values:
                raise _Deny(unknown, f"{spec.tool} flag -{tok[j]} (in {tok!r}) is not on the allow-list")
            rest = tok[j + 1:]
            if rest:
                value = rest[1:] if spec.short_equals and rest[0] == "=" else rest
            else:
                value = args[i] if i < len(args) else None
                i += 1
            items.append((name, _take_value(spec, name, value)))
            break
    return items


def _positionals(items) -> List[str]:
    return [v for n, v in items if not n]


def _options(items) -> Dict[str, str]:
    """Last value wins, as in every parser here; bools map to ''."""
    return {n: (v or "") for n, v in items if n}


def _only(tool: str, opts: Dict[str, str], allowed: set, where: str) -> None:
    for name in opts:
        if name not in allowed:
            raise _Deny(f"{tool}.flag", f"{name} is not allowed with {where}")


# ---------------------------------------------------------------- tools

_HOST = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?\.?$")
_NUMBER = re.compile(r"^[0-9]+(?:\.[0-9]+)?$")
_RESOURCE = re.compile(r"^[A-Za-z0-9_.:/,-]+$")


def _is_host(text: str) -> bool:
    if _HOST.match(text):
        return True
    try:
        ipaddress.IPv6Address(text)
        return True
    except ValueError:
        return False


def _port_ok(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= 5 and 1 <= int(text) <= 65535


_AWS = _Flags(
    "aws", frozenset({"--profile", "--region", "--output"}), frozenset(), {},
    {**_deny_map("aws.endpoint", "--endpoint-url", "--endpoint-url sends the signed request to another host"),
     **_deny_map("aws.debug", "--debug", "--debug logs request details and is not a proof"),
     **_deny_map("aws.flag", "--no-verify-ssl --ca-bundle --no-sign-request",
                 "options that weaken or skip TLS or signing are not allowed")},
    long_equals=True, short_equals=True)


def _aws(argv: List[str]) -> Tuple[str, str]:
    items = _parse(_AWS, argv[1:])
    if _positionals(items) != ["sts", "get-caller-identity"]:
        raise _Deny("aws.command", "only `aws sts get-caller-identity` is a read-only proof")
    opts = _options(items)
    if opts.get("--output", "json") not in ("json", "text", "table"):
        raise _Deny("aws.value", "--output must be json, text or table")
    if not re.match(r"^[a-z0-9-]+$", opts.get("--region", "x")):
        raise _Deny("aws.value", "--region must look like us-east-1")
    return "aws.sts", "aws sts get-caller-identity only reads the caller's identity"


_KUBE_IDENTITY = ("--kubeconfig --server --token --as --as-group --as-uid --user --cluster "
                  "--insecure-skip-tls-verify --certificate-authority --client-certificate "
                  "--client-key --username --password --tls-server-name")
_KUBECTL = _Flags(
    "kubectl",
    frozenset({"--context", "--request-timeout", "--namespace", "--output", "--selector"}),
    frozenset({"--all-namespaces", "--client"}),
    {"n": "--namespace", "o": "--output", "l": "--selector", "A": "--all-namespaces",
     "w": "--watch", "s": "--server", "v": "--v"},
    {**_deny_map("kubectl.watch", "--watch --watch-only", "kubectl --watch never ends and is not a proof"),
     **_deny_map("kubectl.raw", "--raw", "kubectl --raw reaches any API path, secrets included"),
     **_deny_map("kubectl.identity", _KUBE_IDENTITY,
                 "flags that change who or where kubectl talks to make the proof prove something else"),
     **_deny_map("kubectl.output", "--template", "templates can read any field, secret data included"),
     **_deny_map("kubectl.flag", "--v", "verbose kubectl logging prints bearer tokens")},
    long_equals=True, short_equals=True)
_KUBE_GLOBAL = {"--context", "--request-timeout", "--namespace"}
_KUBE_VERBS = {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection",
               "impersonate", "use", "bind", "escalate", "approve", "sign", "*"}


def _kubectl_secret(token: str) -> bool:
    for part in token.split(","):
        kind = part.split("/", 1)[0].split(".", 1)[0].lower()
        if kind in ("secret", "secrets"):
            return True
    return False


def _kubectl(argv: List[str]) -> Tuple[str, str]:
    items = _parse(_KUBECTL, argv[1:])
    pos = _positionals(items)
    if not pos:
        raise _Deny("kubectl.command", "kubectl needs a subcommand")
    # cobra finds the subcommand by skipping only root flags it knows; others must follow it
    first = next(k for k, (n, _) in enumerate(items) if not n)
    for name, _ in items[:first]:
        if name not in _KUBE_GLOBAL:
            raise _Deny("kubectl.flag", f"{name} must come after the subcommand")
    opts = _options(items)
    if not re.match(r"^[0-9]+(?:ms|s|m|h)?$", opts.get("--request-timeout", "0")):
        raise _Deny("kubectl.value", "--request-timeout must look like 10s")
    if not re.match(r"^[a-z0-9](?:[-a-z0-9]*[a-z0-9])?$", opts.get("--namespace", "default")):
        raise _Deny("kubectl.value", "--namespace must be a namespace name")
    sub, args = pos[0], pos[1:]
    if sub == "get":
        _only("kubectl", opts, _KUBE_GLOBAL | {"--output", "--all-namespaces", "--selector"}, "get")
        if opts.get("--output", "json") not in ("json", "yaml", "wide", "name"):
            raise _Deny("kubectl.output", "kubectl get -o must be json, yaml, wide or name")
        if not args:
            raise _Deny("kubectl.args", "kubectl get needs a resource type")
        for arg in args:
            if not _RESOURCE.match(arg):
                raise _Deny("kubectl.args", f"{arg!r} is not a resource type or name")
            if _kubectl_secret(arg):
                raise _Deny("kubectl.secret", f"kubectl get {arg} would print secret values")
        return "kubectl.get", "kubectl get reads objects and changes nothing"
    if sub == "version":
        _only("kubectl", opts, _KUBE_GLOBAL | {"--client", "--output"}, "version")
        if opts.get("--output", "json") not in ("json", "yaml"):
            raise _Deny("kubectl.output", "kubectl version -o must be json or yaml")
        if args:
            raise _Deny("kubectl.args", "kubectl version takes no arguments")
        return "kubectl.version", "kubectl version only reads versions"
    if sub == "cluster-info":
        _only("kubectl", opts, _KUBE_GLOBAL, "cluster-info")
        if "dump" in args:
            raise _Deny("kubectl.dump", "cluster-info dump prints logs and objects and can write files")
        if args:
            raise _Deny("kubectl.args", "kubectl cluster-info takes no arguments")
        return "kubectl.cluster-info", "kubectl cluster-info only reads endpoints"
    if sub == "auth" and args[:1] == ["can-i"]:
        _only("kubectl", opts, _KUBE_GLOBAL, "auth can-i")
        if len(args) != 3 or args[1] not in _KUBE_VERBS or not _RESOURCE.match(args[2]):
            raise _Deny("kubectl.args", "kubectl auth can-i takes exactly VERB RESOURCE")
        return "kubectl.auth-can-i", "kubectl auth can-i asks a question and changes nothing"
    raise _Deny("kubectl.command", f"kubectl {sub} is not one of get, version, cluster-info, auth can-i")


_CURL = _Flags(
    "curl",
    frozenset({"--output", "--write-out", "--header", "--max-time", "--request", "--connect-timeout"}),
    frozenset({"--silent", "--show-error", "--fail", "--location", "--head", "--insecure",
               "--globoff", "--disable"}),
    {"s": "--silent", "S": "--show-error", "f": "--fail", "L": "--location", "I": "--head",
     "k": "--insecure", "g": "--globoff", "q": "--disable", "o": "--output", "w": "--write-out",
     "H": "--header", "m": "--max-time", "X": "--request", "d": "--data", "F": "--form",
     "T": "--upload-file", "O": "--remote-name", "J": "--remote-header-name", "D": "--dump-header",
     "c": "--cookie-jar", "K": "--config", "x": "--proxy", "U": "--proxy-user", "u": "--user",
     "n": "--netrc", "b": "--cookie"},
    {**_deny_map("curl.data", "--data --data-ascii --data-binary --data-raw --data-urlencode --json "
                 "--form --form-string --upload-file", "curl would send a body, which is not a GET"),
     **_deny_map("curl.output", "--remote-name --remote-name-all --remote-header-name --output-dir "
                 "--dump-header --cookie-jar --trace --trace-ascii --stderr --libcurl --etag-save "
                 "--hsts --alt-svc --create-dirs", "curl would write a file"),
     **_deny_map("curl.config", "--config", "curl -K/--config reads more options from a file"),
     **_deny_map("curl.route", "--proxy --preproxy --socks4 --socks4a --socks5 --socks5-hostname "
                 "--resolve --connect-to --unix-socket --abstract-unix-socket --proxy-user",
                 "curl would send the request somewhere other than the URL's host"),
     **_deny_map("curl.credential", "--user --oauth2-bearer --netrc --netrc-file --netrc-optional "
                 "--location-trusted --cookie", "credentials must come from the environment, "
                 "never argv, netrc or cookie files")},
    long_equals=False, short_equals=False)
_URL = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.]+\]|[^/?#:\[\]@]+)(?::(?P<port>[0-9]{1,5}))?"
                  r"(?P<rest>[/?][^\s\\#]*)?$")
_OVERRIDE_HEADERS = {"x-http-method-override", "x-http-method", "x-method-override"}


def _norm_host(host: str) -> str:
    """A url_hosts entry as a bare lower-case host; a full URL is tolerated."""
    if "://" in host:
        host = urlsplit(host).hostname or ""
    return host.strip("[]").lower()


def _curl_url(url: str, globoff: bool) -> str:
    """Return the URL's host (no brackets, lower case) or raise _Deny."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise _Deny("curl.scheme", f"{url!r} has no scheme, and curl would guess one")
    if scheme.lower() not in ("http", "https"):
        raise _Deny("curl.scheme", f"scheme {scheme!r} is not http or https")
    m = _URL.match(rest)
    if not m:
        raise _Deny("curl.url", f"{url!r} is not a plain URL (userinfo, fragment or odd characters)")
    host, port, path = m.group("host"), m.group("port"), m.group("rest") or ""
    if not _is_host(host.strip("[]")) or (host.startswith("[") and ":" not in host):
        raise _Deny("curl.url", f"{host!r} is not a host name or address")
    if port is not None and not _port_ok(port):
        raise _Deny("curl.url", f"port {port} is outside 1-65535")
    if not globoff and any(c in path for c in "[]{}"):
        raise _Deny("curl.url", "curl would expand [] or {} in the URL into many requests")
    return host.strip("[]").lower()


def _curl(argv: List[str], url_hosts: tuple, credential: bool) -> Tuple[str, str]:
    items = _parse(_CURL, argv[1:])
    opts = _options(items)
    for name, value in items:
        if name == "--request" and value != "GET":
            raise _Deny("curl.method", f"curl -X {value} is not a GET")
        if name == "--output" and value != "/dev/null":
            raise _Deny("curl.output", f"curl -o {value} would write a file (only /dev/null)")
        if name == "--header":
            header_name = (value or "").split(":", 1)[0].strip().lower()
            if (value or "").startswith("@"):
                raise _Deny("curl.header", "curl -H @file reads headers from a file")
            if ":" not in (value or "") or not re.match(r"^[a-z0-9-]+$", header_name):
                raise _Deny("curl.header", f"{value!r} is not a 'Name: value' header")
            if header_name in _OVERRIDE_HEADERS:
                raise _Deny("curl.header", f"{header_name} can turn a GET into another method")
        if name == "--write-out" and ((value or "").startswith("@") or "%output{" in (value or "")):
            raise _Deny("curl.write-out", "curl -w @file or %output{} reads or writes files")
        if name in ("--max-time", "--connect-timeout") and not _NUMBER.match(value or ""):
            raise _Deny("curl.value", f"{name} must be a number of seconds")
    if credential and "--insecure" in opts:
        raise _Deny("curl.insecure", "curl -k with a credential would send it over unverified TLS")
    if credential and "--location" in opts:
        raise _Deny("curl.redirect", "curl -L with a credential forwards custom headers to other hosts")
    urls = _positionals(items)
    if len(urls) != 1:
        raise _Deny("curl.url", f"curl needs exactly one URL, got {len(urls)}")
    host = _curl_url(urls[0], "--globoff" in opts)
    if credential and host not in {_norm_host(h) for h in url_hosts}:
        raise _Deny("curl.host", f"{host} is not the credential's own host")
    return "curl.get", "curl GET of one URL, output only to stdout or /dev/null"


_SSH = _Flags(
    "ssh", frozenset({"-p", "-i", "-l"}), frozenset({"-q", "-T", "-4", "-6"}),
    {c: "-" + c for c in "pilqT46oFLRDWJwAXY"},
    {**_deny_map("ssh.option", "-o -F", "ssh -o/-F can set ProxyCommand or LocalCommand, running local commands"),
     **_deny_map("ssh.forward", "-L -R -D -W -J -w -A -X -Y", "ssh forwarding and jump hosts are not a proof")},
    long_equals=False, short_equals=False)


def _ssh(argv: List[str]) -> Tuple[str, str]:
    # like ssh itself: options before and after HOST, and the first word after HOST starts the command
    items = _parse(_SSH, argv[1:], stop_at=1)
    pos = _positionals(items)
    if not pos:
        raise _Deny("ssh.args", "ssh needs a HOST and a remote command, hostname or true")
    if pos[1:] not in (["hostname"], ["true"]):
        shown = " ".join(pos[1:]) or "(none: a login shell)"
        raise _Deny("ssh.command", f"remote command {shown!r} is not hostname or true")
    hosts = pos[:1]
    opts = _options(items)
    if "-4" in opts and "-6" in opts:
        raise _Deny("ssh.args", "ssh -4 and -6 together")
    user, _, host = hosts[0].rpartition("@")
    if not _is_host(host) or (user and not re.match(r"^[A-Za-z0-9._][A-Za-z0-9._-]*$", user)):
        raise _Deny("ssh.args", f"{hosts[0]!r} is not [USER@]HOST")
    if "-p" in opts and not _port_ok(opts["-p"]):
        raise _Deny("ssh.value", "ssh -p must be a port 1-65535")
    if "-l" in opts and not re.match(r"^[A-Za-z0-9._][A-Za-z0-9._-]*$", opts["-l"]):
        raise _Deny("ssh.value", "ssh -l must be a user name")
    return "ssh.probe", f"ssh runs only `{argv[-1]}` on the remote host"


_AZ = _Flags(
    "az", frozenset({"--subscription", "--output"}), frozenset(), {"o": "--output"},
    _deny_map("az.flag", "--debug --query --verbose", "only --subscription and --output are allowed"),
    long_equals=True, short_equals=True)


def _az(argv: List[str]) -> Tuple[str, str]:
    items = _parse(_AZ, argv[1:])
    if _positionals(items) != ["account", "show"]:
        raise _Deny("az.command", "only `az account show` is a read-only proof")
    opts = _options(items)
    if "--subscription" not in opts:
        raise _Deny("az.subscription", "az account show needs --subscription to prove this entry")
    if opts.get("--output", "json") not in ("json", "tsv", "table"):
        raise _Deny("az.value", "--output must be json, tsv or table")
    return "az.account-show", "az account show only reads the subscription"


def _sudo(argv: List[str]) -> Tuple[str, str]:
    return "sudo.k", "sudo -k true drops the cached ticket and runs true, proving the password"


def _tcp(argv: List[str]) -> Tuple[str, str]:
    if len(argv) != 2:
        raise _Deny("tcp.args", "tcp takes exactly one HOST:PORT")
    target = argv[1]
    m = re.match(r"^\[([0-9A-Fa-f:.]+)\]:([^:]*)$", target) or re.match(r"^([^:\[\]]+):([^:]*)$", target)
    if not m or not _is_host(m.group(1)) or (target.startswith("[") and ":" not in m.group(1)):
        raise _Deny("tcp.target", f"{target!r} is not HOST:PORT or [IPv6]:PORT")
    if not _port_ok(m.group(2)):
        raise _Deny("tcp.port", f"port {m.group(2)!r} is not 1-65535")
    return "tcp.connect", "a TCP connect sends nothing"


TOOLS = {"aws": _aws, "kubectl": _kubectl, "ssh": _ssh, "az": _az, "sudo": _sudo, "tcp": _tcp}
