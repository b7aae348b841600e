/* The OpenSHMEM side of `nam-bench shmem` (--vs-shmem): the same one-sided operations nam's
 * client is timed on, between two PEs started by oshrun, PE 0 initiating and PE 1 the target.
 * Prints one line per measurement: "<op> <bytes> <ns per operation>", then "done".
 *
 * Operations (names shared with the Rust driver):
 *   put_quiet  shmem_putmem then shmem_quiet, per iteration (remote completion)
 *   put        shmem_putmem alone (returns with the source reusable: local completion)
 *   get        shmem_getmem
 *   fadd       shmem_atomic_fetch_add on a long
 *   pingpong   half a round trip of put, fence, atomic set; the peer's shmem_wait_until
 *              sees the flag, then answers the same way
 *   bw64       64 puts then one shmem_quiet; time per put
 *
 * Every measurement follows untimed iterations of the same operation (warmup(), the rule
 * of the Rust driver), so that each size is measured warm.
 *
 * Usage: osh_bench ITERS SIZE...   (sizes in bytes, at most 1 MiB)
 */
#include <shmem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SIZE_MAX_BYTES (1L << 20)
#define BURST 64
#define WARMUP 100

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static long iterations(long base, long size) {
    long n = base * 4096 / (size < 4096 ? 4096 : size);
    return n < 20 ? 20 : n;
}

/* Untimed iterations before n timed ones. */
static long warmup(long n) {
    return n < WARMUP ? n : WARMUP;
}

static void report(const char *op, long size, double ns) {
    printf("%s %ld %.1f\n", op, size, ns);
    fflush(stdout);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s ITERS SIZE...\n", argv[0]);
        return 2;
    }
    shmem_init();
    int me = shmem_my_pe();
    char *target = shmem_malloc(SIZE_MAX_BYTES);
    long *word = shmem_malloc(sizeof(long));
    long *flag = shmem_malloc(sizeof(long));
    char *source = malloc(SIZE_MAX_BYTES);
    memset(source, 0x5a, SIZE_MAX_BYTES);
    *word = 0;
    *flag = 0;
    long base = atol(argv[1]);
    shmem_barrier_all();
    for (int a = 2; a < argc; a++) {
        long size = atol(argv[a]);
        if (size < 1 || size > SIZE_MAX_BYTES) {
            continue;
        }
        long n = iterations(base, size);
        if (me == 0) {
            for (long i = 0; i < warmup(n); i++) {
                shmem_putmem(target, source, (size_t)size, 1);
                shmem_quiet();
            }
            double t0 = now_ns();
            for (long i = 0; i < n; i++) {
                shmem_putmem(target, source, (size_t)size, 1);
                shmem_quiet();
            }
            report("put_quiet", size, (now_ns() - t0) / (double)n);
            for (long i = 0; i < warmup(n); i++) {
                shmem_putmem(target, source, (size_t)size, 1);
            }
            shmem_quiet();
            t0 = now_ns();
            for (long i = 0; i < n; i++) {
                shmem_putmem(target, source, (size_t)size, 1);
            }
            double put = (now_ns() - t0) / (double)n;
            shmem_quiet();
            report("put", size, put);
            for (long i = 0; i < warmup(n); i++) {
                shmem_getmem(source, target, (size_t)size, 1);
            }
            t0 = now_ns();
            for (long i = 0; i < n; i++) {
                shmem_getmem(source, target, (size_t)size, 1);
            }
            report("get", size, (now_ns() - t0) / (double)n);
            long bursts = n / BURST < 4 ? 4 : n / BURST;
            for (long b = 0; b < warmup(bursts); b++) {
                for (int i = 0; i < BURST; i++) {
                    shmem_putmem(target, source, (size_t)size, 1);
                }
                shmem_quiet();
            }
            t0 = now_ns();
            for (long b = 0; b < bursts; b++) {
                for (int i = 0; i < BURST; i++) {
                    shmem_putmem(target, source, (size_t)size, 1);
                }
                shmem_quiet();
            }
            report("bw64", size, (now_ns() - t0) / (double)(bursts * BURST));
        }
        shmem_barrier_all();
        /* Ping-pong: PE 0 sends round i, PE 1 answers with round i on PE 0's flag. */
        long rounds = n < 2000 ? n : 2000;
        long warm = warmup(rounds);
        shmem_barrier_all();
        double t0 = now_ns();
        for (long i = 1; i <= warm + rounds; i++) {
            long round = (long)a * 1000000 + i;
            if (i == warm + 1) {
                t0 = now_ns();
            }
            if (me == 0) {
                shmem_putmem(target, source, (size_t)size, 1);
                shmem_fence();
                shmem_atomic_set(flag, round, 1);
                shmem_long_wait_until(flag, SHMEM_CMP_EQ, round);
            } else {
                shmem_long_wait_until(flag, SHMEM_CMP_EQ, round);
                shmem_putmem(target, source, (size_t)size, 0);
                shmem_fence();
                shmem_atomic_set(flag, round, 0);
            }
        }
        if (me == 0) {
            report("pingpong", size, (now_ns() - t0) / (double)(2 * rounds));
        }
        shmem_barrier_all();
    }
    if (me == 0) {
        long n = iterations(base, 8);
        long sum = 0;
        for (long i = 0; i < warmup(n); i++) {
            sum += shmem_atomic_fetch_add(word, 1, 1);
        }
        double t0 = now_ns();
        for (long i = 0; i < n; i++) {
            sum += shmem_atomic_fetch_add(word, 1, 1);
        }
        report("fadd", 8, (now_ns() - t0) / (double)n);
        if (sum < 0) {
            report("impossible", 0, 0.0);
        }
        /* The check: PE 1's word counts every add. */
        long total = shmem_atomic_fetch(word, 1);
        if (total != warmup(n) + n) {
            printf("check failed: fetch-add total %ld, expected %ld\n", total, warmup(n) + n);
        }
    }
    shmem_barrier_all();
    if (me == 0) {
        printf("done\n");
        fflush(stdout);
    }
    shmem_barrier_all();
    /* Open MPI 4.1's oshmem crashes in shmem_finalize with this UCX; the results are out. */
    _exit(0);
}
