/* test_kubeconfig.c - kubeconfig parsing: context resolution, every kind of
 * credential, and every error with its file:line. Each test works in its
 * own temporary folder. */
#include "fr/kubeconfig.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fr/util.h"

#define CERT_PEM "-----BEGIN CERTIFICATE-----\nMIIBkTCB+wIJAKHHIr0kY\n-----END CERTIFICATE-----\n"
#define CERT_B64                                                                                              \
  "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJrVENCK3dJSkFLSEhJcjBrWQotLS0tLUVORCBDRVJUSUZJQ0FURS0tLS0tCg=="
#define KEY_PEM "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIAk\n-----END EC PRIVATE KEY-----\n"
#define KEY_B64 "LS0tLS1CRUdJTiBFQyBQUklWQVRFIEtFWS0tLS0tCk1IY0NBUUVFSUFrCi0tLS0tRU5EIEVDIFBSSVZBVEUgS0VZLS0tLS0K"

static char g_dir[PATH_MAX];
static char g_kc[PATH_MAX + 32];
static char g_err[512];

/* ---- fixture and helpers ---- */

static void rm_rf(const char *path) {
  struct stat st;
  DIR *d;
  struct dirent *e;
  char sub[PATH_MAX];

  if (lstat(path, &st) != 0)
    return;
  if (S_ISDIR(st.st_mode)) {
    d = opendir(path);
    if (d != NULL) {
      while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
          continue;
        snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
        rm_rf(sub);
      }
      closedir(d);
    }
    rmdir(path);
  } else {
    unlink(path);
  }
}

static void setup(void) {
  const char *tmp = getenv("TMPDIR");

  snprintf(g_dir, sizeof(g_dir), "%s/fr-kcfg-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  ck_assert_ptr_nonnull(mkdtemp(g_dir));
  snprintf(g_kc, sizeof(g_kc), "%s/kubeconfig", g_dir);
  g_err[0] = '\0';
}

static void teardown(void) {
  rm_rf(g_dir);
}

/* Writes <content> to <name> under the test folder (creating one level of
 * sub-folder if <name> has one). */
static void put(const char *name, const char *content) {
  char p[PATH_MAX + 64], *slash;
  FILE *f;

  snprintf(p, sizeof(p), "%s/%s", g_dir, name);
  slash = strrchr(p, '/');
  if (slash > p + strlen(g_dir)) {
    *slash = '\0';
    mkdir(p, 0700);
    *slash = '/';
  }
  f = fopen(p, "w");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(content, 1, strlen(content), f), strlen(content));
  ck_assert_int_eq(fclose(f), 0);
}

static int load(const char *yaml, const char *ctx, struct fr_kube_creds **c) {
  put("kubeconfig", yaml);
  return fr_kubeconfig_load(g_kc, ctx, c, g_err, sizeof(g_err));
}

/* Asserts that g_err is "<kubeconfig>:<line>: ..." (or "<kubeconfig>: ..."
 * for line 0) and contains <want>. */
static void assert_err(int line, const char *want) {
  char prefix[PATH_MAX + 64];

  if (line > 0)
    snprintf(prefix, sizeof(prefix), "%s:%d: ", g_kc, line);
  else
    snprintf(prefix, sizeof(prefix), "%s: ", g_kc);
  ck_assert_msg(strncmp(g_err, prefix, strlen(prefix)) == 0, "error \"%s\" does not start with \"%s\"", g_err,
                prefix);
  ck_assert_msg(strstr(g_err, want) != NULL, "error \"%s\" does not contain \"%s\"", g_err, want);
}

/* The YAML kubesim's write_kubeconfig() produces, field for field. */
static char *kubesim_yaml(const char *name, int port, const char *ca_pem, const char *token) {
  char *ca = malloc(fr_base64_len(strlen(ca_pem))), *out = malloc(8192);

  ck_assert_ptr_nonnull(ca);
  ck_assert_ptr_nonnull(out);
  fr_base64_encode(ca_pem, strlen(ca_pem), ca);
  snprintf(out, 8192,
           "apiVersion: v1\nkind: Config\nclusters:\n- name: %s\n  cluster:\n"
           "    server: https://127.0.0.1:%d\n"
           "    certificate-authority-data: %s\n"
           "contexts:\n- name: %s\n  context:\n    cluster: %s\n    user: %s\n"
           "    namespace: default\ncurrent-context: %s\nusers:\n- name: %s\n  user:\n"
           "%s%s%s"
           "preferences: {}\n",
           name, port, ca, name, name, name, name, name, token ? "    token: " : "    {}\n", token ? token : "",
           token ? "\n" : "");
  free(ca);
  return out;
}

/* ---- the kubeconfig kubesim writes ---- */

START_TEST(kubesim_shape_token_values_match) {
  struct fr_kube_creds *c = NULL;
  char *yaml = kubesim_yaml("us-west", 41234, CERT_PEM, "s3cret-token");

  ck_assert_int_eq(load(yaml, NULL, &c), 0);
  free(yaml);
  ck_assert_ptr_nonnull(c);
  ck_assert_str_eq(c->context, "us-west");
  ck_assert_str_eq(c->cluster_name, "us-west");
  ck_assert_str_eq(c->user_name, "us-west");
  ck_assert_str_eq(c->ns, "default");
  ck_assert_str_eq(c->server, "https://127.0.0.1:41234");
  ck_assert_uint_eq(c->ca_len, strlen(CERT_PEM));
  ck_assert_str_eq(c->ca_pem, CERT_PEM);
  ck_assert_int_eq(c->insecure, 0);
  ck_assert_str_eq(c->token, "s3cret-token");
  ck_assert_ptr_null(c->token_file);
  ck_assert_ptr_null(c->tls_server_name);
  ck_assert_ptr_null(c->proxy_url);
  ck_assert_ptr_null(c->client_cert_pem);
  ck_assert_ptr_null(c->client_key_pem);
  ck_assert_ptr_null(c->exec);
  ck_assert_str_eq(g_err, "");
  fr_kube_creds_free(c);
}
END_TEST

START_TEST(kubesim_shape_empty_user_no_credentials) {
  struct fr_kube_creds *c = NULL;
  char *yaml = kubesim_yaml("eu-central", 6443, CERT_PEM, NULL);

  ck_assert_int_eq(load(yaml, "eu-central", &c), 0);
  free(yaml);
  ck_assert_str_eq(c->user_name, "eu-central");
  ck_assert_ptr_null(c->token);
  ck_assert_ptr_null(c->client_cert_pem);
  ck_assert_ptr_null(c->exec);
  ck_assert_str_eq(c->server, "https://127.0.0.1:6443");
  fr_kube_creds_free(c);
}
END_TEST

/* The real writer: start the kubesim binary with --tls --token and read
 * the kubeconfig it writes. Built alongside this test (see CMakeLists). */
START_TEST(kubesim_binary_kubeconfig_loads) {
#ifdef FR_KUBESIM_PATH
  struct fr_kube_creds *c = NULL;
  char portfile[PATH_MAX + 16], workdir[PATH_MAX + 16], buf[32], want[64];
  struct timespec nap = {0, 20 * 1000 * 1000};
  FILE *f;
  pid_t pid;
  int i, port = 0, status;

  snprintf(portfile, sizeof(portfile), "%s/port", g_dir);
  snprintf(workdir, sizeof(workdir), "%s/work", g_dir);
  pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    execl(FR_KUBESIM_PATH, "kubesim", "--tls", "--token", "sim-token-1", "--name", "sim-a", "--nodes", "1",
          "--write-kubeconfig", g_kc, "--port-file", portfile, "--workdir", workdir, "--log-level", "error",
          (char *)NULL);
    _exit(127);
  }
  /* The port file appears after the kubeconfig is written; allow a slow
   * sanitizer build up to 20 s to get there. */
  for (i = 0; i < 1000 && access(portfile, F_OK) != 0; i++) {
    ck_assert_int_eq(waitpid(pid, &status, WNOHANG), 0); /* still running */
    nanosleep(&nap, NULL);
  }
  f = fopen(portfile, "r");
  if (f != NULL) {
    if (fgets(buf, sizeof(buf), f) != NULL) {
      int64_t v;
      buf[strcspn(buf, "\r\n")] = '\0';
      if (fr_parse_int64(buf, 1, 65535, &v) == 0)
        port = (int)v;
    }
    fclose(f);
  }
  kill(pid, SIGTERM);
  waitpid(pid, &status, 0);
  ck_assert_int_gt(port, 0);

  ck_assert_int_eq(fr_kubeconfig_load(g_kc, NULL, &c, g_err, sizeof(g_err)), 0);
  snprintf(want, sizeof(want), "https://127.0.0.1:%d", port);
  ck_assert_str_eq(c->server, want);
  ck_assert_str_eq(c->context, "sim-a");
  ck_assert_str_eq(c->ns, "default");
  ck_assert_str_eq(c->token, "sim-token-1");
  ck_assert_ptr_nonnull(c->ca_pem);
  ck_assert_ptr_nonnull(strstr(c->ca_pem, "-----BEGIN CERTIFICATE-----"));
  ck_assert_uint_eq(c->ca_len, strlen(c->ca_pem));
  fr_kube_creds_free(c);
#endif
}
END_TEST

/* ---- contexts ---- */

static const char multi_yaml[] =
    "apiVersion: v1\n"                                /* 1 */
    "kind: Config\n"                                  /* 2 */
    "current-context: us-west\n"                      /* 3 */
    "clusters:\n"                                     /* 4 */
    "- name: us-west\n"                               /* 5 */
    "  cluster:\n"                                    /* 6 */
    "    server: https://10.0.0.1:6443/\n"            /* 7 */
    "    insecure-skip-tls-verify: true\n"            /* 8 */
    "- name: eu\n"                                    /* 9 */
    "  cluster:\n"                                    /* 10 */
    "    server: https://eu.example.com/k8s/c-1//\n"  /* 11 */
    "    tls-server-name: api.eu.internal\n"          /* 12 */
    "    proxy-url: socks5://127.0.0.1:1080\n"        /* 13 */
    "    insecure-skip-tls-verify: false\n"           /* 14 */
    "contexts:\n"                                     /* 15 */
    "- name: us-west\n"                               /* 16 */
    "  context: {cluster: us-west, user: alice}\n"    /* 17 */
    "- name: eu\n"                                    /* 18 */
    "  context:\n"                                    /* 19 */
    "    cluster: eu\n"                               /* 20 */
    "    user: bob\n"                                 /* 21 */
    "    namespace: sandboxes\n"                      /* 22 */
    "users:\n"                                        /* 23 */
    "- name: alice\n"                                 /* 24 */
    "  user: {token: alice-token}\n"                  /* 25 */
    "- name: bob\n"                                   /* 26 */
    "  user:\n"                                       /* 27 */
    "    token: \"bob-token\"\n";                     /* 28 */

START_TEST(contexts_null_uses_current_context) {
  struct fr_kube_creds *c = NULL;

  ck_assert_int_eq(load(multi_yaml, NULL, &c), 0);
  ck_assert_str_eq(c->context, "us-west");
  ck_assert_str_eq(c->cluster_name, "us-west");
  ck_assert_str_eq(c->user_name, "alice");
  ck_assert_ptr_null(c->ns);
  ck_assert_str_eq(c->server, "https://10.0.0.1:6443");
  ck_assert_int_eq(c->insecure, 1);
  ck_assert_ptr_null(c->ca_pem);
  ck_assert_str_eq(c->token, "alice-token");
  fr_kube_creds_free(c);
}
END_TEST

START_TEST(contexts_named_overrides_current_context) {
  struct fr_kube_creds *c = NULL;

  ck_assert_int_eq(load(multi_yaml, "eu", &c), 0);
  ck_assert_str_eq(c->context, "eu");
  ck_assert_str_eq(c->cluster_name, "eu");
  ck_assert_str_eq(c->user_name, "bob");
  ck_assert_str_eq(c->ns, "sandboxes");
  ck_assert_str_eq(c->server, "https://eu.example.com/k8s/c-1");
  ck_assert_int_eq(c->insecure, 0);
  ck_assert_str_eq(c->tls_server_name, "api.eu.internal");
  ck_assert_str_eq(c->proxy_url, "socks5://127.0.0.1:1080");
  ck_assert_str_eq(c->token, "bob-token");
  fr_kube_creds_free(c);
}
END_TEST

START_TEST(contexts_misspelled_enoent_did_you_mean) {
  struct fr_kube_creds *c = (struct fr_kube_creds *)&c; /* must be reset */

  ck_assert_int_eq(load(multi_yaml, "us-wst", &c), -ENOENT);
  ck_assert_ptr_null(c);
  assert_err(15, "context \"us-wst\" not found (did you mean \"us-west\"?)");
}
END_TEST

START_TEST(contexts_no_context_no_current_einval_lists_names) {
  struct fr_kube_creds *c = NULL;

  ck_assert_int_eq(load("clusters: []\n"
                        "contexts:\n"
                        "- {name: a, context: {cluster: x}}\n"
                        "- {name: b, context: {cluster: x}}\n",
                        NULL, &c),
                   -EINVAL);
  ck_assert_ptr_null(c);
  assert_err(0, "no current-context set; name a context (contexts: \"a\", \"b\")");
}
END_TEST

