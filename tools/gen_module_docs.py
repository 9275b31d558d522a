"""Render docs/modules.md from the spur.cluster modules' own DOCUMENTATION, EXAMPLES and RETURN.

ansible-doc reads the modules (doc fragments merged), so the page says exactly what `ansible-doc` says.

    python tools/gen_module_docs.py           # rewrite docs/modules.md
    python tools/gen_module_docs.py --check   # exit 1 when docs/modules.md is not what the modules say
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
COLLECTION = ROOT / "collection"
OUTPUT = ROOT / "docs" / "modules.md"
NAMESPACE = "spur.cluster"


def module_names() -> list[str]:
    return sorted(p.stem for p in (COLLECTION / "plugins" / "modules").glob("*.py") if not p.name.startswith("_"))


def read_docs() -> dict[str, Any]:
    """ansible-doc --json for every module, with the collection reachable through a scratch collections path."""
    ansible_doc = Path(sys.executable).parent / "ansible-doc"
    with tempfile.TemporaryDirectory(prefix="spur-docs-") as scratch:
        tree = Path(scratch) / "ansible_collections" / "spur"
        tree.mkdir(parents=True)
        (tree / "cluster").symlink_to(COLLECTION)
        env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=scratch, ANSIBLE_HOME=str(Path(scratch) / "home"))
        env.pop("ANSIBLE_CONFIG", None)
        names = [f"{NAMESPACE}.{m}" for m in module_names()]
        proc = subprocess.run(
            [str(ansible_doc), "--json", "-t", "module", *names], capture_output=True, text=True, env=env, cwd=scratch
        )
    if proc.returncode != 0:
        raise SystemExit(f"ansible-doc failed: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout)


# ------------------------------------------------------------------ Ansible markup -> Markdown

_MARKUP = re.compile(r"\b([A-Z]{1,2})\(((?:[^()]|\([^()]*\))*)\)")


def _option_ref(text: str) -> str:
    """O(name), O(name=value), O(fqcn#module:name) -> `name` (of the other module)."""
    if "#" in text:
        plugin, _sep, rest = text.partition("#")
        option = rest.partition(":")[2]
        return f"`{option}` of [{plugin}](#{anchor(plugin)})"
    return f"`{text}`"


def markup(text: str) -> str:
    def replace(match: re.Match[str]) -> str:
        kind, body = match.group(1), match.group(2)
        if kind in ("O", "RV"):
            return _option_ref(body)
        if kind in ("C", "V", "E"):
            return f"`{body}`"
        if kind == "M":
            return f"[{body}](#{anchor(body)})" if body.startswith(NAMESPACE + ".") else f"`{body}`"
        if kind == "B":
            return f"**{body}**"
        if kind == "I":
            return f"*{body}*"
        if kind == "U":
            return f"<{body}>"
        if kind == "L":
            label, _sep, url = body.partition(",")
            return f"[{label.strip()}]({url.strip()})"
        return match.group(0)

    return _MARKUP.sub(replace, text)


def anchor(name: str) -> str:
    return re.sub(r"[^a-z0-9_-]", "", name.lower().replace(" ", "-"))


def paragraphs(value: Any) -> list[str]:
    if value is None:
        return []
    items = value if isinstance(value, list) else [value]
    return [markup(str(item).strip()) for item in items]


def cell(value: Any) -> str:
    return "<br>".join(paragraphs(value)).replace("|", "\\|").replace("\n", " ")


def literal(value: Any) -> str:
    if value is None:
        return ""
    return "`" + json.dumps(value) + "`" if not isinstance(value, str) else f"`{value}`"


# ------------------------------------------------------------------ rendering


def option_rows(options: dict[str, Any], parent: str = "") -> list[str]:
    rows = []
    for name in sorted(options):
        spec = options[name]
        full = f"{parent}{name}"
        kind = spec.get("type", "str")
        if spec.get("elements"):
            kind += f" of {spec['elements']}"
        flags = []
        if spec.get("required"):
            flags.append("**required**")
        if "default" in spec and spec["default"] is not None:
            flags.append(f"default: {literal(spec['default'])}")
        if spec.get("choices"):
            flags.append("choices: " + ", ".join(literal(c) for c in spec["choices"]))
        rows.append(f"| `{full}` | {kind} | {'<br>'.join(flags)} | {cell(spec.get('description'))} |")
        if spec.get("suboptions"):
            rows.extend(option_rows(spec["suboptions"], parent=full + "[]."))
    return rows


def return_rows(values: dict[str, Any], parent: str = "") -> list[str]:
    rows = []
    for name in sorted(values):
        spec = values[name]
        full = f"{parent}{name}"
        kind = spec.get("type", "")
        if spec.get("elements"):
            kind += f" of {spec['elements']}"
        returned = cell(spec.get("returned", ""))
        rows.append(f"| `{full}` | {kind} | {returned} | {cell(spec.get('description'))} |")
        if spec.get("contains"):
            rows.extend(return_rows(spec["contains"], parent=full + ("[]." if spec.get("type") == "list" else ".")))
    return rows


def render_module(fqcn: str, data: dict[str, Any]) -> list[str]:
    doc = data["doc"]
    out = [f'<a id="{anchor(fqcn)}"></a>', f"## {fqcn}", "", markup(doc["short_description"]), ""]
    for para in paragraphs(doc.get("description")):
        out += [para, ""]
    out += ["### Options", ""]
    if doc.get("options"):
        out += ["| option | type | default / choices | description |", "| --- | --- | --- | --- |"]
        out += option_rows(doc["options"])
    else:
        out.append("None.")
    out.append("")
    if doc.get("attributes"):
        out += ["### Attributes", "", "| attribute | support | details |", "| --- | --- | --- |"]
        for name in sorted(doc["attributes"]):
            spec = doc["attributes"][name]
            out.append(f"| {name} | {spec.get('support', '')} | {cell(spec.get('details', ''))} |")
        out.append("")
    for title, key in (("Requirements", "requirements"), ("Notes", "notes")):
        if doc.get(key):
            out += [f"### {title}", ""] + [f"- {p}" for p in paragraphs(doc[key])] + [""]
    if doc.get("seealso"):
        out += ["### See also", ""]
        out += [f"- [{s['module']}](#{anchor(s['module'])})" for s in doc["seealso"] if "module" in s]
        out.append("")
    out += ["### Examples", "", "```yaml", data["examples"].strip(), "```", ""]
    if data.get("return"):
        out += ["### Return values", "", "| key | type | returned | description |", "| --- | --- | --- | --- |"]
        out += return_rows(data["return"])
        out.append("")
    return out


def render(docs: dict[str, Any]) -> str:
    names = sorted(docs)
    out = [
        "# spur.cluster modules",
        "",
        "<!-- Generated by tools/gen_module_docs.py from the modules' DOCUMENTATION, EXAMPLES and RETURN."
        " Do not edit by hand. -->",
        "",
        "The Ansible collection `spur.cluster` (in `collection/`) talks to Spur's controllers and agents through"
        " their HTTP probes and gRPC API. Every module takes the same connection options (`controllers`,"
        " `controller_names`, `grpc_hosts`, `timeout`).",
        "",
        "| module | what it does |",
        "| --- | --- |",
    ]
    out += [f"| [{n}](#{anchor(n)}) | {markup(docs[n]['doc']['short_description'])} |" for n in names]
    out.append("")
    for name in names:
        out += render_module(name, docs[name])
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when the committed page differs")
    parser.add_argument("--output", type=Path, default=OUTPUT, help="where to write (default docs/modules.md)")
    args = parser.parse_args(argv)
    text = render(read_docs())
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is out of date; run python tools/gen_module_docs.py", file=sys.stderr)
            return 1
        return 0
    args.output.write_text(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
