/* Multi-threaded: the main thread starts three workers with a raw clone
 * (CLONE_VM|CLONE_THREAD); each worker runs its own loop and yields after
 * every round, the main thread waits for all of them. */
#include "rt.h"

#define NWORKERS 3
#define CLONE_THREAD_FLAGS 0x50f00L	/* VM|FS|FILES|SIGHAND|THREAD|SYSVSEM */

static char stacks[NWORKERS][8192] __attribute__((aligned(16)));
static volatile long done;
static volatile long results[NWORKERS];

static long spawn(void (*fn)(long), long arg, char *stack_top)
{
	long *sp = (long *)stack_top;
	long r;

	*--sp = arg;
	*--sp = (long)fn;
	__asm__ volatile ("syscall\n\t"
			  "test %%rax, %%rax\n\t"
			  "jnz 1f\n\t"
			  "pop %%rax\n\t"
			  "pop %%rdi\n\t"
			  "call *%%rax\n\t"
			  "mov $60, %%eax\n\t"
			  "xor %%edi, %%edi\n\t"
			  "syscall\n\t"
			  "hlt\n"
			  "1:"
			  : "=a"(r)
			  : "a"(56L), "D"(CLONE_THREAD_FLAGS), "S"(sp), "d"(0L)
			  : "rcx", "r11", "memory");
	return r;
}

__attribute__((noinline)) static long mix(long v, long k)
{
	for (int i = 0; i < 20; i++)
		v = (v & 1) ? v * 3 + k : v >> 1;
	return v;
}

static void worker(long id)
{
	long acc = id;
	for (long r = 0; r < ptx_iterations; r++) {
		for (int j = 0; j < 8; j++)
			acc += mix(acc + j, id + 1);
		sys_yield();
	}
	results[id] = acc;
	__atomic_fetch_add(&done, 1, __ATOMIC_SEQ_CST);
}

int main(void)
{
	for (long i = 0; i < NWORKERS; i++)
		spawn(worker, i, stacks[i] + sizeof(stacks[i]));
	while (done < NWORKERS)
		sys_yield();
	long total = 0;
	for (int i = 0; i < NWORKERS; i++)
		total += results[i];
	put_num((u64)total & 0xffff);
	return 0;
}