START_TEST(contexts_without_user_anonymous) {
  struct fr_kube_creds *c = NULL;

  ck_assert_int_eq(load("current-context: local\n"
                        "clusters: [{name: k, cluster: {server: \"http://127.0.0.1:8080\"}}]\n"
                        "contexts: [{name: local, context: {cluster: k}}]\n",
                        NULL, &c),
                   0);
  ck_assert_str_eq(c->server, "http://127.0.0.1:8080");
  ck_assert_ptr_null(c->user_name);
  ck_assert_ptr_null(c->token);
  fr_kube_creds_free(c);
}
END_TEST

START_TEST(yaml_anchor_alias_resolved) {
  struct fr_kube_creds *c = NULL;

  ck_assert_int_eq(load("current-context: b\n"
                        "clusters:\n"
                        "- name: a\n"
                        "  cluster: &shared {server: \"https://shared:443\", insecure-skip-tls-verify: yes}\n"
                        "- name: b\n"
                        "  cluster: *shared\n"
                        "contexts: [{name: b, context: {cluster: b}}]\n",
                        NULL, &c),
                   0);
  ck_assert_str_eq(c->server, "https://shared:443");
  ck_assert_int_eq(c->insecure, 1);
  fr_kube_creds_free(c);
}
END_TEST

START_TEST(ca_data_folded_over_lines_decoded) {
  struct fr_kube_creds *c = NULL;

  /* A plain scalar continued on the next lines folds into spaces. */
  ck_assert_int_eq(load("current-context: c\n"
                        "clusters:\n"
                        "- name: k\n"
                        "  cluster:\n"
                        "    server: https://k:6443\n"
                        "    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJr\n"
                        "      VENCK3dJSkFLSEhJcjBrWQotLS0tLUVORCBDRVJUSUZJQ0FURS0tLS0tCg==\n"
                        "contexts: [{name: c, context: {cluster: k}}]\n",
                        NULL, &c),
                   0);
  ck_assert_str_eq(c->ca_pem, CERT_PEM);
  ck_assert_uint_eq(c->ca_len, strlen(CERT_PEM));
  fr_kube_creds_free(c);
}
END_TEST

/* ---- files ---- */

START_TEST(files_relative_to_kubeconfig_folder_loaded) {
  struct fr_kube_creds *c = NULL;
  char path[PATH_MAX + 64];

  put("conf/pki-ca.crt", CERT_PEM);
  put("conf/client.crt", CERT_PEM);
  put("conf/client.key", KEY_PEM);
  put("conf/kubeconfig", "current-context: c\n"
                         "clusters:\n"
                         "- name: k\n"
                         "  cluster:\n"
                         "    server: https://k:6443\n"
                         "    certificate-authority: pki-ca.crt\n"
                         "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
                         "users:\n"
                         "- name: u\n"
                         "  user:\n"
                         "    client-certificate: ./client.crt\n"
                         "    client-key: client.key\n");
  snprintf(path, sizeof(path), "%s/conf/kubeconfig", g_dir);
  ck_assert_int_eq(fr_kubeconfig_load(path, NULL, &c, g_err, sizeof(g_err)), 0);
  ck_assert_str_eq(c->ca_pem, CERT_PEM);
  ck_assert_uint_eq(c->ca_len, strlen(CERT_PEM));
  ck_assert_str_eq(c->client_cert_pem, CERT_PEM);
  ck_assert_uint_eq(c->client_cert_len, strlen(CERT_PEM));
  ck_assert_str_eq(c->client_key_pem, KEY_PEM);
  ck_assert_uint_eq(c->client_key_len, strlen(KEY_PEM));
  ck_assert_ptr_null(c->token);
  fr_kube_creds_free(c);
}
END_TEST

START_TEST(files_relative_kubeconfig_path_token_file_absolute) {
  struct fr_kube_creds *c = NULL;
  char old[PATH_MAX], want[PATH_MAX + 64];
  int rc;

  put("conf/token", "  projected-token-value\n\n");
  put("conf/kubeconfig", "current-context: c\n"
                         "clusters: [{name: k, cluster: {server: \"https://k:6443\"}}]\n"
                         "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
                         "users:\n"
                         "- name: u\n"
                         "  user:\n"
                         "    tokenFile: token\n");
  ck_assert_ptr_nonnull(getcwd(old, sizeof(old)));
  ck_assert_int_eq(chdir(g_dir), 0);
  rc = fr_kubeconfig_load("./conf/kubeconfig", NULL, &c, g_err, sizeof(g_err));
  ck_assert_int_eq(chdir(old), 0);
  ck_assert_msg(rc == 0, "%s", g_err);
  /* The path stays valid after the working directory changes. */
  snprintf(want, sizeof(want), "%s/conf/token", g_dir);
  ck_assert_str_eq(c->token_file, want);
  ck_assert_str_eq(c->token, "projected-token-value");
  fr_kube_creds_free(c);
}
END_TEST

START_TEST(token_file_overrides_static_token) {
  struct fr_kube_creds *c = NULL;
  char want[PATH_MAX + 64];

  put("sa/token", "from-file");
  snprintf(want, sizeof(want), "%s/sa/token", g_dir);
  ck_assert_int_eq(load("current-context: c\n"
                        "clusters: [{name: k, cluster: {server: \"https://k:6443\"}}]\n"
                        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
                        "users: [{name: u, user: {token: static, tokenFile: sa/token}}]\n",
                        NULL, &c),
                   0);
  ck_assert_str_eq(c->token, "from-file");
  ck_assert_str_eq(c->token_file, want);
  fr_kube_creds_free(c);
}
END_TEST

START_TEST(cert_and_key_data_decoded) {
  struct fr_kube_creds *c = NULL;

  ck_assert_int_eq(load("current-context: c\n"
                        "clusters: [{name: k, cluster: {server: \"https://k:6443\"}}]\n"
                        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
                        "users:\n"
                        "- name: u\n"
                        "  user:\n"
                        "    client-certificate-data: " CERT_B64 "\n"
                        "    client-key-data: " KEY_B64 "\n",
                        NULL, &c),
                   0);
  ck_assert_str_eq(c->client_cert_pem, CERT_PEM);
  ck_assert_uint_eq(c->client_cert_len, strlen(CERT_PEM));
  ck_assert_str_eq(c->client_key_pem, KEY_PEM);
  ck_assert_uint_eq(c->client_key_len, strlen(KEY_PEM));
  fr_kube_creds_free(c);
}
END_TEST

/* ---- exec plugins ---- */

