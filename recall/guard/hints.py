"""What each denial of the guard says is allowed instead: one line per rule or per tool."""
from __future__ import annotations

from .cloud import CLOUD_RULES
from .parse import _Deny
from .tools import TOOL_RULES

SETUP_FORM = ("source FILE or . FILE (absolute or ~/, yours, not writable by group or others), "
              "export NAME=literal, unset NAME")

_TOOLS = "kubectl, curl, ssh, aws, az, gcloud, true, tcp HOST:PORT, sudo -k true | -n true | -v"
_LEXER = {
    "empty": "one read-only command, e.g. kubectl --context C get nodes, curl -s https://HOST/health, tcp HOST:PORT",
    "too-long": "one command of at most 4096 characters",
    "newline": "one command on one line (a folded `verify: >` block is joined into one line)",
    "line-continuation": "one command on one line (a folded `verify: >` block is joined into one line)",
    "control-char": "printable characters, words separated by plain spaces or tabs",
    "unicode-space": "words separated by plain ASCII spaces or tabs",
    "escape": "backslashes inside single quotes ('a\\b'), or \\X in double quotes where X is not $ ` \" \\",
    "shell-metachar": "one command, with ; & | < > ( ) ^ only inside quotes; several checks are several entries",
    "shell-expansion": "literal text ($ ` ! inside single quotes); a secret only as a curl header, "
                       "-H \"Authorization: Bearer $VAR\", which verify sends on stdin",
    "glob": "* ? [ ] { } inside quotes ('po*'); [IPv6] only as a URL's or tcp's host",
    "tilde": "~/ only as ssh -i ~/KEY or curl --cacert ~/FILE; elsewhere an absolute path",
    "comment": "# inside quotes",
    "unbalanced-quote": "every quote closed on the same line",
    "env-assign": "the variable set by a setup step of the entry (export NAME=literal), then the bare command",
    "wrapper": f"the tool itself: {_TOOLS}",
    "path": "the bare tool name, or exactly the path PATH finds for it",
    "unknown-tool": f"one of {_TOOLS}",
}
_FORMS = {
    "kubectl": "kubectl [--context C] [-n NS] get TYPE [NAME…] [-o json|yaml|wide|name|jsonpath=…] [-A] [-l SEL], "
               "get --raw /readyz|/healthz|/livez, top nodes|pods, version, cluster-info, api-resources, "
               "auth whoami, auth can-i VERB RESOURCE, config current-context|get-contexts",
    "curl": TOOL_RULES["curl.get"].split(": ", 1)[1],
    "ssh": TOOL_RULES["ssh.probe"].split(": ", 1)[1],
    "aws": "aws sts get-caller-identity or aws s3 ls [s3://BUCKET[/PREFIX]], with [--profile X] [--region X] "
           "[--output json|text|table] [--query Q] [--no-cli-pager] [--cli-connect-timeout N]",
    "az": CLOUD_RULES["az.account-show"].split(": ", 1)[1],
    "gcloud": CLOUD_RULES["gcloud.list"].split(": ", 1)[1],
    "true": "true, alone",
    "tcp": "tcp HOST:PORT or tcp [IPv6]:PORT",
}
_RULES = {
    "curl.insecure": "the same proof without -k (for a private CA: --cacert FILE)",
    "curl.redirect": "the same proof without -L, at the URL it ends on",
    "curl.credential": "the secret as a header, -H \"Authorization: Bearer $VAR\" (verify sends it on stdin)",
    "curl.config": "every option on the command line",
    "kubectl.secret": "kubectl get of any other resource type (secret values are never a proof)",
    "kubectl.identity": "--context C to pick the cluster and user of your kubeconfig",
    "ssh.jump": "-J through an inventory host (its id, name, alias or ssh:// url host)",
    "aws.endpoint": "the service's own endpoint (drop --endpoint-url); the region with --region",
}


def with_hint(deny: _Deny, argv: tuple) -> str:
    """The denial's reason, ending in what is allowed instead (unless the reason already says it)."""
    if "allowed: " in deny.reason:
        return deny.reason
    tool = deny.rule.split(".", 1)[0] if "." in deny.rule else ""
    form = _RULES.get(deny.rule) or _LEXER.get(deny.rule) or _FORMS.get(tool, "")
    return f"{deny.reason} — allowed: {form}" if form else deny.reason
