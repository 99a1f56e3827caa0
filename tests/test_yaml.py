"""Tests for recall.yaml: each construct, each refusal, line numbers, and PyYAML agreement."""
from __future__ import annotations

import copy
import math
import pickle
import re

import pytest

from recall import yaml as yamlish
from recall.errors import InputError, NotFound
from recall.yaml import YList, YMap, line_of, parse


def fails(text, where, *words):
    """Parse `text` as f.yaml, expect an InputError at `where` whose message has every word."""
    with pytest.raises(InputError) as info:
        parse(text, "f.yaml")
    message = str(info.value)
    assert message.startswith(f"f.yaml:{where}: "), message
    for word in words:
        assert word.lower() in message.lower(), message
    return info.value


# ---- the files in DESIGN.md

CONFIG = """\
sources:                    # notes trees and code repositories
  - name: notes
    path: ~/notes
  - name: infra
    path: ~/code/infra
    include: ["*.md", "docs/**"]
secrets: [~/notes/secrets.yaml]        # one or several files
inventory: [~/notes/inventory.yaml]
embedding:
  provider: voyage                      # voyage | local | none
  model: voyage-4
  token_cap: 20000000                   # hard cap on billed tokens, kept in the DB
"""

SECRETS = """\
- id: jira-api-token
  service: jira
  tags: [atlassian, jira, api, rotate-yearly]
  notes: >
    Personal Jira bearer token. Default project OPS.
    Rotate yearly.
  use: 'curl -s -H "Authorization: Bearer $JIRA_API_TOKEN" https://jira.example.com/rest/api/2/myself'
  inject: env                  # env | stdin (stdin: value + newline, for sudo -S)
  value: <the token>
# a multi-value secret: each part gets its own variable, every part is masked
- id: db-admin
  fields: {username: admin, password: <value>}   # → DB_ADMIN_USERNAME, DB_ADMIN_PASSWORD
"""

INVENTORY = """\
- id: ops-cluster
  aliases: [ops, platform cluster]
  requires: [vpn]
  access:
    - source ~/utils/set_aws_ops_prod.sh
    - kubectl --context ops-cluster get nodes
  secrets: []
"""


def test_config_file():
    assert parse(CONFIG) == {
        "sources": [{"name": "notes", "path": "~/notes"},
                    {"name": "infra", "path": "~/code/infra", "include": ["*.md", "docs/**"]}],
        "secrets": ["~/notes/secrets.yaml"],
        "inventory": ["~/notes/inventory.yaml"],
        "embedding": {"provider": "voyage", "model": "voyage-4", "token_cap": 20000000},
    }


def test_secrets_file():
    doc = parse(SECRETS)
    assert doc[0]["notes"] == "Personal Jira bearer token. Default project OPS. Rotate yearly.\n"
    assert doc[0]["use"].startswith('curl -s -H "Authorization: Bearer $JIRA_API_TOKEN"')
    assert doc[0]["value"] == "<the token>"
    assert doc[1] == {"id": "db-admin", "fields": {"username": "admin", "password": "<value>"}}


def test_inventory_file():
    assert parse(INVENTORY) == [{
        "id": "ops-cluster", "aliases": ["ops", "platform cluster"], "requires": ["vpn"],
        "access": ["source ~/utils/set_aws_ops_prod.sh", "kubectl --context ops-cluster get nodes"],
        "secrets": [],
    }]


# ---- block structure

@pytest.mark.parametrize("text, expected", [
    ("", None),
    ("# only a comment\n\n", None),
    ("---\n", None),
    ("--- # c\n...\n", None),
    ("a: 1\n", {"a": 1}),
    ("a:\n  b:\n    c: x\n  d: y\ne: z\n", {"a": {"b": {"c": "x"}, "d": "y"}, "e": "z"}),
    ("a:\n", {"a": None}),
    ("a:   # nothing\nb: 2\n", {"a": None, "b": 2}),
    ("- a\n- b\n", ["a", "b"]),
    ("-\n- x\n-   # c\n", [None, "x", None]),
    ("a:\n- 1\n- 2\nb: 3\n", {"a": [1, 2], "b": 3}),          # list not indented under its key
    ("a:\n    - 1\n    - 2\n", {"a": [1, 2]}),
    ("- a: 1\n  b: 2\n- c: 3\n", [{"a": 1, "b": 2}, {"c": 3}]),
    ("-   a: 1\n    b: 2\n", [{"a": 1, "b": 2}]),
    ("- - a\n  - b\n- - c\n", [["a", "b"], ["c"]]),
    ("- a:\n  - x\n  b: 1\n", [{"a": ["x"], "b": 1}]),
    ("-\n  a: 1\n", [{"a": 1}]),
    ("  a: 1\n  b: 2\n", {"a": 1, "b": 2}),                    # the whole document indented
    ("'quoted key': 1\n\"x y\": 2\n", {"quoted key": 1, "x y": 2}),
    ("2: two\ntrue: yes\n~: null key\n", {2: "two", True: "yes", None: "null key"}),
    ("a: b\r\nc: d\r\n", {"a": "b", "c": "d"}),
    ("\ufeffa: 1\n", {"a": 1}),
    ("--- text\n", "text"),
    ("--- |\n  x\n", "x\n"),
    ("---\na: 1\n...\n# after the end\n", {"a": 1}),
    ("a:\tb\n", {"a": "b"}),                                   # a tab may separate, never indent
])
def test_block_structure(text, expected):
    assert parse(text) == expected


