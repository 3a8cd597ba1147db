/* The executable of the PLT test: no libc; _start calls main_c, which calls
 * libpltt.so's functions through the PLT and reads its variable through the
 * GOT (-fPIC) or from its copy (a COPY relocation), then exits with a system
 * call.  -DNO_DATA: no variable of the library, so a non-PIE executable's
 * .dynsym defines nothing.  -DINIT: an _init of size 0 in .init (as crti.o's),
 * which perf 6.1's symbols__fixup_end stretches over .plt.  -DONE_CALL: one
 * function of the library called (one PLT entry). */
volatile long ptx_iterations = 3;	/* the generator sets the round count */
volatile long sink;
static long local_val = 5;
long *volatile local_ptr = &local_val;	/* a RELATIVE relocation in a PIE */

extern long pltt_counter;
long pltt_add(long a, long b);
long pltt_mul(long a, long b);
void pltt_bump(void);
long pltt_loop(long n);

__asm__(".text\n"
	".globl _start\n"
	".type _start, @function\n"
	"_start:\n"
	"	xor %ebp, %ebp\n"
	"	and $-16, %rsp\n"
#ifdef INIT
	"	call _init\n"
#endif
	"	call main_c\n"
	"	mov %eax, %edi\n"
	"	mov $60, %eax\n"
	"	syscall\n"
	"	hlt\n"
	".size _start, .-_start\n"
#ifdef INIT
	/* as crti.o's: a function without a size in .init, which precedes .plt */
	".section .init, \"ax\", @progbits\n"
	".globl _init\n"
	".type _init, @function\n"
	"_init:\n"
	"	push %rax\n"
	"	pop %rax\n"
	"	ret\n"
#endif
	".text\n");

/* -DDUPS=N (0..4): N functions with a weak alias each, so perf's symbols__fixup_duplicate
 * erases N nodes of its tree before the PLT's go in (the tree's shape decides between _init
 * and a PLT entry) */
#ifndef DUPS
#define DUPS 0
#endif
#define DUP(n) \
	void dup##n(void) { sink += n; } \
	void dup##n##_weak(void) __attribute__((weak, alias("dup" #n)));
#if DUPS > 0
DUP(1)
#endif
#if DUPS > 1
DUP(2)
#endif
#if DUPS > 2
DUP(3)
#endif
#if DUPS > 3
DUP(4)
#endif

int main_c(void)
{
	for (long i = 0; i < ptx_iterations; i++) {
#ifndef ONE_CALL
		sink += pltt_add(i, 2);
		sink += pltt_mul(i, 3);
		pltt_bump();
#endif
#ifndef NO_DATA
		sink += pltt_counter;
#endif
		sink += *local_ptr;
#if DUPS > 0
		dup1_weak();
#endif
#if DUPS > 1
		dup2_weak();
#endif
#if DUPS > 2
		dup3_weak();
#endif
#if DUPS > 3
		dup4_weak();
#endif
		sink += pltt_loop(2);
	}
	return 0;
}
