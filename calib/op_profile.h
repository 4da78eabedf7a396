/* calib/op_profile.h: where a run's time goes, op by op (kvcal calibrate
 * --profile). The executor marks the start of each op of a layer on the
 * backend's queue (kvcal_backend_ops' profile_mark: a CUDA event, or the
 * host's clock on cpu), a backend may mark the steps inside an op (the
 * cuda backend's MoE op: "moe gather", "moe experts gate_up", ...; the op's
 * own label, "moe", then times what comes before its first step: the
 * router and the routing); the interval from a layer's last op on a batch
 * to the next op (the next batch's, or the next layer's, where its weights
 * may still be on their way) is KVCAL_OP_PROFILE_GAPS'. After each chunk of
 * batches the backend hands the intervals between its marks to
 * kvcal_op_profile_add, which sums them by label; the device is not
 * stopped in between. */
#ifndef KVCAL_CALIB_OP_PROFILE_H
#define KVCAL_CALIB_OP_PROFILE_H

#include <stddef.h>

#include "calib/arch.h"

#define KVCAL_OP_PROFILE_LABELS 64
/* the label of the device's time between one layer's ops on a batch and the
 * next ops: waits for the weights' load or for the host to queue work */
#define KVCAL_OP_PROFILE_GAPS "between layers and batches"
#define KVCAL_OP_LABEL_MAX 40

/* One label's sum: the milliseconds of its intervals, how many there were. */
typedef struct {
    char label[KVCAL_OP_LABEL_MAX];
    double ms;
    long long calls;
} kvcal_op_time;

typedef struct kvcal_op_profile kvcal_op_profile;

/* NULL when out of memory. */
kvcal_op_profile *kvcal_op_profile_create(void);
void kvcal_op_profile_destroy(kvcal_op_profile *p);

/* The label of op (its kind and weight: "linear qkv", "attention", "moe") as a
 * string owned by p, the same pointer for the same label: what a mark
 * holds until its interval is added. Past KVCAL_OP_PROFILE_LABELS labels,
 * "other". */
const char *kvcal_op_profile_label(kvcal_op_profile *p, const kvcal_op *op);

/* Adds an interval of ms milliseconds to label's sum (ctx: the profile; the
 * signature of profile_take's callback). */
void kvcal_op_profile_add(void *ctx, const char *label, double ms);

/* The sums, in the order their labels were first added; returns their count. */
int kvcal_op_profile_times(const kvcal_op_profile *p, const kvcal_op_time **out);

#endif
