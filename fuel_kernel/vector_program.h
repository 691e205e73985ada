/* The vector program of a fused elementwise group: its members as instructions over blocks of
 * FK_VM_BLOCK_BYTES that stay in L1 (runs of inline members chained on registers), run by the plan
 * executor (fuel_kernel/_executor.pyx) on every tile after the first.
 *
 * A group qualifies when the planner (fuel_kernel/graph/planner.py, vector_program) finds every
 * operand of one float dtype (F32 or F64) and each value it reads from outside the group the whole
 * group shape C-contiguous, a last-axis row broadcast over the outer axes, or one broadcast
 * element; its values are then addressed per block, by flat index, and a tile (a contiguous run of
 * flat indices in an elementwise group) is cut at row ends into segments of contiguous blocks.
 * A block's sources are an input's block in memory, a register (a block of the stack array that
 * holds the group's tile values) or a splatted scalar; an output is written through its staging
 * block (copied out with non-temporal stores, a share after each instruction of the next block,
 * where it is 16-byte aligned) or, when only chain STOREs write it and nothing reads it back
 * (fk_plan_vm.streamed), straight from registers with non-temporal stores.
 * Instructions run a block at a time.  A CHAIN instruction (a run of inline members) is a list of
 * steps on an accumulator of FK_VM_STRIP vectors held in registers: LOAD a source, an op with one
 * source (in either operand order) or with the accumulator alone, STORE it to a source's block;
 * the block runs a strip of FK_VM_STRIP vectors through every step before the next strip, so a
 * value the next member alone reads never touches memory (the planner stores only values read
 * again later, by a ROW instruction or a member after the next, and outputs).  The steps run as
 * threaded code (a handler address per step, one indirect jump per step from its own site).
 * Inline ops (FK_VM_ADD .. FK_VM_RELU) are the kernels' scalar definitions (binary_kernels.h.in
 * FK_E_*_FLT, unary_kernels.h.in FK_U_*_F) written on vectors: IEEE per-op arithmetic, selects
 * and sign-bit operations, so every lane gets the bits the kernel gives that element.  Any other
 * member is a ROW instruction: its kernel's row function on the block, exactly as the tile path
 * calls it on a tile.  Contraction into FMA is off, as in elementwise_kernels.h.
 *
 * One form per vector width (16-byte baseline, 32-byte x86-64-v3, 64-byte x86-64-v4), picked once
 * through FK_ISA_PICK: a single form of 64-byte vectors built for narrower ISAs is lowered to
 * stack traffic (norm_kernels.h.in says how much that cost).
 */
#ifndef FUEL_KERNEL_CPU_VECTOR_PROGRAM_H
#define FUEL_KERNEL_CPU_VECTOR_PROGRAM_H

#include <stdint.h>
#include <string.h>
#include <immintrin.h>

#include "fuel_kernel/abi.h"
#include "fuel_kernel/strided.h"
#include "compute_common.h"

#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
/* the forms take vectors by value only inside always-inlined code */
#pragma GCC diagnostic ignored "-Wpsabi"

/* instruction codes (the planner reads them through fuel_kernel._executor.VECTOR_OPCODES): the ops
 * with an inline form (ADD .. RELU) name chain steps; a program's instructions are ROW and CHAIN */
enum {
    FK_VM_ADD = 1, FK_VM_SUB, FK_VM_MUL, FK_VM_DIV, FK_VM_MAXIMUM, FK_VM_MINIMUM,
    FK_VM_NEG, FK_VM_ABS, FK_VM_SQR, FK_VM_RELU,
    FK_VM_ROW,                       /* the member's row function on the block */
    FK_VM_CHAIN,                     /* steps [first_step, first_step + n_steps) on registers */
    FK_VM_LOAD,                      /* step: the accumulator = the source */
    FK_VM_STORE                      /* step: the source's block = the accumulator (kept) */
};
/* A binary step's operands: the accumulator and the source, the source and the accumulator, or
 * the accumulator twice (t * t) */
enum { FK_VM_ACC_SRC = 0, FK_VM_SRC_ACC = 1, FK_VM_ACC_ACC = 2 };
/* the code a chain step switches on: op * 4 + operand form (0 for LOAD, STORE and unary ops) */
#define FK_VM_STEP_CODE(OP, FORM) ((OP) * 4 + (FORM))
/* what a slot addresses (FK_VM_OUT: a written output; the others are inputs) */
enum { FK_VM_FULL = 0, FK_VM_LASTROW = 1, FK_VM_SCALAR = 2, FK_VM_OUT = 3 };

#define FK_VM_BLOCK_BYTES 2048       /* one block: 512 F32 or 256 F64 elements */
#define FK_VM_BLOCK_LINES (FK_VM_BLOCK_BYTES / 64)
#define FK_VM_STRIP 8                /* vectors a chain step works on at once (its accumulator) */
#define FK_VM_AHEAD_BYTES 4096       /* how far ahead a chain prefetches the inputs it streams */
#define FK_VM_MAX_SLOTS 16
#define FK_VM_MAX_REGS 16
#define FK_VM_MAX_SOURCES (FK_VM_MAX_SLOTS + FK_VM_MAX_REGS)
#define FK_VM_MAX_CODE 64
#define FK_VM_MAX_STEPS 192          /* a member is at most a load, its op and a store */
/* the blocks a range runs in: every source's, and each output's second staging block */
#define FK_VM_SCRATCH_BYTES ((FK_VM_MAX_SOURCES + FK_VM_MAX_SLOTS) * FK_VM_BLOCK_BYTES)

