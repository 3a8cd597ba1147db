# An indirect jump into unmapped code without --resync-on-error: after the "no memory mapped"
# error nothing is decoded until the next PSB, whose FUP gives the IP in mapped code again.
# @nomap hidden hidden_end
# @at back#2 psb
# @covers nomap nomap-psb-restart
_start:
	lea rax, [rip + hidden]
	lea rbx, [rip + back]
	mov ecx, 3
	jmp rax
back:	dec ecx
	jnz 1f
	hlt
1:	jmp rax
hidden:	nop
	jmp rbx
hidden_end:
