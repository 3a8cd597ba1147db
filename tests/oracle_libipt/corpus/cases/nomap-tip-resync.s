# An indirect jump (TIP) into code missing from the decoder's image: "no memory mapped" at the
# TIP's target; with --resync-on-error decoding goes on at the target of the next TIP, which
# leads back into mapped code.
# @nomap hidden hidden_end
# @ptxed --resync-on-error
# @covers nomap resync-on-error nomap-tip
_start:
	lea rax, [rip + hidden]
	lea rbx, [rip + back]
	mov ecx, 2
	jmp rax
back:	dec ecx
	jnz 1f
	hlt
1:	jmp rax
hidden:	nop
	jmp rbx
hidden_end:
