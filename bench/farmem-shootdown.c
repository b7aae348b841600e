// What a TLB shootdown costs on this machine, without nam: why the pager keeps eviction on
// the faulting thread's own core in signal mode (docs/farmem.md, "Signal mode installs its
// prefetches itself" and the eviction-offload experiment).
//
//   gcc -O2 -o /tmp/shootdown bench/farmem-shootdown.c -lpthread && /tmp/shootdown
//
// Thread B (core 1) touches 16 pages and drops them with one madvise(MADV_DONTNEED), over
// and over; thread A (core 0) runs a loop over a 4 KiB buffer and counts its iterations.
// Phases of one second each: B dropping pages while A is not running (no other core runs
// the memory map: a local flush), then five pairs of B idle while A runs (A's rate
// undisturbed) and B dropping pages while A runs (every madvise must interrupt A's core to
// flush its TLB). Printed: B's madvise time alone and beside A, and A's time lost per flush.
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define PG 4096
#define PHASE_US 1e6
#define PAIRS 5

static atomic_int stop;

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void pin(int core) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(core, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

// Thread A: iterations per microsecond until `stop`.
static void *loop(void *result) {
    pin(0);
    static char buf[PG];
    long n = 0;
    double start = now_us();
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        for (int k = 0; k < 1000; k++) buf[(n + k) & (PG - 1)]++;
        n += 1000;
    }
    *(double *)result = n / (now_us() - start);
    return NULL;
}

// Thread B's work for one phase: returns the madvise calls made; `*us` their mean time.
static long drop_pages(char *pages, int drop, double *us) {
    long calls = 0;
    double in_madvise = 0, start = now_us();
    while (now_us() - start < PHASE_US) {
        if (!drop) {
            usleep(1000);
            continue;
        }
        for (int p = 0; p < 16; p++) pages[p * PG] = 1;
        double t = now_us();
        madvise(pages, 16 * PG, MADV_DONTNEED);
        in_madvise += now_us() - t;
        calls++;
    }
    *us = calls ? in_madvise / calls : 0;
    return calls;
}

// One phase with thread A running: A's rate, B's calls and their mean time.
static double with_loop(char *pages, int drop, long *calls, double *us) {
    double rate;
    pthread_t a;
    atomic_store(&stop, 0);
    pthread_create(&a, NULL, loop, &rate);
    *calls = drop_pages(pages, drop, us);
    atomic_store(&stop, 1);
    pthread_join(a, NULL);
    return rate;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v) {
    qsort(v, PAIRS, sizeof v[0], by_value);
    return v[PAIRS / 2];
}

int main(void) {
    pin(1);
    char *pages = mmap(NULL, 16 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    double alone_us, idle_us, busy_us[PAIRS], lost_us[PAIRS];
    long calls;
    drop_pages(pages, 1, &alone_us);
    // A's rate moves with the machine's other load: undisturbed and disturbed seconds taken
    // in pairs, and the median of the pairs printed.
    for (int i = 0; i < PAIRS; i++) {
        double undisturbed = with_loop(pages, 0, &calls, &idle_us);
        double disturbed = with_loop(pages, 1, &calls, &busy_us[i]);
        lost_us[i] = PHASE_US * (1 - disturbed / undisturbed) / calls;
    }
    printf("madvise of 16 pages, no other core running the map: %.2f us\n", alone_us);
    printf("madvise of 16 pages, another core running the map:  %.2f us (median of %d seconds)\n", median(busy_us), PAIRS);
    printf("time the other core lost per flush it was sent:      %.2f us (median of %d pairs of seconds)\n", median(lost_us), PAIRS);
    return 0;
}
