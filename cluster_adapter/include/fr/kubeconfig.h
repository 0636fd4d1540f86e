/* fr/kubeconfig.h - reading a kubeconfig (YAML, via libyaml) into the
 * credentials for one context.
 *
 * Supported (KUBE_PROTOCOL.md section 6): contexts and current-context;
 * cluster server, certificate-authority-data / certificate-authority (file),
 * insecure-skip-tls-verify, tls-server-name, proxy-url; user token /
 * tokenFile, client-certificate(-data) + client-key(-data), and exec
 * credential plugins (client.authentication.k8s.io/v1 and v1beta1: command,
 * args, env). Relative file paths resolve against the kubeconfig's folder.
 * Files named by the kubeconfig are read here, so this is blocking I/O:
 * call it at start-up or on a worker thread.
 */
#ifndef FR_KUBECONFIG_H
#define FR_KUBECONFIG_H

#include <stddef.h>

struct fr_kube_exec_plugin {
  char *api_version;       /* client.authentication.k8s.io/v1 ... */
  char *command;
  char **args;             /* NULL-terminated */
  char **env;              /* NULL-terminated "NAME=value" (added to the environment) */
};

struct fr_kube_creds {
  char *context;           /* the context these came from */
  char *cluster_name, *user_name;
  char *ns;                /* the context's namespace, NULL if unset */
  char *server;            /* "https://host:port" (no trailing slash) */
  char *ca_pem;            /* PEM bundle or NULL (system roots) */
  size_t ca_len;
  int insecure;            /* insecure-skip-tls-verify */
  char *tls_server_name;   /* NULL if unset */
  char *proxy_url;         /* NULL if unset */
  char *token;             /* static bearer token or NULL */
  char *token_file;        /* absolute path, re-read on 401; NULL if unset */
  char *client_cert_pem, *client_key_pem;  /* NULL if unset */
  size_t client_cert_len, client_key_len;
  struct fr_kube_exec_plugin *exec;        /* NULL if unset */
};

/* Loads <path> and resolves <context> (NULL = current-context). Returns 0,
 * or -ENOENT/-EINVAL/-ENOMEM with a message in <err> such as
 * "us.kubeconfig:14: context \"us-wst\" not found (did you mean \"us-west\"?)". */
int fr_kubeconfig_load(const char *path, const char *context, struct fr_kube_creds **out,
                       char *err, size_t errlen);
/* In-cluster credentials, as client-go's rest.InClusterConfig() makes
 * them for a pod: the API server https://$KUBERNETES_SERVICE_HOST:
 * $KUBERNETES_SERVICE_PORT, the pod's service-account token
 * <dir>/token as token_file (the REST client re-reads it about every
 * minute and on a 401, since projected tokens rotate), the CA
 * <dir>/ca.crt, and ns from $POD_NAMESPACE, else <dir>/namespace (as
 * clientcmd's in-cluster namespace). Every field of <o> may be NULL:
 * <dir> then comes from $FR_SERVICEACCOUNT_DIR, else
 * FR_SERVICEACCOUNT_DIR_DEFAULT; <host> and <port> from the environment
 * (tests point them at kubesim). Blocking file reads: call at start-up.
 * Returns 0, -ENOENT (not in a cluster: a variable or the token file
 * missing) or -EINVAL/-ENOMEM, with a message in <err>. */
#define FR_SERVICEACCOUNT_DIR_DEFAULT "/var/run/secrets/kubernetes.io/serviceaccount"
struct fr_in_cluster_opts {
  const char *dir;
  const char *host;
  const char *port;
};
int fr_kubeconfig_in_cluster(const struct fr_in_cluster_opts *o, struct fr_kube_creds **out, char *err,
                             size_t errlen);
/* Deep copy; NULL on out-of-memory. */
struct fr_kube_creds *fr_kube_creds_dup(const struct fr_kube_creds *c);
/* Accepts NULL. */
void fr_kube_creds_free(struct fr_kube_creds *c);

#endif
