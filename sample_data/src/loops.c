/* Loops and conditional branches: nested counted loops, a data-dependent
 * if/else chain and an early-exit search. */
#include "rt.h"

static int data[64];

__attribute__((noinline)) static u64 fill(int seed)
{
	u64 sum = 0;
	for (int i = 0; i < 64; i++) {
		data[i] = (seed * 1103515245 + i * 12345) & 1023;
		sum += data[i];
	}
	return sum;
}

__attribute__((noinline)) static u64 classify(void)
{
	u64 acc = 0;
	for (int i = 0; i < 64; i++) {
		int v = data[i];
		if (v < 256)
			acc += 1;
		else if (v < 512)
			acc += 3;
		else if (v & 1)
			acc ^= v;
		else
			acc -= 7;
	}
	return acc;
}

__attribute__((noinline)) static int find(int key)
{
	for (int i = 0; i < 64; i++)
		if (data[i] == key)
			return i;
	return -1;
}

int main(void)
{
	u64 total = 0;
	for (long r = 0; r < ptx_iterations; r++) {
		total += fill(7);
		for (int j = 0; j < 4; j++)
			for (int k = 0; k < 3; k++)
				total += classify() + j * k;
		total += find(data[40]);
		put_num(total & 0xffff);
	}
	return 0;
}
