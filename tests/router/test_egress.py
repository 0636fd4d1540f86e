#!/usr/bin/env python3
"""Sandbox egress, black-box: the `network` object of a create (and a
tenant's default, and E2B's allow_internet_access / network.allowOut /
denyOut) becomes a NetworkPolicy in the owning cluster, which kubesim
enforces in the sandbox's own network namespace.

One kubesim cluster "eg" whose pods run the real agent (in their own
network namespaces when run as root); the router has an `agent` group, a
batch commit timeout of 10 s (the egress policies' grace period), and
tenant "b" a default of no internet but the kubesim bridge's gateway.
Two addresses only this test can reach stand for "the internet": a
listener of the test on the bridge's gateway address (the host side) and
a server in another sandbox (its pod IP).

Proves (docs/api.md "Egress"):
- bad input is a 400 invalid_network naming the field and the value (a
  domain name, a bad prefix length, bits past the prefix, too many
  entries, a wrong type, an unknown key), and nothing is made;
- allow_internet false + allow_out [gateway]: the sandbox connects to the
  gateway and not to the other pod (which a default sandbox does reach);
  the claim was warm (the pod is the pool's) and kept its place;
- deny_out [other pod]: the other pod is refused, the gateway is not;
  allow_out wins over deny_out for the same address;
- one NetworkPolicy per distinct policy, shared by label (also between two
  router replicas); it exists while a sandbox uses it, is kept while one
  does (another policy that fell out of use meanwhile is deleted), and is
  deleted once none does;
- a policy deleted behind the router's back while in use comes back;
- a tenant's default applies and a create may override it;
- the E2B endpoint maps allow_internet_access and network.allowOut/denyOut
  (and answers a domain name with E2B's 400 naming network.allowOut[0]);
  getInfo shows them back.
The connection checks need pods with their own network namespaces (root);
without, they are skipped and said so.

Usage: test_egress.py --fedrouter PATH --kubesim PATH --agent PATH [--keep]
Prints ok/FAIL per test and `N passed, M failed`. Python 3 stdlib only.
"""
import hashlib
import json
import os
import socket
import sys
import threading

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_router as tr  # noqa: E402
import test_agent_path as tap  # noqa: E402
from test_router import check, expect_error, short, wait_until  # noqa: E402

tr.WATCHDOG_S = 290  # ctest's TIMEOUT is 300
CLUSTER = "eg"
GRACE_S = 10
LISTEN_PORT = 18411
SERVER_PORT = 8000
EGRESS = "fedrouter.io/egress"


class EgressFed(tap.AgentFed):
    def write_config(self, path, lifetime):
        super().write_config(path, lifetime)
        text = open(path).read()
        # The policies' grace period, and tenant b's default (the gateway
        # is known once the kubesim runs).
        text = text.replace(f"max_lifetime_s = {lifetime[1]}; }};",
                            f"max_lifetime_s = {lifetime[1]}; batch_commit_timeout_s = {GRACE_S}; }};")
        gw = self.sims[CLUSTER].state()["pod_network"].get("gateway") or "127.0.0.1"
        b = f'{{ name = "b"; token_sha256 = "{hashlib.sha256(tr.TOKEN_B.encode()).hexdigest()}"; }}'
        check(b in text, "tenant b's line is not where the test expects it")
        text = text.replace(b, b[:-2] + f' network = {{ allow_internet = false; allow_out = ["{gw}"]; }}; }}')
        with open(path, "w") as f:
            f.write(text)


def sim(fed):
    return fed.sims[CLUSTER]


def enforcing(fed):
    st, r = sim(fed).admin("GET", "/_sim/netpol")
    check(st == 200, f"/_sim/netpol: {st} {short(r)}")
    return r["enforcing"]


def policies(fed):
    """The NetworkPolicies in kubesim: name -> object."""
    st, r = sim(fed).kube("/apis/networking.k8s.io/v1/namespaces/default/networkpolicies")
    check(st == 200, f"list networkpolicies: {st} {short(r)}")
    return {p["metadata"]["name"]: p for p in r["items"]}


def pod_of(fed, sid):
    s, pod = fed.sim_of(sid)
    return s.pod(pod)


