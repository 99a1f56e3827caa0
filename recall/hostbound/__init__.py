"""Host-bound secrets (inject: proxy) for one child: placeholders in its env, the proxy's life, its audit rows."""
from __future__ import annotations

import json
import os
import re

from ..errors import RecallError

__all__ = ["Session", "placeholders_for"]

PREFIX = "recall-ph-"
PROXY_VARS = ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy")
CA_VARS = ("SSL_CERT_FILE", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO",
           "AWS_CA_BUNDLE")   # every HTTPS request of the child is intercepted: each client must trust the run CA
DROPPED = ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy")   # nothing may route around the proxy
MAX_LOGGED = 200                # substitution rows per run; the rest are counted in one row
_UNSAFE = re.compile(r"[\x00-\x1f\x7f]")


def placeholders_for(rows, public_fields) -> dict:
    """{secret id: {field: placeholder}} for the host-bound rows: fresh for every run; `public_fields`:
    the vault's rule for the fields a child gets as written (usernames too, as the masker has it)."""
    out = {}
    for row in (r for r in rows if r["inject"] == "proxy"):
        public = public_fields(json.loads(row["meta"]))
        out[row["id"]] = {field: f"{PREFIX}{row['id']}{'.' + field if field else ''}-{os.urandom(12).hex()}"
                          for field in json.loads(row["variables"]).values() if field not in public}
    return out


class Session:
    """The proxy and CA of one child run (`rows`: host-bound only); `env` is what the child gets for them."""

    def __init__(self, rows, values: dict, masker, placeholders: dict, release: float = 0.5):
        from .ca import EphemeralCA
        from .proxy import Binding, HostBoundProxy
        bindings, self.env, self.names, trust = [], {}, [], []
        for row in rows:
            bound = json.loads(row["meta"])["proxy"]
            for var, field in json.loads(row["variables"]).items():
                value = values[row["id"]][field]
                ph = placeholders.get(row["id"], {}).get(field)
                self.env[var] = value if ph is None else ph       # a public field (a username): as written
                if ph is None:
                    continue
                if _UNSAFE.search(value):
                    raise RecallError(f"secret '{row['id']}' holds a control character, which an HTTP header "
                                      "cannot carry: not sent", "fix the value in the secrets file and run "
                                      "'recall secret sync'")
                self.names.append(var)
                bindings.append(Binding(row["id"], ph, value, bound["host"], bound["port"], bound["paths"],
                                        bound["query"]))
            if bound.get("ca") and bound["ca"] not in trust:
                trust.append(bound["ca"])
        self.ca = EphemeralCA()
        try:
            self.proxy = HostBoundProxy(bindings, masker, self.ca, trust, release)
        except (OSError, ValueError) as exc:
            self.ca.close()
            raise RecallError(f"the ca: file of a host-bound secret cannot be loaded ({exc})",
                              "check the ca: path in the secrets file, then 'recall secret sync'") from None
        self.masker = masker
        self.env.update({v: self.proxy.url for v in PROXY_VARS})
        self.env.update({v: self.ca.cert_path for v in CA_VARS})

    def child_env(self, base: dict) -> dict:
        return {**{k: v for k, v in base.items() if k not in DROPPED}, **self.env}

    def close(self) -> None:
        self.proxy.close()
        self.ca.close()

    def notes(self) -> list:
        """What the user should know: no request came through the proxy, or a TLS/upstream problem."""
        out = list(self.proxy.problems)
        if not self.proxy.requests:
            names = ", ".join("$" + n for n in self.names)
            out.append(f"the child made no request through the proxy: {names} held only a placeholder, so a "
                       "client that ignores HTTPS_PROXY is refused by the server (e.g. 401)")
        return out

    def log_rows(self, via: str) -> list:
        """The access-log rows of this run, (verb, secret id, argv, verdict), one per substitution or
        refusal: host, method, path — never a value."""
        events = list(self.proxy.events)
        rows = []
        for sid, verdict, method, scheme, host, port, path in events[:MAX_LOGGED]:
            shown = self.masker.mask(path.encode("latin-1")).decode("latin-1")
            rows.append(("proxy." + ("substituted" if verdict == "substituted" else "refused"), sid,
                         f"{method} {scheme}://{host}:{port}{shown} ({via})", verdict))
        if len(events) > MAX_LOGGED:
            rows.append(("proxy.more", events[0][0], f"({via})",
                         f"{len(events) - MAX_LOGGED} more substitutions not logged one by one"))
        return rows
