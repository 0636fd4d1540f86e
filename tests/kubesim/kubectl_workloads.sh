#!/usr/bin/env bash
# shellcheck disable=SC2317  # helpers are called through wait_until / traps
# shellcheck disable=SC2015  # "A && B || fail ...": fail when either check does not hold
# kubectl_workloads.sh — workloads as a real cluster runs them, driven by the
# real kubectl (v1.32) against kubesim: the Deployment controller
# (ReplicaSet per template with pod-template-hash, RollingUpdate within
# maxSurge/maxUnavailable, Recreate, revisions, rollout status / history /
# undo, set image, scale, revisionHistoryLimit, cascading deletion), the
# protobuf bodies of `kubectl create deployment|service|...`, and Events
# (kubectl get events, field selectors, kubectl describe) recorded by the
# scheduler, kubelet and controllers.
#
# Usage: kubectl_workloads.sh PATH/TO/kubesim
#
# Same conventions as kubectl_drain.sh: named steps that all run, bounded
# waits, loopback only, the trap kills kubesim and removes the temp dir.
# Env: KEEP_TMP=1 keeps the temp dir for debugging.
set -uo pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/lib.sh"
lib_require "${1:-}" kubectl

TOKEN="wl-token-$$"

# jp RESOURCE JSONPATH — the value, or "" (RC set)
jp() { k get "$1" -o "jsonpath=$2"; cat "$OUT"; }

# deploy_yaml NAME REPLICAS IMAGE STRATEGY-YAML [EXTRA-SPEC-YAML]
deploy_yaml() {
  cat >"$T/$1.yaml" <<EOF
apiVersion: apps/v1
kind: Deployment
metadata:
  name: $1
spec:
  replicas: $2
  selector: {matchLabels: {app: $1}}
  strategy: $4
${5:-}
  template:
    metadata: {labels: {app: $1}}
    spec:
      containers: [{name: c, image: "$3"}]
EOF
}

ready_is() { # ready_is DEPLOY N — READY n/n, UP-TO-DATE and AVAILABLE n in kubectl get
  k get deploy "$1" --no-headers
  [ "$RC" -eq 0 ] && [ "$(awk '{print $2, $3, $4}' "$OUT")" = "$2/$2 $2 $2" ]
}

pods_of() { # pods_of LABEL-SELECTOR — names of the non-terminating pods, sorted
  k get pods -l "$1" -o 'jsonpath={range .items[*]}{.metadata.name}{" "}{.metadata.deletionTimestamp}{"\n"}{end}'
  awk 'NF == 1 {print $1}' "$OUT" | sort
}

npods_is() { [ "$(pods_of "$1" | wc -l)" -eq "$2" ]; }
gone() { k get "$1" -o name; [ "$RC" -ne 0 ] && grep -q NotFound "$ERR"; }

# scaling_events DEPLOY — the ScalingReplicaSet messages about it, sorted
scaling_events() {
  k get events --field-selector "involvedObject.kind=Deployment,involvedObject.name=$1,reason=ScalingReplicaSet" \
    -o 'jsonpath={range .items[*]}{.message}{"\n"}{end}'
  sort "$OUT"
}

rs_of() { # rs_of DEPLOY — its ReplicaSets as "name replicas revision", by revision
  k get rs -l "app=$1" -o 'jsonpath={range .items[*]}{.metadata.name} {.spec.replicas} {.metadata.annotations.deployment\.kubernetes\.io/revision}{"\n"}{end}'
  sort -k3 -n "$OUT"
}

# ------------------------------------------------------------------ start
echo "kubectl: $KUBECTL ($("$KUBECTL" version --client 2>/dev/null | head -n1))"
mkdir -p "$T/kcache"
start_kubesim "$KUBESIM" --tls --token "$TOKEN" --name wl --nodes 2 --start-ms 100 --terminate-ms 300

