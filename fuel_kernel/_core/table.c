/* The binding table: an immutable, reference-counted snapshot published through one atomic pointer.
 *
 * Storage.  A snapshot is one allocation: an open-addressing hash (linear probing, power-of-two
 * capacity, load <= 1/2) over the 24-byte POD fk_key, whose slots point at contiguous runs of
 * fk_entry alternatives.  Entries of one key are stored together in registration order, and keys
 * in first-registration order, so iteration is deterministic.  A lookup hashes three 64-bit words
 * and probes a few slots: no Python object and no lock is touched.
 *
 * Publishing (copy-on-write).  Writers are serialized by one mutex.  A commit rebuilds a new
 * snapshot from the current one's rows plus the transaction's rows (the "clone and mutate"),
 * validates it (the same kernel twice at one key is an error), and only then swaps the global
 * pointer; a failed commit frees its draft and publishes nothing.
 *
 * Reclamation.  Readers never lock.  acquire() announces itself in g_acquiring, loads the pointer,
 * increments the snapshot's refcount, and withdraws the announcement.  The published snapshot
 * holds one reference of its own; a superseded snapshot drops it and goes onto a retired list.
 * A retired snapshot is freed only when, in this order, (1) no acquire() is in flight and then
 * (2) its refcount is zero.  After (1) every new acquire() sees a newer pointer, so the count of a
 * retired snapshot can only fall, and (2) proves nobody holds it: no use-after-free.  Retired
 * snapshots are reclaimed at every commit and whenever a holder releases the last reference, so
 * memory returns to one live snapshot plus whatever readers still hold: no unbounded growth.
 */
#include <Python.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "table.h"
#include "pool.h"
#include "scratch.h"

#define FK_TRACEMALLOC_DOMAIN 0x464b  /* "FK": the table's C allocations, visible to tracemalloc */

/* ---- thread-local error ------------------------------------------------------------------- */
static _Thread_local int tls_status = FK_OK;
static _Thread_local char tls_message[FK_ERROR_LEN];

void fk_set_error(int status, const char *fmt, ...) {
    va_list args;
    tls_status = status;
    va_start(args, fmt);
    vsnprintf(tls_message, sizeof(tls_message), fmt, args);
    va_end(args);
}
int fk_error_status(void) { return tls_status; }
const char *fk_error_message(void) { return tls_message; }
void fk_clear_error(void) { tls_status = FK_OK; tls_message[0] = '\0'; }

/* ---- allocation accounting ---------------------------------------------------------------- */
static _Atomic int64_t g_allocated_bytes = 0;
static _Atomic int64_t g_live_snapshots = 0;

static void *core_alloc(size_t nbytes) {
    void *block = calloc(1, nbytes);
    if (block != NULL) {
        atomic_fetch_add(&g_allocated_bytes, (int64_t)nbytes);
        PyTraceMalloc_Track(FK_TRACEMALLOC_DOMAIN, (uintptr_t)block, nbytes);
    }
    return block;
}
static void core_free(void *block, size_t nbytes) {
    if (block == NULL) return;
    atomic_fetch_sub(&g_allocated_bytes, (int64_t)nbytes);
    PyTraceMalloc_Untrack(FK_TRACEMALLOC_DOMAIN, (uintptr_t)block);
    free(block);
}
int64_t fk_core_allocated_bytes(void) { return atomic_load(&g_allocated_bytes); }
int64_t fk_core_live_snapshots(void) { return atomic_load(&g_live_snapshots); }

/* ---- snapshots ---------------------------------------------------------------------------- */
typedef struct {
    fk_key key;
    uint64_t hash;
    int32_t first;      /* index of the first entry; -1 for an empty slot */
    int32_t count;
} fk_slot;

struct fk_snapshot {
    _Atomic int64_t refcount;
    uint64_t generation;
    int64_t n_entries, n_keys, capacity;
    fk_slot *slots;          /* capacity */
    fk_entry *entries;       /* n_entries, grouped by key */
    int64_t *key_slots;      /* n_keys: slot index of each key, in first-registration order */
    struct fk_snapshot *next_retired;
    size_t nbytes;
};

static _Atomic(fk_snapshot *) g_current = NULL;
static _Atomic int64_t g_acquiring = 0;
static _Atomic uint64_t g_generation = 0;
static pthread_mutex_t g_writer = PTHREAD_MUTEX_INITIALIZER;
static fk_snapshot *g_retired = NULL;         /* guarded by g_writer */

static inline uint64_t key_hash(const fk_key *key) {
    /* three word loads straight into registers (one 24-byte memcpy went through the stack) */
    uint64_t w0, w1, w2;
    memcpy(&w0, (const char *)key, 8);
    memcpy(&w1, (const char *)key + 8, 8);
    memcpy(&w2, (const char *)key + 16, 8);
    uint64_t h = w0 * 0x9e3779b97f4a7c15ull ^ w1 * 0xc2b2ae3d27d4eb4full ^ w2 * 0x165667b19e3779f9ull;
    h ^= h >> 31;
    h *= 0xd6e8feb86659fd93ull;
    return h ^ (h >> 32);
}
static inline int key_equal(const fk_key *a, const fk_key *b) {
    const uint64_t *x = (const uint64_t *)a, *y = (const uint64_t *)b;
    return x[0] == y[0] && x[1] == y[1] && x[2] == y[2];
}

static fk_snapshot *snapshot_alloc(int64_t n_entries) {
    int64_t capacity = 16;
    while (capacity < 2 * n_entries + 2) capacity *= 2;
    size_t nbytes = sizeof(fk_snapshot) + (size_t)capacity * sizeof(fk_slot) +
                    (size_t)n_entries * (sizeof(fk_entry) + sizeof(int64_t));
    fk_snapshot *s = (fk_snapshot *)core_alloc(nbytes);
    if (s == NULL) return NULL;
    s->nbytes = nbytes;
    s->capacity = capacity;
    s->slots = (fk_slot *)(s + 1);
    s->entries = (fk_entry *)(s->slots + capacity);
    s->key_slots = (int64_t *)(s->entries + n_entries);
    for (int64_t i = 0; i < capacity; i++) s->slots[i].first = -1;
    atomic_store(&s->refcount, 1);
    atomic_fetch_add(&g_live_snapshots, 1);
    return s;
}
static void snapshot_free(fk_snapshot *s) {
    atomic_fetch_sub(&g_live_snapshots, 1);
    core_free(s, s->nbytes);
}

static inline int64_t find_slot(const fk_snapshot *s, const fk_key *key, uint64_t hash) {
    int64_t mask = s->capacity - 1, i = (int64_t)(hash & (uint64_t)mask);
    for (;;) {
        const fk_slot *slot = &s->slots[i];
        if (slot->first < 0) return -1 - i;               /* empty: where the key would go */
        if (slot->hash == hash && key_equal(&slot->key, key)) return i;
        i = (i + 1) & mask;
    }
}

/* Build a snapshot from rows (keys[i], entries[i]); alternatives keep row order. */
static fk_snapshot *snapshot_build(const fk_key *keys, const fk_entry *entries, int64_t n) {
    fk_snapshot *s = snapshot_alloc(n);
    int32_t *cursor;
    if (s == NULL) return NULL;
    for (int64_t r = 0; r < n; r++) {                      /* pass 1: keys and counts */
        uint64_t h = key_hash(&keys[r]);
        int64_t i = find_slot(s, &keys[r], h);
        if (i < 0) {
            i = -1 - i;
            s->slots[i].key = keys[r];
            s->slots[i].hash = h;
            s->slots[i].first = 0;
            s->slots[i].count = 0;
            s->key_slots[s->n_keys++] = i;
        }
        s->slots[i].count++;
    }
    {                                                      /* pass 2: group starts */
        int32_t start = 0;
        for (int64_t k = 0; k < s->n_keys; k++) {
            fk_slot *slot = &s->slots[s->key_slots[k]];
            slot->first = start;
            start += slot->count;
        }
    }
    cursor = (int32_t *)calloc((size_t)(s->capacity), sizeof(int32_t));
    if (cursor == NULL) { snapshot_free(s); return NULL; }
    for (int64_t r = 0; r < n; r++) {                      /* pass 3: place entries */
        int64_t i = find_slot(s, &keys[r], key_hash(&keys[r]));
        s->entries[s->slots[i].first + cursor[i]++] = entries[r];
    }
    free(cursor);
    s->n_entries = n;
    return s;
}