# ---- scalars

@pytest.mark.parametrize("text, expected", [
    # YAML 1.2 core schema
    ("[true, True, TRUE, false, False, FALSE]", [True, True, True, False, False, False]),
    ("[null, Null, NULL, ~]", [None] * 4),
    ("a:\nb: ~\n", {"a": None, "b": None}),
    ("[0, -7, +12, 012, 0o17, 0x1F, 0xff]", [0, -7, 12, 12, 15, 31, 255]),
    ("[1.5, -0.25, .5, 1., 1e3, 2.5E-2, +1.0]", [1.5, -0.25, 0.5, 1.0, 1000.0, 0.025, 1.0]),
    ("[.inf, -.Inf, +.INF]", [math.inf, -math.inf, math.inf]),
    # where YAML 1.1 (PyYAML) differs, 1.2 gives strings
    ("[yes, no, on, off, y, n, Yes, OFF]", ["yes", "no", "on", "off", "y", "n", "Yes", "OFF"]),
    ("[1_000, 12:30, 0b101, 0o8, 0xG, '1', \"2\"]", ["1_000", "12:30", "0b101", "0o8", "0xG", "1", "2"]),
    ("[=, <<, 1.2.3, v1.0, 3rd]", ["=", "<<", "1.2.3", "v1.0", "3rd"]),
    ("[+.5, -0x1, 1.e2, '0x10']", [0.5, "-0x1", 100.0, "0x10"]),
    ("a: " + "9" * 5000, {"a": "9" * 5000}),          # beyond int()'s digit limit: kept as text
    # ~ only means null alone; a path starting with it is text for the caller to expand
    ("path: ~/notes\n", {"path": "~/notes"}),
    # plain scalars
    ("a: http://x.com:8080/p?q=1#frag\n", {"a": "http://x.com:8080/p?q=1#frag"}),
    ("a: b#c  # comment\n", {"a": "b#c"}),
    ("a: -x, [y] {z}\n", {"a": "-x, [y] {z}"}),
    ("a: one\n  two\n\n  three\n\n\n   four\n", {"a": "one two\nthree\n\nfour"}),
    ("- one\n  two\n", ["one two"]),
    ("one\ntwo\n", "one two"),
    ("a: 50% done  \n", {"a": "50% done"}),
    # single quotes
    ("a: 'it''s # not a comment'\n", {"a": "it's # not a comment"}),
    ("a: ''\n", {"a": ""}),
    ("a: 'one\n  two\n\n  three  '\n", {"a": "one two\nthree  "}),
    ("a: 'x'   # c\n", {"a": "x"}),
    # double quotes and escapes
    (r'a: "q\"b\\s\/\t|\n|\0|\x41|\u00e9|\U0001F600|\e|\ |\_"', {"a": 'q"b\\s/\t|\n|\0|A|é|\U0001F600|\x1b| |\xa0'}),
    ('a: "one\n  two   \n\n   three"\n', {"a": "one two\nthree"}),
    ('a: "one\\\n    two"\n', {"a": "onetwo"}),
    ('a: "keep  \\\n  \\ lead"\n', {"a": "keep   lead"}),
    ('a: "#x" # c\n', {"a": "#x"}),
])
def test_scalars(text, expected):
    assert parse(text) == expected


def test_nan():
    assert math.isnan(parse("a: .nan")["a"]) and math.isnan(parse("[.NaN]")[0])


