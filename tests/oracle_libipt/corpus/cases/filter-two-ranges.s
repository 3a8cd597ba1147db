# Two IP filter ranges (addr0, addr1): branches between the ranges stay traced; a trip through code
# outside both ranges disables (TIP.PGD) and enables (TIP.PGE) tracing again; one compressed return
# stays inside a range.
# @covers filtering tip_pgd tip_pge filter-ranges
# @filter filter a_first a_last
# @filter filter b_first b_last
_start:
	nop
	jmp a_first
a_first:
	call b_first
	lea rdx, [rip + gap]
	jmp rdx
a_back:	call a_fun
	hlt
a_fun:	ret
a_last = . - 1
gap:	nop
	jmp b_second
b_first:
	nop
	ret
b_second:
	jmp a_back
b_last = . - 1
