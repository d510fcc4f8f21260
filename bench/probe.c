/*
 * Machine-speed probes for scripts (bench/fidelity.sh), as ptelab measures
 * them between its batches (crates/measure/src/probe.rs): prints "KERNEL MEMORY",
 * the median over 25 rounds of ns per getppid(2) (200 calls a round) and of
 * ns per dependent load through a random cycle of the cache lines of a
 * 64 MiB buffer (256 loads a round). Run it pinned on the CPU the measured
 * program uses, right before and after it (docs/statistics.md, "Machine
 * drift").
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define ROUNDS 25
#define CALLS 200
#define HOPS 256
#define CHASE_BYTES (64 << 20)

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static volatile uint64_t sink;

static double now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(void)
{
	double k[ROUNDS], m[ROUNDS];
	size_t lines = CHASE_BYTES / 64;
	uint64_t *next = malloc(CHASE_BYTES), *order = malloc(lines * sizeof(uint64_t));
	uint64_t x = 0x7074656c61620002ull, at = 0;
	for (size_t i = 0; i < lines; i++)
		order[i] = i;
	for (size_t i = lines - 1; i > 0; i--) { /* Sattolo: one cycle */
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		size_t j = x % i;
		uint64_t t = order[i];
		order[i] = order[j];
		order[j] = t;
	}
	for (size_t i = 0; i < lines; i++)
		next[order[i] * 8] = order[(i + 1) % lines] * 8;
	for (int r = 0; r < ROUNDS; r++) {
		double s = now_ns();
		for (int c = 0; c < CALLS; c++)
			syscall(SYS_getppid);
		k[r] = (now_ns() - s) / CALLS;
		s = now_ns();
		for (int h = 0; h < HOPS; h++)
			at = next[at];
		m[r] = (now_ns() - s) / HOPS;
	}
	qsort(k, ROUNDS, sizeof k[0], cmp);
	qsort(m, ROUNDS, sizeof m[0], cmp);
	sink = at; /* keeps the chase */
	printf("%.1f %.1f\n", k[ROUNDS / 2], m[ROUNDS / 2]);
	return 0;
}
