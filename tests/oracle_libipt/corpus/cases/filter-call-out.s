# IP filtering (addr0 = the main code): calls to a function outside the range disable tracing
# (TIP.PGD with the call target) and its return re-enables it (TIP.PGE at the return site); an
# indirect jmp leaves the range and a direct jmp from outside comes back.
# @covers filtering tip_pgd tip_pge filter-call filter-jmp
# @filter filter _start main_last
_start:
	mov ecx, 3
loop:	call outside
	dec ecx
	jnz loop
	lea rax, [rip + out2]
	jmp rax
back2:	nop
	hlt
main_last = . - 1
outside:
	nop
	ret
out2:	nop
	jmp back2
