// kvpack-msl-emu runtime: runs one Metal compute dispatch on the CPU.
//
// Threadgroups run one after another on the calling OS thread. Inside a threadgroup every
// thread is a lane with its own fiber (a small hand-written context switch on x86-64, ucontext
// elsewhere). A lane runs until it reaches a synchronization point (threadgroup_barrier,
// simdgroup_barrier, a SIMD-group function) or returns; when no lane can run, the scheduler
// releases whatever is complete (a SIMD group whose live lanes all wait at the same SIMD call,
// or a threadgroup whose lanes all wait at the same barrier) and reports divergence or deadlock
// otherwise. Lane order between synchronization points can be reversed or randomized.
//
// Compiled once (cached) and linked into every kernel's shared object; only msl_emu_dispatch
// is exported.
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#define EXPORT extern "C" __attribute__((visibility("default")))

// ---- ABI shared with the Rust side (src/ffi.rs) ----
struct EmuBuffer {
    uint8_t* ptr;
    uint64_t len;
};
struct EmuDesc {
    const EmuBuffer* buffers;
    uint32_t nbuffers;
    uint32_t groups[3];
    uint32_t threads[3];
    uint32_t order; // 0 in order, 1 reversed, 2 random
    uint64_t seed;
};
enum : uint32_t { ERR_NONE = 0, ERR_OOB = 1, ERR_TG_OOB = 2, ERR_DIVERGENCE = 3, ERR_DEADLOCK = 4, ERR_RUNTIME = 5 };
struct EmuError {
    uint32_t kind;
    uint32_t buffer;
    int64_t offset;
    uint64_t size;
    uint64_t len;
    uint32_t group[3];
    uint32_t thread[3];
    uint32_t line;
    char message[2048];
};

// ---- ABI shared with the header (include/metal_stdlib) ----
struct SimdView {
    const unsigned char* slots;
    unsigned active;
    unsigned lane;
};
struct LaneBuiltins {
    uint32_t thread_position_in_grid[3];
    uint32_t thread_position_in_threadgroup[3];
    uint32_t threadgroup_position_in_grid[3];
    uint32_t threadgroups_per_grid[3];
    uint32_t threads_per_threadgroup[3];
    uint32_t threads_per_grid[3];
    uint32_t thread_index_in_threadgroup;
    uint32_t thread_index_in_simdgroup;
    uint32_t simdgroup_index_in_threadgroup;
    uint32_t threads_per_simdgroup;
    uint32_t simdgroups_per_threadgroup;
};
extern "C" void msl_emu_kernel_entry(const LaneBuiltins*); // generated per kernel

// ---- fibers ----
#if defined(__x86_64__)
extern "C" void msl_emu_switch(void** save_sp, void* to_sp);
asm(R"(
.text
.globl msl_emu_switch
.hidden msl_emu_switch
.type msl_emu_switch,@function
msl_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
.size msl_emu_switch, .-msl_emu_switch
)");
struct Ctx {
    void* sp;
};
static void ctx_switch(Ctx* from, Ctx* to) { msl_emu_switch(&from->sp, to->sp); }
static void ctx_init(Ctx* c, char* stack, size_t size, void (*fn)()) {
    uintptr_t top = ((uintptr_t)(stack + size)) & ~(uintptr_t)15;
    uint64_t* sp = (uint64_t*)top;
    *--sp = 0;                               // fake return address of fn
    *--sp = (uint64_t)(uintptr_t)fn;         // ret target
    for (int i = 0; i < 6; ++i) *--sp = 0;   // rbp rbx r12-r15
    *--sp = 0x1F80ull | (0x037Full << 32);   // mxcsr, x87 control word
    c->sp = sp;
}
#else
struct Ctx {
    ucontext_t uc;
};
static void ctx_switch(Ctx* from, Ctx* to) { swapcontext(&from->uc, &to->uc); }
static void ctx_init(Ctx* c, char* stack, size_t size, void (*fn)()) {
    getcontext(&c->uc);
    c->uc.uc_stack.ss_sp = stack;
    c->uc.uc_stack.ss_size = size;
    c->uc.uc_link = nullptr;
    makecontext(&c->uc, fn, 0);
}
#endif

// ---- dispatch state ----
enum LaneState : uint8_t { READY, WAIT_SIMD, WAIT_BARRIER, DONE };
static const unsigned OP_SIMDGROUP_BARRIER = 0x100;
static const size_t STACK_SIZE = 256 * 1024;
static const size_t GUARD = 4096;
static const unsigned MAX_SITES = 256;
static const size_t TG_LIMIT = 32 * 1024; // Metal's threadgroup memory limit

