# MWAIT while tracing is off by address filtering (FUP+TIP.PGD before it, TIP.PGE after the wake):
# ContextEn stays set, so MWAIT, PWRE, EXSTOP with IP and its FUP are still written; ptxed reports
# them (with the MWAIT IP under --event:ip) though no instruction is traced; then tracing resumes.
# @covers mwait pwre pwrx exstop tip_pgd tip_pge
# @ptxed --event:ip
# @at idle disable
# @at back enable
# @wake idle int last=5 deepest=5
	mov eax, 0x50
	mov ecx, 1
	nop
idle:
	mwait
back:
	add eax, 1
	hlt