static const char *op_name_for_error(const fk_key *key, char *buffer, size_t size) {
    if (key->kind == FK_KEY_RUNTIME_FUSED) snprintf(buffer, size, "runtime fused op %u", key->id);
    else snprintf(buffer, size, "op %u", key->id);
    return buffer;
}

/* The same kernel function twice at one key is a registration mistake, not an alternative. */
static int snapshot_validate(const fk_snapshot *s) {
    for (int64_t k = 0; k < s->n_keys; k++) {
        const fk_slot *slot = &s->slots[s->key_slots[k]];
        for (int32_t a = 0; a < slot->count; a++)
            for (int32_t b = a + 1; b < slot->count; b++)
                if (s->entries[slot->first + a].kernel == s->entries[slot->first + b].kernel) {
                    char name[48];
                    fk_set_error(FK_ERR_INVALID,
                                 "the same kernel is registered twice at one key (%s, %d dtypes, backend %d); "
                                 "nothing was published",
                                 op_name_for_error(&slot->key, name, sizeof(name)), slot->key.ndtypes,
                                 slot->key.backend);
                    return FK_ERR_INVALID;
                }
    }
    return FK_OK;
}

static void reclaim_locked(void) {
    fk_snapshot **link = &g_retired;
    if (atomic_load(&g_acquiring) != 0) return;            /* (1) before (2): see the opening comment */
    while (*link != NULL) {
        fk_snapshot *s = *link;
        if (atomic_load(&s->refcount) == 0) {
            *link = s->next_retired;
            snapshot_free(s);
        } else {
            link = &s->next_retired;
        }
    }
}

void fk_core_reclaim(void) {
    pthread_mutex_lock(&g_writer);
    reclaim_locked();
    pthread_mutex_unlock(&g_writer);
}

const fk_snapshot *fk_acquire(void) {
    fk_snapshot *s;
    atomic_fetch_add(&g_acquiring, 1);
    s = atomic_load(&g_current);
    atomic_fetch_add(&s->refcount, 1);
    atomic_fetch_sub(&g_acquiring, 1);
    return s;
}
void fk_retain(const fk_snapshot *snapshot) {
    atomic_fetch_add(&((fk_snapshot *)snapshot)->refcount, 1);
}
void fk_release(const fk_snapshot *snapshot) {
    if (snapshot == NULL) return;
    if (atomic_fetch_sub(&((fk_snapshot *)snapshot)->refcount, 1) == 1) {
        /* only a retired snapshot can reach zero; a busy writer will reclaim it at its commit */
        if (pthread_mutex_trylock(&g_writer) == 0) {
            reclaim_locked();
            pthread_mutex_unlock(&g_writer);
        }
    }
}
uint64_t fk_snapshot_generation(const fk_snapshot *snapshot) { return snapshot->generation; }
uint64_t fk_published_generation(void) { return atomic_load(&g_generation); }

/* ---- lookup ------------------------------------------------------------------------------- */
/* fk_lookup_with_caps probes through this inline copy: calling the exported fk_lookup from inside
 * the shared object goes through the PLT (semantic interposition) and cost ~3 ns per lookup. */