@pytest.mark.parametrize("text, expected", [
    ("a: |\n  one\n   two\n\n  three\n", "one\n two\n\nthree\n"),
    ("a: |-\n  x\n\n", "x"),
    ("a: |+\n  x\n\n\nb: 1\n", "x\n\n\n"),
    ("a: |\n  x\n\n\n", "x\n"),
    ("a: >\n  one\n  two\n\n  three\n    indented\n  four\n", "one two\nthree\n  indented\nfour\n"),
    ("a: >-\n  x\n  y\n", "x y"),
    ("a: >+\n  x\n\n", "x\n\n"),
    ("a: |2\n    two extra\n  base\n", "  two extra\nbase\n"),
    ("a: >1-\n  x\n", " x"),
    ("a: |-2\n    x\n", "  x"),
    ("a: |\n\n  after a blank line\n", "\nafter a blank line\n"),
    ("a: |\n  # not a comment\n  - not a list\n", "# not a comment\n- not a list\n"),
    ("a: | # a comment\n  x\nb: 2\n", "x\n"),
    ("a: |\nb: 2\n", ""),
    ("a: |+\n\nb: 2\n", "\n"),
    ("a: |\n  no final newline", "no final newline"),
    ("- |\n  in a list\n- >\n  folded\n", None),
])
def test_block_scalars(text, expected):
    doc = parse(text)
    if expected is None:
        assert doc == ["in a list\n", "folded\n"]
    else:
        assert doc["a"] == expected


@pytest.mark.parametrize("text, expected", [
    ("[]", []),
    ("{}", {}),
    ("[a, 'b', \"c\", 1, [2, [3]], {k: v}]", ["a", "b", "c", 1, [2, [3]], {"k": "v"}]),
    ("{a: 1, b: [x, y], c: {d: e}, 'q': \"r\"}", {"a": 1, "b": ["x", "y"], "c": {"d": "e"}, "q": "r"}),
    ("{\"json\":1, \"style\":[true,null]}", {"json": 1, "style": [True, None]}),
    ("[a, b,]", ["a", "b"]),
    ("{a: }", {"a": None}),
    ("a: [x,\n  y,   # comment\n  z\n]\n", {"a": ["x", "y", "z"]}),
    ("a: {\n    k: v,\n    l: [1,\n        2]}\nb: 1\n", {"a": {"k": "v", "l": [1, 2]}, "b": 1}),
    ("- [a, b]\n- {c: d}\n", [["a", "b"], {"c": "d"}]),
    ("[one\n two, three]", ["one two", "three"]),
    ("[http://x:80/, a:b, 'a, b']", ["http://x:80/", "a:b", "a, b"]),
    ("[a#b, 'c' # comment\n]", ["a#b", "c"]),
])
def test_flow(text, expected):
    assert parse(text) == expected


# ---- refusals: file:line:col and a word that says what is wrong

