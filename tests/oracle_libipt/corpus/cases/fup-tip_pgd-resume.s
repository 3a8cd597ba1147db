# Asynchronous disables (FUP + TIP.PGD without IP) in a loop: the first is enabled again at the same
# instruction ([resumed]), the second only two iterations later ([enabled] elsewhere).
# @covers fup-tip_pgd tip_pge resumed enabled
# @perf
# @at body#2 disable
# @at body#2 enable
# @at body#3 disable
# @at tail#5 enable
_start:
	mov ecx, 6
loop:	nop
body:	dec ecx
tail:	jnz loop
	hlt