static inline fk_lookup_result lookup_in(const fk_snapshot *snapshot, const fk_key *key) {
    fk_lookup_result result;
    int64_t i = find_slot(snapshot, key, key_hash(key));
    result.snapshot = snapshot;
    if (i < 0) {
        result.entries = NULL;
        result.n_entries = 0;
    } else {
        result.entries = &snapshot->entries[snapshot->slots[i].first];
        result.n_entries = snapshot->slots[i].count;
    }
    return result;
}

fk_lookup_result fk_lookup(const fk_snapshot *snapshot, const fk_key *key) { return lookup_in(snapshot, key); }

const fk_entry *fk_lookup_with_caps(const fk_snapshot *snapshot, const fk_key *key, uint32_t required_caps) {
    /* requires_broadcast entries are only valid on broadcast inputs: plain lookup never picks them */
    fk_lookup_result found = lookup_in(snapshot, key);
    for (int32_t a = 0; a < found.n_entries; a++) {
        const fk_entry *entry = &found.entries[a];
        if (entry->caps & FK_CAP_REQUIRES_BROADCAST) continue;
        if ((entry->caps & required_caps) == required_caps) return entry;
    }
    return NULL;
}

const fk_entry *fk_snapshot_entries(const fk_snapshot *snapshot) { return snapshot->entries; }

int fk_call(const fk_entry *entry, const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out,
            const fk_layout *layouts, const fk_params *params) {
    int status;
    tls_status = FK_OK;
    status = entry->kernel(inputs, n_in, outputs, n_out, layouts, params);
    if (status != FK_OK && tls_status == FK_OK)
        fk_set_error(status, "kernel (source \"%s\") failed with status %d and no message", entry->source, status);
    return status;
}

int64_t fk_snapshot_key_count(const fk_snapshot *snapshot) { return snapshot->n_keys; }
int64_t fk_snapshot_entry_count(const fk_snapshot *snapshot) { return snapshot->n_entries; }
fk_lookup_result fk_snapshot_key_at(const fk_snapshot *snapshot, int64_t index, fk_key *key_out) {
    const fk_slot *slot = &snapshot->slots[snapshot->key_slots[index]];
    fk_lookup_result result;
    *key_out = slot->key;
    result.snapshot = snapshot;
    result.entries = &snapshot->entries[slot->first];
    result.n_entries = slot->count;
    return result;
}

/* ---- transactions ------------------------------------------------------------------------- */
typedef struct { int backend; fk_entry_editor editor; void *context; } fk_edit;
typedef struct { uint32_t id; int backend; } fk_drop;

struct fk_txn {
    int64_t n, capacity;
    fk_key *keys;
    fk_entry *entries;
    fk_drop drops[64];
    int n_drops;
    fk_edit edits[16];
    int n_edits;
    int failed;
};

fk_txn *fk_txn_begin(void) {
    fk_txn *txn = (fk_txn *)calloc(1, sizeof(fk_txn));
    if (txn == NULL) fk_set_error(FK_ERR_NO_MEMORY, "out of memory starting a transaction");
    return txn;
}

static int txn_fail(fk_txn *txn, int status) { txn->failed = 1; return status; }
void fk_txn_poison(fk_txn *txn) { txn->failed = 1; }

