/* Calls of every kind: direct and indirect calls, a jump table (dense
 * switch), recursion, tail calls and deep call chains (deeper than the
 * processor's 64-entry return-compression stack). */
#include "rt.h"

typedef long (*op_fn)(long, long);

__attribute__((noinline)) static long op_add(long a, long b) { return a + b; }
__attribute__((noinline)) static long op_sub(long a, long b) { return a - b; }
__attribute__((noinline)) static long op_xor(long a, long b) { return a ^ b; }
__attribute__((noinline)) static long op_mul(long a, long b) { return a * b; }

static op_fn ops[4] = { op_add, op_sub, op_xor, op_mul };

__attribute__((noinline)) static long dispatch(int sel, long x)
{
	switch (sel) {	/* dense: gcc emits a jump table */
	case 0: return x + 11;
	case 1: return x * 3;
	case 2: return x ^ 0x55;
	case 3: return x - 9;
	case 4: return x << 2;
	case 5: return x >> 1;
	case 6: return ~x;
	case 7: return x | 0x100;
	default: return 0;
	}
}

__attribute__((noinline)) static long fib(long n)
{
	return n < 2 ? n : fib(n - 1) + fib(n - 2);
}

/* Tail calls: with -foptimize-sibling-calls these are jumps. */
__attribute__((noinline)) static long tail_b(long n, long acc);
__attribute__((noinline)) static long tail_a(long n, long acc)
{
	if (n <= 0)
		return acc;
	return tail_b(n - 1, acc + n);
}
__attribute__((noinline)) static long tail_b(long n, long acc)
{
	if (n <= 0)
		return acc;
	return tail_a(n - 1, acc ^ n);
}

__attribute__((noinline)) static long chain(long depth, long v)
{
	if (depth == 0)
		return v;
	return chain(depth - 1, v + depth) + 1;	/* not a tail call */
}

/* A chain of distinct functions, each calling the next. */
#define LINK(n, next) \
	__attribute__((noinline)) static long link##n(long v) { return next(v * 3 + n) - 1; }
__attribute__((noinline)) static long link_end(long v) { return v ^ 0x5a; }
LINK(7, link_end) LINK(6, link7) LINK(5, link6) LINK(4, link5)
LINK(3, link4) LINK(2, link3) LINK(1, link2) LINK(0, link1)

int main(void)
{
	long total = 0;
	for (long r = 0; r < ptx_iterations; r++) {
		for (int i = 0; i < 16; i++) {
			total = ops[i & 3](total, i);
			total += dispatch(i % 9, total);
		}
		total += fib(10);
		total += tail_a(20, 0);
		total += chain(100, 1);	/* deeper than the 64-entry RET compression stack */
		total += link0(total & 0xff);
		put_num((u64)total & 0xffff);
	}
	return 0;
}