START_TEST(exec_gke_plugin_parsed) {
  struct fr_kube_creds *c = NULL;

  ck_assert_int_eq(
      load("apiVersion: v1\n"
           "kind: Config\n"
           "current-context: gke_acme-prod_us-central1_sandbox-1\n"
           "clusters:\n"
           "- cluster:\n"
           "    certificate-authority-data: " CERT_B64 "\n"
           "    server: https://34.118.0.10\n"
           "  name: gke_acme-prod_us-central1_sandbox-1\n"
           "contexts:\n"
           "- context:\n"
           "    cluster: gke_acme-prod_us-central1_sandbox-1\n"
           "    user: gke_acme-prod_us-central1_sandbox-1\n"
           "  name: gke_acme-prod_us-central1_sandbox-1\n"
           "users:\n"
           "- name: gke_acme-prod_us-central1_sandbox-1\n"
           "  user:\n"
           "    exec:\n"
           "      apiVersion: client.authentication.k8s.io/v1beta1\n"
           "      command: gke-gcloud-auth-plugin\n"
           "      args:\n"
           "      - --use_application_default_credentials\n"
           "      - \"\"\n"
           "      env:\n"
           "      - name: CLOUDSDK_CORE_PROJECT\n"
           "        value: acme-prod\n"
           "      - name: EMPTY\n"
           "      installHint: Install gke-gcloud-auth-plugin for use with kubectl by following\n"
           "        https://cloud.google.com/kubernetes-engine/docs/how-to/cluster-access-for-kubectl#install_plugin\n"
           "      provideClusterInfo: true\n",
           NULL, &c),
      0);
  ck_assert_str_eq(c->server, "https://34.118.0.10");
  ck_assert_str_eq(c->ca_pem, CERT_PEM);
  ck_assert_ptr_null(c->token);
  ck_assert_ptr_nonnull(c->exec);
  ck_assert_str_eq(c->exec->api_version, "client.authentication.k8s.io/v1beta1");
  ck_assert_str_eq(c->exec->command, "gke-gcloud-auth-plugin");
  ck_assert_str_eq(c->exec->args[0], "--use_application_default_credentials");
  ck_assert_str_eq(c->exec->args[1], "");
  ck_assert_ptr_null(c->exec->args[2]);
  ck_assert_str_eq(c->exec->env[0], "CLOUDSDK_CORE_PROJECT=acme-prod");
  ck_assert_str_eq(c->exec->env[1], "EMPTY=");
  ck_assert_ptr_null(c->exec->env[2]);
  fr_kube_creds_free(c);
}
END_TEST

START_TEST(exec_eks_v1_flow_sequences_parsed) {
  struct fr_kube_creds *c = NULL;

  ck_assert_int_eq(load("current-context: eks\n"
                        "clusters: [{name: eks, cluster: {server: \"https://ABC.gr7.us-east-1.eks.amazonaws.com\"}}]\n"
                        "contexts: [{name: eks, context: {cluster: eks, user: eks}}]\n"
                        "users:\n"
                        "- name: eks\n"
                        "  user:\n"
                        "    exec:\n"
                        "      apiVersion: client.authentication.k8s.io/v1\n"
                        "      command: aws\n"
                        "      args: [--region, us-east-1, eks, get-token, --cluster-name, prod]\n"
                        "      env: [{name: AWS_PROFILE, value: \"a=b c\"}]\n"
                        "      interactiveMode: Never\n",
                        NULL, &c),
                   0);
  ck_assert_str_eq(c->exec->api_version, "client.authentication.k8s.io/v1");
  ck_assert_str_eq(c->exec->command, "aws");
  ck_assert_str_eq(c->exec->args[0], "--region");
  ck_assert_str_eq(c->exec->args[3], "get-token");
  ck_assert_str_eq(c->exec->args[5], "prod");
  ck_assert_ptr_null(c->exec->args[6]);
  ck_assert_str_eq(c->exec->env[0], "AWS_PROFILE=a=b c");
  ck_assert_ptr_null(c->exec->env[1]);
  fr_kube_creds_free(c);
}
END_TEST

START_TEST(exec_no_args_empty_arrays) {
  struct fr_kube_creds *c = NULL;

  ck_assert_int_eq(load("current-context: c\n"
                        "clusters: [{name: k, cluster: {server: \"https://k\"}}]\n"
                        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
                        "users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1,"
                        " command: /usr/local/bin/plugin, env: null}}}]\n",
                        NULL, &c),
                   0);
  ck_assert_str_eq(c->exec->command, "/usr/local/bin/plugin");
  ck_assert_ptr_nonnull(c->exec->args);
  ck_assert_ptr_null(c->exec->args[0]);
  ck_assert_ptr_nonnull(c->exec->env);
  ck_assert_ptr_null(c->exec->env[0]);
  fr_kube_creds_free(c);
}
END_TEST

START_TEST(exec_relative_command_path_resolved_bare_name_kept) {
  struct fr_kube_creds *c = NULL;
  char want[PATH_MAX + 64];

  ck_assert_int_eq(load("current-context: c\n"
                        "clusters: [{name: k, cluster: {server: \"https://k\"}}]\n"
                        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
                        "users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1,"
                        " command: bin/plugin}}}]\n",
                        NULL, &c),
                   0);
  snprintf(want, sizeof(want), "%s/bin/plugin", g_dir);
  ck_assert_str_eq(c->exec->command, want);
  fr_kube_creds_free(c);
}
END_TEST

/* ---- copies ---- */

