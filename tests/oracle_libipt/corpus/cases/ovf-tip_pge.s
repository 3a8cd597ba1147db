# An overflow while tracing is off (after an asynchronous disable): OVF alone ([overflow]), then
# tracing resumes with TIP.PGE carrying a full IP ([enabled]), not with a FUP.
# @covers ovf-tip_pge ovf fup-tip_pgd tip_pge
# @at l2 disable
# @at l3 ovf-off
# @at l4 enable
_start:
	mov ecx, 1
l2:	add ecx, 1
	call f
l3:	add ecx, 2
l4:	add ecx, 3
	hlt
f:	ret
