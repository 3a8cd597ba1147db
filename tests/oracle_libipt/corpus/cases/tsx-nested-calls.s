# Nested calls inside a committing RTM transaction: direct and indirect calls, a loop and compressed
# returns are all speculative ("?" lines, perf's "(x)" flag) until XEND commits; the same calls after
# the commit are not.
# @covers tsx-begin tsx-commit tsx-nested mode_tsx
# @perf
_start:
	xbegin fallback
	call f
	xend
	call f
	hlt
fallback:
	hlt
f:	mov edx, 2
1:	call g
	dec edx
	jnz 1b
	ret
g:	lea rax, [rip + h]
	call rax
	ret
h:	ret
