/* PTWRITE and power events: each round writes values into the trace with
 * PTWRITE and waits briefly with TPAUSE (a user-level C0.x wait, which
 * Intel PT reports with MWAIT/PWRE/EXSTOP/PWRX when power events are on). */
#include "rt.h"

static inline void ptwrite(u64 v)
{
	__asm__ volatile (".byte 0xf3, 0x48, 0x0f, 0xae, 0xe0" : : "a"(v));	/* ptwrite %rax */
}

static inline void tpause(void)
{
	/* tpause %ecx: C0.2 (ecx bit 0 = 0) until the TSC deadline edx:eax */
	__asm__ volatile (".byte 0x66, 0x0f, 0xae, 0xf1" : : "c"(0), "a"(-1), "d"(0) : "cc");
}

__attribute__((noinline)) static u64 step(u64 x)
{
	for (int i = 0; i < 8; i++)
		x = (x & 1) ? 3 * x + 1 : x / 2;
	return x;
}

int main(void)
{
	u64 x = 27, total = 0;
	for (long r = 0; r < ptx_iterations; r++) {
		for (int i = 0; i < 6; i++) {
			x = step(x) + i;
			ptwrite(x);
			total += x;
		}
		tpause();
		x = 27;
		put_num(total & 0xffff);
	}
	return 0;
}