def rules_in_force(fed, sid, names):
    """Waits until kubesim has applied exactly the policies <names> to the
    sandbox's pod (its nftables rules are in place)."""
    _, pod = fed.sim_of(sid)

    def done():
        st, r = sim(fed).admin("GET", "/_sim/netpol")
        for p in r.get("pods", []):
            if p["name"] == pod and not p["pending"] and sorted(p["policies"]) == sorted(names):
                check(p["error"] == "", f"kubesim could not apply the rules: {p}")
                return True
        return False
    check(wait_until(done, 20, 0.05), f"kubesim did not put {names} in force for {pod}: "
          f"{short(sim(fed).admin('GET', '/_sim/netpol')[1], 1500)}")


PROBE = ("import socket, sys\n"
         "try:\n"
         "    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)\n"
         "    print('ok ' + s.recv(64).decode().strip())\n"
         "except OSError as e:\n"
         "    print('refused %s %s' % (e.errno, type(e).__name__))\n")


def connect(fed, sid, ip, port, token=tr.TOKEN_A):
    """'ok <greeting>' or 'refused <errno> <name>' as seen from inside."""
    r = fed.exec_ok(sid, ["python3", "-c", PROBE, ip, str(port)], token=token, timeout_s=20)
    check(r.get("exit_code") == 0, f"the probe failed: {short(r)}")
    return r["stdout"].strip()


def blocked(answer):
    # kubesim rejects with ICMP admin-prohibited: EHOSTUNREACH (113).
    return answer.startswith("refused 113 ")


