/* libpltt.so, the shared library of the PLT test (tests/symbols/test_symbols_plt.py):
 * functions the executable calls through its PLT, a variable it reads through
 * its GOT, and calls between the library's own exported functions, which go
 * through the library's PLT (they may be interposed). */
long pltt_counter = 1;

long pltt_add(long a, long b) { return a + b; }

long pltt_mul(long a, long b) { return a * b; }

void pltt_bump(void) { pltt_counter = pltt_add(pltt_counter, 1) & 7; }

long pltt_loop(long n)
{
	long s = 0;

	for (long i = 0; i < n; i++)
		s = pltt_mul(pltt_add(s, i), 3) & 0xff;
	return s;
}
