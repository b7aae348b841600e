//! Programs linked with another allocator than glibc's run under the `LD_PRELOAD` library:
//! a C program linked with jemalloc, tcmalloc or mimalloc (Debian's `libjemalloc2`,
//! `libtcmalloc-minimal4`, `libmimalloc2.0`, installed by `scripts/setup.sh`), and with
//! glibc's own as the baseline, allocates small and large blocks (the large ones in far
//! memory), asks `malloc_usable_size` about each, grows and shrinks them with `realloc`
//! across the far-memory threshold in both directions, checks every byte, and frees
//! everything. For each small block it also asks the linked allocator's own size function
//! (`sallocx`, `tc_malloc_size`, `mi_usable_size`), which only works on that allocator's
//! blocks: small blocks must be the program's allocator's, not glibc's. Before the library
//! asked the program's allocator about blocks it had given to glibc (jemalloc's
//! `malloc_usable_size` of a glibc block), which crashed.

mod common;

use common::ServerProcess;
use std::path::Path;
use std::process::Command;

/// Allocates, resizes, checks and frees blocks of sizes on both sides of the threshold
/// (256 KiB in the test); argv[1] names the linked allocator's own size function.
const PROGRAM: &str = r#"
#include <dlfcn.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define KIB ((size_t)1024)
#define THRESHOLD (256 * KIB)
#define N 12
#define ROUNDS 4
static const size_t sizes[N] = {1, 8, 24, 100, 1000, 4000, 33000, 200 * KIB,
                                1024 * KIB, 3 * 1024 * KIB, 300 * KIB, 6 * 1024 * KIB};
typedef size_t (*size_fn)(void *, int);
static size_fn own_size;
static long checks;
static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(seed * 131 + i * 7 + (i >> 12));
}
static void check(const unsigned char *p, size_t n, unsigned seed, const char *what) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(seed * 131 + i * 7 + (i >> 12))) {
            printf("%s: byte %zu of %zu wrong\n", what, i, n);
            exit(1);
        }
    checks++;
}
/* malloc_usable_size covers the request; a small block is the linked allocator's. */
static void sized(void *p, size_t n, const char *what) {
    if (p == NULL) { printf("%s: %zu bytes: out of memory\n", what, n); exit(1); }
    size_t usable = malloc_usable_size(p);
    if (usable < n) { printf("%s: usable size %zu < %zu\n", what, usable, n); exit(1); }
    if (n < THRESHOLD && own_size(p, 0) != usable) {
        printf("%s: the program's allocator says %zu bytes, malloc_usable_size %zu\n", what, own_size(p, 0), usable);
        exit(1);
    }
    checks++;
}
int main(int argc, char **argv) {
    own_size = (size_fn)dlsym(RTLD_DEFAULT, argc > 1 ? argv[1] : "malloc_usable_size");
    if (own_size == NULL) { printf("no %s\n", argv[1]); return 2; }
    void *blocks[ROUNDS * N];
    size_t lens[ROUNDS * N];
    for (int i = 0; i < ROUNDS * N; i++) {
        size_t n = sizes[i % N];
        blocks[i] = i % 3 == 0 ? calloc(1, n) : malloc(n);
        sized(blocks[i], n, "malloc");
        if (i % 3 == 0)
            for (size_t j = 0; j < n; j++)
                if (((unsigned char *)blocks[i])[j] != 0) { printf("calloc: byte %zu not zero\n", j); return 1; }
        fill(blocks[i], n, i);
        lens[i] = n;
    }
    for (int step = 3; step <= 7; step += 4) /* grow or shrink each across sizes, twice */
        for (int i = 0; i < ROUNDS * N; i++) {
            size_t n = sizes[(i + step) % N];
            check(blocks[i], lens[i], i, "before realloc");
            unsigned char *p = realloc(blocks[i], n);
            sized(p, n, "realloc");
            check(p, lens[i] < n ? lens[i] : n, i, "after realloc");
            fill(p, n, i);
            blocks[i] = p;
            lens[i] = n;
        }
    for (size_t align = 64; align <= 8192; align *= 8)
        for (int i = 0; i < N; i++) {
            void *p = NULL;
            if (posix_memalign(&p, align, sizes[i]) != 0) { printf("posix_memalign failed\n"); return 1; }
            void *q = aligned_alloc(align, (sizes[i] + align - 1) / align * align);
            void *r = memalign(align, sizes[i]);
            void *all[3] = {p, q, r};
            for (int k = 0; k < 3; k++) {
                /* Debian's mimalloc 2.0.9 returns aligned_alloc(512, 512) aligned to 128 only, with
                   or without the library: only the library's own blocks are held to it there. */
                int own = k != 1 || sizes[i] >= THRESHOLD;
                if (own && (uintptr_t)all[k] % align != 0) { printf("block %p not aligned to %zu\n", all[k], align); return 1; }
                sized(all[k], sizes[i], "aligned");
                fill(all[k], sizes[i], k);
                check(all[k], sizes[i], k, "aligned");
                free(all[k]);
            }
        }
    char *s = strdup("a string glibc allocates through the interposed malloc");
    sized(s, strlen(s) + 1, "strdup");
    free(s);
    for (int i = 0; i < ROUNDS * N; i++) {
        check(blocks[i], lens[i], i, "before free");
        free(blocks[i]);
    }
    free(NULL);
    printf("allocators.c: ok, %ld checks\n", checks);
    return 0;
}
"#;