START_TEST(creds_dup_deep_copy_equal) {
  struct fr_kube_creds *c = NULL, *d;

  ck_assert_int_eq(load("current-context: c\n"
                        "clusters:\n"
                        "- name: k\n"
                        "  cluster:\n"
                        "    server: https://k:6443\n"
                        "    certificate-authority-data: " CERT_B64 "\n"
                        "    tls-server-name: api.internal\n"
                        "    proxy-url: http://proxy:3128\n"
                        "contexts: [{name: c, context: {cluster: k, user: u, namespace: ns1}}]\n"
                        "users:\n"
                        "- name: u\n"
                        "  user:\n"
                        "    token: tok\n"
                        "    client-certificate-data: " CERT_B64 "\n"
                        "    client-key-data: " KEY_B64 "\n"
                        "    exec:\n"
                        "      apiVersion: client.authentication.k8s.io/v1\n"
                        "      command: plug\n"
                        "      args: [a, b]\n"
                        "      env: [{name: X, value: \"1\"}]\n",
                        NULL, &c),
                   0);
  d = fr_kube_creds_dup(c);
  ck_assert_ptr_nonnull(d);
  ck_assert_str_eq(d->context, "c");
  ck_assert_str_eq(d->cluster_name, "k");
  ck_assert_str_eq(d->user_name, "u");
  ck_assert_str_eq(d->ns, "ns1");
  ck_assert_str_eq(d->server, "https://k:6443");
  ck_assert_ptr_ne(d->server, c->server);
  ck_assert_str_eq(d->ca_pem, CERT_PEM);
  ck_assert_uint_eq(d->ca_len, c->ca_len);
  ck_assert_ptr_ne(d->ca_pem, c->ca_pem);
  ck_assert_str_eq(d->tls_server_name, "api.internal");
  ck_assert_str_eq(d->proxy_url, "http://proxy:3128");
  ck_assert_str_eq(d->token, "tok");
  ck_assert_ptr_null(d->token_file);
  ck_assert_str_eq(d->client_cert_pem, CERT_PEM);
  ck_assert_uint_eq(d->client_cert_len, strlen(CERT_PEM));
  ck_assert_str_eq(d->client_key_pem, KEY_PEM);
  ck_assert_uint_eq(d->client_key_len, strlen(KEY_PEM));
  ck_assert_ptr_ne(d->exec, c->exec);
  ck_assert_str_eq(d->exec->api_version, "client.authentication.k8s.io/v1");
  ck_assert_str_eq(d->exec->command, "plug");
  ck_assert_str_eq(d->exec->args[0], "a");
  ck_assert_str_eq(d->exec->args[1], "b");
  ck_assert_ptr_null(d->exec->args[2]);
  ck_assert_ptr_ne(d->exec->args, c->exec->args);
  ck_assert_str_eq(d->exec->env[0], "X=1");
  ck_assert_ptr_null(d->exec->env[1]);
  /* Independent lifetimes: the copy outlives the original. */
  fr_kube_creds_free(c);
  ck_assert_str_eq(d->exec->env[0], "X=1");
  fr_kube_creds_free(d);
}
END_TEST

/* kubectl ignores unknown fields, and so do we, but a near miss of a known
 * one is logged: a silently dropped "tokenfile" would surface as a 401. */
START_TEST(unknown_field_near_miss_warned_and_ignored) {
  struct fr_kube_creds *c = NULL;
  char logpath[PATH_MAX + 16], *log = NULL;
  int saved, fd, rc;
  long n;
  FILE *f;

  snprintf(logpath, sizeof(logpath), "%s/stderr.log", g_dir);
  fflush(stderr);
  saved = dup(2);
  fd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ck_assert_int_ge(fd, 0);
  dup2(fd, 2);
  close(fd);
  rc = load("current-context: c\n"
            "clusters: [{name: k, cluster: {server: \"https://k\", extensions: []}}]\n"
            "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
            "users:\n"
            "- name: u\n"
            "  user:\n"
            "    token: t\n"
            "    tokenfile: /var/run/token\n"          /* line 8 */
            "    x-vendor-extension: 1\n",
            NULL, &c);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  ck_assert_int_eq(rc, 0);
  ck_assert_str_eq(c->token, "t");
  ck_assert_ptr_null(c->token_file);
  fr_kube_creds_free(c);

  f = fopen(logpath, "r");
  ck_assert_ptr_nonnull(f);
  log = calloc(1, 4096);
  ck_assert_ptr_nonnull(log);
  n = (long)fread(log, 1, 4095, f);
  fclose(f);
  ck_assert_int_gt(n, 0);
  ck_assert_msg(strstr(log, ":8: user \"u\": unknown field \"tokenfile\" ignored (did you mean \"tokenFile\"?)") != NULL,
                "log: %s", log);
  /* Fields nowhere near a known one are not worth a line. */
  ck_assert_ptr_null(strstr(log, "x-vendor-extension"));
  ck_assert_ptr_null(strstr(log, "extensions"));
  free(log);
}
END_TEST

START_TEST(creds_free_and_dup_null_safe) {
  fr_kube_creds_free(NULL);
  ck_assert_ptr_null(fr_kube_creds_dup(NULL));
}
END_TEST

/* ---- errors ---- */

START_TEST(kubeconfig_missing_file_enoent) {
  struct fr_kube_creds *c = NULL;

  ck_assert_int_eq(fr_kubeconfig_load(g_kc, NULL, &c, g_err, sizeof(g_err)), -ENOENT);
  ck_assert_ptr_null(c);
  assert_err(0, "cannot read kubeconfig: No such file or directory");
}
END_TEST

START_TEST(kubeconfig_error_without_buffer_still_returns_code) {
  struct fr_kube_creds *c = NULL;
  char small[12];

  put("kubeconfig", "current-context: nope\ncontexts: []\n");
  ck_assert_int_eq(fr_kubeconfig_load(g_kc, NULL, &c, NULL, 0), -ENOENT);
  ck_assert_ptr_null(c);
  memset(small, 'x', sizeof(small));
  ck_assert_int_eq(fr_kubeconfig_load(g_kc, NULL, &c, small, sizeof(small)), -ENOENT);
  ck_assert_uint_eq(strlen(small), sizeof(small) - 1);
  ck_assert_int_eq(strncmp(small, g_kc, sizeof(small) - 1), 0);
}
END_TEST

struct err_case {
  const char *name;         /* for failure messages */
  const char *yaml;
  const char *context;      /* NULL: current-context */
  const char *file, *file_content;  /* written next to the kubeconfig first, if set */
  int rc;
  int line;                 /* 0: no line in the message */
  const char *want;         /* substring of the message */
};

#define CL_K "clusters: [{name: k, cluster: {server: \"https://k:1\"}}]\n"
#define CTX_CKU "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
/* Shared head for user errors: the user's first field is on line 7. */
#define USER_HEAD "current-context: c\n" CL_K CTX_CKU "users:\n- name: u\n  user:\n"
/* Shared head for cluster errors: the cluster's first field is on line 6. */
#define CLUSTER_HEAD "current-context: c\n" CTX_CKU "clusters:\n- name: k\n  cluster:\n"

