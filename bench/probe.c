/*
 * Kernel-speed probe for scripts (bench/fidelity.sh): ns per getppid(2),
 * the median of 25 rounds of 200 calls. Run it pinned on the CPU the
 * measured program uses, right before and after it: when the machine's
 * kernel-mode speed state changed in between (docs/statistics.md, "Machine
 * drift"), the two probes disagree.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define ROUNDS 25
#define CALLS 200

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(void)
{
	double r[ROUNDS];
	for (int i = 0; i < ROUNDS; i++) {
		struct timespec s, e;
		clock_gettime(CLOCK_MONOTONIC, &s);
		for (int k = 0; k < CALLS; k++)
			syscall(SYS_getppid);
		clock_gettime(CLOCK_MONOTONIC, &e);
		r[i] = ((e.tv_sec - s.tv_sec) * 1e9 + (e.tv_nsec - s.tv_nsec)) / CALLS;
	}
	qsort(r, ROUNDS, sizeof r[0], cmp);
	printf("%.1f\n", r[ROUNDS / 2]);
	return 0;
}