typedef struct {
    uint8_t op;                      /* FK_VM_ROW or FK_VM_CHAIN */
    uint8_t nargs;                   /* FK_VM_ROW: sources then the destination, as the member's operands */
    uint16_t first_step, n_steps;    /* FK_VM_CHAIN: its steps in fk_plan_vm.step */
    uint8_t arg[FK_MAX_OPERANDS];    /* a slot (< n_slots) or register n_slots + r */
    int32_t member;                  /* FK_VM_ROW: the group member it computes; FK_VM_CHAIN: its first */
} fk_vm_insn;

/* One step of a chain, on the accumulator (FK_VM_STRIP vectors in registers) and one source */
typedef struct {
    uint8_t code;                    /* FK_VM_STEP_CODE(op, form) */
    uint8_t arg;                     /* the source: a slot or register n_slots + r (unused: unary, ACC_ACC) */
} fk_vm_step;

typedef struct {
    int32_t dtype;                   /* FK_F32 or FK_F64 */
    int32_t n_slots, n_regs, n_code, n_steps;
    uint32_t streamed;               /* output slots only chain STOREs write and nothing reads: stored
                                      * from registers straight to the output (FK_VM_STREAM_BYTES) */
    int64_t row_len;                 /* the group's last-axis extent (FK_VM_LASTROW slots) */
    int32_t slot_kind[FK_VM_MAX_SLOTS];
    int32_t slot_base[FK_VM_MAX_SLOTS];
    int64_t slot_offset[FK_VM_MAX_SLOTS];   /* bytes into the base */
    fk_vm_insn code[FK_VM_MAX_CODE];
    fk_vm_step step[FK_VM_MAX_STEPS];
    fk_row_fn row[FK_VM_MAX_CODE];          /* FK_VM_ROW: the member's row function */
    int64_t ctx_offset[FK_VM_MAX_CODE];     /* and its ctx in the program's ctx bytes, or -1 */
} fk_plan_vm;

/* The sources of one block: p[s] for every slot and register. */
typedef struct {
    char *p[FK_VM_MAX_SOURCES];
} fk_vm_sources;

/* Output blocks computed and not yet stored: each block's staged outputs are stored with
 * non-temporal stores a share after each instruction (each strip of a chain) of the next block,
 * so the stores drain while it computes (a burst of them at the end of a block stalls the core
 * until the write-combining buffers empty).  A staged output alternates between two blocks, one
 * computed while the other drains. */
typedef struct {
    int n;
    const char *src[FK_VM_MAX_SLOTS];
    char *dst[FK_VM_MAX_SLOTS];
} fk_vm_drain;

/* Store lines [lo, hi) of every pending block (16-byte aligned destinations). */
static inline void fk_vm_drain_lines(const fk_vm_drain *dr, int64_t lo, int64_t hi) {
#if defined(__x86_64__) && defined(__SSE2__)
    for (int k = 0; k < dr->n; k++)
        for (int64_t i = lo * 64; i < hi * 64; i += 64) {
            const char *src = dr->src[k] + i;
            char *dst = dr->dst[k] + i;
            _mm_stream_si128((__m128i *)dst, _mm_load_si128((const __m128i *)src));
            _mm_stream_si128((__m128i *)(dst + 16), _mm_load_si128((const __m128i *)(src + 16)));
            _mm_stream_si128((__m128i *)(dst + 32), _mm_load_si128((const __m128i *)(src + 32)));
            _mm_stream_si128((__m128i *)(dst + 48), _mm_load_si128((const __m128i *)(src + 48)));
        }
#else
    for (int k = 0; k < dr->n; k++) memcpy(dr->dst[k] + lo * 64, dr->src[k] + lo * 64, (size_t)((hi - lo) * 64));
#endif
}

/* 16 bytes to p (16-byte aligned), non-temporal where SSE2 has it */
typedef long long fk_vm_q __attribute__((vector_size(16)));
#if defined(__x86_64__) && defined(__SSE2__)
#define FK_VM_STREAM_16(p, q) _mm_stream_si128((__m128i *)(p), (__m128i)(q))
#else
#define FK_VM_STREAM_16(p, q) memcpy((p), &(q), 16)
#endif

/* r = a OP b by the instruction TEMPLATE (output %0, first source %1, second %2) on x86-64, and
 * FK_VM_PICK_ASM: r = a CMP b ? a : b by x86's MAXPS / MINPS (the second source when either is NaN
 * or on ties; SEL elsewhere); FK_VM_STREAM_ASM: a whole vector v to p (vector-aligned) by the
 * non-temporal store TEMPLATE (output %0, v %1).  The constraints RC and BC let VEX forms write
 * any register and read b from memory (SSE's two-operand forms write %0 before reading %2, and
 * would need b aligned). */