struct Lane {
    Ctx ctx;
    LaneState st;
    uint8_t rd;
    unsigned line;
    unsigned op;
    LaneBuiltins b;
};
struct SimdGroup {
    unsigned epoch;
    unsigned active[2];
    alignas(64) unsigned char slots[2][32][64];
};
struct Site {
    bool used;
    size_t off, size;
    const char* name;
};
struct Dispatch {
    const EmuDesc* desc;
    EmuError* err;
    unsigned nlanes, ngroups;
    Lane* lanes;
    SimdGroup* simd;
    char* stacks;
    size_t stacks_len;
    unsigned* order;
    unsigned char* arena;
    size_t arena_used;
    Site sites[MAX_SITES];
    unsigned cur;
    Ctx sched;
    bool aborted;
    uint32_t group[3];
    uint64_t rng;
};
static thread_local Dispatch* g_cur;

static uint64_t rng_next(uint64_t* s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static void permute(unsigned* a, unsigned n, uint32_t order, uint64_t* rng) {
    for (unsigned i = 0; i < n; ++i) a[i] = order == 1 ? n - 1 - i : i;
    if (order == 2)
        for (unsigned i = n; i > 1; --i) {
            unsigned j = (unsigned)(rng_next(rng) % i);
            unsigned t = a[i - 1];
            a[i - 1] = a[j];
            a[j] = t;
        }
}

static void set_where(Dispatch* d, EmuError* e, bool with_thread) {
    for (int i = 0; i < 3; ++i) e->group[i] = d->group[i];
    if (with_thread) {
        const Lane& l = d->lanes[d->cur];
        for (int i = 0; i < 3; ++i) e->thread[i] = l.b.thread_position_in_threadgroup[i];
    } else {
        for (int i = 0; i < 3; ++i) e->thread[i] = ~0u;
    }
}

// Leave the current lane for good and return to the scheduler, which ends the dispatch.
[[noreturn]] static void abort_lane(Dispatch* d) {
    d->aborted = true;
    Lane& l = d->lanes[d->cur];
    ctx_switch(&l.ctx, &d->sched);
    __builtin_trap();
}
static void yield_lane(Dispatch* d) {
    Lane& l = d->lanes[d->cur];
    ctx_switch(&l.ctx, &d->sched);
}

static void lane_main() {
    Dispatch* d = g_cur;
    msl_emu_kernel_entry(&d->lanes[d->cur].b);
    d = g_cur;
    d->lanes[d->cur].st = DONE;
    ctx_switch(&d->lanes[d->cur].ctx, &d->sched);
    __builtin_trap();
}

// ---- entry points used by the header ----
extern "C" void* __msl_rt_tg_alloc(unsigned site, unsigned long size, unsigned long align, const char* name) {
    Dispatch* d = g_cur;
    if (site >= MAX_SITES) {
        snprintf(d->err->message, sizeof d->err->message, "too many threadgroup declarations");
        d->err->kind = ERR_RUNTIME;
        set_where(d, d->err, true);
        abort_lane(d);
    }
    Site& s = d->sites[site];
    if (!s.used) {
        size_t off = (d->arena_used + align - 1) & ~(align - 1);
        if (off + size > TG_LIMIT) {
            snprintf(d->err->message, sizeof d->err->message,
                     "threadgroup memory exceeds Metal's 32 KiB limit at `%s` (%lu bytes more at offset %zu)",
                     name, size, off);
            d->err->kind = ERR_RUNTIME;
            set_where(d, d->err, true);
            abort_lane(d);
        }
        s.used = true;
        s.off = off;
        s.size = size;
        s.name = name;
        d->arena_used = off + size;
    }
    return d->arena + s.off;
}

extern "C" [[noreturn]] void __msl_rt_tg_oob(unsigned site, long index, unsigned long len) {
    Dispatch* d = g_cur;
    EmuError* e = d->err;
    e->kind = ERR_TG_OOB;
    e->offset = index;
    e->len = len;
    set_where(d, e, true);
    snprintf(e->message, sizeof e->message, "%s",
             site < MAX_SITES && d->sites[site].used ? d->sites[site].name : "?");
    abort_lane(d);
}

extern "C" [[noreturn]] void __msl_rt_oob(unsigned buffer, long offset, unsigned long size, unsigned long len) {
    Dispatch* d = g_cur;
    EmuError* e = d->err;
    e->kind = ERR_OOB;
    e->buffer = buffer;
    e->offset = offset;
    e->size = size;
    e->len = len;
    set_where(d, e, true);
    abort_lane(d);
}

extern "C" [[noreturn]] void __msl_rt_fail(const char* msg, unsigned line) {
    Dispatch* d = g_cur;
    EmuError* e = d->err;
    e->kind = ERR_RUNTIME;
    e->line = line;
    set_where(d, e, true);
    snprintf(e->message, sizeof e->message, "%s (line %u)", msg, line);
    abort_lane(d);
}

extern "C" void __msl_rt_buffer(unsigned index, unsigned char** ptr, unsigned long* len) {
    Dispatch* d = g_cur;
    if (index >= d->desc->nbuffers || d->desc->buffers[index].ptr == nullptr) {
        EmuError* e = d->err;
        e->kind = ERR_RUNTIME;
        set_where(d, e, true);
        snprintf(e->message, sizeof e->message, "[[buffer(%u)]] is not bound", index);
        abort_lane(d);
    }
    *ptr = d->desc->buffers[index].ptr;
    *len = d->desc->buffers[index].len;
}

extern "C" void __msl_rt_barrier(unsigned line, unsigned kind) {
    Dispatch* d = g_cur;
    Lane& l = d->lanes[d->cur];
    l.line = line;
    if (kind == 0) {
        l.st = WAIT_BARRIER;
        l.op = 0;
    } else {
        SimdGroup& g = d->simd[d->cur / 32];
        (void)g;
        l.st = WAIT_SIMD;
        l.op = OP_SIMDGROUP_BARRIER;
    }
    yield_lane(d);
}

extern "C" SimdView __msl_rt_simd(unsigned line, unsigned op, const void* value, unsigned size) {
    Dispatch* d = g_cur;
    unsigned li = d->cur;
    Lane& l = d->lanes[li];
    SimdGroup& g = d->simd[li / 32];
    memcpy(g.slots[g.epoch & 1][li % 32], value, size > 64 ? 64 : size);
    l.st = WAIT_SIMD;
    l.line = line;
    l.op = op;
    yield_lane(d);
    Dispatch* d2 = g_cur;
    Lane& l2 = d2->lanes[li];
    SimdGroup& g2 = d2->simd[li / 32];
    return SimdView{&g2.slots[l2.rd][0][0], g2.active[l2.rd], li % 32};
}

// ---- diagnostics ----
static const char* op_name(unsigned op) {
    static const char* names[] = {"?", "simd_shuffle", "simd_shuffle_xor", "simd_shuffle_up", "simd_shuffle_down",
                                  "simd_broadcast", "simd_broadcast_first", "simd_sum", "simd_product",
                                  "simd_min", "simd_max", "simd_and", "simd_or", "simd_xor",
                                  "simd_prefix_exclusive_sum", "simd_prefix_inclusive_sum",
                                  "simd_prefix_exclusive_product", "simd_prefix_inclusive_product",
                                  "simd_ballot", "simd_all", "simd_any", "simd_is_first",
                                  "simd_active_threads_mask"};
    if (op == OP_SIMDGROUP_BARRIER) return "simdgroup_barrier";
    if (op < sizeof names / sizeof names[0]) return names[op];
    return "simd function";
}

struct Buf {
    char* p;
    size_t cap, len;
    void put(const char* fmt, ...) __attribute__((format(printf, 2, 3))) {
        if (len + 1 >= cap) return;
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(p + len, cap - len, fmt, ap);
        va_end(ap);
        if (n > 0) len = len + (size_t)n < cap ? len + (size_t)n : cap - 1;
    }
};

// Describe lanes [lo, hi) grouped by where they are.
static void describe(Dispatch* d, unsigned lo, unsigned hi, Buf& b) {
    bool seen[1024] = {};
    for (unsigned i = lo; i < hi; ++i) {
        if (seen[i - lo]) continue;
        const Lane& a = d->lanes[i];
        const char* what = a.st == DONE ? "returned" : a.st == WAIT_BARRIER ? "threadgroup_barrier" : op_name(a.op);
        b.put("; lanes ");
        long run_start = -1, prev = -2;
        bool first = true;
        for (unsigned j = i; j < hi; ++j) {
            const Lane& c = d->lanes[j];
            bool same = c.st == a.st && (a.st == DONE || (c.line == a.line && c.op == a.op));
            if (!same) continue;
            seen[j - lo] = true;
            if ((long)j == prev + 1) {
                prev = j;
                continue;
            }
            if (run_start >= 0) {
                b.put("%s%ld", first ? "" : ",", run_start);
                if (prev > run_start) b.put("-%ld", prev);
                first = false;
            }
            run_start = prev = j;
        }
        if (run_start >= 0) {
            b.put("%s%ld", first ? "" : ",", run_start);
            if (prev > run_start) b.put("-%ld", prev);
        }
        if (a.st == DONE) b.put(" returned");
        else b.put(" wait at %s (line %u)", what, a.line);
    }
}

static void report(Dispatch* d, uint32_t kind, unsigned lo, unsigned hi, const char* head) {
    EmuError* e = d->err;
    e->kind = kind;
    set_where(d, e, false);
    Buf b{e->message, sizeof e->message, 0};
    b.put("%s in threadgroup (%u, %u, %u)", head, d->group[0], d->group[1], d->group[2]);
    describe(d, lo, hi, b);
    b.put(" (lane = thread_index_in_threadgroup)");
}

// ---- one threadgroup ----
static bool run_threadgroup(Dispatch* d, const uint32_t gid[3]) {
    const EmuDesc* ds = d->desc;
    const unsigned n = d->nlanes;
    for (int i = 0; i < 3; ++i) d->group[i] = gid[i];
    if (d->arena_used) memset(d->arena, 0xFF, TG_LIMIT);
    for (unsigned i = 0; i < n; ++i) {
        Lane& l = d->lanes[i];
        l.st = READY;
        l.rd = 0;
        l.line = 0;
        l.op = 0;
        uint32_t lx = i % ds->threads[0], ly = (i / ds->threads[0]) % ds->threads[1],
                 lz = i / (ds->threads[0] * ds->threads[1]);
        uint32_t loc[3] = {lx, ly, lz};
        for (int k = 0; k < 3; ++k) {
            l.b.thread_position_in_threadgroup[k] = loc[k];
            l.b.threadgroup_position_in_grid[k] = gid[k];
            l.b.threadgroups_per_grid[k] = ds->groups[k];
            l.b.threads_per_threadgroup[k] = ds->threads[k];
            l.b.threads_per_grid[k] = ds->groups[k] * ds->threads[k];
            l.b.thread_position_in_grid[k] = gid[k] * ds->threads[k] + loc[k];
        }
        l.b.thread_index_in_threadgroup = i;
        l.b.thread_index_in_simdgroup = i % 32;
        l.b.simdgroup_index_in_threadgroup = i / 32;
        l.b.threads_per_simdgroup = 32;
        l.b.simdgroups_per_threadgroup = (n + 31) / 32;
        ctx_init(&l.ctx, d->stacks + (size_t)i * (STACK_SIZE + GUARD) + GUARD, STACK_SIZE, lane_main);
    }
    for (unsigned g = 0; g < d->ngroups; ++g) d->simd[g].epoch = 0;

    for (;;) {
        permute(d->order, n, ds->order, &d->rng);
        for (unsigned k = 0; k < n; ++k) {
            unsigned i = d->order[k];
            if (d->lanes[i].st != READY) continue;
            d->cur = i;
            ctx_switch(&d->sched, &d->lanes[i].ctx);
            if (d->aborted) return false;
        }
        bool released = false;
        bool mixed = false;
        unsigned mixed_group = 0;
        for (unsigned g = 0; g < d->ngroups; ++g) {
            unsigned lo = g * 32, hi = lo + 32 < n ? lo + 32 : n;
            unsigned live = 0, simd = 0, mask = 0;
            const Lane* first = nullptr;
            bool same = true;
            for (unsigned i = lo; i < hi; ++i) {
                const Lane& l = d->lanes[i];
                if (l.st == DONE) continue;
                ++live;
                if (l.st == WAIT_SIMD) {
                    ++simd;
                    mask |= 1u << (i - lo);
                    if (!first) first = &l;
                    else if (l.line != first->line || l.op != first->op) same = false;
                }
            }
            if (live == 0 || simd == 0) continue;
            if (simd < live) {
                if (!mixed) mixed_group = g;
                mixed = true;
                continue;
            }
            if (!same) {
                char head[128];
                snprintf(head, sizeof head, "SIMD group %u: lanes reach different SIMD-group functions", g);
                report(d, ERR_DIVERGENCE, lo, hi, head);
                return false;
            }
            SimdGroup& sg = d->simd[g];
            unsigned par = sg.epoch & 1;
            sg.active[par] = mask;
            for (unsigned i = lo; i < hi; ++i) {
                Lane& l = d->lanes[i];
                if (l.st != WAIT_SIMD) continue;
                l.rd = (uint8_t)par;
                l.st = READY;
            }
            sg.epoch++;
            released = true;
        }
        if (released) continue;
        unsigned live = 0, done = 0;
        const Lane* first = nullptr;
        bool same = true;
        for (unsigned i = 0; i < n; ++i) {
            const Lane& l = d->lanes[i];
            if (l.st == DONE) {
                ++done;
                continue;
            }
            ++live;
            if (l.st == WAIT_BARRIER) {
                if (!first) first = &l;
                else if (l.line != first->line) same = false;
            }
        }
        if (live == 0) return true;
        if (mixed) {
            unsigned lo = mixed_group * 32, hi = lo + 32 < n ? lo + 32 : n;
            char head[160];
            snprintf(head, sizeof head,
                     "SIMD group %u: some lanes wait at a SIMD-group function while others wait at a threadgroup barrier",
                     mixed_group);
            report(d, ERR_DIVERGENCE, lo, hi, head);
            return false;
        }
        if (done > 0) {
            report(d, ERR_DEADLOCK, 0, n,
                   "threadgroup_barrier that some lanes never reach (they returned): on Metal this is undefined and may hang");
            return false;
        }
        if (!same) {
            report(d, ERR_DIVERGENCE, 0, n, "lanes wait at different threadgroup_barrier calls");
            return false;
        }
        for (unsigned i = 0; i < n; ++i) d->lanes[i].st = READY;
    }
}

EXPORT int msl_emu_dispatch(const EmuDesc* desc, EmuError* err) {
    memset(err, 0, sizeof *err);
    uint64_t n64 = (uint64_t)desc->threads[0] * desc->threads[1] * desc->threads[2];
    if (n64 == 0 || n64 > 1024) {
        err->kind = ERR_RUNTIME;
        snprintf(err->message, sizeof err->message, "threads per threadgroup %u x %u x %u: need 1..=1024 threads",
                 desc->threads[0], desc->threads[1], desc->threads[2]);
        return 1;
    }
    Dispatch* d = (Dispatch*)calloc(1, sizeof(Dispatch));
    d->desc = desc;
    d->err = err;
    d->nlanes = (unsigned)n64;
    d->ngroups = (d->nlanes + 31) / 32;
    d->lanes = (Lane*)calloc(d->nlanes, sizeof(Lane));
    d->simd = (SimdGroup*)aligned_alloc(64, d->ngroups * sizeof(SimdGroup));
    memset(d->simd, 0, d->ngroups * sizeof(SimdGroup));
    d->order = (unsigned*)calloc(d->nlanes, sizeof(unsigned));
    d->arena = (unsigned char*)aligned_alloc(64, TG_LIMIT);
    memset(d->arena, 0xFF, TG_LIMIT);
    d->stacks_len = (size_t)d->nlanes * (STACK_SIZE + GUARD);
    d->stacks = (char*)mmap(nullptr, d->stacks_len, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    d->rng = desc->seed ^ 0x6d736c2d656d75ull;
    int rc = 0;
    if (d->stacks == MAP_FAILED) {
        err->kind = ERR_RUNTIME;
        snprintf(err->message, sizeof err->message, "cannot map lane stacks");
        rc = 1;
        d->stacks = nullptr;
    } else {
        for (unsigned i = 0; i < d->nlanes; ++i)
            mprotect(d->stacks + (size_t)i * (STACK_SIZE + GUARD), GUARD, PROT_NONE);
        Dispatch* saved = g_cur;
        g_cur = d;
        uint64_t ng = (uint64_t)desc->groups[0] * desc->groups[1] * desc->groups[2];
        // Threadgroup order follows the lane order option too (catches inter-threadgroup races
        // that depend on execution order).
        unsigned* gorder = nullptr;
        if (desc->order != 0 && ng <= (1u << 24)) {
            gorder = (unsigned*)malloc(ng * sizeof(unsigned));
            permute(gorder, (unsigned)ng, desc->order, &d->rng);
        }
        for (uint64_t k = 0; k < ng; ++k) {
            uint64_t lin = gorder ? gorder[k] : k;
            uint32_t gid[3] = {(uint32_t)(lin % desc->groups[0]),
                               (uint32_t)((lin / desc->groups[0]) % desc->groups[1]),
                               (uint32_t)(lin / ((uint64_t)desc->groups[0] * desc->groups[1]))};
            if (!run_threadgroup(d, gid)) {
                rc = 1;
                break;
            }
        }
        free(gorder);
        g_cur = saved;
        munmap(d->stacks, d->stacks_len);
    }
    free(d->arena);
    free(d->order);
    free(d->simd);
    free(d->lanes);
    free(d);
    return rc;
}