static const struct err_case err_cases[] = {
    /* contexts */
    {"current context misspelled",
     "current-context: us-wst\n"                       /* 1 */
     "clusters: [{name: us-west, cluster: {server: \"https://a:1\"}}]\n"
     "contexts:\n"                                     /* 3 */
     "- {name: us-west, context: {cluster: us-west}}\n"
     "- {name: eu-central, context: {cluster: us-west}}\n",
     NULL, NULL, NULL, -ENOENT, 1, "context \"us-wst\" not found (did you mean \"us-west\"?)"},
    {"named context unknown lists contexts",
     "current-context: us-west\n"
     "clusters: [{name: us-west, cluster: {server: \"https://a:1\"}}]\n"
     "contexts:\n"                                     /* 3 */
     "- {name: us-west, context: {cluster: us-west}}\n"
     "- {name: eu-central, context: {cluster: us-west}}\n",
     "asia-east", NULL, NULL, -ENOENT, 3, "context \"asia-east\" not found (contexts: \"us-west\", \"eu-central\")"},
    {"no contexts at all", "current-context: x\nclusters: []\n", NULL, NULL, NULL, -ENOENT, 1,
     "context \"x\" not found (the kubeconfig has no contexts)"},
    {"empty current-context", "current-context: \"\"\ncontexts: []\n", NULL, NULL, NULL, -EINVAL, 1,
     "no current-context set; name a context (the kubeconfig has no contexts)"},
    {"context names missing cluster",
     "current-context: c\n"
     "clusters: [{name: us-west, cluster: {server: \"https://a:1\"}}]\n"
     "contexts:\n"
     "- name: c\n"
     "  context:\n"
     "    cluster: us-wets\n"                          /* 6 */
     "    user: u\n",
     NULL, NULL, NULL, -ENOENT, 6, "context \"c\": cluster \"us-wets\" not found in clusters (did you mean \"us-west\"?)"},
    {"context names missing user",
     "current-context: c\n"
     CL_K
     "contexts:\n"
     "- name: c\n"
     "  context:\n"
     "    cluster: k\n"
     "    user: bobb\n"                                /* 7 */
     "users: [{name: bob, user: {token: t}}]\n",
     NULL, NULL, NULL, -ENOENT, 7, "context \"c\": user \"bobb\" not found in users (did you mean \"bob\"?)"},
    {"context without cluster",
     "current-context: c\n"
     "contexts:\n"
     "- name: c\n"                                     /* 3 */
     "  context: {user: u}\n",
     NULL, NULL, NULL, -EINVAL, 3, "context \"c\" names no cluster"},
    {"duplicate context",
     "current-context: c\n" CL_K
     "contexts:\n"
     "- {name: c, context: {cluster: k}}\n"            /* 4 */
     "- {name: c, context: {cluster: k}}\n",           /* 5 */
     NULL, NULL, NULL, -EINVAL, 5, "context \"c\" is defined twice (first at line 4)"},
    {"contexts not a list",
     "current-context: c\n"
     "contexts:\n"
     "  c: {cluster: k}\n",                            /* 3 */
     NULL, NULL, NULL, -EINVAL, 3, "contexts must be a list of {name, context}, not a mapping"},
    {"context entry not a mapping", "current-context: c\ncontexts:\n- just-a-name\n", NULL, NULL, NULL, -EINVAL, 3,
     "contexts[0] must be a mapping with name and context"},

    /* clusters */
    {"server missing", CLUSTER_HEAD "    tls-server-name: x\n", NULL, NULL, NULL, -EINVAL, 4,
     "cluster \"k\" has no server"},
    {"server not http", CLUSTER_HEAD "    server: ftp://k:1\n", NULL, NULL, NULL, -EINVAL, 6,
     "cluster \"k\": server \"ftp://k:1\" must start with https:// or http://"},
    {"server without scheme", CLUSTER_HEAD "    server: k.example.com:6443\n", NULL, NULL, NULL, -EINVAL, 6,
     "must start with https:// or http://"},
    {"server without host", CLUSTER_HEAD "    server: https://\n", NULL, NULL, NULL, -EINVAL, 6,
     "server \"https://\" has no host"},
    {"server a mapping", CLUSTER_HEAD "    server:\n      host: k\n", NULL, NULL, NULL, -EINVAL, 7,
     "cluster \"k\": server must be a string, not a mapping"},
    {"ca data bad base64",
     CLUSTER_HEAD "    server: https://k:1\n    certificate-authority-data: \"not*base64!\"\n", NULL, NULL, NULL,
     -EINVAL, 7, "cluster \"k\": certificate-authority-data is not valid base64"},
    {"ca data is pem text",
     CLUSTER_HEAD "    server: https://k:1\n    certificate-authority-data: \"-----BEGIN CERTIFICATE-----\\nMII\"\n",
     NULL, NULL, NULL, -EINVAL, 7,
     "certificate-authority-data holds PEM text, not base64 (base64-encode it, or use certificate-authority"},
    {"ca data not pem",
     CLUSTER_HEAD "    server: https://k:1\n    certificate-authority-data: aGVsbG8gd29ybGQ=\n", NULL, NULL, NULL,
     -EINVAL, 7, "certificate-authority-data does not decode to PEM"},
    {"ca file missing", CLUSTER_HEAD "    server: https://k:1\n    certificate-authority: pki/ca.crt\n", NULL, NULL,
     NULL, -ENOENT, 7, "/pki/ca.crt\": No such file or directory"},
    {"ca file not pem", CLUSTER_HEAD "    server: https://k:1\n    certificate-authority: ca.der\n", NULL, "ca.der",
     "\x30\x82\x01\x0a", -EINVAL, 7, "ca.der\" is not a PEM file"},
    {"ca file is a folder", CLUSTER_HEAD "    server: https://k:1\n    certificate-authority: pki\n", NULL,
     "pki/x", "x", -EINVAL, 7, "/pki\": Is a directory"},
    {"ca file and data",
     CLUSTER_HEAD "    server: https://k:1\n    certificate-authority: ca.crt\n"
                  "    certificate-authority-data: " CERT_B64 "\n",
     NULL, NULL, NULL, -EINVAL, 8, "both certificate-authority and certificate-authority-data are set"},
    {"insecure with ca",
     CLUSTER_HEAD "    server: https://k:1\n    certificate-authority-data: " CERT_B64 "\n"
                  "    insecure-skip-tls-verify: true\n",
     NULL, NULL, NULL, -EINVAL, 7, "insecure-skip-tls-verify and a certificate authority are both set"},
    {"insecure not a boolean", CLUSTER_HEAD "    server: https://k:1\n    insecure-skip-tls-verify: maybe\n", NULL,
     NULL, NULL, -EINVAL, 7, "insecure-skip-tls-verify must be true or false, not \"maybe\""},
    {"proxy bad scheme", CLUSTER_HEAD "    server: https://k:1\n    proxy-url: ftp://p:21\n", NULL, NULL, NULL,
     -EINVAL, 7, "proxy-url \"ftp://p:21\" must start with http://, https:// or socks5://"},

    /* users */
    {"cert without key", USER_HEAD "    client-certificate-data: " CERT_B64 "\n", NULL, NULL, NULL, -EINVAL, 7,
     "user \"u\": client-certificate is set without client-key"},
    {"key without cert", USER_HEAD "    client-key-data: " KEY_B64 "\n", NULL, NULL, NULL, -EINVAL, 7,
     "user \"u\": client-key is set without client-certificate"},
    {"cert file and data",
     USER_HEAD "    client-certificate: c.crt\n    client-certificate-data: " CERT_B64 "\n", NULL, NULL, NULL,
     -EINVAL, 8, "both client-certificate and client-certificate-data are set"},
    {"cert file missing", USER_HEAD "    client-certificate: nope.crt\n    client-key: nope.key\n", NULL, NULL, NULL,
     -ENOENT, 7, "user \"u\": cannot read client-certificate \""},
    {"key data bad base64",
     USER_HEAD "    client-certificate-data: " CERT_B64 "\n    client-key-data: \"%%%%\"\n", NULL, NULL, NULL,
     -EINVAL, 8, "client-key-data is not valid base64"},
    {"token file missing", USER_HEAD "    tokenFile: /nonexistent/fr-token\n", NULL, NULL, NULL, -ENOENT, 7,
     "user \"u\": cannot read tokenFile \"/nonexistent/fr-token\": No such file or directory"},
    {"token file empty", USER_HEAD "    tokenFile: tok\n", NULL, "tok", " \n\t\n", -EINVAL, 7,
     "tokenFile \"", },
    {"exec without command",
     USER_HEAD "    exec:\n"
               "      apiVersion: client.authentication.k8s.io/v1\n",  /* 8 */
     NULL, NULL, NULL, -EINVAL, 8, "user \"u\": exec has no command"},
    {"exec without apiVersion", USER_HEAD "    exec:\n      command: plug\n", NULL, NULL, NULL, -EINVAL, 8,
     "exec has no apiVersion (use client.authentication.k8s.io/v1)"},
    {"exec v1alpha1",
     USER_HEAD "    exec:\n      command: plug\n      apiVersion: client.authentication.k8s.io/v1alpha1\n", NULL,
     NULL, NULL, -EINVAL, 9, "exec apiVersion \"client.authentication.k8s.io/v1alpha1\" is not supported"},
    {"exec env without name",
     USER_HEAD "    exec:\n      command: plug\n      apiVersion: client.authentication.k8s.io/v1\n"
               "      env:\n      - value: x\n",
     NULL, NULL, NULL, -EINVAL, 11, "user \"u\": exec env[0] has no name"},
    {"exec args not a list",
     USER_HEAD "    exec:\n      command: plug\n      apiVersion: client.authentication.k8s.io/v1\n"
               "      args: --flag\n",
     NULL, NULL, NULL, -EINVAL, 10, "exec args must be a list of strings, not a string"},
    {"exec a string", USER_HEAD "    exec: gcloud\n", NULL, NULL, NULL, -EINVAL, 7,
     "user \"u\": exec must be a mapping, not a string"},
    {"auth provider", USER_HEAD "    auth-provider:\n      name: gcp\n", NULL, NULL, NULL, -EINVAL, 7,
     "user \"u\": auth-provider plugins are not supported; use an exec plugin"},
    {"basic auth", USER_HEAD "    username: admin\n    password: hunter2\n", NULL, NULL, NULL, -EINVAL, 7,
     "basic auth (username/password) is not supported"},
    {"impersonation", USER_HEAD "    token: t\n    as: system:admin\n", NULL, NULL, NULL, -EINVAL, 8,
     "impersonation (as) is not supported"},

    /* the file as a whole */
    {"empty file", "", NULL, NULL, NULL, -EINVAL, 0, "empty kubeconfig"},
    {"comments only", "# nothing here\n", NULL, NULL, NULL, -EINVAL, 0, "empty kubeconfig"},
    {"root a list", "- a\n- b\n", NULL, NULL, NULL, -EINVAL, 1, "a kubeconfig is a mapping"},
    {"wrong kind", "apiVersion: v1\nkind: Pod\n", NULL, NULL, NULL, -EINVAL, 2,
     "kind is \"Pod\"; a kubeconfig has kind: Config"},
    {"tab indentation", "current-context: c\nclusters:\n\t- name: k\n", NULL, NULL, NULL, -EINVAL, 3,
     "YAML syntax error at column 1: found character that cannot start any token"},
    {"mapping inside a plain value", "current-context: c\nclusters: []\ncontexts: a: b\n", NULL, NULL, NULL, -EINVAL,
     3, "YAML syntax error at column 12: mapping values are not allowed in this context"},
    {"unclosed flow sequence", "current-context: c\nclusters: [\n  {name: k}\ncontexts: []\n", NULL, NULL, NULL,
     -EINVAL, 4, "YAML syntax error at column 1: did not find expected ',' or ']' (while parsing a flow sequence at line 2)"},
    {"undefined alias", "current-context: c\nclusters: *nope\n", NULL, NULL, NULL, -EINVAL, 2,
     "YAML syntax error at column 11: found undefined alias"},
    {"invalid utf-8", "current-context: \xff\xfe\x01\n", NULL, NULL, NULL, -EINVAL, 0, "a kubeconfig is UTF-8 text"},
};