# ------------------------------------------------------------------ deployment
step "kubectl apply of a Deployment: one ReplicaSet <name>-<pod-template-hash> owned by it, pods labelled, rollout status"
deploy_yaml web 3 nginx:1.25 '{type: RollingUpdate, rollingUpdate: {maxSurge: 1, maxUnavailable: 0}}'
k apply -f "$T/web.yaml"
expect_rc 0 "apply web"
k rollout status deploy/web --timeout=30s
expect_rc 0 "rollout status web" && { grep -q 'deployment "web" successfully rolled out' "$OUT" || fail "rollout status text"; }
wait_until 10 ready_is web 3 || fail "kubectl get deploy web: want READY 3/3, UP-TO-DATE 3, AVAILABLE 3"
RS1="$(jp rs '{.items[0].metadata.name}')"
H1="$(jp rs '{.items[0].metadata.labels.pod-template-hash}')"
[ -n "$H1" ] && [ "$RS1" = "web-$H1" ] || fail "ReplicaSet '$RS1' should be web-<pod-template-hash> (hash '$H1')"
[ "$(jp "rs/$RS1" '{.spec.selector.matchLabels.pod-template-hash}/{.spec.template.metadata.labels.pod-template-hash}')" = "$H1/$H1" ] ||
  fail "pod-template-hash missing from the ReplicaSet's selector or template"
[ "$(jp "rs/$RS1" '{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}/{.metadata.ownerReferences[0].controller}')" = "Deployment/web/true" ] ||
  fail "ReplicaSet ownerReference should be Deployment/web controller=true"
[ "$(jp "rs/$RS1" '{.metadata.ownerReferences[0].uid}')" = "$(jp deploy/web '{.metadata.uid}')" ] || fail "ownerReference uid"
[ "$(pods_of "pod-template-hash=$H1" | wc -l)" -eq 3 ] || fail "3 pods labelled pod-template-hash=$H1"
[ "$(jp deploy/web '{.metadata.annotations.deployment\.kubernetes\.io/revision}')" = 1 ] || fail "deployment revision should be 1"
[ "$(jp deploy/web '{.status.observedGeneration}={.metadata.generation}')" = "1=1" ] || fail "observedGeneration"
[ "$(jp deploy/web '{.status.conditions[?(@.type=="Available")].reason}/{.status.conditions[?(@.type=="Progressing")].reason}')" = \
  "MinimumReplicasAvailable/NewReplicaSetAvailable" ] || fail "conditions Available/Progressing reasons"

step "kubectl scale deploy (the scale subresource): same ReplicaSet, 4 pods"
k scale deploy web --replicas=4
expect_rc 0 "scale" && { grep -q 'deployment.apps/web scaled' "$OUT" || fail "scale output"; }
wait_until 15 ready_is web 4 || fail "web not 4/4 after scale"
[ "$(rs_of web)" = "$RS1 4 1" ] || fail "want only $RS1 with 4 replicas, revision 1; got: $(rs_of web | tr '\n' ';')"
k get --raw /apis/apps/v1/namespaces/default/deployments/web/scale
grep -q '"kind":"Scale"' "$OUT" && grep -q '"replicas":4' "$OUT" || fail "GET deployments/web/scale"

step "kubectl set image rolls out within maxSurge 1 / maxUnavailable 0; history keeps revisions"
k set image deploy/web c=nginx:1.26
expect_rc 0 "set image"
k rollout status deploy/web --timeout=30s
expect_rc 0 "rollout status after set image"
wait_until 10 ready_is web 4 || fail "web not 4/4 after the rollout"
RS2="$(rs_of web | awk '$3 == 2 {print $1}')"
[ -n "$RS2" ] && [ "$RS2" != "$RS1" ] || fail "no revision-2 ReplicaSet"
[ "$(rs_of web | awk '{print $2, $3}' | tr '\n' ';')" = "0 1;4 2;" ] || fail "ReplicaSets: want old 0 (rev 1), new 4 (rev 2)"
[ "$(jp deploy/web '{.metadata.annotations.deployment\.kubernetes\.io/revision}')" = 2 ] || fail "deployment revision 2"
[ "$(jp deploy/web '{.status.observedGeneration}')" = "$(jp deploy/web '{.metadata.generation}')" ] || fail "observedGeneration after set image"
scaling_events web >"$T/ev"
cat >"$T/want" <<EOF
Scaled down replica set $RS1 from 1 to 0
Scaled down replica set $RS1 from 2 to 1
Scaled down replica set $RS1 from 3 to 2
Scaled down replica set $RS1 from 4 to 3
Scaled up replica set $RS1 from 0 to 3
Scaled up replica set $RS1 from 3 to 4
Scaled up replica set $RS2 from 0 to 1
Scaled up replica set $RS2 from 1 to 2
Scaled up replica set $RS2 from 2 to 3
Scaled up replica set $RS2 from 3 to 4
EOF
sort -o "$T/want" "$T/want"
diff "$T/want" "$T/ev" >"$ERR" || fail "ScalingReplicaSet events: one pod at a time (diff want/got in stderr)"
k rollout history deploy/web
expect_rc 0 "rollout history" && { [ "$(awk '/^[0-9]/ {print $1}' "$OUT" | tr '\n' ' ')" = "1 2 " ] || fail "history revisions: want 1 2"; }

