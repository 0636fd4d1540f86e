/* patch.h - patch formats kubectl and clients send. */
#ifndef KUBESIM_PATCH_H
#define KUBESIM_PATCH_H

#include <stddef.h>
#include <jansson.h>

/* RFC 7386 merge patch: takes <target> (may be NULL), borrows <patch>,
 * returns the merged document. */
json_t *merge_patch(json_t *target, json_t *patch);
/* Strategic merge patch (application/strategic-merge-patch+json) as the API
 * server applies it to the built-in kinds: objects merge as in a merge
 * patch; the lists the Kubernetes types merge (containers and env by name,
 * ports by containerPort, conditions by type, ownerReferences by uid,
 * finalizers as a set, ...) merge element by element, in the server's
 * order; every other list is replaced. The directives $patch (replace,
 * delete), $retainKeys and $deleteFromPrimitiveList are honoured,
 * $setElementOrder is ignored. Takes <target> (may be NULL), borrows
 * <patch>; returns the merged document, or NULL with <err> set when the
 * patch is not an object or is malformed (a list element without its merge
 * key: the API server's "map: ... does not contain declared merge key"). */
json_t *strategic_merge_patch(json_t *target, json_t *patch, char *err, size_t errlen);
/* RFC 6902 (add, remove, replace, test) applied in place to <doc>. */
int json_patch_apply(json_t *doc, json_t *ops, char *err, size_t errlen);

#endif
