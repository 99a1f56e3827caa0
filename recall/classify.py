"""A failed proof → ok | stale | unreachable | missing | error, by exit code then message, per tool."""
from __future__ import annotations

import re

# (tool, pattern over stderr+stdout, status, what to do). First match wins; order matters.
RULES = [
    ("aws", r"config profile \(([^)]*)\) could not be found", "missing", "the AWS profile '{0}' is not configured on this machine"),
    ("aws", r"Unable to locate credentials", "stale", "no AWS credentials: log in (aws sso login) or source the account's setup script"),
    ("aws", r"ExpiredToken|token included in the request is expired|RequestExpired", "stale", "the AWS session expired: log in again"),
    ("aws", r"InvalidClientTokenId|SignatureDoesNotMatch|UnrecognizedClientException|AuthFailure",
     "stale", "AWS rejected the credentials: rotate or re-issue them"),
    ("aws", r"SSO [Tt]oken|sso session|Error loading SSO", "stale", "the AWS SSO session expired: run aws sso login"),
    ("aws", r"Could not connect to the endpoint URL|Connect timeout|EndpointConnectionError", "unreachable",
     "the AWS endpoint did not answer: check the network or VPN"),
    ("kubectl", r"context was not found for specified context: (\S+)", "missing",
     "the kube context '{0}' is not in the kubeconfig here"),
    ("kubectl", r'context "([^"]*)" (?:was not found|does not exist)', "missing",
     "the kube context '{0}' is not in the kubeconfig here"),
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
    ("curl", r"(returned error|HTTP/[\d.]+) (401|403)\b", "stale", "the service refused the credential (HTTP {1}): rotate it"),
]
CURL_EXIT = {6: "the host name does not resolve", 7: "nothing answered on that address",
             28: "no answer before the timeout", 35: "the TLS handshake failed"}


def classify(tool: str, code: int, output: str, *, timed_out: bool = False) -> tuple:
    """(status, reason) for one proof's exit code and (masked) output."""
    if timed_out:
        return "unreachable", "no answer before the timeout"
    text = output or ""
    if tool == "curl":
        return _curl(code, text)
    if code == 0:
        return "ok", ""
    for rule_tool, pattern, status, reason in RULES:
        if rule_tool != tool:
            continue
        m = re.search(pattern, text)
        if m:
            return status, reason.format(*(g or "" for g in m.groups()))
    if tool == "aws" and code == 255 and "Could not connect" in text:
        return "unreachable", "the AWS endpoint did not answer"
    return "error", _last_line(text) or f"exit code {code}"


def _curl(code: int, text: str) -> tuple:
    status_code = re.fullmatch(r"\s*(\d{3})\s*", text)
    if code == 0 and status_code:
        http = int(status_code.group(1))
        if http in (401, 403):
            return "stale", f"the service refused the credential (HTTP {http}): rotate it"
        if http >= 400:
            return "error", f"HTTP {http}"
        return "ok", ""
    if code == 0:
        return "ok", ""
    if code in CURL_EXIT:
        return "unreachable", CURL_EXIT[code]
    m = re.search(r"(returned error|HTTP/[\d.]+):? (401|403)\b", text)
    if m:
        return "stale", f"the service refused the credential (HTTP {m.group(2)}): rotate it"
    return "error", _last_line(text) or f"curl exit code {code}"


def _last_line(text: str) -> str:
    lines = [l.strip() for l in text.strip().splitlines() if l.strip()]
    return lines[-1][:200] if lines else ""