step "kubectl rollout undo goes back to the revision-1 ReplicaSet, which becomes revision 3"
k rollout undo deploy/web
expect_rc 0 "rollout undo" && { grep -q 'rolled back' "$OUT" || fail "undo output"; }
k rollout status deploy/web --timeout=30s
expect_rc 0 "rollout status after undo"
wait_until 10 ready_is web 4 || fail "web not 4/4 after undo"
[ "$(jp deploy/web '{.spec.template.spec.containers[0].image}')" = nginx:1.25 ] || fail "image after undo"
[ "$(rs_of web | tr '\n' ';')" = "$RS2 0 2;$RS1 4 3;" ] || fail "want $RS1 (4, revision 3) and $RS2 (0, revision 2)"
k rollout history deploy/web
[ "$(awk '/^[0-9]/ {print $1}' "$OUT" | tr '\n' ' ')" = "2 3 " ] || fail "history after undo: want 2 3"

step "Recreate: the old ReplicaSet goes to 0 before the new one scales up"
deploy_yaml rec 2 busybox:1 '{type: Recreate}'
k apply -f "$T/rec.yaml"
expect_rc 0 "apply rec"
wait_until 15 ready_is rec 2 || fail "rec not 2/2"
RA="$(rs_of rec | awk '{print $1}')"
k set image deploy/rec c=busybox:2
expect_rc 0 "set image rec"
k rollout status deploy/rec --timeout=30s
expect_rc 0 "rollout status rec"
RB="$(rs_of rec | awk '$3 == 2 {print $1}')"
scaling_events rec >"$T/ev"
printf '%s\n' "Scaled down replica set $RA from 2 to 0" "Scaled up replica set $RA from 0 to 2" \
  "Scaled up replica set $RB from 0 to 2" | sort >"$T/want"
diff "$T/want" "$T/ev" >"$ERR" || fail "Recreate ScalingReplicaSet events (diff in stderr)"

step "revisionHistoryLimit 1: one old ReplicaSet kept"
deploy_yaml hist 1 img:1 '{type: RollingUpdate}' '  revisionHistoryLimit: 1'
k apply -f "$T/hist.yaml"
expect_rc 0 "apply hist"
for v in 2 3 4; do
  k set image deploy/hist c="img:$v"
  k rollout status deploy/hist --timeout=30s
  expect_rc 0 "rollout hist img:$v"
done
wait_until 10 test "$(rs_of hist | wc -l)" -eq 2 || fail "want 2 ReplicaSets (new + 1 old), got: $(rs_of hist | tr '\n' ';')"
[ "$(rs_of hist | awk '{print $3}' | tr '\n' ' ')" = "3 4 " ] || fail "kept revisions: want 3 4"

step "defaults and validation: strategy defaulted to 25%, a bad strategy type is 422"
[ "$(jp deploy/hist '{.spec.strategy.rollingUpdate.maxSurge}/{.spec.strategy.rollingUpdate.maxUnavailable}/{.spec.revisionHistoryLimit}')" = "25%/25%/1" ] ||
  fail "defaults"
deploy_yaml bad 1 img:1 '{type: Sideways}'
k apply -f "$T/bad.yaml"
[ "$RC" -ne 0 ] && grep -q 'spec.strategy.type: Unsupported value: "Sideways"' "$ERR" || fail "bad strategy should be refused"

# ------------------------------------------------------------------ protobuf
step "kubectl create deployment (protobuf body) runs 2 pods"
k create deployment d1 --image=nginx --replicas=2 --port=80
expect_rc 0 "create deployment" && { grep -q 'deployment.apps/d1 created' "$OUT" || fail "create output"; }
wait_until 15 ready_is d1 2 || fail "d1 not 2/2"
[ "$(jp deploy/d1 '{.spec.template.spec.containers[0].name}/{.spec.template.spec.containers[0].image}/{.spec.template.spec.containers[0].ports[0].containerPort}/{.spec.selector.matchLabels.app}')" = \
  "nginx/nginx/80/d1" ] || fail "decoded Deployment fields"