/// (allocator, its shared library, its own size function).
const ALLOCATORS: [(&str, &str, &str); 4] = [
    ("glibc", "", "malloc_usable_size"),
    ("jemalloc", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", "sallocx"),
    ("tcmalloc", "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4", "tc_malloc_size"),
    ("mimalloc", "/usr/lib/x86_64-linux-gnu/libmimalloc.so.2", "mi_usable_size"),
];

#[test]
fn programs_linked_with_jemalloc_tcmalloc_or_mimalloc_keep_their_allocator_for_small_blocks() {
    let preload = common::lib_dir().join("libnam_farmem_preload.so");
    assert!(preload.exists(), "{} missing: run `cargo build --workspace` first", preload.display());
    let dir = common::temp_dir("allocators");
    let source = dir.join("allocators.c");
    std::fs::write(&source, PROGRAM).unwrap();
    // Each program leaves its 256 MiB extent chunk under the lease when it exits, so the
    // fourth finds three still held. The pool has room for all four plus what per-tenant
    // arenas add (a page of alignment per chunk's segment, a 1 MiB segment for the small
    // allocations): a pool of exactly 4 x 256 MiB would leave the fourth chunk no room.
    let server = ServerProcess::start("sm,self,tcp", &["--capacity", "2GiB"]);
    for (name, library, size_fn) in ALLOCATORS {
        let program = dir.join(format!("allocators-{name}"));
        let mut cc = Command::new("cc");
        cc.arg(&source).args(["-O1", "-o"]).arg(&program);
        if !library.is_empty() {
            assert!(Path::new(library).exists(), "{library} missing: run scripts/setup.sh --deps-only");
            cc.arg(library);
        }
        let cc = cc.output().expect("run cc");
        assert!(cc.status.success(), "cc failed: {}", String::from_utf8_lossy(&cc.stderr));
        let out = Command::new(&program)
            .arg(size_fn)
            .env("LD_PRELOAD", &preload)
            .env("NAM_SERVERS", server.addr.to_string())
            .env("NAM_TRANSPORTS", "sm,self,tcp")
            .env("NAM_FARMEM_THRESHOLD", "256KiB")
            .env("NAM_FARMEM_BYTES", "256MiB")
            .env("NAM_FARMEM_LOCAL_BYTES", "4MiB")
            .env("NAM_FARMEM_STATS", "1")
            .output()
            .expect("run the C program");
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && text.contains("allocators.c: ok"), "{name}: {}: {text}", out.status);
        // The large blocks were far and did not all fit in the local budget.
        let evictions = text.split(" evictions ").nth(1).and_then(|t| t.split(',').next());
        let evictions: u64 =
            evictions.and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{name}: no stats: {text}"));
        assert!(evictions > 0, "{name}: nothing went to far memory: {text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