@pytest.mark.parametrize("text, where, word", [
    ("a: &x 1\n", "1:4", "anchor"),
    ("a: *x\n", "1:4", "alias"),
    ("a: !tag x\n", "1:4", "tag"),
    ("- !!str x\n", "1:3", "tag"),
    ("&a key: 1\n", "1:1", "anchor"),
    ("[a, *b]\n", "1:5", "alias"),
    ("a: 1\n---\nb: 2\n", "2:1", "one document"),
    ("---\na: 1\n...\n---\nb: 2\n", "4:1", "one document"),
    ("a: 1\n...\nb: 2\n", "3:1", "one document"),
    ("a:\n\tb: 1\n", "2:1", "tab"),
    ("a:\n  b: 1\n  \tc: 2\n", "3:3", "tab"),
    ("a: b\n\tc\n", "2:1", "tab"),
    ("? a\n: b\n", "1:1", "complex"),
    ("{? a: b}\n", "1:2", "complex"),
    ("[a]: 1\n", "1:4", "key"),
    ("%YAML 1.2\n---\na: 1\n", "1:1", "directive"),
    ("a: %x\n", "1:4", "%"),
    ("a: @x\n", "1:4", "reserved"),
    ("a: `x`\n", "1:4", "reserved"),
    ("a:\n  b: 1\n c: 2\n", "3:2", "indentation"),
    ("a:\n  b: 1\n    c: 2\n", "3:6", "': '"),
    ("a: 'x'\n  b\n", "2:3", "indentation"),
    ("a: b # c\n  d\n", "2:3", "indentation"),
    ("a: |\n  x\n y\n", "3:2", "indentation"),
    ("- 'a'\n - b\n", "2:2", "indentation"),
    ("a: 'x\nb: 1\n", "1:4", "unterminated"),
    ('a: "x\n', "1:4", "unterminated"),
    ('a: "x\n  y\n', "1:4", "unterminated"),
    ("a: [1, 2\nb: 3\n", "1:4", "never closed"),
    ("a: {x: 1\n", "1:4", "never closed"),
    ("[a, [b]\n", "1:1", "never closed"),
    ("a: 1\nb\nc: 2\n", "2:2", "expected ':'"),
    ("x: 1\na:b\n", "2:4", "space after ':'"),
    ("a: b: c\n", "1:5", "': '"),
    ("a: b\n  c: d\n", "2:4", "': '"),
    ("a: - b\n", "1:4", "list"),
    ("a: -\n", "1:4", "list"),
    ("- a\nb: 1\n", "2:1", "'- '"),
    ("a: 1\n- b\n", "2:1", "'- '"),
    ("a:\n  - b\n  c: 1\n", "3:3", "'- '"),
    ("a: 1\na: 2\n", "2:1", "duplicate"),
    ("- x: 1\n  y: 2\n  x: 3\n", "3:3", "duplicate"),
    ("{a: 1, b: 2, a: 3}\n", "1:14", "duplicate"),
    ("'a': 1\na: 2\n", "2:1", "duplicate"),
    ('a: "\\q"\n', "1:5", "escape"),
    ('a: "\\x4"\n', "1:5", "hex"),
    ('a: "\\U00110000"\n', "1:5", "hex"),
    ("a: 'x' y\n", "1:8", "unexpected text"),
    ("a: 'x'# c\n", "1:7", "unexpected text"),
    ("a: [1] x\n", "1:8", "unexpected text"),
    ("a: |x\n  y\n", "1:5", "after '|'"),
    ("a: >++\n  y\n", "1:6", "after '>'"),
    ("a: | text\n", "1:5", "after '|'"),
    ("a: >\n\n    \n  x\n", "3:1", "blank line"),
    ("[a: 1]\n", "1:3", "inside [...]"),
    ("{a 1}\n", "1:5", "expected ':'"),
    ("{a:1}\n", "1:5", "space after ':'"),
    ("[a, , b]\n", "1:5", "unexpected ','"),
    ("[a b c d e] ]\n", "1:13", "unexpected text"),
    ("[a, b c'd' [e]]\n", "1:12", "expected ','"),
    ("[- a]\n", "1:2", "'- '"),
    ("[|]\n", "1:2", "block scalar"),
    ("{[a]: 1}\n", "1:2", "key"),
    (": x\n", "1:1", "':'"),
    ("x: 1\n\"a b\nc\": 2\n", "2:1", "unterminated"),
])
def test_refusals(text, where, word):
    fails(text, where, word)


def test_duplicate_names_the_first_line():
    fails("a: 1\n\n\na: 2\n", "4:1", "duplicate key 'a'", "first on line 1")


def test_error_has_hint():
    err = fails("a: !secret x\n", "1:4", "tag")
    assert err.hint and "quote" in err.hint
    assert (err.path, err.line, err.col) == ("f.yaml", 1, 4)


# ---- line numbers

LINES = """\
# header
sources:
  - name: notes
    path: ~/notes

  - name: infra
    include: ["*.md",
      "docs/**"]
secrets: [a, b]
"""


def test_line_numbers():
    doc = parse(LINES)
    assert isinstance(doc, YMap) and isinstance(doc, dict) and doc.line == 2
    assert doc.key_lines == {"sources": 2, "secrets": 9}
    sources = doc["sources"]
    assert isinstance(sources, YList) and sources.line == 3 and sources.item_lines == [3, 6]
    assert sources[0].line == 3 and sources[0].key_lines == {"name": 3, "path": 4}
    assert sources[1].line == 6 and sources[1].key_lines == {"name": 6, "include": 7}
    assert sources[1]["include"].line == 7 and sources[1]["include"].item_lines == [7, 8]
    assert doc["secrets"].item_lines == [9, 9]


def test_line_numbers_nested_flow_and_block():
    doc = parse("a:\n  - {k: 1,\n     l: 2}\n  -\n    x: 1\n")
    assert doc["a"].item_lines == [2, 4]
    assert doc["a"][0].line == 2 and doc["a"][0].key_lines == {"k": 2, "l": 3}
    assert doc["a"][1].line == 5


def test_line_of():
    doc = parse(LINES)
    assert line_of(doc, "secrets") == 9
    assert line_of(doc, "missing") is None and line_of(doc, "missing", 0) == 0
    assert line_of(doc, ["unhashable"], -1) == -1
    assert line_of(doc["sources"], 1) == 6 and line_of(doc["sources"], -1) == 6
    assert line_of(doc["sources"], 7, 1) == 1
    assert line_of({"plain": "dict"}, "plain") is None and line_of("text", 0, 5) == 5


def test_containers_are_plain_dicts_and_lists():
    doc = parse("a: [1]\n")
    assert doc == {"a": [1]} and type(doc) is YMap and type(doc["a"]) is YList
    assert dict(doc) == {"a": [1]} and list(doc["a"]) == [1]
    for clone in (copy.deepcopy(doc), pickle.loads(pickle.dumps(doc))):
        assert clone.key_lines == {"a": 1} and clone["a"].item_lines == [1]


# ---- load()

def test_load(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("name: café\n", encoding="utf-8")
    assert yamlish.load(f) == {"name": "café"}
    assert yamlish.load(str(f)) == {"name": "café"}


def test_load_reports_bad_utf8_with_line(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_bytes(b"a: 1\nb: caf\xe9\n")
    with pytest.raises(InputError) as info:
        yamlish.load(f)
    assert str(info.value).startswith(f"{f}:2:7: ") and "UTF-8" in str(info.value)


def test_load_errors_name_the_file(tmp_path):
    f = tmp_path / "inv.yaml"
    f.write_text("- id: a\n- id: b\n  id: c\n")
    with pytest.raises(InputError, match=re.escape(f"{f}:3:3: duplicate key 'id'")):
        yamlish.load(f)
    with pytest.raises(NotFound, match="no such file"):
        yamlish.load(tmp_path / "missing.yaml")


def test_load_entries_each_keeps_every_entry_that_parses_and_the_error_of_each_that_does_not(tmp_path):
    f = tmp_path / "inv.yaml"
    f.write_text("# hosts\n---\n- id: a\n  v: '1'\n- id: b\n  v: 1\n  v: 2\n- id: 'c'\n  v: \"open\n- k: x\n  v: |\n    keep\n")
    with pytest.raises(InputError, match="7:3: duplicate key 'v'"):
        yamlish.load_entries(f, "inventory")                       # the secrets file's rule: all or nothing
    got = yamlish.load_entries(f, "inventory", each=True)
    assert [line for _, line in got] == [3, 5, 8, 10]
    assert got[0][0] == {"id": "a", "v": "1"} and got[3][0] == {"k": "x", "v": "keep\n"}
    assert got[0][0].key_lines == {"id": 3, "v": 4}                  # the file's own line numbers
    assert str(got[1][0]).startswith(f"{f}:7:3: duplicate key 'v'") and got[1][0].id == "b"
    assert str(got[2][0]).startswith(f"{f}:9:6: unterminated double-quoted string") and got[2][0].id == "c"
    for whole in ("k: v\n- id: a\n  v: 1\n  v: 2\n",             # an error no entry alone holds: the file's
                  "- id: a\n...\n- id: b\n", "  - id: a\n    v: 1\n    v: 2\n"):
        f.write_text(whole)
        with pytest.raises(InputError):
            yamlish.load_entries(f, "inventory", each=True)


@pytest.mark.parametrize("text, where", [
    ("".join("  " * i + f"k{i}:\n" for i in range(400)) + "  " * 400 + "leaf\n", "101:201"),
    ("".join("  " * i + "-\n" for i in range(400)), "101:201"),
    ("deep: " + "[" * 600 + "]" * 600 + "\n", "1:105"),
    ("{a: " * 300 + "1" + "}" * 300 + "\n", "1:397"),
])
def test_deep_nesting_is_an_error_at_its_line_not_a_recursion_error(text, where):
    fails(text, where, "nested more than 100 levels")


def test_nesting_up_to_the_limit_parses():
    text = "".join("  " * i + f"k{i}:\n" for i in range(yamlish.MAX_DEPTH - 1)) + "  " * 99 + "leaf\n"
    value = parse(text)
    for i in range(yamlish.MAX_DEPTH - 1):
        value = value[f"k{i}"]
    assert value == "leaf"


# ---- property: documents inside the subset parse as PyYAML parses them

def _plain_safe(s, flow, yaml):
    """Whether `s` can be written unquoted and read back as the same string by YAML 1.1 and 1.2."""
    if not s or s != s.strip() or any(c in s for c in "\n\t\r") or not all(map(_raw_ok, s)):
        return False
    if s[0] in "?:,[]{}#&*!|>'\"%@`" or (s[0] == "-" and s[1:2] in ("", " ")):
        return False
    if ": " in s or " #" in s or s.endswith(":") or s.startswith(("---", "...")):
        return False
    if flow and any(c in s for c in ",[]{}?"):     # PyYAML also stops at '?' inside [...]
        return False
    if re.fullmatch(r"~|null|Null|NULL|true|True|TRUE|false|False|FALSE|[-+]?[0-9]+|0o[0-7]+"
                    r"|0x[0-9a-fA-F]+|[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?"
                    r"|[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN)", s):
        return False                       # YAML 1.2 would not read it as a string
    return yaml.resolver.Resolver().resolve(yaml.ScalarNode, s, (True, False)) == "tag:yaml.org,2002:str"


def _raw_ok(ch):
    """Characters both parsers take literally; the rest must be written as escapes."""
    if ch == "\t" or " " <= ch <= "~":
        return True
    return ch >= "\xa0" and ch not in "\u2028\u2029\ufeff" and not "\ud800" <= ch <= "\udfff" \
        and ch not in "\ufffe\uffff"


TRICKY = ["~/notes", "1.2.3", "v1.0", "3rd", "0xZZ", "-x", "--", "a-b", "http://x.com:8080/p?q=1#f",
          "a#b", "C:\\dir", "key=val", "50%", "it's", 'say "hi"', "a: b", "a #b", "#x", "- a", "-", "?",
          ":", "[x]", "{x}", "a,b", "*x", "&x", "!x", "%x", "@x", "`x", "|", ">", "", " ", "yes", "no",
          "on", "off", "y", "n", "null", "true", "~", "1", "1.5", "0o17", "012", "1e3", "1_000", ".inf",
          ".nan", "12:30", "---", "...", "a\nb", "a  b", "tab\there", "\\", "é日本🙂", "a'b", "\x07",
          "\x85", "\u2028", "line\n", "two\n\n", "\n", " lead", "trail ", "x\n  y",
          "para one\n\npara two\n\n\n", "  indented\nline\n", "a b\n c\n\n", "\n\nx y z\n", "one two three four"]


class _Emitter:
    """Renders a value as YAML text, drawing every layout choice from hypothesis."""

    def __init__(self, data, st, yaml):
        self.data, self.st, self.yaml = data, st, yaml
        self.rnd = data.draw(st.randoms(use_true_random=False))    # for the many small choices
        self.keep_open = False             # the last value was a '+' block scalar: blank lines would join it

    def pick(self, options):
        return self.data.draw(self.st.sampled_from(options))

    def coin(self):
        return self.data.draw(self.st.booleans())

    def comment(self):
        return self.pick(["", "", " # c", "  # note: x", " #", " # it's # fine"])

    def gaps(self, ind):
        """Blank lines and full-line comments between entries."""
        if self.keep_open:
            return self.pick([[], [" " * ind + "# between"]])
        return self.pick([[], [], [""], [" " * ind + "# between"], ["", "# at column 1"]])

    # -- scalars

    def scalar(self, v, flow, cont, key=False):
        """One scalar; `cont` is the indentation for continuation lines (None: keep on one line)."""
        if v is None:
            return self.pick(["null", "Null", "NULL", "~"] + ([] if flow or key else [""]))
        if v is True or v is False:
            return self.pick([str(v).lower(), str(v), str(v).upper()])
        if isinstance(v, int):
            return self.pick([str(v)] + ([hex(v), "0x%X" % v] if v >= 0 else []))
        if isinstance(v, float):
            if math.isinf(v):
                return ("-" if v < 0 else self.pick(["", "+"])) + self.pick([".inf", ".Inf", ".INF"])
            return repr(v)
        styles = ["double"]
        if "\n" not in v and all(map(_raw_ok, v)):
            styles.append("single")
        if _plain_safe(v, flow, self.yaml):
            styles += ["plain", "plain"]
        style = self.pick(styles)
        if style == "plain":
            return v if key or cont is None else self.fold(v, cont, lambda a, b: b.isalnum())
        if style == "single":
            return "'" + self.fold_quoted(v, None if key else cont)
        return '"' + self.double(v, None if key else cont)

    def fold(self, text, cont, ok):
        """Break `text` at some single spaces whose neighbours satisfy `ok`."""
        out = []
        for i, ch in enumerate(text):
            if ch == " " and 0 < i < len(text) - 1 and text[i - 1] not in " \t\n" \
                    and text[i + 1] not in " \t\n" and ok(text[i - 1], text[i + 1]) and self.rnd.random() < .4:
                out.append("\n" + " " * cont)
            else:
                out.append(ch)
        return "".join(out)

    def fold_quoted(self, v, cont):
        """A single-quoted body (closing quote included), over several lines when `cont` is given."""
        body = v.replace("'", "''") + "'"
        return body if cont is None else self.fold(body, cont, lambda a, b: True)

    def double(self, v, cont):
        """A double-quoted body with escapes, maybe folded or broken with '\\' line ends."""
        tokens = []
        for ch in v:
            if ch in '"\\':
                tokens.append("\\" + ch)
            elif ch == "\n":
                tokens.append("\\n")
            elif ch == "/" and self.rnd.random() < .5:
                tokens.append("\\/")
            elif not _raw_ok(ch) or (ch > "~" and self.rnd.random() < .5):
                code = ord(ch)
                tokens.append("\\x%02x" % code if code < 0x100 else
                              "\\u%04x" % code if code < 0x10000 else "\\U%08x" % code)
            else:
                tokens.append(ch)
        if cont is None:
            return "".join(tokens) + '"'
        out = []
        for i, tok in enumerate(tokens):
            nxt = tokens[i + 1] if i + 1 < len(tokens) else '"'
            out.append(tok)
            if nxt not in (" ", "\t") and self.rnd.random() < .15:
                out.append("\\\n" + " " * cont)      # an escaped line break joins without a space
        return self.fold("".join(out), cont, lambda a, b: a != "\\") + '"'

    def block_scalar(self, v, ind, parent):
        """Header and lines of a '|' or '>' scalar for `v` at indentation `ind`, or None if it can't be one."""
        if not all(c == "\n" or _raw_ok(c) for c in v):
            return None
        core = v.rstrip("\n")
        trailing = len(v) - len(core)
        chomp = "+" if trailing >= 2 or (trailing and not core) else "" if trailing else "-"
        lines = core.split("\n") if core else []
        folded = self.coin() and all(not ln[:1].isspace() for ln in lines)
        if folded:
            body = []
            for k, ln in enumerate(lines):
                if k:
                    body.append("")              # each kept line break is an empty line
                body += self.fold(ln, ind, lambda a, b: True).split("\n" + " " * ind) if ln else []
            lines = body
        if chomp == "+":                     # the last text line brings one break, empty lines the rest
            lines += [""] * (trailing - 1 if core else trailing)
        first = next((ln for ln in lines if ln.strip(" ")), "")
        leading = lines[:lines.index(first)] if first else lines
        need_digit = first[:1] == " " or any(leading)
        digit = str(ind - max(parent, 0)) if need_digit or self.coin() else ""
        header = (">" if folded else "|") + "".join(self.pick([(digit, chomp), (chomp, digit)]))
        return header, [" " * ind + ln if ln else "" for ln in lines]

    # -- collections

    def flow(self, v, cont):
        if isinstance(v, (dict, list)):
            items = [self.flow(x, cont) for x in v] if isinstance(v, list) else \
                [self.scalar(k, True, None, key=True) + ": " + self.flow(x, cont) for k, x in v.items()]
            opener, closer = ("[", "]") if isinstance(v, list) else ("{", "}")
            if not items or self.coin():
                return opener + ", ".join(items) + self.pick(["", ","] if items else [""]) + closer
            pad = "\n" + " " * cont
            body = "".join(pad + it + "," + self.comment() for it in items)
            return opener + self.comment() + body + "\n" + " " * self.pick([cont, max(cont - 2, 0)]) + closer
        return self.scalar(v, True, self.pick([None, cont]))

    def inline(self, v, ind, parent):
        """What follows 'key:' or '-' on the same line, and the lines below it."""
        if isinstance(v, (dict, list)) and v and self.coin():
            return "", self.block(v, ind, parent)
        self.keep_open = False
        if isinstance(v, (dict, list)):
            return " " + self.flow(v, ind) + self.comment(), []
        if isinstance(v, str) and self.coin():
            made = self.block_scalar(v, ind, parent)
            if made:
                self.keep_open = "+" in made[0]
                return " " + made[0] + self.comment(), made[1]
        text = self.scalar(v, False, ind)
        return (" " + text + self.comment() if text else self.comment()), []

    def block(self, v, ind, parent):
        """Lines for a non-empty collection at indentation `ind` under a parent at `parent`."""
        lines = []
        for n, (k, x) in enumerate(v.items() if isinstance(v, dict) else enumerate(v)):
            if n:
                lines += self.gaps(ind)
            if isinstance(v, dict):
                head = " " * ind + self.scalar(k, False, None, key=True) + ":"
                if isinstance(x, list) and x and self.coin():
                    lines += [head] + self.block(x, ind, ind)     # the list sits at its key's column
                    continue
                text, below = self.inline(x, ind + self.pick([1, 2, 4]), ind)
                lines += [head + text] + below
            elif isinstance(x, (dict, list)) and x and self.coin():
                gap = self.pick([1, 1, 3])   # compact: `- key: v` / `- - item`
                inner = self.block(x, ind + 1 + gap, ind)
                lines += [" " * ind + "-" + " " * gap + inner[0][ind + 1 + gap:]] + inner[1:]
            else:
                text, below = self.inline(x, ind + self.pick([1, 2, 4]), ind)
                lines += [" " * ind + "-" + text] + below
        return lines

    def document(self, v):
        head = self.pick([[], ["---"], ["# top", ""], ["--- # c"]])
        if isinstance(v, (dict, list)) and v and self.coin():
            body = self.block(v, self.pick([0, 0, 2]), -1)
        else:
            text, body = self.inline(v, 1, -1)
            body = ([text.lstrip(" ")] if text.strip() else []) + body
        content = any(line.strip() and not line.lstrip().startswith("#") for line in body)
        tail = self.pick([[], ["..."], ["# end"]] if content else [[], ["# end"]])   # PyYAML refuses a lone '...'
        return "\n".join(head + body + tail) + "\n"


def _values(st, yaml):
    words = st.from_regex(r"[a-zA-Z][a-zA-Z0-9 _./@()=+:-]{0,12}", fullmatch=True)
    chars = st.one_of(st.sampled_from(list(" \t\n:#-'\"\\/{}[],&*!|>%@`?~.ab0é日🙂\x07\x85")),
                      st.characters(blacklist_categories=("Cs",)))
    strings = st.one_of(st.sampled_from(TRICKY), words, st.text(chars, max_size=12))
    scalars = st.one_of(st.none(), st.booleans(), st.integers(-10 ** 6, 10 ** 6),
                        st.integers(-10 ** 6, 10 ** 6).map(lambda n: n / 100),
                        st.sampled_from([math.inf, -math.inf]), strings, strings)
    keys = st.one_of(strings, st.integers(0, 99))
    return st.recursive(scalars, lambda kids: st.one_of(
        st.lists(kids, max_size=4), st.dictionaries(keys, kids, max_size=4)), max_leaves=12)


def test_agrees_with_pyyaml():
    yaml = pytest.importorskip("yaml")
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies

    @hypothesis.settings(deadline=None, database=None)
    @hypothesis.given(st.data())
    def check(data):
        value = data.draw(_values(st, yaml), label="value")
        text = _Emitter(data, st, yaml).document(value)
        hypothesis.note(repr(text))
        ours = parse(text)
        assert ours == yaml.safe_load(text)
        assert ours == value               # the emitter wrote what it meant to

    check()


SPANS = """\ufeff# a comment\r
- id: a   # trailing\r
  value: "q\\n x"   # kept\r
  fields: {u: plain one, p: 'it''s', n: {v: "deep"}}\r
  block: |-\r
    line1\r
\r
    line2\r
  folded: plain\r
    over two\r
  last: 'x'\r
"""


def _scalar_maps(node):
    if isinstance(node, YMap):
        yield node
    for child in (node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()):
        yield from _scalar_maps(child)


def test_every_scalar_value_has_the_span_it_was_written_in():
    """Replacing each value's span with a marker changes that value and no other byte."""
    doc = parse(SPANS)
    edits, want = [], []
    for n, m in enumerate(_scalar_maps(doc)):
        for key, span in m.spans.items():
            edits.append((span, f"M{n}{key}" if not span.flow else f"'M{n}{key}'"))
            want.append(f"M{n}{key}")
    assert len(want) == 8                     # id value block folded last, u p, and n.v
    out = yamlish.replace_spans(SPANS, edits)
    got = [m[k] for m in _scalar_maps(parse(out)) for k in m.spans]
    assert got == want
    assert out.startswith("\ufeff# a comment\r\n- id: M0id   # trailing\r\n")
    assert "  value: M0value   # kept\r\n" in out and out.endswith("  last: M0last\r\n")


def test_a_file_over_the_size_limit_is_refused_unread(tmp_path):
    big = tmp_path / "secrets.yaml"
    with open(big, "wb") as f:
        f.write(b"- id: x\n  value: ")
        f.truncate(yamlish.MAX_BYTES + 1)
    with pytest.raises(InputError, match=r"secrets.yaml: the file is 4.0 MB; recall reads YAML files of at most 4 MB"):
        yamlish.load(big)
    big.write_bytes(b"- id: x\n  value: " + b"a" * (yamlish.MAX_BYTES - 100) + b"\n")
    assert len(yamlish.load(big)[0]["value"]) == yamlish.MAX_BYTES - 100