step "kubectl create service/serviceaccount/role/rolebinding/clusterrole/clusterrolebinding/quota/pdb (protobuf bodies)"
for c in "service clusterip s1 --tcp=80:8080" "serviceaccount sa1" "role r1 --verb=get,list --resource=pods" \
  "rolebinding rb1 --role=r1 --user=u1" "clusterrole cr1 --verb=get --resource=nodes" \
  "clusterrolebinding crb1 --clusterrole=cr1 --group=g1" "quota q1 --hard=pods=100,requests.cpu=1k" \
  "poddisruptionbudget pdb1 --selector=app=d1 --min-available=1"; do
  # shellcheck disable=SC2086  # the words are kubectl arguments
  k create $c
  expect_rc 0 "kubectl create $c"
done
[ "$(jp svc/s1 '{.spec.ports[0].port}/{.spec.ports[0].targetPort}/{.spec.type}/{.spec.selector.app}')" = "80/8080/ClusterIP/s1" ] || fail "service fields"
[ "$(jp role/r1 '{.rules[0].verbs}|{.rules[0].resources}')" = '["get","list"]|["pods"]' ] || fail "role rules"
[ "$(jp rolebinding/rb1 '{.roleRef.kind}/{.roleRef.name}/{.subjects[0].kind}/{.subjects[0].name}')" = "Role/r1/User/u1" ] || fail "rolebinding"
[ "$(jp clusterrolebinding/crb1 '{.roleRef.kind}/{.subjects[0].kind}/{.subjects[0].name}')" = "ClusterRole/Group/g1" ] || fail "clusterrolebinding"
[ "$(jp quota/q1 '{.spec.hard.pods}/{.spec.hard.requests\.cpu}')" = "100/1k" ] || fail "quota spec.hard"
[ "$(jp pdb/pdb1 '{.spec.minAvailable}/{.spec.selector.matchLabels.app}')" = "1/d1" ] || fail "pdb spec"
k get sa sa1 -o name
out_is "serviceaccount/sa1" "serviceaccount"

# ------------------------------------------------------------------ events
step "kubectl get events: the server's table (LAST SEEN TYPE REASON OBJECT MESSAGE)"
k get events
expect_rc 0 "get events" && { head -n1 "$OUT" | grep -Eq '^LAST SEEN +TYPE +REASON +OBJECT +MESSAGE$' || fail "events table header"; }
grep -Eq 'Normal +ScalingReplicaSet +deployment/web +Scaled up replica set' "$OUT" || fail "a ScalingReplicaSet row"

step "pod events from the scheduler and kubelet, by field selector and in kubectl describe"
P="$(pods_of app=d1 | head -n1)"
NODE="$(jp "pod/$P" '{.spec.nodeName}')"
k get events --field-selector "involvedObject.name=$P,involvedObject.kind=Pod" -o 'jsonpath={range .items[*]}{.reason}{"\n"}{end}'
# Pulling only when the node had not pulled the image before; then Pulled
# says it pulled, else that the image was present.
if grep -q '^Pulling$' "$OUT"; then PULLED='Successfully pulled image "nginx" in'; else PULLED='Container image "nginx" already present on machine'; fi
[ "$(grep -v '^Pulling$' "$OUT" | sort | tr '\n' ' ')" = "Created Pulled Scheduled Started " ] || fail "pod $P events: want Created Pulled Scheduled Started"
k get events --field-selector "involvedObject.name=$P,reason=Pulled" -o 'jsonpath={.items[0].message}'
grep -qF "$PULLED" "$OUT" || fail "Pulled message: want '$PULLED...'"
k get events --field-selector "involvedObject.name=$P,reason=Scheduled" -o 'jsonpath={.items[0].message}|{.items[0].source.component}|{.items[0].type}|{.items[0].count}'
out_is "Successfully assigned default/$P to $NODE|default-scheduler|Normal|1" "Scheduled event"
k get events --field-selector "involvedObject.uid=$(jp "pod/$P" '{.metadata.uid}'),reason=Started" -o 'jsonpath={.items[0].message}|{.items[0].source.component}|{.items[0].source.host}'
out_is "Started container nginx|kubelet|$NODE" "Started event by uid"
k events --for "pod/$P"
expect_rc 0 "kubectl events --for pod/$P" && {
  grep -Eq "Normal +Scheduled +Pod/$P +Successfully assigned" "$OUT" || fail "kubectl events --for: Scheduled row"
  grep -q "Pod/$P" "$OUT" && ! grep -v "Pod/$P" "$OUT" | grep -qv '^LAST SEEN' || fail "kubectl events --for shows other objects"
}
k describe pod "$P"
expect_rc 0 "describe pod"
sed -n '/^Events:/,$p' "$OUT" >"$T/ev"
grep -Eq 'Normal +Scheduled +[0-9a-z]+ +default-scheduler +Successfully assigned' "$T/ev" || { cp "$T/ev" "$ERR"; fail "describe: Scheduled row"; }
grep -Eq 'Normal +Started +[0-9a-z]+ +kubelet +Started container nginx' "$T/ev" || { cp "$T/ev" "$ERR"; fail "describe: Started row"; }

