/* Test program for ELF symbol rules (tests/symbols): functions that share an
 * address in every way perf 6.1 chooses between them.  Built with labels.S,
 * static and without libc, for the trace generator's emulator. */
volatile long ptx_iterations = 3;	/* the generator sets the round count */
volatile long sink;

/* non-weak over weak */
void strong_fn(void) { sink += 1; }
void weak_alias(void) __attribute__((weak, alias("strong_fn")));

/* fewer leading underscores */
void __under_fn(void) { sink += 2; }
void under_fn(void) __attribute__((alias("__under_fn")));

/* global over local */
static void __attribute__((noinline)) loc_fn(void) { sink += 3; }
void glob_alias(void) __attribute__((alias("loc_fn")));

/* the longer name */
void ab(void) { sink += 4; }
void abcdef(void) __attribute__((alias("ab")));

/* same length: the first in the symbol table */
void tie1(void) { sink += 5; }
void tie2(void) __attribute__((alias("tie1")));

/* both weak: the longer name */
void __attribute__((weak)) wk1(void) { sink += 6; }
void wk_longer_name(void) __attribute__((weak, alias("wk1")));

void asm_loop(long n);
long sized_asm(void);
void high_label(void);
void other_label(void);
void my_label(void);
void my_func(void);

int main_c(void)
{
	for (long i = 0; i < ptx_iterations; i++) {
		weak_alias();
		under_fn();
		loc_fn();
		glob_alias();
		abcdef();
		tie2();
		wk_longer_name();
		asm_loop(3);
		sink += sized_asm();
		high_label();
#ifndef TAIL
		other_label();
		my_label();
		my_func();
#endif
	}
	return 0;
}
