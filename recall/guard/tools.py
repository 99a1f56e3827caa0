"""The guard's allow-lists for kubectl, curl and ssh: their read-only argv shapes, rule ids, and a credential's host binding."""
from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from .parse import _NUMBER, _RESOURCE, _Deny, _deny_map, _Flags, _is_host, _only, _options, _parse, _port_ok, _positionals

TOOL_RULES: dict = {
    # allowed shapes
    "kubectl.get": "allow: kubectl [globals] get TYPE[,TYPE] [NAME…] [-o json|yaml|wide|name|jsonpath=…] [-A] "
                   "[-l SEL] [--field-selector SEL] [--no-headers] [--show-labels]",
    "kubectl.health": "allow: kubectl [globals] get --raw /readyz|/healthz|/livez",
    "kubectl.top": "allow: kubectl [globals] top nodes|pods [NAME] [-A] [-l SEL] [--no-headers]",
    "kubectl.api-resources": "allow: kubectl [globals] api-resources [-o wide|name] [--no-headers]",
    "kubectl.version": "allow: kubectl [globals] version [--client] [-o json|yaml]",
    "kubectl.cluster-info": "allow: kubectl [globals] cluster-info",
    "kubectl.config": "allow: kubectl config current-context | get-contexts [NAME] [-o name] [--no-headers]",
    "kubectl.auth-whoami": "allow: kubectl [globals] auth whoami [-o json|yaml]",
    "kubectl.auth-can-i": "allow: kubectl [globals] auth can-i VERB RESOURCE",
    "curl.get": "allow: curl GET of one http(s) URL with -sSfLIkg46 -o /dev/null -w -H -A -m --connect-timeout "
                "--cacert --retry --fail-with-body --compressed --http1.1 --noproxy",
    "ssh.probe": "allow: ssh [-p PORT] [-i KEY] [-l USER] [-q] [-T] [-n] [-x] [-4|-6] [-o BatchMode=…|"
                 "ConnectTimeout=N|StrictHostKeyChecking=…] [-J INVENTORY-HOST] HOST "
                 "true|hostname [-f]|uptime|id|whoami",
    # per-tool denials
    "kubectl.command": "deny: kubectl subcommand not on the allow-list (delete, exec, config view …)",
    "kubectl.args": "deny: wrong arguments for the kubectl subcommand",
    "kubectl.watch": "deny: -w/--watch/--watch-only never end",
    "kubectl.raw": "deny: --raw other than /readyz, /healthz, /livez reaches any API path",
    "kubectl.identity": "deny: flags that change who or where kubectl talks to (--kubeconfig, --as, --token…)",
    "kubectl.output": "deny: -o other than json|yaml|wide|name|jsonpath=… (go-template, custom-columns)",
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
    "curl.http": "deny: a credential over plain http (only https carries one)",
    "curl.host": "deny: with a credential, the URL's host (or port) is not the secret's own url host",
    "curl.host-header": "deny: with a credential, a Host header naming another authority than the URL's "
                        "(a shared front would route the credential to that site)",
    "curl.flag": "deny: curl option not on the allow-list (curl has no --opt=value form)",
    "curl.value": "deny: bad curl option value",
    "ssh.option": "deny: -F, or -o other than BatchMode, ConnectTimeout, StrictHostKeyChecking "
                  "(ProxyCommand, LocalCommand run local commands)",
    "ssh.forward": "deny: forwarding (-L -R -D -W -w -A -X -Y)",
    "ssh.jump": "deny: -J to a host that is not in the inventory",
    "ssh.http": "deny: the linked secret's own url is plain http",
    "ssh.host": "deny: with a linked credential, the ssh host is not the secret's own url host",
    "ssh.command": "deny: remote command other than true, hostname [-f], uptime, id, whoami (none = login shell)",
    "ssh.args": "deny: no HOST, a HOST that is not [USER@]HOST, or -4 with -6",
    "ssh.flag": "deny: ssh option not on the allow-list",
    "ssh.value": "deny: bad ssh option value",
}

