#!/usr/bin/env python3
"""Validates deploy/ against the Kubernetes API schemas, offline.

Every manifest under DEPLOY_DIR (base/, components/, overlays/) is checked,
document by document, with kubernetes-validate in strict mode (unknown
fields are errors) against the oldest Kubernetes the manifests support and
the newest the package knows. When a kustomize renderer is on this machine
(`kustomize`, or `kubectl kustomize`), every overlay is also rendered and
its output validated the same way, and the fleet's parts are cross-checked
(shard count, the inventory's shards, the dashboards ConfigMap). With
STAMPEDE_BIN=DIR (the built binaries), every --flag of every command line
and probe must be one the binary's --help lists. Custom
resources (PodMonitor) are checked against the fields the Prometheus
Operator's CRD defines that the manifests use.

Usage: validate_deploy.py DEPLOY_DIR [--require-render]
Exits 1 naming every file, document and field that is wrong.
"""

import glob
import os
import re
import shutil
import subprocess
import sys

import kubernetes_validate
import yaml

# Oldest supported: StatefulSet ordinals (GA in 1.31) and the pod-index
# label that becomes a server's --id.
VERSIONS = ["1.31.0", kubernetes_validate.latest_version()]

KUSTOMIZE_KINDS = {"Kustomization", "Component"}

# The Prometheus Operator's PodMonitor, as far as these manifests use it.
PODMONITOR_SPEC = {"selector", "podMetricsEndpoints", "namespaceSelector", "jobLabel"}
PODMONITOR_ENDPOINT = {"port", "path", "scheme", "interval", "tlsConfig", "scrapeTimeout"}
PODMONITOR_TLS = {"serverName", "ca", "cert", "keySecret", "insecureSkipVerify"}


def check_podmonitor(doc):
    errors = []
    if doc.get("apiVersion") != "monitoring.coreos.com/v1":
        errors.append(f"apiVersion {doc.get('apiVersion')!r} is not monitoring.coreos.com/v1")
    spec = doc.get("spec") or {}
    for key in set(spec) - PODMONITOR_SPEC:
        errors.append(f"spec.{key}: unknown field")
    if not isinstance(spec.get("selector"), dict):
        errors.append("spec.selector: required")
    endpoints = spec.get("podMetricsEndpoints")
    if not isinstance(endpoints, list) or not endpoints:
        errors.append("spec.podMetricsEndpoints: required, a list")
        endpoints = []
    for i, e in enumerate(endpoints):
        for key in set(e) - PODMONITOR_ENDPOINT:
            errors.append(f"spec.podMetricsEndpoints[{i}].{key}: unknown field")
        for key in set(e.get("tlsConfig") or {}) - PODMONITOR_TLS:
            errors.append(f"spec.podMetricsEndpoints[{i}].tlsConfig.{key}: unknown field")
    return errors


def validate_doc(doc, where):
    """Errors of one parsed document."""
    if not isinstance(doc, dict):
        return [f"{where}: not a mapping"]
    kind = doc.get("kind")
    if kind in KUSTOMIZE_KINDS:
        return []
    if kind == "PodMonitor":
        return [f"{where} (PodMonitor): {e}" for e in check_podmonitor(doc)]
    errors = []
    for version in VERSIONS:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            errors.append(f"{where}: no schema for {doc.get('apiVersion')} {kind} in Kubernetes {version}")
        except kubernetes_validate.ValidationError as e:
            path = ".".join(str(p) for p in e.path) or "(document)"
            errors.append(f"{where}: Kubernetes {version}: {path}: {e.message}")
        except Exception as e:  # a schema error, a malformed document
            errors.append(f"{where}: Kubernetes {version}: {e}")
    return errors


def load_docs(text, where):
    try:
        return [d for d in yaml.safe_load_all(text) if d is not None], []
    except yaml.YAMLError as e:
        return [], [f"{where}: not YAML: {e}"]


def check_kustomization(path):
    """The files a kustomization names must exist (they are validated as manifests)."""
    errors = []
    base = os.path.dirname(path)
    with open(path) as f:
        k = yaml.safe_load(f) or {}
    names = list(k.get("resources", [])) + list(k.get("components", []))
    names += [p["path"] for p in k.get("patches", []) if "path" in p]
    for g in k.get("configMapGenerator", []) + k.get("secretGenerator", []):
        names += [f.split("=", 1)[-1] for f in g.get("files", [])]
    for name in names:
        if not os.path.exists(os.path.join(base, name)):
            errors.append(f"{path}: names {name}, which does not exist")
    return errors


def renderer():
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    if shutil.which("kubectl"):
        probe = subprocess.run(["kubectl", "kustomize", "--help"], capture_output=True)
        if probe.returncode == 0:
            return ["kubectl", "kustomize"]
    return None