#if defined(__x86_64__)
#define FK_VM_FIRST_SOURCE(TEMPLATE, RC, BC, r, a, b, OP) __asm__(TEMPLATE : RC(r) : "x"(a), BC(b))
#define FK_VM_PICK_ASM(TEMPLATE, RC, BC, r, a, b, SEL) __asm__(TEMPLATE : RC(r) : "x"(a), BC(b))
#define FK_VM_STREAM_ASM(TEMPLATE, p, v) __asm__(TEMPLATE : "=m"(*(p)) : "x"(v))
#else
#define FK_VM_FIRST_SOURCE(TEMPLATE, RC, BC, r, a, b, OP) ((r) = (a)OP(b))
#define FK_VM_PICK_ASM(TEMPLATE, RC, BC, r, a, b, SEL) ((r) = SEL)
#define FK_VM_STREAM_ASM(TEMPLATE, p, v) memcpy((p), &(v), sizeof(v))
#endif

/* One form: FK_VM_FORM(name suffix, ISA attribute, element type, its same-width integer, vector
 * bytes).  fk_vm_blocks_<SUF> runs the program on `blocks` consecutive blocks from the sources in
 * *src: step[s] is how far source s moves per block (FK_VM_BLOCK_BYTES for a block in memory, 0
 * for a register or a splat), and each output slot's staging block goes to out[s] (moving by a
 * block; NULL: left in the staging block), through *dr where out[s] is 16-byte aligned (the
 * staging block then alternates with the one at src->p[s] ^ flip[s]; src->p[s] is left at the
 * one the next block computes into), else copied at once. */
