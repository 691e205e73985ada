/* Internal interface of the binding-table core (table.c), used only by _dispatch.pyx.
 * Extensions use the same functions through the API table in fuel_kernel/abi.h. */
#ifndef FUEL_KERNEL_CORE_TABLE_H
#define FUEL_KERNEL_CORE_TABLE_H

#include "fuel_kernel/abi.h"

void fk_set_error(int status, const char *fmt, ...);
int fk_error_status(void);
const char *fk_error_message(void);
void fk_clear_error(void);

int fk_core_init(void);
const fk_api *fk_core_api(void);

const fk_snapshot *fk_acquire(void);
void fk_retain(const fk_snapshot *snapshot);
void fk_release(const fk_snapshot *snapshot);
uint64_t fk_snapshot_generation(const fk_snapshot *snapshot);
uint64_t fk_published_generation(void);
void fk_core_reclaim(void);
int64_t fk_core_allocated_bytes(void);
int64_t fk_core_live_snapshots(void);

fk_lookup_result fk_lookup(const fk_snapshot *snapshot, const fk_key *key);
const fk_entry *fk_lookup_with_caps(const fk_snapshot *snapshot, const fk_key *key, uint32_t required_caps);
int fk_call(const fk_entry *entry, const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out,
            const fk_layout *layouts, const fk_params *params);

/* iteration in first-registration order of keys */
int64_t fk_snapshot_key_count(const fk_snapshot *snapshot);
int64_t fk_snapshot_entry_count(const fk_snapshot *snapshot);
const fk_entry *fk_snapshot_entries(const fk_snapshot *snapshot);
fk_lookup_result fk_snapshot_key_at(const fk_snapshot *snapshot, int64_t index, fk_key *key_out);

fk_txn *fk_txn_begin(void);
int fk_txn_register(fk_txn *txn, const fk_key *key, const fk_entry *entry);
int fk_txn_register_manifest(fk_txn *txn, int backend, const fk_manifest_row *rows, int n_rows);
int fk_txn_drop_runtime_fused(fk_txn *txn, uint32_t fused_id, int backend);
int fk_txn_commit(fk_txn *txn);
void fk_txn_abort(fk_txn *txn);
int64_t fk_txn_size(const fk_txn *txn);
void fk_txn_poison(fk_txn *txn);   /* a Python-side failure: commit will publish nothing */

/* the same edit applied to any snapshot, without publishing: fill_unset_* build on this */
typedef void (*fk_entry_editor)(const fk_key *key, fk_entry *entry, void *context);
int fk_txn_edit_entries(fk_txn *txn, int backend, fk_entry_editor editor, void *context);

uint32_t fk_new_runtime_fused_id(void);
int fk_claim_backend(const char *name);
const char *fk_backend_name(int backend);

fk_cost fk_unknown_cost(const fk_layout *layouts, int n_layouts, const fk_dtypes *dtypes, const fk_params *params);
int fk_key_outputs(const fk_key *key);

#endif