_KUBE_IDENTITY = ("--kubeconfig --server --token --as --as-group --as-uid --user --cluster "
                  "--insecure-skip-tls-verify --certificate-authority --client-certificate "
                  "--client-key --username --password --tls-server-name")
_KUBECTL = _Flags(
    "kubectl",
    frozenset({"--context", "--request-timeout", "--namespace", "--output", "--selector", "--field-selector",
               "--raw"}),
    frozenset({"--all-namespaces", "--client", "--no-headers", "--show-labels"}),
    {"n": "--namespace", "o": "--output", "l": "--selector", "A": "--all-namespaces",
     "w": "--watch", "s": "--server", "v": "--v"},
    {**_deny_map("kubectl.watch", "--watch --watch-only", "kubectl --watch never ends and is not a proof"),
     **_deny_map("kubectl.identity", _KUBE_IDENTITY,
                 "flags that change who or where kubectl talks to make the proof prove something else"),
     **_deny_map("kubectl.output", "--template", "templates can read any field, secret data included"),
     **_deny_map("kubectl.flag", "--v", "verbose kubectl logging prints bearer tokens")},
    long_equals=True, short_equals=True)
_KUBE_GLOBAL = {"--context", "--request-timeout", "--namespace"}
_KUBE_VERBS = {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection",
               "impersonate", "use", "bind", "escalate", "approve", "sign", "*"}
_KUBE_TOP = {"node", "nodes", "no", "pod", "pods", "po"}
_NO_ARGS = (bool, "takes no arguments")
# subcommand → (options it allows, -o forms, (wrong arguments?, denial), rule, reason)
_KUBE_SUBS = {
    ("get",): (
        _KUBE_GLOBAL | {"--output", "--all-namespaces", "--selector", "--field-selector", "--no-headers",
                        "--show-labels"},
        ("json", "yaml", "wide", "name", "jsonpath"), (lambda a: not a, "needs a resource type"),
        "kubectl.get", "kubectl get reads objects and changes nothing"),
    ("top",): (
        _KUBE_GLOBAL | {"--all-namespaces", "--selector", "--no-headers"}, (),
        (lambda a: not a or a[0] not in _KUBE_TOP or len(a) > 2, "takes nodes|pods and at most one NAME"),
        "kubectl.top", "kubectl top reads resource usage"),
    ("api-resources",): (_KUBE_GLOBAL | {"--output", "--no-headers"}, ("wide", "name"), _NO_ARGS,
                         "kubectl.api-resources", "kubectl api-resources lists the API's types"),
    ("version",): (_KUBE_GLOBAL | {"--client", "--output"}, ("json", "yaml"), _NO_ARGS,
                   "kubectl.version", "kubectl version only reads versions"),
    ("cluster-info",): (_KUBE_GLOBAL, (), _NO_ARGS,
                        "kubectl.cluster-info", "kubectl cluster-info only reads endpoints"),
    ("config", "current-context"): (set(), (), _NO_ARGS, "kubectl.config",
                                    "kubectl config current-context reads context names from the kubeconfig"),
    ("config", "get-contexts"): (
        {"--output", "--no-headers"}, ("name",),
        (lambda a: len(a) > 1 or not all(_RESOURCE.match(x) for x in a), "takes at most one context name"),
        "kubectl.config", "kubectl config get-contexts reads context names from the kubeconfig"),
    ("auth", "whoami"): (_KUBE_GLOBAL | {"--output"}, ("json", "yaml"), _NO_ARGS,
                         "kubectl.auth-whoami", "kubectl auth whoami asks who this identity is"),
    ("auth", "can-i"): (
        _KUBE_GLOBAL, (),
        (lambda a: len(a) != 2 or a[0] not in _KUBE_VERBS or not _RESOURCE.match(a[1]),
         "takes exactly VERB RESOURCE"),
        "kubectl.auth-can-i", "kubectl auth can-i asks a question and changes nothing"),
}


