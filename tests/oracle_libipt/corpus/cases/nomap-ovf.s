# Unmapped code with a conditional branch (TNT), then an internal overflow: the packets of the
# next instructions are lost and OVF+FUP gives the IP in mapped code.  The error at the unmapped
# code reports the OVF (the packet after the TNT); --resync-on-error skips the TNT and goes on
# after "[overflow]".
# @nomap hidden hidden_end
# @at hidden_mid ovf 2
# @ptxed --resync-on-error
# @covers nomap resync-on-error nomap-ovf
_start:
	lea rax, [rip + hidden]
	lea rbx, [rip + back]
	jmp rax
back:	nop
	nop
	hlt
hidden:	xor edx, edx
	jz hidden_mid
hidden_mid:
	nop
	jmp rbx
hidden_end:
