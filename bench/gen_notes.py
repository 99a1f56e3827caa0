"""A deterministic synthetic notes tree: N markdown files of operations prose (~5 KB each)."""
from __future__ import annotations

import random
import sys
from pathlib import Path

WORDS = """deploy rollback cluster node pod replica primary failover latency timeout certificate
ingress gateway queue consumer broker partition backup restore snapshot volume disk inode memory
leak kernel upgrade patch migration schema index vacuum replication lag alert pager oncall runbook
escalation customer outage degraded retry backoff throttle quota billing invoice terraform module
state lock drift helm chart release canary blue green traffic shift dns resolver cache ttl cdn
origin purge token rotation secret vault policy role binding audit compliance ticket change window
freeze approval incident postmortem action item owner deadline capacity forecast budget cost spend
""".split()
TEAMS = ["platform", "data", "payments", "search", "identity", "edge"]
STOP = """the a to of and we it was on for in with after then that this is be at by from as
not but had have were are our they which when so all there one out up into more only no its
""".split()
SYLLABLES = "ka ri to me su ne lo ba di fe gu ha jo ki lu mo na pe qui ro sa te vu wo xi ya zo".split()


def vocabulary(rng: random.Random, size: int = 6000) -> list:
    """Zipf-ranked words: stop words first, the operations words spread over ranks 300–3000,
    pseudo-words elsewhere — so a content word sits in a few percent of chunks, as in real notes."""
    pseudo = set()
    while len(pseudo) < size:
        pseudo.add("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))))
    vocab = STOP + sorted(pseudo)[: size - len(STOP)]
    rng.shuffle(vocab_tail := vocab[len(STOP):])
    vocab = STOP + vocab_tail
    for word in WORDS:
        vocab.insert(rng.randint(300, 3000), word)
    return vocab


def make_note(rng: random.Random, i: int, vocab: list, weights: list) -> tuple:
    year = 2019 + i % 8
    month, day = 1 + i % 12, 1 + i % 28
    kind = ["incidents", "runbooks", "projects", "meetings"][i % 4]
    host = f"{rng.choice(['web', 'pg', 'kafka', 'jump', 'build'])}{i % 997:03d}.{rng.choice(TEAMS)}.example.com"
    ticket = f"{rng.choice(['INC', 'OPS', 'CHG'])}-{10000 + i}"
    rel = f"{kind}/{year}/{year}-{month:02d}-{day:02d}-{ticket.lower()}.md"
    parts = [f"---\ntitle: {ticket} {' '.join(rng.sample(WORDS, 4))}\ndate: {year}-{month:02d}-{day:02d}\n"
             f"tags: [{rng.choice(TEAMS)}, {kind}]\n---\n# {ticket} {' '.join(rng.sample(WORDS, 4))}\n"]
    for s in range(rng.randint(3, 6)):
        parts.append(f"\n## {' '.join(rng.sample(WORDS, 3)).capitalize()}\n\n")
        for _ in range(rng.randint(2, 4)):
            sentence = " ".join(rng.choices(vocab, cum_weights=weights, k=rng.randint(30, 60)))
            parts.append(f"{sentence.capitalize()} on {host} for {ticket}.\n\n")
        if s % 2:
            parts.append(f"```bash\n# check {host}\nssh {host} 'df -h /var'\n```\n")
    return rel, "".join(parts)


def generate(root: Path, count: int, seed: int = 7) -> int:
    rng = random.Random(seed)
    vocab = vocabulary(rng)
    weights, acc = [], 0.0
    for rank in range(1, len(vocab) + 1):
        acc += 1.0 / rank
        weights.append(acc)
    total = 0
    for i in range(count):
        rel, text = make_note(rng, i, vocab, weights)
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        total += len(text)
    return total


if __name__ == "__main__":
    print(generate(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 10000))