START_TEST(errors_table_code_line_message) {
  const struct err_case *t = &err_cases[_i];
  struct fr_kube_creds *c = (struct fr_kube_creds *)&c; /* must be reset to NULL */
  int rc;

  if (t->file != NULL)
    put(t->file, t->file_content);
  rc = load(t->yaml, t->context, &c);
  ck_assert_msg(rc == t->rc, "%s: rc %d, want %d (%s)", t->name, rc, t->rc, g_err);
  ck_assert_msg(c == NULL, "%s: *out not NULL on error", t->name);
  ck_assert_msg(g_err[0] != '\0', "%s: no message", t->name);
  assert_err(t->line, t->want);
}
END_TEST

/* ---- in-cluster (a pod's service account) ---- */

static int in_cluster(const char *host, const char *port, struct fr_kube_creds **c) {
  struct fr_in_cluster_opts o = {g_dir, host, port};

  return fr_kubeconfig_in_cluster(&o, c, g_err, sizeof(g_err));
}

START_TEST(in_cluster_service_account_files_and_environment) {
  struct fr_kube_creds *c = NULL;
  char want[PATH_MAX + 16];

  unsetenv("POD_NAMESPACE");
  put("token", "eyJhbGciOi.projected.token\n");
  put("ca.crt", CERT_PEM);
  put("namespace", "fedrouter-gateway\n");
  ck_assert_msg(in_cluster("10.96.0.1", "443", &c) == 0, "%s", g_err);
  ck_assert_str_eq(c->server, "https://10.96.0.1:443");
  ck_assert_str_eq(c->token, "eyJhbGciOi.projected.token");
  snprintf(want, sizeof(want), "%s/token", g_dir);
  ck_assert_str_eq(c->token_file, want); /* re-read by the client as it rotates */
  ck_assert_str_eq(c->ca_pem, CERT_PEM);
  ck_assert_uint_eq(c->ca_len, strlen(CERT_PEM));
  ck_assert_str_eq(c->ns, "fedrouter-gateway");
  ck_assert_int_eq(c->insecure, 0);
  ck_assert_ptr_null(c->exec);
  fr_kube_creds_free(c);
  /* IPv6 in brackets; POD_NAMESPACE wins over the file (clientcmd). */
  setenv("POD_NAMESPACE", "from-env", 1);
  ck_assert_int_eq(in_cluster("fd00:10:96::1", "6443", &c), 0);
  ck_assert_str_eq(c->server, "https://[fd00:10:96::1]:6443");
  ck_assert_str_eq(c->ns, "from-env");
  fr_kube_creds_free(c);
  unsetenv("POD_NAMESPACE");
  /* No namespace file: ns unset (callers default it). */
  {
    char p[PATH_MAX + 16];
    snprintf(p, sizeof(p), "%s/namespace", g_dir);
    unlink(p);
  }
  ck_assert_int_eq(in_cluster("10.96.0.1", "443", &c), 0);
  ck_assert_ptr_null(c->ns);
  fr_kube_creds_free(c);
}
END_TEST

