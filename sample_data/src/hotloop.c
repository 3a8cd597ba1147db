/* Hot loops: long straight-line loop bodies, the shape of compute kernels
 * (hashing, checksums, codecs): about 30 instructions per taken branch, so
 * one TNT bit stands for a whole iteration and a megabyte of trace for
 * hundreds of millions of instructions, as in real recordings of such code.
 * The raw-mode benchmark (bench/bench_matrix.py) decodes it against ptxed's
 * rate. */
#include "rt.h"

static u64 buf[256];

__attribute__((noinline)) static void fill(u64 seed)
{
	for (int i = 0; i < 256; i++) {
		seed = seed * 6364136223846793005UL + 1442695040888963407UL;
		buf[i] = seed ^ (seed >> 29);
	}
}

__attribute__((noinline)) static u64 mix(u64 seed)
{
	u64 a = seed, b = seed ^ 0x9e3779b97f4a7c15UL, c = 0x85ebca6bUL, d = 1;

	for (int i = 0; i < 4096; i++) {
		u64 x = buf[i & 255];

		a += x;  b ^= a;  c += b >> 3;  d ^= c << 7;
		a = (a << 13) | (a >> 51);  b += d;  c ^= a;  d += b;
		a ^= c >> 11;  b += a << 5;  c += d;  d ^= x;
		a += b ^ (c >> 17);  d = (d << 9) | (d >> 55);
	}
	return a ^ b ^ c ^ d;
}

int main(void)
{
	u64 total = 0;

	fill(11);
	for (long r = 0; r < ptx_iterations; r++) {
		for (int k = 0; k < 16; k++)
			total += mix(total + k);
		put_num(total & 0xffff);
	}
	return 0;
}