def _kubectl(argv: list[str]) -> tuple[str, str]:
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
    if "--raw" in opts:
        if sub != "get":
            raise _Deny("kubectl.raw", "--raw belongs to `kubectl get --raw /readyz|/healthz|/livez` only")
        _only("kubectl", opts, _KUBE_GLOBAL | {"--raw"}, "get --raw")
        if opts["--raw"] not in ("/readyz", "/healthz", "/livez") or args:
            raise _Deny("kubectl.raw", "--raw reaches any API path: only `kubectl get --raw /readyz` "
                                       "(or /healthz, /livez) is a proof")
        return "kubectl.health", f"kubectl get --raw {opts['--raw']} reads the API server's health"
    words = (sub, *args[:1]) if sub in ("config", "auth") else (sub,)
    if words not in _KUBE_SUBS:
        if sub == "config":
            raise _Deny("kubectl.command", "only `kubectl config current-context` and `config get-contexts` are "
                                           "proofs (view prints credentials; use-context/set-* change state)")
        raise _Deny("kubectl.command", f"kubectl {sub} is not a read-only subcommand")
    allowed, outputs, (wrong, denial), rule, reason = _KUBE_SUBS[words]
    where, args = " ".join(words), args[len(words) - 1:]
    _only("kubectl", opts, allowed, where)
    output = opts.get("--output")             # _only denied it where a subcommand has no -o forms
    if output and output not in outputs and not ("jsonpath" in outputs and output.startswith("jsonpath=")):
        shown = "|".join(outputs).replace("jsonpath", "jsonpath=…")
        raise _Deny("kubectl.output", f"kubectl {where} -o must be {shown} (go-template, custom-columns and "
                                      "template read fields jsonpath cannot name)")
    if sub == "cluster-info" and "dump" in args:
        raise _Deny("kubectl.dump", "cluster-info dump prints logs and objects and can write files")
    if wrong(args):
        raise _Deny("kubectl.args", f"kubectl {where} {denial}")
    for arg in args[1:] if sub == "top" else args if sub == "get" else ():
        if not _RESOURCE.match(arg):
            raise _Deny("kubectl.args", f"{arg!r} is not a resource type or name")
        if any(part.split("/", 1)[0].split(".", 1)[0].lower() in ("secret", "secrets") for part in arg.split(",")):
            raise _Deny("kubectl.secret", f"kubectl {where} {arg} would print secret values")
    return rule, reason


_CURL = _Flags(
    "curl",
    frozenset({"--output", "--write-out", "--header", "--max-time", "--request", "--connect-timeout",
               "--cacert", "--retry", "--user-agent", "--noproxy"}),
    frozenset({"--silent", "--show-error", "--fail", "--location", "--head", "--insecure",
               "--globoff", "--disable", "--fail-with-body", "--compressed", "--ipv4", "--ipv6", "--http1.1"}),
    {"s": "--silent", "S": "--show-error", "f": "--fail", "L": "--location", "I": "--head",
     "k": "--insecure", "g": "--globoff", "q": "--disable", "o": "--output", "w": "--write-out",
     "H": "--header", "m": "--max-time", "X": "--request", "d": "--data", "F": "--form",
     "T": "--upload-file", "O": "--remote-name", "J": "--remote-header-name", "D": "--dump-header",
     "c": "--cookie-jar", "K": "--config", "x": "--proxy", "U": "--proxy-user", "u": "--user",
     "n": "--netrc", "b": "--cookie", "A": "--user-agent", "4": "--ipv4", "6": "--ipv6"},
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
_DEFAULT_PORTS = {"http": 80, "https": 443, "ssh": 22}


@dataclass(frozen=True)
class Binding:
    """Where one secret's credential may go: its own URL's scheme, host and (when given) port."""

    secret: str
    scheme: str            # https | http | ssh | '' (a bare host: any TLS URL on it)
    host: str              # lower case, no brackets
    port: int | None    # None: not given, any port on the host
    source: str = "url"    # url | use | check: which line of the secrets file named it


def binding_for(secret: str, url: str, source: str = "url") -> Binding | None:
    """A Binding from a URL (or a bare host name); None when it names no host."""
    if "://" not in url:
        host = url.strip().strip("[]").lower()
        return Binding(secret, "", host, None, source) if host and _is_host(host) else None
    parts = urlsplit(url.strip())
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    return Binding(secret, parts.scheme.lower(), host.lower(), port, source) if host else None


def _curl_url(url: str, globoff: bool) -> tuple:
    """Return (scheme, host, port) of the URL (host without brackets, lower case) or raise _Deny."""
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
    return scheme.lower(), host.strip("[]").lower(), int(port) if port else None


LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})   # a kubectl port-forward's end: never leaves the machine


