# Unmapped code jumps directly to a PTWRITE (with FUP): the PTW+FUP is the next IP the trace gives;
# --resync-on-error goes on at the PTWRITE instruction and reports its payload.
# @nomap hidden hidden_end
# @ptw-fup
# @ptxed --resync-on-error
# @covers nomap resync-on-error nomap-ptw
_start:
	lea rax, [rip + hidden]
	mov rbx, 0x1234
	jmp rax
back:	ptwrite rbx
	nop
	hlt
hidden:	nop
	jmp back
hidden_end:
