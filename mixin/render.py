#!/usr/bin/env python3
"""Renders the monitoring mixin (mixin/, jsonnet) into the files the project
ships, alerts/*.yml and dashboards/*.json, with Debian's `jsonnet` (python3,
stdlib only). The mixin is the one source: this only runs jsonnet on
mixin/render.jsonnet and writes what it returns.

    python3 mixin/render.py                 # rewrite alerts/ and dashboards/ (default _config)
    python3 mixin/render.py --check         # exit 1 when a shipped file differs
    python3 mixin/render.py --config '{"job": "rdma", "scrapeIntervalSeconds": 20}' --out /tmp/x

Before rendering, docs/rules.json (the exporter's rule table, `roce_exporter
docs rules`) is copied to mixin/rules.json, which the mixin reads: the mixin
directory stays self-contained for jsonnet-bundler, which vendors it alone.
"""

import argparse
import functools
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ENTRY = os.path.join(HERE, "render.jsonnet")
RULES_JSON = os.path.join(ROOT, "docs", "rules.json")
MIXIN_RULES_JSON = os.path.join(HERE, "rules.json")
# What a render takes at most (the whole mixin renders in a few seconds).
TIMEOUT = 300


class JsonnetMissing(Exception):
    """No jsonnet binary: Debian's package `jsonnet`."""


def jsonnet_binary():
    path = os.environ.get("JSONNET") or shutil.which("jsonnet")
    if not path:
        raise JsonnetMissing("jsonnet not found: install Debian's jsonnet (or set JSONNET)")
    return path


def run_jsonnet(args):
    r = subprocess.run([jsonnet_binary(), "-J", HERE, *args], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=TIMEOUT, cwd=HERE)
    if r.returncode != 0:
        raise RuntimeError(f"jsonnet {' '.join(args[:3])}: {r.stderr.strip()}")
    return r.stdout


@functools.lru_cache(maxsize=32)
def _render(config_json, for_override, part):
    """{path: {"text": ..., "data": ...}}: one jsonnet run for both forms."""
    args = [ENTRY, "--tla-code", f"config={config_json}",
            "--tla-code", f"part={json.dumps(part + '-both')}"]
    if for_override is not None:
        args += ["--tla-str", f"forOverride={for_override}"]
    return json.loads(run_jsonnet(args))


def render(config=None, for_override=None, part="all"):
    """{path under the repository: text} of the shipped files at `config`
    (_config overrides); `part`: "all", "alerts" (alerts/ only, without
    rendering the dashboards) or "dashboards". Each text ends in the
    newline `jsonnet -S -m` adds."""
    files = _render(json.dumps(config or {}, sort_keys=True), for_override, part)
    return {path: f["text"] + "\n" for path, f in files.items()}


def data(config=None, for_override=None, part="all"):
    """The same files as data: {path: the rule file's or dashboard's object}."""
    files = _render(json.dumps(config or {}, sort_keys=True), for_override, part)
    return {path: f["data"] for path, f in files.items()}


@functools.lru_cache(maxsize=8)
def _effective_config(config_json):
    code = ("local m = (import 'mixin.libsonnet') + { _config+:: %s };"
            "{ [k]: m._config[k] for k in std.objectFields(m._config) if k != 'ruleTable' }"
            % config_json)
    return json.loads(run_jsonnet(["-e", code]))


def effective_config(config=None):
    """The mixin's _config with `config` applied (the rule table left out)."""
    return dict(_effective_config(json.dumps(config or {}, sort_keys=True)))


def sync_rule_table():
    """Copies docs/rules.json to mixin/rules.json; True when it changed."""
    with open(RULES_JSON, encoding="utf-8") as f:
        text = f.read()
    try:
        with open(MIXIN_RULES_JSON, encoding="utf-8") as f:
            if f.read() == text:
                return False
    except FileNotFoundError:
        pass
    with open(MIXIN_RULES_JSON, "w", encoding="utf-8") as f:
        f.write(text)
    return True


def stale(files, root=ROOT):
    """The paths of `files` whose text differs from what is under root,
    and the shipped files of alerts/ and dashboards/ that no render makes."""
    out = []
    for path, text in files.items():
        try:
            with open(os.path.join(root, path), encoding="utf-8") as f:
                if f.read() == text:
                    continue
        except FileNotFoundError:
            pass
        out.append(path)
    for d, ext in (("alerts", ".yml"), ("dashboards", ".json")):
        folder = os.path.join(root, d)
        for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
            if name.endswith(ext) and f"{d}/{name}" not in files:
                out.append(f"{d}/{name}")
    return out


def write(files, root):
    for path, text in files.items():
        target = os.path.join(root, path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "w", encoding="utf-8") as f:
            f.write(text)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default="{}", help="_config overrides as JSON")
    p.add_argument("--out", default=ROOT, help="root under which alerts/ and dashboards/ go")
    p.add_argument("--check", action="store_true",
                   help="fail when mixin/rules.json or a shipped file is stale")
    args = p.parse_args(argv)
    config = json.loads(args.config)
    if args.check:
        with open(RULES_JSON, encoding="utf-8") as a, open(MIXIN_RULES_JSON, encoding="utf-8") as b:
            if a.read() != b.read():
                print("mixin/rules.json differs from docs/rules.json: run python3 mixin/render.py",
                      file=sys.stderr)
                return 1
        bad = stale(render(config), args.out)
        for path in bad:
            print(f"{path} is stale: run python3 mixin/render.py", file=sys.stderr)
        return 1 if bad else 0
    if os.path.abspath(args.out) == ROOT:
        sync_rule_table()
    write(render(config), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
