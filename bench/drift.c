/*
 * Machine drift probe (docs/statistics.md, "Machine drift"): for SECONDS,
 * repeatedly time a user-space loop, getppid(2), a pointer chase through
 * 64 MiB (memory latency), mprotect toggles of 40 MiB, 4 MiB and 400 KiB
 * order-0 regions, and page faults, printing one line per round (~50 ms).
 * bench/drift.sh runs it pinned and summarises in 5 s windows.
 *
 * usage: drift SECONDS
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

static char *touched_region(size_t len)
{
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		perror("mmap");
		exit(1);
	}
	madvise(p, len, MADV_NOHUGEPAGE);
	for (size_t k = 0; k < len; k += 4096)
		p[k] = 1;
	return p;
}

static volatile uint64_t sink;

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s SECONDS\n", argv[0]);
		return 2;
	}
	double secs = atof(argv[1]);
	size_t huge = 40000 * 1024, big = 4000 * 1024, small = 400 * 1024;
	char *h = touched_region(huge), *a = touched_region(big), *b = touched_region(small);
	static uint64_t arr[512];
	/* One random cycle through 64 MiB, one 8-byte slot per cache line. */
	size_t lines = (64 << 20) / 64;
	uint64_t *chase = malloc(lines * 64), *order = malloc(lines * sizeof(uint64_t)), at = 0;
	for (size_t i = 0; i < lines; i++)
		order[i] = i;
	srand(1);
	for (size_t i = lines - 1; i > 0; i--) {
		size_t j = rand() % (i + 1), t = order[i];
		order[i] = order[j];
		order[j] = t;
	}
	for (size_t i = 0; i < lines; i++)
		chase[order[i] * 8] = order[(i + 1) % lines] * 8;
	double t0 = now_ns();
	printf("t compute_ns getppid_ns chase_ns mprotect_40m_ns mprotect_4m_ns mprotect_400k_ns fault_ns\n");
	while (now_ns() - t0 < secs * 1e9) {
		double s = now_ns();
		uint64_t x = 88172645463325252ull;
		for (int r = 0; r < 200000; r++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			arr[x & 511] += x;
		}
		sink = x;
		double compute = (now_ns() - s) / 200000;
		s = now_ns();
		for (int r = 0; r < 20000; r++)
			syscall(SYS_getppid);
		double getppid = (now_ns() - s) / 20000;
		s = now_ns();
		for (int r = 0; r < 20000; r++)
			at = chase[at];
		sink += at;
		double chase_ns = (now_ns() - s) / 20000;
		s = now_ns();
		for (int r = 0; r < 10; r++)
			mprotect(h, huge, (r & 1) ? PROT_READ | PROT_WRITE : PROT_NONE);
		double mp_huge = (now_ns() - s) / 10;
		s = now_ns();
		for (int r = 0; r < 60; r++)
			mprotect(a, big, (r & 1) ? PROT_READ | PROT_WRITE : PROT_NONE);
		double mp_big = (now_ns() - s) / 60;
		s = now_ns();
		for (int r = 0; r < 600; r++)
			mprotect(b, small, (r & 1) ? PROT_READ | PROT_WRITE : PROT_NONE);
		double mp_small = (now_ns() - s) / 600;
		s = now_ns();
		for (int r = 0; r < 20; r++) {
			madvise(b, small, MADV_DONTNEED);
			for (size_t k = 0; k < small; k += 4096)
				b[k] = 1;
		}
		double fault = (now_ns() - s) / 20 / (small / 4096);
		printf("%.2f %.3f %.1f %.1f %.0f %.0f %.0f %.0f\n", (now_ns() - t0) / 1e9, compute,
		       getppid, chase_ns, mp_huge, mp_big, mp_small, fault);
		fflush(stdout);
	}
	return 0;
}
