/* Symbol names perf demangles: C++ (a function, a template, a const member, a local static, a
 * function-local name), Rust (legacy and v0), OCaml, Java, and a C name with "__" that stays as it
 * is; each function gets its name from an assembler label. */
#include "rt.h"
#define FN(cname, label, k) \
	__attribute__((noinline)) long cname(long x) __asm__(label); \
	__attribute__((noinline)) long cname(long x) { return x * k + 1; }
FN(f1, "_ZN3foo3barEl", 3)
FN(f2, "_ZN3foo3bazIiEEvT_", 5)
FN(f3, "_ZN4core3fmt5write17h0123456789abcdefE", 7)
FN(f4, "camlStdlib__array__map_154", 9)
FN(f5, "camlStdlib__bytes__$2b$2b_2205", 11)
FN(f6, "my__func", 13)
FN(f7, "\"Ljava/lang/Object;bar(I)V\"", 15)
FN(f8, "_ZN7mycrate3foo17h1234567812345678E", 17)
FN(f9, "_RNvCs1234_4test3foo", 19)
FN(f10, "_ZZ4mainE5local", 21)
FN(f11, "_ZNK3Foo3getEv", 23)
FN(f12, "_ZL6staticv", 25)
int main(void)
{
	long t = 0;
	for (long r = 0; r < ptx_iterations; r++) {
		for (int i = 0; i < 20; i++)
			t += f1(t) + f2(i) + f3(i) + f4(i) + f5(i) + f6(i) + f7(i) + f8(i) + f9(i) + f10(i) + f11(i) + f12(i);
		put_num((u64)t & 0xffff);
	}
	return 0;
}
