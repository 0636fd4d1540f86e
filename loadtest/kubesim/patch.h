/* patch.h - patch formats kubectl and clients send. */
#ifndef KUBESIM_PATCH_H
#define KUBESIM_PATCH_H

#include <stddef.h>
#include <jansson.h>

#include "sim.h"

/* RFC 7386 merge patch: takes <target> (may be NULL), borrows <patch>,
 * returns the merged document. */
json_t *merge_patch(json_t *target, json_t *patch);

/* Why a strategic merge patch was refused: the HTTP status the API server
 * answers (400 for a malformed directive, 422 for a list of lists, 500 for
 * the merge errors it does not classify, such as a missing merge key) and
 * its message. */
struct smp_error {
  int code;
  char msg[512];
};

/* Strategic merge patch (application/strategic-merge-patch+json) of an
 * object of kind <k>, as apimachinery's strategicpatch applies it: lists
 * the API types mark with a patch merge key (containers and env by name,
 * ports by containerPort or port, conditions by type, ownerReferences by
 * uid, ...) merge element by element, finalizers merge as a set, every
 * other list is replaced and every map merged; the directives $patch
 * (replace, delete), $retainKeys, $deleteFromPrimitiveList/<list> and
 * $setElementOrder/<list> are honoured, and none is left in the result.
 * <k> is K_COUNT for an object with no such lists (a Scale). Takes
 * <target> (an object, or NULL), borrows <patch> (an object).
 * Returns the patched document, or NULL with <err> filled in. */
json_t *strategic_merge_patch(json_t *target, json_t *patch, enum sim_kind k,
                              struct smp_error *err);
/* RFC 6902 (add, remove, replace, move, copy, test) applied in place to
 * <doc>; on failure <err> says why and <doc> may be partly patched. */
int json_patch_apply(json_t *doc, json_t *ops, char *err, size_t errlen);

#endif
