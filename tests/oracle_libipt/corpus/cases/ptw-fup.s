# PTWRITE with FUP (FUPonPTW): payload and the PTWRITE's IP.
# @ptw-fup
# @ptxed --event:ip
# @covers ptwrite ptw-fup
# @perf
_start:
	mov rax, 0x1234
	ptwrite rax
	nop
	ptwrite rax
	hlt
