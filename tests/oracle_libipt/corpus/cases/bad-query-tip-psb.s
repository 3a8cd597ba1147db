# A TIP where the conditional branch expects a TNT bit, without --resync-on-error: nothing is
# decoded until the next PSB+.
# @after br#2 fault-tip
# @at loop#3 psb
# @covers bad_query bad_query-psb
_start:
	mov ecx, 5
loop:	dec ecx
br:	jnz loop
	nop
	hlt
