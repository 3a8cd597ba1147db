# As pwr-mwait-traced, with --event:ip (MWAIT and EXSTOP carry the MWAIT IP): C3.2 (hints 0x21, ext 1) woken by an interrupt, then C2 woken by a store to the
# monitored line (PWRX reports a shallower last and a deeper deepest state).  Each MWAIT writes MWAIT,
# PWRE, EXSTOP(IP) and a FUP with the MWAIT's IP; the wake writes PWRX.  MWAIT to C0 (0xf0) writes none.
# @covers mwait exstop event-ip
# @ptxed --event:ip
# @wake sleep2 st last=0 deepest=2
	mov eax, 0x21
	mov ecx, 1
sleep1:
	mwait
	mov eax, 0xf0
	xor ecx, ecx
	mwait
	mov eax, 0x10
	cmp eax, 0x10
	je sleep2
	nop
sleep2:
	mwait
	nop
	hlt
