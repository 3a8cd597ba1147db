# Unmapped code interrupted asynchronously (FUP+TIP): --resync-on-error goes on at the interrupt,
# which is reported with its from/to IPs, and decodes the handler in mapped code.
# @nomap hidden hidden_end
# @at hidden_mid interrupt vector_32
# @ptxed --resync-on-error --event:ip
# @covers nomap resync-on-error nomap-fup-tip
_start:
	lea rax, [rip + hidden]
	jmp rax
vector_32:
	nop
	hlt
hidden:	nop
hidden_mid:
	nop
	nop
hidden_end:
