#!/usr/bin/env python3
"""How much could a better replacement policy save paged friends-of-friends? (issue 8)

A model, not a measurement of nam: it rebuilds the benchmark's FoF graph at --scale 0.5
(`nam-bench farmem --workload fof`: Chung-Lu, 100,000 users, 1,500,000 friendships, Zipf-like
weights 1/(i+10)^0.8, CSR `offsets` then `neighbors`, u32 each; Python's RNG, so the same
distribution, not the same graph), replays the 4 KiB pages its 1,000 queries touch, and counts
the misses of several policies with half of the pages resident (the 50% rows), and of
fetching several pages per fault. The second of
two passes is reported, as the benchmark reports rounds after a warm-up.

    python3 bench/farmem-fof-replacement.py
"""
import bisect
import collections
import heapq
import itertools
import random
import sys

USERS, FRIENDSHIPS, QUERIES = 100_000, 1_500_000, 1000
WORDS_PER_PAGE = 1024  # u32 words in 4 KiB


def graph():
    rng = random.Random(87)
    cumulative = list(itertools.accumulate(1.0 / ((i + 10) ** 0.8) for i in range(USERS)))
    total = cumulative[-1]
    adj = [[] for _ in range(USERS)]
    for _ in range(FRIENDSHIPS):
        a = min(bisect.bisect_left(cumulative, rng.random() * total), USERS - 1)
        b = rng.randrange(USERS)
        if a != b:
            adj[a].append(b)
            adj[b].append(a)
    return adj


def page_trace(adj):
    """Pages touched by the queries, in order, repeats of the same page merged."""
    offsets = [0] * (USERS + 1)
    at = 0
    for v in range(USERS):
        offsets[v] = at
        at += len(adj[v])
    offsets[USERS] = at
    first_neighbor = USERS + 1

    def touch(v, out):
        out.append(v // WORDS_PER_PAGE)
        out.append((v + 1) // WORDS_PER_PAGE)
        start, end = first_neighbor + offsets[v], first_neighbor + offsets[v + 1]
        if end > start:
            out.extend(range(start // WORDS_PER_PAGE, (end - 1) // WORDS_PER_PAGE + 1))

    trace = []
    rng = random.Random(1187)
    for _ in range(QUERIES):
        user = rng.randrange(USERS)
        touch(user, trace)
        for friend in adj[user]:
            touch(friend, trace)
    pages = (first_neighbor + at + WORDS_PER_PAGE - 1) // WORDS_PER_PAGE
    return [p for i, p in enumerate(trace) if i == 0 or trace[i - 1] != p], pages


def sampled(trace, budget, samples, score):
    """Evicts, of `samples` random resident pages other than the last one touched, the one
    with the lowest score(page, faults) (nam's pager: one sample, any score)."""
    resident, position, faults = [], {}, collections.Counter()
    rng, last = random.Random(1), None
    for _ in range(2):
        misses = 0
        for p in trace:
            if p not in position:
                misses += 1
                faults[p] += 1
                if len(resident) >= budget:
                    best = None
                    for _ in range(samples):
                        k = rng.randrange(len(resident))
                        if resident[k] != last and (best is None or score(resident[k], faults) < score(resident[best], faults)):
                            best = k
                    best = rng.randrange(len(resident)) if best is None else best
                    victim = resident[best]
                    resident[best] = resident[-1]
                    position[resident[best]] = best
                    resident.pop()
                    del position[victim]
                position[p] = len(resident)
                resident.append(p)
            last = p
    return misses


def lru(trace, budget):
    order = collections.OrderedDict()
    for _ in range(2):
        misses = 0
        for p in trace:
            if p in order:
                order.move_to_end(p)
            else:
                misses += 1
                if len(order) >= budget:
                    order.popitem(last=False)
                order[p] = True
    return misses


def lfu(trace, budget, keep_history):
    """Least frequently used; counts survive eviction when `keep_history`."""
    count, resident, heap = collections.Counter(), {}, []
    for _ in range(2):
        misses = 0
        for p in trace:
            count[p] += 1
            if p not in resident:
                misses += 1
                if len(resident) >= budget:
                    while True:
                        c, v = heapq.heappop(heap)
                        if resident.get(v) == c:
                            break
                    del resident[v]
                    if not keep_history:
                        count[v] = 0
            resident[p] = count[p]
            heapq.heappush(heap, (count[p], p))
    return misses


def belady(trace, budget):
    """The optimum: evict the page used furthest in the future."""
    both = trace * 2
    next_use, seen = [0] * len(both), {}
    for i in range(len(both) - 1, -1, -1):
        next_use[i] = seen.get(both[i], 1 << 60)
        seen[both[i]] = i
    resident, heap, misses = {}, [], 0
    for i, p in enumerate(both):
        if i == len(trace):
            misses = 0
        if p not in resident:
            misses += 1
            if len(resident) >= budget:
                while True:
                    nu, v = heapq.heappop(heap)
                    if resident.get(v) == -nu:
                        break
                del resident[v]
        resident[p] = next_use[i]
        heapq.heappush(heap, (-next_use[i], p))
    return misses


def in_blocks(trace, pages_per_fault):
    """The trace as a pager that fetches aligned blocks of `pages_per_fault` pages sees it."""
    blocks = [p // pages_per_fault for p in trace]
    return [b for i, b in enumerate(blocks) if i == 0 or blocks[i - 1] != b]


def main():
    trace, pages = page_trace(graph())
    budget = pages // 2
    print(f"{pages} pages, {len(trace)} page touches per pass, {budget} pages resident (50%)", file=sys.stderr)
    rows = [
        ("random except the last page (nam's pager)", sampled(trace, budget, 1, lambda p, f: 0)),
        ("LRU", lru(trace, budget)),
        ("fewest past faults of 2 random pages", sampled(trace, budget, 2, lambda p, f: f[p])),
        ("fewest past faults of 8 random pages", sampled(trace, budget, 8, lambda p, f: f[p])),
        ("LFU, counts of resident pages only", lfu(trace, budget, False)),
        ("LFU with every access ever counted", lfu(trace, budget, True)),
        ("Belady's optimum", belady(trace, budget)),
        ("random, each fault fetching 4 aligned pages", sampled(in_blocks(trace, 4), budget // 4, 1, lambda p, f: 0)),
        ("random, each fault fetching 16 aligned pages", sampled(in_blocks(trace, 16), budget // 16, 1, lambda p, f: 0)),
    ]
    base = rows[0][1]
    print("| policy | misses (faults) per pass | vs random |")
    print("|---|---:|---:|")
    for name, misses in rows:
        print(f"| {name} | {misses} | {misses / base:.2f}x |")


if __name__ == "__main__":
    main()