class Listener:
    """A TCP server of the test's own on <ip>:<port> that greets and closes."""

    def __init__(self, ip, port):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((ip, port))
        self.sock.listen(16)
        self.accepted = 0
        threading.Thread(target=self.run, daemon=True).start()

    def run(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            try:
                c.sendall(b"hello-from-gateway\n")
            finally:
                c.close()


def test_setup(fed):
    state = sim(fed).state()["pod_network"]
    fed.shared["gw"] = state.get("gateway")
    fed.shared["cidr"] = state.get("cidr")
    fed.shared["enforcing"] = enforcing(fed) and state.get("mode") == "bridge"
    if not fed.shared["enforcing"]:
        print("     note: no pod network namespaces (not root): connection checks are skipped")
        return
    fed.shared["listener"] = Listener(fed.shared["gw"], LISTEN_PORT)
    # "The internet" number two: a server in a sandbox with the default policy.
    srv = fed.create_one(name="server")
    st, r = fed.api("POST", f"/v1/sandboxes/{srv['id']}/processes",
                    {"argv": ["python3", "-c", "import socket\n"
                              "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
                              f"s.bind(('0.0.0.0', {SERVER_PORT})); s.listen(16)\n"
                              "while True:\n    c, _ = s.accept(); c.sendall(b'hello-from-pod\\n'); c.close()\n"]})
    check(st == 201, f"start the server: {st} {short(r)}")
    fed.shared["server_ip"] = pod_of(fed, srv["id"])["status"]["podIP"]
    fed.shared["server"] = srv["id"]
    # A default sandbox reaches both (so a refusal below is the policy's).
    plain = fed.create_one(name="plain")
    fed.shared["plain"] = plain["id"]
    check(wait_until(lambda: connect(fed, plain["id"], fed.shared["server_ip"], SERVER_PORT)
                     == "ok hello-from-pod", 20, 0.2), "a default sandbox does not reach the other pod's server")
    check(connect(fed, plain["id"], fed.shared["gw"], LISTEN_PORT) == "ok hello-from-gateway",
          "a default sandbox does not reach the gateway's listener")
    check("network" in fed.api("GET", "/v1/sandboxes/" + plain["id"])[1] and
          EGRESS not in pod_of(fed, plain["id"])["metadata"]["labels"], "a default sandbox carries an egress label")


def test_bad_input(fed):
    before = set(policies(fed))
    cases = [
        ({"allow_internet": False, "allow_out": ["example.com"]}, "network.allow_out[0]", "example.com", "domain"),
        ({"deny_out": ["10.0.0.0/8", "api.openai.com"]}, "network.deny_out[1]", "api.openai.com", "domain"),
        ({"allow_out": ["10.0.0.0/33"]}, "network.allow_out[0]", "10.0.0.0/33", "prefix length"),
        ({"deny_out": ["2001:db8::/129"]}, "network.deny_out[0]", "2001:db8::/129", "prefix length"),
        ({"deny_out": ["10.0.0.1/8"]}, "network.deny_out[0]", "10.0.0.1/8", "did you mean 10.0.0.0/8"),
        ({"allow_out": ["010.1.2.3"]}, "network.allow_out[0]", "010.1.2.3", "not an IP address"),
        ({"allow_out": ["10.0.0.0/08"]}, "network.allow_out[0]", "10.0.0.0/08", "prefix length"),
        ({"allow_out": ["fe80::1%eth0"]}, "network.allow_out[0]", "fe80::1%eth0", "not an IP address"),
        ({"allow_out": [7]}, "network.allow_out[0]", 7, "string"),
        ({"allow_out": "10.0.0.0/8"}, "network.allow_out", "10.0.0.0/8", "array"),
        ({"allow_internet": "no"}, "network.allow_internet", "no", "true or false"),
        ({"allow_in": []}, "network", None, "unknown field network.allow_in"),
        ({"deny_out": [f"10.0.{i}.0/24" for i in range(65)]}, "network.deny_out", None, "at most 64"),
    ]
    for net, field, value, words in cases:
        st, r = fed.api("POST", "/v1/sandboxes", {"image": tr.IMAGE, "network": net})
        e = expect_error((st, r), 400, "invalid_network", f"network {short(net, 80)}")
        check(e.get("field") == field and e.get("value") == value and words in e.get("message", ""),
              f"network {short(net, 80)}: field/value/message: {short(e)}")
    expect_error(fed.api("POST", "/v1/sandboxes", {"image": tr.IMAGE, "network": ["10.0.0.0/8"]}), 400,
                 "invalid_network", "network as an array")
    # 64 entries are fine (the bound), and IPv6 and bare addresses too.
    st, r = fed.api("POST", "/v1/placement/explain",
                    {"image": tr.IMAGE, "network": {"deny_out": [f"10.0.{i}.0/24" for i in range(63)] +
                                                    ["2001:db8::1"]}})
    check(st == 200 and len(r["request"]["network"]["deny_out"]) == 64 and
          "2001:db8::1/128" in r["request"]["network"]["deny_out"], f"64 entries: {st} {short(r)}")
    check(set(policies(fed)) == before, f"a refused create left a NetworkPolicy: {set(policies(fed)) - before}")


def test_allow_only_on_a_warm_claim(fed):
    st, r = fed.api("POST", "/v1/pools", {"name": "egpool", "image": tr.IMAGE, "replicas": 2, "cpus": 1,
                                          "memory_gb": 1})
    check(st == 201, f"pool: {st} {short(r)}")
    check(wait_until(lambda: all(c["ready"] >= 2 for c in fed.api("GET", "/v1/pools/egpool")[1]
                                 .get("clusters", [])), 60, 0.2), "the pool did not get warm")
    warm = {p["metadata"]["name"] for p in sim(fed).pods("fedrouter.io/pool=egpool,fedrouter.io/state=warm")}
    gw = fed.shared["gw"]
    r = fed.create({"pool": "egpool", "network": {"allow_internet": False, "allow_out": [gw]}})
    sb = r["sandboxes"][0]
    sid = sb["id"]
    _, pod = fed.sim_of(sid)
    check(sb.get("warm") is True and pod in warm and r["placement"]["warm"] == 1,
          f"not a warm claim of the pool's pods {warm}: {short(sb)}")
    check(sb.get("network") == {"allow_internet": False, "allow_out": [gw + "/32"], "deny_out": []},
          f"the answer's network: {short(sb)}")
    labels = pod_of(fed, sid)["metadata"]["labels"]
    h = labels.get(EGRESS, "")
    pols = policies(fed)
    name = "fr-egress-" + h
    check(len(h) == 16 and name in pols, f"label {EGRESS}={h!r}, policies {list(pols)}")
    spec = pols[name]["spec"]
    check(spec == {"podSelector": {"matchLabels": {EGRESS: h}}, "policyTypes": ["Egress"],
                   "egress": [{"to": [{"ipBlock": {"cidr": gw + "/32"}}]}]}, f"the policy: {short(spec, 800)}")
    fed.shared["allow_only"] = (sid, name)
    if not fed.shared["enforcing"]:
        return
    rules_in_force(fed, sid, [name])
    check(connect(fed, sid, gw, LISTEN_PORT) == "ok hello-from-gateway", "the allowed address is not reachable")
    got = connect(fed, sid, fed.shared["server_ip"], SERVER_PORT)
    check(blocked(got), f"the other pod was reachable: {got}")
    # The other ports of the allowed address are allowed too (no ports in the rule).
    got = connect(fed, sid, gw, 1)
    check(got.startswith("refused 111 "), f"another port of the allowed address: {got} (want refused by the host)")
    # The sandbox cannot undo its rules: no CAP_NET_ADMIN.
    r = fed.exec_ok(sid, ["sh", "-c", "nft flush ruleset 2>&1 || echo cannot"])
    check("cannot" in r["stdout"] or "Operation not permitted" in r["stdout"] or r["exit_code"] != 0,
          f"the sandbox flushed its rules: {short(r)}")
    check(blocked(connect(fed, sid, fed.shared["server_ip"], SERVER_PORT)), "rules gone after a flush attempt")
    # The default sandbox still reaches the server: the policy selects by label.
    check(connect(fed, fed.shared["plain"], fed.shared["server_ip"], SERVER_PORT) == "ok hello-from-pod",
          "the default sandbox lost its egress")


def test_deny_out_and_allow_wins(fed):
    gw, srv = fed.shared["gw"], fed.shared.get("server_ip", "10.254.0.9")
    sb = fed.create_one(name="deny", network={"deny_out": [srv + "/32"]})
    sid = sb["id"]
    h = pod_of(fed, sid)["metadata"]["labels"].get(EGRESS)
    pol = policies(fed).get("fr-egress-%s" % h)
    check(pol is not None and pol["spec"]["egress"] == [{"to": [
        {"ipBlock": {"cidr": "0.0.0.0/0", "except": [srv + "/32"]}}, {"ipBlock": {"cidr": "::/0"}}]}],
        f"the deny policy: {short(pol, 800)}")
    # The whole pod range denied, the gateway allowed: allow wins.
    both = fed.create_one(name="both", network={"deny_out": [fed.shared["cidr"]], "allow_out": [gw]})
    hb = pod_of(fed, both["id"])["metadata"]["labels"].get(EGRESS)
    check(hb and hb != h, f"two policies, two labels: {h} {hb}")
    if not fed.shared["enforcing"]:
        return
    rules_in_force(fed, sid, ["fr-egress-" + h])
    check(blocked(connect(fed, sid, srv, SERVER_PORT)), "the denied pod was reachable")
    check(connect(fed, sid, gw, LISTEN_PORT) == "ok hello-from-gateway", "an address not denied is not reachable")
    rules_in_force(fed, both["id"], ["fr-egress-" + hb])
    check(connect(fed, both["id"], gw, LISTEN_PORT) == "ok hello-from-gateway", "allow_out did not win over deny_out")
    check(blocked(connect(fed, both["id"], srv, SERVER_PORT)), "the denied range was reachable")
    fed.shared["deny"] = (sid, "fr-egress-" + h)
    fed.shared["both"] = both["id"]


def test_policy_shared_then_deleted(fed):
    """One object per policy, shared; deleted once unused, never while used,
    with two router replicas sweeping the same cluster."""
    sid, name = fed.shared["allow_only"]
    gw = fed.shared["gw"]
    r2 = fed.start_router()
    # The same policy written differently (order, duplicates), made through
    # the second replica: the same object.
    st, r = fed.api("POST", "/v1/sandboxes", {"image": tr.IMAGE, "name": "twin",
                                              "network": {"allow_out": [gw + "/32", gw], "allow_internet": False}},
                    router=r2)
    check(st == 201, f"create through the second router: {st} {short(r)}")
    twin = r["sandboxes"][0]
    check(pod_of(fed, twin["id"])["metadata"]["labels"].get(EGRESS) == name[len("fr-egress-"):],
          "the same policy got another label")
    other = fed.create_one(name="other", network={"deny_out": ["192.0.2.0/24"]})
    oname = "fr-egress-" + pod_of(fed, other["id"])["metadata"]["labels"][EGRESS]
    check({name, oname} <= set(policies(fed)), f"policies: {list(policies(fed))}")
    for s_ in (sid, other["id"]):
        st, _ = fed.api("DELETE", "/v1/sandboxes/" + s_)
        check(st in (200, 202, 204), f"delete {s_}: {st}")
    # The other policy, unused from now on, goes after the grace period;
    # by then both replicas had the chance to delete the shared one, which
    # the twin still uses: it must be there.
    check(wait_until(lambda: oname not in policies(fed), GRACE_S * 3 + 10, 0.5),
          f"{oname} outlived its last sandbox by {GRACE_S * 3 + 10} s")
    check(name in policies(fed), f"{name} was deleted while the twin uses it")
    st, r = fed.api("GET", "/v1/sandboxes/" + twin["id"], router=r2)
    check(st == 200 and r.get("network", {}).get("allow_out") == [gw + "/32"], f"GET shows the network: {short(r)}")
    fed.api("DELETE", "/v1/sandboxes/" + twin["id"], router=r2)
    check(wait_until(lambda: name not in policies(fed), GRACE_S * 3 + 10, 0.5),
          f"{name} outlived its last sandbox by {GRACE_S * 3 + 10} s")


def test_policy_deleted_while_used_comes_back(fed):
    sid, name = fed.shared.get("deny") or (None, None)
    if sid is None:
        srv = fed.shared.get("server_ip", "10.254.0.9")
        sb = fed.create_one(name="deny2", network={"deny_out": [srv + "/32"]})
        sid = sb["id"]
        name = "fr-egress-" + pod_of(fed, sid)["metadata"]["labels"][EGRESS]
    c = __import__("http.client").client.HTTPSConnection("127.0.0.1", sim(fed).port, timeout=15,
                                                         context=sim(fed).ssl)
    c.request("DELETE", f"/apis/networking.k8s.io/v1/namespaces/default/networkpolicies/{name}",
              headers={"Authorization": "Bearer " + tr.SIM_TOKEN})
    check(c.getresponse().status == 200, "delete the policy behind the router's back")
    c.close()
    check(wait_until(lambda: name in policies(fed), 20, 0.2), f"{name} did not come back while a sandbox uses it")
    if fed.shared["enforcing"]:
        rules_in_force(fed, sid, [name])
        check(blocked(connect(fed, sid, fed.shared["server_ip"], SERVER_PORT)), "the denied pod was reachable")


def test_tenant_default_and_override(fed):
    gw = fed.shared["gw"]
    sb = fed.create_one(token=tr.TOKEN_B, name="bdefault")
    check(sb.get("network") == {"allow_internet": False, "allow_out": [gw + "/32"], "deny_out": []},
          f"tenant b's default: {short(sb)}")
    check(EGRESS in pod_of(fed, sb["id"])["metadata"]["labels"], "the default did not label the pod")
    # Overriding one field keeps the others of the default.
    sb2 = fed.create_one(token=tr.TOKEN_B, name="bopen", network={"allow_internet": True})
    check(sb2.get("network") == {"allow_internet": True, "allow_out": [], "deny_out": []} and
          EGRESS not in pod_of(fed, sb2["id"])["metadata"]["labels"], f"override: {short(sb2)}")
    if fed.shared["enforcing"]:
        rules_in_force(fed, sb["id"], ["fr-egress-" + pod_of(fed, sb["id"])["metadata"]["labels"][EGRESS]])
        check(blocked(connect(fed, sb["id"], fed.shared["server_ip"], SERVER_PORT, token=tr.TOKEN_B)),
              "tenant b's default let the sandbox out")
        check(connect(fed, sb2["id"], fed.shared["server_ip"], SERVER_PORT, token=tr.TOKEN_B) == "ok hello-from-pod",
              "the override did not open the sandbox")
    for s in (sb, sb2):
        fed.api("DELETE", "/v1/sandboxes/" + s["id"], token=tr.TOKEN_B)


def test_e2b_mapping(fed):
    h = {"X-API-Key": tr.TOKEN_A}
    gw = fed.shared["gw"]
    st, r = fed.api("POST", "/e2b/sandboxes", {"templateID": "egpool", "allow_internet_access": False,
                                               "network": {"allowOut": [gw]}}, token=None, headers=h)
    check(st == 201, f"E2B create: {st} {short(r)}")
    sid = r["sandboxID"]
    check(r.get("allowInternetAccess") is False and r.get("network", {}).get("allowOut") == [gw + "/32"],
          f"E2B create answer: {short(r)}")
    st, info = fed.api("GET", "/e2b/sandboxes/" + sid, token=None, headers=h)
    check(st == 200 and info.get("allowInternetAccess") is False and info["network"]["allowOut"] == [gw + "/32"]
          and info["network"]["denyOut"] == [], f"E2B getInfo: {st} {short(info)}")
    st, v1 = fed.api("GET", "/v1/sandboxes/" + sid)
    check(st == 200 and EGRESS in pod_of(fed, v1["id"])["metadata"]["labels"], f"v1 view: {st} {short(v1)}")
    # denyOut alone, with E2B's ALL_TRAFFIC in allowOut meaning everything v4.
    st, r = fed.api("POST", "/e2b/sandboxes", {"templateID": "egpool", "network": {"denyOut": ["0.0.0.0/0"],
                                                                                   "allowOut": [gw]}},
                    token=None, headers=h)
    check(st == 201 and r["network"] == {"allowOut": [gw + "/32"], "denyOut": ["0.0.0.0/0"]},
          f"E2B denyOut: {st} {short(r)}")
    pod = pod_of(fed, fed.api("GET", "/v1/sandboxes/" + r["sandboxID"])[1]["id"])
    pol = policies(fed)["fr-egress-" + pod["metadata"]["labels"][EGRESS]]
    check(pol["spec"]["egress"] == [{"to": [{"ipBlock": {"cidr": "::/0"}}, {"ipBlock": {"cidr": gw + "/32"}}]}],
          f"every IPv4 denied but the gateway: {short(pol['spec'], 600)}")
    # A domain name: E2B's error shape, naming E2B's field.
    st, r = fed.api("POST", "/e2b/sandboxes", {"templateID": "egpool", "network": {"allowOut": ["example.com"]}},
                    token=None, headers=h)
    check(st == 400 and r.get("code") == 400 and r["error"]["code"] == "invalid_network" and
          r["error"]["field"] == "network.allowOut[0]" and "domain name" in r.get("message", ""),
          f"E2B domain name: {st} {short(r)}")
    st, r = fed.api("POST", "/e2b/sandboxes", {"templateID": "egpool", "allow_internet_access": "no"},
                    token=None, headers=h)
    check(st == 400 and r["error"]["field"] == "allow_internet_access", f"E2B bad bool: {st} {short(r)}")
    st, r = fed.api("POST", "/e2b/sandboxes", {"templateID": "egpool", "network": {"egressProxy": {
        "address": "proxy:1080"}}}, token=None, headers=h)
    check(st == 501, f"E2B egressProxy: {st} {short(r)}")
    if fed.shared["enforcing"]:
        st, v1 = fed.api("GET", "/v1/sandboxes/" + sid)
        rules_in_force(fed, v1["id"], ["fr-egress-" + pod_of(fed, v1["id"])["metadata"]["labels"][EGRESS]])
        check(blocked(connect(fed, v1["id"], fed.shared["server_ip"], SERVER_PORT)), "E2B sandbox got out")


def test_cleanup(fed):
    if "listener" in fed.shared:
        fed.shared["listener"].sock.close()
    for token in (tr.TOKEN_A, tr.TOKEN_B):
        for sid in fed.list_ids(token=token):
            fed.api("DELETE", "/v1/sandboxes/" + sid, token=token)
    fed.api("DELETE", "/v1/pools/egpool")
    check(wait_until(lambda: not policies(fed), GRACE_S * 3 + 10, 0.5),
          f"policies left once every sandbox went: {list(policies(fed))}")


TESTS = [test_setup, test_bad_input, test_allow_only_on_a_warm_claim, test_deny_out_and_allow_wins,
         test_policy_shared_then_deleted, test_policy_deleted_while_used_comes_back,
         test_tenant_default_and_override, test_e2b_mapping, test_cleanup]


if __name__ == "__main__":
    sys.exit(tr.run_one_federation(
        __doc__, lambda: EgressFed("egress", [(CLUSTER, "us", ["--nodes", "2", "--node-cpu", "64", "--node-memory",
                                                              "256Gi", "--agent-binary",
                                                              os.path.abspath(tr.ARGS.agent)])]),
        TESTS, ["--agent"]))
