#!/usr/bin/env python3
"""The JSON Schema of job files (`accelrt schema --json`), as an editor uses it.

    schema_json.py ACCELRT SOURCE_DIR

Checks that the output is a valid draft-07 JSON Schema, that every job file
under configs/ (and each one's resolved form, `accelrt check --print`)
validates, and that wrong jobs do not: an unknown key, a wrong type, a value
out of range, an unknown enum value, a missing required key, two keys a rule
forbids together.  Files are read the way YAML 1.2 editors read them
(yaml-language-server): `1e-8` is a number, `yes` is a string.
Exit 0 pass, 1 fail, 77 skipped (python3-jsonschema or python3-yaml absent).
"""
import copy
import json
import os
import re
import subprocess
import sys

try:
    import jsonschema
    import yaml
except ImportError as e:
    print(f"skipped: {e.name} is not installed (Debian: python3-jsonschema python3-yaml; "
          "ci/setup --tests installs them)")
    sys.exit(77)


class Yaml12Loader(yaml.SafeLoader):
    """PyYAML's safe loader with YAML 1.2's core schema for booleans and
    numbers (PyYAML follows 1.1: no exponent without a dot, yes/no/on/off as
    booleans), which is what editors and accelrt read."""


Yaml12Loader.yaml_implicit_resolvers = {
    k: [(tag, rx) for tag, rx in v if tag not in ("tag:yaml.org,2002:bool",
                                                   "tag:yaml.org,2002:float",
                                                   "tag:yaml.org,2002:int")]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
    list("tTfF"))
Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:int", re.compile(r"^[-+]?[0-9]+$"), list("-+0123456789"))
Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$"),
    list("-+0123456789."))


def load(text):
    return yaml.load(text, Loader=Yaml12Loader)


def main():
    accelrt, src = sys.argv[1], sys.argv[2]
    out = subprocess.run([accelrt, "schema", "--json"], capture_output=True, text=True)
    if out.returncode != 0:
        print(f"FAIL: accelrt schema --json exited {out.returncode}: {out.stderr}")
        return 1
    schema = json.loads(out.stdout)
    jsonschema.Draft7Validator.check_schema(schema)
    v = jsonschema.Draft7Validator(schema)
    bad = 0

    # Every job file of configs/: as written, and resolved.
    jobs = []
    for root, _, files in os.walk(os.path.join(src, "configs")):
        for f in sorted(files):
            if not f.endswith(".yaml"):
                continue
            path = os.path.join(root, f)
            rel = os.path.relpath(path, src)
            doc = load(open(path).read())
            if isinstance(doc, dict) and "factors" in doc:
                print(f"skip {rel}: a study file (its own format, docs/study.md)")
                continue
            errs = sorted(v.iter_errors(doc), key=str)
            for e in errs:
                print(f"FAIL {rel}: {'.'.join(map(str, e.absolute_path))}: {e.message}")
            bad += bool(errs)
            r = subprocess.run([accelrt, "check", path, "--print"], capture_output=True,
                               text=True, cwd=src)
            if r.returncode != 0:
                # Data files absent here (the shared data folder): only the
                # file itself was validated.
                print(f"ok   {rel} (its resolved form not checked: {r.stderr.strip()[:120]})")
            else:
                rerrs = list(v.iter_errors(load(r.stdout)))
                for e in rerrs:
                    print(f"FAIL {rel} resolved: {'.'.join(map(str, e.absolute_path))}: "
                          f"{e.message}")
                bad += bool(rerrs)
                print(f"ok   {rel}" + ("" if errs or rerrs else ", and resolved"))
            jobs.append(doc)
    if len(jobs) < 5:
        print(f"FAIL: only {len(jobs)} job files found under configs/")
        return 1

    # Wrong jobs, each one change from the quick-start job, each refused
    # at the key it is about.
    base = load(open(os.path.join(src, "configs", "quickstart.yaml")).read())
    assert not list(v.iter_errors(base))

    def wrong(what, where, change):
        nonlocal bad
        doc = copy.deepcopy(base)
        change(doc)
        errs = list(v.iter_errors(doc))
        paths = set()
        for e in errs:
            paths.add(".".join(map(str, e.absolute_path)))
            for sub in e.context or []:
                paths.add(".".join(map(str, sub.absolute_path)))
        if not errs:
            print(f"FAIL {what}: validates")
            bad += 1
        elif where not in paths:
            print(f"FAIL {what}: errors at {sorted(paths)}, none at {where}")
            bad += 1
        else:
            print(f"ok   {what}: refused ({errs[0].message[:70]})")

    wrong("an unknown key", "train", lambda d: d["train"].update(bacth=64))
    wrong("an unknown top-level key", "", lambda d: d.update(trian={}))
    wrong("a string for an integer", "train.batch", lambda d: d["train"].update(batch="many"))
    wrong("a number for a mapping", "model.input", lambda d: d["model"].update(input=5))
    wrong("a value out of range", "train.batch", lambda d: d["train"].update(batch=0))
    wrong("a fraction out of range", "model.layers.1.sparse.active",
          lambda d: d["model"]["layers"][1].update(sparse={"active": 1.5}))
    wrong("an unknown enum value", "model.layers.0.activation",
          lambda d: d["model"]["layers"][0].update(activation="relux"))
    wrong("a bad device", "device", lambda d: d.update(device="gpu"))
    wrong("a missing required key", "model", lambda d: d["model"].pop("input"))
    wrong("an unknown optimizer", "train.optimizer",
          lambda d: d["train"].update(optimizer={"adamw": {"lr": 1}}))
    wrong("model and jobs together", "", lambda d: d.update(jobs=[]))
    wrong("train and generate together", "data",
          lambda d: d["data"].update(train="x.txt"))
    # The forms the job file allows are allowed.
    for what, change in [
            ("optimizer as a word", lambda d: d["train"].update(optimizer="sgd")),
            ("a boolean enum", lambda d: d["data"].update(normalize=False)),
            ("a quoted boolean enum", lambda d: d["data"].update(normalize="false")),
            ("a size", lambda d: d.update(runtime={"memory": "8GiB"})),
            ("a size in bytes", lambda d: d.update(runtime={"memory": 1000000})),
            ("a percentage", lambda d: d.update(runtime={"memory": "90%"}))]:
        doc = copy.deepcopy(base)
        change(doc)
        errs = list(v.iter_errors(doc))
        if errs:
            print(f"FAIL {what}: refused: {errs[0].message}")
            bad += 1
    if bad:
        print(f"{bad} problems")
        return 1
    print(f"ok: {len(jobs)} job files validate, wrong ones do not")
    return 0


if __name__ == "__main__":
    sys.exit(main())