def check_binding(tool: str, scheme: str, host: str, port: int | None, bindings: tuple) -> None:
    """Raise _Deny unless a credential may go to scheme://host:port under every secret's binding
    (plain http only to a loopback address that is the secret's own url:)."""
    local = host in LOOPBACK and bool(bindings)
    if scheme == "http" and not (local and all(b.scheme == "http" for b in bindings)) and not (
            local and all(b.host != host for b in bindings)):      # then the host is the cause, said below
        raise _Deny(f"{tool}.http", f"http://{host} is plain HTTP: a credential goes only over https — "
                                    f"allowed: the proof with https://{host} (plain http only to 127.0.0.1, "
                                    "localhost or [::1] when that is the secret's own url:)")
    for b in bindings:
        if b.scheme == "http" and b.host not in LOOPBACK:
            raise _Deny(f"{tool}.http", f"secret {b.secret}'s own url is plain http: a credential goes only "
                                        "over https — allowed: its url: with https:// (or http://127.0.0.1:PORT "
                                        "for a port-forward)")
        effective = port or _DEFAULT_PORTS.get(scheme)
        if b.host != host or (b.port is not None and b.port != effective):
            others = [o.secret for o in bindings if o.host == host and o.secret != b.secret]
            whose = f" (that is secret {others[0]}'s host)" if others else ""
            own = f"{b.host}:{b.port}" if b.port else b.host
            raise _Deny(f"{tool}.host", f"{host}{f':{port}' if port else ''} is not secret {b.secret}'s own "
                                        f"host {own} (from its {b.source}: line){whose} — allowed: the proof "
                                        f"pointed at {own}")


def curl_headers(argv: list, wanted) -> tuple:
    """(argv without the -H headers `wanted(value)` picks, those header values): glued forms too."""
    spans: list = []
    items = _parse(_CURL, argv[1:], spans=spans)
    drop, trim, picked = set(), {}, []
    for (name, value), (first, last, letter) in zip(items, spans):
        if name != "--header" or not wanted(value):
            continue
        picked.append(value)
        first, last = first + 1, last + 1                     # args index → argv index
        if letter == 0 or argv[first][:letter] == "-":        # -H V, --header V, -HV: the whole token(s)
            drop.update(range(first, last + 1))
        else:                                                 # -sH V, -sHV: keep the flags before H
            trim[first] = argv[first][:letter]
            drop.update(range(first + 1, last + 1))
    out = [trim.get(k, a) for k, a in enumerate(argv) if k not in drop]
    return out, picked


