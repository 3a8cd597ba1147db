/* Tiny freestanding runtime for the sample programs: raw Linux x86-64
 * syscalls and a _start, so the generator's emulator only has to provide
 * write, exit, sched_yield, clone, fork, execve and wait4. */
#ifndef PTX_RT_H
#define PTX_RT_H

typedef unsigned long u64;

static inline long sys3(long n, long a, long b, long c)
{
	long r;
	__asm__ volatile ("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c)
			  : "rcx", "r11", "memory");
	return r;
}

static inline long sys_write(const char *buf, long len) { return sys3(1, 1, (long)buf, len); }
static inline long sys_yield(void) { return sys3(24, 0, 0, 0); }
static inline __attribute__((noreturn)) void sys_exit(long code)
{
	for (;;)
		sys3(60, code, 0, 0);
}

static long str_len(const char *s)
{
	long n = 0;
	while (s[n])
		n++;
	return n;
}

static void put_str(const char *s) { sys_write(s, str_len(s)); }

/* Always 5 digits, so the branches taken do not depend on the value. */
static void put_num(u64 v)
{
	char buf[6];
	for (int i = 4; i >= 0; i--) {
		buf[i] = '0' + v % 10;
		v /= 10;
	}
	buf[5] = '\n';
	sys_write(buf, 6);
}

/* The generator patches this (symbol "ptx_iterations") to set how many
 * rounds main's loop runs; every round does the same work. */
volatile long ptx_iterations = 3;

int main(void);

__attribute__((used, noreturn)) void ptx_start_c(void)
{
	sys_exit(main());
}

__asm__(".globl _start\n"
	"_start:\n"
	"\txor %ebp, %ebp\n"
	"\tand $-16, %rsp\n"
	"\tcall ptx_start_c\n"
	"\thlt\n");

#endif
