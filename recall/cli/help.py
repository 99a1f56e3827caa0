"""The help text that is prose: search's modes, and each verb's examples (the end of its --help)."""
from __future__ import annotations

SEARCH_HELP = """\
Search the notes: identifiers (INC-10963, pg-prod-03) match exactly and rank first; words and
questions are ranked by BM25, and by meaning too when an embedding provider is configured.

modes:
  auto      identifiers by keyword only; other queries hybrid with a provider, else keyword (default)
  keyword   BM25 over the words, plus exact identifiers; no model, no request
  semantic  nearest in meaning only (needs embedding.provider: voyage or local)
  hybrid    keyword and semantic lists fused by reciprocal rank

examples:
  recall search INC-10963
  recall search "how did we fix the expired ingress cert" --mode hybrid --explain
  recall search -- -x              words that start with '-' go after '--'"""


# Each verb's --help ends with these (search has its own, in SEARCH_HELP).
EXAMPLES = {
    "init": ["recall init", "recall --config ~/work/recall.yaml init --notes ~/work/notes"],
    "index": ["recall index", "recall index --full --no-embed", "recall index --source notes", "recall index --watch"],
    "read": ["recall read incidents/2023/INC-10963-db-failover.md:16",
             "recall read notes:runbooks/vpn.md --offset 120"],
    "secret": ["recall secret find jira", "recall secret command jira-api-token"],
    "secret sync": ["recall secret sync", "recall secret sync --prune"],
    "secret find": ["recall secret find \"token for jira\"", "recall secret find"],
    "secret show": ["recall secret show jira-api-token"],
    "secret command": ["recall secret command jira-api-token",
                       "recall secret command db-admin -- psql -U '$DB_ADMIN_USERNAME' -c 'select 1'"],
    "secret exec": ["recall secret exec db-admin -- sh -c 'psql -U \"$DB_ADMIN_USERNAME\" -c \"select 1\"'",
                    "recall secret exec sudo-pass --stdin -- sudo -S true"],
    "secret get": ["recall secret get jira-api-token", "recall secret get jira-api-token --print"],
    "secret set": ["recall secret set jira-api-token", "recall secret set db-admin password",
                   "printf %s \"$NEW\" | recall secret set jira-api-token"],
    "secret key": ["recall secret key backup /media/usb/recall-vault.key"],
    "secret key backup": ["recall secret key backup /media/usb/recall-vault.key"],
    "secret log": ["recall secret log", "recall secret log jira-api-token -n 20"],
    "secret rotate-key": ["recall secret rotate-key"],
    "secret restore": ["recall secret log", "recall secret restore jira-api-token"],
    "access": ["recall access find ops", "recall access exec ops-cluster -- kubectl get pods"],
    "access find": ["recall access find \"platform cluster\"", "recall access find"],
    "access show": ["recall access show ops-cluster"],
    "access exec": ["recall access exec ops-cluster", "recall access exec ops-cluster -- 'kubectl get pods | head'"],
    "verify": ["recall verify", "recall verify ops-cluster jira-api-token", "recall verify --dry-run"],
    "remote": ["recall remote install jump01"],
    "remote install": ["recall remote install jump01 --path ~/recall"],
    "mcp": ["claude mcp add recall -- recall mcp"],
    "instructions": ["recall instructions", "recall instructions --install ~/.claude/CLAUDE.md"],
    "doctor": ["recall doctor", "recall --json doctor", "recall doctor --thorough"],
    "eval": ["recall --config golden/recall.yaml eval golden/queries.jsonl -v"],
}
