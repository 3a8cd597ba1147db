# Tracing is disabled inside an RTM transaction: an indirect call leaves the traced region (TIP.PGD
# with the target); the callee runs untraced and tracing is enabled again at the return address,
# still inside the transaction, which then commits.
# @covers tsx-begin tsx-commit tsx-tip_pgd tip_pgd tip_pge mode_tsx
# @perf
# @after dis disable
# @at back enable
_start:
	xbegin fallback
	lea rax, [rip + f]
dis:	call rax
back:	nop
	xend
	nop
	hlt
fallback:
	hlt
f:	nop
	ret
