# Unmapped code leaves the traced region with an indirect jump (TIP.PGD with the target IP):
# --resync-on-error reports "[disabled]"; tracing comes back later with TIP.PGE.
# @nomap hidden hidden_end
# @after hidden_jmp disable
# @at back#2 enable
# @ptxed --resync-on-error
# @covers nomap resync-on-error nomap-tip_pgd
_start:
	lea rax, [rip + hidden]
	lea rbx, [rip + back]
	mov ecx, 2
	jmp rax
back:	dec ecx
	jz 1f
	jmp back
1:	nop
	hlt
hidden:	nop
hidden_jmp:
	jmp rbx
hidden_end:
