"""A finished proof → ok | stale | unreachable | missing | error: by exit code first, then message, per tool."""
from __future__ import annotations

import re

# tool -> {exit code: (status, reason, read messages?)}. A code listed here decides first: either
# outright (read messages False) or as the default when none of the tool's message rules match.
EXIT_CODES = {
    "curl": {6: ("unreachable", "the host name does not resolve", False),
             7: ("unreachable", "nothing answered on that address", False),
             28: ("unreachable", "no answer before the timeout", False),
             35: ("unreachable", "the TLS handshake failed", False),
             52: ("unreachable", "the server closed the connection without answering", False),
             56: ("unreachable", "the connection broke while receiving the answer", False),
             22: ("error", "the service answered with an HTTP error", True)},     # -f: the code is in the message
    "aws": {252: ("error", "aws rejected the command line (exit 252): this aws may not know an option", False),
            253: ("missing", "the AWS configuration or credentials are incomplete on this machine", True),
            254: ("error", "the AWS service returned an error", True),
            255: ("error", "aws failed", True)},
    "ssh": {255: ("error", "ssh failed before running the command", True)},
    "az": {2: ("error", "az rejected the command line (exit 2)", False),
           3: ("missing", "the subscription is not visible to this login: check the id or the account", True)},
}
# A non-zero code a table above does not list: decided by the code alone (for ssh, only 255 is its own
# failure). Tools absent here read their messages at any non-zero code (kubectl, az and sudo exit 1 for all).
OTHER_CODES = {"curl": "curl exit code {code}", "aws": "aws exit code {code}", "ssh": "the remote command exited {code}"}

# (tool, pattern over stderr+stdout, status, what to do). First match wins; order matters.
RULES = [
    ("aws", r"config profile \(([^)]*)\) could not be found", "missing", "the AWS profile '{0}' is not configured on this machine"),
    ("aws", r"You must specify a region", "missing", "no AWS region is configured for this profile on this machine"),
    ("aws", r"Unable to locate credentials", "stale", "no AWS credentials: log in (aws sso login) or source the account's setup script"),
    ("aws", r"ExpiredToken|token included in the request is expired|RequestExpired", "stale", "the AWS session expired: log in again"),
    ("aws", r"InvalidClientTokenId|SignatureDoesNotMatch|UnrecognizedClientException|AuthFailure",
     "stale", "AWS rejected the credentials: rotate or re-issue them"),
    ("aws", r"SSO [Tt]oken|sso session|Error loading SSO", "stale", "the AWS SSO session expired: run aws sso login"),
    ("aws", r"Could not connect to the endpoint URL|Connect timeout|EndpointConnectionError", "unreachable",
     "the AWS endpoint did not answer: check the network or VPN"),
    ("kubectl", r'context was not found for specified context: (\S+)|context "([^"]*)" (?:was not found|does not exist)',
     "missing", "the kube context '{0}{1}' is not in the kubeconfig here"),     # one group is '', by the kubectl version
    ("kubectl", r"You must be logged in to the server|Unauthorized|provide credentials|token has expired|"
     r"exec plugin.*(expired|failed)", "stale", "the cluster rejected the credentials: log in again (refresh the token)"),
    ("kubectl", r"Forbidden|forbidden", "stale", "the cluster refused this identity: check its role, or log in as the right user"),
    ("kubectl", r"connection refused|i/o timeout|no such host|Unable to connect to the server|dial tcp|"
     r"TLS handshake timeout|connect: network is unreachable", "unreachable",
     "the API server did not answer: check the VPN or the network"),
    ("ssh", r"Permission denied", "stale", "the host refused the key: check the key or the user"),
    ("ssh", r"Host key verification failed|REMOTE HOST IDENTIFICATION HAS CHANGED|No .* host key is known",
     "missing", "the host key is not in known_hosts here: connect once by hand and check the fingerprint"),
    ("ssh", r"Could not resolve hostname|Name or service not known", "unreachable", "the host name does not resolve: check DNS or the VPN"),
    ("ssh", r"Connection refused|Connection timed out|No route to host|Network is unreachable|Connection closed",
     "unreachable", "the host did not answer on its ssh port: check the VPN or the host"),
    ("az", r"az login|Please run 'az login'|AADSTS\d+|refresh token.*expired", "stale", "the Azure session expired: run az login"),
    ("az", r"[Ss]ubscription .*(not found|doesn't exist|could not be found)", "missing",
     "the subscription is not visible to this login: check the id or the account"),
    ("sudo", r"incorrect password|Sorry, try again|[0-9]+ incorrect password attempt", "stale", "sudo refused the password: rotate it in the secrets file"),
    ("sudo", r"a password is required", "stale", "sudo needs a password here: the cached ticket expired or NOPASSWD is not set"),
    ("gcloud", r"do not currently have an active account|[Rr]eauthentication (?:failed|required)|gcloud auth login|"
     r"invalid_grant|credentials? (?:has|have) expired", "stale", "the gcloud login expired: run gcloud auth login"),
    ("gcloud", r"PERMISSION_DENIED|does not have (?:\S+ )?permission", "stale",
     "this gcloud identity may not read it: check its role, or log in as the right account"),
    ("gcloud", r"NOT_FOUND|was not found|[Pp]roject .* (?:not found|does not exist)", "missing",
     "the project or resource is not visible to this login: check the name or the account"),
    ("gcloud", r"Failed to establish a new connection|Max retries exceeded|Connection refused|Unable to find the server|"
     r"Temporary failure in name resolution", "unreachable", "the Google API did not answer: check the network or proxy"),
    ("curl", r"(?:returned error|HTTP/[\d.]+):? (401|403)\b", "stale", "the service refused the credential (HTTP {0}): rotate it"),
    ("curl", r"returned error:? (\d{3})\b", "error", "the service answered HTTP {0}"),
]


def classify(tool: str, code: int, output: str, *, timed_out: bool = False) -> tuple:
    """(status, reason) for one proof's exit code and (masked) output; `tool` is argv[0]'s basename."""
    if timed_out:
        return "unreachable", "no answer before the timeout"
    text = output or ""
    if code == 0:        # curl without -f exits 0 on an HTTP error: with -w '%{http_code}' alone, judged as -f would be
        m = re.fullmatch(r"\s*(\d{3})\s*", text) if tool == "curl" else None
        if not m or int(m.group(1)) < 400:
            return "ok", ""
        code, text = 22, f"returned error: {m.group(1)}"
    known = EXIT_CODES.get(tool, {}).get(code)
    if known is not None:
        status, reason, read = known
    else:
        status, reason = "error", OTHER_CODES.get(tool, "exit code {code}").format(code=code)
        read = tool not in OTHER_CODES
    if read:
        for rule_tool, pattern, rule_status, rule_reason in RULES:
            m = re.search(pattern, text) if rule_tool == tool else None
            if m:
                return rule_status, rule_reason.format(*(g or "" for g in m.groups()))
    last = next((line.strip()[:200] for line in reversed(text.splitlines()) if line.strip()), "")
    return status, f"{reason}: {last}" if last else reason
