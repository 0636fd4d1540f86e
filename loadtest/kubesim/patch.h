/* patch.h - patch formats kubectl and clients send. */
#ifndef KUBESIM_PATCH_H
#define KUBESIM_PATCH_H

#include <stddef.h>
#include <jansson.h>

/* RFC 7386 merge patch: takes <target> (may be NULL), borrows <patch>,
 * returns the merged document. */
json_t *merge_patch(json_t *target, json_t *patch);
/* Strategic merge patch, same ownership: maps merge as in merge_patch();
 * the lists Kubernetes types key (containers, env, volumes, ports, ... by
 * name, containerPort, mountPath) merge element by element, with
 * {"$patch":"delete"} removing one; other lists are replaced and other
 * directives ($setElementOrder, $retainKeys, a map's $patch) ignored. */
json_t *strategic_merge_patch(json_t *target, json_t *patch);
/* RFC 6902 (add, remove, replace, test) applied in place to <doc>. */
int json_patch_apply(json_t *doc, json_t *ops, char *err, size_t errlen);

#endif