step "ReplicaSet controller events: SuccessfulCreate per pod, SuccessfulDelete and Killing on scale-down"
RSD="$(rs_of d1 | awk '{print $1}')"
k get events --field-selector "involvedObject.name=$RSD,reason=SuccessfulCreate" -o 'jsonpath={range .items[*]}{.message}{"\n"}{end}'
[ "$(sort "$OUT")" = "$(pods_of app=d1 | sed 's/^/Created pod: /')" ] || fail "SuccessfulCreate messages should name the 2 pods"
k scale deploy d1 --replicas=1
expect_rc 0 "scale d1 to 1"
wait_until 15 npods_is app=d1 1 || fail "d1 not down to 1 pod"
k get events --field-selector "involvedObject.name=$RSD,reason=SuccessfulDelete" -o 'jsonpath={.items[0].message}'
DEL="$(sed -n 's/^Deleted pod: //p' "$OUT")"
[ -n "$DEL" ] || fail "no SuccessfulDelete event"
k get events --field-selector "involvedObject.name=$DEL,reason=Killing" -o 'jsonpath={.items[0].message}'
out_is "Stopping container nginx" "Killing event of $DEL"

step "FailedScheduling: a Warning for a pod no node can take; type=Warning selects it"
deploy_yaml big 1 img:1 '{type: RollingUpdate}'
sed -i 's|image: "img:1"}|image: "img:1", resources: {requests: {cpu: "500"}}}|' "$T/big.yaml"
k apply -f "$T/big.yaml"
expect_rc 0 "apply big"
warn() {
  k get events --field-selector type=Warning -o 'jsonpath={range .items[*]}{.reason}|{.involvedObject.name}|{.message}{"\n"}{end}'
  grep -q '^FailedScheduling|big-' "$OUT"
}
wait_until 15 warn || fail "no FailedScheduling Warning for big's pod"
grep -q 'Insufficient cpu' "$OUT" || fail "FailedScheduling message should say Insufficient cpu"
[ "$(grep -vc '^FailedScheduling|' "$OUT")" -eq 0 ] || fail "type=Warning selected other events"
[ "$(jp deploy/big '{.status.conditions[?(@.type=="Available")].status}')" = False ] || fail "big: Available should be False"
k rollout status deploy/big --timeout=2s
[ "$RC" -ne 0 ] || fail "rollout status of an unavailable deployment should time out"
grep -q 'Waiting for deployment "big" rollout to finish: 0 of 1 updated replicas are available' "$OUT" ||
  fail "rollout status should wait for 0 of 1 available"

# ------------------------------------------------------------------ deletion
step "kubectl delete deploy: ReplicaSets and pods go (background cascade)"
k delete deploy web
expect_rc 0 "delete web"
wait_until 20 npods_is app=web 0 || fail "web pods remain"
k get rs -l app=web -o name
[ -z "$(cat "$OUT")" ] || fail "web ReplicaSets remain: $(cat "$OUT")"

step "the scheduler's retries (room freed above) repeat FailedScheduling: one event, count > 1"
BIGPOD="$(pods_of app=big)"
k get events --field-selector "involvedObject.name=$BIGPOD,reason=FailedScheduling" -o 'jsonpath={range .items[*]}{.count}{"\n"}{end}'
[ "$(wc -l <"$OUT")" -eq 1 ] && [ "$(cat "$OUT")" -ge 2 ] || fail "want one FailedScheduling event for $BIGPOD with count >= 2"

step "kubectl delete deploy --cascade=orphan: ReplicaSet and pods stay, released"
k delete deploy d1 --cascade=orphan
expect_rc 0 "delete d1 orphan"
wait_until 10 gone deploy/d1 || fail "d1 still there"
[ "$(jp "rs/$RSD" '{.spec.replicas}|{.metadata.ownerReferences}')" = "1|" ] || fail "orphaned ReplicaSet should keep 1 replica and lose its ownerReference"
sleep 1
npods_is app=d1 1 || fail "orphaned pods should stay"

finish