static int validate_key(const fk_key *key) {
    if (key->kind != FK_KEY_STATIC && key->kind != FK_KEY_RUNTIME_FUSED) {
        fk_set_error(FK_ERR_INVALID, "unknown binding key kind %d", (int)key->kind);
        return FK_ERR_INVALID;
    }
    if (key->kind == FK_KEY_STATIC && key->id >= FK_OP_COUNT) {
        fk_set_error(FK_ERR_INVALID, "unknown op code %u", key->id);
        return FK_ERR_INVALID;
    }
    if (key->ndtypes < 1 || key->ndtypes > FK_MAX_OPERANDS) {
        fk_set_error(FK_ERR_INVALID, "a key lists 1 to %d operand dtypes, not %d", FK_MAX_OPERANDS, key->ndtypes);
        return FK_ERR_INVALID;
    }
    if (key->kind == FK_KEY_STATIC) {
        int n_out = fk_key_outputs(key), lo = fk_op_min_outputs[key->id], hi = fk_op_max_outputs[key->id];
        if (n_out < lo || n_out > hi || key->ndtypes <= n_out) {
            fk_set_error(FK_ERR_INVALID, "op code %u writes %d to %d outputs after at least one input; a key of "
                         "%d dtypes does not fit", key->id, lo, hi, key->ndtypes);
            return FK_ERR_INVALID;
        }
    }
    for (int i = 0; i < key->ndtypes; i++)
        if (key->dtypes[i] >= FK_DTYPE_COUNT) {
            fk_set_error(FK_ERR_INVALID, "operand %d has unknown dtype code %d", i, key->dtypes[i]);
            return FK_ERR_INVALID;
        }
    if (key->backend > FK_BACKEND_EXTENSION_LAST) {
        fk_set_error(FK_ERR_INVALID, "backend id %d is out of range", key->backend);
        return FK_ERR_INVALID;
    }
    return FK_OK;
}

int fk_txn_register(fk_txn *txn, const fk_key *key, const fk_entry *entry) {
    int status = validate_key(key);
    if (status) return txn_fail(txn, status);
    if (entry->kernel == NULL) {
        fk_set_error(FK_ERR_INVALID, "cannot register a NULL kernel");
        return txn_fail(txn, FK_ERR_INVALID);
    }
    if (txn->n == txn->capacity) {
        int64_t capacity = txn->capacity ? 2 * txn->capacity : 64;
        fk_key *keys = (fk_key *)realloc(txn->keys, (size_t)capacity * sizeof(fk_key));
        if (keys == NULL) { fk_set_error(FK_ERR_NO_MEMORY, "out of memory"); return txn_fail(txn, FK_ERR_NO_MEMORY); }
        txn->keys = keys;
        fk_entry *entries = (fk_entry *)realloc(txn->entries, (size_t)capacity * sizeof(fk_entry));
        if (entries == NULL) { fk_set_error(FK_ERR_NO_MEMORY, "out of memory"); return txn_fail(txn, FK_ERR_NO_MEMORY); }
        txn->entries = entries;
        txn->capacity = capacity;
    }
    txn->keys[txn->n] = *key;
    txn->entries[txn->n] = *entry;
    if (txn->entries[txn->n].cost == NULL) txn->entries[txn->n].cost = fk_unknown_cost;
    txn->entries[txn->n].source[FK_SOURCE_LEN - 1] = '\0';
    txn->entries[txn->n].precision.notes[FK_NOTES_LEN - 1] = '\0';
    txn->n++;
    return FK_OK;
}

int fk_txn_register_manifest(fk_txn *txn, int backend, const fk_manifest_row *rows, int n_rows) {
    for (int r = 0; r < n_rows; r++) {
        fk_key key = fk_key_make(FK_KEY_STATIC, (uint32_t)rows[r].op, &rows[r].dtypes, backend);
        int status = fk_txn_register(txn, &key, &rows[r].entry);
        if (status) return status;
    }
    return FK_OK;
}

int fk_txn_drop_runtime_fused(fk_txn *txn, uint32_t fused_id, int backend) {
    if (txn->n_drops == (int)(sizeof(txn->drops) / sizeof(txn->drops[0]))) {
        fk_set_error(FK_ERR_INVALID, "too many drops in one transaction (limit %d)", txn->n_drops);
        return txn_fail(txn, FK_ERR_INVALID);
    }
    txn->drops[txn->n_drops].id = fused_id;
    txn->drops[txn->n_drops].backend = backend;
    txn->n_drops++;
    return FK_OK;
}

int fk_txn_edit_entries(fk_txn *txn, int backend, fk_entry_editor editor, void *context) {
    if (txn->n_edits == (int)(sizeof(txn->edits) / sizeof(txn->edits[0]))) {
        fk_set_error(FK_ERR_INVALID, "too many edits in one transaction");
        return txn_fail(txn, FK_ERR_INVALID);
    }
    txn->edits[txn->n_edits].backend = backend;
    txn->edits[txn->n_edits].editor = editor;
    txn->edits[txn->n_edits].context = context;
    txn->n_edits++;
    return FK_OK;
}