def _curl(argv: list[str], bindings: tuple, credential: bool, sends: bool | None) -> tuple[str, str]:
    items = _parse(_CURL, argv[1:])
    opts = _options(items)
    for name, value in items:
        if name == "--request" and value != "GET":
            raise _Deny("curl.method", f"curl -X {value} is not a GET")
        if name == "--output" and value != "/dev/null":
            raise _Deny("curl.output", f"curl -o {value} would write a file (only /dev/null)")
        if name == "--header":        # every value an option takes is non-empty (_parse)
            header_name = value.split(":", 1)[0].strip().lower()
            if value.startswith("@"):
                raise _Deny("curl.header", "curl -H @file reads headers from a file")
            if ":" not in value or not re.match(r"^[a-z0-9-]+$", header_name):
                raise _Deny("curl.header", f"{value!r} is not a 'Name: value' header")
            if header_name in _OVERRIDE_HEADERS:
                raise _Deny("curl.header", f"{header_name} can turn a GET into another method")
        if name == "--write-out" and (value.startswith("@") or "%output{" in value):
            raise _Deny("curl.write-out", "curl -w @file or %output{} reads or writes files")
        if name in ("--max-time", "--connect-timeout") and not _NUMBER.match(value):
            raise _Deny("curl.value", f"{name} must be a number of seconds")
        if name == "--retry" and not (value.isascii() and value.isdigit() and int(value) <= 10):
            raise _Deny("curl.value", "--retry must be a count from 0 to 10")
        if name == "--noproxy" and not re.match(r"^[A-Za-z0-9.:*,\[\]-]+$", value):
            raise _Deny("curl.value", "--noproxy must be a comma-separated list of hosts")
    urls = _positionals(items)
    if len(urls) != 1:
        raise _Deny("curl.url", f"curl needs exactly one URL, got {len(urls)}")
    scheme, host, port = _curl_url(urls[0], "--globoff" in opts)
    # sends=False to a loopback address: nothing of the secret's is in this request (a port-forward's health)
    if credential and not (sends is False and host in LOOPBACK):
        if "--insecure" in opts:
            raise _Deny("curl.insecure", "curl -k with a credential would send it over unverified TLS")
        if "--location" in opts:
            raise _Deny("curl.redirect", "curl -L with a credential forwards custom headers to other hosts")
        if not bindings:
            raise _Deny("curl.host", f"{host} cannot receive the credential: its secret has no url: (nor a URL "
                                     "in its own use: or check: line) — allowed: once the secret's url: names "
                                     f"{host}, a proof to it")
        check_binding("curl", scheme, host, port, bindings)
        _same_authority([v for n, v in items if n == "--header"], scheme, host, port)
    return "curl.get", "curl GET of one URL, output only to stdout or /dev/null"


def _same_authority(headers: list, scheme: str, host: str, port: int | None) -> None:
    """Deny a Host header (any case, empty too) that names other than the URL's host and port."""
    shown = f"[{host}]" if ":" in host else host
    effective = port or _DEFAULT_PORTS[scheme]
    allowed = {f"{shown}:{effective}"} | ({shown} if effective == _DEFAULT_PORTS[scheme] else set())
    for header in headers:
        name, _, value = header.partition(":")
        if name.strip().lower() == "host" and value.strip().lower() not in allowed:
            raise _Deny("curl.host-header", f"-H 'Host:{value}' names another site than the URL's "
                                            f"{shown}:{effective}, and a shared front would route the "
                                            "credential there")


def run_form(argv: tuple, home: str) -> tuple:
    """The argv recall runs for an allowed proof: curl's `--cacert ~/FILE` expanded (curl does not
    expand ~, and no shell runs), and a curl to a loopback address never sent through a proxy."""
    if argv[:1] != ("curl",) and not argv[0].endswith("/curl"):
        return argv
    out = [home + a[1:] if argv[k - 1] == "--cacert" and a.startswith("~/") else a for k, a in enumerate(argv)]
    items = _parse(_CURL, out[1:])
    url = _positionals(items)[0]
    if _curl_url(url, "--globoff" in _options(items))[1] in LOOPBACK:
        at = 2 if out[1:2] in (["-q"], ["--disable"]) else 1      # curl honours -q only as argv[1]
        out[at:at] = ["--noproxy", "*"]
    return tuple(out)


