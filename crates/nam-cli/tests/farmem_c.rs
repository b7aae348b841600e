//! Far memory is usable from C: `tests/farmem.c` is compiled against `include/nam.h` and
//! `libnam.so` (made by `cargo build --workspace`) and run against a real `nam serve`; and an
//! unmodified C program streams through huge far pages under the `LD_PRELOAD` library, and
//! another one's `madvise` of far memory reaches the pager (with the environment a user
//! gets, and without UCX's memory hooks) or at least leaves the program running to its end
//! with its data (with the hooks forced on).

mod common;

use common::ServerProcess;
use std::path::{Path, PathBuf};
use std::process::Command;

fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    exe.parent().and_then(Path::parent).expect("<target>/<profile>/deps").to_path_buf()
}

#[test]
fn the_c_api_reaches_far_memory_both_ways() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let lib = lib_dir();
    assert!(lib.join("libnam.so").exists(), "libnam.so missing: run `cargo build --workspace` first");
    let exe = std::env::temp_dir().join(format!("nam-farmem-c-{}", std::process::id()));
    let cc = Command::new("cc")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/farmem.c"))
        .arg("-I")
        .arg(repo.join("include"))
        .arg("-L")
        .arg(&lib)
        .args(["-lnam", "-o"])
        .arg(&exe)
        .output()
        .expect("run cc");
    assert!(cc.status.success(), "cc failed: {}", String::from_utf8_lossy(&cc.stderr));
    let server = ServerProcess::start("sm,self,tcp", &[]);
    let out = Command::new(&exe)
        .env("LD_LIBRARY_PATH", &lib)
        .env("NAM_SERVERS", server.addr.to_string())
        .env("NAM_TRANSPORTS", "sm,self,tcp")
        .output()
        .expect("run the C program");
    let _ = std::fs::remove_file(&exe);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.contains("farmem.c: ok"), "{text}");
}

