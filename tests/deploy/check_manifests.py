#!/usr/bin/env python3
"""check_manifests.py - deploy/'s kustomize trees render, and every rendered
object is what the router and the member clusters need.

Checks:
  - `kubectl kustomize` renders the router base and example overlay, the
    member bundle (base), its gvisor overlay, and the base with the
    pss-baseline component;
  - every object: apiVersion/kind of a known API, a DNS name, a namespace
    exactly when the kind is namespaced, valid label keys and values;
  - the router Deployment: 3 replicas, readiness /readyz and liveness
    /healthz on a declared port, a preStop sleep and a
    terminationGracePeriodSeconds that covers it plus the router's drain
    (DRAIN_MS read from router/src/main.c), anti-affinity, resources,
    non-root, read-only root filesystem, no privilege escalation, all
    capabilities dropped, seccomp RuntimeDefault, no service account token,
    every mount backed by a volume and every ConfigMap/Secret volume by an
    object of the overlay or of secrets.example.yaml, the policy mounted as a
    directory (subPath never updates, so hot reload would not see changes),
    the config ConfigMap hashed (a change rolls) and the policy one not
    (updated in place); Service, PDB, HPA and NetworkPolicy point at the
    Deployment's pods; Prometheus annotations name the container port;
  - the overlay renders only with the sandbox agent's key, which it
    generates a Secret from (agent-key/current: the operator's, never in
    git; a copy of the overlay with a key of its own is rendered), hashed
    so that a new key rolls the Deployment;
  - the router config of the overlay, laid out as the pod mounts it (with the
    Secret templates' placeholder files and the generated key), passes
    `fedrouter config check`, and its policy `fedrouter policy check`; its
    clusters' namespace is the member bundle's namespace; its agent group
    uses the port the member bundle lets in and the key file of the mounted
    Secret; and it sets every setting the config scripts/demo writes does
    (config_features.py): the example enables every feature of the demo;
  - the member bundle: Pod Security restricted labels, the Role in the sandbox
    namespace grants pods/proxy and get on the tenants' Secrets by name, and
    nothing the router does not use (and no ClusterRole
    touches Secrets), a deny-all NetworkPolicy, no egress allowed anywhere,
    ingress only to the agent port 49983 except from the gateway's pods, a
    ResourceQuota and a LimitRange, the gvisor overlay adds RuntimeClass
    gvisor (handler runsc), the pss-baseline component relaxes only enforce;
  - the member bundle's fedrouter-gateway (namespace fedrouter-gateway): a
    Deployment of 2 (readiness /readyz, liveness /healthz on declared ports,
    anti-affinity, no ready replica taken away by a rollout, a grace period
    covering the gateway's shutdown delay and drain read from
    gateway/src/main.c, non-root, read-only root, drop ALL, seccomp, every
    Secret and ConfigMap volume in the bundle or in
    gateway-secrets.example.yaml), a Service and a PodDisruptionBudget
    selecting its pods, a Role granting exactly get/list/watch on pods of the
    sandbox namespace to its own ServiceAccount, and the NetworkPolicy
    letting exactly its pods into sandboxes;
  - deploy/rbac.yaml grants exactly what the member bundle's RBAC grants.

Usage: check_manifests.py REPO_ROOT [PATH/TO/fedrouter]
  Without fedrouter the config check is skipped (said so on stdout).
Exit: 0 all good, 1 problems (each printed).
"""
import copy
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

sys.dont_write_bytecode = True   # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import config_features  # noqa: E402
import example_overlay  # noqa: E402

AGENT_PORT = 49983
CODE_INTERPRETER_PORT = 49999
problems = []

NAMESPACED = {
    ("v1", "ServiceAccount"), ("v1", "Secret"), ("v1", "ConfigMap"), ("v1", "Service"),
    ("v1", "ResourceQuota"), ("v1", "LimitRange"), ("apps/v1", "Deployment"),
    ("policy/v1", "PodDisruptionBudget"), ("autoscaling/v2", "HorizontalPodAutoscaler"),
    ("networking.k8s.io/v1", "NetworkPolicy"), ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
}
CLUSTER = {
    ("v1", "Namespace"), ("rbac.authorization.k8s.io/v1", "ClusterRole"),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"), ("node.k8s.io/v1", "RuntimeClass"),
}
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


def problem(msg):
    problems.append(msg)