int64_t fk_txn_size(const fk_txn *txn) { return txn->n; }

void fk_txn_abort(fk_txn *txn) {
    if (txn == NULL) return;
    free(txn->keys);
    free(txn->entries);
    free(txn);
}

static int is_dropped(const fk_txn *txn, const fk_key *key) {
    if (key->kind != FK_KEY_RUNTIME_FUSED) return 0;
    for (int d = 0; d < txn->n_drops; d++)
        if (txn->drops[d].id == key->id && txn->drops[d].backend == key->backend) return 1;
    return 0;
}

int fk_txn_commit(fk_txn *txn) {
    fk_snapshot *current, *draft;
    fk_key *keys;
    fk_entry *entries;
    int64_t n = 0, total;
    int status = FK_OK;
    if (txn->failed) {
        fk_set_error(FK_ERR_INVALID, "a registration in this transaction failed; nothing was published");
        fk_txn_abort(txn);
        return FK_ERR_INVALID;
    }
    pthread_mutex_lock(&g_writer);
    current = atomic_load(&g_current);
    total = current->n_entries + txn->n;
    keys = (fk_key *)malloc((size_t)(total ? total : 1) * sizeof(fk_key));
    entries = (fk_entry *)malloc((size_t)(total ? total : 1) * sizeof(fk_entry));
    if (keys == NULL || entries == NULL) {
        fk_set_error(FK_ERR_NO_MEMORY, "out of memory publishing bindings");
        status = FK_ERR_NO_MEMORY;
        goto done;
    }
    for (int64_t k = 0; k < current->n_keys; k++) {        /* the clone: current rows, minus drops */
        const fk_slot *slot = &current->slots[current->key_slots[k]];
        if (is_dropped(txn, &slot->key)) continue;
        for (int32_t a = 0; a < slot->count; a++) {
            keys[n] = slot->key;
            entries[n++] = current->entries[slot->first + a];
        }
    }
    for (int64_t r = 0; r < txn->n; r++) {                 /* the mutation: new rows */
        if (is_dropped(txn, &txn->keys[r])) continue;
        keys[n] = txn->keys[r];
        entries[n++] = txn->entries[r];
    }
    for (int e = 0; e < txn->n_edits; e++)
        for (int64_t r = 0; r < n; r++)
            if (keys[r].backend == txn->edits[e].backend)
                txn->edits[e].editor(&keys[r], &entries[r], txn->edits[e].context);
    draft = snapshot_build(keys, entries, n);
    if (draft == NULL) {
        fk_set_error(FK_ERR_NO_MEMORY, "out of memory publishing bindings");
        status = FK_ERR_NO_MEMORY;
        goto done;
    }
    status = snapshot_validate(draft);
    if (status != FK_OK) {
        snapshot_free(draft);
        goto done;
    }
    draft->generation = current->generation + 1;
    atomic_store(&g_current, draft);
    atomic_store(&g_generation, draft->generation);
    current->next_retired = g_retired;                     /* retire: drop the published reference */
    g_retired = current;
    atomic_fetch_sub(&current->refcount, 1);
    reclaim_locked();
done:
    pthread_mutex_unlock(&g_writer);
    free(keys);
    free(entries);
    fk_txn_abort(txn);
    return status;
}

/* ---- ids, backends, sentinels ------------------------------------------------------------- */
static _Atomic uint32_t g_next_fused_id = 1;
uint32_t fk_new_runtime_fused_id(void) { return atomic_fetch_add(&g_next_fused_id, 1); }

static const char *const builtin_backend_names[] = {"cpu", "cuda", "vulkan", "metal"};
static char g_backend_names[FK_BACKEND_EXTENSION_LAST - FK_BACKEND_EXTENSION_FIRST + 1][32];
static pthread_mutex_t g_backend_lock = PTHREAD_MUTEX_INITIALIZER;