def cross_check(docs, where):
    """What the schemas cannot see: the fleet's parts must agree."""
    errors = []
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d.get("kind"), {})[d["metadata"]["name"]] = d
    job = by_kind.get("Job", {}).get("stampede-nodesim")
    inventory = by_kind.get("ConfigMap", {}).get("stampede-inventory")
    if job is None or inventory is None:
        return [f"{where}: the nodesim Job or the inventory ConfigMap is missing"]
    spec = job["spec"]
    args = spec["template"]["spec"]["containers"][0]["args"]
    shard = next((a for a in args if a.startswith("--shard=")), "")
    m = re.fullmatch(r"--shard=\$\(SHARD\)/(\d+)", shard)
    if not m:
        errors.append(f"{where}: nodesim's --shard is {shard!r}, not --shard=$(SHARD)/N")
    else:
        n = int(m.group(1))
        if spec.get("completions") != n or spec.get("parallelism") != n:
            errors.append(f"{where}: nodesim has --shard .../{n} but completions {spec.get('completions')} and parallelism {spec.get('parallelism')}")
        listed = inventory["data"]["inventory.toml"].count("[[nodesim]]")
        if listed != n:
            errors.append(f"{where}: the inventory lists {listed} nodesim shards, the Job runs {n}")
    dashboards = by_kind.get("ConfigMap", {}).get("stampede-dashboards")
    if dashboards is None or dashboards["metadata"].get("labels", {}).get("grafana_dashboard") != "1":
        errors.append(f"{where}: no stampede-dashboards ConfigMap labelled grafana_dashboard: \"1\"")
    return errors


def command_lines(doc):
    """Every command line a pod of `doc` runs: containers and exec probes."""
    spec = (doc.get("spec") or {}).get("template", {}).get("spec", {})
    for c in spec.get("containers", []) + spec.get("initContainers", []):
        if c.get("command"):
            yield c["command"] + c.get("args", [])
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            cmd = ((c.get(probe) or {}).get("exec") or {}).get("command")
            if cmd:
                yield cmd


def check_flags(docs, bin_dir, where):
    """Every --flag of a command line is one the binary takes (its --help)."""
    errors = []
    helps = {}
    for doc in docs:
        for line in command_lines(doc):
            exe = os.path.basename(line[0])
            args = line[1:]
            sub = [a for a in args[:1] if not a.startswith("-")]
            key = (exe, tuple(sub))
            if key not in helps:
                path = os.path.join(bin_dir, exe)
                if not os.path.exists(path):
                    errors.append(f"{where}: {exe} is not in STAMPEDE_BIN {bin_dir}")
                    helps[key] = None
                    continue
                out = subprocess.run([path] + sub + ["--help"], capture_output=True, text=True)
                helps[key] = out.stdout if out.returncode == 0 else None
                if out.returncode != 0:
                    errors.append(f"{where}: {exe} {' '.join(sub)} --help failed: {out.stderr.strip()}")
            text = helps[key]
            if text is None:
                continue
            for a in args:
                if not a.startswith("--"):
                    continue
                flag = a.split("=", 1)[0]
                if not re.search(re.escape(flag) + r"[ ,=\n<\]]", text):
                    errors.append(f"{where}: {doc['kind']}/{doc['metadata']['name']}: {' '.join([exe] + sub)} has no {flag}")
    return errors


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = argv[1]
    require_render = "--require-render" in argv
    errors = []
    files = sorted(glob.glob(os.path.join(root, "**", "*.yaml"), recursive=True))
    if not files:
        errors.append(f"{root}: no manifests")
    checked = 0
    for path in files:
        with open(path) as f:
            docs, errs = load_docs(f.read(), path)
        errors += errs
        for i, doc in enumerate(docs):
            if isinstance(doc, dict) and doc.get("kind") in KUSTOMIZE_KINDS:
                errors += check_kustomization(path)
                continue
            # A JSON 6902 patch file is a list of operations, not a resource.
            errors += validate_doc(doc, f"{path} document {i + 1}")
            checked += 1
    rendered = 0
    render = renderer()
    overlays = sorted(glob.glob(os.path.join(root, "overlays", "*", "kustomization.yaml")))
    if render is None:
        msg = "no kustomize renderer (kustomize or kubectl kustomize) here: overlays checked file by file only"
        if require_render:
            errors.append(msg)
        else:
            print(f"validate-deploy: {msg}")
    else:
        for k in overlays:
            overlay = os.path.dirname(k)
            out = subprocess.run(render + [overlay], capture_output=True, text=True)
            if out.returncode != 0:
                errors.append(f"{overlay}: {' '.join(render)} failed: {out.stderr.strip()}")
                continue
            docs, errs = load_docs(out.stdout, f"{overlay} (rendered)")
            errors += errs
            for doc in docs:
                name = f"{overlay} (rendered) {doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
                errors += validate_doc(doc, name)
                rendered += 1
            errors += cross_check(docs, f"{overlay} (rendered)")
            if os.environ.get("STAMPEDE_BIN"):
                errors += check_flags(docs, os.environ["STAMPEDE_BIN"], f"{overlay} (rendered)")
    if os.environ.get("STAMPEDE_BIN"):
        for path in files:
            with open(path) as f:
                docs, _ = load_docs(f.read(), path)
            docs = [d for d in docs if isinstance(d, dict) and d.get("kind") not in KUSTOMIZE_KINDS]
            errors += check_flags(docs, os.environ["STAMPEDE_BIN"], path)
    for e in errors:
        print(f"validate-deploy: {e}", file=sys.stderr)
    if errors:
        print(f"validate-deploy: FAILED, {len(errors)} problems", file=sys.stderr)
        return 1
    print(f"validate-deploy: ok: {checked} documents in {len(files)} files, "
          f"{rendered} rendered from {len(overlays) if render else 0} overlays, "
          f"against Kubernetes {', '.join(VERSIONS)} (strict)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
