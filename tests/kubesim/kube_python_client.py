#!/usr/bin/python3
"""kube_python_client.py - the official Kubernetes Python client (Debian's
python3-kubernetes, 22.6) drives kubesim as it drives a real API server:
through the kubeconfig kubesim writes (TLS, bearer token) and the client's
typed APIs only (CoreV1Api, AppsV1Api, PolicyV1Api, VersionApi, ...).

Covered: discovery (/api/, /apis/, /version/, get_api_resources, the
DynamicClient), typed
deserialization of nodes, pods, ReplicaSets and Deployments (the models
refuse objects missing required fields); pod create / read / list / replace
/ patch (strategic merge as the client sends a dict, JSON patch as it sends
a list, merge patch with the Content-Type header set) / delete (grace
period, propagation policy, preconditions) and pods/status; label and field
selectors; list pagination (limit, _continue, one resourceVersion, 410 for
an expired token); watch.Watch().stream(): ADDED / MODIFIED / DELETED with
typed objects, label-selected watches, BOOKMARK events, resource_version
tracking and 410 Gone as ApiException(status=410), with and without the
client's own retry; boolean parameters sent as "True"; pods/exec through
kubernetes.stream.stream() (v4.channel.k8s.io: the output-returning form
and WSClient with stdout / stderr channels, returncode, read_channel(3),
stdin as text and binary frames, the older channel.k8s.io and the base64
protocols when asked for); pods/log (tail_lines, timestamps, container,
follow=True raw and through Watch, ending with the pod), pods/proxy,
pods/eviction; ReplicaSet and Deployment scale (read / patch / replace);
404 / 409 / 422 / 400 as ApiException with a Status body.

Usage: /usr/bin/python3 kube_python_client.py PATH/TO/kubesim
(Debian's python3-kubernetes lives in the system Python's dist-packages.)
Loopback only; kubesim is stopped and its temp dir removed on every path.
Exit 0 when every check passed, 1 otherwise (each failure printed).
"""
import base64
import json
import os
import ssl
import sys
import time
import traceback
import urllib.request

sys.dont_write_bytecode = True   # do not leave __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kubesim_kinds as kk  # noqa: E402  (Sim: kubesim started and stopped)
from kubesim_kinds import FAILS, check  # noqa: E402

try:
    from kubernetes import client, config, dynamic, watch
    from kubernetes.client.rest import ApiException
    from kubernetes.stream import stream
except ImportError as e:
    print("FAIL: the official Kubernetes Python client is not importable by %s (%s): "
          "apt-get install python3-kubernetes (scripts/lib/packages.sh installs it)" % (sys.executable, e))
    sys.exit(1)

HERE = os.path.dirname(os.path.abspath(__file__))
TOKEN = "pyclient-token"
NS = "default"


class Sim(kk.Sim):
    """kubesim over TLS with a token and the stand-in agent."""

    def __init__(self, binary):
        super().__init__(binary, ["--tls", "--token", TOKEN, "--name", "pyc", "--nodes", "2",
                                  "--terminate-ms", "1000", "--bookmark-ms", "200",
                                  "--agent-binary", os.path.join(HERE, "fedrouter-agent")])

    def admin(self, path):
        """POST an admin call (/_sim/...) on the API port, over TLS (not
        part of the Kubernetes API: plain urllib)."""
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        req = urllib.request.Request(self.base.replace("http:", "https:") + path, data=b"{}", method="POST",
                                     headers={"Authorization": "Bearer " + TOKEN})
        with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
            return r.status

    def log_tail(self):
        try:
            with open(self.log.name) as f:
                return f.read()[-3000:]
        except OSError:
            return ""


def status_of(e):
    """The Status body of an ApiException, or {}."""
    try:
        return json.loads(e.body)
    except (TypeError, ValueError):
        return {}


def api_error(fn, *args, **kwargs):
    """Calls fn; returns the ApiException it raised (None if it did not)."""
    try:
        fn(*args, **kwargs)
    except ApiException as e:
        return e
    return None


def expect_status(e, code, reason, what):
    """<e> is an ApiException with HTTP <code> and a Status body with <reason>."""
    if not check(e is not None, "%s: no ApiException" % what):
        return {}
    st = status_of(e)
    check(e.status == code and st.get("kind") == "Status" and st.get("code") == code and
          st.get("reason") == reason and st.get("status") == "Failure" and st.get("message"),
          "%s: want %d %s, got %s %s" % (what, code, reason, e.status, e.body))
    return st


def pod(name, labels=None, command=None, containers=None):
    cs = containers or [client.V1Container(name="c", image="busybox", command=command or ["sleep", "3600"])]
    return client.V1Pod(api_version="v1", kind="Pod",
                        metadata=client.V1ObjectMeta(name=name, labels=labels),
                        spec=client.V1PodSpec(containers=cs))


