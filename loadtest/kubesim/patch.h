/* patch.h - patch formats kubectl and clients send. */
#ifndef KUBESIM_PATCH_H
#define KUBESIM_PATCH_H

#include <stddef.h>
#include <jansson.h>

/* RFC 7386 merge patch: takes <target> (may be NULL), borrows <patch>,
 * returns the merged document. Strategic merge patch is served by the same
 * function: for the maps kubectl label/annotate/scale send it is identical;
 * list merge keys and $patch directives are not modelled. */
json_t *merge_patch(json_t *target, json_t *patch);
/* RFC 6902 (add, remove, replace, test) applied in place to <doc>. */
int json_patch_apply(json_t *doc, json_t *ops, char *err, size_t errlen);

#endif
