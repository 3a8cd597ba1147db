# Unmapped code jumps directly back to mapped code, where a transaction begins: the next IP the
# trace gives is the FUP after MODE.TSX, so --resync-on-error goes on with "[begin transaction]".
# @nomap hidden hidden_end
# @ptxed --resync-on-error
# @covers nomap resync-on-error nomap-mode_tsx tsx
_start:
	lea rax, [rip + hidden]
	jmp rax
back:	xbegin 1f
	nop
	xend
1:	nop
	hlt
hidden:	nop
	jmp back
hidden_end:
