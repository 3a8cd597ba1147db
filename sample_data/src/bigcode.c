/* A big code footprint: 3000 distinct functions (about 45 K instructions), each
 * run once a round through a table of function pointers, as a real program's
 * many functions, its libraries' and the kernel's make a decoder meet new code
 * all along (the other programs are a few hundred instructions). */
#include "rt.h"

#define F(k) \
	__attribute__((noinline)) static long f##k(long x) \
	{ \
		long s = k; \
		for (int i = 0; i < 3; i++) { \
			if ((x >> i) & 1) \
				s += x * (k * 7 + 3); \
			else \
				s ^= x + (k * 13 + 1); \
			if (s & (1 << (k % 5))) \
				s -= k; \
		} \
		return s; \
	}
#define F10(p) F(p##0) F(p##1) F(p##2) F(p##3) F(p##4) F(p##5) F(p##6) F(p##7) F(p##8) F(p##9)
#define F100(p) F10(p##0) F10(p##1) F10(p##2) F10(p##3) F10(p##4) F10(p##5) F10(p##6) F10(p##7) F10(p##8) F10(p##9)
#define F1000(p) F100(p##0) F100(p##1) F100(p##2) F100(p##3) F100(p##4) F100(p##5) F100(p##6) F100(p##7) F100(p##8) F100(p##9)

#define T(k) f##k,
#define T10(p) T(p##0) T(p##1) T(p##2) T(p##3) T(p##4) T(p##5) T(p##6) T(p##7) T(p##8) T(p##9)
#define T100(p) T10(p##0) T10(p##1) T10(p##2) T10(p##3) T10(p##4) T10(p##5) T10(p##6) T10(p##7) T10(p##8) T10(p##9)
#define T1000(p) T100(p##0) T100(p##1) T100(p##2) T100(p##3) T100(p##4) T100(p##5) T100(p##6) T100(p##7) T100(p##8) T100(p##9)

F1000(1) F1000(2) F1000(3)

/* A GNU IFUNC symbol on f1005's start (never called through: the table calls f1005), as glibc's
 * string functions are: perf takes IFUNC symbols as functions, and of two symbols with one start
 * keeps the global one. */
__asm__(".globl ifunc_alias\n\t.type ifunc_alias, @gnu_indirect_function\n\t.set ifunc_alias, f1005\n"
	"\t.size ifunc_alias, 16");

typedef long (*fn)(long);
static fn table[] = { T1000(1) T1000(2) T1000(3) };

int main(void)
{
	long total = 0;
	for (long r = 0; r < ptx_iterations; r++) {
		for (unsigned i = 0; i < sizeof(table) / sizeof(table[0]); i++)
			total += table[i](total + i);
		put_num((u64)total & 0xffff);
	}
	return 0;
}
