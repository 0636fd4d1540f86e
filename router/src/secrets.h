/* secrets.h - a create's `secrets`: the names checked, and the values read
 * from the tenant's Secret in every cluster the create may use, before it
 * is placed: a cluster whose Secret lacks a key cannot host it (the plan
 * skips it, "no_secret"), and the others can.
 *
 * The values go to the batch's candidates (batch_cand.secrets) and from
 * there, through the adapter, to each sandbox agent's /init only. They are
 * never logged, put in an answer, an event or an error message, and they
 * are zeroed when the fetch is freed.
 */
#ifndef FR_ROUTER_SECRETS_H
#define FR_ROUTER_SECRETS_H

#include <jansson.h>

struct api_req;
struct secrets_fetch;

/* Names a create may ask for at most. */
#define SECRETS_MAX 64
/* Decoded bytes of all the values a create asks for, at most: with the env
 * they travel in one /init, which the agent caps at 1 MiB. */
#define SECRETS_MAX_BYTES (128 * 1024)

/* 1 when <s> can name a secret: an env var name ([A-Za-z_][A-Za-z0-9_]*,
 * at most 128 characters). */
int secrets_name_valid(const char *s);

/* Checks the create body's "secrets" <v> (may be NULL: none) against its
 * <env> (may be NULL): an array of at most SECRETS_MAX distinct env var
 * names ([A-Za-z_][A-Za-z0-9_]*, at most 128 characters) that are not
 * also env keys, and a router that runs the sandbox agent. 0 (then *<out>
 * is <v>, borrowed, or NULL for none or []), or -1 after answering 400
 * invalid_field / agent_required. */
int secrets_parse(struct api_req *q, json_t *v, json_t *env, json_t **out);

/* Called once when the tenant's Secret has been read from every cluster
 * asked. <status> 0: go on; each cluster then has its values
 * (secrets_values) or why it cannot host the create (secrets_unfit: the
 * Secret or a key is missing there, or it could not be read). Else the
 * answer the request gets, <body> taken: 400 secret_not_found (no cluster
 * that answered has every key), secret_invalid, secret_too_large, 503
 * out_of_memory; nothing is created. */
typedef void (*secrets_done_cb)(int status, json_t *body, void *arg);

/* A fetch of the keys <names> (array of strings, copied) for request <q>
 * (borrowed; must outlive the fetch). NULL on out of memory. */
struct secrets_fetch *secrets_fetch_new(struct api_req *q, json_t *names);
/* Reads the tenant's Secret from every cluster i (adapter order) with
 * <use>[i] set, and hands <done> the outcome. <done> may run before this
 * returns (no cluster could be asked). */
void secrets_fetch_start(struct secrets_fetch *f, const int *use, secrets_done_cb done, void *arg);
/* After <done> with 0: the values for cluster <i> (borrowed, valid until
 * the fetch is freed; hand them to the batch's candidate), or NULL with
 * *<code> ("no_secret", "secret_unreadable", "not_asked") and *<detail>
 * saying why. */
json_t *secrets_values(struct secrets_fetch *f, size_t i, const char **code, const char **detail);
/* Cancels reads still out, zeroes and frees the values (no batch may
 * use them afterwards). Accepts NULL. */
void secrets_fetch_free(struct secrets_fetch *f);

#endif
