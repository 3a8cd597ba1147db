# A return (no return compression) whose TIP is missing: the decoder finds the PSB+ that follows
# instead ("trace stream does not match query"); without --resync-on-error it restarts at the PSB
# after that one.
# @retcomp off
# @after f_ret#1 fault-drop
# @at after_call#1 psb
# @at after_call#2 psb
# @covers bad_query bad_query-missing-tip
_start:
	mov ecx, 3
1:	call f
after_call:
	dec ecx
	jnz 1b
	hlt
f:	nop
f_ret:	ret
