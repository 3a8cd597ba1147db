# MWAIT outside the traced privilege level (ContextEn clear while tracing is off): no MWAIT packet,
# EXSTOP without IP (no FUP), PWRE and PWRX still written; ptxed reports exstop without an IP.
# @covers pwre pwrx exstop exstop-noip
# @ptxed --event:ip
# @pwr-ctx cpl
# @at kernel disable
# @at user enable
	mov eax, 0x20
	xor ecx, ecx
	jmp kernel
kernel:
	mwait
	nop
user:
	nop
	hlt