int fk_claim_backend(const char *name) {
    int id = -1, free_slot = -1;
    int n = FK_BACKEND_EXTENSION_LAST - FK_BACKEND_EXTENSION_FIRST + 1;
    if (name == NULL || name[0] == '\0' || strlen(name) >= sizeof(g_backend_names[0])) {
        fk_set_error(FK_ERR_INVALID, "a backend name is 1 to %d characters", (int)sizeof(g_backend_names[0]) - 1);
        return -1;
    }
    for (int b = 0; b < 4; b++)
        if (strcmp(name, builtin_backend_names[b]) == 0) {
            fk_set_error(FK_ERR_INVALID, "backend name \"%s\" is built in and cannot be claimed", name);
            return -1;
        }
    pthread_mutex_lock(&g_backend_lock);
    for (int i = 0; i < n; i++) {
        if (g_backend_names[i][0] == '\0') { if (free_slot < 0) free_slot = i; continue; }
        if (strcmp(g_backend_names[i], name) == 0) { id = FK_BACKEND_EXTENSION_FIRST + i; break; }
    }
    if (id < 0 && free_slot >= 0) {
        strcpy(g_backend_names[free_slot], name);
        id = FK_BACKEND_EXTENSION_FIRST + free_slot;
    }
    pthread_mutex_unlock(&g_backend_lock);
    if (id < 0) fk_set_error(FK_ERR_INVALID, "every extension backend id is claimed");
    return id;
}

const char *fk_backend_name(int backend) {
    if (backend >= 0 && backend < 4) return builtin_backend_names[backend];
    if (backend >= FK_BACKEND_EXTENSION_FIRST && backend <= FK_BACKEND_EXTENSION_LAST &&
        g_backend_names[backend - FK_BACKEND_EXTENSION_FIRST][0] != '\0')
        return g_backend_names[backend - FK_BACKEND_EXTENSION_FIRST];
    return NULL;
}

fk_cost fk_unknown_cost(const fk_layout *layouts, int n_layouts, const fk_dtypes *dtypes, const fk_params *params) {
    fk_cost none = {0.0, 0.0, 0.0};
    (void)layouts; (void)n_layouts; (void)dtypes; (void)params;
    return none;
}

int fk_key_outputs(const fk_key *key) {
    if (key->kind != FK_KEY_STATIC) return 1;
    if (key->id >= FK_OP_COUNT) {
        fk_set_error(FK_ERR_INVALID, "unknown op code %u", key->id);
        return -1;
    }
    if (fk_op_min_outputs[key->id] == fk_op_max_outputs[key->id]) return fk_op_max_outputs[key->id];
    return key->ndtypes - fk_op_fixed_inputs[key->id];      /* optional outputs: the key's length says */
}

/* ---- the API table ------------------------------------------------------------------------ */
static const fk_api g_api = {
    FK_ABI_VERSION, (int32_t)sizeof(fk_api),
    fk_set_error, fk_error_status, fk_error_message, fk_clear_error,
    fk_acquire, fk_retain, fk_release, fk_snapshot_generation,
    fk_lookup, fk_lookup_with_caps, fk_call,
    fk_txn_begin, fk_txn_register, fk_txn_register_manifest, fk_txn_drop_runtime_fused,
    fk_txn_commit, fk_txn_abort, fk_new_runtime_fused_id, fk_claim_backend, fk_unknown_cost,
    fk_parallel_for, fk_get_num_threads, fk_key_outputs, fk_scratch_alloc, fk_scratch_free,
};
const fk_api *fk_core_api(void) { return &g_api; }

int fk_core_init(void) {
    if (atomic_load(&g_current) != NULL) return FK_OK;
    fk_snapshot *empty = snapshot_build(NULL, NULL, 0);
    if (empty == NULL) return FK_ERR_NO_MEMORY;
    atomic_store(&g_current, empty);
    return FK_OK;
}
