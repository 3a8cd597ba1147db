# Asynchronous disable and enable with --event:ip: ptxed prints where tracing stopped ("at") and
# where it is enabled again ("ip").
# @covers fup-tip_pgd tip_pge event-ip
# @ptxed --event:ip
# @at m2 disable
# @at m4 enable
_start:
	mov eax, 1
m2:	add eax, eax
	call f
m4:	add eax, 3
	hlt
f:	ret
