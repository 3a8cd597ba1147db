# An RTM transaction that commits: MODE.TSX+FUP at XBEGIN and at XEND, speculative instructions.
# @covers tsx-begin tsx-commit mode_tsx
# @perf
_start:
	xbegin fallback
	nop
	call f
	xend
	nop
	hlt
fallback:
	hlt
f:	ret