/// The preload library, and the C program `source` compiled as `name` in a directory of its
/// own (removed by the caller): (library, directory, program).
fn preload_and_program(name: &str, source: &str) -> (PathBuf, PathBuf, PathBuf) {
    let preload = lib_dir().join("libnam_farmem_preload.so");
    assert!(preload.exists(), "{} missing: run `cargo build --workspace` first", preload.display());
    let dir = std::env::temp_dir().join(format!("nam-farmem-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (c, program) = (dir.join(format!("{name}.c")), dir.join(name));
    std::fs::write(&c, source).unwrap();
    let cc = Command::new("cc").arg(&c).arg("-O2").arg("-o").arg(&program).output().expect("run cc");
    assert!(cc.status.success(), "cc failed: {}", String::from_utf8_lossy(&cc.stderr));
    (preload, dir, program)
}

/// A C program that knows nothing of nam: a large array (placed in far memory by the
/// preload library) written and summed in three passes, each checked.
const STREAMING_PROGRAM: &str = r#"
#include <stdio.h>
#include <stdlib.h>
int main(void) {
    size_t n = (size_t)32 << 20 >> 3;
    unsigned long *a = malloc(n * sizeof *a);
    if (a == NULL) return 2;
    for (int pass = 1; pass <= 3; pass++) {
        for (size_t i = 0; i < n; i++) a[i] = i * pass;
        unsigned long sum = 0;
        for (size_t i = 0; i < n; i++) sum += a[i];
        if (sum != (unsigned long)pass * (n * (n - 1) / 2)) { printf("pass %d: wrong sum\n", pass); return 1; }
    }
    printf("streaming.c: ok\n");
    return 0;
}
"#;

#[test]
fn an_unmodified_program_streams_through_huge_pages_under_the_preload_library() {
    let (preload, dir, program) = preload_and_program("streaming", STREAMING_PROGRAM);
    // 8 MiB resident of a 32 MiB array: four huge pages, and one for an install in flight.
    let _huge_pages = common::reserve_huge_pages(5);
    let server = ServerProcess::start("sm,self,tcp", &[]);
    let out = Command::new(&program)
        .env("LD_PRELOAD", &preload)
        .env("NAM_SERVERS", server.addr.to_string())
        .env("NAM_TRANSPORTS", "sm,self,tcp")
        .env("NAM_FARMEM_HUGE_PAGES", "1")
        .env("NAM_FARMEM_BYTES", "64MiB")
        .env("NAM_FARMEM_LOCAL_BYTES", "8MiB")
        .env("NAM_FARMEM_STATS", "1")
        .output()
        .expect("run the C program");
    let _ = std::fs::remove_dir_all(&dir);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.contains("streaming.c: ok"), "{text}");
    let huge = nam_farmem::huge_page_bytes().expect("huge pages were reserved");
    assert!(text.contains(&format!("page size {huge} bytes")), "not on huge pages: {text}");
    // Three passes of two sweeps (write, then sum) over 16 huge pages with room for 4: each
    // sweep brings in 12 pages at least, by a fault or a prefetch.
    let count = |name: &str| {
        let n = text.split(&format!(" {name} ")).nth(1).and_then(|t| t.split(',').next());
        n.and_then(|n| n.parse::<u64>().ok()).unwrap_or_else(|| panic!("no {name} count: {text}"))
    };
    let installed = count("misses") + count("prefetches");
    assert!(installed >= 6 * 12, "{installed} pages brought in for six sweeps: {text}");
}

/// A C program that advises the kernel about a large allocation (placed in far memory by
/// the preload library), which must reach the pager instead.
const ADVICE_PROGRAM: &str = r#"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#define MIB ((size_t)1 << 20)
/* With an argument, the advice must have reached the pager: dropped pages read as zeros. */
int main(int argc, char **argv) {
    int exact = argc > 1;
    size_t len = 16 * MIB;
    unsigned char *a = aligned_alloc(4096, len);
    if (a == NULL) return 2;
    memset(a, 7, len);
    if (madvise(a, len, MADV_PAGEOUT) != 0) { perror("MADV_PAGEOUT"); return 1; }
    if (madvise(a, MIB, MADV_WILLNEED) != 0) { perror("MADV_WILLNEED"); return 1; }
    if (posix_madvise(a + MIB, MIB, POSIX_MADV_WILLNEED) != 0) { printf("POSIX_MADV_WILLNEED failed\n"); return 1; }
    for (size_t i = 0; i < len; i += 512)
        if (a[i] != 7) { printf("after MADV_PAGEOUT byte %zu is %d, not 7\n", i, a[i]); return 1; }
    if (madvise(a + 4096, 8192, MADV_DONTNEED) != 0) { perror("MADV_DONTNEED"); return 1; }
    for (size_t i = 0; i < 4 * 4096; i++) {
        int dropped = i >= 4096 && i < 3 * 4096;
        if (a[i] != (dropped ? 0 : 7) && (exact || !dropped || a[i] != 7)) {
            printf("after MADV_DONTNEED byte %zu is %d\n", i, a[i]);
            return 1;
        }
    }
    if (madvise(a + len - 4096, 4096, MADV_FREE) != 0) { perror("MADV_FREE"); return 1; }
    if (madvise(a + 1, 4096, MADV_WILLNEED) == 0 || errno != EINVAL) { printf("an unaligned range was taken\n"); return 1; }
    free(a);
    printf("advice.c: ok\n");
    return 0;
}
"#;

#[test]
fn an_unmodified_programs_madvise_on_far_memory_reaches_the_pager_or_at_least_ends() {
    let (preload, dir, program_path) = preload_and_program("advice", ADVICE_PROGRAM);
    let server = ServerProcess::start("sm,self,tcp", &[]);
    // `UCX_MEM_EVENTS` unset is what a user gets: the library restarts the program without
    // UCX's memory hooks, so the advice reaches the pager exactly, as with the hooks turned
    // off by hand. Only with the hooks forced on (`yes`) does the advice reach the kernel,
    // and then the program must still run to its end.
    for mode in ["signal", "thread"] {
        for events in [None, Some("no"), Some("yes")] {
            let exact = events != Some("yes");
            let mut program = Command::new(&program_path);
            match events {
                Some(value) => program.env("UCX_MEM_EVENTS", value),
                None => program.env_remove("UCX_MEM_EVENTS"),
            };
            if exact {
                program.arg("exact");
            }
            let out = program
                .env("LD_PRELOAD", &preload)
                .env("NAM_SERVERS", server.addr.to_string())
                .env("NAM_TRANSPORTS", "sm,self,tcp")
                .env("NAM_FARMEM_FAULT_MODE", mode)
                .env("NAM_FARMEM_PREFETCH", "off") // every prefetch counted is the program's advice
                .env("NAM_FARMEM_BYTES", "64MiB")
                .env("NAM_FARMEM_LOCAL_BYTES", "4MiB")
                .env("NAM_FARMEM_STATS", "1")
                .output()
                .expect("run the C program");
            let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            assert!(out.status.success() && text.contains("advice.c: ok"), "{mode}, UCX_MEM_EVENTS {events:?}: {text}");
            if exact {
                let prefetches =
                    text.split(" prefetches ").nth(1).and_then(|t| t.split(',').next()?.parse::<u64>().ok());
                // The two MiB asked for, 512 pages, came in ahead of their reads.
                assert!(prefetches.is_some_and(|n| n >= 512), "{mode}, UCX_MEM_EVENTS {events:?}: {text}");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A C program that reads a file into a large allocation and writes it out again with every
/// file transfer call (`pread`, `preadv`, `read`, `readv`, then `pwrite`, `pwritev`, `write`,
/// `writev`), 1 MiB a call with 2 MiB of local memory. Before each phase the buffer is paged
/// out (`MADV_PAGEOUT`) and the first page of each call's part touched again, so that every
/// call meets a resident page and then missing ones.
const FILE_IO_PROGRAM: &str = r#"
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>
#define MIB ((size_t)1 << 20)
static void page_out(unsigned char *far, size_t len) {
    madvise(far, len, MADV_PAGEOUT);
    for (size_t at = 0; at < len; at += MIB) far[at] ^= 0; /* a resident page, then missing ones */
}
static int all(ssize_t n, size_t want, const char *what) {
    if (n == (ssize_t)want) return 0;
    printf("%s moved %zd bytes of %zu\n", what, n, want);
    return 1;
}
int main(int argc, char **argv) {
    size_t len = 4 * MIB, half = MIB / 2;
    unsigned char *local = malloc(4096), *far = aligned_alloc(4096, 16 * MIB);
    if (local == NULL || far == NULL || argc < 2) return 2;
    char in[4096], out[4096];
    snprintf(in, sizeof in, "%s/in", argv[1]);
    snprintf(out, sizeof out, "%s/out", argv[1]);
    int fd = open(in, O_CREAT | O_TRUNC | O_RDWR, 0600), fo = open(out, O_CREAT | O_TRUNC | O_RDWR, 0600);
    if (fd < 0 || fo < 0) { perror("open"); return 2; }
    for (size_t at = 0; at < len; at += 4096) {
        for (size_t i = 0; i < 4096; i++) local[i] = (unsigned char)((at + i) * 13 / 7);
        if (write(fd, local, 4096) != 4096) { perror("write"); return 2; }
    }
    memset(far, 1, 16 * MIB);
    page_out(far, len);
    struct iovec two[2] = {{far + MIB, half}, {far + MIB + half, half}};
    struct iovec three[2] = {{far + 3 * MIB, half}, {far + 3 * MIB + half, half}};
    if (all(pread(fd, far, MIB, 0), MIB, "pread") || all(preadv(fd, two, 2, MIB), MIB, "preadv")) return 1;
    if (lseek(fd, 2 * MIB, SEEK_SET) < 0 || all(read(fd, far + 2 * MIB, MIB), MIB, "read")) return 1;
    if (all(readv(fd, three, 2), MIB, "readv")) return 1;
    page_out(far, len);
    if (all(pwrite(fo, far, MIB, 0), MIB, "pwrite") || all(pwritev(fo, two, 2, MIB), MIB, "pwritev")) return 1;
    if (lseek(fo, 2 * MIB, SEEK_SET) < 0 || all(write(fo, far + 2 * MIB, MIB), MIB, "write")) return 1;
    if (all(writev(fo, three, 2), MIB, "writev")) return 1;
    for (size_t at = 0; at < len; at += 4096) {
        if (pread(fo, local, 4096, at) != 4096) { perror("pread"); return 1; }
        for (size_t i = 0; i < 4096; i++)
            if (local[i] != (unsigned char)((at + i) * 13 / 7)) { printf("byte %zu differs\n", at + i); return 1; }
    }
    printf("file-io.c: ok\n");
    return 0;
}
"#;

#[test]
fn file_transfers_over_mostly_missing_far_pages_move_every_byte_in_both_fault_modes() {
    let (preload, dir, program) = preload_and_program("file-io", FILE_IO_PROGRAM);
    let server = ServerProcess::start("sm,self,tcp", &[]);
    for mode in ["signal", "thread"] {
        let out = Command::new(&program)
            .arg(&dir)
            .env("LD_PRELOAD", &preload)
            .env("NAM_SERVERS", server.addr.to_string())
            .env("NAM_TRANSPORTS", "sm,self,tcp")
            .env("NAM_FARMEM_FAULT_MODE", mode)
            .env("UCX_MEM_EVENTS", "no") // so that MADV_PAGEOUT reaches the pager
            .env("NAM_FARMEM_BYTES", "64MiB")
            .env("NAM_FARMEM_LOCAL_BYTES", "2MiB")
            .output()
            .expect("run the C program");
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && text.contains("file-io.c: ok"), "{mode}: {text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A C program that makes its far pages unreadable and readable again, then gives them up
/// (`MADV_DONTNEED`) and uses them again, checking what it reads each time.
const KEEP_PROGRAM: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#define MIB ((size_t)1 << 20)
static int all(const unsigned char *a, size_t len, unsigned char v, const char *when) {
    for (size_t i = 0; i < len; i += 1024)
        if (a[i] != v) { printf("%s: byte %zu is %d, not %d\n", when, i, a[i], v); return 0; }
    return 1;
}
int main(void) {
    size_t len = 8 * MIB;
    unsigned char *a = aligned_alloc(4096, len);
    if (a == NULL) return 2;
    memset(a, 7, len);
    if (mprotect(a, len, PROT_NONE) != 0 || mprotect(a, len, PROT_READ | PROT_WRITE) != 0) { perror("mprotect"); return 1; }
    if (!all(a, len, 7, "after mprotect")) return 1;
    if (madvise(a, len, MADV_DONTNEED) != 0) { perror("MADV_DONTNEED"); return 1; }
    if (!all(a, len, 0, "after MADV_DONTNEED")) return 1;
    memset(a, 9, len);
    /* Half paged out, then all given up: the missing half must read as zeros too. */
    if (madvise(a + len / 2, len / 2, MADV_PAGEOUT) != 0) { perror("MADV_PAGEOUT"); return 1; }
    if (madvise(a, len, MADV_DONTNEED) != 0) { perror("MADV_DONTNEED"); return 1; }
    if (!all(a, len, 0, "after MADV_DONTNEED of resident and missing pages")) return 1;
    if (madvise(a, len, MADV_PAGEOUT) != 0 || !all(a, len, 0, "zeros written back")) return 1;
    if (madvise(a, len, MADV_PAGEOUT) != 0) return 1;
    /* A block written, paged out and freed: the next block in its place is not fetched. */
    free(a); /* (its pages are not resident: the budget holds one block) */
    unsigned char *b = aligned_alloc(4096, len);
    if (b == NULL) return 2;
    memset(b, 3, len);
    if (madvise(b, len, MADV_PAGEOUT) != 0) { perror("MADV_PAGEOUT"); return 1; }
    free(b);
    unsigned char *c = aligned_alloc(4096, len);
    if (c != b) { printf("the new block is not in the freed one's place\n"); return 1; }
    memset(c, 4, len);
    if (!all(c, len, 4, "the new block")) return 1;
    printf("keep.c: ok\n");
    return 0;
}
"#;

#[test]
fn pages_written_back_for_mprotect_or_given_up_are_not_fetched_again() {
    let (preload, dir, program_path) = preload_and_program("keep", KEEP_PROGRAM);
    let server = ServerProcess::start("sm,self,tcp", &[]);
    for mode in ["signal", "thread"] {
        let out = Command::new(&program_path)
            .env("LD_PRELOAD", &preload)
            .env("NAM_SERVERS", server.addr.to_string())
            .env("NAM_TRANSPORTS", "sm,self,tcp")
            .env("NAM_FARMEM_FAULT_MODE", mode)
            .env("NAM_FARMEM_PREFETCH", "off")
            .env("NAM_FARMEM_PREDICT_WRITES", "off")
            .env("NAM_FARMEM_BYTES", "64MiB")
            .env("NAM_FARMEM_LOCAL_BYTES", "16MiB")
            .env("NAM_FARMEM_STATS", "1")
            .output()
            .expect("run the C program");
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && text.contains("keep.c: ok"), "{mode}: {text}");
        let count = |name: &str| {
            let n = text.split(&format!(" {name} ")).nth(1).and_then(|t| t.split(|c: char| !c.is_ascii_digit()).next());
            n.and_then(|n| n.parse::<u64>().ok()).unwrap_or_else(|| panic!("no {name} count: {text}"))
        };
        // 2048 pages a block, each block within the budget. The first misses when first
        // written (2048), when the half paged out on purpose is read (1024) and when the
        // whole range paged out at the end is read (2048); write-backs: the dirty pages made
        // unreadable (2048), the half paged out (1024), the resident zeros paged out at the
        // end (1024), and not the pages only read (installed dirty after a dirty page, 1024
        // more). Before, the mprotect round trip and MADV_DONTNEED dropped every page and
        // fetched it again (13312 misses). The second and third blocks, in the first one's
        // place, miss when written (4096) and the second is written back once (2048).
        assert!(count("misses") <= 5120 + 4096 + 32, "{mode}: pages fetched again: {text}");
        assert!(count("write-backs") <= 4096 + 2048 + 32, "{mode}: pages written back again: {text}");
        // Nothing is fetched for pages the program gave up or freed: the half given up
        // while paged out (1024, read) and the freed block's pages (2048, written).
        assert!(count("zero fills") >= 1024 + 2048, "{mode}: given up or freed pages were fetched: {text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
