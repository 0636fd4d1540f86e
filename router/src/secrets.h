/* secrets.h - a create's `secrets`: the names checked, and the values read
 * from the tenant's Secret in every cluster the plan creates in, before
 * anything is created.
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
struct batch;
struct secrets_fetch;

/* Names a create may ask for at most. */
#define SECRETS_MAX 64
/* Decoded bytes of all the values a create asks for, at most: with the env
 * they travel in one /init, which the agent caps at 1 MiB. */
#define SECRETS_MAX_BYTES (128 * 1024)

/* Checks the create body's "secrets" <v> (may be NULL: none) against its
 * <env> (may be NULL): an array of at most SECRETS_MAX distinct env var
 * names ([A-Za-z_][A-Za-z0-9_]*, at most 128 characters) that are not
 * also env keys, and a router that runs the sandbox agent. 0 (then *<out>
 * is <v>, borrowed, or NULL for none or []), or -1 after answering 400
 * invalid_field / agent_required. */
int secrets_parse(struct api_req *q, json_t *v, json_t *env, json_t **out);

/* Called once when every candidate's Secret has been read. <status> 0:
 * go on (batch_start; candidates whose cluster could not answer were
 * dropped with batch_drop_cand). Else the answer the request gets: 400
 * secret_not_found / secret_invalid / secret_too_large, 503 out_of_memory,
 * with <body> (taken), and nothing is created. */
typedef void (*secrets_done_cb)(int status, json_t *body, void *arg);

/* A fetch of the keys <names> (array of strings, copied) for request <q>
 * (borrowed; must outlive the fetch). NULL on out of memory. */
struct secrets_fetch *secrets_fetch_new(struct api_req *q, json_t *names);
/* Reads the tenant's Secret from each candidate cluster of <b> (borrowed;
 * must outlive the fetch) and hands <done> the outcome. <done> may run
 * before this returns (no cluster could be asked). */
void secrets_fetch_start(struct secrets_fetch *f, struct batch *b, secrets_done_cb done, void *arg);
/* Cancels reads still out, zeroes and frees the values (the batch must
 * not start creates afterwards). Accepts NULL. */
void secrets_fetch_free(struct secrets_fetch *f);

#endif