#define FK_VM_FORM(SUF, ATTR, T, IT, VB, RC, BC, ADD_ASM, MUL_ASM, MAX_ASM, MIN_ASM, STREAM_ASM)                                            \
    typedef T fk_vm_v_##SUF __attribute__((vector_size(VB)));                                       \
    typedef IT fk_vm_i_##SUF __attribute__((vector_size(VB)));                                      \
    ATTR static inline __attribute__((always_inline)) fk_vm_v_##SUF fk_vm_ld_##SUF(const char *p) {  \
        fk_vm_v_##SUF v;                                                                             \
        memcpy(&v, p, sizeof v);                                                                     \
        return v;                                                                                    \
    }                                                                                                \
    ATTR static inline __attribute__((always_inline)) void fk_vm_st_##SUF(char *p, fk_vm_v_##SUF v) { \
        memcpy(p, &v, sizeof v);                                                                     \
    }                                                                                                \
    /* v to p (16-byte aligned) by non-temporal stores of its 16-byte parts */                       \
    ATTR static inline __attribute__((always_inline)) void fk_vm_stream_##SUF(char *p, fk_vm_v_##SUF v) { \
        for (int h = 0; h < VB / 16; h++) {                                                          \
            fk_vm_q part;                                                                            \
            memcpy(&part, (const char *)&v + 16 * h, 16);                                            \
            FK_VM_STREAM_16(p + 16 * h, part);                                                       \
        }                                                                                            \
    }                                                                                                \
    /* v to p (VB-byte aligned) by one non-temporal store */                                         \
    ATTR static inline __attribute__((always_inline)) void fk_vm_stream_wide_##SUF(char *p, fk_vm_v_##SUF v) { \
        FK_VM_STREAM_ASM(STREAM_ASM, (fk_vm_v_##SUF *)p, v);                                         \
    }                                                                                                \
    ATTR static inline __attribute__((always_inline)) fk_vm_i_##SUF fk_vm_bits_##SUF(fk_vm_v_##SUF v) { \
        return (fk_vm_i_##SUF)v;                                                                     \
    }                                                                                                \
    /* a + b and a * b with a as the instruction's first source: the kernels' x + y and x * y return   \
     * x's NaN (quieted) when both are NaN, as x86 arithmetic does for its first source, and GCC     \
     * may swap the operands of a commutative vector op */                                           \
    ATTR static inline __attribute__((always_inline)) fk_vm_v_##SUF fk_vm_add_##SUF(fk_vm_v_##SUF a, fk_vm_v_##SUF b) { \
        fk_vm_v_##SUF r;                                                                             \
        FK_VM_FIRST_SOURCE(ADD_ASM, RC, BC, r, a, b, +);                                                     \
        return r;                                                                                    \
    }                                                                                                \
    ATTR static inline __attribute__((always_inline)) fk_vm_v_##SUF fk_vm_mul_##SUF(fk_vm_v_##SUF a, fk_vm_v_##SUF b) { \
        fk_vm_v_##SUF r;                                                                             \
        FK_VM_FIRST_SOURCE(MUL_ASM, RC, BC, r, a, b, *);                                                     \
        return r;                                                                                    \
    }                                                                                                \
    ATTR static inline __attribute__((always_inline)) fk_vm_v_##SUF fk_vm_sub_##SUF(fk_vm_v_##SUF a, fk_vm_v_##SUF b) { \
        return a - b;                                                                                \
    }                                                                                                \
    /* m ? a : b on bits (m lanes all ones or all zeros) */                                          \
    ATTR static inline __attribute__((always_inline)) fk_vm_i_##SUF fk_vm_sel_##SUF(                 \
            fk_vm_i_##SUF m, fk_vm_i_##SUF a, fk_vm_i_##SUF b) {                                     \
        return (m & a) | (~m & b);                                                                   \
    }                                                                                                \
    /* FK_E_MAXIMUM_FLT and FK_E_MINIMUM_FLT: a NaN a, else a NaN b, else a > b ? a : b (a < b ?     \
     * a : b; b on ties), i.e. a where a is NaN, else x86's MAXPS (MINPS) of a and b */              \
    ATTR static inline __attribute__((always_inline)) fk_vm_v_##SUF fk_vm_max_##SUF(fk_vm_v_##SUF a, fk_vm_v_##SUF b) { \
        fk_vm_v_##SUF r;                                                                             \
        FK_VM_PICK_ASM(MAX_ASM, RC, BC, r, a, b, (fk_vm_v_##SUF)fk_vm_sel_##SUF(a > b, fk_vm_bits_##SUF(a), fk_vm_bits_##SUF(b))); \
        return (fk_vm_v_##SUF)fk_vm_sel_##SUF(a != a, fk_vm_bits_##SUF(a), fk_vm_bits_##SUF(r));       \
    }                                                                                                \
    ATTR static inline __attribute__((always_inline)) fk_vm_v_##SUF fk_vm_min_##SUF(fk_vm_v_##SUF a, fk_vm_v_##SUF b) { \
        fk_vm_v_##SUF r;                                                                             \
        FK_VM_PICK_ASM(MIN_ASM, RC, BC, r, a, b, (fk_vm_v_##SUF)fk_vm_sel_##SUF(a < b, fk_vm_bits_##SUF(a), fk_vm_bits_##SUF(b))); \
        return (fk_vm_v_##SUF)fk_vm_sel_##SUF(a != a, fk_vm_bits_##SUF(a), fk_vm_bits_##SUF(r));       \
    }                                                                                                \
    /* The steps of chain instruction `in` on the block at *at, FK_VM_STRIP vectors at a time: the    \
     * accumulator stays in registers from a LOAD through every step after it, so a value only the   \
     * next step reads never touches memory.  The steps are threaded code: each is its handler's     \
     * address and its source's block, found once per block, and each handler jumps to the next     \
     * (one indirect jump per step, from its own site).  A STORE into a slot of `direct` goes to     \
     * to[slot] by non-temporal stores (whole vectors where to[slot] is vector-aligned, as the      \
     * plan's outputs are).  Lines [lo, hi) of *dr drain a share before each strip. */               \
    ATTR static __attribute__((noinline)) void fk_vm_chain_##SUF(                                   \
            const fk_plan_vm *vm, const fk_vm_insn *in, const fk_vm_sources *at, const fk_vm_drain *dr, \
            int64_t lo, int64_t hi, const int *ahead, int n_ahead, uint32_t direct, char *const *to) { \
        static const void *const handler[FK_VM_STEP_CODE(FK_VM_STORE, 0) + 1] = {                    \
            [FK_VM_STEP_CODE(FK_VM_LOAD, 0)] = &&fk_vm_LOAD, [FK_VM_STEP_CODE(FK_VM_STORE, 0)] = &&fk_vm_STORE, \
            FK_VM_BINARY_HANDLERS(FK_VM_ADD) FK_VM_BINARY_HANDLERS(FK_VM_SUB)                        \
            FK_VM_BINARY_HANDLERS(FK_VM_MUL) FK_VM_BINARY_HANDLERS(FK_VM_DIV)                        \
            FK_VM_BINARY_HANDLERS(FK_VM_MAXIMUM) FK_VM_BINARY_HANDLERS(FK_VM_MINIMUM)                \
            [FK_VM_STEP_CODE(FK_VM_NEG, 0)] = &&fk_vm_FK_VM_NEG, [FK_VM_STEP_CODE(FK_VM_ABS, 0)] = &&fk_vm_FK_VM_ABS, \
            [FK_VM_STEP_CODE(FK_VM_SQR, 0)] = &&fk_vm_FK_VM_SQR, [FK_VM_STEP_CODE(FK_VM_RELU, 0)] = &&fk_vm_FK_VM_RELU}; \
        struct { const void *handler; char *p; } thread[FK_VM_MAX_STEPS + 1];                        \
        const fk_vm_i_##SUF sign = (fk_vm_i_##SUF){0} + (IT)((uint64_t)1 << (8 * sizeof(IT) - 1));    \
        const fk_vm_v_##SUF zero = {0};                                                              \
        const fk_vm_step *first = &vm->step[in->first_step];                                         \
        const int64_t strip = FK_VM_STRIP * VB, n_strips = FK_VM_BLOCK_BYTES / strip;                \
        fk_vm_v_##SUF acc0 = zero, acc1 = zero, acc2 = zero, acc3 = zero;                            \
        fk_vm_v_##SUF acc4 = zero, acc5 = zero, acc6 = zero, acc7 = zero;                            \
        for (int i = 0; i < in->n_steps; i++) {                                                      \
            const int arg = first[i].arg;                                                            \
            const int streamed = first[i].code == FK_VM_STEP_CODE(FK_VM_STORE, 0) && ((direct >> arg) & 1u); \
            const int wide = streamed && ((uintptr_t)to[arg] & (VB - 1)) == 0;                       \
            thread[i].handler = wide ? &&fk_vm_STREAM_WIDE : streamed ? &&fk_vm_STREAM : handler[first[i].code]; \
            thread[i].p = streamed ? to[arg] : at->p[arg];                                           \
        }                                                                                            \
        thread[in->n_steps].handler = &&fk_vm_END;                                                   \
        thread[in->n_steps].p = NULL;                                                                \
        for (int64_t k = 0; k < n_strips; k++) {                                                     \
            const int64_t j = k * strip;                                                             \
            if (dr->n) fk_vm_drain_lines(dr, lo + (hi - lo) * k / n_strips, lo + (hi - lo) * (k + 1) / n_strips); \
            for (int f = 0; f < n_ahead; f++)                                                        \
                for (int64_t l = 0; l < strip; l += 64)                                              \
                    __builtin_prefetch(at->p[ahead[f]] + j + FK_VM_AHEAD_BYTES + l, 0, 3);           \
            __typeof__(&thread[0]) t = thread;                                                       \
            char *p = t->p + j;                                                                      \
            goto *t->handler;                                                                        \
        fk_vm_LOAD:                                                                                  \
            FK_VM_STRIP_DO(SUF, FK_VM_SRC, FK_VM_SRC, a)                                             \
            FK_VM_NEXT                                                                               \
        fk_vm_STORE:                                                                                 \
            FK_VM_STRIP_STORE(SUF, p)                                                                \
            FK_VM_NEXT                                                                               \
        fk_vm_STREAM:                                                                                \
            FK_VM_STRIP_STREAM(SUF, p)                                                               \
            FK_VM_NEXT                                                                               \
        fk_vm_STREAM_WIDE:                                                                           \
            FK_VM_STRIP_STREAM_WIDE(SUF, p)                                                          \
            FK_VM_NEXT                                                                               \
            FK_VM_BINARY_STEPS(SUF, FK_VM_ADD, fk_vm_add_##SUF(a, b))                                \
            FK_VM_BINARY_STEPS(SUF, FK_VM_SUB, a - b)                                                \
            FK_VM_BINARY_STEPS(SUF, FK_VM_MUL, fk_vm_mul_##SUF(a, b))                                \
            FK_VM_BINARY_STEPS(SUF, FK_VM_DIV, a / b)                                                \
            FK_VM_BINARY_STEPS(SUF, FK_VM_MAXIMUM, fk_vm_max_##SUF(a, b))                            \
            FK_VM_BINARY_STEPS(SUF, FK_VM_MINIMUM, fk_vm_min_##SUF(a, b))                            \
            /* FK_U_NEG_F -(x) and FK_U_ABS_F fabs: the sign bit alone (NaN too) */                  \
            FK_VM_UNARY_STEP(SUF, FK_VM_NEG, (fk_vm_v_##SUF)(fk_vm_bits_##SUF(a) ^ sign))            \
            FK_VM_UNARY_STEP(SUF, FK_VM_ABS, (fk_vm_v_##SUF)(fk_vm_bits_##SUF(a) & ~sign))           \
            FK_VM_UNARY_STEP(SUF, FK_VM_SQR, a * a)                                                  \
            /* FK_U_RELU_F: x > 0 ? x : (NaN x ? x : +0), i.e. x unless x <= 0 (false for NaN) */    \
            FK_VM_UNARY_STEP(SUF, FK_VM_RELU, (fk_vm_v_##SUF)(fk_vm_bits_##SUF(a) & ~(a <= zero)))   \
        fk_vm_END:;                                                                                  \
        }                                                                                            \
    }                                                                                                \
    ATTR static void fk_vm_blocks_##SUF(const fk_plan_vm *vm, fk_vm_sources *src,                    \
                                        const int64_t *step, char *const *out, const uintptr_t *flip, \
                                        fk_vm_drain *dr, int64_t blocks, const char *ctx) {          \
        const int n_src = vm->n_slots + vm->n_regs;                                                  \
        const int64_t bytes = FK_VM_BLOCK_BYTES, es = (int64_t)sizeof(T);                            \
        fk_vm_sources at = *src;                                                                     \
        int ahead[FK_VM_MAX_SLOTS], n_ahead = 0;     /* the slots read from memory block by block */ \
        uint32_t direct = 0;                         /* the streamed slots with an aligned output */ \
        char *to[FK_VM_MAX_SLOTS];                                                                   \
        for (int s = 0; s < vm->n_slots; s++) {                                                      \
            if (step[s] != 0 && vm->slot_kind[s] == FK_VM_FULL) ahead[n_ahead++] = s;                \
            to[s] = out[s];                                                                          \
            if (((vm->streamed >> s) & 1u) && out[s] != NULL && ((uintptr_t)out[s] & 15u) == 0)      \
                direct |= 1u << s;                                                                   \
        }                                                                                            \
        for (int64_t b = 0; b < blocks; b++) {                                                       \
            for (int c = 0; c < vm->n_code; c++) {                                                   \
                const fk_vm_insn *in = &vm->code[c];                                                 \
                const int64_t lo = (int64_t)c * FK_VM_BLOCK_LINES / vm->n_code,                      \
                              hi = (int64_t)(c + 1) * FK_VM_BLOCK_LINES / vm->n_code;                \
                if (in->op == FK_VM_CHAIN) {                                                         \
                    fk_vm_chain_##SUF(vm, in, &at, dr, lo, hi, ahead, n_ahead, direct, to);          \
                    continue;                                                                        \
                }                                                                                    \
                if (dr->n) fk_vm_drain_lines(dr, lo, hi);                                            \
                char *ptrs[FK_MAX_OPERANDS];                                                         \
                int64_t strides[FK_MAX_OPERANDS];                                                    \
                for (int k = 0; k < in->nargs; k++) {                                                \
                    ptrs[k] = at.p[in->arg[k]];                                                      \
                    strides[k] = es;                                                                 \
                }                                                                                    \
                vm->row[c](ptrs, strides, bytes / es,                                                \
                           vm->ctx_offset[c] >= 0 ? (const void *)(ctx + vm->ctx_offset[c]) : NULL); \
            }                                                                                        \
            dr->n = 0;                                                                               \
            for (int s = 0; s < vm->n_slots; s++) {                                                  \
                char *dst = out[s] != NULL ? to[s] : NULL;                                           \
                if (dst != NULL) to[s] += bytes;                                                     \
                if (dst == NULL || vm->slot_kind[s] != FK_VM_OUT || ((direct >> s) & 1u)) continue;  \
                if (((uintptr_t)dst & 15u) != 0) {                                                   \
                    memcpy(dst, at.p[s], (size_t)bytes);                                             \
                    continue;                                                                        \
                }                                                                                    \
                dr->src[dr->n] = at.p[s];                                                            \
                dr->dst[dr->n++] = dst;                                                              \
                at.p[s] = (char *)((uintptr_t)at.p[s] ^ flip[s]);                                    \
            }                                                                                        \
            for (int s = 0; s < n_src; s++) at.p[s] += step[s];                                      \
        }                                                                                            \
        for (int s = 0; s < vm->n_slots; s++)                                                        \
            if (vm->slot_kind[s] == FK_VM_OUT) src->p[s] = at.p[s];                                  \
    }
/* The accumulator's vector K, or the source's at p */
#define FK_VM_ACC(SUF, K) acc##K
#define FK_VM_SRC(SUF, K) fk_vm_ld_##SUF(p + (K) * (int64_t)sizeof(fk_vm_v_##SUF))
/* acc = EXPR of a = GA and b = GB, for each of the strip's vectors */
#define FK_VM_LANE(SUF, K, GA, GB, EXPR)                                                             \
    {                                                                                                \
        fk_vm_v_##SUF a = GA(SUF, K), b = GB(SUF, K);                                                \
        (void)b;                                                                                     \
        acc##K = (EXPR);                                                                             \
    }
#define FK_VM_STRIP_DO(SUF, GA, GB, EXPR)                                                            \
    FK_VM_LANE(SUF, 0, GA, GB, EXPR) FK_VM_LANE(SUF, 1, GA, GB, EXPR)                                \
    FK_VM_LANE(SUF, 2, GA, GB, EXPR) FK_VM_LANE(SUF, 3, GA, GB, EXPR)                                \
    FK_VM_LANE(SUF, 4, GA, GB, EXPR) FK_VM_LANE(SUF, 5, GA, GB, EXPR)                                \
    FK_VM_LANE(SUF, 6, GA, GB, EXPR) FK_VM_LANE(SUF, 7, GA, GB, EXPR)
#define FK_VM_STORE_LANE(SUF, K, p) fk_vm_st_##SUF((p) + (K) * (int64_t)sizeof(fk_vm_v_##SUF), acc##K);
#define FK_VM_STREAM_LANE(SUF, K, p) fk_vm_stream_##SUF((p) + (K) * (int64_t)sizeof(fk_vm_v_##SUF), acc##K);
#define FK_VM_STRIP_STREAM(SUF, p)                                                                   \
    FK_VM_STREAM_LANE(SUF, 0, p) FK_VM_STREAM_LANE(SUF, 1, p) FK_VM_STREAM_LANE(SUF, 2, p)           \
    FK_VM_STREAM_LANE(SUF, 3, p) FK_VM_STREAM_LANE(SUF, 4, p) FK_VM_STREAM_LANE(SUF, 5, p)           \
    FK_VM_STREAM_LANE(SUF, 6, p) FK_VM_STREAM_LANE(SUF, 7, p)
#define FK_VM_STREAM_WIDE_LANE(SUF, K, p) fk_vm_stream_wide_##SUF((p) + (K) * (int64_t)sizeof(fk_vm_v_##SUF), acc##K);
#define FK_VM_STRIP_STREAM_WIDE(SUF, p)                                                              \
    FK_VM_STREAM_WIDE_LANE(SUF, 0, p) FK_VM_STREAM_WIDE_LANE(SUF, 1, p) FK_VM_STREAM_WIDE_LANE(SUF, 2, p) \
    FK_VM_STREAM_WIDE_LANE(SUF, 3, p) FK_VM_STREAM_WIDE_LANE(SUF, 4, p) FK_VM_STREAM_WIDE_LANE(SUF, 5, p) \
    FK_VM_STREAM_WIDE_LANE(SUF, 6, p) FK_VM_STREAM_WIDE_LANE(SUF, 7, p)
#define FK_VM_STRIP_STORE(SUF, p)                                                                    \
    FK_VM_STORE_LANE(SUF, 0, p) FK_VM_STORE_LANE(SUF, 1, p) FK_VM_STORE_LANE(SUF, 2, p)              \
    FK_VM_STORE_LANE(SUF, 3, p) FK_VM_STORE_LANE(SUF, 4, p) FK_VM_STORE_LANE(SUF, 5, p)              \
    FK_VM_STORE_LANE(SUF, 6, p) FK_VM_STORE_LANE(SUF, 7, p)
/* a binary op's three handlers (EXPR of a, b) and a unary op's one (EXPR of a), each ending in a jump
 * to the next step's handler */
#define FK_VM_NEXT                                                                                   \
    t++;                                                                                             \
    p = t->p + j;                                                                                    \
    goto *t->handler;
#define FK_VM_BINARY_STEPS(SUF, OP, EXPR)                                                            \
    fk_vm_##OP##_0: FK_VM_STRIP_DO(SUF, FK_VM_ACC, FK_VM_SRC, EXPR) FK_VM_NEXT                      \
    fk_vm_##OP##_1: FK_VM_STRIP_DO(SUF, FK_VM_SRC, FK_VM_ACC, EXPR) FK_VM_NEXT                      \
    fk_vm_##OP##_2: FK_VM_STRIP_DO(SUF, FK_VM_ACC, FK_VM_ACC, EXPR) FK_VM_NEXT
#define FK_VM_UNARY_STEP(SUF, OP, EXPR)                                                              \
    fk_vm_##OP: FK_VM_STRIP_DO(SUF, FK_VM_ACC, FK_VM_ACC, EXPR) FK_VM_NEXT
#define FK_VM_BINARY_HANDLERS(OP)                                                                    \
    [FK_VM_STEP_CODE(OP, FK_VM_ACC_SRC)] = &&fk_vm_##OP##_0, [FK_VM_STEP_CODE(OP, FK_VM_SRC_ACC)] = &&fk_vm_##OP##_1, \
    [FK_VM_STEP_CODE(OP, FK_VM_ACC_ACC)] = &&fk_vm_##OP##_2,

typedef void fk_vm_blocks_fn(const fk_plan_vm *vm, fk_vm_sources *src, const int64_t *step,
                             char *const *out, const uintptr_t *flip, fk_vm_drain *dr, int64_t blocks,
                             const char *ctx);

/* the baseline's two-operand SSE forms write their first source (tied to the output) */
FK_VM_FORM(f32_base, , float, int32_t, 16, "=&x", "x", "movaps %1, %0\n\taddps %2, %0", "movaps %1, %0\n\tmulps %2, %0",
           "movaps %1, %0\n\tmaxps %2, %0", "movaps %1, %0\n\tminps %2, %0", "movntps %1, %0")
FK_VM_FORM(f64_base, , double, int64_t, 16, "=&x", "x", "movapd %1, %0\n\taddpd %2, %0", "movapd %1, %0\n\tmulpd %2, %0",
           "movapd %1, %0\n\tmaxpd %2, %0", "movapd %1, %0\n\tminpd %2, %0", "movntpd %1, %0")
#if FK_HAVE_ISA_V4
FK_VM_FORM(f32_v3, FK_ISA_V3, float, int32_t, 32, "=x", "xm", "vaddps %2, %1, %0", "vmulps %2, %1, %0",
           "vmaxps %2, %1, %0", "vminps %2, %1, %0", "vmovntps %1, %0")
FK_VM_FORM(f64_v3, FK_ISA_V3, double, int64_t, 32, "=x", "xm", "vaddpd %2, %1, %0", "vmulpd %2, %1, %0",
           "vmaxpd %2, %1, %0", "vminpd %2, %1, %0", "vmovntpd %1, %0")
FK_VM_FORM(f32_v4, FK_ISA_V4, float, int32_t, 64, "=x", "xm", "vaddps %2, %1, %0", "vmulps %2, %1, %0",
           "vmaxps %2, %1, %0", "vminps %2, %1, %0", "vmovntps %1, %0")
FK_VM_FORM(f64_v4, FK_ISA_V4, double, int64_t, 64, "=x", "xm", "vaddpd %2, %1, %0", "vmulpd %2, %1, %0",
           "vmaxpd %2, %1, %0", "vminpd %2, %1, %0", "vmovntpd %1, %0")
/* fk_vm_blocks_f32 / _f64: the widest form the CPU runs */
#define FK_VM_PICK(T)                                                                                \
    FK_ISA_PICK(fk_vm_blocks_##T, (const fk_plan_vm *vm, fk_vm_sources *src, const int64_t *step,     \
                                   char *const *out, const uintptr_t *flip, fk_vm_drain *dr,         \
                                   int64_t blocks, const char *ctx),                                 \
                (vm, src, step, out, flip, dr, blocks, ctx),                                         \
                fk_cpu_supports("x86-64-v4") ? fk_vm_blocks_##T##_v4                           \
                : fk_cpu_supports("x86-64-v3") ? fk_vm_blocks_##T##_v3 : fk_vm_blocks_##T##_base)
FK_VM_PICK(f32)
FK_VM_PICK(f64)
#else
#define fk_vm_blocks_f32 fk_vm_blocks_f32_base
#define fk_vm_blocks_f64 fk_vm_blocks_f64_base
#endif

/* Run the program on the flat elements [start, end) of the group (C order of its shape): cut at
 * row ends (when a slot reads a row) into segments whose sources are contiguous, each run a whole block at a time, and a
 * segment's last partial block staged (its inputs copied into their slots' blocks, its outputs
 * copied out of theirs).  bases: the run's base pointers; blk: FK_VM_SCRATCH_BYTES, 64-byte
 * aligned.  Leaves non-temporal stores to fence. */
static void fk_vm_run_range(const fk_plan_vm *vm, char *const *bases, const char *ctx, int64_t start,
                            int64_t end, char *blk) {
    const int64_t es = vm->dtype == FK_F64 ? 8 : 4, per_block = FK_VM_BLOCK_BYTES / es;
    const int n_src = vm->n_slots + vm->n_regs;
    fk_vm_blocks_fn *blocks_fn = vm->dtype == FK_F64 ? fk_vm_blocks_f64 : fk_vm_blocks_f32;
    fk_vm_sources src, staged;
    fk_vm_drain dr;
    int64_t step[FK_VM_MAX_SOURCES], no_step[FK_VM_MAX_SOURCES];   /* no_*: set for a partial block */
    char *out[FK_VM_MAX_SLOTS], *no_out[FK_VM_MAX_SLOTS];
    uintptr_t flip[FK_VM_MAX_SLOTS];
    dr.n = 0;
    for (int s = 0; s < n_src; s++) {
        staged.p[s] = blk + (int64_t)s * FK_VM_BLOCK_BYTES;
        step[s] = no_step[s] = 0;
    }
    for (int s = 0; s < vm->n_slots; s++) no_out[s] = NULL;
    int64_t cut = end;                           /* segments end at row ends when a row is read */
    for (int s = 0; s < vm->n_slots; s++) {
        if (vm->slot_kind[s] == FK_VM_LASTROW) cut = vm->row_len;
        flip[s] = (uintptr_t)staged.p[s] ^ (uintptr_t)(blk + (int64_t)(FK_VM_MAX_SOURCES + s) * FK_VM_BLOCK_BYTES);
        if (vm->slot_kind[s] == FK_VM_SCALAR) {  /* its element in every lane */
            const char *v = bases[vm->slot_base[s]] + vm->slot_offset[s];
            for (int64_t i = 0; i < per_block; i++) memcpy(staged.p[s] + i * es, v, (size_t)es);
        }
    }
    src = staged;
    for (int64_t i = start; i < end;) {
        int64_t at = i % vm->row_len, n = cut - i % cut < end - i ? cut - i % cut : end - i;
        int64_t whole = n / per_block, rest = n - whole * per_block;
        for (int s = 0; s < vm->n_slots; s++) {
            char *base = bases[vm->slot_base[s]] + vm->slot_offset[s];
            out[s] = NULL;
            switch (vm->slot_kind[s]) {
            case FK_VM_FULL: src.p[s] = base + i * es; step[s] = FK_VM_BLOCK_BYTES; break;
            case FK_VM_LASTROW: src.p[s] = base + at * es; step[s] = FK_VM_BLOCK_BYTES; break;
            case FK_VM_OUT: out[s] = base + i * es; break;
            default: break;
            }
        }
        if (whole) blocks_fn(vm, &src, step, out, flip, &dr, whole, ctx);
        if (rest) {
            fk_vm_sources tail = staged;
            fk_vm_drain_lines(&dr, 0, FK_VM_BLOCK_LINES);     /* its staging blocks are free again */
            dr.n = 0;
            for (int s = 0; s < vm->n_slots; s++) {
                if (step[s]) {
                    memcpy(staged.p[s], src.p[s] + whole * FK_VM_BLOCK_BYTES, (size_t)(rest * es));
                    memset(staged.p[s] + rest * es, 0, (size_t)(FK_VM_BLOCK_BYTES - rest * es));
                }
                if (vm->slot_kind[s] == FK_VM_OUT) tail.p[s] = src.p[s];
            }
            blocks_fn(vm, &tail, no_step, no_out, flip, &dr, 1, ctx);
            for (int s = 0; s < vm->n_slots; s++)
                if (out[s] != NULL) memcpy(out[s] + whole * FK_VM_BLOCK_BYTES, tail.p[s], (size_t)(rest * es));
        }
        i += n;
    }
    fk_vm_drain_lines(&dr, 0, FK_VM_BLOCK_LINES);
}

#pragma GCC pop_options

#endif /* FUEL_KERNEL_CPU_VECTOR_PROGRAM_H */