_SSH = _Flags(
    "ssh", frozenset({"-p", "-i", "-l", "-o", "-J"}), frozenset({"-q", "-T", "-4", "-6", "-n", "-x"}),
    {c: "-" + c for c in "pilqT46oFLRDWJwAXYnx"},
    {**_deny_map("ssh.option", "-F", "ssh -F reads a config that can set ProxyCommand or LocalCommand"),
     **_deny_map("ssh.forward", "-L -R -D -W -w -A -X -Y", "ssh forwarding is not a proof")},
    long_equals=False, short_equals=False)
_SSH_OPTIONS = {"batchmode": ("yes", "no"), "stricthostkeychecking": ("yes", "no", "accept-new", "ask", "off"),
                "connecttimeout": None}
_SSH_COMMANDS = ("hostname", "hostname -f", "true", "uptime", "id", "whoami")
_USER = re.compile(r"^[A-Za-z0-9._][A-Za-z0-9._-]*$")


def _ssh_host(text: str, what: str) -> str:
    """The host of [USER@]HOST[:PORT] (the port only for -J), lower case; raise ssh.args."""
    user, _, host = text.rpartition("@")
    if what == "-J" and re.match(r"^[^:\[\]]+:[0-9]+$", host):
        host, port = host.rsplit(":", 1)
        if not _port_ok(port):
            raise _Deny("ssh.value", f"-J port {port} is outside 1-65535")
    if not _is_host(host) or (user and not _USER.match(user)):
        raise _Deny("ssh.args", f"{text!r} is not [USER@]HOST")
    return host.lower()


def _ssh(argv: list[str], bindings: tuple, credential: bool, jump_hosts: frozenset[str]) -> tuple[str, str]:
    # like ssh itself: options before and after HOST, and the first word after HOST starts the command
    items = _parse(_SSH, argv[1:], stop_at=1)
    pos = _positionals(items)
    if not pos:
        raise _Deny("ssh.args", "ssh needs a HOST and a remote command: " + ", ".join(_SSH_COMMANDS))
    remote = " ".join(pos[1:])
    if remote not in _SSH_COMMANDS:
        raise _Deny("ssh.command", f"remote command {remote or '(none: a login shell)'!r} is not one of "
                                   + ", ".join(_SSH_COMMANDS))
    opts = _options(items)
    if "-4" in opts and "-6" in opts:
        raise _Deny("ssh.args", "ssh -4 and -6 together")
    host = _ssh_host(pos[0], "HOST")
    for name, value in items:
        if name == "-o":
            key, eq, setting = value.partition("=")
            allowed = _SSH_OPTIONS.get(key.lower(), ())          # None: ConnectTimeout, a number of seconds
            if not eq or not (setting in allowed if allowed is not None else _port_ok(setting) or setting == "0"):
                raise _Deny("ssh.option", f"-o {value} is not allowed: only -o BatchMode=yes|no, ConnectTimeout=N, "
                                          "StrictHostKeyChecking=yes|no|accept-new (others run commands or reroute)")
        if name == "-J":
            for hop in value.split(","):
                if _ssh_host(hop, "-J") not in jump_hosts:
                    raise _Deny("ssh.jump", f"-J {hop}: a jump host must be an inventory host (its id, name, "
                                            "alias or ssh:// url host); add it to the inventory")
    if "-p" in opts and not _port_ok(opts["-p"]):
        raise _Deny("ssh.value", "ssh -p must be a port 1-65535")
    if "-l" in opts and not _USER.match(opts["-l"]):
        raise _Deny("ssh.value", "ssh -l must be a user name")
    if credential and bindings:          # the credential is in ssh's environment: the host must be its own
        check_binding("ssh", "ssh", host, int(opts["-p"]) if "-p" in opts else None, bindings)
    return "ssh.probe", f"ssh runs only `{remote}` on the remote host"
