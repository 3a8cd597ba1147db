# RTM transactions around a call: the first commits, the second is aborted by an asynchronous event
# (a conflict or an interrupt) inside the called function: MODE.TSX abort, FUP with the IP of the
# instruction that did not complete, TIP to the fallback; the call never returns.
# @covers tsx-abort tsx-abort-async tsx-commit mode_tsx
# @perf
# @at inner#2 abort
_start:
	mov ecx, 2
again:	xbegin fallback
	call f
	xend
	dec ecx
	jnz again
	hlt
fallback:
	nop
	hlt
f:	nop
inner:	nop
	ret