def wait_for(what, fn, timeout=10):
    """Polls fn() until it returns something true; fails the check on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v or time.monotonic() > deadline:
            check(bool(v), "timed out waiting for " + what)
            return v
        time.sleep(0.05)


def running(v1, name):
    def ready():
        p = v1.read_namespaced_pod(name, NS)
        conds = {c.type: c.status for c in p.status.conditions or []}
        return p if p.status.phase == "Running" and conds.get("Ready") == "True" else None
    return wait_for("pod %s Running and Ready" % name, ready)


def gone(v1, name):
    def missing():
        e = api_error(v1.read_namespaced_pod, name, NS)
        return e is not None and e.status == 404
    return wait_for("pod %s gone" % name, missing)


# ---------------------------------------------------------------- checks

def test_config_and_discovery(sim, api):
    cfg = client.Configuration.get_default_copy()
    check(cfg.host.startswith("https://127.0.0.1:") and cfg.verify_ssl and cfg.ssl_ca_cert,
          "load_kube_config: https with the kubeconfig's CA: %s %s" % (cfg.host, cfg.ssl_ca_cert))
    check(cfg.api_key.get("authorization") == "Bearer " + TOKEN, "load_kube_config: the bearer token")
    v = client.VersionApi(api).get_code()
    check(v.major == "1" and v.git_version.startswith("v1."), "VersionApi.get_code (/version/): %s" % v)
    check(client.CoreApi(api).get_api_versions().versions == ["v1"], "CoreApi.get_api_versions (/api/)")
    groups = {g.name for g in client.ApisApi(api).get_api_versions().groups}
    check({"apps", "policy", "rbac.authorization.k8s.io"} <= groups, "ApisApi.get_api_versions (/apis/): %s" % groups)
    res = {r.name for r in client.CoreV1Api(api).get_api_resources().resources}
    check({"pods", "pods/exec", "pods/log", "pods/status", "pods/eviction", "namespaces", "nodes"} <= res,
          "CoreV1Api.get_api_resources (/api/v1/): %s" % sorted(res))
    res = {r.name for r in client.AppsV1Api(api).get_api_resources().resources}
    check({"replicasets", "replicasets/scale", "deployments", "deployments/scale"} <= res,
          "AppsV1Api.get_api_resources (/apis/apps/v1/): %s" % sorted(res))
    check(client.AppsApi(api).get_api_group().preferred_version.group_version == "apps/v1",
          "AppsApi.get_api_group (/apis/apps/)")
    # The dynamic client discovers every group version before its first call.
    dyn = dynamic.DynamicClient(api)
    check(dyn.resources.get(api_version="v1", kind="Pod").get(namespace=NS).kind == "PodList",
          "DynamicClient: v1 Pod list")
    check(dyn.resources.get(api_version="apps/v1", kind="Deployment").namespaced, "DynamicClient: apps/v1 Deployment")


def test_namespaces_and_nodes(sim, api):
    v1 = client.CoreV1Api(api)
    names = {n.metadata.name for n in v1.list_namespace().items}
    check({"default", "kube-system", "kube-public"} <= names, "list_namespace: %s" % names)
    ns = v1.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="pyc-ns")))
    check(ns.status.phase == "Active", "create_namespace: Active")
    check(v1.read_namespace("pyc-ns").metadata.uid == ns.metadata.uid, "read_namespace")
    v1.delete_namespace("pyc-ns")
    check(api_error(v1.read_namespace, "pyc-ns").status == 404, "delete_namespace: then 404")
    # V1Node requires, among others, status.nodeInfo.bootID, machineID and
    # systemUUID: deserializing the list is the check.
    nodes = v1.list_node().items
    check(len(nodes) == 2, "list_node: 2 nodes")
    for n in nodes:
        info = n.status.node_info
        check(info.boot_id and info.machine_id and info.system_uuid and info.kubelet_version and
              n.status.daemon_endpoints.kubelet_endpoint.port == 10250,
              "node %s: nodeInfo and daemonEndpoints: %s" % (n.metadata.name, info))
        check({c.type: c.status for c in n.status.conditions}.get("Ready") == "True", "node Ready")
    check(v1.read_node(nodes[0].metadata.name).metadata.name == nodes[0].metadata.name, "read_node")


def test_pod_crud(sim, api):
    v1 = client.CoreV1Api(api)
    p = v1.create_namespaced_pod(NS, pod("p1", labels={"app": "web", "tier": "a"}))
    check(p.metadata.uid and p.metadata.resource_version and p.metadata.namespace == NS, "create_namespaced_pod")
    p = running(v1, "p1")
    if p is None:
        return
    check(p.status.pod_ip and p.spec.node_name and p.status.container_statuses[0].ready,
          "read_namespaced_pod: podIP, nodeName, container ready")
    st = v1.read_namespaced_pod_status("p1", NS)
    check(st.status.phase == "Running", "read_namespaced_pod_status")

    # Strategic merge patch (the client's Content-Type for a dict body):
    # maps merge, containers merge by name.
    p = v1.patch_namespaced_pod("p1", NS, {"metadata": {"labels": {"patched": "yes", "tier": None}}})
    check(p.metadata.labels == {"app": "web", "patched": "yes"}, "strategic merge patch of labels: %s"
          % p.metadata.labels)
    p = v1.patch_namespaced_pod("p1", NS, {"spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}})
    check([(c.name, c.image, c.command) for c in p.spec.containers] == [("c", "busybox:1.36", ["sleep", "3600"])],
          "strategic merge patch merges containers by name: %s" % p.spec.containers)
    e = api_error(v1.patch_namespaced_pod, "p1", NS, {"spec": {"containers": [{"image": "x"}]}})
    check(e is not None and e.status == 500 and "does not contain declared merge key: name" in
          status_of(e).get("message", ""), "a container without its merge key: %s" % (e and e.body))
    # JSON patch (a list body).
    p = v1.patch_namespaced_pod("p1", NS, [{"op": "add", "path": "/metadata/annotations", "value": {"a": "1"}}])
    check(p.metadata.annotations == {"a": "1"}, "JSON patch: %s" % p.metadata.annotations)
    # JSON merge patch: the client sends it when the header is set.
    mapi = client.ApiClient()
    mapi.set_default_header("Content-Type", "application/merge-patch+json")
    p = client.CoreV1Api(mapi).patch_namespaced_pod("p1", NS, {"metadata": {"annotations": {"a": None, "b": "2"}}})
    check(p.metadata.annotations == {"b": "2"}, "merge patch: %s" % p.metadata.annotations)
    # A resourceVersion in the patch is a precondition.
    e = api_error(v1.patch_namespaced_pod, "p1", NS, {"metadata": {"resourceVersion": "1", "labels": {"x": "y"}}})
    expect_status(e, 409, "Conflict", "patch with a stale resourceVersion")
    # Status subresource.
    p = v1.patch_namespaced_pod_status("p1", NS, {"status": {"conditions": [{"type": "Custom", "status": "True"}]}})
    conds = {c.type: c.status for c in p.status.conditions}
    check(conds.get("Custom") == "True" and conds.get("Ready") == "True",
          "patch_namespaced_pod_status merges conditions by type: %s" % conds)

    # Replace (PUT) with the current object, then with a stale one.
    cur = v1.read_namespaced_pod("p1", NS)
    cur.metadata.labels["replaced"] = "1"
    new = v1.replace_namespaced_pod("p1", NS, cur)
    check(new.metadata.labels.get("replaced") == "1" and
          int(new.metadata.resource_version) > int(cur.metadata.resource_version), "replace_namespaced_pod")
    cur.metadata.labels["again"] = "1"
    expect_status(api_error(v1.replace_namespaced_pod, "p1", NS, cur), 409, "Conflict",
                  "replace with a stale resourceVersion")

    # Errors as the client sees them.
    st = expect_status(api_error(v1.read_namespaced_pod, "nosuch", NS), 404, "NotFound", "read a missing pod")
    check(st.get("details") == {"name": "nosuch", "kind": "pods"}, "404 details: %s" % st.get("details"))
    st = expect_status(api_error(v1.create_namespaced_pod, NS, pod("p1")), 409, "AlreadyExists", "create twice")
    check(st.get("message") == 'pods "p1" already exists', "409 message: %s" % st.get("message"))
    st = expect_status(api_error(v1.create_namespaced_pod, NS, pod("Bad_Name")), 422, "Invalid",
                       "create with an invalid name")
    check(any(c.get("field") == "metadata.name" for c in st.get("details", {}).get("causes", [])),
          "422 names the field: %s" % st.get("details"))
    expect_status(api_error(v1.create_namespaced_pod, "nosuch-ns", pod("x")), 404, "NotFound",
                  "create in a missing namespace")
    expect_status(api_error(v1.list_namespaced_pod, NS, field_selector="spec.image=x"), 400, "BadRequest",
                  "an unknown field selector")
    p = v1.read_namespaced_pod("p1", NS)
    p.spec.containers[0].command = ["true"]
    expect_status(api_error(v1.replace_namespaced_pod, "p1", NS, p), 422, "Invalid", "a forbidden pod spec change")

    # Delete: grace period and propagation policy, preconditions, graceful.
    v1.create_namespaced_pod(NS, pod("p-del"))
    running(v1, "p-del")
    e = api_error(v1.delete_namespaced_pod, "p-del", NS,
                  body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="0000")))
    expect_status(e, 409, "Conflict", "delete with a wrong uid precondition")
    d = v1.delete_namespaced_pod("p-del", NS, grace_period_seconds=30, propagation_policy="Background")
    check(d.metadata.deletion_timestamp is not None and d.metadata.deletion_grace_period_seconds == 30,
          "graceful delete answers the Terminating pod: %s %s" % (d.metadata.deletion_timestamp,
                                                                  d.metadata.deletion_grace_period_seconds))
    gone(v1, "p-del")
    v1.create_namespaced_pod(NS, pod("p-now"))
    running(v1, "p-now")
    v1.delete_namespaced_pod("p-now", NS, body=client.V1DeleteOptions(grace_period_seconds=0,
                                                                      propagation_policy="Foreground"))
    check(api_error(v1.read_namespaced_pod, "p-now", NS).status == 404, "delete with grace 0: gone at once")
    expect_status(api_error(v1.delete_namespaced_pod, "nosuch", NS), 404, "NotFound", "delete a missing pod")


def test_selectors_and_pages(sim, api):
    v1 = client.CoreV1Api(api)
    for i in range(7):
        v1.create_namespaced_pod(NS, pod("page-%d" % i, labels={"set": "page", "parity": "odd" if i % 2 else "even"}))
    names = lambda lst: sorted(p.metadata.name for p in lst.items)  # noqa: E731
    check(names(v1.list_namespaced_pod(NS, label_selector="set=page,parity=odd")) == ["page-1", "page-3", "page-5"],
          "label selector k=v,k=v")
    check(names(v1.list_namespaced_pod(NS, label_selector="parity in (even),set")) ==
          ["page-0", "page-2", "page-4", "page-6"], "label selector in (...) and exists")
    unset = names(v1.list_namespaced_pod(NS, label_selector="!set"))
    check("p1" in unset and not any(n.startswith("page-") for n in unset), "label selector !k: %s" % unset)
    check(names(v1.list_namespaced_pod(NS, field_selector="metadata.name=page-3")) == ["page-3"],
          "field selector metadata.name")
    wait_for("page pods Running", lambda: len(v1.list_namespaced_pod(
        NS, label_selector="set=page", field_selector="status.phase=Running").items) == 7)
    node = v1.read_namespaced_pod("page-0", NS).spec.node_name
    on_node = v1.list_pod_for_all_namespaces(field_selector="spec.nodeName=%s" % node).items
    check(on_node and all(p.spec.node_name == node for p in on_node), "field selector spec.nodeName, all namespaces")

    seen, token, rvs, pages = [], None, set(), 0
    while True:
        lst = v1.list_namespaced_pod(NS, label_selector="set=page", limit=3, _continue=token)
        pages += 1
        seen += [p.metadata.name for p in lst.items]
        rvs.add(lst.metadata.resource_version)
        token = lst.metadata._continue
        check(len(lst.items) == (3 if token else 1), "page %d has %d items" % (pages, len(lst.items)))
        if not token or pages > 5:
            break
    check(seen == ["page-%d" % i for i in range(7)] and pages == 3 and len(rvs) == 1,
          "limit=3 and _continue: %d pages %s, resourceVersions %s" % (pages, seen, rvs))
    lst = v1.list_namespaced_pod(NS, label_selector="set=page", limit=2)
    v1.patch_namespaced_pod("page-0", NS, {"metadata": {"labels": {"later": "1"}}})
    sim.admin("/_sim/compact")  # etcd compacted past the list's revision
    expect_status(api_error(v1.list_namespaced_pod, NS, label_selector="set=page", limit=2,
                            _continue=lst.metadata._continue), 410, "Expired", "a continue token past compaction")
    v1.delete_collection_namespaced_pod(NS, label_selector="set=page", grace_period_seconds=0)
    check(v1.list_namespaced_pod(NS, label_selector="set=page").items == [], "delete_collection_namespaced_pod")


def test_watch(sim, api):
    v1 = client.CoreV1Api(api)
    rv = v1.list_namespaced_pod(NS).metadata.resource_version
    v1.create_namespaced_pod(NS, pod("w1", labels={"watch": "me"}))
    v1.create_namespaced_pod(NS, pod("w2", labels={"watch": "other"}))
    running(v1, "w1")
    running(v1, "w2")  # settled: the watches below see it unchanged
    v1.patch_namespaced_pod("w1", NS, {"metadata": {"labels": {"step": "2"}}})
    v1.delete_namespaced_pod("w1", NS, grace_period_seconds=0)

    # From a resourceVersion: history replayed in order, typed objects.
    w = watch.Watch()
    events = [(e["type"], e["object"]) for e in w.stream(v1.list_namespaced_pod, NS, label_selector="watch=me",
                                                         resource_version=rv, timeout_seconds=1)]
    types = [t for t, _ in events]
    check(types[:1] == ["ADDED"] and types[-1:] == ["DELETED"] and set(types) == {"ADDED", "MODIFIED", "DELETED"},
          "watch from rv %s: %s" % (rv, types))
    check(all(isinstance(o, client.V1Pod) and o.metadata.name == "w1" for _, o in events),
          "watch events carry V1Pod objects of w1 only (label selector)")
    check(any(t == "MODIFIED" and (o.metadata.labels or {}).get("step") == "2" for t, o in events),
          "the label change is a MODIFIED event")
    check(events and w.resource_version == events[-1][1].metadata.resource_version,
          "Watch.resource_version follows the events: %s" % w.resource_version)

    # resourceVersion unset: the current state as ADDED, then bookmarks.
    w = watch.Watch()
    seen = list(w.stream(v1.list_namespaced_pod, NS, label_selector="watch=other", allow_watch_bookmarks=True,
                         timeout_seconds=1))
    types = [e["type"] for e in seen]
    check(types[:1] == ["ADDED"] and seen[0]["object"].metadata.name == "w2", "watch without rv: ADDED w2 first")
    marks = [e for e in seen if e["type"] == "BOOKMARK"]
    check(marks and all(isinstance(e["object"], dict) and e["object"]["metadata"].get("resourceVersion")
                        for e in marks), "allowWatchBookmarks=True: BOOKMARK events with a resourceVersion: %s"
          % types)

    # The raw form: watch=True as the client sends it ("True").
    resp = v1.list_namespaced_pod(NS, label_selector="watch=other", watch=True, timeout_seconds=1,
                                  _preload_content=False)
    lines = [json.loads(ln) for ln in resp.read().decode().splitlines() if ln.strip()]
    check([ln["type"] for ln in lines] == ["ADDED"] and lines[0]["object"]["metadata"]["name"] == "w2",
          "watch=True on the raw call: one ADDED line: %s" % lines)

    # A watch on one object by name (field selector).
    w = watch.Watch()
    names = {e["object"].metadata.name for e in w.stream(v1.list_namespaced_pod, NS,
                                                         field_selector="metadata.name=w2", timeout_seconds=1)}
    check(names == {"w2"}, "field-selected watch: %s" % names)

    # 410 Gone once the history is compacted: an ApiException with status
    # 410, with timeout_seconds (no retry) and without (one retry, then raise).
    sim.admin("/_sim/compact")
    v1.patch_namespaced_pod("w2", NS, {"metadata": {"labels": {"bump": "1"}}})
    for kwargs in ({"timeout_seconds": 2}, {}):
        e = None
        try:
            for _ in watch.Watch().stream(v1.list_namespaced_pod, NS, resource_version=rv, **kwargs):
                pass
        except ApiException as ex:
            e = ex
        check(e is not None and e.status == 410 and "Expired" in str(e.reason),
              "watch from a compacted rv %s: ApiException 410 Expired (%s): %s" % (rv, kwargs, e))
    v1.delete_namespaced_pod("w2", NS, grace_period_seconds=0)


def exec_ws(v1, name, command, **kw):
    """The WSClient form of stream(): _preload_content=False."""
    args = dict(stderr=True, stdin=False, stdout=True, tty=False)
    args.update(kw)
    return stream(v1.connect_get_namespaced_pod_exec, name, NS, command=command, _preload_content=False, **args)


def test_exec(sim, api):
    v1 = client.CoreV1Api(api)
    v1.create_namespaced_pod(NS, pod("ex", command=["sleep", "3600"]))
    if running(v1, "ex") is None:
        return
    # The form that returns the output: v4.channel.k8s.io, booleans as True/False.
    out = stream(v1.connect_get_namespaced_pod_exec, "ex", NS, command=["echo", "hello", "world"],
                 stderr=True, stdin=False, stdout=True, tty=False)
    check(out == "hello world\n", "stream() returns the output: %r" % out)
    out = stream(v1.connect_post_namespaced_pod_exec, "ex", NS, command=["sh", "-c", "echo $HOSTNAME"],
                 stderr=True, stdin=False, stdout=True, tty=False)
    check(out == "ex\n", "connect_post_namespaced_pod_exec: %r" % out)

    # WSClient: channels, the exit status, the negotiated protocol.
    ws = exec_ws(v1, "ex", ["sh", "-c", "echo out; echo err >&2; exit 3"])
    ws.run_forever(timeout=10)
    check(ws.sock.getheaders().get("sec-websocket-protocol") == "v4.channel.k8s.io",
          "the client offers v4.channel.k8s.io and gets it: %s" % ws.sock.getheaders())
    check(ws.read_stdout() == "out\n" and ws.read_stderr() == "err\n", "stdout and stderr on their channels")
    check(ws.returncode == 3, "WSClient.returncode: %s" % ws.returncode)
    ws = exec_ws(v1, "ex", ["sh", "-c", "exit 7"])
    ws.run_forever(timeout=10)
    st = json.loads(ws.read_channel(3) or "{}")
    check(st.get("status") == "Failure" and st.get("reason") == "NonZeroExitCode" and
          st["details"]["causes"][0] == {"reason": "ExitCode", "message": "7"},
          "read_channel(3): the v4 Status: %s" % st)
    ws = exec_ws(v1, "ex", ["true"])
    ws.run_forever(timeout=10)
    check(ws.returncode == 0 and not ws.is_open(), "returncode 0 after success, stream closed")
    ws = exec_ws(v1, "ex", ["no-such-command"])
    ws.run_forever(timeout=10)
    st = json.loads(ws.read_channel(3) or "{}")
    check(st.get("reason") == "InternalError" and "executable file not found in $PATH" in st.get("message", ""),
          "a missing command: InternalError on channel 3: %s" % st)

    # stdin: a str goes out as a text frame, bytes as a binary one.
    ws = exec_ws(v1, "ex", ["cat"], stdin=True)
    ws.write_stdin("as text\n")
    line1 = ws.readline_stdout(timeout=10)
    ws.write_stdin(b"as bytes\n")
    line2 = ws.readline_stdout(timeout=10)
    check((line1, line2) == ("as text", "as bytes"), "stdin as text and binary frames: %r %r" % (line1, line2))
    ws.close()
    ws = exec_ws(v1, "ex", ["sh", "-c", "read a; echo got-$a; exit 4"], stdin=True)
    ws.write_stdin("x\n")
    ws.run_forever(timeout=10)
    check(ws.read_stdout() == "got-x\n" and ws.returncode == 4, "stdin, output, exit status together")
    ws = exec_ws(v1, "ex", ["sh", "-c", "echo tty-out; echo tty-err >&2"], stderr=False, tty=True)
    ws.run_forever(timeout=10)
    out = ws.read_stdout()
    check("tty-out" in out and "tty-err" in out, "tty: stderr comes on stdout: %r" % out)

    # Other subprotocols, as a real server speaks them when a client asks.
    old = client.ApiClient()
    old.set_default_header("sec-websocket-protocol", "channel.k8s.io")
    v1old = client.CoreV1Api(old)
    ws = exec_ws(v1old, "ex", ["sh", "-c", "echo pre-v4; exit 5"])
    ws.run_forever(timeout=10)
    check(ws.sock.getheaders().get("sec-websocket-protocol") == "channel.k8s.io" and
          ws.read_stdout() == "pre-v4\n" and
          ws.read_channel(3) == "command terminated with non-zero exit code: exit status 5",
          "channel.k8s.io: channel 3 carries the error text")
    ws = exec_ws(v1old, "ex", ["true"])
    ws.run_forever(timeout=10)
    check(ws.read_channel(3) == "", "channel.k8s.io: nothing on channel 3 for a success")
    b64 = client.ApiClient()
    b64.set_default_header("sec-websocket-protocol", "v4.base64.channel.k8s.io")
    ws = exec_ws(client.CoreV1Api(b64), "ex", ["cat"], stdin=True)
    ws.write_channel(ord("0"), base64.b64encode(b"via base64\n").decode())
    got = ""
    deadline = time.monotonic() + 10
    while "\n" not in got and time.monotonic() < deadline and ws.is_open():
        ws.update(timeout=1)
        got += base64.b64decode(ws.read_channel(ord("1")) or "").decode()
    ws.close()
    check(got == "via base64\n", "v4.base64.channel.k8s.io: text frames, digit channels, base64: %r" % got)
    both = client.ApiClient()
    both.set_default_header("sec-websocket-protocol", "v4.channel.k8s.io, v5.channel.k8s.io")
    ws = exec_ws(client.CoreV1Api(both), "ex", ["echo", "v5"])
    ws.run_forever(timeout=10)
    check(ws.sock.getheaders().get("sec-websocket-protocol") == "v5.channel.k8s.io" and ws.read_stdout() == "v5\n"
          and ws.returncode == 0, "offered v4 and v5: v5 (the API server's own) is chosen")

    # Exec into a missing pod: the handshake fails with the 404.
    try:
        stream(v1.connect_get_namespaced_pod_exec, "nosuch", NS, command=["true"], stdout=True)
        e = None
    except ApiException as ex:
        e = ex
    check(e is not None and "404" in str(e.reason), "exec into a missing pod: %s" % e)
    v1.delete_namespaced_pod("ex", NS, grace_period_seconds=0)


def test_logs_and_proxy(sim, api):
    v1 = client.CoreV1Api(api)
    agent = client.V1Container(name="agent", image="busybox", command=[
        # stdout only: how a runtime interleaves two pipes is not fixed
        "fedrouter-agent", "--", "sh", "-c", "for i in 1 2 3 4 5; do echo line-$i; done; echo last-line; "
        "exec sleep 3600"], ports=[client.V1ContainerPort(container_port=49983)])
    side = client.V1Container(name="side", image="busybox", command=["sleep", "3600"])
    v1.create_namespaced_pod(NS, pod("lg", containers=[agent, side]))
    if running(v1, "lg") is None:
        return
    wait_for("the agent's first lines in the log",
             lambda: "last-line" in v1.read_namespaced_pod_log("lg", NS, container="agent"))
    log = v1.read_namespaced_pod_log("lg", NS, container="agent")
    check(log.splitlines() == ["line-%d" % i for i in range(1, 6)] + ["last-line"], "read_namespaced_pod_log: %r" % log)
    log = v1.read_namespaced_pod_log("lg", NS, container="agent", tail_lines=2)
    check(log == "line-5\nlast-line\n", "tail_lines=2: %r" % log)
    log = v1.read_namespaced_pod_log("lg", NS, container="agent", limit_bytes=10)
    check(log == "line-1\nlin", "limit_bytes=10: %r" % log)
    log = v1.read_namespaced_pod_log("lg", NS, container="agent", tail_lines=1, timestamps=True)
    check(log.endswith(" last-line\n") and log[:4].isdigit() and "T" in log.split(" ")[0],
          "timestamps=True: %r" % log)
    check(v1.read_namespaced_pod_log("lg", NS, container="side") == "", "a container kubesim does not run: empty")
    e = api_error(v1.read_namespaced_pod_log, "lg", NS)
    expect_status(e, 400, "BadRequest", "a log without container on a two-container pod")
    expect_status(api_error(v1.read_namespaced_pod_log, "nosuch", NS), 404, "NotFound", "the log of a missing pod")
    expect_status(api_error(v1.read_namespaced_pod_log, "lg", NS, container="agent", previous=True), 400,
                  "BadRequest", "previous=True (no restarts here)")

    # pods/proxy through the client: the agent answers GET /health.
    out = v1.connect_get_namespaced_pod_proxy_with_path("lg:49983", NS, "health")
    check(out in ("", None), "connect_get_namespaced_pod_proxy_with_path: %r" % out)

    def say(text):
        """The agent prints <text> on its stdout (POST /print through pods/proxy)."""
        api.call_api("/api/v1/namespaces/{namespace}/pods/{name}/proxy/print", "POST",
                     {"namespace": NS, "name": "lg:49983"}, [("text", text)], {"Accept": "*/*"},
                     auth_settings=["BearerToken"], _return_http_data_only=True, _preload_content=False).close()

    # follow=True through Watch().stream(): lines as they are written.
    w = watch.Watch()
    got = []
    for line in w.stream(v1.read_namespaced_pod_log, "lg", NS, container="agent", tail_lines=1,
                         _request_timeout=10):
        got.append(line)
        if line == "last-line":
            say("live-1")
        if line == "live-1":
            w.stop()
    check(got == ["last-line", "live-1"], "Watch().stream(read_namespaced_pod_log): %s" % got)

    # follow=True, _preload_content=False: a raw stream that ends with the pod.
    resp = v1.read_namespaced_pod_log("lg", NS, container="agent", follow=True, tail_lines=0,
                                      _preload_content=False, _request_timeout=10)
    say("live-2")
    buf = b""
    chunks = resp.stream(amt=None, decode_content=False)
    for chunk in chunks:
        buf += chunk
        if b"live-2\n" in buf:
            break
    v1.delete_namespaced_pod("lg", NS, grace_period_seconds=0)
    rest = b"".join(chunks)  # ends when kubesim ends the stream with the pod
    check(buf == b"live-2\n" and rest == b"", "follow with _preload_content=False: %r then %r" % (buf, rest))
    resp.release_conn()


def test_workloads(sim, api):
    v1 = client.CoreV1Api(api)
    apps = client.AppsV1Api(api)
    tmpl = client.V1PodTemplateSpec(metadata=client.V1ObjectMeta(labels={"app": "rs1"}),
                                    spec=client.V1PodSpec(containers=[client.V1Container(
                                        name="c", image="busybox", command=["sleep", "3600"])]))
    rs = apps.create_namespaced_replica_set(NS, client.V1ReplicaSet(
        metadata=client.V1ObjectMeta(name="rs1"),
        spec=client.V1ReplicaSetSpec(replicas=2, selector=client.V1LabelSelector(match_labels={"app": "rs1"}),
                                     template=tmpl)))
    check(rs.spec.replicas == 2, "create_namespaced_replica_set")
    count = lambda: len(v1.list_namespaced_pod(NS, label_selector="app=rs1",  # noqa: E731
                                               field_selector="status.phase=Running").items)
    wait_for("2 ReplicaSet pods", lambda: count() == 2)
    owners = [p.metadata.owner_references[0].name for p in v1.list_namespaced_pod(NS, label_selector="app=rs1").items]
    check(owners == ["rs1", "rs1"], "pods owned by rs1: %s" % owners)
    sc = apps.read_namespaced_replica_set_scale("rs1", NS)
    check(sc.spec.replicas == 2 and sc.status.selector == "app=rs1", "read_namespaced_replica_set_scale: %s" % sc)
    sc = apps.patch_namespaced_replica_set_scale("rs1", NS, {"spec": {"replicas": 3}})
    check(sc.spec.replicas == 3, "patch_namespaced_replica_set_scale")
    wait_for("3 ReplicaSet pods", lambda: count() == 3)
    wait_for("rs1 status.readyReplicas 3",
             lambda: apps.read_namespaced_replica_set_status("rs1", NS).status.ready_replicas == 3)
    sc = apps.replace_namespaced_replica_set_scale("rs1", NS, client.V1Scale(
        metadata=client.V1ObjectMeta(name="rs1", namespace=NS), spec=client.V1ScaleSpec(replicas=1)))
    check(sc.spec.replicas == 1, "replace_namespaced_replica_set_scale")
    wait_for("1 ReplicaSet pod", lambda: len(v1.list_namespaced_pod(NS, label_selector="app=rs1").items) == 1)
    expect_status(api_error(apps.patch_namespaced_replica_set_scale, "rs1", NS, {"spec": {"replicas": -1}}), 422,
                  "Invalid", "a negative scale")
    expect_status(api_error(apps.read_namespaced_replica_set_scale, "nosuch", NS), 404, "NotFound",
                  "the scale of a missing ReplicaSet")
    st = apps.delete_namespaced_replica_set("rs1", NS, propagation_policy="Background")
    check(isinstance(st, client.V1Status) and st.status == "Success" and st.details.name == "rs1" and
          st.details.kind == "replicasets" and st.details.group == "apps" and st.details.uid == rs.metadata.uid,
          "delete_namespaced_replica_set answers a V1Status Success with details: %s" % st)
    wait_for("rs1's pods gone", lambda: not v1.list_namespaced_pod(NS, label_selector="app=rs1").items)

    dep = apps.create_namespaced_deployment(NS, client.V1Deployment(
        metadata=client.V1ObjectMeta(name="d1"),
        spec=client.V1DeploymentSpec(replicas=2, selector=client.V1LabelSelector(match_labels={"app": "d1"}),
                                     template=client.V1PodTemplateSpec(
                                         metadata=client.V1ObjectMeta(labels={"app": "d1"}), spec=tmpl.spec))))
    check(dep.spec.replicas == 2 and dep.metadata.generation == 1, "create_namespaced_deployment: generation 1")
    sc = apps.read_namespaced_deployment_scale("d1", NS)
    check(sc.spec.replicas == 2 and sc.status.selector == "app=d1", "read_namespaced_deployment_scale: %s" % sc)
    sc = apps.patch_namespaced_deployment_scale("d1", NS, {"spec": {"replicas": 4}})
    check(sc.spec.replicas == 4 and apps.read_namespaced_deployment("d1", NS).spec.replicas == 4,
          "patch_namespaced_deployment_scale reaches the Deployment")
    cur = apps.read_namespaced_deployment_scale("d1", NS)
    cur.spec.replicas = 1
    sc = apps.replace_namespaced_deployment_scale("d1", NS, cur)
    d = apps.read_namespaced_deployment("d1", NS)
    check(sc.spec.replicas == 1 and d.spec.replicas == 1 and d.metadata.generation == 3,
          "replace_namespaced_deployment_scale: replicas 1, generation 3: %s %s" % (d.spec.replicas,
                                                                                 d.metadata.generation))
    cur.spec.replicas = 5
    expect_status(api_error(apps.replace_namespaced_deployment_scale, "d1", NS, cur), 409, "Conflict",
                  "a Scale with a stale resourceVersion")
    d = apps.patch_namespaced_deployment("d1", NS, {"spec": {"template": {"spec": {"containers": [
        {"name": "c", "image": "busybox:2"}]}}}})
    check([(c.name, c.image, c.command) for c in d.spec.template.spec.containers] ==
          [("c", "busybox:2", ["sleep", "3600"])] and d.metadata.generation == 4,
          "strategic merge on a Deployment's template containers, generation 4: %s" % d.metadata.generation)
    check(apps.delete_namespaced_deployment("d1", NS).status == "Success", "delete_namespaced_deployment: Success")
    expect_status(api_error(apps.read_namespaced_deployment, "d1", NS), 404, "NotFound", "a deleted Deployment")

    # policy/v1: a PodDisruptionBudget and an Eviction.
    pol = client.PolicyV1Api(api)
    pol.create_namespaced_pod_disruption_budget(NS, client.V1PodDisruptionBudget(
        metadata=client.V1ObjectMeta(name="pdb1"),
        spec=client.V1PodDisruptionBudgetSpec(min_available=1,
                                              selector=client.V1LabelSelector(match_labels={"app": "guarded"}))))
    check([b.metadata.name for b in pol.list_namespaced_pod_disruption_budget(NS).items] == ["pdb1"],
          "list_namespaced_pod_disruption_budget")
    v1.create_namespaced_pod(NS, pod("guarded", labels={"app": "guarded"}))
    v1.create_namespaced_pod(NS, pod("evictee"))
    running(v1, "guarded")
    running(v1, "evictee")
    ev = lambda name: client.V1Eviction(api_version="policy/v1", kind="Eviction",  # noqa: E731
                                        metadata=client.V1ObjectMeta(name=name, namespace=NS))
    e = api_error(v1.create_namespaced_pod_eviction, "guarded", NS, ev("guarded"))
    expect_status(e, 429, "TooManyRequests", "evicting the budget's only pod")
    v1.create_namespaced_pod_eviction("evictee", NS, ev("evictee"))
    check(v1.read_namespaced_pod("evictee", NS).metadata.deletion_timestamp is not None,
          "create_namespaced_pod_eviction: the pod is terminating")
    pol.delete_namespaced_pod_disruption_budget("pdb1", NS)
    v1.delete_namespaced_pod("guarded", NS, grace_period_seconds=0)
    # Events as V1Event models: what the scheduler and kubelet recorded for
    # the evicted pod, selected by field as kubectl describe asks.
    evs = v1.list_namespaced_event(NS, field_selector="involvedObject.name=evictee").items
    reasons = {e.reason for e in evs}
    check({"Scheduled", "Started"} <= reasons and all(e.involved_object.kind == "Pod" for e in evs),
          "list_namespaced_event for evictee: %s" % sorted(reasons))


TESTS = (test_config_and_discovery, test_namespaces_and_nodes, test_pod_crud, test_selectors_and_pages, test_watch,
         test_exec, test_logs_and_proxy, test_workloads)


def main():
    if len(sys.argv) != 2:
        print("usage: %s PATH/TO/kubesim" % sys.argv[0])
        return 2
    sim = Sim(sys.argv[1])
    try:
        config.load_kube_config(config_file=sim.kubeconfig)
        api = client.ApiClient()
        for t in TESTS:
            n = len(FAILS)
            start = time.monotonic()
            try:
                t(sim, api)
            except Exception:  # a surprise in one area must not hide the others
                check(False, "%s raised:\n%s" % (t.__name__, traceback.format_exc()))
            print("%s %s (%.1f s)" % ("ok  " if len(FAILS) == n else "FAIL", t.__name__, time.monotonic() - start),
                  flush=True)
        if FAILS:
            print("---- kubesim log (tail) ----\n" + sim.log_tail())
    finally:
        sim.close()
    print("%d failure(s)" % len(FAILS))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
