# Unmapped code where tracing is disabled asynchronously (FUP+TIP.PGD, skipped by resync) and
# re-enabled in mapped code: --resync-on-error reports "[disabled]" then "[enabled]" (TIP.PGE).
# @nomap hidden hidden_end
# @at hidden_mid disable
# @at back enable
# @ptxed --resync-on-error
# @covers nomap resync-on-error nomap-tip_pge
_start:
	lea rax, [rip + hidden]
	lea rbx, [rip + back]
	jmp rax
back:	nop
	hlt
hidden:	nop
hidden_mid:
	nop
	jmp rbx
hidden_end:
