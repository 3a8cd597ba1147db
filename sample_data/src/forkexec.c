/* Fork and exec: the parent does some work, forks; the child execs the
 * "calls" program (a second ELF with its own MMAP2); the parent waits. */
#include "rt.h"

static inline long sys_fork(void) { return sys3(57, 0, 0, 0); }
static inline long sys_execve(const char *path, char *const argv[], char *const envp[])
{
	return sys3(59, (long)path, (long)argv, (long)envp);
}
static inline long sys_wait4(long pid)
{
	long r;
	register long r10 __asm__("r10") = 0;
	__asm__ volatile ("syscall" : "=a"(r) : "a"(61L), "D"(pid), "S"(0L), "d"(0L), "r"(r10)
			  : "rcx", "r11", "memory");
	return r;
}

__attribute__((noinline)) static long work(long n)
{
	long acc = 0;
	for (long i = 0; i < n; i++)
		acc += (i & 3) ? i : -i;
	return acc;
}

int main(void)
{
	long total = 0;
	for (long r = 0; r < ptx_iterations; r++)
		total += work(50);
	long pid = sys_fork();
	if (pid == 0) {
		static char *const argv[] = { "calls", 0 };
		static char *const envp[] = { 0 };
		sys_execve("calls", argv, envp);
		sys_exit(127);
	}
	sys_wait4(pid);
	total += work(20);
	put_num((u64)total & 0xffff);
	return 0;
}
