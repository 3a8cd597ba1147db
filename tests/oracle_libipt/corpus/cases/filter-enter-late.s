# IP filtering: the program starts outside the filter range (PSB+ without FUP, nothing traced),
# enters it by a direct call (TIP.PGE), leaves it by a call to and a ret from code outside (TIP.PGD
# with the target) and comes back by ret, call and direct jmp (TIP.PGE at the first IP inside).
# @covers filtering tip_pge tip_pgd filter-ret
# @filter filter f f_last
_start:
	mov ecx, 2
again:	call f
	dec ecx
	jnz again
	jmp f2
f:	add eax, 1
	call g
	ret
f2:	nop
	hlt
f_last = . - 1
g:	nop
	ret