def render(path):
    """kubectl kustomize PATH -> list of objects (None when it fails)."""
    p = subprocess.run(["kubectl", "kustomize", path], capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        problem("kubectl kustomize %s failed: %s" % (path, p.stderr.strip()[-800:]))
        return None
    return [d for d in yaml.safe_load_all(p.stdout) if d]


def objname(o):
    return "%s/%s" % (o.get("kind"), o.get("metadata", {}).get("name"))


def find(objs, kind, name=None):
    return [o for o in objs if o.get("kind") == kind and (name is None or o["metadata"]["name"] == name)]


def check_object(where, o, base=False):
    gvk = (o.get("apiVersion"), o.get("kind"))
    meta = o.get("metadata") or {}
    name = meta.get("name", "")
    what = "%s: %s" % (where, objname(o))
    if gvk not in NAMESPACED and gvk not in CLUSTER:
        problem("%s: unexpected apiVersion/kind %s %s" % (what, gvk[0], gvk[1]))
        return
    if not DNS_SUBDOMAIN.match(name) or (gvk == ("v1", "Namespace") and not DNS_LABEL.match(name)):
        problem("%s: %r is not a valid name" % (what, name))
    if gvk in NAMESPACED and not meta.get("namespace") and not base:
        problem("%s: namespaced kind without a namespace (would land in the applier's current one)" % what)
    if gvk in CLUSTER and meta.get("namespace"):
        problem("%s: cluster-scoped kind with a namespace" % what)
    for k, v in (meta.get("labels") or {}).items():
        prefix, _, lname = k.rpartition("/")
        if (prefix and not DNS_SUBDOMAIN.match(prefix)) or not LABEL_NAME.match(lname):
            problem("%s: bad label key %r" % (what, k))
        if not isinstance(v, str) or not LABEL_VALUE.match(v):
            problem("%s: bad label value %r=%r" % (what, k, v))
    for k, v in (meta.get("annotations") or {}).items():
        if not isinstance(v, str):
            problem("%s: annotation %s is not a string: %r" % (what, k, v))


def matches(selector, labels):
    ml = (selector or {}).get("matchLabels") or {}
    return bool(ml) and all(labels.get(k) == v for k, v in ml.items())


def c_define_ms(root, path, name, what, fallback):
    """The number a `#define <name> N` in <path> gives, or <fallback> after
    a problem saying <what> is unknown."""
    with open(os.path.join(root, path), encoding="utf-8") as f:
        m = re.search(r"#define\s+%s\s+(\d+)" % name, f.read())
    if not m:
        problem("%s: no %s: %s" % (path, name, what))
        return fallback
    return int(m.group(1))


def drain_ms(root):
    return c_define_ms(root, "router/src/main.c", "DRAIN_MS", "how long does SIGTERM drain?", 30000)


def shutdown_delay_ms(root):
    """The overlay config's shutdown_delay_ms, else the router's default."""
    with open(os.path.join(root, "deploy/router/overlays/example/fedrouter.conf"), encoding="utf-8") as f:
        m = re.search(r"(?m)^\s*shutdown_delay_ms\s*=\s*(\d+)\s*;", f.read())
    if m:
        return int(m.group(1))
    return c_define_ms(root, "config/src/config.c", "DEFAULT_SHUTDOWN_DELAY_MS",
                       "how long does /readyz fail before the drain?", 2000)


def check_router(root, objs, secret_objs):
    where = "router overlay"
    deps = find(objs, "Deployment")
    if len(deps) != 1:
        problem("%s: want one Deployment, got %d" % (where, len(deps)))
        return None
    d = deps[0]
    ns = d["metadata"]["namespace"]
    spec = d["spec"]
    tmpl = spec["template"]
    pod = tmpl["spec"]
    labels = tmpl["metadata"].get("labels") or {}
    if spec.get("replicas") != 3:
        problem("%s: Deployment replicas %r, want 3" % (where, spec.get("replicas")))
    if not matches(spec.get("selector"), labels):
        problem("%s: Deployment selector does not match its pod labels" % where)
    ru = (spec.get("strategy") or {}).get("rollingUpdate") or {}
    if ru.get("maxUnavailable") not in (0, "0", "0%"):
        problem("%s: rolling updates should not take a ready replica away before a new one is ready "
                "(maxUnavailable %r)" % (where, ru.get("maxUnavailable")))
    cs = pod.get("containers") or []
    c = next((x for x in cs if x.get("name") == "fedrouter"), None)
    if c is None:
        problem("%s: no container named fedrouter" % where)
        return None
    ports = {p.get("name"): p.get("containerPort") for p in c.get("ports") or []}

    def probe(kind, path):
        pr = c.get(kind) or {}
        hg = pr.get("httpGet") or {}
        if hg.get("path") != path:
            problem("%s: %s must GET %s (got %r)" % (where, kind, path, hg.get("path")))
        port = hg.get("port")
        if port not in ports and port not in ports.values():
            problem("%s: %s port %r is not a container port (%s)" % (where, kind, port, ports))
    probe("readinessProbe", "/readyz")
    probe("livenessProbe", "/healthz")

    # Shutdown: preStop sleep, then SIGTERM and the router's drain.
    cmd = (((c.get("lifecycle") or {}).get("preStop") or {}).get("exec") or {}).get("command") or []
    sleep_s = None
    if len(cmd) == 2 and cmd[0] == "sleep" and cmd[1].isdigit():
        sleep_s = int(cmd[1])
    elif (((c.get("lifecycle") or {}).get("preStop") or {}).get("sleep") or {}).get("seconds"):
        sleep_s = c["lifecycle"]["preStop"]["sleep"]["seconds"]
    if sleep_s is None:
        problem("%s: no preStop sleep: Services would still send connections to a stopping replica" % where)
        sleep_s = 0
    # SIGTERM: /readyz fails for shutdown_delay_ms, then the drain.
    drain_s = (shutdown_delay_ms(root) + drain_ms(root)) / 1000.0
    grace = pod.get("terminationGracePeriodSeconds", 30)
    if grace < sleep_s + drain_s:
        problem("%s: terminationGracePeriodSeconds %s < preStop %s s + shutdown delay and drain %s s: the kubelet would "
                "SIGKILL replicas with requests in flight" % (where, grace, sleep_s, drain_s))
    if grace > sleep_s + drain_s + 30:
        problem("%s: terminationGracePeriodSeconds %s is far past preStop + drain (%s s)"
                % (where, grace, sleep_s + drain_s))

    aff = (pod.get("affinity") or {}).get("podAntiAffinity") or {}
    terms = [t.get("podAffinityTerm", t) for t in
             aff.get("preferredDuringSchedulingIgnoredDuringExecution", []) +
             aff.get("requiredDuringSchedulingIgnoredDuringExecution", [])]
    if not any(matches(t.get("labelSelector"), labels) and t.get("topologyKey") for t in terms):
        problem("%s: no pod anti-affinity over the router's own pods" % where)
    res = c.get("resources") or {}
    if not (res.get("requests") or {}).get("cpu") or not (res.get("requests") or {}).get("memory") \
            or not (res.get("limits") or {}).get("memory"):
        problem("%s: resources need cpu and memory requests and a memory limit: %s" % (where, res))
    psc = pod.get("securityContext") or {}
    csc = c.get("securityContext") or {}
    if not psc.get("runAsNonRoot") or not isinstance(psc.get("runAsUser"), int) or psc.get("runAsUser") == 0:
        problem("%s: pod must run as a numeric non-root user: %s" % (where, psc))
    if (psc.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
        problem("%s: seccompProfile RuntimeDefault missing" % where)
    if csc.get("readOnlyRootFilesystem") is not True or csc.get("allowPrivilegeEscalation") is not False \
            or (csc.get("capabilities") or {}).get("drop") != ["ALL"]:
        problem("%s: container securityContext needs readOnlyRootFilesystem, no privilege escalation, "
                "drop ALL: %s" % (where, csc))
    if pod.get("automountServiceAccountToken") is not False:
        problem("%s: the router needs no service account token (automountServiceAccountToken: false)" % where)

    vols = {v["name"]: v for v in pod.get("volumes") or []}
    mounts = {m["name"]: m for m in c.get("volumeMounts") or []}
    for m in mounts.values():
        if m["name"] not in vols:
            problem("%s: mount %s has no volume" % (where, m["name"]))
        if m.get("subPath"):
            problem("%s: mount %s uses subPath: the kubelet never updates it" % (where, m["name"]))
    if "/tmp" not in [m["mountPath"] for m in mounts.values()]:
        problem("%s: read-only root filesystem but no writable /tmp" % where)
    cms = {o["metadata"]["name"] for o in find(objs, "ConfigMap")}
    secrets = {o["metadata"]["name"] for o in find(objs, "Secret") + find(secret_objs, "Secret")}
    for v in vols.values():
        if "configMap" in v and v["configMap"]["name"] not in cms:
            problem("%s: volume %s: no ConfigMap %s in the overlay" % (where, v["name"], v["configMap"]["name"]))
        if "secret" in v and v["secret"]["secretName"] not in secrets:
            problem("%s: volume %s: no Secret %s in the overlay or secrets.example.yaml"
                    % (where, v["name"], v["secret"]["secretName"]))
    for o in find(secret_objs, "Secret"):
        if o["metadata"].get("namespace") != ns:
            problem("secrets.example.yaml: %s is not in the router's namespace %s" % (objname(o), ns))
    cfg = vols.get("config", {}).get("configMap", {}).get("name", "")
    pol = vols.get("policy", {}).get("configMap", {}).get("name", "")
    if not re.match(r"^fedrouter-config-[a-z0-9]{10}$", cfg):
        problem("%s: the config ConfigMap %r carries no content hash: a config change would not "
                "roll the Deployment (the router reads its config only at start)" % (where, cfg))
    if pol != "fedrouter-policy":
        problem("%s: the policy ConfigMap should keep a fixed name (updated in place, hot-reloaded), "
                "got %r" % (where, pol))
    key = vols.get("agent-key", {}).get("secret", {}).get("secretName", "")
    if not re.match(r"^fedrouter-agent-key-[a-z0-9]{10}$", key):
        problem("%s: the agent key's Secret %r is not generated with a content hash: a new key would not roll "
                "the Deployment (the router reads the key only at start)" % (where, key))

    ann = tmpl["metadata"].get("annotations") or {}
    if ann.get("prometheus.io/scrape") != "true" or ann.get("prometheus.io/path") != "/metrics" \
            or ann.get("prometheus.io/port") not in [str(p) for p in ports.values()]:
        problem("%s: Prometheus annotations must scrape /metrics on a container port: %s" % (where, ann))
    for s in find(objs, "Service"):
        if s["spec"].get("selector") != {k: labels.get(k) for k in s["spec"].get("selector", {})}:
            problem("%s: Service %s selects other pods" % (where, s["metadata"]["name"]))
        for p in s["spec"].get("ports", []):
            if p.get("targetPort") not in ports and p.get("targetPort") not in ports.values():
                problem("%s: Service port %s targets %r, not a container port" % (where, p.get("port"), p.get("targetPort")))
    for kind in ("PodDisruptionBudget", "NetworkPolicy"):
        got = find(objs, kind)
        if not got:
            problem("%s: no %s" % (where, kind))
        for o in got:
            sel = o["spec"].get("selector") if kind == "PodDisruptionBudget" else o["spec"].get("podSelector")
            if not matches(sel, labels):
                problem("%s: %s %s does not select the router pods" % (where, kind, o["metadata"]["name"]))
    for o in find(objs, "PodDisruptionBudget"):
        mu = o["spec"].get("maxUnavailable")
        if mu is None or (isinstance(mu, int) and mu >= spec.get("replicas", 0)):
            problem("%s: PDB should keep replicas up (maxUnavailable %r)" % (where, mu))
    hpas = find(objs, "HorizontalPodAutoscaler")
    if len(hpas) != 1:
        problem("%s: want one HorizontalPodAutoscaler" % where)
    for h in hpas:
        ref = h["spec"]["scaleTargetRef"]
        if ref.get("kind") != "Deployment" or ref.get("name") != d["metadata"]["name"]:
            problem("%s: HPA scales %s, not the router Deployment" % (where, ref))
        if h["spec"].get("minReplicas", 1) < 2:
            problem("%s: HPA minReplicas below 2 loses the HA" % where)
    return d


def write_volume(dirpath, obj):
    """Lays out a ConfigMap's / Secret's keys as the kubelet would, through
    the ..data symlink of its atomic writer."""
    os.makedirs(dirpath, exist_ok=True)
    data = dict(obj.get("data") or {})
    if obj.get("kind") == "Secret":
        import base64
        data = {k: base64.b64decode(v).decode() for k, v in data.items()}
        data.update(obj.get("stringData") or {})
    ts = os.path.join(dirpath, "..2026_01_01_00_00_00.000000001")
    os.makedirs(ts)
    for k, v in data.items():
        with open(os.path.join(ts, k), "w", encoding="utf-8") as f:
            f.write(v)
        os.symlink(os.path.join("..data", k), os.path.join(dirpath, k))
    os.symlink(os.path.basename(ts), os.path.join(dirpath, "..data"))


def check_router_config(objs, secret_objs, dep, fedrouter, member_ns):
    """Materializes the pod's config mounts and runs the router's checks."""
    c = next(x for x in dep["spec"]["template"]["spec"]["containers"] if x["name"] == "fedrouter")
    args = c.get("args") or []
    if "--config" not in args:
        problem("router overlay: container args %s do not name --config" % args)
        return
    conf_path = args[args.index("--config") + 1]
    vols = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    by_name = {(o["kind"], o["metadata"]["name"]): o for o in objs + secret_objs}
    tmp = tempfile.mkdtemp(prefix="fr-manifests-")
    try:
        root = os.path.join(tmp, "root")
        for m in c.get("volumeMounts") or []:
            v = vols.get(m["name"], {})
            src = None
            if "configMap" in v:
                src = by_name.get(("ConfigMap", v["configMap"]["name"]))
            elif "secret" in v:
                src = by_name.get(("Secret", v["secret"]["secretName"]))
            if src is not None:
                write_volume(root + m["mountPath"], src)
        conf = root + conf_path
        if not os.path.exists(conf):
            problem("router overlay: %s is not in any mounted ConfigMap" % conf_path)
            return
        with open(conf, encoding="utf-8") as f:
            text = f.read()
        for ns in re.findall(r'namespace\s*=\s*"([^"]*)"', text):
            if ns != member_ns:
                problem("router overlay: a cluster's namespace %r is not the member bundle's %r" % (ns, member_ns))
        if fedrouter is None:
            print("check_manifests: no fedrouter binary given: config check skipped")
            return
        p = subprocess.run([fedrouter, "config", "check", conf], capture_output=True, text=True, timeout=30)
        if p.returncode != 0:
            problem("router overlay: fedrouter config check %s: %s" % (conf_path, (p.stdout + p.stderr).strip()))
        else:
            print("check_manifests: " + p.stdout.strip().replace(root, ""))
        m = re.search(r'^\s*policy\s*=\s*"([^"]*)"', text, re.M)
        if m:
            pol = os.path.normpath(os.path.join(os.path.dirname(conf), m.group(1)))
            p = subprocess.run([fedrouter, "policy", "check", pol, "--config", conf],
                               capture_output=True, text=True, timeout=30)
            if p.returncode != 0:
                problem("router overlay: fedrouter policy check: %s" % (p.stdout + p.stderr).strip())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def check_config_features(root, objs, secret_objs, dep):
    """The overlay's config as the pod mounts it: its agent group agrees with
    the member bundle and the mounted key, and it sets everything the
    demo's config does."""
    tmp = tempfile.mkdtemp(prefix="fr-features-")
    try:
        c = next(x for x in dep["spec"]["template"]["spec"]["containers"] if x["name"] == "fedrouter")
        args = c.get("args") or []
        conf_path = args[args.index("--config") + 1] if "--config" in args else None
        vols = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
        by_name = {(o["kind"], o["metadata"]["name"]): o for o in objs + secret_objs}
        mroot = os.path.join(tmp, "root")
        for m in c.get("volumeMounts") or []:
            v = vols.get(m["name"], {})
            src = by_name.get(("ConfigMap", v["configMap"]["name"])) if "configMap" in v else \
                by_name.get(("Secret", v["secret"]["secretName"])) if "secret" in v else None
            if src is not None:
                write_volume(mroot + m["mountPath"], src)
        if conf_path is None or not os.path.exists(mroot + conf_path):
            return   # check_router_config said why
        try:
            cfg = config_features.read_config(mroot + conf_path)
            agent = cfg.get("agent")
            if not isinstance(agent, dict):
                problem("router overlay: fedrouter.conf has no agent group: sandboxes would have no streaming, "
                        "processes, files, shells, secrets or E2B")
            else:
                if agent.get("port", str(AGENT_PORT)) != str(AGENT_PORT):
                    problem("router overlay: agent.port %s is not the port deploy/member's NetworkPolicy lets in "
                            "(%d)" % (agent.get("port"), AGENT_PORT))
                kf = os.path.normpath(os.path.join(os.path.dirname(conf_path), agent.get("key_file", "")))
                mount = next((m["mountPath"] for m in c.get("volumeMounts") or [] if m["name"] == "agent-key"), None)
                if mount is None or os.path.dirname(kf) != mount:
                    problem("router overlay: agent.key_file %s is not in the agent-key Secret's mount %s"
                            % (kf, mount))
            missing = config_features.missing_features(config_features.demo_config(root, tmp), mroot + conf_path)
            for msg in config_features.describe(missing, "deploy/router/overlays/example/fedrouter.conf"):
                problem("router overlay: " + msg)
            if not missing:
                print("check_manifests: the example config sets every setting of the demo's")
        except config_features.ConfigError as e:
            problem("router overlay: comparing with the demo's config: %s" % e)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def rules_of(objs, kind):
    out = set()
    for o in find(objs, kind):
        for r in o.get("rules") or []:
            for g in r.get("apiGroups") or [""]:
                for res in r.get("resources") or []:
                    for v in r.get("verbs") or []:
                        out.add((o["metadata"]["name"], g, res, v))
    return out


GATEWAY_NS = "fedrouter-gateway"


def is_gateway(o):
    """The gateway's objects: in its namespace, or named after it (its Role,
    RoleBinding and NetworkPolicy live in the sandbox namespace)."""
    m = o.get("metadata") or {}
    return m.get("namespace") == GATEWAY_NS or m.get("name") == GATEWAY_NS or \
        (o.get("kind") == "NetworkPolicy" and "gateway" in m.get("name", ""))


def c_default(root, flag, fallback):
    """The default of a gateway flag, from `int64_t ... <var> = N` in main.c."""
    var = {"--shutdown-delay-ms": "delay_ms", "--drain-timeout-s": "drain_s"}[flag]
    with open(os.path.join(root, "gateway/src/main.c"), encoding="utf-8") as f:
        m = re.search(r"\b%s = (\d+)" % var, f.read())
    if not m:
        problem("gateway/src/main.c: no default for %s" % flag)
        return fallback
    return int(m.group(1))


def check_gateway(root, objs, secret_objs, sandbox_ns):
    where = "member bundle: gateway"
    nss = [o for o in find(objs, "Namespace") if o["metadata"]["name"] == GATEWAY_NS]
    if len(nss) != 1:
        problem("%s: no Namespace %s" % (where, GATEWAY_NS))
    deps = [d for d in find(objs, "Deployment") if d["metadata"].get("namespace") == GATEWAY_NS]
    if len(deps) != 1:
        problem("%s: want one Deployment in %s, got %d" % (where, GATEWAY_NS, len(deps)))
        return
    d = deps[0]
    spec, pod = d["spec"], d["spec"]["template"]["spec"]
    labels = d["spec"]["template"]["metadata"].get("labels") or {}
    if spec.get("replicas", 1) < 2:
        problem("%s: replicas %r, want at least 2" % (where, spec.get("replicas")))
    if not matches(spec.get("selector"), labels):
        problem("%s: Deployment selector does not match its pod labels" % where)
    if ((spec.get("strategy") or {}).get("rollingUpdate") or {}).get("maxUnavailable") not in (0, "0", "0%"):
        problem("%s: a rollout must not take a ready replica away first (maxUnavailable 0)" % where)
    cs = pod.get("containers") or []
    if len(cs) != 1:
        problem("%s: want one container" % where)
        return
    c = cs[0]
    ports = {p.get("name"): p.get("containerPort") for p in c.get("ports") or []}
    for kind, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        hg = (c.get(kind) or {}).get("httpGet") or {}
        if hg.get("path") != path or (hg.get("port") not in ports and hg.get("port") not in ports.values()):
            problem("%s: %s must GET %s on a container port (got %s)" % (where, kind, path, hg))
    args = c.get("args") or []
    flag = lambda name: [a.split("=", 1)[1] for a in args if a.startswith(name + "=")]  # noqa: E731
    if not flag("--cluster") or flag("--namespace") != [sandbox_ns] or len(flag("--key-file")) < 2 or \
            not flag("--tls-cert") or not flag("--tls-key") or "--insecure-plaintext" in args:
        problem("%s: args need --cluster, --namespace=%s, two --key-file (current, previous) and TLS: %s"
                % (where, sandbox_ns, args))
    delay_ms = int((flag("--shutdown-delay-ms") or [c_default(root, "--shutdown-delay-ms", 5000)])[0])
    drain_s = int((flag("--drain-timeout-s") or [c_default(root, "--drain-timeout-s", 60)])[0])
    grace = pod.get("terminationGracePeriodSeconds", 30)
    if grace < delay_ms / 1000.0 + drain_s or grace > delay_ms / 1000.0 + drain_s + 30:
        problem("%s: terminationGracePeriodSeconds %s should cover the shutdown delay %s ms and the drain %s s "
                "(and not much more)" % (where, grace, delay_ms, drain_s))
    aff = (pod.get("affinity") or {}).get("podAntiAffinity") or {}
    terms = [t.get("podAffinityTerm", t) for t in
             aff.get("preferredDuringSchedulingIgnoredDuringExecution", []) +
             aff.get("requiredDuringSchedulingIgnoredDuringExecution", [])]
    if not any(matches(t.get("labelSelector"), labels) and t.get("topologyKey") for t in terms):
        problem("%s: no pod anti-affinity over its own pods" % where)
    psc, csc = pod.get("securityContext") or {}, c.get("securityContext") or {}
    if not psc.get("runAsNonRoot") or not isinstance(psc.get("runAsUser"), int) or psc.get("runAsUser") == 0 or \
            (psc.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
        problem("%s: pod must run as a numeric non-root user with seccomp RuntimeDefault: %s" % (where, psc))
    if csc.get("readOnlyRootFilesystem") is not True or csc.get("allowPrivilegeEscalation") is not False \
            or (csc.get("capabilities") or {}).get("drop") != ["ALL"]:
        problem("%s: container securityContext needs readOnlyRootFilesystem, no privilege escalation, drop ALL"
                % where)
    res = c.get("resources") or {}
    if not (res.get("requests") or {}).get("memory") or not (res.get("limits") or {}).get("memory"):
        problem("%s: needs a memory request and limit" % where)
    if pod.get("automountServiceAccountToken") is False:
        problem("%s: the gateway reads its cluster with its service account token" % where)
    sas = [o["metadata"]["name"] for o in find(objs, "ServiceAccount") if o["metadata"].get("namespace") == GATEWAY_NS]
    if pod.get("serviceAccountName") not in sas:
        problem("%s: serviceAccountName %r is not a ServiceAccount of %s" % (where, pod.get("serviceAccountName"),
                                                                          GATEWAY_NS))
    vols = {v["name"]: v for v in pod.get("volumes") or []}
    secrets = {o["metadata"]["name"] for o in find(objs, "Secret") + find(secret_objs, "Secret")
               if o["metadata"].get("namespace") == GATEWAY_NS}
    cms = {o["metadata"]["name"] for o in find(objs, "ConfigMap") if o["metadata"].get("namespace") == GATEWAY_NS}
    for m in c.get("volumeMounts") or []:
        if m["name"] not in vols or m.get("subPath"):
            problem("%s: mount %s without a volume or with subPath (never updated)" % (where, m["name"]))
    for v in vols.values():
        if "secret" in v and v["secret"]["secretName"] not in secrets:
            problem("%s: volume %s: no Secret %s in gateway-secrets.example.yaml" % (where, v["name"],
                                                                                   v["secret"]["secretName"]))
        if "configMap" in v and v["configMap"]["name"] not in cms:
            problem("%s: volume %s: no ConfigMap %s" % (where, v["name"], v["configMap"]["name"]))
    for e in c.get("env") or []:
        ref = (e.get("valueFrom") or {}).get("configMapKeyRef")
        if ref and ref.get("name") not in cms:
            problem("%s: env %s reads ConfigMap %s, not in the bundle" % (where, e["name"], ref.get("name")))
    for o in find(secret_objs, "Secret"):
        if o["metadata"].get("namespace") != GATEWAY_NS:
            problem("gateway-secrets.example.yaml: %s is not in %s" % (objname(o), GATEWAY_NS))
    svcs = [o for o in find(objs, "Service") if o["metadata"].get("namespace") == GATEWAY_NS]
    pdbs = [o for o in find(objs, "PodDisruptionBudget") if o["metadata"].get("namespace") == GATEWAY_NS]
    if len(svcs) != 1 or len(pdbs) != 1:
        problem("%s: want one Service and one PodDisruptionBudget, got %d and %d" % (where, len(svcs), len(pdbs)))
    for sv in svcs:
        if not matches({"matchLabels": sv["spec"].get("selector")}, labels):
            problem("%s: Service %s does not select the gateway's pods" % (where, sv["metadata"]["name"]))
        for p in sv["spec"].get("ports", []):
            if p.get("targetPort") not in ports and p.get("targetPort") not in ports.values():
                problem("%s: Service port %s targets %r, not a container port" % (where, p.get("port"),
                                                                                  p.get("targetPort")))
    for o in pdbs:
        mu = o["spec"].get("maxUnavailable")
        if not matches(o["spec"].get("selector"), labels) or mu is None or \
                (isinstance(mu, int) and mu >= spec.get("replicas", 0)):
            problem("%s: the PDB must select its pods and keep one up (%s)" % (where, o["spec"]))
    # RBAC: get/list/watch pods of the sandbox namespace, nothing else.
    roles = [r for r in find(objs, "Role") if r["metadata"]["name"] == GATEWAY_NS]
    grants = {(r["metadata"].get("namespace"), g, res, v) for r in roles for rule in r.get("rules") or []
              for g in rule.get("apiGroups") or [""] for res in rule.get("resources") or []
              for v in rule.get("verbs") or []}
    want = {(sandbox_ns, "", "pods", v) for v in ("get", "list", "watch")}
    if grants != want:
        problem("%s: its Role must grant exactly get/list/watch on pods of %s, grants %s" % (where, sandbox_ns,
                                                                                          sorted(grants)))
    if any(r["metadata"]["name"] == GATEWAY_NS for r in find(objs, "ClusterRole") + find(objs, "ClusterRoleBinding")):
        problem("%s: no cluster-wide rights" % where)
    binds = [b for b in find(objs, "RoleBinding") if b["metadata"]["name"] == GATEWAY_NS]
    if len(binds) != 1 or binds[0]["roleRef"].get("name") != GATEWAY_NS or \
            binds[0].get("subjects") != [{"kind": "ServiceAccount", "name": pod.get("serviceAccountName"),
                                         "namespace": GATEWAY_NS}]:
        problem("%s: its RoleBinding must bind its Role to its ServiceAccount only: %s" % (where, binds))
    # The network: exactly its pods may connect to sandboxes (any port).
    gnps = [n for n in find(objs, "NetworkPolicy") if is_gateway(n)]
    ok = False
    for n in gnps:
        for rule in n["spec"].get("ingress") or []:
            for peer in rule.get("from") or []:
                nsl = (peer.get("namespaceSelector") or {}).get("matchLabels") or {}
                if nsl == {"kubernetes.io/metadata.name": GATEWAY_NS} and matches(peer.get("podSelector"), labels):
                    ok = True
                else:
                    problem("%s: NetworkPolicy %s lets in more than the gateway's pods: %s"
                            % (where, n["metadata"]["name"], peer))
        if n["spec"].get("podSelector") != {"matchLabels": {"fedrouter.io/sandbox": "true"}} or \
                n["metadata"].get("namespace") != sandbox_ns:
            problem("%s: NetworkPolicy %s should select the sandboxes of %s" % (where, n["metadata"]["name"],
                                                                              sandbox_ns))
    if not ok:
        problem("%s: no NetworkPolicy lets the gateway's pods into the sandboxes" % where)


def check_member(objs):
    where = "member bundle"
    objs = [o for o in objs if not is_gateway(o)]
    nss = find(objs, "Namespace")
    if len(nss) != 1:
        problem("%s: want one sandbox Namespace, got %d" % (where, len(nss)))
        return None
    ns = nss[0]["metadata"]["name"]
    lab = nss[0]["metadata"].get("labels") or {}
    for mode in ("enforce", "warn", "audit"):
        if lab.get("pod-security.kubernetes.io/" + mode) != "restricted":
            problem("%s: namespace %s: pod-security.kubernetes.io/%s is %r, want restricted"
                    % (where, ns, mode, lab.get("pod-security.kubernetes.io/" + mode)))
    for o in objs:
        if o["metadata"].get("namespace") not in (None, ns):
            problem("%s: %s is in namespace %s, not the sandbox namespace %s"
                    % (where, objname(o), o["metadata"]["namespace"], ns))
    role = {x for x in rules_of(objs, "Role") if x[0] == "fedrouter"}
    need = {("", "pods", "create"), ("", "pods", "delete"), ("", "pods", "watch"), ("", "pods/exec", "create"),
            ("", "pods/exec", "get"), ("", "pods/proxy", "get"), ("", "pods/proxy", "create"),
            ("", "pods/proxy", "update"), ("", "secrets", "get"), ("", "secrets", "patch"),
            ("", "secrets", "create"),
            ("apps", "replicasets", "patch"), ("", "resourcequotas", "watch"),
            ("", "persistentvolumeclaims", "watch")} | \
        {("networking.k8s.io", "networkpolicies", v) for v in ("list", "watch", "create", "patch", "delete")}
    # What the router uses and nothing more (issue: least privilege): any
    # other grant to the router's Role fails.
    used = need | {("", "pods", v) for v in ("get", "list", "patch")} | \
        {("apps", "replicasets", v) for v in ("get", "list", "watch", "create", "delete")} | \
        {("", "resourcequotas", v) for v in ("get", "list")} | \
        {("", "persistentvolumeclaims", v) for v in ("get", "list", "create", "patch", "delete")} | \
        {("", "configmaps", v) for v in ("get", "list", "watch", "create", "patch", "delete")}
    have = {(g, r, v) for (_, g, r, v) in role}
    for n in sorted(need - have):
        problem("%s: the Role does not grant %s %s%s" % (where, n[2], n[0] + "/" if n[0] else "", n[1]))
    for n in sorted(have - used):
        problem("%s: the router's Role grants %s %s%s, which the router never uses" %
                (where, n[2], n[0] + "/" if n[0] else "", n[1]))
    for o in find(objs, "Role"):
        for r in o.get("rules") or []:
            # create cannot be limited by name (Kubernetes never matches
            # resourceNames on a create); every other verb on Secrets must be.
            if "secrets" in (r.get("resources") or []) and not r.get("resourceNames") and \
                    set(r.get("verbs") or []) != {"create"}:
                problem("%s: Role %s reads or changes Secrets without resourceNames: list the tenants' Secret "
                        "names" % (where, o["metadata"]["name"]))
    for (name, g, r, v) in sorted(rules_of(objs, "ClusterRole")):
        if r not in ("nodes", "runtimeclasses", "storageclasses") or v not in ("get", "list", "watch"):
            problem("%s: ClusterRole %s grants %s on %s: only reading nodes, RuntimeClasses and "
                    "StorageClasses is cluster-wide" % (where, name, v, r))
    if any(r == "secrets" and v not in ("get", "patch", "create") for (_, _, r, v) in role):
        problem("%s: Secrets: only get and patch (by name) and create are needed" % where)
    sas = find(objs, "ServiceAccount")
    for b in find(objs, "RoleBinding") + find(objs, "ClusterRoleBinding"):
        for s in b.get("subjects") or []:
            if s.get("kind") == "ServiceAccount" and (s.get("namespace") != ns or
                                                     s.get("name") not in [x["metadata"]["name"] for x in sas]):
                problem("%s: %s binds %s/%s, not the bundle's ServiceAccount" % (where, objname(b), s.get("namespace"), s.get("name")))
    nps = find(objs, "NetworkPolicy")
    deny = [n for n in nps if n["spec"].get("podSelector") == {} and
            set(n["spec"].get("policyTypes") or []) == {"Ingress", "Egress"} and
            not n["spec"].get("ingress") and not n["spec"].get("egress")]
    if not deny:
        problem("%s: no deny-all NetworkPolicy (podSelector {}, Ingress and Egress, no rules)" % where)
    for n in nps:
        if n["spec"].get("egress"):
            problem("%s: NetworkPolicy %s allows egress: sandboxes get none" % (where, n["metadata"]["name"]))
        for rule in n["spec"].get("ingress") or []:
            ports = [p.get("port") for p in rule.get("ports") or []]
            if not ports or AGENT_PORT not in ports or not set(ports) <= {AGENT_PORT, CODE_INTERPRETER_PORT}:
                problem("%s: NetworkPolicy %s lets in ports %s: only the agent port %d (and the Code "
                        "Interpreter's %d)" % (where, n["metadata"]["name"], ports or "(all)", AGENT_PORT,
                                               CODE_INTERPRETER_PORT))
            for peer in rule.get("from") or [{}]:
                ps = peer.get("podSelector")
                if "namespaceSelector" not in peer and "ipBlock" not in peer:
                    problem("%s: NetworkPolicy %s lets in pods of the sandbox namespace (sandbox-to-sandbox)"
                            % (where, n["metadata"]["name"]))
                if peer.get("namespaceSelector") == {} or (ps == {} and "namespaceSelector" in peer):
                    problem("%s: NetworkPolicy %s lets in every pod of some namespace" % (where, n["metadata"]["name"]))
    for kind in ("ResourceQuota", "LimitRange", "ServiceAccount", "Role", "RoleBinding"):
        if not find(objs, kind):
            problem("%s: no %s" % (where, kind))
    return ns


def norm_rbac(objs):
    out = []
    for o in objs:
        if is_gateway(o):
            continue  # the gateway's own identity, not the router's
        if o.get("kind") in ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"):
            o = copy.deepcopy(o)
            o["metadata"].pop("annotations", None)
            out.append(o)
    return sorted(out, key=lambda o: (o["kind"], o["metadata"]["name"]))


def main(argv):
    root = os.path.abspath(argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), "../.."))
    fedrouter = argv[2] if len(argv) > 2 else None
    if shutil.which("kubectl") is None:
        print("FAIL: kubectl not on PATH (kubectl v1.32 renders kustomize)")
        return 1
    d = lambda *p: os.path.join(root, "deploy", *p)  # noqa: E731
    rendered = {}
    for name in ("router/base", "member/base", "member/overlays/gvisor"):
        rendered[name] = render(d(name))
    rendered["member/base + pss-baseline"] = render(d("member/overlays/pss-baseline"))
    # The example overlay as an operator renders it: with the agent key
    # they made (here: one of our own, in a copy); without it kustomize
    # stops, naming the file.
    tmp = tempfile.mkdtemp(prefix="fr-example-")
    try:
        rc, objs, err = example_overlay.kustomize(example_overlay.copy_example(root, os.path.join(tmp, "with")))
        if rc != 0:
            problem("kubectl kustomize of the example overlay (with an agent key) failed: %s" % err.strip()[-800:])
        rendered["router/overlays/example"] = objs
        rc, _, err = example_overlay.kustomize(example_overlay.copy_example(root, os.path.join(tmp, "without"),
                                                                            with_key=False))
        if rc == 0 or "agent-key/current" not in err:
            problem("the example overlay rendered without agent-key/current, or failed without naming it "
                    "(rc %d): %s" % (rc, err.strip()[-400:]))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    # Both components at once, from outside the repository (as an operator's
    # own overlay would use them).
    tmp = tempfile.mkdtemp(prefix="fr-kustomize-")
    try:
        with open(os.path.join(tmp, "kustomization.yaml"), "w") as f:
            yaml.safe_dump({"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                            "resources": [os.path.relpath(d("member/base"), tmp)],
                            "components": [os.path.relpath(d("member/components/pss-baseline"), tmp),
                                           os.path.relpath(d("member/components/gvisor"), tmp)]}, f)
        both = render(tmp)
        if both is not None and len(both) != len(rendered["member/base"] or []) + 1:
            problem("member/base + both components: want the base plus a RuntimeClass, got %d objects" % len(both))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    with open(d("router/overlays/example/secrets.example.yaml"), encoding="utf-8") as f:
        secret_objs = [x for x in yaml.safe_load_all(f) if x]
    for name, objs in rendered.items():
        for o in objs or []:
            # A base is namespaced by the overlay that uses it.
            check_object(name, o, base=name.endswith("/base") and name.startswith("router"))
    for o in secret_objs:
        check_object("secrets.example.yaml", o)

    member_ns = None
    if rendered["member/base"] is not None:
        member_ns = check_member(rendered["member/base"])
        with open(d("member/gateway-secrets.example.yaml"), encoding="utf-8") as f:
            gw_secrets = [x for x in yaml.safe_load_all(f) if x]
        for o in gw_secrets:
            check_object("gateway-secrets.example.yaml", o)
        if member_ns is not None:
            check_gateway(root, rendered["member/base"], gw_secrets, member_ns)
    if rendered["member/overlays/gvisor"] is not None:
        check_member(rendered["member/overlays/gvisor"])
        rc = find(rendered["member/overlays/gvisor"], "RuntimeClass")
        if len(rc) != 1 or rc[0].get("handler") != "runsc" or rc[0]["metadata"]["name"] != "gvisor":
            problem("member/overlays/gvisor: want RuntimeClass gvisor with handler runsc, got %s" % rc)
        if find(rendered["member/base"] or [], "RuntimeClass"):
            problem("member/base: the RuntimeClass is optional (gvisor component only)")
    pss = rendered["member/base + pss-baseline"]
    if pss is not None:
        lab = [n for n in find(pss, "Namespace") if not is_gateway(n)][0]["metadata"]["labels"]
        if lab.get("pod-security.kubernetes.io/enforce") != "baseline" or \
                lab.get("pod-security.kubernetes.io/warn") != "restricted":
            problem("components/pss-baseline: want enforce baseline, warn restricted: %s" % lab)
    ov = rendered["router/overlays/example"]
    if ov is not None:
        dep = check_router(root, ov, secret_objs)
        if dep is not None and member_ns is not None:
            check_router_config(ov, secret_objs, dep, fedrouter, member_ns)
        if dep is not None:
            check_config_features(root, ov, secret_objs, dep)

    # deploy/rbac.yaml and the bundle's RBAC grant the same.
    with open(d("rbac.yaml"), encoding="utf-8") as f:
        standalone = [x for x in yaml.safe_load_all(f) if x]
    if rendered["member/base"] is not None and norm_rbac(standalone) != norm_rbac(rendered["member/base"]):
        a, b = norm_rbac(standalone), norm_rbac(rendered["member/base"])
        problem("deploy/rbac.yaml and deploy/member/base/rbac.yaml differ:\n  rbac.yaml: %s\n  member:    %s"
                % ([x for x in a if x not in b], [x for x in b if x not in a]))

    for p in problems:
        print("FAIL: " + p)
    if problems:
        print("check_manifests: %d problem(s)" % len(problems))
        return 1
    print("check_manifests: OK (%s)" % ", ".join("%s: %d objects" % (k, len(v)) for k, v in rendered.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
