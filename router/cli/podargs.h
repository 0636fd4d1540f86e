/* podargs.h - the create and pool flags that become pod options and
 * secrets in a request body (docs/api.md, "POST /v1/sandboxes"):
 *
 *   --secret NAME                       "secrets": ["NAME", ...]
 *   --gpus N                            "gpus": N
 *   --runtime-class NAME                "runtime_class": "NAME"
 *   --node-selector KEY=VALUE           "node_selector": {"KEY": "VALUE", ...}
 *   --toleration [KEY][=VALUE][:EFFECT[:SECONDS]] or *[:EFFECT[:SECONDS]]
 *                                       "tolerations": [{...}, ...]
 *   --volume /MOUNT/PATH=CLAIM          "volumes": {"/MOUNT/PATH": "CLAIM", ...}
 *   --readiness PORT[/PATH]             "readiness": {"port": PORT, "path": "/PATH"}
 *   --public-port PORT|*                "public_ports": [PORT, ...] or "*" (creates)
 *
 * Each value is checked the way the router checks the field it becomes
 * (which are the API server's rules: cluster_adapter/src/podopts.c), so a
 * bad flag is a usage error before anything is sent. No I/O here: errors
 * are returned as text, which keeps this unit-testable.
 *
 * Toleration grammar, one Kubernetes toleration per flag:
 *   KEY=VALUE        operator Equal (VALUE may be empty: "KEY=")
 *   KEY              operator Exists
 *   *                operator Exists without a key: every taint
 *   :EFFECT          only taints of that effect (NoSchedule,
 *                    PreferNoSchedule, NoExecute); none: every effect
 *   :SECONDS         after :NoExecute only: tolerationSeconds (0..31536000)
 */
#ifndef FEDCTL_PODARGS_H
#define FEDCTL_PODARGS_H

#include <stddef.h>

#include <jansson.h>

/* The router's bounds (cluster_adapter/include/fr/adapter.h and
 * router/src/create.c, docs/api.md). */
#define FC_POD_MAX_SELECTOR 16
#define FC_POD_MAX_TOLERATIONS 16
#define FC_POD_MAX_VOLUMES 8
#define FC_POD_MAX_GPUS 64
#define FC_POD_MAX_SECRETS 64
#define FC_POD_MAX_SECRET_NAME 128
#define FC_POD_MAX_TOLERATION_S 31536000
#define FC_POD_MAX_PUBLIC_PORTS 16

/* Each adds the flag's value <arg> (borrowed) to the JSON object <body>
 * (borrowed): 0; -EINVAL with a message naming the flag and what is wrong
 * in <err> (<errlen> bytes); -ENOMEM. A flag given twice with the same
 * key (node selector key, mount path, secret name) or past its bound
 * is -EINVAL too (the router refuses it as well). */
int fc_pod_add_secret(json_t *body, const char *arg, char *err, size_t errlen);
int fc_pod_set_gpus(json_t *body, const char *arg, char *err, size_t errlen);
int fc_pod_set_runtime_class(json_t *body, const char *arg, char *err, size_t errlen);
int fc_pod_add_node_selector(json_t *body, const char *arg, char *err, size_t errlen);
int fc_pod_add_toleration(json_t *body, const char *arg, char *err, size_t errlen);
int fc_pod_add_volume(json_t *body, const char *arg, char *err, size_t errlen);
int fc_pod_set_readiness(json_t *body, const char *arg, char *err, size_t errlen);
int fc_pod_add_public_port(json_t *body, const char *arg, char *err, size_t errlen);

/* 1 when <s> is a DNS-1123 subdomain (a RuntimeClass or claim name). */
int fc_dns_subdomain_valid(const char *s);
/* 1 when <p> is a mount path the router accepts: absolute and clean (no
 * empty, "." or ".." part, no trailing '/'), printable ASCII without ':'
 * or '\\', at most 256 bytes, not "/" and not under /fr-agent. */
int fc_mount_path_valid(const char *p);

#endif