START_TEST(in_cluster_from_environment_variables) {
  struct fr_kube_creds *c = NULL;
  struct fr_in_cluster_opts o = {NULL, NULL, NULL};

  put("token", "t");
  put("ca.crt", CERT_PEM);
  setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1", 1);
  setenv("KUBERNETES_SERVICE_PORT", "6443", 1);
  setenv("FR_SERVICEACCOUNT_DIR", g_dir, 1);
  ck_assert_msg(fr_kubeconfig_in_cluster(&o, &c, g_err, sizeof(g_err)) == 0, "%s", g_err);
  ck_assert_str_eq(c->server, "https://127.0.0.1:6443");
  ck_assert_str_eq(c->token, "t");
  fr_kube_creds_free(c);
  ck_assert_msg(fr_kubeconfig_in_cluster(NULL, &c, g_err, sizeof(g_err)) == 0, "%s", g_err);
  fr_kube_creds_free(c);
  /* Outside a pod: client-go's ErrNotInCluster. */
  unsetenv("KUBERNETES_SERVICE_PORT");
  ck_assert_int_eq(fr_kubeconfig_in_cluster(&o, &c, g_err, sizeof(g_err)), -ENOENT);
  ck_assert_ptr_null(c);
  ck_assert_ptr_nonnull(strstr(g_err, "KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set"));
  unsetenv("KUBERNETES_SERVICE_HOST");
  unsetenv("FR_SERVICEACCOUNT_DIR");
}
END_TEST

START_TEST(in_cluster_errors_say_which_file) {
  struct fr_kube_creds *c = NULL;

  /* No token file: not in a pod with a service account. */
  put("ca.crt", CERT_PEM);
  ck_assert_int_eq(in_cluster("10.96.0.1", "443", &c), -ENOENT);
  ck_assert_ptr_null(c);
  ck_assert_msg(strstr(g_err, "/token") != NULL, "%s", g_err);
  put("token", "\n");
  ck_assert_int_eq(in_cluster("10.96.0.1", "443", &c), -EINVAL);
  ck_assert_msg(strstr(g_err, "is empty") != NULL, "%s", g_err);
  put("token", "a\nb\n");
  ck_assert_int_eq(in_cluster("10.96.0.1", "443", &c), -EINVAL);
  ck_assert_msg(strstr(g_err, "several lines") != NULL, "%s", g_err);
  put("token", "ok");
  put("ca.crt", "not a certificate");
  ck_assert_int_eq(in_cluster("10.96.0.1", "443", &c), -EINVAL);
  ck_assert_msg(strstr(g_err, "ca.crt is not a PEM file") != NULL, "%s", g_err);
  put("ca.crt", CERT_PEM);
  ck_assert_int_eq(in_cluster("10.96.0.1", "http", &c), -EINVAL);
  ck_assert_int_eq(in_cluster("10.96.0.1", "0", &c), -EINVAL);
  ck_assert_int_eq(in_cluster("evil/path", "443", &c), -EINVAL);
  ck_assert_int_eq(in_cluster("user@host", "443", &c), -EINVAL);
  ck_assert_int_eq(in_cluster("", "443", &c), -ENOENT);
  ck_assert_ptr_null(c);
}
END_TEST

static Suite *kubeconfig_suite(void) {
  Suite *s = suite_create("kubeconfig");
  TCase *tc;

  tc = tcase_create("kubesim");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, kubesim_shape_token_values_match);
  tcase_add_test(tc, kubesim_shape_empty_user_no_credentials);
  tcase_add_test(tc, kubesim_binary_kubeconfig_loads);
  suite_add_tcase(s, tc);

  tc = tcase_create("resolve");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, contexts_null_uses_current_context);
  tcase_add_test(tc, contexts_named_overrides_current_context);
  tcase_add_test(tc, contexts_misspelled_enoent_did_you_mean);
  tcase_add_test(tc, contexts_no_context_no_current_einval_lists_names);
  tcase_add_test(tc, contexts_without_user_anonymous);
  tcase_add_test(tc, yaml_anchor_alias_resolved);
  tcase_add_test(tc, ca_data_folded_over_lines_decoded);
  tcase_add_test(tc, files_relative_to_kubeconfig_folder_loaded);
  tcase_add_test(tc, files_relative_kubeconfig_path_token_file_absolute);
  tcase_add_test(tc, token_file_overrides_static_token);
  tcase_add_test(tc, cert_and_key_data_decoded);
  tcase_add_test(tc, exec_gke_plugin_parsed);
  tcase_add_test(tc, exec_eks_v1_flow_sequences_parsed);
  tcase_add_test(tc, exec_no_args_empty_arrays);
  tcase_add_test(tc, exec_relative_command_path_resolved_bare_name_kept);
  tcase_add_test(tc, creds_dup_deep_copy_equal);
  tcase_add_test(tc, unknown_field_near_miss_warned_and_ignored);
  tcase_add_test(tc, creds_free_and_dup_null_safe);
  suite_add_tcase(s, tc);

  tc = tcase_create("in_cluster");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, in_cluster_service_account_files_and_environment);
  tcase_add_test(tc, in_cluster_from_environment_variables);
  tcase_add_test(tc, in_cluster_errors_say_which_file);
  suite_add_tcase(s, tc);

  tc = tcase_create("errors");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, kubeconfig_missing_file_enoent);
  tcase_add_test(tc, kubeconfig_error_without_buffer_still_returns_code);
  tcase_add_loop_test(tc, errors_table_code_line_message, 0, (int)FR_ARRAY_SIZE(err_cases));
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(kubeconfig_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
